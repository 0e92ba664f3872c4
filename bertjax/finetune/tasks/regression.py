"""Regression on one or two texts (STS-B's 0-5 similarity): one score per example, trained
with squared error. Metrics: Pearson, Spearman."""

from bertjax import metrics
from bertjax.finetune.examples import Reading
from bertjax.finetune.outputs import SCORE
from bertjax.finetune.task import TEXTS, Task, register


@register
class Regression(Task):
    """One or two texts, one score."""

    name = "regression"
    reading = Reading("table", name, text_counts=(1, 2), numeric_label=True)
    inputs, output = TEXTS, SCORE
    metrics = metrics.REGRESSION
    submissions = True
