"""Sentence-pair instances for BERT pretraining (Devlin et al. 2018, section 3.1 and A.2).

Follows google-research/bert's create_pretraining_data.py on already tokenized documents: a
chunk of consecutive sentences fills a target length (max_seq_length - 3, or with probability
`short_seq_prob` a random shorter one), splits at a random sentence into segment A and B; B is
the real continuation half of the time, otherwise a span of another document (the unused
sentences of the chunk are put back). The longer segment is cut at a random end until the pair
fits. Instances are planned on sentence lengths only and hold token ranges, so planning never
copies tokens; `pack` materializes a block of them.

`plan_instances` walks every document at once: step k builds the k-th instance of each
document that still has sentences left, with one numpy call per decision for all of them, so a
corpus of millions of documents costs (longest document's instances) x (a few dozen calls).

Deliberate departures from the reference, all to keep the IsNext label at exactly 50%:
- the coin is tossed for every pair; an IsNext pair whose chunk holds one sentence takes the
  next sentence as B (or, at the end of the document, the previous sentence as A);
- documents of one sentence are never the source of segment A (they cannot give IsNext), only
  of random next segments;
- the short target is drawn per instance, not once per document, so 10% of instances are short.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from bertjax.data.bert.masking import SpecialIds

IS_NEXT = 0  # next_sentence_label values, as in google-research/bert
RANDOM_NEXT = 1


class Corpus:
    """Tokenized documents, flat: every token in one int32 array, plus sentence boundaries.

    Sentence s is tokens[sentence_starts[s]:sentence_starts[s + 1]]; document d holds the
    sentences doc_sentences[d]:doc_sentences[d + 1]; group g (see `static_groups` of the
    pretraining config) holds the documents group_docs[g]:group_docs[g + 1]. Empty sentences
    and documents without any token are dropped (within their group).
    """

    def __init__(self, documents: Iterable[Sequence[np.ndarray]],
                 group_sizes: Sequence[int] | None = None) -> None:
        documents = [[np.asarray(s, np.int32).reshape(-1) for s in doc] for doc in documents]
        sentences = [s for doc in documents for s in doc]
        self._build(
            np.concatenate(sentences) if sentences else np.zeros(0, np.int32),
            np.array([s.size for s in sentences], np.int64),
            np.array([len(doc) for doc in documents], np.int64),
            group_sizes,
        )

    @classmethod
    def from_arrays(cls, tokens: np.ndarray, sentence_lengths: np.ndarray,
                    document_lengths: np.ndarray, group_sizes: Sequence[int] | None = None
                    ) -> Corpus:
        """From flat tokens, tokens per sentence and sentences per document (empties allowed)."""
        corpus = cls.__new__(cls)
        corpus._build(_token_ids(tokens), np.asarray(sentence_lengths, np.int64),
                      np.asarray(document_lengths, np.int64), group_sizes)
        return corpus

    def _build(self, tokens: np.ndarray, sentence_lengths: np.ndarray,
               document_lengths: np.ndarray, group_sizes: Sequence[int] | None) -> None:
        if group_sizes is None:
            group_sizes = [len(document_lengths)]
        if sum(group_sizes) != len(document_lengths):
            raise ValueError(f"group sizes {list(group_sizes)} do not add up to the "
                             f"{len(document_lengths)} documents")
        kept = sentence_lengths > 0
        kept_per_doc = _kept_per_document(kept, document_lengths)
        nonempty = kept_per_doc > 0
        self.tokens = tokens  # [T]
        kept_lengths = sentence_lengths if kept.all() else sentence_lengths[kept]
        del kept
        self.sentence_starts = _starts(kept_lengths)  # [S+1]
        del kept_lengths
        self.doc_sentences = _starts(kept_per_doc[nonempty])  # [D+1]
        del kept_per_doc
        docs_per_group = _kept_per_document(nonempty, np.asarray(group_sizes, np.int64))
        self.group_docs = _starts(docs_per_group)  # [G+1]

    @property
    def num_documents(self) -> int:
        return len(self.doc_sentences) - 1

    @property
    def num_groups(self) -> int:
        return len(self.group_docs) - 1

    def sentences_per_document(self) -> np.ndarray:
        return np.diff(self.doc_sentences)

    def document_tokens(self, doc: int) -> np.ndarray:
        """All tokens of document `doc`."""
        first, stop = self.doc_sentences[doc], self.doc_sentences[doc + 1]
        return self.tokens[self.sentence_starts[first]:self.sentence_starts[stop]]

    def group(self, g: int) -> tuple[int, int]:
        """Documents [first, stop) of group g."""
        return int(self.group_docs[g]), int(self.group_docs[g + 1])

    @property
    def num_multi_sentence(self) -> int:
        """Documents with at least two sentences: the only sources of IsNext pairs."""
        return int((self.sentences_per_document() >= 2).sum())


def _kept_per_document(kept: np.ndarray, document_lengths: np.ndarray) -> np.ndarray:
    """int64 [D]: the kept sentences of each document (or kept documents of each group),
    summed document by document: no index array as long as the sentences."""
    if kept.all():  # the usual case: no empty sentence
        return np.array(document_lengths, np.int64)
    counts = np.zeros(len(document_lengths), np.int64)
    has_sentences = document_lengths > 0  # reduceat would count an empty one's neighbour
    firsts = _starts(document_lengths)[:-1][has_sentences]
    counts[has_sentences] = np.add.reduceat(kept, firsts, dtype=np.int64)
    return counts


def _starts(lengths: np.ndarray) -> np.ndarray:
    """int64 [n+1]: 0 and the running sums of `lengths`, written in place."""
    starts = np.empty(len(lengths) + 1, np.int64)
    starts[0] = 0
    np.cumsum(lengths, out=starts[1:])
    return starts


def _token_ids(tokens: object) -> np.ndarray:
    """int32 ids: an array (converted), or kept as it is when it already reads as int32 without
    being one (a token store's memory-mapped `TokenArray`: ids stay on disk until read)."""
    if not isinstance(tokens, np.ndarray) and getattr(tokens, "dtype", None) == np.int32:
        return tokens  # type: ignore[return-value]
    return np.asarray(tokens, np.int32)


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


class Instances(NamedTuple):
    """Token ranges of a table of instances, one entry per instance, in `Corpus.tokens`.

    Segment A is tokens[a_start:a_stop] of document `doc`; B is tokens[b_start:b_stop] of
    document `b_doc`, or absent when b_doc == -1 (single segments, nsp=False).
    Planned tables keep them compact (`index_dtypes`: int32 where the corpus fits, labels
    int8); any integer dtype reads the same.
    """

    doc: np.ndarray  # [N]
    a_start: np.ndarray  # [N]
    a_stop: np.ndarray  # [N]
    b_doc: np.ndarray  # [N]
    b_start: np.ndarray  # [N]
    b_stop: np.ndarray  # [N]
    label: np.ndarray  # [N], next_sentence_label: 0 IsNext, 1 random next

    def take(self, rows: np.ndarray) -> Instances:
        return Instances(*(field[rows] for field in self))

    @classmethod
    def permuted(cls, fields: list[np.ndarray], rows: np.ndarray) -> Instances:
        """`Instances(*fields).take(rows)`, emptying `fields` as it goes: each field's copy
        is dropped as soon as it is taken, so the table is never held twice."""
        taken = []
        while fields:
            taken.append(fields.pop(0)[rows])
        return cls(*taken)

    @classmethod
    def concatenate(cls, tables: Sequence[Instances]) -> Instances:
        return cls(*(np.concatenate(fields) for fields in zip(*tables, strict=True)))


def truncation(len_a: np.ndarray, len_b: np.ndarray, max_tokens: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """Tokens to cut from A and B: one at a time from the longer (B on ties) until they fit."""
    len_a, len_b = np.asarray(len_a, np.int64), np.asarray(len_b, np.int64)
    excess = np.maximum(len_a + len_b - max_tokens, 0)
    first_a = np.minimum(np.maximum(len_a - len_b, 0), excess)  # evens out the longer one
    first_b = np.minimum(np.maximum(len_b - len_a, 0), excess)
    rest = excess - first_a - first_b  # then alternately, B first
    return first_a + rest // 2, first_b + (rest + 1) // 2


def _chunk_end(starts: np.ndarray, first: np.ndarray, target: np.ndarray, stop: np.ndarray
               ) -> np.ndarray:
    """End sentence of the chunk from `first`: the first reaching `target` tokens, < `stop`."""
    end = np.searchsorted(starts, starts[first] + target, side="left")
    return np.minimum(np.maximum(end, first + 1), stop)


def _fraction(rng: np.random.Generator, n: np.ndarray) -> np.ndarray:
    """Uniform ints in [0, n) for n >= 1 (0 where n <= 1)."""
    return (rng.random(n.shape) * np.maximum(n, 1)).astype(np.int64)


def plan_instances(
    corpus: Corpus,
    rng: np.random.Generator,
    *,
    max_seq_length: int,
    short_seq_prob: float = 0.1,
    nsp: bool = True,
    documents: tuple[int, int] | None = None,
    sources: np.ndarray | None = None,
) -> Instances:
    """All instances of the documents [first, stop) (default all), document after document.

    `sources` (document ids within the range, in any order) plans those documents only, in
    that order: a window of a shuffled epoch. Random next segments come from the range's
    other documents either way.
    """
    if max_seq_length < (5 if nsp else 3):
        raise ValueError(
            f"max_seq_length={max_seq_length} leaves no room for tokens: use at least "
            f"{5 if nsp else 3} (with nsp={nsp})"
        )
    lo, hi = documents or (0, corpus.num_documents)
    max_tokens = max_seq_length - (3 if nsp else 2)
    starts, doc_sentences = corpus.sentence_starts, corpus.doc_sentences
    sentences = np.diff(doc_sentences)  # [D]
    doc = np.arange(lo, hi) if sources is None else np.asarray(sources, np.int64)
    doc = doc[sentences[doc] >= (2 if nsp else 1)]  # sources of segment A
    if nsp and hi - lo < 2:
        doc = doc[:0]
    i, stop = doc_sentences[doc], doc_sentences[doc + 1]  # each document's cursor and end
    position, ids = index_dtypes(corpus)
    sources = doc  # the documents of segment A, in order
    # each live document's place among the sources
    source: np.ndarray = np.arange(doc.size, dtype=ids)
    per_source = np.zeros(doc.size, np.int64)  # instances planned from it
    steps: list[tuple[np.ndarray | None, ...]] = []  # step k: the k-th instance of each live source
    while doc.size:  # each step's temporaries dropped once used: step 0 spans every document
        short = rng.random(doc.size) < short_seq_prob
        target = np.where(short, rng.integers(2, max_tokens + 1, doc.size), max_tokens)
        del short
        j = _chunk_end(starts, i, target, stop)
        if not nsp:
            cut = np.maximum(starts[j] - starts[i] - max_tokens, 0)
            front = rng.binomial(cut, 0.5)
            steps.append((source, None, (starts[i] + front).astype(position),
                          (starts[j] - (cut - front)).astype(position), None, None, None, None))
            del target, cut, front
            i = j
        else:
            is_random = rng.random(doc.size) < 0.5
            single = ~is_random & (j - i == 1)  # IsNext needs two sentences
            i, j = i - (single & (j == stop)), j + (single & (j < stop))
            del single
            a_end = i + 1 + _fraction(rng, j - i - 1)
            a_start, a_stop = starts[i], starts[a_end]
            other = lo + rng.integers(0, hi - lo - 1, doc.size)
            other += other >= doc
            first = doc_sentences[other] + _fraction(rng, sentences[other])
            b_end = _chunk_end(starts, first, target - (a_stop - a_start), doc_sentences[other + 1])
            del target
            b_doc: np.ndarray = np.where(is_random, other, doc).astype(ids)
            del other
            b_start = np.where(is_random, starts[first], a_stop)
            del first
            b_stop = np.where(is_random, starts[b_end], starts[j])
            del b_end
            i = np.where(is_random, a_end, j)  # a random next puts the unused sentences back
            del a_end, j
            cut_a, cut_b = truncation(a_stop - a_start, b_stop - b_start, max_tokens)
            front_a, front_b = rng.binomial(cut_a, 0.5), rng.binomial(cut_b, 0.5)
            a_start = (a_start + front_a).astype(position)
            a_stop = (a_stop - (cut_a - front_a)).astype(position)
            del cut_a, front_a
            b_start = (b_start + front_b).astype(position)
            b_stop = (b_stop - (cut_b - front_b)).astype(position)
            del cut_b, front_b
            steps.append((source, None, a_start, a_stop, b_doc, b_start, b_stop,
                          is_random.astype(LABEL_DTYPE)))
            del a_start, a_stop, b_doc, b_start, b_stop, is_random
        per_source[source] += 1
        live = i < stop
        doc, i, stop, source = doc[live], i[live], stop[live], source[live]
        del live
    return _document_major(steps, sources, per_source, position, ids)


LABEL_DTYPE = np.int8  # next_sentence_label: 0 IsNext, 1 random next


def index_dtypes(corpus: Corpus) -> tuple[type, type]:
    """(token position, document) dtypes of the corpus's instances: int32 where the corpus's
    tokens and documents fit (half the bytes), else int64 (past 2**31 tokens: ~16 GB of text)."""
    fits = lambda n: n < 2**31  # noqa: E731
    return (np.int32 if fits(corpus.tokens.size) else np.int64,
            np.int32 if fits(corpus.num_documents) else np.int64)


def _document_major(steps: list[tuple[np.ndarray | None, ...]], sources: np.ndarray,
                    per_source: np.ndarray, position: type, ids: type) -> Instances:
    """The instances of all steps, document after document and each document's in step order.

    Step k holds (the place of each source still live, in order, then the fields of its k-th
    instance, None for the document and the fields nsp=False leaves out): that instance goes
    to row (the source's first row) + k. Written one field at a time, each step's arrays of a
    field released once placed, so the planned table is never held twice."""
    firsts = np.cumsum(per_source) - per_source
    total = int(per_source.sum())
    fields: list[np.ndarray] = [np.repeat(sources.astype(ids), per_source)]
    for f, dtype in enumerate((position, position, ids, position, position, LABEL_DTYPE),
                              start=2):
        if steps and steps[0][f] is None:  # single segments: no B (b_doc -1), label IsNext
            fields.append(np.full(total, -1 if f == 4 else 0, dtype))
            continue
        field: np.ndarray = np.empty(total, dtype)
        for k, step in enumerate(steps):
            field[firsts[step[0]] + k] = step[f]
            steps[k] = (*step[:f], None, *step[f + 1:])
        fields.append(field)
    return Instances(*fields)


def pack(corpus: Corpus, instances: Instances, special: SpecialIds, max_seq_length: int
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`[CLS] A [SEP] B [SEP]` (or `[CLS] A [SEP]`) padded: input_ids, input_mask, segment_ids.

    All int32 [N, L], for every instance of the table at once: one gather from the flat
    tokens, then the separators, [CLS] and padding written over it.
    """
    rows = np.arange(len(instances.doc))
    len_a = instances.a_stop - instances.a_start  # [N]
    has_b = instances.b_doc >= 0  # [N]
    len_b = np.where(has_b, instances.b_stop - instances.b_start, 0)  # [N]
    b_first = len_a + 2  # [N] position of B's first token
    length = np.where(has_b, b_first + len_b + 1, len_a + 2)[:, None]  # [N, 1]
    pos = np.arange(max_seq_length)[None, :]  # [1, L]
    in_b = pos >= b_first[:, None]  # [N, L]: B, its [SEP] and the padding after it
    source = pos + np.where(in_b, (instances.b_start - b_first)[:, None],
                            (instances.a_start - 1)[:, None])  # [N, L] token index
    np.clip(source, 0, corpus.tokens.size - 1, out=source)  # outside A and B: overwritten
    input_ids = corpus.tokens[source]  # [N, L]
    input_ids[:, 0] = special.cls
    input_ids[rows, len_a + 1] = special.sep
    input_ids[rows[has_b], (b_first + len_b)[has_b]] = special.sep
    padding = pos >= length  # [N, L]
    input_ids[padding] = special.pad
    segment_ids = (in_b & ~padding).astype(np.int32)  # empty without B: B starts at length
    return input_ids, (~padding).astype(np.int32), segment_ids
