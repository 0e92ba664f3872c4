"""Run an ablation sweep, one workdir per point, then a report of all of them (bertjax-report).

A grid of gin bindings (the cartesian product), each point a bertjax-train run:

    python scripts/sweep.py --gin_file=configs/experiments/bert_tiny_cpu.gin \\
        --root=workdir/nsp_sweep --sweep="NSP=True,False" \\
        --sweep="bert_pretraining_source.whole_word_masking=True,False" [--dry_run]

or a paper's ablation declared in scripts/sweep_presets.py, each point a pretraining run and a
fine-tuning run whose --init is that pretraining workdir:

    python scripts/sweep.py --preset=bert_table5 --root=workdir/table5 [--dry_run]

Grid points run in `<root>/<name>=<value>,...`; preset points pretrain in
`<root>/pretrain/<point>` (`base` for the preset's own experiment; points with the same
pretraining share one run) and fine-tune in `<root>/finetune/<point>`. Runs go one after
another; re-running the sweep resumes every point from its own checkpoints. --dry_run prints the
commands only. The report lands in `<root>/report/` (report.md, report.csv, curves.png).
Arguments sweep.py does not know go to every bertjax-train command (values are gin literals).
"""

import argparse
import itertools
import pathlib
import shlex
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from sweep_presets import PRESETS, Preset  # noqa: E402

AGNEWS = "../shared/data/agnews"  # relative to the repository: the README's downstream task


def parse_axis(text: str) -> tuple[str, list[str]]:
    """ "NAME=v1,v2" -> ("NAME", ["v1", "v2"])."""
    name, sep, values = text.partition("=")
    if not sep or not name or not values:
        raise SystemExit(f"sweep.py: error: --sweep {text!r} is not NAME=VALUE1,VALUE2,...")
    return name.strip(), [v.strip() for v in values.split(",")]


def tool(module: str) -> list[str]:
    """The command line start of a bertjax CLI, run with this Python."""
    return [sys.executable, "-m", f"bertjax.cli.{module}"]


def commands(
    gin_files: list[str], root: str, axes: list[tuple[str, list[str]]], extra: list[str]
) -> list[list[str]]:
    """One bertjax-train command line per point of the grid."""
    names = [name for name, _ in axes]
    runs = []
    for point in itertools.product(*(values for _, values in axes)):
        label = ",".join(f"{n.split('.')[-1]}={v}" for n, v in zip(names, point, strict=True))
        cmd = [*tool("train"), f"--workdir={root}/{label}"]
        cmd += [f"--gin_file={f}" for f in gin_files]
        cmd += [f"--gin.{n}={v}" for n, v in zip(names, point, strict=True)] + extra
        runs.append(cmd)
    return runs


def preset_commands(preset: Preset, root: str, train: str, dev: str, extra: list[str]
                    ) -> tuple[list[list[str]], list[str]]:
    """(commands in order, the fine-tuning workdirs to report) of a declared sweep: per point
    its pretraining (once per distinct set of arguments) and its fine-tuning from it."""
    runs, pretrained, finetuned = [], {}, []
    for point in preset.points:
        args = (f"--gin_file={point.experiment or preset.experiment}", *preset.pretrain,
                *point.pretrain, *extra)
        if args not in pretrained:  # the first point with these arguments names the run
            own = point.experiment or point.pretrain
            pretrained[args] = f"{root}/pretrain/{point.name if own else 'base'}"
            runs.append([*tool("train"), f"--workdir={pretrained[args]}", *args])
        workdir = f"{root}/finetune/{point.name}"
        runs.append([*tool("finetune"), f"--workdir={workdir}", f"--init={pretrained[args]}",
                     f"--train={train}", f"--eval={dev}", f"--gin_file={preset.recipe}",
                     *preset.finetune, *point.finetune])
        finetuned.append(workdir)
    return runs, finetuned


def report_command(root: str, workdirs: list[str]) -> list[str]:
    """bertjax-report over the sweep's workdirs into <root>/report."""
    return [*tool("report"), *workdirs, f"--out={root}/report"]


def parse_args() -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), help="a declared ablation")
    parser.add_argument("--gin_file", action="append", default=[], help="grid: experiment file")
    parser.add_argument("--root", required=True, help="directory holding one workdir per point")
    parser.add_argument("--sweep", action="append", default=[], help="grid: NAME=V1,V2,...")
    parser.add_argument("--train", default=f"{AGNEWS}/train.tsv", help="preset: task train file")
    parser.add_argument("--eval", default=f"{AGNEWS}/test.tsv", help="preset: task dev file")
    parser.add_argument("--dry_run", action="store_true", help="print the commands only")
    parser.add_argument("--noreport", action="store_true", help="skip bertjax-report at the end")
    args, extra = parser.parse_known_args()
    if bool(args.preset) == bool(args.gin_file or args.sweep):
        parser.error("give either --preset=NAME or --gin_file with --sweep axes")
    return args, extra


def main() -> None:
    args, extra = parse_args()
    if args.preset:
        runs, workdirs = preset_commands(PRESETS[args.preset], args.root, args.train,
                                         args.eval, extra)
    else:
        runs = commands(args.gin_file, args.root, [parse_axis(a) for a in args.sweep], extra)
        workdirs = [cmd[len(tool("train"))].split("=", 1)[1] for cmd in runs]
    if not args.noreport:
        runs.append(report_command(args.root, workdirs))
    failed = 0
    for cmd in runs:
        print(shlex.join(cmd), flush=True)
        if not args.dry_run:
            failed += subprocess.run(cmd).returncode != 0
    if failed:
        raise SystemExit(f"sweep.py: error: {failed} of {len(runs)} commands failed")


if __name__ == "__main__":
    main()
