"""The ELMo data source (gin: `elmo_source`): biLM examples over one corpus.

What ELMo brings to the data-source base (`bertjax.data.source`): a word tokenizer ("simple" or
"whitespace"), a frequency-ordered word vocabulary in bilm-tf's layout (elmo_vocab.txt, words
seen >= `min_count` times), character ids of `max_chars` per token (`chars=False` leaves them
out, for a word-encoder model), and the sentence or stream examples of
`bertjax.data.elmo.examples`. In stream mode a host's rows are its share of the global batch.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from bertjax.data.elmo.examples import (
    MODES,
    EncodedCorpus,
    encode_corpus,
    feature_spec,
    iterate_sentences,
    iterate_stream,
    type_sentences,
    typed_corpus,
)
from bertjax.data.source import Example, FeatureSpec, Source
from bertjax.data.store.format import Chunk
from bertjax.tokenizers.elmo_vocab import (
    BOS,
    EOS,
    MAX_CHARS,
    TOKENIZERS,
    ElmoVocabulary,
    learn_vocabulary,
    tokenize,
    write_vocab,
)

if TYPE_CHECKING:
    from bertjax.data.store.reader import TokenStore


class ElmoSource(Source):
    """biLM batches over one corpus; see the module docstring."""

    setting = "elmo_source"
    vocab_kind, vocab_files = "words", {"vocab": "elmo_vocab.txt"}
    id_features = ("token_ids", "next_token_ids", "reverse_token_ids", "reverse_next_token_ids")
    seqio_vocabulary = "WordsSeqio"

    def __init__(self, corpus: str = "stdlib", corpus_format: str = "bert", mode: str = "sentence",
                 vocab: str = "learn", vocab_size: int = 793471, min_count: int = 1,
                 tokenizer: str = "simple", max_chars: int = MAX_CHARS, chars: bool = True,
                 seed: int = 0, text_key: str = "text"):
        if mode not in MODES:
            raise ValueError(f"unknown ELMo data mode {mode!r}: set elmo_source.mode to "
                             "sentence or stream")
        if tokenizer not in TOKENIZERS:
            raise ValueError(f"unknown tokenizer {tokenizer!r}: set elmo_source.tokenizer to "
                             f"{' or '.join(TOKENIZERS)}")
        super().__init__(corpus, corpus_format, vocab, vocab_size, seed, text_key)
        self.mode, self.min_count, self.tokenizer = mode, min_count, tokenizer
        self.max_chars, self.chars = max_chars, chars
        self.corpus: EncodedCorpus | None = None

    @property
    def task_prefix(self) -> str:
        return f"elmo_{self.mode}"

    def corpus_view(self, documents: list[list[str]]) -> list[list[str]]:
        """The tokens of every sentence (sentences without any left out)."""
        token_lists = (tokenize(s, self.tokenizer) for doc in documents for s in doc)
        return [tokens for tokens in token_lists if tokens]

    def learn_vocab(self, view: Sequence, vocab_size: int, directory: pathlib.Path) -> None:
        write_vocab(learn_vocabulary(view, vocab_size, self.min_count),
                    directory / self.vocab_files["vocab"])

    def load_vocab(self, files: dict[str, pathlib.Path]) -> ElmoVocabulary:
        return ElmoVocabulary(files["vocab"])

    def encode(self, view: Sequence) -> None:
        self.corpus = encode_corpus(view, self.vocab, self.max_chars)

    # A token store of ELMo holds type ids: the ids of the corpus's own word types, each
    # shard naming the types it is the first to use, so a run derives word and character ids
    # of the run's vocabulary and max_chars when it opens the store.
    store_family = "elmo"

    def store_options(self) -> dict[str, Any]:
        return {"tokenizer": self.tokenizer}

    def store_id_bound(self) -> int | None:
        return None  # word types: as many as the corpus has

    def encode_documents(self, documents: list[list[str]]) -> Chunk:
        per_document = [self.corpus_view([doc]) for doc in documents]
        types, tokens, lengths = type_sentences([s for doc in per_document for s in doc])
        return Chunk(tokens, lengths,
                     np.array([len(doc) for doc in per_document], np.int64), types[2:])

    def from_store(self, store: TokenStore) -> None:
        """The store's ids stay where they are (read lazily, an example's at a time): opening
        costs the sentence index, not the corpus."""
        types = [BOS, EOS, *store.types()]
        self.corpus = typed_corpus(types, store.tokens, store.tokens_per_sentence, self.vocab,
                                   self.max_chars)

    def tokenizer_options(self) -> dict[str, Any]:
        return {"word_tokenizer": self.tokenizer}

    def feature_spec(self, seq_length: int, batch_size: int) -> FeatureSpec:
        return feature_spec(self.mode, seq_length, self.max_chars, self.chars)

    def examples(self, seq_length: int, batch_size: int, start_index: int, shard_index: int,
                 shard_count: int) -> Iterator[Example]:
        """Stream rows: the global batch is `batch_size` rows from each of the shards."""
        if self.mode == "sentence":
            return iterate_sentences(self.corpus, seq_length, self.seed, start_index, shard_index,
                                     shard_count, self.chars)
        return iterate_stream(self.corpus, seq_length, batch_size * shard_count, self.seed,
                              start_index, shard_index, shard_count, self.chars)
