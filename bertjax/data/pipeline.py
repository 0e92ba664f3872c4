"""The BERT pretraining source (gin: `bert_pretraining_source`): masked-LM (+ NSP) examples.

What BERT brings to the data-source base (`bertjax.data.source`): a WordPiece vocabulary
(vocab.txt, cased or uncased), tokenization of every sentence in a tf.data pipeline, and the
examples of `bertjax.data.pretraining` (sentence pairs, masked), whose host shards are blocks
of the per-host batch so that a global batch is the same for any number of hosts.
"""

import math
import pathlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from bertjax.data.masking import SpecialIds, continuation_mask
from bertjax.data.nsp import Corpus, check_corpus
from bertjax.data.pretraining import PretrainingConfig, feature_spec, iterate_examples
from bertjax.data.source import Example, FeatureSpec, Source
from bertjax.data.wordpiece import WordPieceVocabulary, learn_vocabulary, write_vocab


def default_max_predictions(seq_length: int, masked_lm_prob: float) -> int:
    """The paper's caps: 20 predictions at length 128, 80 at 512 (rounded up to a multiple of 4)."""
    return 4 * math.ceil(seq_length * masked_lm_prob / 4)


def tokenize_documents(
    documents: Sequence[Sequence[str]], vocab: WordPieceVocabulary, batch_size: int = 1024
) -> Corpus:
    """Token ids of every sentence, computed in a tf.data pipeline, grouped by document."""
    sentences = [s for doc in documents for s in doc]
    lengths = [len(doc) for doc in documents]
    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(sentences, tf.string))
    dataset = dataset.batch(batch_size).map(vocab.encode_tf, num_parallel_calls=tf.data.AUTOTUNE)
    ids = [row for batch in dataset.as_numpy_iterator() for row in _rows(batch)]
    bounds = np.cumsum([0, *lengths])
    return Corpus([ids[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)])


def _rows(batch: object) -> list[np.ndarray]:
    """Rows of a (ragged) numpy batch as int32 arrays."""
    if hasattr(batch, "to_list"):
        batch = batch.to_list()
    return [np.asarray(row, np.int32) for row in batch]


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
        seed: int = 0,
    ):
        super().__init__(corpus, corpus_format, vocab, vocab_size, seed)
        self.lower_case = lower_case
        self.options = dict(
            nsp=nsp,
            masked_lm_prob=masked_lm_prob,
            short_seq_prob=short_seq_prob,
            whole_word_masking=whole_word_masking,
            masking=masking,
            dupe_factor=dupe_factor,
        )
        self.max_predictions = max_predictions_per_seq
        self.corpus: Corpus | None = None

    def learn_vocab(self, view: Sequence, vocab_size: int, directory: pathlib.Path) -> None:
        sentences = (s for doc in view for s in doc)
        write_vocab(learn_vocabulary(sentences, vocab_size, self.lower_case),
                    directory / self.vocab_files["vocab"])

    def load_vocab(self, files: dict[str, pathlib.Path]) -> WordPieceVocabulary:
        return WordPieceVocabulary(str(files["vocab"]), lower_case=self.lower_case)

    def encode(self, view: Sequence) -> None:
        self.corpus = tokenize_documents(view, self.vocab)
        check_corpus(self.corpus, self.options["nsp"])

    def tokenizer_options(self) -> dict[str, Any]:
        return {"lower_case": self.lower_case}

    def config(self, seq_length: int) -> PretrainingConfig:
        predictions = self.max_predictions or default_max_predictions(
            seq_length, self.options["masked_lm_prob"]
        )
        return PretrainingConfig(
            max_seq_length=seq_length, max_predictions_per_seq=predictions, **self.options
        )

    def feature_spec(self, seq_length: int, batch_size: int) -> FeatureSpec:
        return feature_spec(self.config(seq_length))

    def examples(self, seq_length: int, batch_size: int, start_index: int, shard_index: int,
                 shard_count: int) -> Iterator[Example]:
        """Host shards are blocks of `batch_size` examples (see `iterate_examples`)."""
        config = self.config(seq_length)
        vocab = self._vocab()
        return iterate_examples(
            self.corpus,
            SpecialIds.from_vocabulary(vocab),
            config,
            seed=self.seed,
            start_index=start_index,
            process_index=shard_index,
            process_count=shard_count,
            is_continuation=continuation_mask(vocab.tokens) if config.whole_word_masking else None,
            block_size=batch_size,
        )
