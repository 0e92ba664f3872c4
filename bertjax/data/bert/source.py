"""The BERT pretraining source (gin: `bert_pretraining_source`): masked-LM (+ NSP) examples.

What BERT brings to the data-source base (`bertjax.data.source`): a WordPiece vocabulary
(vocab.txt, cased or uncased), tokenization of every sentence in a tf.data pipeline into one
flat token array, and the examples of `bertjax.data.bert.instances` (sentence pairs, masked),
built in blocks of hundreds by numpy and handed to tf.data as blocks. Host shards are blocks
of the per-host batch, so a global batch is the same for any number of hosts.

Static masking can read its examples from a seqio cache instead (`cache_dir`): the cache is
written once by seqio's Beam pipeline (`bertjax.data.bert.cache`, DirectRunner or
Dataflow) and holds exactly the examples this source would build for the same settings;
training from it needs the vocabulary but never reads or tokenizes the corpus.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import jax
import numpy as np

from bertjax.data.bert.documents import (
    ID_FEATURES,
    default_max_predictions,
    encode_sentences,
    group_bounds,
    read_group,
    tokenize_documents,
)
from bertjax.data.bert.instances import (
    PretrainingConfig,
    check_groups,
    feature_spec,
    iterate_blocks,
    make_stream,
    shortest_instance,
)
from bertjax.data.bert.masking import SpecialIds, continuation_mask
from bertjax.data.bert.nsp import Corpus, check_corpus
from bertjax.data.packing import check_per_row
from bertjax.data.source import (
    STORE_PREFIX,
    DataError,
    Example,
    FeatureSpec,
    Source,
    has_tf_data,
)
from bertjax.data.store.format import Chunk
from bertjax.files import as_path
from bertjax.tokenizers.wordpiece import WordPieceVocabulary, learn_vocabulary, write_vocab

if TYPE_CHECKING:
    import seqio

    from bertjax.data.store.reader import TokenStore

S = TypeVar("S")  # a cache settings class (bertjax.data.bert.cache.Settings)


class BertPretrainingSource(Source):
    """Masked-LM (+ NSP) batches over one corpus; see the module docstring."""

    setting, task_prefix = "bert_pretraining_source", "pretrain"
    vocab_kind, vocab_files = "wordpiece", {"vocab": "vocab.txt"}
    id_features = ID_FEATURES
    seqio_vocabulary = "WordPieceSeqio"

    def __init__(
        self,
        corpus: str = "stdlib",
        corpus_format: str = "bert",
        vocab: str = "learn",
        vocab_size: int = 30522,
        lower_case: bool = True,
        nsp: bool = True,
        masked_lm_prob: float = 0.15,
        max_predictions_per_seq: int | None = None,
        short_seq_prob: float = 0.1,
        whole_word_masking: bool = False,
        masking: str = "dynamic",
        dupe_factor: int = 10,
        static_groups: int = 1,
        cache_dir: str = "",
        seed: int = 0,
        text_key: str = "text",
        packed_sequences: int = 0,
    ):
        super().__init__(corpus, corpus_format, vocab, vocab_size, seed, text_key)
        self.lower_case = lower_case
        self.options = dict(
            nsp=nsp,
            masked_lm_prob=masked_lm_prob,
            short_seq_prob=short_seq_prob,
            whole_word_masking=whole_word_masking,
            masking=masking,
            dupe_factor=dupe_factor,
            static_groups=static_groups,
        )
        self.max_predictions = max_predictions_per_seq
        self.cache_dir = cache_dir
        if cache_dir and corpus.startswith(STORE_PREFIX):
            raise DataError(f"{self.setting}.cache_dir is built from text, not a token store: "
                            f"set {self.setting}.corpus to the text, or leave cache_dir empty")
        if cache_dir and masking != "static":
            raise DataError(f"{self.setting}.cache_dir holds static examples: set "
                            f"{self.setting}.masking='static' or leave cache_dir empty")
        if packed_sequences and (masking != "dynamic" or packed_sequences < 2):
            raise DataError(f"{self.setting}.packed_sequences={packed_sequences} packs rows of "
                            f"dynamically masked instances: set it to 0, or to 2 or more with "
                            f"{self.setting}.masking='dynamic'")
        self.packed_sequences = packed_sequences
        self.corpus: Corpus | None = None
        self._group_sizes: list[int] | None = None

    # ---------------------------------------------------------------- vocabulary and corpus

    def learn_vocab(self, view: Sequence, vocab_size: int, directory: pathlib.Path) -> None:
        sentences = (s for doc in view for s in doc)
        write_vocab(learn_vocabulary(sentences, vocab_size, self.lower_case),
                    directory / self.vocab_files["vocab"])

    def load_vocab(self, files: dict[str, pathlib.Path]) -> WordPieceVocabulary:
        return WordPieceVocabulary(str(files["vocab"]), lower_case=self.lower_case)

    @property
    def vocab_path(self) -> str:
        """The vocab.txt in use (given, learned or the workdir's), once prepared."""
        self._vocab()
        return str(self._files["vocab"])

    @property
    def groups(self) -> int:
        return self.options["static_groups"] if self.options["masking"] == "static" else 1

    def read_documents(self) -> list[list[str]]:
        """The corpus's documents, noting the static groups (see `read_group`) they fall in."""
        groups = self.groups
        if groups > 1 and self.corpus_name.startswith("tfds:") and jax.process_count() == 1:
            parts = [read_group(self.corpus_name, self.corpus_format, self.text_key, groups, g)
                     for g in range(groups)]
            self._group_sizes = [len(part) for part in parts]
            return [document for part in parts for document in part]
        documents = super().read_documents()
        self._group_sizes = np.diff(group_bounds(len(documents), groups)).tolist()
        return documents

    def encode(self, view: Sequence) -> None:
        self.corpus = tokenize_documents(view, self.vocab, group_sizes=self._group_sizes)
        self._check_corpus()

    # ---------------------------------------------------------------- token store

    store_family = "bert"

    def store_options(self) -> dict[str, Any]:
        return {"lower_case": self.lower_case}

    def encode_documents(self, documents: list[list[str]]) -> Chunk:
        tokens, lengths = encode_sentences(documents, self.vocab)
        return Chunk(tokens, lengths, np.array([len(doc) for doc in documents], np.int64))

    def from_store(self, store: TokenStore) -> None:
        """The corpus of the store's ids (memory-mapped), in the static groups its document
        count gives, as `read_documents` splits a corpus read whole."""
        sizes = np.diff(group_bounds(store.num_documents, self.groups)).tolist()
        sentences_per_document, tokens_per_sentence = store.boundaries()
        self.corpus = Corpus.from_arrays(store.tokens, tokens_per_sentence,
                                         sentences_per_document, sizes)
        self._check_corpus()

    def _check_corpus(self) -> None:
        try:
            check_corpus(self.corpus, self.options["nsp"])
            check_groups(self.corpus, self.options["nsp"])
        except ValueError as e:
            raise DataError(f"{self.setting}: {e}") from None

    def prepare(self, workdir: str | os.PathLike) -> None:
        """As the base; with a cache_dir only the vocabulary, which the cache was built with."""
        if not self.cache_dir:
            return super().prepare(workdir)
        kept = as_path(workdir) / self.vocab_files["vocab"]
        if self.vocab_spec == "learn" and not kept.is_file():
            raise DataError(f"{self.setting}.cache_dir needs the vocabulary the cache was built "
                            f"with: set {self.setting}.vocab to its vocab.txt")
        self._load_or_learn(as_path(workdir), [])

    def tokenizer_options(self) -> dict[str, Any]:
        return {"lower_case": self.lower_case}

    @property
    def documents_per_host(self) -> bool:
        return super().documents_per_host and not self.cache_dir  # a cache holds them all

    # ---------------------------------------------------------------- examples

    def config(self, seq_length: int) -> PretrainingConfig:
        """The examples at `seq_length`; one line when packed rows of that length cannot hold
        packed_sequences instances (refused before the run writes anything)."""
        predictions = self.max_predictions or default_max_predictions(
            seq_length, self.options["masked_lm_prob"]
        )
        shortest = shortest_instance(self.options["nsp"])
        check_per_row(f"PACKED_SEQUENCES ({self.setting}.packed_sequences)",
                      self.packed_sequences, seq_length, shortest,
                      f"instances of {shortest}+ tokens")
        return PretrainingConfig(
            max_seq_length=seq_length, max_predictions_per_seq=predictions,
            packed_sequences=self.packed_sequences, **self.options
        )

    def feature_spec(self, seq_length: int, batch_size: int) -> FeatureSpec:
        return feature_spec(self.config(seq_length))

    def row_facts(self) -> dict[str, Any]:
        """How many instances a row packs (0: one per row): a resume that changes it is told."""
        return {"packed_sequences": self.packed_sequences}

    def cache_settings(self, seq_length: int, settings_class: type[S]) -> S:
        """The cache settings (`bertjax.data.bert.cache.Settings`) whose cache holds what this
        source builds at `seq_length`."""
        options = {k: v for k, v in self.options.items() if k != "masking"}
        return settings_class(corpus=self.corpus_name, vocab=self.vocab_path,
                              seq_length=seq_length, seed=self.seed,
                              corpus_format=self.corpus_format, text_key=self.text_key,
                              lower_case=self.lower_case,
                              max_predictions_per_seq=self.config(seq_length).max_predictions_per_seq,
                              **options)

    def cache_task(self, seq_length: int) -> seqio.Task:
        """The seqio Task of this source's cache at `seq_length`; a one-line error if absent."""
        from bertjax.data.bert import (
            cache as pretraining_cache,  # seqio caching: only with a cache_dir
        )

        settings = self.cache_settings(seq_length, pretraining_cache.Settings)
        return pretraining_cache.cached_task(settings, self.cache_dir, self.setting)

    def batches(self, start_index: int, seq_length: int, batch_size: int
                ) -> Iterator[dict[str, np.ndarray]]:
        if self.cache_dir:
            if not has_tf_data():
                raise DataError(f"{self.setting}.cache_dir is a seqio cache, which needs "
                                "TensorFlow and seqio, and this host has not both: install "
                                "them (pip install bertjax's requirements) or train from the "
                                "corpus or a token store (bertjax-prepare)")
            self.cache_task(seq_length)  # fail here, in one line, not inside tf.data
        return super().batches(start_index, seq_length, batch_size)

    def example_blocks(self, seq_length: int, batch_size: int, start_index: int,
                       shard_index: int, shard_count: int) -> Iterator[Example]:
        """Host shards are blocks of `batch_size` examples (see `iterate_blocks`)."""
        config = self.config(seq_length)
        if self.cache_dir:
            from bertjax.data.bert import cache as pretraining_cache

            stream = pretraining_cache.CachedStaticStream(
                self.cache_task(seq_length), self.seed, config.static_groups,
                owner=(shard_index, shard_count, batch_size))
        else:
            vocab = self._vocab()
            continuation = continuation_mask(vocab.tokens) if config.whole_word_masking else None
            stream = make_stream(self.corpus, SpecialIds.from_vocabulary(vocab), config,
                                 self.seed, continuation)
        return iterate_blocks(stream, start_index=start_index, process_index=shard_index,
                              process_count=shard_count, block_size=batch_size)

    def examples(self, seq_length: int, batch_size: int, start_index: int, shard_index: int,
                 shard_count: int) -> Iterator[Example]:
        """The examples of `example_blocks`, one by one."""
        for block in self.example_blocks(seq_length, batch_size, start_index, shard_index,
                                         shard_count):
            for row in range(len(block["input_ids"])):
                yield {key: value[row] for key, value in block.items()}
