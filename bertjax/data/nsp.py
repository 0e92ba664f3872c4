"""Sentence-pair instances for BERT pretraining (Devlin et al. 2018, section 3.1 and A.2).

Follows google-research/bert's create_pretraining_data.py on already tokenized documents: a
chunk of consecutive sentences fills a target length (max_seq_length - 3, or with probability
`short_seq_prob` a random shorter one), splits at a random sentence into segment A and B; B is
the real continuation half of the time, otherwise a span of another document (the unused
sentences of the chunk are put back). The longer segment is cut at a random end until the pair
fits. Instances are planned on sentence lengths only and hold token ranges, so counting or
skipping them (to resume) never copies tokens; `pack` materializes one.

Deliberate departures from the reference, all to keep the IsNext label at exactly 50%:
- the coin is tossed for every pair; an IsNext pair whose chunk holds one sentence takes the
  next sentence as B (or, at the end of the document, the previous sentence as A);
- documents of one sentence are never the source of segment A (they cannot give IsNext), only
  of random next segments;
- the short target is drawn per instance, not once per document, so 10% of instances are short.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import numpy as np

from bertjax.data.masking import SpecialIds

IS_NEXT = 0  # next_sentence_label values, as in google-research/bert
RANDOM_NEXT = 1


class Corpus:
    """Tokenized documents: one flat int32 token array per document plus sentence offsets.

    Empty sentences and documents without any token are dropped.
    """

    def __init__(self, documents: Iterable[Sequence[np.ndarray]]) -> None:
        self.tokens: list[np.ndarray] = []
        self.offsets: list[list[int]] = []  # sentence k of doc d: tokens[d][off[k]:off[k + 1]]
        for document in documents:
            sentences = [np.asarray(s, np.int32).reshape(-1) for s in document]
            sentences = [s for s in sentences if s.size]
            if sentences:
                self.tokens.append(np.concatenate(sentences))
                self.offsets.append(np.cumsum([0] + [s.size for s in sentences]).tolist())

    @property
    def num_documents(self) -> int:
        return len(self.tokens)

    @property
    def num_multi_sentence(self) -> int:
        """Documents with at least two sentences: the only sources of IsNext pairs."""
        return sum(len(off) > 2 for off in self.offsets)


def check_corpus(corpus: Corpus, nsp: bool) -> None:
    """Raises a one-line ValueError when the corpus cannot give the requested examples."""
    if corpus.num_documents == 0:
        raise ValueError("the pretraining corpus has no tokens: check the input files")
    if nsp and corpus.num_multi_sentence == 0:
        raise ValueError(
            "NSP needs documents of 2+ sentences but none has more than one: write the corpus "
            "one sentence per line with blank lines between documents, or turn NSP off "
            "(--gin.NSP=False)"
        )
    if nsp and corpus.num_documents < 2:
        raise ValueError(
            "NSP draws random next segments from other documents but the corpus has only "
            "one: separate documents by blank lines, or turn NSP off (--gin.NSP=False)"
        )


class PairInstance(NamedTuple):
    """Token ranges of one example; b_doc == -1 for a single segment (nsp=False)."""

    doc: int
    a_start: int
    a_stop: int
    b_doc: int
    b_start: int
    b_stop: int
    is_random_next: int  # next_sentence_label: 0 IsNext, 1 random next


def truncation(len_a: int, len_b: int, max_tokens: int) -> tuple[int, int]:
    """Tokens to cut from A and B: one at a time from the longer (B on ties) until they fit."""
    excess = len_a + len_b - max_tokens
    if excess <= 0:
        return 0, 0
    diff = len_a - len_b
    if diff > 0:
        if diff >= excess:
            return excess, 0
        rest = excess - diff
        return diff + rest // 2, (rest + 1) // 2
    if -diff >= excess:
        return 0, excess
    rest = excess + diff
    return rest // 2, -diff + (rest + 1) // 2


def _split_cut(rng: np.random.Generator, cut: int) -> tuple[int, int]:
    """Splits `cut` tokens between front and back, each token's end chosen by a fair coin."""
    if cut <= 0:
        return 0, 0
    front = int(rng.binomial(cut, 0.5))
    return front, cut - front


def _target_length(rng: np.random.Generator, max_tokens: int, short_seq_prob: float) -> int:
    if short_seq_prob > 0 and rng.random() < short_seq_prob:
        return int(rng.integers(2, max_tokens + 1))
    return max_tokens


def _chunk_end(offsets: list[int], first: int, target: int) -> int:
    """End sentence of the chunk starting at `first`: the first reaching `target` tokens."""
    return min(bisect.bisect_left(offsets, offsets[first] + target, lo=first + 1), len(offsets) - 1)


def _random_span(
    corpus: Corpus, doc: int, target: int, rng: np.random.Generator
) -> tuple[int, int, int]:
    """Sentences of another document from a random one on, until `target` tokens (>= 1 sentence)."""
    other = int(rng.integers(0, corpus.num_documents - 1))
    other += other >= doc
    offsets = corpus.offsets[other]
    first = int(rng.integers(0, len(offsets) - 1))
    return other, offsets[first], offsets[_chunk_end(offsets, first, target)]


def document_instances(
    corpus: Corpus,
    doc: int,
    rng: np.random.Generator,
    *,
    max_seq_length: int,
    short_seq_prob: float = 0.1,
    nsp: bool = True,
) -> list[PairInstance]:
    """All instances whose segment A comes from document `doc`, in document order."""
    offsets = corpus.offsets[doc]
    n = len(offsets) - 1
    if nsp and n < 2:
        return []
    max_tokens = max_seq_length - (3 if nsp else 2)
    out = []
    i = 0
    while i < n:
        target = _target_length(rng, max_tokens, short_seq_prob)
        j = _chunk_end(offsets, i, target)
        if not nsp:
            front, back = _split_cut(rng, offsets[j] - offsets[i] - max_tokens)
            out.append(PairInstance(doc, offsets[i] + front, offsets[j] - back, -1, 0, 0, 0))
            i = j
            continue
        is_random = rng.random() < 0.5
        if not is_random and j - i == 1:  # IsNext needs two sentences
            if j < n:
                j += 1
            else:
                i -= 1
        a_end = i + 1 if j - i == 1 else int(rng.integers(i + 1, j))
        a_start, a_stop = offsets[i], offsets[a_end]
        if is_random:
            b_doc, b_start, b_stop = _random_span(corpus, doc, target - (a_stop - a_start), rng)
            i = a_end  # put the unused sentences back
        else:
            b_doc, b_start, b_stop = doc, a_stop, offsets[j]
            i = j
        cut_a, cut_b = truncation(a_stop - a_start, b_stop - b_start, max_tokens)
        a_front, a_back = _split_cut(rng, cut_a)
        b_front, b_back = _split_cut(rng, cut_b)
        out.append(
            PairInstance(
                doc,
                a_start + a_front,
                a_stop - a_back,
                b_doc,
                b_start + b_front,
                b_stop - b_back,
                int(is_random),
            )
        )
    return out


def iterate_instances(
    corpus: Corpus,
    order: Iterable[int],
    rng: np.random.Generator,
    *,
    max_seq_length: int,
    short_seq_prob: float = 0.1,
    nsp: bool = True,
) -> Iterator[PairInstance]:
    """Instances of the documents in `order`, one document after the other."""
    if max_seq_length < (5 if nsp else 3):
        raise ValueError(
            f"max_seq_length={max_seq_length} leaves no room for tokens: use at least "
            f"{5 if nsp else 3} (with nsp={nsp})"
        )
    check_corpus(corpus, nsp)
    for doc in order:
        yield from document_instances(
            corpus,
            int(doc),
            rng,
            max_seq_length=max_seq_length,
            short_seq_prob=short_seq_prob,
            nsp=nsp,
        )


def pack(
    corpus: Corpus, instance: PairInstance, special: SpecialIds, max_seq_length: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`[CLS] A [SEP] B [SEP]` (or `[CLS] A [SEP]`) padded: input_ids, input_mask, segment_ids."""
    input_ids = np.full(max_seq_length, special.pad, np.int32)  # [L]
    segment_ids = np.zeros(max_seq_length, np.int32)  # [L]
    input_mask = np.zeros(max_seq_length, np.int32)  # [L]
    a = corpus.tokens[instance.doc][instance.a_start : instance.a_stop]
    end = a.size + 1
    input_ids[0] = special.cls
    input_ids[1:end] = a
    input_ids[end] = special.sep
    end += 1
    if instance.b_doc >= 0:
        b = corpus.tokens[instance.b_doc][instance.b_start : instance.b_stop]
        input_ids[end : end + b.size] = b
        input_ids[end + b.size] = special.sep
        segment_ids[end : end + b.size + 1] = 1
        end += b.size + 1
    input_mask[:end] = 1
    return input_ids, input_mask, segment_ids
