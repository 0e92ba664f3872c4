"""Regression on one or two texts (STS-B's 0-5 similarity): one score per example, trained
with squared error. Metrics: Pearson, Spearman."""

from collections.abc import Sequence

import numpy as np

from bertjax import metrics
from bertjax.finetune.examples import Reading, TextExample
from bertjax.finetune.outputs import SCORE
from bertjax.finetune.task import TEXTS, EvalData, Task, register


@register
class Regression(Task):
    """One or two texts, one score."""

    name = "regression"
    reading = Reading("table", name, text_counts=(1, 2), numeric_label=True)
    inputs, output = TEXTS, SCORE
    metrics = metrics.REGRESSION
    submissions = True

    def targets(self, examples: Sequence[TextExample], labels: None) -> list[float]:
        return [float(ex.label) for ex in examples]

    def golds(self, examples: Sequence[TextExample]) -> list[float]:
        return [float(ex.label) for ex in examples]

    def decode(self, outputs: np.ndarray, data: EvalData) -> tuple[list, dict]:
        return outputs.reshape(len(outputs)).astype(float).tolist(), {}
