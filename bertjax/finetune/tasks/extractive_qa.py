"""Extractive question answering (SQuAD 1.1 and 2.0, BERT sections 4.2 and 4.3): the answer
is a span of the context. The family's encoding reads each question in windows of its
context and labels each training window with the answer's first and last tokens; decoding
takes each question's best span over all its windows (bertjax.finetune.qa).

SQuAD 2.0 (dev data with unanswerable questions): a question answers "" when its null score
([CLS]) beats its best span by more than a threshold, tuned on the dev set to maximise F1 as
the paper does; eval_results.json records it as `null_threshold`. The best evaluation's
answers are also written for the official evaluation scripts: predictions.json, and
null_odds.json for 2.0 (the SPANS output decodes: `qa.decode_answers`, `qa.squad_files`).
Metrics: exact match, F1 (and HasAns / NoAns for 2.0), as the official scripts compute them.
"""

from bertjax import metrics
from bertjax.finetune.examples import Reading
from bertjax.finetune.outputs import SPANS
from bertjax.finetune.task import QUESTIONS, EvalData, Task, register


@register
class ExtractiveQa(Task):
    """A question on a context, the span of the context that answers it (or none)."""

    name = "qa"
    reading = Reading("squad", name)
    inputs, output = QUESTIONS, SPANS
    metrics = metrics.SQUAD

    def measure(self, predictions: list, data: EvalData) -> dict[str, float]:
        return metrics.compute(self.metrics, dict(zip(data.ids, data.golds, strict=True)),
                               dict(zip(data.ids, predictions, strict=True)))
