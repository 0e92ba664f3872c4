"""Steps per second of a two-process training run on one machine (loopback, gloo collectives):
what the loop's synchronisation between hosts costs a multi-host run. With --baseline=DIR (a
checkout of another commit, e.g. `git worktree add /tmp/base 034bc92`) the two trees run
alternately, --rounds times each, and the ratio is this tree's steps/s over the baseline's.

    python benchmarks/multihost_loop.py --baseline=/tmp/base --rounds=2 --steps=300

Each run is `bertjax-train --coordinator_address=... --num_processes=2` (two processes, one CPU
device each) on configs/experiments/bert_tiny_cpu.gin: BERT-tiny, batch 16 x 32, vocabulary 512,
checkpoints only at the end. Its steps/s comes from metrics.jsonl: each log row's interval is
its token slots over its tokens_per_second (time from one log step to the next), and the first
interval, which holds the compile, is left out. Printed: one line per run, then the ratio.
"""

import argparse
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
BATCH, SEQ = 16, 32


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="", help="another checkout to run alternately")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each tree")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--log_every", type=int, default=10)
    parser.add_argument("--corpus", default=str(REPO.parent / "shared/data/bert-sample/"
                                                "sample_text.txt"))
    return parser.parse_args(argv)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def train_command(args: argparse.Namespace, workdir: pathlib.Path, address: str,
                  process: int) -> list[str]:
    return [sys.executable, "-m", "bertjax.cli.train",
            "--gin_file=configs/experiments/bert_tiny_cpu.gin", f"--workdir={workdir}",
            "--noprogress", f"--gin.NUM_STEPS={args.steps}", f"--gin.BATCH_SIZE={BATCH}",
            "--gin.VOCAB_SIZE=512", f"--gin.train.seq_phases=((1.0, {SEQ}),)",
            f"--gin.bert_config.max_position_embeddings={SEQ}",
            f"--gin.train.log_every={args.log_every}",
            f"--gin.train.checkpoint_every={args.steps}",
            f"--gin.bert_pretraining_source.corpus='{args.corpus}'",
            f"--coordinator_address={address}", "--num_processes=2", f"--process_id={process}"]


def steps_per_second(workdir: pathlib.Path) -> float:
    """Steps over seconds from the second log row on (the first holds the compile)."""
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    steps = seconds = 0.0
    for before, row in zip(rows[:-1], rows[1:], strict=True):
        done = row["step"] - before["step"]
        steps += done
        seconds += BATCH * SEQ * done / row["tokens_per_second"]
    return steps / seconds


def run_once(args: argparse.Namespace, tree: pathlib.Path) -> tuple[float, float]:
    """(steps/s, wall seconds) of one two-process run of the code in `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree), "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    with tempfile.TemporaryDirectory(prefix="bertjax-multihost-") as root:
        workdir, address = pathlib.Path(root) / "run", f"127.0.0.1:{free_port()}"
        start = time.perf_counter()
        processes = [subprocess.Popen(train_command(args, workdir, address, i), cwd=tree,
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True) for i in range(2)]
        outputs = [p.communicate() for p in processes]
        wall = time.perf_counter() - start
        for process, (_, err) in zip(processes, outputs, strict=True):
            if process.returncode:
                sys.exit(f"{tree}: a process failed:\n{err[-3000:]}")
        return steps_per_second(workdir), wall


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    trees = {"this tree": REPO}
    if args.baseline:
        trees["baseline"] = pathlib.Path(args.baseline).resolve()
    results: dict[str, list[float]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        for name, tree in (reversed(trees.items()) if round_ % 2 == 0 else trees.items()):
            rate, wall = run_once(args, tree)
            results[name].append(rate)
            load = os.getloadavg()[0]
            print(f"{name}: {rate:.2f} steps/s (run {wall:.1f} s, load {load:.2f})", flush=True)
    for name, rates in results.items():
        print(f"{name}: mean {statistics.fmean(rates):.2f} steps/s over {len(rates)} runs")
    if args.baseline:
        ratio = statistics.fmean(results["this tree"]) / statistics.fmean(results["baseline"])
        print(f"this tree over the baseline: {ratio:.2f}x")


if __name__ == "__main__":
    main()
