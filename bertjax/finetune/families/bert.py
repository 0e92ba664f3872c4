"""BERT fine-tuned (Devlin et al. 2018, section 4): its inputs for downstream tasks (figure
4), from WordPiece ids, and the adapter that puts a task head on the pretrained encoder.

    single sentence   [CLS] a [SEP]                         segments 0 ... 0
    sentence pair     [CLS] a [SEP] b [SEP]                 segments 0 ... 0 1 ... 1
    multiple choice   [CLS] context [SEP] ending_k [SEP]    one sequence per ending, [N, K, L]
    token tagging     [CLS] w1 w2 ... [SEP]                 the first piece of each word carries
                                                            its tag; the other pieces weigh 0

    extractive QA     [CLS] question [SEP] context window [SEP]  (bertjax.finetune.qa)

Pairs are cut longest-first until they fit, the second text on a tie (google-research/bert's
`_truncate_seq_pair`). Arrays are right-padded with 0 to `max_length`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import jax
import numpy as np

from bertjax.finetune import qa, truncation
from bertjax.finetune.adapter import Adapter, SetupError, register
from bertjax.finetune.examples import Example, TaggedSentence
from bertjax.finetune.heads.bert import (
    HEADS,
    PACKABLE,
    PACKING_FEATURES,
    bert_finetuning,
    with_pretrained_encoder,
)
from bertjax.finetune.length_buckets import LengthBuckets
from bertjax.finetune.outputs import Layout
from bertjax.finetune.task import CHOICES, QUESTIONS, TEXTS, WORDS, Task
from bertjax.tokenizers.wordpiece import WordPieceVocabulary
from bertjax.typing import Params

if TYPE_CHECKING:
    from bertjax.finetune.pretrained import Pretrained
    from bertjax.finetune.recipe import BertRecipe

Arrays = dict[str, np.ndarray]
INPUT_FEATURES = ("input_ids", "segment_ids", "input_mask")


def _fit(a: list[int], b: list[int] | None, budget: int) -> tuple[list[int], list[int] | None]:
    """Cut the longer of the two id lists from its end until both fit `budget` tokens; on a
    tie the second, as google-research/bert's `_truncate_seq_pair`."""
    a, b = list(a), None if b is None else list(b)
    while len(a) + (len(b) if b is not None else 0) > budget:
        if b is not None and len(b) >= len(a):
            b.pop()
        else:
            a.pop()
    return a, b


def pack(vocab: WordPieceVocabulary, a: list[int], b: list[int] | None, max_length: int
         ) -> tuple[list[int], list[int]]:
    """(ids, segment ids) of `[CLS] a [SEP] (b [SEP])`, cut to `max_length`."""
    budget = max_length - (3 if b is not None else 2)
    truncation.note(len(a) + (len(b) if b is not None else 0) > budget)
    a, b = _fit(a, b, budget)
    ids = [vocab.cls_id, *a, vocab.sep_id]
    segments = [0] * len(ids)
    if b is not None:
        ids += [*b, vocab.sep_id]
        segments += [1] * (len(b) + 1)
    return ids, segments


def _padded(rows: Sequence[tuple[list[int], list[int]]], max_length: int) -> dict[str, np.ndarray]:
    shape = (len(rows), max_length)
    ids, segments, mask = (np.zeros(shape, np.int32) for _ in range(3))
    for r, (row_ids, row_segments) in enumerate(rows):
        n = len(row_ids)
        ids[r, :n], segments[r, :n], mask[r, :n] = row_ids, row_segments, 1
    return {"input_ids": ids, "segment_ids": segments, "input_mask": mask}


def encode_texts(vocab: WordPieceVocabulary, texts: Sequence[Sequence[str]], max_length: int
                 ) -> dict[str, np.ndarray]:
    """Inputs [N, L] of one- or two-text examples."""
    rows = []
    for fields in texts:
        pieces = [vocab.encode(text) for text in fields]
        rows.append(pack(vocab, pieces[0], pieces[1] if len(pieces) > 1 else None, max_length))
    return _padded(rows, max_length)


def encode_choices(vocab: WordPieceVocabulary, contexts: Sequence[str],
                   endings: Sequence[Sequence[str]], max_length: int) -> dict[str, np.ndarray]:
    """Inputs [N, K, L]: one `[CLS] context [SEP] ending [SEP]` sequence per ending."""
    counts = {len(e) for e in endings}
    if len(counts) != 1:
        raise ValueError(f"examples have {sorted(counts)} endings: give every multiple-choice "
                         "example the same number")
    num_endings = counts.pop()
    flat = [(c, e) for c, ends in zip(contexts, endings, strict=True) for e in ends]
    arrays = encode_texts(vocab, flat, max_length)
    return {k: v.reshape(len(contexts), num_endings, max_length) for k, v in arrays.items()}


def _word_pieces(vocab: WordPieceVocabulary, words: Sequence[str]) -> list[list[int]]:
    """Each word's pieces; a word with no piece (e.g. a control character) reads as [UNK]."""
    return [vocab.encode(word) or [vocab.unk_id] for word in words]


def encode_words(vocab: WordPieceVocabulary, sentences: Sequence[Sequence[str]],
                 max_length: int, contexts: Sequence[tuple[list[int], list[int]]] | None = None
                 ) -> tuple[Arrays, list[list[int]]]:
    """Inputs [N, L] of `[CLS] w1 w2 ... [SEP]`, and for each sentence the position of each
    word's first piece (-1 for words cut off by `max_length`): where its tag is taught and
    read. `contexts`: per sentence, (left, right) piece ids placed around it, untagged."""
    rows, firsts = [], []
    for s, words in enumerate(sentences):
        left, right = contexts[s] if contexts is not None else ([], [])
        ids, first = [vocab.cls_id, *left], []
        for w, pieces in enumerate(_word_pieces(vocab, words)):
            if len(ids) + len(pieces) > max_length - 1:
                first += [-1] * (len(words) - w)
                truncation.note(True)
                break
            first.append(len(ids))
            ids += pieces
        ids += right[:max(0, max_length - 1 - len(ids))]
        rows.append((ids + [vocab.sep_id], [0] * (len(ids) + 1)))
        firsts.append(first)
    return _padded(rows, max_length), firsts


def document_contexts(vocab: WordPieceVocabulary, examples: Sequence[TaggedSentence],
                      max_length: int) -> list[tuple[list[int], list[int]]]:
    """Per tagged sentence, the pieces of its document's sentences before and after it that
    fit beside it in `max_length` (half the room each side, the rest to whichever side has
    more): the paper's "maximal document context" for CoNLL-2003. Each sentence takes slices
    of its document's pieces laid end to end, so the cost is linear in the data, however long
    a document. Sentences whose data marks no documents (TFDS's conll2003, a file without
    -DOCSTART- lines) are refused in one line: read whole, a split would be one document."""
    if any(ex.document is None for ex in examples):
        raise SetupError("finetune.document_context needs document boundaries (CoNLL's "
                         "-DOCSTART- lines), which these sentences lack (TFDS's conll2003 "
                         "drops them): train on CoNLL's own files, or set "
                         "finetune.document_context = False")
    pieces = [[p for word in _word_pieces(vocab, ex.tokens) for p in word] for ex in examples]
    documents: dict[int, list[int]] = {}
    for s, ex in enumerate(examples):
        documents.setdefault(ex.document, []).append(s)
    contexts: list[tuple[list[int], list[int]]] = [([], [])] * len(examples)
    for members in documents.values():
        flat = [p for s in members for p in pieces[s]]  # the document's pieces, in order
        start = 0
        for s in members:
            end = start + len(pieces[s])
            room = max(0, max_length - 2 - len(pieces[s]))
            n_after = min(len(flat) - end, max(room // 2, room - start))
            n_before = min(start, room - n_after)
            contexts[s] = (flat[start - n_before:start], flat[end:end + n_after])
            start = end
    return contexts


@register
class BertFineTuned(Adapter):
    """BERT with a task head, all of it trained (section 4): [CLS] heads for texts and
    choices, a token head for words, start/end vectors for extractive QA. With
    `finetune.bilstm` a BiLSTM sits between the encoder and the head (Table 5)."""

    family, approach = "bert", "fine_tune"
    inputs = (TEXTS, WORDS, CHOICES, QUESTIONS)
    outputs = tuple(output.name for output in HEADS)
    recipe: BertRecipe

    def __init__(self, recipe: BertRecipe, model: Pretrained, task: Task, num_outputs: int,
                 examples: Sequence[Example]):
        super().__init__(recipe, model, task, num_outputs, examples)
        self.config = model.config.replace(dropout_rate=recipe.dropout, remat=False)
        self.packing = recipe.packed_sequences
        choices = len(examples[0].endings) if task.inputs == CHOICES and examples else 4
        self.objective = bert_finetuning(self.config, task.output, num_outputs, choices,
                                         recipe.lstm_size if recipe.bilstm else 0, self.packing,
                                         recipe.pooling)
        if recipe.length_buckets > 1 and task.inputs != QUESTIONS and not self.packing:
            token_features = INPUT_FEATURES + (task.output.target_features
                                               if task.output.token_axis else ())
            self.buckets = LengthBuckets(token_features, recipe.max_seq_length,
                                         recipe.length_buckets)

    @classmethod
    def packs(cls, task: Task, recipe: BertRecipe) -> bool:
        """Texts into a [CLS] head (classes, a score) without a BiLSTM train on packed rows."""
        return task.inputs == TEXTS and task.output in PACKABLE and not recipe.bilstm

    def encode_inputs(self, examples: Sequence[Example], targets: list | None
                      ) -> tuple[Arrays, Layout]:
        vocab, length = self.model.tokenizer, self.recipe.max_seq_length
        if self.task.inputs == QUESTIONS:  # windows labelled from the answers' characters
            return qa.qa_features(
                examples, vocab, max_seq_length=length, doc_stride=self.recipe.doc_stride,
                max_query_length=self.recipe.max_query_length, training=targets is not None)
        if self.task.inputs == WORDS:
            contexts = (document_contexts(vocab, examples, length)
                        if self.recipe.document_context else None)
            return encode_words(vocab, [ex.tokens for ex in examples], length, contexts)
        if self.task.inputs == CHOICES:
            return encode_choices(vocab, [ex.context for ex in examples],
                                  [ex.endings for ex in examples], length), None
        return encode_texts(vocab, [ex.texts for ex in examples], length), None

    def predict(self, params: Params, inputs: Arrays) -> jax.Array:
        packing = ({k: inputs[k] for k in PACKING_FEATURES} if "sequence_ids" in inputs
                   else None)  # packed rows: [B, K, ...], one prediction per example
        return self.objective.model.apply({"params": params}, inputs["input_ids"],
                                          inputs["segment_ids"], inputs["input_mask"],
                                          packing=packing)

    def initial_params(self, params: Params) -> Params:
        return with_pretrained_encoder(params, self.model.params)
