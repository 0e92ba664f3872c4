"""ELMo pretraining examples: padded sentences, or windows of a long token stream.

    sentences --tokenize--> token strings --> EncodedCorpus: each distinct token ("type") once,
        with its word id and character ids; sentences as arrays of type ids, <S> ... </S>

Sentence mode (deterministic): global example i is piece perm_e[i mod N] of epoch e = i // N,
where pieces are sentences cut to at most T - 2 words, each inside <S> ... </S> and padded to
T; perm_e is a seeded permutation. Host p of P takes the examples i with i mod P == p.

Stream mode (truncated BPTT, as bilm-tf trained): each epoch concatenates the sentences in a
seeded order into one stream, cut into G rows (G = the global batch size). Global example i is
window k of row r (r = i mod G): tokens [kT, kT + T] of the row for the forward LM and of the
reversed row for the backward LM. Row r keeps its place in every batch, so the LSTM state a
step leaves for row r is the right start for row r's next window. Host p of P takes rows
[pG/P, (p+1)G/P), so row r is global batch row r whatever the host count.

Both are pure functions of (seed, global example index): a resume starts at any index.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import numpy as np

from bertjax.data.source import DataError
from bertjax.tokenizers.elmo_vocab import BOS, EOS, ElmoVocabulary, word_char_ids

MODES = ("sentence", "stream")


@dataclasses.dataclass(frozen=True)
class EncodedCorpus:
    """Sentences as type ids; per type its word id and character ids."""

    type_word_ids: np.ndarray  # [K] int32
    type_char_ids: np.ndarray  # [K, C] int16
    sentences: tuple[np.ndarray, ...]  # type ids of <S> w_1 .. w_n </S>

    @property
    def num_tokens(self) -> int:
        return sum(len(s) for s in self.sentences)


def encode_corpus(
    token_lists: Sequence[Sequence[str]], vocab: ElmoVocabulary, max_chars: int
) -> EncodedCorpus:
    """Type ids of every sentence (empty ones dropped), <S> and </S> added."""
    types, sentences = type_sentences(token_lists)
    return typed_corpus(types, sentences, vocab, max_chars)


def type_sentences(token_lists: Sequence[Sequence[str]]) -> tuple[list[str], list[np.ndarray]]:
    """(the types in order of first use, <S> and </S> first; each non-empty sentence as type
    ids inside <S> ... </S>)."""
    index: dict[str, int] = {BOS: 0, EOS: 1}
    sentences = []
    for tokens in token_lists:
        if tokens:
            ids = [0] + [index.setdefault(t, len(index)) for t in tokens] + [1]
            sentences.append(np.asarray(ids, np.int32))
    return list(index), sentences


def typed_corpus(types: Sequence[str], sentences: Sequence[np.ndarray], vocab: ElmoVocabulary,
                 max_chars: int) -> EncodedCorpus:
    """The EncodedCorpus of sentences of type ids: each type's word id and character ids."""
    chars = np.stack([word_char_ids(t, max_chars) for t in types]).astype(np.int16)
    return EncodedCorpus(vocab.token_ids(list(types)), chars, tuple(sentences))


def sentence_pieces(corpus: EncodedCorpus, seq_length: int) -> list[np.ndarray]:
    """Sentences cut to at most seq_length - 2 words, each inside <S> ... </S>."""
    words = seq_length - 2
    if words < 1:
        raise DataError(f"sequence length {seq_length} leaves no room for words between <S> and "
                        "</S>: set train.seq_phases lengths >= 3")
    pieces = []
    for sentence in corpus.sentences:
        body = sentence[1:-1]
        for start in range(0, len(body), words):
            pieces.append(np.concatenate([sentence[:1], body[start:start + words], sentence[-1:]]))
    return pieces


def iterate_sentences(
    corpus: EncodedCorpus, seq_length: int, seed: int, start_index: int,
    process_index: int = 0, process_count: int = 1, chars: bool = True,
) -> Iterator[dict[str, np.ndarray]]:
    """Sentence-mode examples (see the module docstring), endless."""
    pieces = sentence_pieces(corpus, seq_length)
    n = len(pieces)
    if n == 0:
        raise DataError("the corpus has no sentences: point elmo_source.corpus at text")
    i = start_index + (process_index - start_index) % process_count
    epoch, order = -1, None
    while True:
        if i // n != epoch:
            epoch = i // n
            order = np.random.default_rng([seed, epoch]).permutation(n)
        piece = pieces[order[i % n]]
        length = len(piece)
        types = np.zeros(seq_length, np.int32)
        types[:length] = piece
        example = {
            "token_ids": np.where(np.arange(seq_length) < length,
                                  corpus.type_word_ids[types], 0).astype(np.int32),
            "lengths": np.int32(length),
        }
        if chars:
            char_ids = corpus.type_char_ids[types].astype(np.int32)
            char_ids[length:] = 0  # padded tokens
            example["char_ids"] = char_ids
        yield example
        i += process_count


def _epoch_stream(corpus: EncodedCorpus, seed: int, epoch: int) -> np.ndarray:
    order = np.random.default_rng([seed, epoch, 1]).permutation(len(corpus.sentences))
    return np.concatenate([corpus.sentences[j] for j in order])


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
            stream = _epoch_stream(corpus, seed, epoch)
        k = window % windows
        for r in rows:
            row = stream[r * row_length:(r + 1) * row_length]
            forward = row[k * T:k * T + T + 1]
            backward = row[::-1][k * T:k * T + T + 1]
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

