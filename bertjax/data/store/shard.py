"""A shard's ids as a read-only 1-D array whose reads fetch only the ids asked for.

`ShardIds` turns numpy's keys (a slice, an int, an integer array with negative ids) into one
of two reads that each kind of shard implements: `_span(start, stop)`, the ids of one range,
and `_gather(positions)`, the ids at valid, non-negative positions. LocalShard (local.py)
reads them from local disk by positioned reads; RangedShard (ranged.py) from object storage
by ranged requests.
"""

from __future__ import annotations

import os

import numpy as np


class ShardIds:
    """One shard's `count` ids of `dtype` at `path`: slices and integer-array indexing read
    only what they name; `np.asarray` reads it whole."""

    ndim = 1

    def __init__(self, path: str | os.PathLike, dtype: np.dtype, count: int) -> None:
        self.path, self.dtype, self.size = os.fspath(path), np.dtype(dtype), count
        self.shape = (count,)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: slice | int | np.ndarray) -> np.ndarray:
        if isinstance(key, slice):
            start, stop, step = key.indices(self.size)
            ids = self._span(start, max(stop, start))
            return ids[::step] if step != 1 else ids
        positions = np.asarray(key)
        if positions.ndim == 0:
            return self[positions.reshape(1)][0]
        positions = np.where(positions < 0, positions + self.size, positions)
        if positions.size == 0:
            return np.zeros(positions.shape, self.dtype)
        if positions.min() < 0 or positions.max() >= self.size:
            raise IndexError(f"{self.path}: an index is out of its {self.size} ids")
        return self._gather(positions)

    def _span(self, start: int, stop: int) -> np.ndarray:
        """ids[start:stop] (0 <= start <= stop <= size)."""
        raise NotImplementedError

    def _gather(self, positions: np.ndarray) -> np.ndarray:
        """ids[positions] for non-empty positions within [0, size), in their shape."""
        raise NotImplementedError
