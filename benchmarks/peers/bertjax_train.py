"""bertjax's side of the time-to-quality benchmark: `bertjax-train`'s own training function on a
gin configuration, under a wall-clock budget (benchmarks/time_to_quality.py runs this in its
own process, as it runs transformers' scripts).

It parses the gin files and bindings as `bertjax-train` does and calls the CLI's `train`; the
benchmark adds only a budget around it, without changing a step. `train.checkpoint_every` must
be 1: the run then offers a checkpoint after every step, and this script saves only at the
evenly spaced points of the budget (the state is waited for first, so pending steps stay on the
clock; the save itself, made synchronous, is taken off it, as on the peer's side). At the budget
it sends itself SIGTERM, which `bertjax-train` answers by saving and stopping after the next
step. Every point goes to OUT/points.json, with where the time went.
"""

import time

START = time.perf_counter()  # the clock starts before any import, as on the peer's side

import argparse  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import signal  # noqa: E402
from typing import Any  # noqa: E402

import hf_budget  # noqa: E402 - beside this file: the same clock and points.json


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="a new directory: the workdir and points.json")
    p.add_argument("--budget_s", type=float, required=True)
    p.add_argument("--checkpoints", type=int, default=5)
    p.add_argument("--tokens_per_step", type=int, required=True)
    p.add_argument("--gin_file", action="append", default=[])
    p.add_argument("--gin_binding", action="append", default=[])
    return p.parse_args()


class BudgetedSaves:
    """Replaces Checkpointer.save for this process: saves at the budget's points only."""

    def __init__(self, save: Any, clock: hf_budget.WallClock, budget_s: float, checkpoints: int):
        self.original, self.clock = save, clock
        self.budget_s, self.checkpoints = budget_s, checkpoints
        self.points: list[dict[str, Any]] = []
        self.next_point, self.signalled = 1, False
        self.first_step_s: float | None = None
        self.last: tuple[int, float] = (0, 0.0)

    def __call__(self, checkpointer: Any, step: int, state: Any, data_position: dict,
                 force: bool = False) -> bool:
        import jax  # noqa: PLC0415 - imported by bertjax already

        wall_s = self.clock.now()
        self.first_step_s = self.first_step_s or wall_s
        self.last = (step, wall_s)
        due = wall_s >= self.budget_s * self.next_point / self.checkpoints
        if not (force or due) or any(p["step"] == step for p in self.points):
            self._stop_at_budget(wall_s)
            return False
        jax.block_until_ready(state)  # the steps before it stay on the clock
        wall_s = self.clock.now()
        self.last = (step, wall_s)
        while self.next_point <= self.checkpoints and \
                wall_s >= self.budget_s * self.next_point / self.checkpoints:
            self.next_point += 1
        begin = time.perf_counter()
        saved = self.original(checkpointer, step, state, data_position, force=True)
        checkpointer.wait()
        seconds = time.perf_counter() - begin
        self.clock.saving += seconds
        path = pathlib.Path(str(checkpointer.directory)) / str(step)
        self.points.append({"step": step, "wall_s": wall_s, "save_s": seconds, "path": str(path)})
        self._stop_at_budget(wall_s)
        return saved

    def _stop_at_budget(self, wall_s: float) -> None:
        if wall_s >= self.budget_s and not self.signalled:
            self.signalled = True
            os.kill(os.getpid(), signal.SIGTERM)  # bertjax-train saves and stops


def timed_prepare(prepare: Any, clock: hf_budget.WallClock) -> Any:
    """A source's prepare (reading and tokenizing the corpus) that notes when it ended."""

    def wrapped(self: Any, workdir: Any) -> None:
        prepare(self, workdir)
        clock.data_s = clock.now()

    return wrapped


def main() -> None:
    args = parse_args()
    from bertjax.training import host_memory  # noqa: PLC0415

    host_memory.keep_freed_memory()  # as bertjax-train does before JAX starts
    import bertjax.configurables  # noqa: F401, PLC0415 - every import on bertjax's clock
    from bertjax.cli import gin_utils  # noqa: PLC0415
    from bertjax.cli import train as train_cli  # noqa: PLC0415
    from bertjax.data import source  # noqa: PLC0415
    from bertjax.data.bert import source as bert_source  # noqa: PLC0415
    from bertjax.training import checkpoint  # noqa: PLC0415

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    clock = hf_budget.WallClock(START)
    saves = BudgetedSaves(checkpoint.Checkpointer.save, clock, args.budget_s, args.checkpoints)
    checkpoint.Checkpointer.save = lambda self, *a, **k: saves(self, *a, **k)
    for cls in (source.Source, bert_source.BertPretrainingSource):
        cls.prepare = timed_prepare(cls.prepare, clock)
    gin_utils.parse(args.gin_file, args.gin_binding)
    result, _ = train_cli.train(out / "workdir", show_progress=False)
    step, wall_s = saves.last
    hf_budget.write_points(out, saves.points, saves.first_step_s, saves.last,
                           args.tokens_per_step,
                           stopped="budget" if wall_s >= args.budget_s else "num_steps",
                           clock=clock)
    print(f"bertjax_train: {result.step} steps in {wall_s:.1f} s (stopped: "
          f"{result.stopped or 'schedule end'})")


if __name__ == "__main__":
    main()
