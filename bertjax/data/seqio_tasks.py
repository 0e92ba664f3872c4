"""A source's examples as a registered seqio Task, and its batches through tf.data.

This is where the sources meet seqio and TensorFlow; `bertjax.data.source` imports it only when
both are installed, so a host with JAX alone (an accelerator image) still trains, from
`bertjax.data.python_batches`. The seqio split "train[N:]" starts at global example N, so a
resume never replays what it skips; a `seqio.ShardInfo` (one per host) selects that host's
examples. Python hands examples to tf.data in blocks, which tf.data unbatches: crossing from
Python into tf.data costs hundreds of microseconds per call, more than building a BERT example.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import seqio
import tensorflow as tf

# A source's examples and their spec, as bertjax.data.source names them: spelled out again
# here because that module imports this one.
Example = dict[str, np.ndarray]
FeatureSpec = dict[str, tuple[tuple[int, ...], type]]
_SPLIT = re.compile(r"^train(?:\[(\d+):\])?$")


def parse_split(split: str) -> int:
    """ "train" -> 0, "train[123:]" -> 123 (the first global example index)."""
    match = _SPLIT.match(split)
    if match is None:
        raise ValueError(f"split {split!r} is not 'train' or 'train[N:]'")
    return int(match.group(1) or 0)


class ExampleSource(seqio.DataSource):
    """Endless, deterministic examples of `generate(start_index, shard_index, shard_count)`.

    `generate` yields blocks: every feature with a leading example axis.
    """

    def __init__(self, generate: Callable[[int, int, int], Iterator[Example]],
                 spec: FeatureSpec) -> None:
        super().__init__(splits=["train"], caching_permitted=False)
        self.generate, self.spec = generate, spec

    @property
    def supports_arbitrary_sharding(self) -> bool:
        return True

    def list_shards(self, split: str) -> list[str]:
        return [split]

    def get_dataset(self, split: str = "train", shuffle: bool = True, seed: int | None = None,
                    shard_info: seqio.ShardInfo | None = None, *, sequence_length: object = None,
                    use_cached: bool = False, num_epochs: int | None = 1) -> tf.data.Dataset:
        del shuffle, seed, sequence_length, use_cached, num_epochs  # the generator is seeded
        start = parse_split(split)
        index, count = (shard_info.index, shard_info.num_shards) if shard_info else (0, 1)
        signature = {k: tf.TensorSpec((None, *shape), tf.as_dtype(dtype))
                     for k, (shape, dtype) in self.spec.items()}
        blocks = tf.data.Dataset.from_generator(lambda: self.generate(start, index, count),
                                                output_signature=signature)
        return blocks.unbatch()


def register_task(name: str, source: ExampleSource, vocab: seqio.Vocabulary,
                  id_features: Sequence[str]) -> seqio.Task:
    """Register (or replace) the seqio Task `name`: id features use `vocab`, the rest pass."""
    features = {
        key: seqio.Feature(vocab if key in id_features else seqio.PassThroughVocabulary(1),
                           add_eos=False, dtype=tf.as_dtype(dtype), rank=len(shape))
        for key, (shape, dtype) in source.spec.items()
    }
    if name in seqio.TaskRegistry.names():
        seqio.TaskRegistry.remove(name)
    return seqio.TaskRegistry.add(name, source=source, output_features=features)


def task_batches(task: seqio.Task, start_index: int, shard: tuple[int, int], seed: int,
                 batch_size: int) -> Iterator[dict[str, np.ndarray]]:
    """`task`'s batches of `batch_size` from global example `start_index` on, for host shard
    (index, count), prefetched by tf.data."""
    dataset = task.get_dataset(
        split=f"train[{start_index}:]", shuffle=False, seed=seed,
        shard_info=seqio.ShardInfo(*shard), num_epochs=1, trim_output_features=False,
        try_in_mem_cache=False,
    )
    return numpy_batches(dataset.batch(batch_size, drop_remainder=True).prefetch(2))


def numpy_batches(dataset: tf.data.Dataset) -> Iterator[dict[str, np.ndarray]]:
    """`dataset`'s elements as numpy arrays, from a generator: closing it releases tf.data's
    iterator (and the Python generator feeding it) there and then. A training run closes its
    batches when it ends, failed or not, so the pipeline is finalized while the interpreter
    runs: left to the interpreter's shutdown after a failed run, TensorFlow logs an error
    about finalizing it under the run's one-line error message."""
    yield from dataset.as_numpy_iterator()

