"""Dev-set evaluation of a fine-tuning run: predict in fixed-size batches, decode, score with
the papers' metrics (bertjax.metrics), one prediction row per dev example."""

from typing import Any

import jax
import numpy as np

from bertjax import metrics
from bertjax.finetune.setup import Arrays, TaskSetup
from bertjax.training.evaluation import EvalResult, Evaluator, jit_inference


def predict_batched(predict: Any, params: Any, inputs: Arrays, batch_size: int) -> np.ndarray:
    """`predict` over all rows of `inputs`, `batch_size` at a time (the last batch padded, so
    one compiled shape serves every batch)."""
    n = len(next(iter(inputs.values())))
    outputs = []
    for start in range(0, n, batch_size):
        chunk = {k: v[start:start + batch_size] for k, v in inputs.items()}
        rows = len(next(iter(chunk.values())))
        if rows < batch_size:
            chunk = {k: np.concatenate([v, np.zeros((batch_size - rows, *v.shape[1:]), v.dtype)])
                     for k, v in chunk.items()}
        outputs.append(np.asarray(jax.device_get(predict(params, chunk)))[:rows])
    return np.concatenate(outputs)


def make_evaluator(setup: TaskSetup, task: str, every: int, batch_size: int) -> Evaluator:
    """An Evaluator for the training loop; its main metric is the task's (metrics.main_metric)."""
    predict = jit_inference(setup.predict)

    def evaluate(state: Any) -> EvalResult:
        outputs = predict_batched(predict, state.params, setup.eval, batch_size)
        predictions, extra = setup.decode(outputs)
        if task == "qa":
            golds = dict(zip(setup.ids, setup.golds, strict=True))
            scores = metrics.compute(task, golds, dict(zip(setup.ids, predictions, strict=True)))
        else:
            scores = metrics.compute(task, setup.golds, predictions, **setup.metric_options)
        rows = [{"id": i, "prediction": p, "gold": g}
                for i, p, g in zip(setup.ids, predictions, setup.golds, strict=True)]
        if setup.report is not None:
            extra = {**extra, **setup.report(jax.device_get(state.params))}
        return EvalResult({k: float(v) for k, v in scores.items()}, rows, extra)

    return Evaluator(evaluate, metrics.main_metric(task), every)
