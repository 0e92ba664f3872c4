"""The BERT pretraining source (gin: `bert_pretraining_source`): masked-LM (+ NSP) examples.

What BERT brings to the data-source base (`bertjax.data.source`): a WordPiece vocabulary
(vocab.txt, cased or uncased), tokenization of every sentence in a tf.data pipeline into one
flat token array, and the examples of `bertjax.data.pretraining` (sentence pairs, masked),
built in blocks of hundreds by numpy and handed to tf.data as blocks. Host shards are blocks
of the per-host batch, so a global batch is the same for any number of hosts.

Static masking can read its examples from a seqio cache instead (`cache_dir`): the cache is
written once by seqio's Beam pipeline (`bertjax.data.pretraining_cache`, DirectRunner or
Dataflow) and holds exactly the examples this source would build for the same settings;
training from it needs the vocabulary but never reads or tokenizes the corpus.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import numpy as np
import tensorflow as tf

from bertjax.data import corpora
from bertjax.data.masking import SpecialIds, continuation_mask
from bertjax.data.nsp import Corpus, check_corpus
from bertjax.data.pretraining import (
    PretrainingConfig,
    check_groups,
    feature_spec,
    iterate_blocks,
    make_stream,
)
from bertjax.data.source import DataError, Example, FeatureSpec, Source, load_documents
from bertjax.data.wordpiece import WordPieceVocabulary, learn_vocabulary, write_vocab
from bertjax.files import as_path


def default_max_predictions(seq_length: int, masked_lm_prob: float) -> int:
    """The paper's caps: 20 predictions at length 128, 80 at 512 (rounded up to a multiple of 4)."""
    return 4 * math.ceil(seq_length * masked_lm_prob / 4)


def tokenize_documents(
    documents: Sequence[Sequence[str]],
    vocab: WordPieceVocabulary,
    batch_size: int = 1024,
    group_sizes: Sequence[int] | None = None,
) -> Corpus:
    """Token ids of every sentence, computed in a tf.data pipeline, as one flat Corpus."""
    sentences = [s for doc in documents for s in doc]

    def encode(batch: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        ids = vocab.encode_tf(batch)  # [batch, (ids)]
        return ids.flat_values, ids.row_lengths()

    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(sentences, tf.string))
    dataset = dataset.batch(batch_size).map(encode, num_parallel_calls=tf.data.AUTOTUNE)
    tokens, lengths = [np.zeros(0, np.int32)], [np.zeros(0, np.int64)]
    for flat, row_lengths in dataset.as_numpy_iterator():
        tokens.append(flat.astype(np.int32))
        lengths.append(row_lengths.astype(np.int64))
    return Corpus.from_arrays(np.concatenate(tokens), np.concatenate(lengths),
                              np.array([len(doc) for doc in documents], np.int64), group_sizes)


def group_bounds(count: int, groups: int) -> list[int]:
    """Group g of `count` documents is [bounds[g], bounds[g + 1]): contiguous, even shares."""
    return [g * count // groups for g in range(groups + 1)]


def read_group(corpus: str, corpus_format: str, text_key: str, groups: int, group: int,
               data_dir: str | None = None) -> list[list[str]]:
    """The documents of group `group` of `groups` of a corpus setting, read alone if it can be.

    A TFDS corpus's group is a slice of its split's examples, read without the rest; other
    corpora are read whole and sliced (their text is small next to its tokens).
    """
    if not corpus.startswith("tfds:"):
        documents = load_documents(corpus, corpus_format, text_key)
        bounds = group_bounds(len(documents), groups)
        return documents[bounds[group]:bounds[group + 1]]
    import tensorflow_datasets as tfds  # heavy: only for TFDS corpora

    name, _, split = corpus[len("tfds:"):].partition(":")
    split = split or "train"
    if "[" in split:
        raise corpora.CorpusError(f"corpus {corpus!r}: a static group reads a slice of the split "
                                  "itself; name a whole split (e.g. 'train')")
    count = tfds.builder(name, data_dir=data_dir).info.splits[split].num_examples
    bounds = group_bounds(count, groups)
    return list(corpora.tfds_documents(name, f"{split}[{bounds[group]}:{bounds[group + 1]}]",
                                       text_key, data_dir))


class BertPretrainingSource(Source):
    """Masked-LM (+ NSP) batches over one corpus; see the module docstring."""

    setting, task_prefix = "bert_pretraining_source", "pretrain"
    vocab_kind, vocab_files = "wordpiece", {"vocab": "vocab.txt"}
    id_features = ("input_ids", "masked_lm_ids")

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
        if cache_dir and masking != "static":
            raise DataError(f"{self.setting}.cache_dir holds static examples: set "
                            f"{self.setting}.masking='static' or leave cache_dir empty")
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
        try:
            check_corpus(self.corpus, self.options["nsp"])
            check_groups(self.corpus, self.options["nsp"])
        except ValueError as e:
            raise DataError(f"{self.setting}: {e}") from None

    def prepare(self, workdir: str) -> None:
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
        predictions = self.max_predictions or default_max_predictions(
            seq_length, self.options["masked_lm_prob"]
        )
        return PretrainingConfig(
            max_seq_length=seq_length, max_predictions_per_seq=predictions, **self.options
        )

    def feature_spec(self, seq_length: int, batch_size: int) -> FeatureSpec:
        return feature_spec(self.config(seq_length))

    def cache_task(self, seq_length: int) -> Any:
        """The seqio Task of this source's cache at `seq_length`; a one-line error if absent."""
        from bertjax.data import pretraining_cache  # seqio caching: only with a cache_dir

        settings = pretraining_cache.Settings.of_source(self, seq_length)
        return pretraining_cache.cached_task(settings, self.cache_dir, self.setting)

    def batches(self, start_index: int, seq_length: int, batch_size: int
                ) -> Iterator[dict[str, np.ndarray]]:
        if self.cache_dir:
            self.cache_task(seq_length)  # fail here, in one line, not inside tf.data
        return super().batches(start_index, seq_length, batch_size)

    def example_blocks(self, seq_length: int, batch_size: int, start_index: int,
                       shard_index: int, shard_count: int) -> Iterator[Example]:
        """Host shards are blocks of `batch_size` examples (see `iterate_blocks`)."""
        config = self.config(seq_length)
        if self.cache_dir:
            from bertjax.data import pretraining_cache

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
