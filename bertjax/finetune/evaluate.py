"""Dev-set evaluation of a fine-tuning run: predict in fixed-size batches (cut to length
buckets, or packed as the run trains), decode, score with the task type's metrics
(bertjax.metrics), one prediction row per dev example."""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from bertjax.data.packing import pack_lengths, pack_tokens
from bertjax.finetune.examples import Example
from bertjax.finetune.length_buckets import LengthBuckets, row_lengths
from bertjax.finetune.packed import INPUT_TOKENS
from bertjax.finetune.setup import TaskSetup
from bertjax.training.evaluation import EvalResult, Evaluator
from bertjax.training.state import TrainState
from bertjax.typing import Params

Arrays = dict[str, np.ndarray]
Predict = Callable[[Params, Arrays], jax.Array]  # (params, inputs) -> the head's outputs


def predict_batched(predict: Predict, params: Params, inputs: Arrays, batch_size: int,
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


def predict_packed(predict: Predict, params: Params, inputs: Arrays, batch_size: int,
                   packed_sequences: int) -> np.ndarray:
    """`predict` over the rows of `inputs` packed up to `packed_sequences` examples a row, as a
    packed run trains (bertjax/finetune/packed.py): each example attends only to itself and
    its prediction is read at its own [CLS], so the outputs are those of the unpacked rows
    with the padding's work left out. A batch holds the rows of about `batch_size` examples
    (one compiled shape); outputs come back one per example, in the rows' order."""
    mask = inputs["input_mask"]
    n, length = mask.shape
    members = pack_lengths(mask.astype(bool).sum(1), length, packed_sequences)
    rows = max(1, round(batch_size * len(members) / n))
    tokens = {k: inputs[k] for k in INPUT_TOKENS}
    result = None
    for start in range(0, len(members), rows):
        chunk = members[start:start + rows]
        unused = np.full((rows - len(chunk), packed_sequences), -1, chunk.dtype)
        batch, _ = pack_tokens(tokens, mask, np.concatenate([chunk, unused]))
        out = np.asarray(jax.device_get(predict(params, batch)))[:len(chunk)]  # [R, K, ...]
        if result is None:
            result = np.zeros((n, *out.shape[2:]), out.dtype)
        used = chunk >= 0
        result[chunk[used]] = out[used]
    return result


def predict_arrays(setup: TaskSetup, params: Params, inputs: Arrays, batch_size: int
                   ) -> np.ndarray:
    """The head's outputs for encoded inputs, batched as the run's evaluation batches them:
    packed where the run trains on packed rows, else cut to length buckets where it may."""
    predict = setup.jitted_predict
    if setup.packing:
        return predict_packed(predict, params, inputs, batch_size, setup.packing)
    return predict_batched(predict, params, inputs, batch_size, setup.buckets,
                           setup.token_outputs)


def scored_predictions(setup: TaskSetup, params: Params, examples: Sequence[Example],
                       batch_size: int) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """The task's metrics of `params` on labelled examples (the run's dev set or another,
    e.g. MNLI's mismatched one), encoded and decoded as the dev set is, and the prediction
    rows ({"id", "prediction", "gold"}) they were computed from."""
    inputs, data = setup.encode_unlabelled(examples)
    data = dataclasses.replace(data, golds=setup.task.golds(examples))
    predictions, _ = setup.task.decode(predict_arrays(setup, params, inputs, batch_size), data)
    rows = [{"id": i, "prediction": p, "gold": g}
            for i, p, g in zip(data.ids, predictions, data.golds, strict=True)]
    return setup.task.measure(predictions, data), rows


def make_evaluator(setup: TaskSetup, every: int, batch_size: int) -> Evaluator:
    """An Evaluator for the training loop; its main metric is the task type's."""

    def evaluate(state: TrainState) -> EvalResult:
        outputs = predict_arrays(setup, state.params, setup.eval, batch_size)
        predictions, extra = setup.task.decode(outputs, setup.data)
        files = extra.pop("files", {})  # the task's official output files
        scores = setup.task.measure(predictions, setup.data)
        rows = [{"id": i, "prediction": p, "gold": g}
                for i, p, g in zip(setup.data.ids, predictions, setup.data.golds, strict=True)]
        extra = {**extra, **setup.report(state.params)}
        return EvalResult({k: float(v) for k, v in scores.items()}, rows, extra, files)

    return Evaluator(evaluate, setup.main_metric, every)
