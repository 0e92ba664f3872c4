"""seqio Tasks for BERT pretraining, one registered per corpus and sequence length.

    corpus sentences --(tf.data + WordPieceVocabulary.encode_tf)--> token ids per sentence
        --> Corpus (numpy) --(nsp.py pairs, masking.py)--> fixed-shape examples

The split names the first global example: "train[12345:]" resumes at example 12345, so a
resume never re-masks what it skips. Shards (`seqio.ShardInfo`, one per host) are disjoint
blocks: with `block_size` b, host p of P takes the global examples i with (i // b) % P == p.
With b = the per-host batch, a global batch is the same examples, in the same order, for any
number of hosts.
"""

import re
from collections.abc import Sequence

import numpy as np
import seqio
import tensorflow as tf

from bertjax.data.masking import SpecialIds, continuation_mask
from bertjax.data.nsp import Corpus
from bertjax.data.pretraining import PretrainingConfig, feature_spec, iterate_examples
from bertjax.data.wordpiece import WordPieceVocabulary

_SPLIT = re.compile(r"^train(?:\[(\d+):\])?$")


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


def parse_split(split: str) -> int:
    """ "train" -> 0, "train[123:]" -> 123 (the first global example index)."""
    match = _SPLIT.match(split)
    if match is None:
        raise ValueError(f"split {split!r} is not 'train' or 'train[N:]'")
    return int(match.group(1) or 0)


class PretrainingSource(seqio.DataSource):
    """Endless, deterministic stream of masked (NSP) examples over an in-memory Corpus."""

    def __init__(
        self,
        corpus: Corpus,
        special: SpecialIds,
        config: PretrainingConfig,
        is_continuation: np.ndarray | None = None,
        block_size: int = 1,
    ):
        super().__init__(splits=["train"], caching_permitted=False)
        self.corpus, self.special, self.config = corpus, special, config
        self.is_continuation, self.block_size = is_continuation, block_size

    @property
    def supports_arbitrary_sharding(self) -> bool:
        return True

    def list_shards(self, split: str) -> list[str]:
        return [split]

    def get_dataset(
        self,
        split: str = "train",
        shuffle: bool = True,
        seed: int | None = None,
        shard_info: seqio.ShardInfo | None = None,
        *,
        sequence_length: object = None,
        use_cached: bool = False,
        num_epochs: int | None = 1,
    ) -> tf.data.Dataset:
        del shuffle, sequence_length, use_cached, num_epochs  # shuffling is seeded inside
        start = parse_split(split)
        index, count = (shard_info.index, shard_info.num_shards) if shard_info else (0, 1)
        spec = feature_spec(self.config)

        def generate():  # noqa: ANN202
            return iterate_examples(
                self.corpus,
                self.special,
                self.config,
                seed=seed or 0,
                start_index=start,
                process_index=index,
                process_count=count,
                is_continuation=self.is_continuation,
                block_size=self.block_size,
            )

        signature = {
            k: tf.TensorSpec(shape, tf.as_dtype(dtype)) for k, (shape, dtype) in spec.items()
        }
        return tf.data.Dataset.from_generator(generate, output_signature=signature)


def output_features(vocab: WordPieceVocabulary) -> dict[str, seqio.Feature]:
    """seqio features of a pretraining example (checked for dtype and rank by seqio)."""
    ids = lambda: seqio.Feature(vocab, add_eos=False)  # noqa: E731
    raw = lambda dtype=tf.int32, rank=1: seqio.Feature(  # noqa: E731
        seqio.PassThroughVocabulary(1), add_eos=False, dtype=dtype, rank=rank
    )
    return {
        "input_ids": ids(),
        "input_mask": raw(),
        "segment_ids": raw(),
        "masked_lm_positions": raw(),
        "masked_lm_ids": ids(),
        "masked_lm_weights": raw(tf.float32),
        "next_sentence_label": raw(rank=0),
    }


def register_pretraining_task(
    name: str,
    corpus: Corpus,
    vocab: WordPieceVocabulary,
    config: PretrainingConfig,
    block_size: int = 1,
) -> seqio.Task:
    """Register (or replace) the seqio Task `name` producing BERT pretraining examples."""
    special = SpecialIds.from_vocabulary(vocab)
    is_continuation = continuation_mask(vocab.tokens) if config.whole_word_masking else None
    source = PretrainingSource(corpus, special, config, is_continuation, block_size)
    if name in seqio.TaskRegistry.names():
        seqio.TaskRegistry.remove(name)
    return seqio.TaskRegistry.add(name, source=source, output_features=output_features(vocab))
