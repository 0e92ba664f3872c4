"""Ranged reads of a shard on gs:// (the emulator): any slice or integer index gives the ids a
memory map gives, one request per run of missing blocks, the cache bounded."""

import numpy as np
import pytest

from bertjax import files
from bertjax.data.store import ranged
from tests.gcs import gcs_bucket  # noqa: F401 - the fixture


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
def test_ranged_reads_give_the_ids_and_fetch_each_block_once(dtype, gcs_bucket,  # noqa: F811
                                                             tmp_path):
    ids = np.random.default_rng(0).integers(0, 60000, 5000).astype(dtype)
    path = f"{gcs_bucket}/ranged/{np.dtype(dtype).name}.bin"
    files.write_bytes(path, ids.tobytes())
    cache = ranged.BlockCache(block_bytes=256, max_bytes=1024)
    shard = ranged.RangedShard(files.as_path(path), dtype, ids.size, cache)
    rng = np.random.default_rng(1)
    for _ in range(30):
        a, b = sorted(rng.integers(0, ids.size, 2).tolist())
        np.testing.assert_array_equal(shard[a:b], ids[a:b])
        positions = rng.integers(-ids.size, ids.size, (3, 4))
        np.testing.assert_array_equal(shard[positions], ids[positions])
    np.testing.assert_array_equal(shard[4990:], ids[4990:])  # the last, short block
    np.testing.assert_array_equal(shard[::7], ids[::7])
    assert shard[17] == ids[17] and len(shard[5:5]) == 0
    assert cache.held <= 1024  # least recently used blocks dropped
    cache.fetched.clear()
    first = shard[0:40]
    again = shard[0:40]
    np.testing.assert_array_equal(first, again)
    assert len(cache.fetched) <= 1  # kept once fetched
    np.testing.assert_array_equal(np.asarray(shard), ids)
    with pytest.raises(IndexError):
        shard[np.array([ids.size])]


def test_a_gather_across_shards_is_one_batch_of_requests(gcs_bucket, monkeypatch):  # noqa: F811
    """BERT gathers a block of examples' ids spread over many shards at once: their missing
    blocks are fetched in one `cat_ranges` call, not one per shard."""
    from bertjax.data.store.reader import TokenArray

    rng = np.random.default_rng(2)
    cache = ranged.BlockCache(block_bytes=256)
    parts, whole = [], []
    for number in range(3):
        ids = rng.integers(0, 30000, 1000).astype(np.uint16)
        path = f"{gcs_bucket}/ranged/gather-{number}.bin"
        files.write_bytes(path, ids.tobytes())
        parts.append(ranged.RangedShard(files.as_path(path), np.uint16, ids.size, cache))
        whole.append(ids)
    fs = files.filesystem(f"{gcs_bucket}/ranged/gather-0.bin")
    calls = []
    plain = fs.cat_ranges
    monkeypatch.setattr(fs, "cat_ranges", lambda *a, **k: calls.append(a) or plain(*a, **k))
    positions = rng.integers(0, 3000, (4, 16))
    got = TokenArray(parts)[positions]
    np.testing.assert_array_equal(got, np.concatenate(whole)[positions])
    assert len(calls) == 1 and len(set(calls[0][0])) == 3
