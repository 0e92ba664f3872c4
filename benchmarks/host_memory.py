"""A CPU train step with glibc's malloc keeping freed memory, against malloc as it comes.

bertjax's tools set glibc's malloc, before JAX starts, to keep the memory XLA:CPU frees
(training/host_memory.py: one arena, no blocks mapped on their own, no trimming) on hosts
without an accelerator. This measures what that is worth: bertjax's own GPT train step
(build_trainer, gpt_pretraining, AdamW; GPT-2 tiny at 32 x 128 tokens, vocabulary 4,096,
dropout 0.1 as in time_to_quality.py's GPT rows) in fresh processes, each made one way:

    keep      BERTJAX_HOST_MALLOC=keep      (what bertjax-train does on a CPU host)
    default   BERTJAX_HOST_MALLOC=default   (glibc's malloc untouched)

Each process compiles, warms up 3 steps, then times `--steps` steps (the median) and counts
the minor page faults and kernel time per step. The two kinds alternate over `--rounds`
rounds (the order flips each round) so a shared host's drift falls on both; the ratio is the
median of the rounds' default / keep step times.

    XLA_FLAGS= python benchmarks/host_memory.py            # GPT-2 tiny, 3 rounds
    XLA_FLAGS= python benchmarks/host_memory.py --quick    # tiny sizes, a smoke test
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]

CHILD = """
import json, resource, statistics, sys, time
from bertjax.training import host_memory
kept = host_memory.keep_freed_memory()
import jax, numpy as np
from bertjax.models.gpt import gpt_config
from bertjax.objectives.lm import gpt_pretraining
from bertjax.training.loop import build_trainer
from bertjax.training.mesh import make_mesh
from bertjax.training.optim import make_optimizer
size, vocab, batch, seq, steps = json.loads(sys.argv[1])
config = gpt_config(size, vocab_size=vocab, max_position_embeddings=seq)
trainer = build_trainer(gpt_pretraining(config), make_optimizer(learning_rate=1e-3),
                        make_mesh(devices=jax.devices()[:1]), batch, seq)
ids = np.random.default_rng(0).integers(0, vocab, (batch, seq + 1)).astype(np.int32)
device_batch = trainer.device_batch({"input_ids": ids[:, :-1], "target_ids": ids[:, 1:],
                                     "loss_weights": np.ones((batch, seq), np.float32)})
state = trainer.init()
for _ in range(3):
    state, metrics = trainer.step(state, device_batch)
jax.block_until_ready(metrics)
before, times = resource.getrusage(resource.RUSAGE_SELF), []
for _ in range(steps):
    start = time.perf_counter()
    state, metrics = trainer.step(state, device_batch)
    jax.block_until_ready(metrics)
    times.append(time.perf_counter() - start)
after = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"kept": kept, "step_s": statistics.median(times),
                  "faults": (after.ru_minflt - before.ru_minflt) / steps,
                  "kernel_s": (after.ru_stime - before.ru_stime) / steps,
                  "user_s": (after.ru_utime - before.ru_utime) / steps}))
"""


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="gpt2_tiny", help="gpt_config.size")
    p.add_argument("--vocab_size", type=int, default=4096)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=20, help="timed steps per process")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    p.add_argument("--json", default="", help="also write the rows here")
    args = p.parse_args()
    if args.quick:
        args.batch, args.seq, args.vocab_size, args.steps, args.rounds = 4, 32, 512, 3, 1
    return args


def measure(kind: str, args: argparse.Namespace) -> dict:
    """One fresh process's step with BERTJAX_HOST_MALLOC=`kind`."""
    env = {**os.environ, "BERTJAX_HOST_MALLOC": kind, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    shape = json.dumps([args.size, args.vocab_size, args.batch, args.seq, args.steps])
    result = subprocess.run([sys.executable, "-c", CHILD, shape], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"host_memory: the {kind} process failed:\n{result.stderr[-3000:]}")
    row = json.loads(result.stdout.strip().splitlines()[-1])
    if row["kept"] != (kind == "keep"):
        raise SystemExit(f"host_memory: the {kind} process did not set malloc as asked")
    return row


def main() -> None:
    args = parse_args()
    rounds = []
    for index in range(args.rounds):
        order = ("default", "keep") if index % 2 == 0 else ("keep", "default")
        rows = {kind: measure(kind, args) for kind in order}
        rounds.append(rows)
        print(f"round {index + 1}: " + ", ".join(
            f"{kind} {1000 * rows[kind]['step_s']:.1f} ms" for kind in ("default", "keep")),
            flush=True)
    print(f"\n{args.size}, batch {args.batch} x {args.seq}, vocabulary {args.vocab_size}, "
          f"{args.steps} steps a process, {args.rounds} round(s), {os.cpu_count()} CPUs")
    print("| malloc | step (median of rounds) | minor faults / step | kernel ms / step | "
          "user ms / step |")
    print("|---|---|---|---|---|")
    for kind in ("default", "keep"):
        rows = [r[kind] for r in rounds]
        med = {k: statistics.median(r[k] for r in rows)
               for k in ("step_s", "faults", "kernel_s", "user_s")}
        print(f"| {kind} | {1000 * med['step_s']:.1f} ms | {med['faults']:,.0f} | "
              f"{1000 * med['kernel_s']:.0f} | {1000 * med['user_s']:.0f} |")
    ratio = statistics.median(r["default"]["step_s"] / r["keep"]["step_s"] for r in rounds)
    print(f"ratio host_memory keep/default step speed: {ratio:.2f}x")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rounds, indent=1))


if __name__ == "__main__":
    main()
