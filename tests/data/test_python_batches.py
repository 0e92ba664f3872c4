"""Batches without TensorFlow: the Python path gives the seqio path's batches, element for
element, for every family, from any start index and on any host shard; its prefetch thread
hands errors over and stops when the run closes its batches; BERT's WordPiece in Python gives
tf.data's ids."""

import itertools
import threading

import jax
import numpy as np
import pytest

from bertjax.data import python_batches, source
from bertjax.data.bert.documents import _encode_in_python, encode_sentences
from bertjax.data.bert.source import BertPretrainingSource
from bertjax.data.elmo.source import ElmoSource
from bertjax.data.gpt.source import LmPretrainingSource

SOURCES = {
    "bert": lambda corpus: BertPretrainingSource(corpus=corpus, vocab_size=600),
    "bert_packed": lambda corpus: BertPretrainingSource(corpus=corpus, vocab_size=600,
                                                        nsp=False, packed_sequences=2),
    "gpt": lambda corpus: LmPretrainingSource(corpus=corpus, vocab_size=400, seed=3),
    "elmo": lambda corpus: ElmoSource(corpus=corpus, tokenizer="whitespace", vocab_size=300),
}


@pytest.fixture(scope="module", params=sorted(SOURCES))
def prepared(request, bert_sample, tmp_path_factory):
    prepared = SOURCES[request.param](str(bert_sample))
    prepared.prepare(tmp_path_factory.mktemp(request.param))
    return prepared


def take(batches, n):
    taken = list(itertools.islice(batches, n))
    batches.close()  # as a run does when it ends
    return taken


@pytest.mark.parametrize("start, host", [(0, (0, 1)), (13, (1, 2))])
def test_python_batches_are_the_seqio_batches(prepared, start, host, monkeypatch):
    monkeypatch.setattr(jax, "process_index", lambda: host[0])
    monkeypatch.setattr(jax, "process_count", lambda: host[1])
    seqio_batches = take(prepared.batches(start, 64, 4), 6)
    monkeypatch.setattr(source, "has_tf_data", lambda: False)
    before = {t.name for t in threading.enumerate()}
    python = take(prepared.batches(start, 64, 4), 6)
    assert len(python) == len(seqio_batches) == 6
    for ours, theirs in zip(python, seqio_batches, strict=True):
        assert ours.keys() == theirs.keys()
        for key in ours:
            assert ours[key].dtype == theirs[key].dtype, key
            np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
    assert "bertjax-batches" not in {t.name for t in threading.enumerate()} - before


@pytest.mark.unit
def test_rebatch_cuts_uneven_blocks_into_whole_batches():
    blocks = [{"x": np.arange(a, b)} for a, b in ((0, 3), (3, 4), (4, 11), (11, 12))]
    batches = list(python_batches.rebatch(iter(blocks), 4))
    assert [b["x"].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert [b["x"].tolist() for b in python_batches.rebatch(iter(blocks[:3]), 4)] == [
        [0, 1, 2, 3], [4, 5, 6, 7]]  # the last 3 examples make no whole batch


@pytest.mark.unit
def test_prefetch_hands_an_error_over_at_its_batch():
    def failing():
        yield {"x": np.zeros(2)}
        raise ValueError("the corpus went away")

    batches = python_batches.prefetched(failing())
    assert next(batches)["x"].shape == (2,)
    with pytest.raises(ValueError, match="the corpus went away"):
        next(batches)


@pytest.mark.unit
def test_closing_the_batches_stops_the_thread_and_closes_the_source():
    closed = threading.Event()

    def endless():
        try:
            for i in itertools.count():
                yield {"x": np.full(2, i)}
        finally:
            closed.set()

    batches = python_batches.prefetched(endless(), depth=2)
    assert [next(batches)["x"][0] for _ in range(3)] == [0, 1, 2]
    batches.close()
    assert closed.wait(5.0)
    assert "bertjax-batches" not in {t.name for t in threading.enumerate()}


def test_wordpiece_in_python_gives_the_tf_data_ids(bert_sample, tmp_path):
    prepared = SOURCES["bert"](str(bert_sample))
    prepared.prepare(tmp_path)
    lines = bert_sample.read_text(encoding="utf-8").splitlines()
    documents = [lines[:200]]  # blank lines too: empty sentences keep their place
    tokens, lengths = encode_sentences(documents, prepared.vocab, batch_size=64)
    ours, our_lengths = _encode_in_python(documents[0], prepared.vocab)
    assert tokens.dtype == ours.dtype and lengths.dtype == our_lengths.dtype
    np.testing.assert_array_equal(our_lengths, lengths)
    np.testing.assert_array_equal(ours, tokens)


def test_a_seqio_cache_without_tensorflow_is_one_line(bert_sample, tmp_path, monkeypatch):
    cached = BertPretrainingSource(corpus=str(bert_sample), vocab_size=600, masking="static",
                                   cache_dir=str(tmp_path / "cache"))
    monkeypatch.setattr("bertjax.data.bert.source.has_tf_data", lambda: False)
    with pytest.raises(source.DataError, match=r"cache_dir is a seqio cache, which needs "
                                               r"TensorFlow and seqio.*token store"):
        cached.batches(0, 64, 4)
