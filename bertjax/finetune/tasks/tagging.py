"""Token tagging (CoNLL-2003 NER): one tag per word, predicted at the token the family's
encoding puts each word on (BERT: its first WordPiece; ELMo: the word itself). A word the
encoding cut off (past max_seq_length) is predicted "O". Metrics: conlleval's entity F1,
precision and recall."""

from collections.abc import Sequence

import numpy as np

from bertjax import metrics
from bertjax.finetune.examples import Reading, TaggedSentence
from bertjax.finetune.outputs import WORD_CLASSES
from bertjax.finetune.task import WORDS, EvalData, Task, check_labels, register

OUTSIDE = "O"  # the prediction for a word the encoding cut off


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

    def targets(self, examples: Sequence[TaggedSentence], labels: list[str]
                ) -> list[list[int]]:
        index = {tag: i for i, tag in enumerate(labels)}
        return [[index[t] for t in ex.tags] for ex in examples]

    def golds(self, examples: Sequence[TaggedSentence]) -> list[list[str]]:
        return [list(ex.tags) for ex in examples]

    def decode(self, outputs: np.ndarray, data: EvalData) -> tuple[list, dict]:
        """`data.layout`: per example, the token position of each word (-1: cut off)."""
        best = outputs.argmax(-1)
        return [[data.labels[best[n, p]] if p >= 0 else OUTSIDE for p in positions]
                for n, positions in enumerate(data.layout)], {}
