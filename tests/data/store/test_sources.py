"""Every family reads a token store (corpus "store:PATH") and builds exactly the examples and
batches of the in-memory source over the same corpus, seed and global index, without reading
or tokenizing any text; a store that does not fit the run is refused in one line."""

import itertools

import numpy as np
import pytest

from bertjax import files
from bertjax.data.source import DataError, Source
from bertjax.data.store import build as build_lib
from bertjax.data.store.format import MANIFEST
from bertjax.data.store.reader import TokenArray, TokenStore
from tests.gcs import gcs_bucket  # noqa: F401 - the fixture

from .conftest import FAMILIES

SHARD_CHARS = 15_000  # several shards: examples read across their boundaries

# (family, source settings, corpus format)
CASES = {
    "bert": ("bert", {}, "plain"),
    "bert-static": ("bert", {"masking": "static", "static_groups": 2, "dupe_factor": 2},
                    "plain"),
    "bert-wwm-packed": ("bert", {"whole_word_masking": True, "packed_sequences": 2,
                                 "nsp": False}, "bert"),
    "gpt": ("gpt", {}, "bert"),
    "elmo-sentence": ("elmo", {"mode": "sentence"}, "bert"),
    "elmo-stream": ("elmo", {"mode": "stream"}, "bert"),
    # settings a store records (built with them) and settings only the run chooses
    "bert-cased": ("bert", {"lower_case": False}, "bert"),
    "elmo-whitespace-short-chars": ("elmo", {"tokenizer": "whitespace", "max_chars": 12},
                                    "bert"),
}
STORE_SETTINGS = ("lower_case", "tokenizer")  # passed to the build as well
_STORES: dict = {}


def store_of(family, corpus_format, wiki_slice, vocab, tmp_path_factory, **settings):
    """A store of `wiki_slice` (built once per family, format and settings)."""
    key = (family, corpus_format, tuple(sorted(settings.items())))
    if key not in _STORES:
        out = tmp_path_factory.mktemp(f"{family}-{corpus_format}") / "store"
        build_lib.build(family, str(wiki_slice), str(vocab), out, corpus_format=corpus_format,
                        shard_chars=SHARD_CHARS, **settings)
        _STORES[key] = out
    return _STORES[key]


@pytest.fixture(params=sorted(CASES))
def pair(request, wiki_slice, learned_vocab, tmp_path_factory, tmp_path):
    """(the in-memory source, the store's source), both prepared."""
    family, settings, corpus_format = CASES[request.param]
    cls = FAMILIES[family][0]
    vocab = learned_vocab(family)
    recorded = {k: v for k, v in settings.items() if k in STORE_SETTINGS}
    store = store_of(family, corpus_format, wiki_slice, vocab, tmp_path_factory, **recorded)
    memory = cls(corpus=str(wiki_slice), corpus_format=corpus_format, vocab=str(vocab), seed=3,
                 **settings)
    memory.prepare(tmp_path / "memory")
    stored = cls(corpus=f"store:{store}", seed=3, **settings)
    stored.prepare(tmp_path / "stored")
    return memory, stored


def assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_the_same_examples_at_any_index_and_shard(pair):
    memory, stored = pair
    assert stored.vocab_size == memory.vocab_size
    # the start, a resume on host 1 of 2, and a resume in a later epoch
    for start, shard, count in ((0, 0, 1), (48, 1, 2), (4992, 0, 1)):
        blocks = [s.example_blocks(32, 8, start, shard, count) for s in (memory, stored)]
        for a, b in itertools.islice(zip(*blocks, strict=True), 6):
            assert_same(a, b)


def test_the_same_first_batches(pair):
    memory, stored = pair
    batches = zip(memory.batches(16, 32, 4), stored.batches(16, 32, 4), strict=True)
    for a, b in itertools.islice(batches, 3):
        assert_same(a, b)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_store_reads_no_text_and_tokenizes_nothing(family, wiki_slice, learned_vocab,
                                                     tmp_path_factory, tmp_path, monkeypatch):
    cls = FAMILIES[family][0]
    store = store_of(family, "bert", wiki_slice, learned_vocab(family), tmp_path_factory)

    def refuse(*args, **kwargs):
        raise AssertionError("the corpus was read or tokenized")

    for name in ("read_documents", "corpus_view", "encode", "encode_documents", "learn_vocab"):
        monkeypatch.setattr(cls, name, refuse)
    stored = cls(corpus=f"store:{store}")
    stored.prepare(tmp_path)
    next(stored.example_blocks(16, 2, 0, 0, 1))
    record = stored.save(tmp_path)  # the workdir gets the store's vocabulary
    for name in record["files"].values():
        assert (tmp_path / name).read_bytes() == (store / "tokenizer" / name).read_bytes()


def refused(source, workdir, *words):
    with pytest.raises(DataError) as err:
        source.prepare(workdir)
    message = str(err.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, message


def test_a_store_that_does_not_fit_the_run_is_refused(wiki_slice, learned_vocab,
                                                      tmp_path_factory, tmp_path):
    bert_cls, gpt_cls, elmo_cls = (FAMILIES[f][0] for f in ("bert", "gpt", "elmo"))
    bert = store_of("bert", "bert", wiki_slice, learned_vocab("bert"), tmp_path_factory)
    elmo = store_of("elmo", "bert", wiki_slice, learned_vocab("elmo"), tmp_path_factory)
    other = tmp_path / "other"  # another vocabulary than the store's
    source = bert_cls(corpus=str(wiki_slice), vocab_size=300)
    source.prepare(other)
    source.save(other)
    refused(bert_cls(corpus=f"store:{bert}", vocab=str(other)), tmp_path / "a",
            "another vocabulary", "bert_pretraining_source.vocab")
    refused(bert_cls(corpus=f"store:{bert}", lower_case=False), tmp_path / "b",
            "lower_case=True", "bert_pretraining_source.lower_case is False")
    refused(elmo_cls(corpus=f"store:{elmo}", tokenizer="whitespace"), tmp_path / "c",
            "tokenizer='simple'")
    refused(gpt_cls(corpus=f"store:{bert}"), tmp_path / "d", "holds bert ids",
            "--family=gpt")
    refused(bert_cls(corpus=f"store:{tmp_path / 'none'}"), tmp_path / "e",
            "bert_pretraining_source.corpus", MANIFEST, "bertjax-prepare")
    # a workdir trained with another vocabulary does not resume on the store's
    refused(bert_cls(corpus=f"store:{bert}"), other, str(other), "another vocabulary",
            "new --workdir")
    with pytest.raises(DataError, match="cache_dir is built from text, not a token store"):
        bert_cls(corpus=f"store:{bert}", masking="static", cache_dir=str(tmp_path))
    # the store's own vocabulary, given as files, is accepted
    given = bert_cls(corpus=f"store:{bert}", vocab=str(learned_vocab("bert") / "vocab.txt"))
    given.prepare(tmp_path / "f")


def test_a_raw_text_corpus_is_read_as_before(wiki_slice, learned_vocab, tmp_path):
    source = FAMILIES["gpt"][0](corpus=str(wiki_slice), vocab=str(learned_vocab("gpt")))
    assert source.store_path is None and Source.store_path.fget(source) is None
    source.prepare(tmp_path)
    assert isinstance(source.stream, np.ndarray)


@pytest.mark.parametrize("mode", ["sentence", "stream"])
def test_elmo_keeps_a_stores_ids_where_they_lie(mode, wiki_slice, learned_vocab,
                                               tmp_path_factory, tmp_path, monkeypatch):
    """ELMo opens a store without cutting it into per-sentence arrays or copying its ids (so
    start-up does not grow with the corpus): its corpus is the store's lazily read ids, and a
    first block of 2 examples of 16 reads those examples' ids only."""
    store = store_of("elmo", "bert", wiki_slice, learned_vocab("elmo"), tmp_path_factory)

    def refuse(self):
        raise AssertionError("the store was cut into one array per sentence")

    read = []
    getitem = TokenArray.__getitem__

    def counted(self, key):
        out = getitem(self, key)
        read.append(out.size)
        return out

    monkeypatch.setattr(TokenStore, "sentences", refuse)
    monkeypatch.setattr(TokenArray, "__getitem__", counted)
    source = FAMILIES["elmo"][0](corpus=f"store:{store}", mode=mode)
    source.prepare(tmp_path)
    assert isinstance(source.corpus.tokens, TokenArray)
    next(source.example_blocks(16, 2, 0, 0, 1))
    assert 0 < sum(read) <= 2 * 2 * 17 < source.corpus.num_tokens


def test_a_store_and_its_corpus_on_gs_go_through_the_path_layer(
        wiki_slice, learned_vocab, tmp_path, monkeypatch, gcs_bucket):  # noqa: F811 - fixture
    """Built from a gs:// corpus into gs:// (staged on local disk, then uploaded), the store
    holds the bytes of a local build and a run reads it through the path layer."""
    monkeypatch.setenv("BERTJAX_STORE_STAGING", str(tmp_path / "staging"))
    corpus = f"{gcs_bucket}/corpus/wiki.txt"
    files.copy(wiki_slice, corpus)
    local, remote = tmp_path / "store", f"{gcs_bucket}/stores/wiki"
    vocab = str(learned_vocab("gpt"))
    build_lib.build("gpt", corpus, vocab, local, shard_chars=SHARD_CHARS)
    manifest = build_lib.build("gpt", corpus, vocab, remote, shard_chars=SHARD_CHARS)
    names = sorted(str(p.relative_to(local)) for p in local.rglob("*") if p.is_file())
    for name in names:
        assert files.as_path(f"{remote}/{name}").read_bytes() == (local / name).read_bytes()
    assert not list((tmp_path / "staging").glob("*"))  # removed once uploaded
    assert build_lib.build("gpt", corpus, vocab, remote, shard_chars=SHARD_CHARS) == manifest
    cls = FAMILIES["gpt"][0]
    sources = [cls(corpus=f"store:{where}") for where in (local, remote)]
    for number, source in enumerate(sources):
        source.prepare(tmp_path / f"run{number}")
    blocks = [next(s.example_blocks(32, 4, 8, 0, 1)) for s in sources]
    assert_same(*blocks)
    files.as_path(f"{remote}/index-00001.npy").unlink()
    refused(cls(corpus=f"store:{remote}"), tmp_path / "run2", f"{remote}/index-00001.npy",
            "is missing: rebuild")
