"""A seeded permutation of [0, n) evaluated one index at a time: no array of n entries.

    shuffled_index(np.arange(n), n, (seed, epoch))   # a permutation of range(n)
    shuffled_index(i, n, (seed, epoch))              # its entry i alone, in O(1)

An epoch's order over a corpus of n examples as `rng.permutation(n)` costs n draws and 8n
bytes before the first example, at every start: time and memory that grow with the corpus.
This is a keyed bijection instead (the construction of `tf.random.experimental.index_shuffle`
and of Grain's index shuffling): a balanced Feistel network on the smallest even number of
bits that covers n, with a SplitMix64 finalizer as its round function, and cycle-walking
(re-applying the network to values >= n, which stay inside the network's domain of at most
4n) so that it maps [0, n) onto itself. Different seeds give independent-looking
permutations (tests/data/test_index_shuffle.py checks the positions' uniformity).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

ROUNDS = 6


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer: every output bit depends on every input bit."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@functools.lru_cache(maxsize=16)
def _round_keys(seed: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(list(seed)).integers(0, 2**63, ROUNDS, dtype=np.uint64)


def shuffled_index(index: int | np.ndarray, n: int, seed: Sequence[int]) -> np.ndarray:
    """The entries at `index` (ints in [0, n)) of the permutation of [0, n) that `seed`
    names, in index's shape (int64)."""
    if n < 1:
        raise ValueError(f"a permutation needs n >= 1, not {n}")
    x = np.array(index, dtype=np.int64, ndmin=1)
    shape = np.shape(index)
    if x.size and (x.min() < 0 or x.max() >= n):
        raise IndexError(f"an index is outside [0, {n})")
    half = max(1, ((n - 1).bit_length() + 1) // 2)
    keys = _round_keys(tuple(int(s) for s in seed))
    mask, shift = np.uint64((1 << half) - 1), np.uint64(half)
    out = x.astype(np.uint64)
    walking = np.ones(out.shape, bool)
    while walking.any():
        value = out[walking]
        left, right = value >> shift, value & mask
        for key in keys:
            left, right = right, left ^ (_mix(right ^ key) & mask)
        out[walking] = (left << shift) | right
        walking[walking] = out[walking] >= np.uint64(n)
    return out.astype(np.int64).reshape(shape)
