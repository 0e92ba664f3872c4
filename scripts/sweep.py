"""Run an ablation sweep: the cartesian product of gin bindings, one workdir per point.

    python scripts/sweep.py --gin_file=configs/experiments/bert_tiny_cpu.gin \\
        --root=workdir/nsp_sweep --sweep="NSP=True,False" \\
        --sweep="bert_pretraining_source.whole_word_masking=True,False" [--dry_run]

Each point runs `bertjax-train` with its bindings in `<root>/<name>=<value>,...`; re-running
the sweep resumes every point from its own checkpoints. Values are gin literals.
"""

import argparse
import itertools
import shlex
import subprocess
import sys


def parse_axis(text: str) -> tuple[str, list[str]]:
    """ "NAME=v1,v2" -> ("NAME", ["v1", "v2"])."""
    name, sep, values = text.partition("=")
    if not sep or not name or not values:
        raise SystemExit(f"sweep.py: error: --sweep {text!r} is not NAME=VALUE1,VALUE2,...")
    return name.strip(), [v.strip() for v in values.split(",")]


def commands(
    gin_files: list[str], root: str, axes: list[tuple[str, list[str]]], extra: list[str]
) -> list[list[str]]:
    """One bertjax-train command line per point of the sweep."""
    names = [name for name, _ in axes]
    runs = []
    for point in itertools.product(*(values for _, values in axes)):
        label = ",".join(f"{n.split('.')[-1]}={v}" for n, v in zip(names, point, strict=True))
        cmd = [sys.executable, "-m", "bertjax.cli.train", f"--workdir={root}/{label}"]
        cmd += [f"--gin_file={f}" for f in gin_files]
        cmd += [f"--gin.{n}={v}" for n, v in zip(names, point, strict=True)] + extra
        runs.append(cmd)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gin_file", action="append", required=True)
    parser.add_argument("--root", required=True, help="directory holding one workdir per point")
    parser.add_argument("--sweep", action="append", default=[], help="NAME=V1,V2,...")
    parser.add_argument("--dry_run", action="store_true", help="print the commands only")
    args, extra = parser.parse_known_args()
    runs = commands(args.gin_file, args.root, [parse_axis(a) for a in args.sweep], extra)
    failed = 0
    for cmd in runs:
        print(shlex.join(cmd), flush=True)
        if not args.dry_run:
            failed += subprocess.run(cmd).returncode != 0
    if failed:
        raise SystemExit(f"sweep.py: error: {failed} of {len(runs)} runs failed")


if __name__ == "__main__":
    main()
