"""Packed fine-tuning rows: several encoded examples per training row (`finetune.packed_sequences`).

Sentence classification sets are short against the length they are padded to (AG News:
median 41 WordPiece tokens of 128), so most of an unpacked step is padding. Packed, each
epoch's shuffled examples are laid out up to K to a row (bertjax/data/packing.py: best fit
within windows, positions restarting per example, attention within each example), and the
[CLS] heads read one prediction per example. Evaluation and prediction pack their rows too
(bertjax/finetune/evaluate.py: predict_packed).

A packed step holds `rows` rows, about `rows * examples_per_row` examples: `rows_per_step`
picks the rows so that a step trains on the recipe's batch size of examples on average, and
the run's steps are counted in examples as unpacked, so the schedule and the number of
examples seen do not change.

Global row g of a run is row g - starts[e] of epoch e, whose rows pack the permutation of
(seed, e): a pure function of (seed, g), so a run resumes at any row. Each global batch is
split into contiguous per-host blocks, as ArraySource does.
"""

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax
import numpy as np

from bertjax.data.packing import pack_lengths, pack_tokens, slot_values
from bertjax.finetune.arrays import InMemorySource

INPUT_TOKENS = ("input_ids", "segment_ids")  # token features besides the input mask


class PackedArraySource(InMemorySource):
    """Packed batches of the rows of `arrays` ({feature: [n, ...]}: input_ids, segment_ids,
    input_mask [n, L] and per-example targets [n]), packed anew every epoch."""

    def __init__(self, arrays: Mapping[str, np.ndarray], packed_sequences: int, seed: int = 0,
                 tokenizer: dict | None = None, name: str | None = None,
                 save_files: Callable[[Any], dict] | None = None):
        """`name` and `save_files`: as for InMemorySource."""
        super().__init__(arrays, seed, tokenizer, name, save_files)
        self.K = packed_sequences
        mask = self.arrays["input_mask"]
        self.num_examples, self.length = mask.shape
        self.lengths = mask.astype(bool).sum(1)
        self.targets = [k for k in self.arrays if k not in (*INPUT_TOKENS, "input_mask")]
        wide = [k for k in self.targets if self.arrays[k].ndim != 1]
        if wide:
            raise ValueError(f"packed rows carry one target per example, not {wide}: set "
                             "finetune.packed_sequences = 0 for this task")
        self._epochs: dict[int, np.ndarray] = {}
        self._starts = [0]  # global row of the first row of epochs 0, 1, ...

    def feature_spec(self, seq_length: int, batch_size: int) -> dict[str, tuple]:
        del seq_length, batch_size
        L, K = (self.length,), (self.K,)
        spec = {k: (L, np.int32) for k in (*INPUT_TOKENS, "input_mask", "position_ids",
                                           "sequence_ids")}
        spec.update(cls_positions=(K, np.int32), sequence_weights=(K, np.float32))
        spec.update({k: (K, self.arrays[k].dtype) for k in self.targets})
        return spec

    def epoch_rows(self, epoch: int) -> np.ndarray:
        """int64 [R, K]: the examples of each row of `epoch` (-1: unused slot); the last
        two epochs are kept."""
        if epoch not in self._epochs:
            if len(self._epochs) > 1:
                self._epochs.pop(next(iter(self._epochs)))
            order = np.random.default_rng([self.seed, epoch]).permutation(self.num_examples)
            local = pack_lengths(self.lengths[order], self.length, self.K,
                                 np.random.default_rng([self.seed, epoch, 2]))
            self._epochs[epoch] = np.where(local >= 0, order[np.maximum(local, 0)], -1)
        return self._epochs[epoch]

    def examples_per_row(self) -> float:
        """Examples a row holds on average (the first epoch's packing)."""
        return self.num_examples / len(self.epoch_rows(0))

    def rows_per_step(self, examples_per_step: int, multiple: int = 1) -> int:
        """Rows a step takes to train on about `examples_per_step` examples: a multiple of
        `multiple` (the data-parallel devices), at least one such multiple."""
        rows = examples_per_step / self.examples_per_row() / multiple
        return max(1, round(rows)) * multiple

    def padded_length(self, batch: Mapping[str, np.ndarray], seq_length: int) -> int:
        return self.length

    def members(self, start: int, count: int) -> np.ndarray:
        """int64 [count, K]: the examples of global rows start .. start + count - 1."""
        out = []
        g = start
        while len(out) < count:
            while self._starts[-1] <= g:
                self._starts.append(self._starts[-1] + len(self.epoch_rows(len(self._starts) - 1)))
            epoch = int(np.searchsorted(self._starts, g, side="right") - 1)
            rows = self.epoch_rows(epoch)
            take = min(count - len(out), self._starts[epoch + 1] - g)
            out.extend(rows[g - self._starts[epoch]:g - self._starts[epoch] + take])
            g += take
        return np.asarray(out, np.int64)

    def batch(self, members: np.ndarray) -> dict[str, np.ndarray]:
        """The packed rows of `members` [R, K]."""
        tokens = {k: self.arrays[k] for k in INPUT_TOKENS}
        packed, _ = pack_tokens(tokens, self.arrays["input_mask"], members)
        packed["sequence_weights"] = (members >= 0).astype(np.float32)
        for k in self.targets:
            packed[k] = slot_values(self.arrays[k], members)
        return packed

    def batches(self, start_index: int, seq_length: int, batch_size: int
                ) -> Iterator[dict[str, np.ndarray]]:
        """This host's block of every global batch of rows from global row `start_index` on;
        `batch_size` is the per-host number of rows."""
        del seq_length
        hosts, host = jax.process_count(), jax.process_index()
        global_batch, start = batch_size * hosts, start_index
        while True:
            members = self.members(start, global_batch)
            yield self.batch(members[host * batch_size:(host + 1) * batch_size])
            start += global_batch
