"""LocalShard: positioned reads give exactly numpy's answers and leave nothing mapped."""

from __future__ import annotations

import numpy as np
import pytest

from bertjax.data.store.local import GAP, LocalShard


@pytest.fixture
def shard(tmp_path):
    ids = np.random.default_rng(0).integers(0, 30_000, 5 * GAP + 17).astype(np.uint16)
    path = tmp_path / "tokens-00000.bin"
    ids.tofile(path)
    return LocalShard(path, np.uint16, ids.size), ids


def test_slices_and_integer_indexing_match_numpy(shard):
    local, ids = shard
    for key in (slice(None), slice(3, 900), slice(-50, None), slice(10, 4000, 7), slice(9, 3)):
        np.testing.assert_array_equal(local[key], ids[key])
    rng = np.random.default_rng(1)
    for _ in range(20):  # runs near and far apart, repeats, unsorted, negative
        positions = rng.integers(-ids.size, ids.size, rng.integers(1, 200))
        np.testing.assert_array_equal(local[positions], ids[positions])
    grid = rng.integers(0, ids.size, (4, 6))
    np.testing.assert_array_equal(local[grid], ids[grid])
    assert local[7] == ids[7] and len(local) == ids.size
    np.testing.assert_array_equal(np.asarray(local), ids)
    assert np.asarray(local, np.int32).dtype == np.int32


def test_bad_reads_name_the_problem(shard, tmp_path):
    local, ids = shard
    with pytest.raises(IndexError, match="out of its"):
        local[np.array([ids.size])]
    path = tmp_path / "tokens-00000.bin"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(OSError, match="truncated after the store was opened"):
        local[:]


def test_reads_leave_nothing_mapped(shard):
    local, _ = shard
    local[np.arange(0, local.size, 97)]
    np.asarray(local)
    with open("/proc/self/maps") as maps:
        assert local.path not in maps.read()
