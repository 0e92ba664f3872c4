"""Multiple choice (SWAG, HellaSwag; the GPT paper's RACE and Story Cloze): a context and its
endings, one score per ending, softmax over the endings. Metric: accuracy."""

from collections.abc import Sequence

import numpy as np

from bertjax import metrics
from bertjax.finetune.examples import ChoiceExample, Reading
from bertjax.finetune.outputs import CHOICE
from bertjax.finetune.task import CHOICES, EvalData, Task, register


@register
class MultipleChoice(Task):
    """A context and its endings, the index of the right one."""

    name = "multiple_choice"
    reading = Reading("table", name, choices=True)
    inputs, output = CHOICES, CHOICE
    metrics = metrics.MULTIPLE_CHOICE

    def targets(self, examples: Sequence[ChoiceExample], labels: None) -> list[int]:
        return [ex.label for ex in examples]

    def golds(self, examples: Sequence[ChoiceExample]) -> list:
        return [ex.label for ex in examples]

    def decode(self, outputs: np.ndarray, data: EvalData) -> tuple[list, dict]:
        return outputs.argmax(-1).tolist(), {}
