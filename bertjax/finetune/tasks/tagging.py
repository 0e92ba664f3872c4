"""Token tagging (CoNLL-2003 NER): one tag per word, predicted at the token the family's
encoding puts each word on (BERT: its first WordPiece; ELMo: the word itself). A word the
encoding cut off (past max_seq_length) is predicted "O". Metrics: conlleval's entity F1,
precision and recall."""

from collections.abc import Sequence

from bertjax import metrics
from bertjax.finetune.examples import Reading, TaggedSentence
from bertjax.finetune.outputs import WORD_CLASSES
from bertjax.finetune.task import WORDS, Task, check_labels, register


@register
class Tagging(Task):
    """A sentence's words, one tag each, predicted where the family's encoding puts the word
    (Encoded.layout: its token position, -1 when cut off)."""

    name = "tagging"
    reading = Reading("conll", name)
    inputs, output = WORDS, WORD_CLASSES
    metrics = metrics.TAGGING

    def label_names(self, train: Sequence[TaggedSentence], dev: Sequence[TaggedSentence],
                    eval_spec: str, order: Sequence[str] | None = None) -> list[str]:
        return check_labels(train, dev, eval_spec, order)
