"""Single-sentence and sentence-pair classification (SST-2, CoLA, AG News; MNLI, RTE, MRPC,
QNLI, QQP): one or two texts, one class of the training labels. Metrics: accuracy, MCC and
macro F1 for single sentences; accuracy and F1 of class "1" for pairs (GLUE's MRPC / QQP F1)."""

from collections.abc import Sequence

import numpy as np

from bertjax import metrics
from bertjax.finetune.examples import Reading, TextExample
from bertjax.finetune.outputs import CLASSES
from bertjax.finetune.task import TEXTS, EvalData, Task, check_labels, register


@register
class Classification(Task):
    """One text, one of the training labels."""

    name = "classification"
    reading = Reading("table", name, text_counts=(1,))
    inputs, output = TEXTS, CLASSES
    metrics = metrics.CLASSIFICATION
    submissions = True

    def label_names(self, train: Sequence[TextExample], dev: Sequence[TextExample],
                    eval_spec: str) -> list[str]:
        return check_labels(train, dev, eval_spec)

    def targets(self, examples: Sequence[TextExample], labels: list[str]) -> list[int]:
        index = {label: i for i, label in enumerate(labels)}
        return [index[ex.label] for ex in examples]

    def golds(self, examples: Sequence[TextExample]) -> list:
        return [ex.label for ex in examples]

    def decode(self, outputs: np.ndarray, data: EvalData) -> tuple[list, dict]:
        return [data.labels[i] for i in outputs.argmax(-1)], {}

    def metric_options(self, labels: list[str] | None) -> dict:
        return {"labels": labels}


@register
class PairClassification(Classification):
    """A text pair, one of the training labels; F1 of class "1" as GLUE scores MRPC, QQP."""

    name = "pair_classification"
    reading = Reading("table", name, text_counts=(2,))
    metrics = metrics.PAIR_CLASSIFICATION

    def metric_options(self, labels: list[str] | None) -> dict:
        return {"positive": "1" if "1" in labels else labels[-1]}  # GLUE's F1: class 1
