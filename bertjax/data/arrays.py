"""Examples held in memory as arrays (an encoded fine-tuning set), as a training-loop source.

Global example g is row order_e[g mod n] of epoch e = g // n, where order_e is a permutation
seeded by (seed, e): a pure function of (seed, g), so a run resumes at any example. Each
global batch of B rows is split into contiguous per-host blocks, as the pretraining sources
split theirs, so a batch is the same rows on 1 host or 16.
"""

from collections.abc import Iterator, Mapping

import jax
import numpy as np


class ArraySource:
    """Batches of rows of `arrays` ({feature: [n, ...]}), shuffled anew every epoch."""

    setting = "the fine-tuning data"

    def __init__(self, arrays: Mapping[str, np.ndarray], seed: int = 0, shuffle: bool = True,
                 tokenizer: dict | None = None):
        sizes = {len(v) for v in arrays.values()}
        if len(sizes) != 1 or 0 in sizes:
            raise ValueError(f"fine-tuning arrays must all hold the same number (> 0) of "
                             f"examples, not {sorted(sizes)}")
        self.arrays = {k: np.asarray(v) for k, v in arrays.items()}
        self.num_examples = sizes.pop()
        self.seed, self.shuffle, self.tokenizer = seed, shuffle, dict(tokenizer or {})

    @property
    def vocab_size(self) -> int:
        """Ids the examples use: one more than the largest input id."""
        ids = self.arrays.get("input_ids")
        return int(ids.max()) + 1 if ids is not None and ids.size else 0

    def prepare(self, workdir: object = None) -> None:
        """Nothing to read: the examples are in memory."""

    def save(self, workdir: object = None) -> dict:
        """The tokenizer description the workdir record keeps (files are the caller's)."""
        return self.tokenizer

    def feature_spec(self, seq_length: int, batch_size: int) -> dict[str, tuple]:
        del seq_length, batch_size  # the arrays have their own shapes
        return {k: (v.shape[1:], v.dtype) for k, v in self.arrays.items()}

    def rows(self, start_index: int, count: int) -> np.ndarray:
        """Row numbers of global examples start_index .. start_index + count - 1."""
        g = np.arange(start_index, start_index + count)
        epochs, within = np.divmod(g, self.num_examples)
        if not self.shuffle:
            return within
        orders = {e: np.random.default_rng([self.seed, e]).permutation(self.num_examples)
                  for e in np.unique(epochs)}
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
            rows = self.rows(start + host * batch_size, batch_size)
            yield {k: v[rows] for k, v in self.arrays.items()}
            start += global_batch
