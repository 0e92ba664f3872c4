"""Evaluation during a run: every N steps and at the end, keep the best checkpoint.

The loop calls `Evaluator.evaluate(state)`, which returns the dev metrics (the task's main
metric first, higher is better) and one prediction row per dev example. `BestKeeper` writes

    WORKDIR/eval_results.json   {"step": last evaluated step, "best": {"step": .., metric: ..},
                                 "final": {metric: ..}, ...extra (e.g. ELMo's mix weights)}
    WORKDIR/predictions.jsonl   the best checkpoint's predictions, one {"id", "prediction",
                                "gold"} line per dev example
    WORKDIR/best/               the best checkpoint's parameters (orbax)
    WORKDIR/NAME                any further files of the best evaluation (EvalResult.files,
                                e.g. SQuAD's predictions.json for the official scripts)

all written atomically, so an interrupted run leaves the previous best intact; a resumed run
reads eval_results.json back and keeps improving on the same best.
"""

import dataclasses
import json
import math
import os
from collections.abc import Callable
from typing import Any

import jax
import orbax.checkpoint as ocp

from bertjax.files import absolute, as_path, atomic_file, write_text
from bertjax.training.state import TrainState
from bertjax.typing import Params

RESULTS, PREDICTIONS, BEST = "eval_results.json", "predictions.jsonl", "best"

# XLA:CPU's YNNPACK fusions make a forward-only BERT much slower on the CPU hosts measured
# (MiniLM, 64 x 128: 3.1 s -> 1.9 s without them, as fast as torch's 2.2-2.5 s); they do not
# change a training step's time. Passed per program, so training programs keep XLA's defaults.
CPU_INFERENCE_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


def jit_inference(fn: Callable[..., Any]) -> jax.stages.Wrapped:
    """`jax.jit` for a forward-only program: on a CPU backend, without XLA's YNNPACK fusions
    (unless XLA_FLAGS already says how to fuse them)."""
    fast_cpu = (jax.default_backend() == "cpu"
                and "ynn_fusion_type" not in os.environ.get("XLA_FLAGS", ""))
    return jax.jit(fn, compiler_options=CPU_INFERENCE_OPTIONS if fast_cpu else None)


@dataclasses.dataclass
class EvalResult:
    """Dev metrics (main one first), prediction rows, extras for eval_results.json, and files
    (name: text) written into the workdir beside predictions.jsonl when this is the best."""

    metrics: dict[str, float]
    predictions: list[dict[str, Any]]
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    files: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Evaluator:
    """How and when a run is evaluated; `main_metric` picks the best checkpoint."""

    evaluate: Callable[[TrainState], EvalResult]
    main_metric: str
    every: int = 500


class BestKeeper:
    """Tracks the best evaluation of a run in its workdir (process 0 writes)."""

    def __init__(self, workdir: str | os.PathLike, main_metric: str):
        self.workdir, self.main_metric = as_path(workdir), main_metric
        path = self.workdir / RESULTS
        self.results = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

    @property
    def best(self) -> float | None:
        return self.results.get("best", {}).get(self.main_metric)

    def improves(self, value: float) -> bool:
        """Whether a main metric of `value` beats the best so far. An undefined score (NaN:
        the Pearson or MCC of constant predictions) is kept only while there is no best and
        never stays best once a number is measured: NaN compares false with everything, so
        keeping it would freeze the selection for the rest of the run."""
        best = self.best
        if best is None:
            return True
        if math.isnan(value):
            return False
        return math.isnan(best) or value > best

    def record(self, step: int, result: EvalResult, params: Params) -> bool:
        """Note an evaluation at `step`; keep params and predictions if it is the best."""
        improved = self.improves(result.metrics[self.main_metric])
        if improved:
            self._save_params(params)  # every process: orbax writes sharded arrays together
        if jax.process_index() != 0:
            return improved
        if improved:
            with atomic_file(self.workdir / PREDICTIONS) as f:
                f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in
                             result.predictions)
            for name, text in result.files.items():
                write_text(self.workdir / name, text)
            self.results["best"] = {"step": step, **result.metrics}
        self.results.update(result.extra, step=step, final=dict(result.metrics))
        write_text(self.workdir / RESULTS, json.dumps(self.results, indent=2) + "\n")
        return improved

    def _save_params(self, params: Params) -> None:
        """Write the new best beside the old one, then swap: never a moment without a best."""
        best, new, old = (absolute(self.workdir) / BEST / name for name in
                          ("params", "params.new", "params.old"))
        with ocp.StandardCheckpointer() as checkpointer:
            checkpointer.save(new, params, force=True)
        if jax.process_index() != 0:
            return
        if best.exists():
            best.rename(old)
        new.rename(best)
        old.rmtree(missing_ok=True)
