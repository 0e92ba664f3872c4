"""The contract of a downstream task type, in the image of pretraining's `Objective`.

A task type (classification, pair classification, regression, tagging, extractive QA, multiple
choice, ...) is one `Task` subclass in `bertjax/finetune/tasks/`, registered by name with
`@register`. It says, for every family alike:

    reading      how its examples are read (a file-format reader and a table layout)
    inputs       what a family encodes: TEXTS (one or two texts), WORDS (a tagged word
                 sequence), CHOICES (a context and its endings) or QUESTIONS (a question on a
                 context)
    output       what the head predicts, the loss that trains it, and so what each training
                 example teaches (a class index, a score, ...), what predictions are compared
                 with and how the head's outputs decode into predictions
                 (bertjax.finetune.outputs: a task type with one of its outputs writes none
                 of these)
    label_names  its label vocabulary, from the training examples
    metrics      the papers' metrics, the main one (which picks the best checkpoint) first

How the examples become token arrays and which model predicts is the family's part (an
`Adapter`, bertjax.finetune.adapter): a task type never names a family, and a family adapter
never names a task type, only the inputs and outputs it supports.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import numpy as np

from bertjax.finetune import readers
from bertjax.finetune.examples import Example, Reading, TaggedSentence, TaskDataError, TextExample
from bertjax.finetune.outputs import EvalData, Output
from bertjax.metrics import Metrics, compute

TEXTS, WORDS, CHOICES, QUESTIONS = "texts", "words", "choices", "questions"


class Task:
    """A downstream task type; subclasses set the class attributes and override what differs."""

    name: ClassVar[str]
    reading: ClassVar[Reading]
    inputs: ClassVar[str]
    output: ClassVar[Output]
    metrics: ClassVar[Metrics]  # (key, function(gold, pred, ...)) pairs, the main one first
    submissions: ClassVar[bool] = False  # --predict writes GLUE submission files of it

    def read(self, spec: str | os.PathLike, *, text_columns: Sequence[str] | None = None,
             label_column: str | None = None, split_hint: str = "train",
             labels_optional: bool = False) -> list[Example]:
        """Its examples from a file or "tfds:NAME[:SPLIT]" (bertjax.finetune.readers; with
        `labels_optional`, a file that may or may not hold labels)."""
        return readers.read(spec, self.reading, text_columns=text_columns,
                            label_column=label_column, split_hint=split_hint,
                            labels_optional=labels_optional)

    @property
    def main_metric(self) -> str:
        """The metric that picks the best checkpoint unless finetune.main_metric names another."""
        return self.metrics[0][0]

    def label_names(self, train: Sequence[Example], dev: Sequence[Example], eval_spec: str,
                    order: Sequence[str] | None = None) -> list[str] | None:
        """The label vocabulary, in the order of the head's outputs (None: no classes);
        `order`: the data's own numbering of its classes (finetune.labels, TFDS's names)."""
        return None

    def metric_table(self, data: EvalData) -> Metrics:
        """The metrics reported for this evaluation data (a task may report fewer than
        `metrics` where one is undefined, e.g. a binary F1 on three classes)."""
        return self.metrics

    def num_outputs(self, labels: list[str] | None) -> int:
        """The head's width: one per label, else one."""
        return len(labels) if labels else 1

    def targets(self, examples: Sequence[Example], labels: list[str] | None) -> list:
        """The value each training example teaches (its output's); the family turns it into
        target arrays."""
        return self.output.values(examples, labels)

    def golds(self, examples: Sequence[Example]) -> list:
        """Per example, what a prediction is compared with (its output's)."""
        return self.output.golds(examples)

    def decode(self, outputs: np.ndarray, data: EvalData) -> tuple[list, dict]:
        """(one prediction per example, extras for eval_results.json; an extra "files" maps
        names to the texts of official output files, see finetune/official.py): its
        output's decoding."""
        return self.output.decode(outputs, data)

    def metric_options(self, data: EvalData) -> dict[str, Any]:
        """Options of the metric functions (e.g. the positive class of F1)."""
        return {}

    def measure(self, predictions: list, data: EvalData) -> dict[str, float]:
        """Every metric of `metric_table(data)` on the golds and predictions, main first."""
        return compute(self.metric_table(data), data.golds, predictions,
                       **self.metric_options(data))


TASKS: dict[str, Task] = {}


def register(task_class: type[Task]) -> type[Task]:
    """Class decorator: make the task type available to recipes under its `name`."""
    TASKS[task_class.name] = task_class()
    return task_class


def check_labels(train_examples: Iterable[Example], eval_examples: Iterable[Example],
                 eval_spec: str, order: Sequence[str] | None = None) -> list[str]:
    """The label vocabulary of the training examples, checked to cover the eval examples:
    `order` when the data numbers its classes (every class of it, in its order), else the
    labels seen in training, sorted (numerically when they are all integers: 0, 1, ..., 10).

    Labels are TextExample class names and TaggedSentence tags (regression numbers, QA and
    multiple choice have no label set). An eval label training never saw could never be
    predicted and would have no output unit, so it is refused, naming the label and file.
    """
    known = set(_labels(train_examples))
    if order is not None:
        outside = sorted(known - set(order))
        if outside:
            raise TaskDataError(f"label {outside[0]!r} of the training data is not among the "
                                f"classes {list(order)} (finetune.labels or the dataset's): "
                                "list every class in finetune.labels")
        known = set(order)
    unseen = sorted(set(_labels(eval_examples)) - known)
    if unseen:
        more = f" (and {len(unseen) - 1} more)" if len(unseen) > 1 else ""
        raise TaskDataError(f"{eval_spec}: label {unseen[0]!r}{more} never occurs in the "
                            "training data; fix the eval file or add training examples of it")
    return list(order) if order is not None else sorted(known, key=_label_key)


def integer_labels(labels: Iterable[str]) -> bool:
    """All labels spell integers (GLUE's 0 / 1): their value is the class number."""
    return all(label.lstrip("-").isdigit() for label in labels)


def _label_key(label: str) -> tuple:
    return (0, int(label), "") if integer_labels([label]) else (1, 0, label)


def _labels(examples: Iterable[Example]) -> Iterable[str]:
    for example in examples:
        if isinstance(example, TaggedSentence):
            yield from example.tags
        elif isinstance(example, TextExample) and isinstance(example.label, str):
            yield example.label
