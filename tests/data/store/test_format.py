"""Opening a token store: a damaged or foreign one is refused in one line that names the file
and the fix (rebuild with bertjax-prepare)."""

import json
import shutil

import numpy as np
import pytest

from bertjax.data.store import build as build_lib
from bertjax.data.store.format import MANIFEST, StoreError, index_name, token_dtype, tokens_name
from bertjax.data.store.reader import TokenArray, open_store

pytestmark = pytest.mark.unit  # the unit tier: make test-unit


@pytest.fixture(scope="module")
def built(wiki_slice, learned_vocab, tmp_path_factory):
    out = tmp_path_factory.mktemp("built") / "store"
    build_lib.build("gpt", str(wiki_slice), str(learned_vocab("gpt")), out, shard_chars=15_000)
    return out


@pytest.fixture
def store(built, tmp_path):
    shutil.copytree(built, tmp_path / "store")
    return tmp_path / "store"


def refused(path, *words):
    with pytest.raises(StoreError) as err:
        open_store(path)
    message = str(err.value)
    assert "\n" not in message and "bertjax-prepare" in message, message
    for word in words:
        assert word in message, message


def test_a_truncated_shard_is_refused(store):
    data = (store / tokens_name(1)).read_bytes()
    (store / tokens_name(1)).write_bytes(data[:-2])
    refused(store, str(store / tokens_name(1)), "is truncated or damaged (")


def test_a_missing_index_is_refused(store):
    (store / index_name(0)).unlink()
    refused(store, str(store / index_name(0)), "is missing: rebuild")


def test_an_index_that_is_not_one_is_refused(store):
    np.save(store / index_name(0), np.arange(3.0))
    refused(store, str(store / index_name(0)), "not a token-store index")


@pytest.mark.parametrize("change, words", [
    (lambda m: m.update(version=99), ["format version 99"]),
    (lambda m: m.update(format="other"), ["not a token-store manifest"]),
    (lambda m: m.pop("family"), ["lacks fields"]),
    (lambda m: m["shards"][0].update(tokens=m["shards"][0]["tokens"] + 1),
     ["is truncated or damaged ("]),
])
def test_a_wrong_manifest_is_refused(store, change, words):
    record = json.loads((store / MANIFEST).read_text())
    change(record)
    (store / MANIFEST).write_text(json.dumps(record))
    refused(store, *words)


def test_no_manifest_is_not_a_store(tmp_path):
    refused(tmp_path, str(tmp_path / MANIFEST), "not a token store")
    (tmp_path / MANIFEST).write_text("{")
    refused(tmp_path, "not JSON")


def test_token_array_reads_across_shards_as_int32():
    parts = [np.arange(0, 5, dtype=np.uint16), np.arange(5, 6, dtype=np.uint16),
             np.arange(6, 12, dtype=np.uint16)]
    whole = np.arange(12, dtype=np.int32)
    tokens = TokenArray(parts)
    assert tokens.size == len(tokens) == 12
    for key in (slice(0, 12), slice(3, 9), slice(4, 7), slice(11, 30), slice(7, 3)):
        assert tokens[key].dtype == np.int32 and np.array_equal(tokens[key], whole[key])
    where = np.array([[11, 0, 5], [4, 6, -1]])
    assert tokens[where].dtype == np.int32 and np.array_equal(tokens[where], whole[where])


def test_ids_are_uint16_when_the_vocabulary_fits():
    assert token_dtype(30522) == np.uint16 and token_dtype(65536) == np.uint16
    assert token_dtype(65537) == np.uint32 and token_dtype(None) == np.uint32


def test_a_changed_vocabulary_file_is_refused(store):
    vocab = store / "tokenizer" / "vocab.json"
    vocab.write_text(vocab.read_text().replace('"', "'", 2)[::-1])
    with pytest.raises(StoreError, match="not the vocabulary the store was built with.*"
                                         "bertjax-prepare"):
        open_store(store).tokenizer_files()
