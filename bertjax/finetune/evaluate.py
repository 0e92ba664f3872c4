"""Dev-set evaluation of a fine-tuning run: predict in fixed-size batches, decode, score with
the papers' metrics (bertjax.metrics), one prediction row per dev example."""

from typing import Any

import jax
import numpy as np

from bertjax import metrics
from bertjax.data.length_buckets import LengthBuckets, row_lengths
from bertjax.finetune.setup import Arrays, TaskSetup
from bertjax.training.evaluation import EvalResult, Evaluator, jit_inference


def predict_batched(predict: Any, params: Any, inputs: Arrays, batch_size: int,
                    buckets: LengthBuckets | None = None, token_outputs: bool = False
                    ) -> np.ndarray:
    """`predict` over all rows of `inputs`, `batch_size` at a time (the last batch padded, so
    one compiled shape serves every batch). With `buckets`, rows are taken shortest first and
    each batch is cut to its length bucket, and `token_outputs` pads the outputs' token axis
    (axis 1) back to `buckets.max_length`. Outputs come back in the rows' order."""
    n = len(next(iter(inputs.values())))
    order = np.arange(n)
    if buckets is not None:
        lengths = row_lengths(inputs["input_mask"])
        order = np.argsort(lengths, kind="stable")
    outputs = []
    for start in range(0, n, batch_size):
        rows = order[start:start + batch_size]
        chunk = {k: v[rows] for k, v in inputs.items()}
        if len(rows) < batch_size:
            chunk = {k: np.concatenate([v, np.zeros((batch_size - len(rows), *v.shape[1:]),
                                                    v.dtype)]) for k, v in chunk.items()}
        if buckets is not None:
            chunk = buckets.cut(chunk, buckets.bucket(lengths[rows].max()))
        out = np.asarray(jax.device_get(predict(params, chunk)))[:len(rows)]
        if buckets is not None and token_outputs and out.shape[1] < buckets.max_length:
            pad = [(0, 0)] * out.ndim
            pad[1] = (0, buckets.max_length - out.shape[1])
            out = np.pad(out, pad)
        outputs.append(out)
    result = np.concatenate(outputs)
    restored = np.empty_like(result)
    restored[order] = result
    return restored


def make_evaluator(setup: TaskSetup, task: str, every: int, batch_size: int) -> Evaluator:
    """An Evaluator for the training loop; its main metric is the task's (metrics.main_metric)."""
    predict = jit_inference(setup.predict)

    def evaluate(state: Any) -> EvalResult:
        outputs = predict_batched(predict, state.params, setup.eval, batch_size, setup.buckets,
                                  setup.token_outputs)
        predictions, extra = setup.decode(outputs)
        files = extra.pop("files", {})  # the task's official output files (finetune/official.py)
        if task == "qa":
            golds = dict(zip(setup.ids, setup.golds, strict=True))
            scores = metrics.compute(task, golds, dict(zip(setup.ids, predictions, strict=True)))
        else:
            scores = metrics.compute(task, setup.golds, predictions, **setup.metric_options)
        rows = [{"id": i, "prediction": p, "gold": g}
                for i, p, g in zip(setup.ids, predictions, setup.golds, strict=True)]
        if setup.report is not None:
            extra = {**extra, **setup.report(jax.device_get(state.params))}
        return EvalResult({k: float(v) for k, v in scores.items()}, rows, extra, files)

    return Evaluator(evaluate, metrics.main_metric(task), every)
