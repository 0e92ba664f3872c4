"""A store's token shards on local disk, read by positioned reads (pread), not mapped.

    shard = LocalShard("/data/store/tokens-00003.bin", np.uint16, tokens)
    shard[1000:1129]           # one read of those ids
    shard[np.array([5, 9])]    # integer indexing: one read per run of nearby ids

Why reads, not `np.memmap`: the pages of a mapped file that a process touches count as its
resident memory, and the kernel maps whole page-cache folios per fault, not the 4 KB asked
for (on this project's hosts, ten random reads of 129 ids mapped 14 MB of a 15 MB shard). A
run drawing examples from the whole corpus therefore grew toward the store's size in resident
memory within its first batches, so its memory was no longer independent of the corpus.
Positioned reads copy only the ids asked for into the process; the page cache still serves
repeated reads, and nothing of the store stays mapped.

Each read opens the file and closes it again: a store of thousands of shards never holds
thousands of descriptors, and a process forked after opening the store shares none.
"""

from __future__ import annotations

import os

import numpy as np

from bertjax.data.store.shard import ShardIds

# Integer indexing reads the span from the first to the last id of each run of ids that lie
# within this many ids of each other: one read of a few KB of slack beats one read per id.
GAP = 1024


class LocalShard(ShardIds):
    """One shard's ids on local disk as a read-only 1-D array: slices and integer-array
    indexing read only the ids asked for; `np.asarray` reads it whole."""

    def _span(self, start: int, stop: int) -> np.ndarray:
        return self._read([(start, stop)])[0]

    def _gather(self, positions: np.ndarray) -> np.ndarray:
        wanted = np.unique(positions)
        breaks = np.flatnonzero(np.diff(wanted) > GAP) + 1
        firsts = wanted[np.concatenate([[0], breaks])]
        lasts = wanted[np.concatenate([breaks - 1, [wanted.size - 1]])]
        spans = self._read(list(zip(firsts.tolist(), (lasts + 1).tolist(), strict=True)))
        held = np.concatenate(spans)
        offsets = np.cumsum([0] + [s.size for s in spans[:-1]])  # where each span starts in held
        run = np.searchsorted(firsts, positions, side="right") - 1
        return held[offsets[run] + positions - firsts[run]]

    def _read(self, spans: list[tuple[int, int]]) -> list[np.ndarray]:
        """ids[start:stop] for each (start, stop), in one opening of the file."""
        item = self.dtype.itemsize
        out = []
        fd = os.open(self.path, os.O_RDONLY)
        try:
            for start, stop in spans:
                ids = np.empty(stop - start, self.dtype)
                view, offset = ids.data.cast("B"), start * item
                while view:  # pread may return less than asked (e.g. over 2 GB at once)
                    done = os.preadv(fd, [view], offset)
                    if done == 0:
                        raise OSError(f"{self.path} ended {len(view)} bytes early: it was "
                                      "truncated after the store was opened")
                    view, offset = view[done:], offset + done
                out.append(ids)
        finally:
            os.close(fd)
        return out

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        ids = self[:]
        return ids if dtype is None else ids.astype(dtype)
