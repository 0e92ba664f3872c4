"""The Beam build (DirectRunner) writes the store of the local build byte for byte: the same
shards, index, word types, tokenizer files and manifest, for any worker count."""

import pytest

from bertjax import files
from bertjax.data.store import build as build_lib
from bertjax.data.store.format import MANIFEST, StoreError
from bertjax.data.store.reader import open_store
from tests.gcs import gcs_bucket  # noqa: F401 - the fixture

from .test_build import SHARD_CHARS, contents

beam_lib = pytest.importorskip("bertjax.data.store.beam")
pytest.importorskip("apache_beam")


@pytest.mark.parametrize("family, corpus_format", [
    ("bert", "plain"), pytest.param("gpt", "bert", marks=pytest.mark.slow), ("elmo", "bert")])
def test_the_beam_build_writes_the_local_builds_bytes(family, corpus_format, wiki_slice,
                                                      learned_vocab, tmp_path):
    """Real text (WikiText-2 valid), several shards; ELMo's word types are assigned over the
    shards in order whichever worker tokenized them."""
    vocab = str(learned_vocab(family))
    local = build_lib.build(family, str(wiki_slice), vocab, tmp_path / "local", workers=2,
                            corpus_format=corpus_format, shard_chars=SHARD_CHARS)
    beamed = beam_lib.build_on_beam(
        family, str(wiki_slice), vocab, tmp_path / "beam", corpus_format=corpus_format,
        shard_chars=SHARD_CHARS,
        pipeline_args=["--runner=DirectRunner", "--direct_num_workers=2",
                       "--direct_running_mode=multi_threading"])
    assert beamed == local and len(local.shards) >= 3
    expected = contents(tmp_path / "local")
    assert contents(tmp_path / "beam") == expected
    assert MANIFEST in expected and open_store(tmp_path / "beam").tokens.size == (
        local.counts()["tokens"])


def test_a_finished_beam_store_is_kept_and_bad_input_refused(wiki_slice, learned_vocab,
                                                              tmp_path):
    vocab = str(learned_vocab("gpt"))
    out = tmp_path / "store"
    manifest = beam_lib.build_on_beam("gpt", str(wiki_slice), vocab, out,
                                      shard_chars=SHARD_CHARS)
    stamp = (out / MANIFEST).stat().st_mtime_ns
    assert beam_lib.build_on_beam("gpt", str(wiki_slice), vocab, out,
                                  shard_chars=SHARD_CHARS) == manifest
    assert (out / MANIFEST).stat().st_mtime_ns == stamp  # found finished, not rebuilt
    with pytest.raises(StoreError, match="finished store of other settings"):
        beam_lib.build_on_beam("gpt", str(wiki_slice), vocab, out, shard_chars=SHARD_CHARS * 2)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="corpus is empty"):
        beam_lib.build_on_beam("gpt", str(empty), vocab, tmp_path / "other")
    assert not list((tmp_path / "other").glob("tokens-*"))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("x")
    with pytest.raises(StoreError, match="holds other files"):
        beam_lib.build_on_beam("gpt", str(wiki_slice), vocab, tmp_path / "full")


def test_the_beam_build_writes_into_gs_in_place(wiki_slice, learned_vocab, tmp_path,
                                                gcs_bucket):  # noqa: F811 - the fixture
    """--out=gs://: the workers write each shard whole into the bucket (as on Dataflow), the
    manifest last; the objects are the local build's bytes, and a rerun finds it finished."""
    vocab = str(learned_vocab("bert"))
    local = tmp_path / "local"
    build_lib.build("bert", str(wiki_slice), vocab, local, shard_chars=SHARD_CHARS)
    remote = f"{gcs_bucket}/beam/bert"
    manifest = beam_lib.build_on_beam("bert", str(wiki_slice), vocab, remote,
                                      shard_chars=SHARD_CHARS)
    expected = contents(local)
    listed = sorted(f"{directory}/{name}"[len(remote) + 1:]
                    for directory, _, names in files.walk(remote) for name in names)
    assert listed == sorted(expected)
    for name, data in expected.items():
        assert files.as_path(f"{remote}/{name}").read_bytes() == data, name
    assert beam_lib.build_on_beam("bert", str(wiki_slice), vocab, remote,
                                  shard_chars=SHARD_CHARS) == manifest
