"""ELMo, GPT and BERT on one corpus and budget, against their random-init twins (docs/families.md).

From one command: BERT (masked LM and left-to-right), GPT and ELMo pretrained on the same
corpus for the same budget; a learning curve on AG News over labelled-set sizes, each model
fine-tuned and feature-based against its random-init twin on the same stratified draws, with
its learning rate chosen on each draw's held-out tenth, beside bag-of-words baselines;
paired differences with 95% intervals; a polysemy view; tables and plots.

    python scripts/families.py --root=workdir/families              # the full study
    python scripts/families.py --root=workdir/families_quick --quick  # one seed, few steps
    python scripts/families.py --root=workdir/families --report_only  # tables from the runs
    python scripts/families.py --root=R --study=configs/studies/families_large.gin  # larger
    python scripts/families.py --study=configs/studies/families_large.gin --compile

The study's sizes and budgets are a gin file (--study, default configs/studies/
families_cpu.gin; --gin.families_study.NAME=VALUE changes one). Re-running resumes: finished
runs are skipped. Ctrl-C or SIGTERM stops the study at once (exit 130): the runs under way save
a checkpoint where they are, and no other starts. --dry_run prints the plan. --compile runs
bertjax-compile on each model for the study's target (families_study.compile_mesh) and exits 1
when one does not fit.
--publish=DIR copies the report's tables and plots there (docs/families/). The shared data
is read from --data (default ../shared/data, from the repository root).
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from families_study import config as config_lib  # noqa: E402
from families_study import data as data_lib  # noqa: E402
from families_study import interrupts  # noqa: E402
from families_study.plan import make_plan  # noqa: E402

QUICK = "configs/studies/families_quick.gin"
DEFAULT = "configs/studies/families_cpu.gin"
PROGRAM = "families.py"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="directory of the study's runs")
    parser.add_argument("--study", default=None, help=f"sizes and budgets (default {DEFAULT})")
    parser.add_argument("--quick", action="store_true", help=f"the quick variant ({QUICK})")
    parser.add_argument("--gin", action="append", default=[], metavar="NAME=VALUE",
                        help="a gin binding on top of the study file (repeatable)")
    parser.add_argument("--data", default=None, help="shared data directory (default: the "
                        "study's families_study.shared_data)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="pretraining runs at a time (each a bertjax-train process)")
    parser.add_argument("--dry_run", action="store_true", help="print the plan only")
    parser.add_argument("--compile", action="store_true",
                        help="compile each model's train step for the study's compile target "
                             "(bertjax-compile, families_study.compile_mesh) instead of running")
    parser.add_argument("--report_only", action="store_true",
                        help="recompute the tables and plots from the runs' files")
    parser.add_argument("--publish", default=None, help="copy report tables and plots here")
    args = parser.parse_args(argv)
    if args.quick and args.study:
        parser.error("give --quick or --study, not both")
    if not args.root and not (args.dry_run or args.compile):
        parser.error("--root is required (the directory of the study's runs)")
    return args


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def describe(plan: object, study: object) -> str:
    """The plan in a few lines: pretraining runs, then the curve's rows and their runs."""
    from families_study.curve import fine_tuning_steps

    fine_tuned = [p for p in plan.points if p.approach == "finetuned"]
    runs = sum(len(study.learning_rates[p.family]) for p in fine_tuned)
    lines = [f"{len(plan.pretraining)} pretraining runs, {len(plan.points)} learning-curve "
             f"points ({runs} fine-tuning runs), {len(plan.baselines)} bag-of-words points; "
             f"labels {', '.join(map(str, plan.labels))}, {plan.draws} paired draws each"]
    lines += [f"  pretrain {p.workdir}: {p.family}, {p.steps} steps" for p in plan.pretraining]
    for model, approach, labels in plan.rows():
        family = study.family(model)
        what = "probe (L2 chosen on the held-out tenth)"
        if approach == "finetuned":
            batch = study.finetune.get(family, {}).get("batch_size", 32)
            steps = fine_tuning_steps(labels - max(4, round(labels / 10)), batch,
                                      study.min_steps, study.min_epochs)
            rates = ", ".join(f"{r:g}" for r in study.learning_rates[family])
            what = f"fine-tuned, about {steps} steps, rate chosen from {rates}"
        lines.append(f"  {model} {approach} at {labels} labels: pretrained and random x "
                     f"{plan.draws} draws, {what}")
    lines.append(f"  bag-of-words: {', '.join(study.baselines)} at every size and draw")
    return "\n".join(lines)


def publish(root: pathlib.Path, target: pathlib.Path) -> None:
    """Copy report/*.md, *.csv, *.png into `target` (the tables' and plots' published place)."""
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted((root / "report").iterdir()):
        if path.suffix in (".md", ".csv", ".png") and path.is_file():
            shutil.copy2(path, target / path.name)


def check_root(given: str, root: pathlib.Path, plan: object, report_only: bool) -> str | None:
    """Why --root cannot be used, in one line, or None: it is (or lies under) a file; with
    --report_only, it lacks pretraining runs of the study, which every table reads (a curve
    row whose points are missing is only left out of the table), checked before anything
    is written under it."""
    found = next((p for p in (root, *root.parents) if p.exists()), root)
    if not found.is_dir():
        where = "is a file" if found == root else f"lies under the file {found}"
        return (f"--root={given} {where}: pass a directory (a new one, or a study's to resume "
                "or report it)")
    if not report_only:
        return None
    runs = [r.workdir for r in plan.pretraining]
    missing = [run for run in runs if not (root / run).is_dir()]
    if missing:
        lacks = (f"holds none of the study's {len(runs)} pretraining runs"
                 if len(missing) == len(runs) else
                 f"lacks {len(missing)} of the study's {len(runs)} pretraining runs (first: "
                 f"{missing[0]})")
        return f"--report_only: {root} {lacks}: run the study without --report_only to make them"
    return None


def prepare_process() -> None:
    """This process as a bertjax tool's (bertjax.cli.process): TensorFlow's start-up lines
    hidden, JAX on the CPU of a host without an accelerator (no TPU probe and its errors),
    and Python warnings in absl's form at WARNING, as the tools show them (not "WARNING:root:")."""
    from absl import flags
    from absl import logging as absl_logging

    from bertjax.cli.process import prepare_tool_process

    prepare_tool_process()
    flags.FLAGS.mark_as_parsed()  # argparse reads this script's flags; absl has none to read
    absl_logging.use_absl_handler()
    absl_logging.set_verbosity(absl_logging.WARNING)


def run(argv: list[str] | None = None) -> int:
    """`main` in a process set up as a tool's, stopped at once by Ctrl-C or SIGTERM (exit 130,
    one line; scripts/families_study/interrupts.py)."""
    prepare_process()
    with interrupts.watch():
        try:
            return main(argv)
        except KeyboardInterrupt as err:  # interrupts.StudyInterrupted, or a lost one's flag
            why = interrupts.received() or str(err) or "SIGINT"
            print(f"{PROGRAM}: interrupted ({why}): the runs under way saved where they "
                  "stopped; rerun the same command to resume", file=sys.stderr, flush=True)
            return 130


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    study_file = QUICK if args.quick else (args.study or DEFAULT)
    try:
        study = config_lib.load_study(study_file, args.gin)
        plan = make_plan(study)
    except (config_lib.StudyError, ValueError) as err:
        print(f"{PROGRAM}: error: {err}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(describe(plan, study))
        return 0
    if args.compile:
        from families_study.execute import compile_plan

        try:
            return 0 if compile_plan(plan, study, _log) else 1
        except ValueError as err:
            print(f"{PROGRAM}: error: {err}", file=sys.stderr)
            return 2
    root = pathlib.Path(args.root).resolve()
    refused = check_root(args.root, root, plan, args.report_only)
    if refused:
        print(f"{PROGRAM}: error: {refused}", file=sys.stderr)
        return 2
    shared = pathlib.Path(args.data or study.shared_data)
    shared = shared if shared.is_absolute() else (config_lib.REPO / shared).resolve()
    start = time.perf_counter()
    try:
        data = data_lib.prepare(shared, root, study.train_rows, study.eval_rows)
        if not args.report_only:
            from families_study.execute import execute

            execute(plan, study, root, data, _log, args.jobs)
        from families_study.tables import write_report

        texts = write_report(plan, root)
    except (data_lib.DataError, RuntimeError, FileNotFoundError, ValueError) as err:
        # ValueError: a run the tables read that is not complete (bertjax's RunError)
        print(f"{PROGRAM}: error: {err}", file=sys.stderr)
        return 2
    print("\n\n".join(texts))
    if args.publish:
        publish(root, pathlib.Path(args.publish))
    _log(f"study done in {time.perf_counter() - start:.0f} s; report in {root / 'report'}")
    return 0


if __name__ == "__main__":
    sys.exit(run())
