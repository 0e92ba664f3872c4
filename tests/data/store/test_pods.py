"""Pods: a store on gs:// (the emulator) is read in place by each host. Two simulated hosts
(jax.process_index 0 and 1 of 2) open the same store, take the vocabulary from its manifest
(none given), build exactly the examples a local copy of the store gives them, and fetch only
the blocks of ids their own examples read: a shard none of them touches is never requested,
and nothing of the ids is copied to local disk."""

import jax
import numpy as np
import pytest

from bertjax import files
from bertjax.data.store import build as build_lib
from bertjax.data.store import ranged
from bertjax.data.store.format import tokens_name
from bertjax.data.store.reader import open_store
from tests.gcs import gcs_bucket  # noqa: F401 - the fixture

from .conftest import FAMILIES
from .test_sources import assert_same

SHARD_CHARS = 5_000  # a dozen shards: a few examples touch only some of them
BLOCK = 512  # bytes per ranged read: small, so the blocks a host reads tell its examples apart


class Recorder:
    """A store's token array that notes every id position read (the examples' reads)."""

    def __init__(self, tokens):
        self.tokens, self.read = tokens, set()
        self.dtype, self.ndim, self.shape, self.size = tokens.dtype, 1, tokens.shape, tokens.size

    def __len__(self):
        return self.size

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, _ = key.indices(self.size)
            self.read.update(range(start, max(start, stop)))
        else:
            positions = np.asarray(key).reshape(-1)
            self.read.update((np.where(positions < 0, positions + self.size, positions)).tolist())
        return self.tokens[key]


def blocks_of(positions, shards, itemsize):
    """{(gs path of the shard, block)} holding the given global id positions."""
    starts = np.concatenate([[0], np.cumsum([s.tokens for s in shards])])
    found = set()
    for position in positions:
        shard = int(np.searchsorted(starts, position, side="right")) - 1
        found.add((shard, int((position - starts[shard]) * itemsize // BLOCK)))
    return found


# BERT's generator reads the sentences of a stretch of documents for its first block of
# instances, most of this small corpus: its reads are checked to be exactly its examples'.
@pytest.mark.parametrize("family, attribute, sparse", [
    ("gpt", "stream", True), ("bert", "corpus.tokens", False)])
def test_two_hosts_read_a_gs_store_in_place_and_fetch_only_their_blocks(
        family, attribute, sparse, wiki_slice, learned_vocab, tmp_path, monkeypatch,
        gcs_bucket):  # noqa: F811 - the fixture
    monkeypatch.setattr(ranged, "BLOCK_BYTES", BLOCK)
    local, remote = tmp_path / "store", f"{gcs_bucket}/pods/{family}"
    manifest = build_lib.build(family, str(wiki_slice), str(learned_vocab(family)), local,
                               corpus_format="bert", shard_chars=SHARD_CHARS)
    for path in sorted(local.rglob("*")):
        if path.is_file():
            files.copy(path, f"{remote}/{path.relative_to(local)}")
    itemsize = np.dtype(manifest.dtype).itemsize
    store_bytes = sum(s.tokens for s in manifest.shards) * itemsize
    cls = FAMILIES[family][0]
    fetched_by_host = []
    for host in range(2):
        monkeypatch.setattr(jax, "process_index", lambda host=host: host)
        monkeypatch.setattr(jax, "process_count", lambda: 2)
        mine = cls(corpus=f"store:{local}", seed=5)
        mine.prepare(tmp_path / f"local{host}")
        theirs = cls(corpus=f"store:{remote}", seed=5)  # no vocab: the manifest's
        theirs.prepare(tmp_path / f"host{host}")
        assert theirs.load_vocab(theirs._files) == mine.load_vocab(mine._files)
        owner, name = (mine.corpus, "tokens") if "." in attribute else (mine, attribute)
        recorder = Recorder(getattr(owner, name))
        setattr(owner, name, recorder)
        tokens = theirs.corpus.tokens if "." in attribute else theirs.stream
        cache = tokens.parts[0].cache
        assert not cache.fetched  # opening fetched no ids
        for a, b in zip(mine.example_blocks(32, 2, 0, host, 2),
                        theirs.example_blocks(32, 2, 0, host, 2), strict=False):
            assert_same(a, b)
            break
        fetched = {(int(path.rsplit("-", 1)[1].split(".")[0]), block)
                   for path, block in cache.fetched}
        assert len(cache.fetched) == len(fetched)  # each block fetched once
        assert fetched == blocks_of(recorder.read, manifest.shards, itemsize)
        untouched = {s for s in range(len(manifest.shards))} - {s for s, _ in fetched}
        assert all(tokens_name(s) not in path for path, _ in cache.fetched for s in untouched)
        assert not cache.whole  # no shard read whole
        if sparse:
            assert untouched, "every shard was touched: the test cannot tell"
            assert len(fetched) * BLOCK < store_bytes / 4
        fetched_by_host.append(fetched)
    assert fetched_by_host[0] != fetched_by_host[1]


def test_elmo_reads_each_gs_shard_whole_once(wiki_slice, learned_vocab, tmp_path,
                                             gcs_bucket):  # noqa: F811 - the fixture
    """ELMo cuts every sentence when it opens the store: each shard is read whole, once, in
    place (no local copy), and the examples are those of a local copy."""
    local, remote = tmp_path / "store", f"{gcs_bucket}/pods/elmo"
    manifest = build_lib.build("elmo", str(wiki_slice), str(learned_vocab("elmo")), local,
                               corpus_format="bert", shard_chars=SHARD_CHARS * 3)
    for path in sorted(local.rglob("*")):
        if path.is_file():
            files.copy(path, f"{remote}/{path.relative_to(local)}")
    cls = FAMILIES["elmo"][0]
    mine, theirs = cls(corpus=f"store:{local}", seed=2), cls(corpus=f"store:{remote}", seed=2)
    mine.prepare(tmp_path / "local")
    theirs.prepare(tmp_path / "remote")
    assert_same(next(mine.example_blocks(20, 4, 3, 1, 2)),
                next(theirs.example_blocks(20, 4, 3, 1, 2)))
    shards = [s for s in range(len(manifest.shards)) if manifest.shards[s].tokens]
    store = open_store(remote)
    store.sentences()
    assert sorted(store.cache.whole) == [f"{remote}/{tokens_name(s)}" for s in shards]
    assert not store.cache.fetched
