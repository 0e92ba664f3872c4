"""A store's token shards on object storage (gs://), read in place by ranged requests.

    cache = BlockCache()
    shard = RangedShard("gs://b/store/tokens-00003.bin", np.uint16, tokens, cache)
    shard[1000:1129]           # the blocks holding those ids: one request for the missing run
    shard[np.array([5, 9])]    # integer indexing: every missing block in one batch of requests

Why ranged reads, not a local copy of each shard a host touches: a run's examples are a pure
function of (seed, global index) drawn over the whole corpus (GPT's shuffled chunks, BERT's
random documents and next sentences), so within its first batches every host touches nearly
every shard; copying the shards it touches would copy the whole store to every host before
the first step, as the reader did before, and fill each host's disk with it. Ranged reads
fetch only the blocks of ids a host's examples read: opening the store costs the manifest,
the index files and one listing, whatever the corpus's size; a shard no example of the host
touches is never requested; and memory holds at most `CACHE_BYTES` of blocks (least recently
used dropped first), independent of the corpus's size.

Blocks are `BLOCK_BYTES` long: small enough that a random example (a few KB of ids) costs
little transfer, large enough that a run of neighbouring examples (GPT without shuffling, a
BERT document's sentences) is one request. Integer-array reads (BERT gathers a whole block of
examples' ids at once) fetch all their missing blocks concurrently (fsspec's `cat_ranges`),
so a batch costs about one round trip, not one per example.
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Iterable

import numpy as np

from bertjax import files
from bertjax.data.store.shard import ShardIds

BLOCK_BYTES = 64 * 1024
CACHE_BYTES = 64 * 2**20


class BlockCache:
    """Blocks of object-store files, fetched by ranged requests, least recently used dropped
    beyond `max_bytes`. `fetched` lists every (file, block) requested from storage, in order
    (a host's reads, for tests and logs), `whole` the files read whole past it."""

    def __init__(self, block_bytes: int = 0, max_bytes: int = 0) -> None:
        self.block_bytes = block_bytes or BLOCK_BYTES
        if self.block_bytes % 8:
            raise ValueError(f"block_bytes={self.block_bytes} must be a multiple of 8")
        self.max_bytes = max(max_bytes or CACHE_BYTES, self.block_bytes)
        self.blocks: collections.OrderedDict[tuple[str, int], bytes] = collections.OrderedDict()
        self.held = 0
        self.fetched: list[tuple[str, int]] = []
        self.whole: list[str] = []  # files read whole, past the cache
        self.lock = threading.Lock()

    def get(self, path: str, size: int, wanted: Iterable[int]) -> dict[int, bytes]:
        """{block: its bytes} of file `path` (`size` bytes long) for the `wanted` blocks,
        the missing ones fetched in one batch of ranged requests."""
        found = self.get_many({path: (size, wanted)})
        return {b: data for (_, b), data in found.items()}

    def get_many(self, wanted: dict[str, tuple[int, Iterable[int]]]
                 ) -> dict[tuple[str, int], bytes]:
        """{(file, block): bytes} for {file: (its size, the blocks wanted)}: every missing
        block of every file in one batch of concurrent ranged requests."""
        with self.lock:
            found: dict[tuple[str, int], bytes] = {}
            missing: dict[str, tuple[int, list[int]]] = {}
            for path, (size, blocks) in wanted.items():
                for b in sorted(set(blocks)):
                    if (path, b) in self.blocks:
                        self.blocks.move_to_end((path, b))
                        found[(path, b)] = self.blocks[(path, b)]
                    else:
                        missing.setdefault(path, (size, []))[1].append(b)
            if missing:
                fetched = self._fetch(missing)
                found.update(fetched)
                for key, data in fetched.items():
                    self._keep(key, data)
            return found

    def _fetch(self, missing: dict[str, tuple[int, list[int]]]
               ) -> dict[tuple[str, int], bytes]:
        """{(file, block): bytes} of the `missing` blocks (sorted, per file), one request per
        run of consecutive blocks, all runs fetched concurrently."""
        runs: list[tuple[str, list[int]]] = []
        ends: list[int] = []
        for path, (size, blocks) in missing.items():
            for b in blocks:
                if runs and runs[-1][0] == path and runs[-1][1][-1] + 1 == b:
                    runs[-1][1].append(b)
                    ends[-1] = min(size, (b + 1) * self.block_bytes)
                else:
                    runs.append((path, [b]))
                    ends.append(min(size, (b + 1) * self.block_bytes))
        paths = [path for path, _ in runs]
        starts = [run[0] * self.block_bytes for _, run in runs]
        first = paths[0]
        with files.reaching(first):
            data = files.filesystem(first).cat_ranges(paths, starts, ends, on_error="raise")
        found = {}
        for (path, run), start, chunk in zip(runs, starts, data, strict=True):
            if isinstance(chunk, BaseException):
                raise files.unreachable(path, chunk)
            for b in run:
                lo = b * self.block_bytes - start
                found[(path, b)] = bytes(chunk[lo:lo + self.block_bytes])
                self.fetched.append((path, b))
        return found

    def _keep(self, key: tuple[str, int], data: bytes) -> None:
        self.blocks[key] = data
        self.held += len(data)
        while self.held > self.max_bytes and self.blocks:
            _, dropped = self.blocks.popitem(last=False)
            self.held -= len(dropped)


def prefetch(parts: list, positions: list[np.ndarray]) -> None:
    """Fetch, in one batch of concurrent requests, the blocks that hold `positions[k]` of
    `parts[k]` for every part that is a RangedShard (sharing one cache): a gather across
    shards then costs one round trip, not one per shard."""
    wanted, cache = {}, None
    for part, where in zip(parts, positions, strict=True):
        if isinstance(part, RangedShard) and where.size:
            cache = part.cache
            per_block = cache.block_bytes // part.dtype.itemsize
            wanted[part.path] = (part.size * part.dtype.itemsize,
                                 np.unique(where // per_block).tolist())
    if cache is not None and len(wanted) > 1:
        cache.get_many(wanted)


class RangedShard(ShardIds):
    """One shard's ids on object storage as a read-only 1-D array: slices and integer-array
    indexing read only the blocks that hold the ids asked for; `np.asarray` reads it whole."""

    def __init__(self, path: str | os.PathLike, dtype: np.dtype, count: int,
                 cache: BlockCache) -> None:
        super().__init__(path, dtype, count)
        self.cache = cache

    def _gather(self, positions: np.ndarray) -> np.ndarray:
        item, block_bytes = self.dtype.itemsize, self.cache.block_bytes
        per_block = block_bytes // item  # an id never straddles two blocks
        blocks, inverse = np.unique(positions // per_block, return_inverse=True)
        found = self.cache.get(self.path, self.size * item, blocks.tolist())
        held = np.frombuffer(b"".join(found[b].ljust(block_bytes, b"\0")
                                      for b in blocks.tolist()), self.dtype)
        return held[inverse.reshape(positions.shape) * per_block + positions % per_block]

    def _span(self, start: int, stop: int) -> np.ndarray:
        """ids[start:stop], fetching the blocks they lie in."""
        if stop <= start:
            return np.zeros(0, self.dtype)
        item, block_bytes = self.dtype.itemsize, self.cache.block_bytes
        lo, hi = start * item, stop * item
        found = self.cache.get(self.path, self.size * item,
                               range(lo // block_bytes, (hi - 1) // block_bytes + 1))
        buffer = bytearray(hi - lo)
        for b, data in found.items():
            a = b * block_bytes
            s, e = max(a, lo), min(a + len(data), hi)
            if s < e:
                buffer[s - lo:e - lo] = data[s - a:e - a]
        return np.frombuffer(bytes(buffer), self.dtype)

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        """The whole shard, in one request past the cache (a family that reads every id:
        ELMo's sentences)."""
        with files.reaching(self.path):
            data = files.as_path(self.path).read_bytes()
        self.cache.whole.append(self.path)
        ids = np.frombuffer(data, self.dtype)
        return ids if dtype is None else ids.astype(dtype)
