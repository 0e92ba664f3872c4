"""Single-sentence and sentence-pair classification (SST-2, CoLA, AG News; MNLI, RTE, MRPC,
QNLI, QQP): one or two texts, one class of the training labels. Metrics: accuracy, MCC and
macro F1 for single sentences; accuracy, and for two classes the F1 of the positive class,
for pairs (GLUE's MRPC / QQP F1).

The positive class is the task's, not a spelling: `finetune.positive_label`, else the data's
class 1 where the data numbers its classes (GLUE's 0/1 files; TFDS's ClassLabel order, where
glue/mrpc's class 1 is equivalent and glue/qqp's duplicate; finetune.labels). Two classes
with names and no numbering (a CSV of "equivalent" / "not_equivalent") have no positive
class unless finetune.positive_label names it, so no F1 is reported rather than a guessed one;
nor is a binary F1 reported for three classes (MNLI), where GLUE reports accuracy only."""

from collections.abc import Sequence

from bertjax import metrics
from bertjax.finetune.examples import Reading, TaskDataError, TextExample
from bertjax.finetune.outputs import CLASSES
from bertjax.finetune.task import TEXTS, EvalData, Task, check_labels, register
from bertjax.metrics import Metrics


@register
class Classification(Task):
    """One text, one of the training labels."""

    name = "classification"
    reading = Reading("table", name, text_counts=(1,))
    inputs, output = TEXTS, CLASSES
    metrics = metrics.CLASSIFICATION
    submissions = True

    def label_names(self, train: Sequence[TextExample], dev: Sequence[TextExample],
                    eval_spec: str, order: Sequence[str] | None = None) -> list[str]:
        return check_labels(train, dev, eval_spec, order)

    def metric_options(self, data: EvalData) -> dict:
        return {"labels": data.labels}


def positive_class(data: EvalData) -> str | None:
    """The class whose F1 a binary task reports (see the module docstring), or None."""
    labels, chosen = data.labels or [], getattr(data.recipe, "positive_label", None)
    if chosen is not None:
        if chosen not in labels:
            raise TaskDataError(f"finetune.positive_label={chosen!r} is not one of the classes "
                                f"{labels}: name one of them")
        return chosen
    return labels[1] if len(labels) == 2 and data.numbered else None


@register
class PairClassification(Classification):
    """A text pair, one of the training labels; F1 of the positive class of two, as GLUE
    scores MRPC and QQP."""

    name = "pair_classification"
    reading = Reading("table", name, text_counts=(2,))
    metrics = metrics.PAIR_CLASSIFICATION

    def metric_table(self, data: EvalData) -> Metrics:
        binary = len(data.labels or []) == 2 and positive_class(data) is not None
        return self.metrics if binary else metrics.PAIR_CLASSIFICATION[:1]

    def metric_options(self, data: EvalData) -> dict:
        positive = positive_class(data)
        return {} if positive is None else {"positive": positive}
