"""ELMo pretraining examples: padded sentences, or windows of a long token stream.

    sentences --tokenize--> token strings --> EncodedCorpus: each distinct token ("type") once,
        with its word id and character ids; sentences as arrays of type ids, <S> ... </S>

Sentence mode (deterministic): global example i is piece perm_e[i mod N] of epoch e = i // N,
where pieces are sentences cut to at most T - 2 words, each inside <S> ... </S> and padded to
T; perm_e is the seeded permutation of data/index_shuffle.py, evaluated one block of examples
at a time. Host p of P takes the examples i with i mod P == p.

Stream mode (truncated BPTT, as bilm-tf trained): each epoch concatenates the sentences in a
seeded order into one stream, cut into G rows (G = the global batch size). Global example i is
window k of row r (r = i mod G): tokens [kT, kT + T] of the row for the forward LM and of the
reversed row for the backward LM. Row r keeps its place in every batch, so the LSTM state a
step leaves for row r is the right start for row r's next window. Host p of P takes rows
[pG/P, (p+1)G/P), so row r is global batch row r whatever the host count.

Both are pure functions of (seed, global example index): a resume starts at any index.

Nothing is copied whole: the corpus is one flat array of type ids (a token store's stay on
disk) with each sentence's start, a piece is found from the sentences' cumulative piece
counts, and an epoch's stream is the shuffled sentences' cumulative lengths, so an example
reads only its own ids.
"""

from __future__ import annotations

import array
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np

from bertjax.data.index_shuffle import shuffled_index
from bertjax.data.source import DataError
from bertjax.tokenizers.elmo_vocab import BOS, EOS, ElmoVocabulary, word_char_ids

MODES = ("sentence", "stream")
BOS_TYPE, EOS_TYPE = 0, 1  # every corpus's first two types: each sentence starts and ends so


class FlatIds(Protocol):
    """A flat array of int32 type ids: a numpy array, or a token store's lazily read
    `TokenArray` (slices read only the ids asked for)."""

    def __len__(self) -> int: ...

    def __getitem__(self, key: slice) -> np.ndarray: ...


@dataclasses.dataclass(frozen=True)
class EncodedCorpus:
    """Sentences as type ids; per type its word id and character ids.

    The sentences lie end to end in one flat array, `tokens`, which is never copied whole: a
    store's tokens stay on disk and an example reads only its own ids, so opening a corpus
    costs memory and time in its number of sentences (small index arrays), not its tokens."""

    type_word_ids: np.ndarray  # [K] int32
    type_char_ids: np.ndarray  # [K, C] int16
    tokens: FlatIds  # [N] type ids of every <S> w_1 .. w_n </S>, sentence after sentence
    sentence_starts: np.ndarray  # [S + 1] int64: sentence j is tokens[starts[j]:starts[j + 1]]

    @property
    def num_sentences(self) -> int:
        return len(self.sentence_starts) - 1

    @property
    def num_tokens(self) -> int:
        return int(self.sentence_starts[-1])

    @property
    def sentence_lengths(self) -> np.ndarray:
        """[S] int64: each sentence's tokens, <S> and </S> included."""
        return np.diff(self.sentence_starts)


def encode_corpus(
    token_lists: Sequence[Sequence[str]], vocab: ElmoVocabulary, max_chars: int
) -> EncodedCorpus:
    """Type ids of every sentence (empty ones dropped), <S> and </S> added."""
    types, tokens, lengths = type_sentences(token_lists)
    return typed_corpus(types, tokens, lengths, vocab, max_chars)


def type_sentences(token_lists: Sequence[Sequence[str]]
                   ) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(the types in order of first use, <S> and </S> first; every non-empty sentence's type
    ids inside <S> ... </S>, end to end, as int32; each such sentence's length, as int64)."""
    index: dict[str, int] = {BOS: BOS_TYPE, EOS: EOS_TYPE}
    ids, lengths = array.array("i"), array.array("q")
    for tokens in token_lists:
        if tokens:
            ids.append(BOS_TYPE)
            ids.extend(index.setdefault(t, len(index)) for t in tokens)
            ids.append(EOS_TYPE)
            lengths.append(len(tokens) + 2)
    return (list(index), np.frombuffer(ids, np.int32) if ids else np.zeros(0, np.int32),
            np.frombuffer(lengths, np.int64) if lengths else np.zeros(0, np.int64))


def typed_corpus(types: Sequence[str], tokens: FlatIds, sentence_lengths: np.ndarray,
                 vocab: ElmoVocabulary, max_chars: int) -> EncodedCorpus:
    """The EncodedCorpus of flat type ids cut into sentences of the given lengths: each
    type's word id and character ids. `tokens` is kept as it is (a store's ids stay lazy)."""
    chars = np.stack([word_char_ids(t, max_chars) for t in types]).astype(np.int16)
    starts = np.zeros(len(sentence_lengths) + 1, np.int64)
    np.cumsum(sentence_lengths, out=starts[1:])
    if starts[-1] != len(tokens):
        raise DataError(f"the sentences hold {starts[-1]} tokens but the corpus has "
                        f"{len(tokens)}: rebuild the token store with bertjax-prepare")
    return EncodedCorpus(vocab.token_ids(list(types)), chars, tokens, starts)


@dataclasses.dataclass(frozen=True)
class SentencePieces:
    """Sentences cut to at most `words` words, in order, each piece to be put inside
    <S> ... </S>. No table of pieces is made: piece p is found from each sentence's
    cumulative piece count, so cutting costs one vectorized pass over the sentence starts."""

    sentence_starts: np.ndarray  # [S + 1] int64: the corpus's
    ends: np.ndarray  # [S] int64: pieces of sentences 0 .. s
    words: int

    def __len__(self) -> int:
        return int(self.ends[-1]) if self.ends.size else 0

    def locate(self, pieces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(where each piece's first word lies in corpus.tokens, its words) of piece ids."""
        pieces = np.asarray(pieces, np.int64)
        sentence = np.searchsorted(self.ends, pieces, side="right")
        before = np.where(sentence > 0, self.ends[sentence - 1], 0)  # earlier sentences' pieces
        offset = (pieces - before) * self.words
        start = self.sentence_starts[sentence]
        body = self.sentence_starts[sentence + 1] - start - 2  # words between <S> and </S>
        return start + 1 + offset, np.minimum(self.words, body - offset)


def sentence_pieces(corpus: EncodedCorpus, seq_length: int) -> SentencePieces:
    """Sentences cut to at most seq_length - 2 words, in order."""
    words = seq_length - 2
    if words < 1:
        raise DataError(f"sequence length {seq_length} leaves no room for words between <S> and "
                        "</S>: set train.seq_phases lengths >= 3")
    counts = -(-(np.diff(corpus.sentence_starts) - 2) // words)
    return SentencePieces(corpus.sentence_starts, np.cumsum(counts), words)


ORDER_BLOCK = 256  # examples whose place in the epoch's order is computed at once


def iterate_sentences(
    corpus: EncodedCorpus, seq_length: int, seed: int, start_index: int,
    process_index: int = 0, process_count: int = 1, chars: bool = True,
) -> Iterator[dict[str, np.ndarray]]:
    """Sentence-mode examples (see the module docstring), endless. Epoch e's order is the
    seeded permutation `shuffled_index(., n, (seed, e))`, evaluated for a block of examples
    at a time: nothing the size of the corpus is drawn before the first example."""
    pieces = sentence_pieces(corpus, seq_length)
    n = len(pieces)
    if n == 0:
        raise DataError("the corpus has no sentences: point elmo_source.corpus at text")
    i = start_index + (process_index - start_index) % process_count
    while True:
        indices = i + process_count * np.arange(ORDER_BLOCK, dtype=np.int64)
        order = np.empty(ORDER_BLOCK, np.int64)
        for epoch in np.unique(indices // n).tolist():
            here = indices // n == epoch
            order[here] = shuffled_index(indices[here] % n, n, (seed, epoch))
        starts, lengths = pieces.locate(order)
        for start, words in zip(starts.tolist(), lengths.tolist(), strict=True):
            yield sentence_example(corpus, start, words, seq_length, chars)
        i += process_count * ORDER_BLOCK


def sentence_example(corpus: EncodedCorpus, start: int, words: int, seq_length: int,
                     chars: bool) -> dict[str, np.ndarray]:
    """The example of the piece of `words` words at corpus.tokens[start:]: <S> piece </S>,
    padded to seq_length."""
    length = words + 2
    types = np.zeros(seq_length, np.int32)
    types[0], types[length - 1] = BOS_TYPE, EOS_TYPE
    types[1:length - 1] = corpus.tokens[start:start + words]
    example = {
        "token_ids": np.where(np.arange(seq_length) < length,
                              corpus.type_word_ids[types], 0).astype(np.int32),
        "lengths": np.int32(length),
    }
    if chars:
        char_ids = corpus.type_char_ids[types].astype(np.int32)
        char_ids[length:] = 0  # padded tokens
        example["char_ids"] = char_ids
    return example


class EpochStream:
    """One epoch's stream: the sentences end to end in a seeded order, never put together.
    `ends` are the permuted sentences' cumulative lengths, so a range of the stream is read
    as one slice of corpus.tokens per sentence it touches."""

    def __init__(self, corpus: EncodedCorpus, seed: int, epoch: int):
        self.corpus = corpus
        self.order = np.random.default_rng([seed, epoch, 1]).permutation(corpus.num_sentences)
        self.ends = np.cumsum(corpus.sentence_lengths[self.order])

    def __len__(self) -> int:
        return self.corpus.num_tokens

    def read(self, start: int, stop: int) -> np.ndarray:
        """Type ids of stream positions [start, stop), as int32."""
        if stop <= start:
            return np.zeros(0, np.int32)
        first = int(np.searchsorted(self.ends, start, side="right"))
        last = int(np.searchsorted(self.ends, stop - 1, side="right"))
        parts = []
        for k in range(first, last + 1):
            j = int(self.order[k])
            begin = int(self.ends[k]) - int(self.corpus.sentence_starts[j + 1] -
                                            self.corpus.sentence_starts[j])  # stream position
            lo, hi = max(start, begin) - begin, min(stop, int(self.ends[k])) - begin
            at = int(self.corpus.sentence_starts[j])
            parts.append(self.corpus.tokens[at + lo:at + hi])
        return np.concatenate(parts).astype(np.int32, copy=False)


def stream_windows_per_epoch(corpus: EncodedCorpus, seq_length: int, global_batch: int) -> int:
    """Windows of T + 1 tokens each of the G rows yields per epoch (>= 1, or a DataError)."""
    row_length = corpus.num_tokens // global_batch
    windows = (row_length - 1) // seq_length
    if windows < 1:
        raise DataError(f"the corpus has {corpus.num_tokens} tokens: too few for {global_batch} "
                        f"rows of {seq_length + 1}; lower train.batch_size or the sequence length")
    return windows


def iterate_stream(
    corpus: EncodedCorpus, seq_length: int, global_batch: int, seed: int, start_index: int,
    process_index: int = 0, process_count: int = 1, chars: bool = True,
) -> Iterator[dict[str, np.ndarray]]:
    """Stream-mode examples for this host's rows (see the module docstring), endless."""
    G, T = global_batch, seq_length
    if start_index % G:
        raise DataError(f"stream data must resume at a multiple of the global batch {G}, "
                        f"not example {start_index}: keep train.batch_size when resuming")
    if G % process_count:
        raise DataError(f"global batch {G} does not split over {process_count} hosts")
    windows = stream_windows_per_epoch(corpus, T, G)
    row_length = corpus.num_tokens // G
    rows = range(process_index * G // process_count, (process_index + 1) * G // process_count)
    window, epoch, stream = start_index // G, -1, None
    while True:
        if window // windows != epoch:
            epoch = window // windows
            stream = EpochStream(corpus, seed, epoch)
        assert stream is not None  # made in the first pass: epoch starts at -1
        k = window % windows
        for r in rows:
            row = r * row_length  # the row is stream[row:row + row_length]
            forward = stream.read(row + k * T, row + k * T + T + 1)
            # the reversed row's window k: row positions L - 1 - kT down to L - 1 - kT - T
            backward = stream.read(row + row_length - k * T - T - 1,
                                   row + row_length - k * T)[::-1]
            example = {
                "token_ids": corpus.type_word_ids[forward[:-1]],
                "next_token_ids": corpus.type_word_ids[forward[1:]],
                "reverse_token_ids": corpus.type_word_ids[backward[:-1]],
                "reverse_next_token_ids": corpus.type_word_ids[backward[1:]],
            }
            if chars:
                example["char_ids"] = corpus.type_char_ids[forward[:-1]].astype(np.int32)
                example["reverse_char_ids"] = corpus.type_char_ids[backward[:-1]].astype(np.int32)
            yield example
        window += 1


def feature_spec(mode: str, seq_length: int, max_chars: int, chars: bool) -> dict[str, tuple]:
    """{feature: (shape, dtype)} of one example."""
    T, C = seq_length, max_chars
    if mode == "sentence":
        spec = {"token_ids": ((T,), np.int32), "lengths": ((), np.int32)}
        char_names = ("char_ids",)
    else:
        spec = {name: ((T,), np.int32) for name in
                ("token_ids", "next_token_ids", "reverse_token_ids", "reverse_next_token_ids")}
        char_names = ("char_ids", "reverse_char_ids")
    if chars:
        spec.update({name: ((T, C), np.int32) for name in char_names})
    return spec

