"""What a fine-tuning head predicts per example, the loss that trains it and how its
predictions are read, shared by every family: a task type names one of these, a family's head
produces it.

    output        head outputs          targets in the batch                   task loss
    CLASSES       logits [B, C]         label int32 [B]                        cross-entropy
    SCORE         score [B] (or [B, 1]) label float32 [B]                      squared error
    CHOICE        scores [B, K]         label int32 [B] (the right choice)     cross-entropy
    WORD_CLASSES  logits [B, L, C]      labels int32 [B, L], label_weights     cross-entropy over
                                        float32 [B, L] (1 on each word's       the weighted tokens
                                        position, 0 elsewhere)
    SPANS         logits [B, L, 2]      start_position, end_position int32 [B] mean of the start
                  (start, end)                                                 and end losses

Each output also fixes what a task's examples mean to it: the value each training example
teaches (`values`: a class index, a score, a choice index, tag ids, the answers), what a
prediction is compared with (`golds`), and how the head's outputs decode into predictions
(`decode`: class names, floats, choice indices, tags per word, answer texts). A task type with
one of these outputs writes none of them.

Losses and their metrics are computed in float32 whatever the compute dtype. Packed training
rows (bertjax/finetune/packed.py) give CLASSES and SCORE one prediction per packed example,
[B, K, ...], with targets [B, K] and `sequence_weights` [B, K] (0 in unused slots).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import optax

from bertjax.finetune import qa
from bertjax.finetune.examples import (
    ChoiceExample,
    Example,
    QaExample,
    TaggedSentence,
    TextExample,
)
from bertjax.finetune.qa import QaWindow
from bertjax.objectives.objective import Loss, Mean, Metrics, SumsFn

Array = jax.Array
Arrays = dict[str, np.ndarray]
Batch = dict[str, Array]
# What decoding needs of an encoding besides its arrays: per example, each word's token
# position (-1: cut off) for word outputs; the windows for extractive QA; else None.
Layout = list[list[int]] | list[QaWindow] | None
OUTSIDE = "O"  # the tag predicted for a word the encoding cut off


class Settings(Protocol):
    """What decoding and measuring read of a run's recipe (a bertjax.finetune.recipe.Recipe,
    not imported here: recipe.py imports the heads, which import this module)."""

    @property
    def max_answer_length(self) -> int: ...

    @property
    def main_metric(self) -> str | None: ...

    @property
    def positive_label(self) -> str | None: ...


@dataclasses.dataclass(frozen=True)
class EvalData:
    """What decoding and measuring need besides the head's outputs: the examples, their ids
    and golds, the label vocabulary, the encoding's layout (word positions, QA windows; see
    bertjax.finetune.adapter.Encoded) and the recipe (decoding settings)."""

    examples: Sequence[Example]
    golds: list | None  # None for unlabelled examples (a test split)
    labels: list[str] | None
    layout: Layout
    recipe: Settings
    # label i is the data's class i (TFDS ids, finetune.labels, labels 0..k-1), not a
    # position in sorted names: what "class 1" of a binary task means (GLUE's F1)
    numbered: bool = False

    @property
    def ids(self) -> list[str]:
        return [ex.id for ex in self.examples]


def _xent(logits: Array, labels: Array, weights: Array | None = None) -> tuple[Mean, Mean]:
    """Weighted cross-entropy and accuracy as Means, in float32."""
    logits = logits.astype(jnp.float32)
    xent = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    return Mean.of(xent, weights), Mean.of(logits.argmax(-1) == labels, weights)


def example_weights(batch: Batch) -> Array:
    """The weight of each example's label: 1, or packed rows' `sequence_weights` [B, K] (0 in
    unused slots)."""
    weights = batch.get("sequence_weights")
    return jnp.ones(batch["label"].shape, jnp.float32) if weights is None else weights


def classes_loss(logits: Array, batch: Batch) -> Metrics:
    """Cross-entropy and accuracy of logits [B, C] (or choice scores [B, K]) against `label`;
    of packed rows' logits [B, K, C] over the weighted slots."""
    loss, accuracy = _xent(logits, batch["label"], example_weights(batch))
    return {"task_loss": loss, "accuracy": accuracy}


def score_loss(scores: Array, batch: Batch) -> Metrics:
    """Squared error of scores [B] (or [B, 1]; packed: [B, K] or [B, K, 1]) against the float
    `label`, over the weighted slots of packed rows."""
    labels = batch["label"].astype(jnp.float32)
    squared = (scores.reshape(labels.shape).astype(jnp.float32) - labels) ** 2
    loss = Mean.of(squared, example_weights(batch))
    return {"task_loss": loss, "mse": loss}


def word_classes_loss(logits: Array, batch: Batch) -> Metrics:
    """Cross-entropy and accuracy of token logits [B, L, C] over the weighted positions."""
    loss, accuracy = _xent(logits, batch["labels"], batch["label_weights"])
    return {"task_loss": loss, "accuracy": accuracy}


def span_loss(logits: Array, batch: Batch) -> Metrics:
    """Mean over the examples of the start and end cross-entropies' mean, of span logits
    [B, L, 2]."""
    start_loss, start_acc = _xent(logits[..., 0], batch["start_position"])
    end_loss, end_acc = _xent(logits[..., 1], batch["end_position"])
    loss = Mean(0.5 * (start_loss.total + end_loss.total), start_loss.weight)
    return {"task_loss": loss, "start_accuracy": start_acc, "end_accuracy": end_acc}


def _example_count(batch: Batch) -> Array:
    return jnp.float32(batch["start_position"].shape[0])


def _example_labels(dtype: type) -> Callable[[int, int], Arrays]:
    return lambda batch_size, seq_length: {"label": np.zeros((batch_size,), dtype)}


def _example_word_labels(batch_size: int, seq_length: int) -> Arrays:
    return {"labels": np.zeros((batch_size, seq_length), np.int32),
            "label_weights": np.zeros((batch_size, seq_length), np.float32)}


def _example_spans(batch_size: int, seq_length: int) -> Arrays:
    del seq_length
    return {"start_position": np.zeros((batch_size,), np.int32),
            "end_position": np.zeros((batch_size,), np.int32)}


def label_targets(values: Sequence[Any], dtype: type) -> Arrays:
    """`label` [N] of one class index, choice index or score per example."""
    return {"label": np.asarray(values, dtype).reshape(len(values))}


def word_targets(tag_ids: Sequence[Sequence[int]], positions: Sequence[Sequence[int]],
                 length: int) -> Arrays:
    """`labels` and `label_weights` [N, length]: word k of example n (tag id tag_ids[n][k])
    sits at token positions[n][k], -1 for a word the encoding cut off (no loss)."""
    labels = np.zeros((len(tag_ids), length), np.int32)
    weights = np.zeros((len(tag_ids), length), np.float32)
    for n, (ids, places) in enumerate(zip(tag_ids, positions, strict=True)):
        kept = [(p, t) for p, t in zip(places, ids, strict=True) if p >= 0]
        if kept:
            rows, tags = zip(*kept, strict=True)
            labels[n, list(rows)] = tags
            weights[n, list(rows)] = 1.0
    return {"labels": labels, "label_weights": weights}


def _labels(dtype: type) -> Callable[[Sequence[Any], Layout, int], Arrays]:
    return lambda values, layout, length: label_targets(values, dtype)


def _encoded_spans(values: Sequence[Any], layout: Layout, length: int) -> Arrays:
    del values, layout, length
    return {}  # the family's encoder labels each QA window from the answers' characters


Values = Callable[[Sequence[Any], list[str] | None], list]  # (examples, labels) -> values
Golds = Callable[[Sequence[Any]], list]  # examples -> what predictions are compared with
Decode = Callable[[np.ndarray, EvalData], tuple[list, dict]]  # -> (predictions, extras)


def _class_indices(examples: Sequence[TextExample], labels: list[str] | None) -> list[int]:
    index = {label: i for i, label in enumerate(labels or [])}
    return [index[ex.label] for ex in examples]


def _labels_of(examples: Sequence[TextExample | ChoiceExample]) -> list:
    return [ex.label for ex in examples]


def _class_names(outputs: np.ndarray, data: EvalData) -> tuple[list, dict]:
    return [data.labels[i] for i in outputs.argmax(-1)], {}


def _scores(examples: Sequence[TextExample], labels: None = None) -> list[float]:
    return [float(ex.label) for ex in examples]


def _decode_scores(outputs: np.ndarray, data: EvalData) -> tuple[list, dict]:
    return outputs.reshape(len(outputs)).astype(float).tolist(), {}


def _choices(examples: Sequence[ChoiceExample], labels: None) -> list[int]:
    return [ex.label for ex in examples]


def _best_choices(outputs: np.ndarray, data: EvalData) -> tuple[list, dict]:
    return outputs.argmax(-1).tolist(), {}


def _tag_ids(examples: Sequence[TaggedSentence], labels: list[str] | None) -> list[list[int]]:
    index = {tag: i for i, tag in enumerate(labels or [])}
    return [[index[t] for t in ex.tags] for ex in examples]


def _tags(examples: Sequence[TaggedSentence]) -> list[list[str]]:
    return [list(ex.tags) for ex in examples]


def _decode_tags(outputs: np.ndarray, data: EvalData) -> tuple[list, dict]:
    """`data.layout`: per example, the token position of each word (-1: cut off: OUTSIDE)."""
    best = outputs.argmax(-1)
    return [[data.labels[best[n, p]] if p >= 0 else OUTSIDE for p in positions]
            for n, positions in enumerate(data.layout)], {}


def _answers(examples: Sequence[QaExample], labels: None) -> list:
    """The answers (text, character start): the family labels each window from them."""
    return [ex.answers for ex in examples]


def _answer_texts(examples: Sequence[QaExample]) -> list[list[str]]:
    return [list(ex.gold_texts) or [""] for ex in examples]


def _decode_answers(outputs: np.ndarray, data: EvalData) -> tuple[list, dict]:
    """`outputs`: start and end logits [windows, L, 2]; `data.layout`: the QaWindows."""
    return qa.decode_answers(outputs[..., 0], outputs[..., 1], data.layout, data.examples,
                             data.golds, data.recipe.max_answer_length)


@dataclasses.dataclass(frozen=True)
class Output:
    """One kind of prediction: its loss, the training metric shown beside the loss, the
    target arrays of a batch, whether predictions have a token axis (axis 1), and how a
    task's examples and the head's outputs are read. `head` is the name a run record gives
    the head that makes it (training/workdir.py, HEADS: part of model.json's documented
    format).

    `loss(outputs, batch)` gives the weighted sums of the task loss (`task_loss`) and the
    training metrics (Means: objectives/objective.py); `weights(batch)` the task loss's
    weight summed over a batch, read from its targets alone. `values(examples, labels)`: the
    value each training example teaches, which `targets` turns into arrays; `golds(examples)`:
    per example, what a prediction is compared with; `decode(outputs, data)`: (one prediction
    per example, extras for eval_results.json; an extra "files" maps names to the texts of
    official output files, see finetune/official.py)."""

    name: str
    head: str
    loss: Callable[[Array, Batch], Metrics]
    weights: Callable[[Batch], Array]
    metric: str
    example_targets: Callable[[int, int], Arrays]  # (batch size, length) -> zero targets
    make_targets: Callable[[Sequence[Any], Layout, int], Arrays]  # (values, layout, length)
    values: Values
    golds: Golds
    decode: Decode
    token_axis: bool = False

    @property
    def target_features(self) -> tuple[str, ...]:
        return tuple(self.example_targets(1, 1))

    def task_loss(self, sums: SumsFn, **terms: tuple[float, Callable[[Batch], Array]]
                  ) -> Loss:
        """The Loss of a head whose weighted sums are `sums`: this output's `task_loss`, plus
        any auxiliary `terms` (name=(coefficient, weights summed over a batch))."""
        weights = {"task_loss": self.weights, **{k: w for k, (_, w) in terms.items()}}
        return Loss(sums, {"task_loss": 1.0, **{k: c for k, (c, _) in terms.items()}},
                    lambda batch: {k: w(batch) for k, w in weights.items()})

    def targets(self, values: Sequence[Any], layout: Layout, length: int) -> Arrays:
        """The target arrays of the values a task's `targets` gave, for an encoding whose
        layout is `layout` (word positions for WORD_CLASSES) and token length `length`."""
        return self.make_targets(values, layout, length)


def _summed(weights: Callable[[Batch], Array]) -> Callable[[Batch], Array]:
    return lambda batch: weights(batch).astype(jnp.float32).sum()


_PER_EXAMPLE = _summed(example_weights)
_PER_WORD = _summed(lambda batch: batch["label_weights"])
CLASSES = Output("classes", "classify", classes_loss, _PER_EXAMPLE, "accuracy",
                 _example_labels(np.int32), _labels(np.int32),
                 _class_indices, _labels_of, _class_names)
SCORE = Output("score", "regress", score_loss, _PER_EXAMPLE, "mse",
               _example_labels(np.float32), _labels(np.float32),
               _scores, _scores, _decode_scores)
CHOICE = Output("choice", "choice", classes_loss, _PER_EXAMPLE, "accuracy",
                _example_labels(np.int32), _labels(np.int32),
                _choices, _labels_of, _best_choices)
WORD_CLASSES = Output("word_classes", "tag", word_classes_loss, _PER_WORD, "accuracy",
                      _example_word_labels, word_targets,
                      _tag_ids, _tags, _decode_tags, token_axis=True)
SPANS = Output("spans", "span", span_loss, _example_count, "start_accuracy", _example_spans,
               _encoded_spans, _answers, _answer_texts, _decode_answers, token_axis=True)
OUTPUTS = (CLASSES, SCORE, CHOICE, WORD_CLASSES, SPANS)  # one per recorded head name (HEADS)


def output_of_head(head: str) -> Output:
    """The output a recorded head name stands for (one of HEADS)."""
    return next(output for output in OUTPUTS if output.head == head)
