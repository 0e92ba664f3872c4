"""Examples held in memory as arrays (an encoded fine-tuning set), as a training-loop source
(bertjax.training.data_source.DataSource).

Global example g is row order_e[g mod n] of epoch e = g // n, where order_e is a permutation
seeded by (seed, e): a pure function of (seed, g), so a run resumes at any example. Each
global batch of B rows is split into contiguous per-host blocks, as the pretraining sources
split theirs, so a batch is the same rows on 1 host or 16.

With `buckets` (see length_buckets.py) each epoch's order is regrouped so that a batch holds
rows of similar length, and every batch is cut to the bucket of its longest row (computed over
the global batch, so all hosts cut alike). The order is still a pure function of (seed, g).
"""

import hashlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax
import numpy as np

from bertjax.finetune.length_buckets import LengthBuckets, group_by_length, row_lengths

GROUP_BATCHES = 50  # rows are sorted by length within runs of this many global batches


class InMemorySource:
    """What every source of in-memory fine-tuning rows shares: the arrays ({feature: [n, ...]}),
    the seed, and what the workdir record keeps of the data (`name`; `save_files(workdir)`
    writes the files the run's record names, fine-tuning's task.json and tokenizer, and
    returns the record's tokenizer part)."""

    setting = "the fine-tuning data"
    corpus_name: str | None = None  # set by `name`

    def __init__(self, arrays: Mapping[str, np.ndarray], seed: int, tokenizer: dict | None,
                 name: str | None, save_files: Callable[[Any], dict] | None):
        self.corpus_name, self._save_files = name, save_files
        self.arrays = {k: np.asarray(v) for k, v in arrays.items()}
        self.seed, self.tokenizer = seed, dict(tokenizer or {})

    @property
    def vocab_size(self) -> int:
        """Ids the examples use: one more than the largest input id."""
        ids = self.arrays.get("input_ids")
        return int(ids.max()) + 1 if ids is not None and ids.size else 0

    def prepare(self, workdir: object = None) -> None:
        """Nothing to read: the examples are in memory."""

    def row_facts(self) -> dict[str, Any]:
        """Nothing beyond the batch size: a row is one example."""
        return {}

    def save(self, workdir: object = None) -> dict:
        """The tokenizer description the workdir record keeps, its files written by
        `save_files` when given (the loop calls this before the first step)."""
        if self._save_files is not None and workdir is not None:
            return self._save_files(workdir)
        return self.tokenizer


class ArraySource(InMemorySource):
    """Batches of rows of `arrays` ({feature: [n, ...]}), shuffled anew every epoch."""

    def __init__(self, arrays: Mapping[str, np.ndarray], seed: int = 0, shuffle: bool = True,
                 tokenizer: dict | None = None, buckets: LengthBuckets | None = None,
                 name: str | None = None, save_files: Callable[[Any], dict] | None = None):
        """`name` and `save_files`: as for InMemorySource; `buckets`: batches of rows of
        similar length, cut to their bucket (the module docstring)."""
        sizes = {len(v) for v in arrays.values()}
        if len(sizes) != 1 or 0 in sizes:
            raise ValueError(f"fine-tuning arrays must all hold the same number (> 0) of "
                             f"examples, not {sorted(sizes)}")
        super().__init__(arrays, seed, tokenizer, name, save_files)
        self.num_examples = sizes.pop()
        self.shuffle = shuffle
        self.buckets = buckets
        self.lengths = row_lengths(self.arrays["input_mask"]) if buckets else None
        self._orders: dict[tuple[int, int], np.ndarray] = {}

    def feature_spec(self, seq_length: int, batch_size: int) -> dict[str, tuple]:
        del seq_length, batch_size  # the arrays have their own shapes
        return {k: (v.shape[1:], v.dtype) for k, v in self.arrays.items()}

    def epoch_order(self, epoch: int, global_batch: int) -> np.ndarray:
        """The rows of `epoch` in the order the run visits them (the last two are cached)."""
        key = (epoch, global_batch)
        if key not in self._orders:
            if len(self._orders) > 1:
                self._orders.pop(next(iter(self._orders)))
            self._orders[key] = self._order(epoch, global_batch)
        return self._orders[key]

    def _order(self, epoch: int, global_batch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.num_examples)
        order = np.random.default_rng([self.seed, epoch]).permutation(self.num_examples)
        if self.buckets is None:
            return order
        rng = np.random.default_rng([self.seed, epoch, 1])
        return group_by_length(order, self.lengths, GROUP_BATCHES * global_batch, global_batch,
                               rng)

    def padded_length(self, batch: Mapping[str, np.ndarray], seq_length: int) -> int:
        """Tokens per row: the length bucket the batch was cut to, else `seq_length`."""
        if self.buckets is None:
            return seq_length
        return batch[self.buckets.token_features[0]].shape[-1]

    def rows(self, start_index: int, count: int, global_batch: int) -> np.ndarray:
        """Row numbers of global examples start_index .. start_index + count - 1 of a run with
        this global batch size."""
        g = np.arange(start_index, start_index + count)
        epochs, within = np.divmod(g, self.num_examples)
        orders = {e: self.epoch_order(e, global_batch) for e in np.unique(epochs)}
        return np.array([orders[e][i] for e, i in zip(epochs, within, strict=True)])

    def batches(self, start_index: int, seq_length: int, batch_size: int
                ) -> Iterator[dict[str, np.ndarray]]:
        """This host's block of every global batch from global example `start_index` on;
        `batch_size` is the per-host batch."""
        del seq_length
        hosts, host = jax.process_count(), jax.process_index()
        global_batch = batch_size * hosts
        start = start_index
        while True:
            rows = self.rows(start, global_batch, global_batch)
            batch = {k: v[rows[host * batch_size:(host + 1) * batch_size]]
                     for k, v in self.arrays.items()}
            if self.buckets is not None:
                batch = self.buckets.cut(batch, self.buckets.bucket(self.lengths[rows].max()))
            yield batch
            start += global_batch


def describe(name: str, arrays: Mapping[str, np.ndarray]) -> str:
    """`name` with the number of rows and a digest of the encoded arrays: what model.json
    records of a fine-tuning run's training data, so a rerun on other data says so."""
    digest = hashlib.sha256()
    for key in sorted(arrays):
        digest.update(key.encode() + np.ascontiguousarray(arrays[key]).tobytes())
    rows = len(next(iter(arrays.values())))
    return f"{name} ({rows} rows, sha256 {digest.hexdigest()[:12]})"
