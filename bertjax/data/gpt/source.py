"""Causal-LM data: documents joined by <|endoftext|>, packed into fixed-length sequences.

    documents --(byte-level BPE)--> ids + [EOS] + ids + [EOS] ...   one token stream
    example i of an epoch: stream[c*L : c*L + L] -> input_ids, stream[c*L+1 : c*L+L+1] -> targets

where chunk c is the i-th of a seeded permutation of the epoch's (len - 1) // L chunks. No
padding, so every loss weight is 1; the weights are there for batches that do pad (eval,
fine-tuning). Global example g belongs to epoch g // N; host p of P takes the g with
g % P == p, and the split "train[g:]" starts at example g, so a resume skips nothing twice.

`LmPretrainingSource` is what the training loop consumes (gin: lm_pretraining_source): the
data-source base (`bertjax.data.source`) with a byte-level BPE (vocab.json + merges.txt, learned
from at most LEARN_CHARS characters of the corpus, or given) and these packed examples. A TFDS
corpus's documents are its texts' sentences joined by newlines.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from bertjax.data.source import DataError, Example, FeatureSpec, Source
from bertjax.data.store.format import Chunk
from bertjax.tokenizers.bpe import ByteLevelBPE, learn_bpe

if TYPE_CHECKING:
    from bertjax.data.store.reader import TokenStore

LEARN_CHARS = 200_000_000  # vocabulary learning reads at most this much text


# ---------------------------------------------------------------- packing


def pack_documents(documents_ids: Sequence[Sequence[int]], eos_id: int) -> np.ndarray:
    """One int32 token stream: each document's ids followed by EOS."""
    pieces = [np.append(np.asarray(ids, np.int32), np.int32(eos_id)) for ids in documents_ids]
    return np.concatenate(pieces) if pieces else np.zeros((0,), np.int32)


def num_chunks(stream_length: int, seq_length: int) -> int:
    """Examples per epoch: chunks of `seq_length` inputs, each with its next-token target."""
    return max(stream_length - 1, 0) // seq_length


def iterate_lm_examples(stream: np.ndarray, seq_length: int, seed: int = 0, shuffle: bool = True,
                        start_index: int = 0, process_index: int = 0, process_count: int = 1,
                        num_examples: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Examples g >= start_index with g % process_count == process_index, endlessly."""
    chunks = num_chunks(len(stream), seq_length)
    if chunks == 0:
        raise DataError(
            f"the corpus has {len(stream)} tokens, fewer than seq_length + 1 = {seq_length + 1}: "
            "use a bigger corpus or a shorter train.seq_phases length"
        )
    g = start_index + (process_index - start_index) % process_count
    weights = np.ones((seq_length,), np.float32)
    epoch, order, produced = -1, None, 0
    while num_examples is None or produced < num_examples:
        if g // chunks != epoch:
            epoch = g // chunks
            order = np.random.default_rng([seed, epoch]).permutation(chunks) if shuffle else None
        j = g % chunks
        start = int(order[j] if shuffle else j) * seq_length
        yield {
            "input_ids": stream[start:start + seq_length],
            "target_ids": stream[start + 1:start + seq_length + 1],
            "loss_weights": weights,
        }
        g += process_count
        produced += 1


# ---------------------------------------------------------------- the training loop's source


class LmPretrainingSource(Source):
    """Packed next-token batches over one corpus; see the module docstring."""

    setting, task_prefix = "lm_pretraining_source", "lm"
    vocab_kind, vocab_files = "bpe", {"vocab": "vocab.json", "merges": "merges.txt"}
    id_features = ("input_ids", "target_ids")
    seqio_vocabulary = "BpeSeqio"

    def __init__(self, corpus: str = "stdlib", corpus_format: str = "bert", vocab: str = "learn",
                 vocab_size: int = 50257, shuffle: bool = True, seed: int = 0,
                 text_key: str = "text"):
        super().__init__(corpus, corpus_format, vocab, vocab_size, seed, text_key)
        self.shuffle = shuffle
        self.stream: np.ndarray | None = None

    def corpus_view(self, documents: list[list[str]]) -> list[str]:
        """Whole texts: sentences joined by newlines (one a line in the corpus), else spaces."""
        lines = self.corpus_format == "bert" and self.corpus_name != "stdlib"
        return [("\n" if lines else " ").join(doc) for doc in documents]

    def learn_vocab(self, view: Sequence, vocab_size: int, directory: pathlib.Path) -> None:
        learn_bpe(_prefix(view, LEARN_CHARS), vocab_size).save(directory)

    def load_vocab(self, files: dict[str, pathlib.Path]) -> ByteLevelBPE:
        return ByteLevelBPE.from_files(files["vocab"], files["merges"])

    def encode(self, view: Sequence) -> None:
        bpe = self.vocab
        self.stream = pack_documents([bpe.encode(t) for t in view], bpe.eos_id)

    # A token store of GPT ids holds the stream itself: each document's ids and its EOS as
    # the document's one "sentence", so the store's ids in order are `stream`.
    store_family = "gpt"

    def encode_documents(self, documents: list[list[str]]) -> Chunk:
        bpe = self.vocab
        ids = [bpe.encode(t) for t in self.corpus_view(documents)]
        lengths = np.array([len(i) + 1 for i in ids], np.int64)
        return Chunk(pack_documents(ids, bpe.eos_id), lengths, np.ones(len(ids), np.int64))

    def from_store(self, store: TokenStore) -> None:
        self.stream = store.tokens  # read lazily: slices of the memory maps, as int32

    def feature_spec(self, seq_length: int, batch_size: int) -> FeatureSpec:
        return {"input_ids": ((seq_length,), np.int32), "target_ids": ((seq_length,), np.int32),
                "loss_weights": ((seq_length,), np.float32)}

    def examples(self, seq_length: int, batch_size: int, start_index: int, shard_index: int,
                 shard_count: int) -> Iterator[Example]:
        return iterate_lm_examples(self.stream, seq_length, self.seed, self.shuffle, start_index,
                                   shard_index, shard_count)


def _prefix(texts: list[str], max_chars: int) -> Iterator[str]:
    """Texts until `max_chars` characters have been given."""
    total = 0
    for text in texts:
        if total >= max_chars:
            return
        total += len(text)
        yield text
