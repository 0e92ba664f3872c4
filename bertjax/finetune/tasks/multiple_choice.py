"""Multiple choice (SWAG, HellaSwag; the GPT paper's RACE and Story Cloze): a context and its
endings, one score per ending, softmax over the endings. Metric: accuracy."""

from bertjax import metrics
from bertjax.finetune.examples import Reading
from bertjax.finetune.outputs import CHOICE
from bertjax.finetune.task import CHOICES, Task, register


@register
class MultipleChoice(Task):
    """A context and its endings, the index of the right one."""

    name = "multiple_choice"
    reading = Reading("table", name, choices=True)
    inputs, output = CHOICES, CHOICE
    metrics = metrics.MULTIPLE_CHOICE
