"""Sentence-pair instances on WikiText-2 (paragraphs as documents, ' . ' as sentence breaks)."""

import bisect

import numpy as np
import pytest

from bertjax.data.masking import SpecialIds
from bertjax.data.nsp import (
    IS_NEXT,
    RANDOM_NEXT,
    Corpus,
    PairInstance,
    document_instances,
    iterate_instances,
    pack,
    truncation,
)

MAX_SEQ_LENGTH = 128
NUM_INSTANCES = 20_000
SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=100)


_CACHE: dict = {}  # built once per module; the fixtures stay function-scoped like
# `wikitext_valid`, which skips without the data


@pytest.fixture
def corpus(wikitext_words):
    if "corpus" not in _CACHE:
        _CACHE["corpus"] = Corpus(wikitext_words[0])
    return _CACHE["corpus"]


@pytest.fixture
def instances(corpus):
    if "instances" not in _CACHE:
        rng, out = np.random.default_rng(0), []
        while len(out) < NUM_INSTANCES:
            order = rng.permutation(corpus.num_documents)
            out.extend(iterate_instances(corpus, order, rng, max_seq_length=MAX_SEQ_LENGTH))
        _CACHE["instances"] = np.array(out[:NUM_INSTANCES])  # [N, 7]
    return _CACHE["instances"]


def _reference_truncation(len_a, len_b, max_tokens):
    """google-research/bert's truncate_seq_pair, counting the cuts."""
    a, b = len_a, len_b
    while a + b > max_tokens:
        if a > b:
            a -= 1
        else:
            b -= 1
    return len_a - a, len_b - b


def test_truncation_matches_reference():
    for len_a in range(1, 25):
        for len_b in range(1, 25):
            for max_tokens in range(2, 40):
                assert truncation(len_a, len_b, max_tokens) == _reference_truncation(
                    len_a, len_b, max_tokens
                )


def test_is_next_rate_is_half(instances):
    rate = np.mean(instances[:, 6] == IS_NEXT)
    print(f"IsNext rate {rate:.4f} over {len(instances)} instances")
    assert abs(rate - 0.5) <= 0.01


def test_pairs_fit_and_are_nonempty(instances):
    len_a = instances[:, 2] - instances[:, 1]
    len_b = instances[:, 5] - instances[:, 4]
    assert len_a.min() >= 1 and len_b.min() >= 1
    assert (len_a + len_b).max() <= MAX_SEQ_LENGTH - 3
    assert (len_a + len_b).max() == MAX_SEQ_LENGTH - 3  # long chunks are truncated to fit


def test_is_next_continues_and_random_next_comes_from_another_document(corpus, instances):
    for row in instances:
        doc, _, a_stop, b_doc, b_start, _, label = row.tolist()
        if label == IS_NEXT:
            # A ends and B starts at the same sentence break, up to the truncated tokens.
            offsets = corpus.offsets[doc]
            k = bisect.bisect_left(offsets, a_stop)
            assert b_doc == doc and a_stop <= offsets[k] <= b_start
        else:
            assert label == RANDOM_NEXT and b_doc != doc


def test_single_sentence_documents_never_give_segment_a(corpus, instances):
    assert all(len(corpus.offsets[d]) > 2 for d in np.unique(instances[:, 0]))


def test_one_pass_covers_the_multi_sentence_documents(corpus):
    """Unused sentences of random-next chunks are put back: (nearly) every sentence is used."""
    rng = np.random.default_rng(1)
    used = total = 0
    for doc, offsets in enumerate(corpus.offsets):
        if len(offsets) < 3:
            continue
        covered = np.zeros(offsets[-1], bool)
        for inst in document_instances(corpus, doc, rng, max_seq_length=MAX_SEQ_LENGTH):
            covered[inst.a_start : inst.a_stop] = True
            if inst.is_random_next == IS_NEXT:
                covered[inst.b_start : inst.b_stop] = True
        starts = np.array(offsets[:-1])
        stops = np.array(offsets[1:])
        used += sum(covered[s:e].any() for s, e in zip(starts, stops, strict=True))
        total += len(starts)
    assert used / total > 0.99


def one_pass(corpus, seed, **options):
    """The instances of one pass over the documents in order, as rows [N, 7]."""
    rng = np.random.default_rng(seed)
    documents = range(corpus.num_documents)
    return np.array(list(iterate_instances(corpus, documents, rng, max_seq_length=MAX_SEQ_LENGTH,
                                           **options)))


def test_short_seq_prob_shortens_targets(corpus):
    def mean_length(short_seq_prob):
        rows = one_pass(corpus, 2, short_seq_prob=short_seq_prob)
        return np.mean(rows[:, 2] - rows[:, 1] + rows[:, 5] - rows[:, 4])

    assert mean_length(1.0) < 0.8 * mean_length(0.0)


def test_no_nsp_gives_consecutive_single_segments(corpus):
    rows = one_pass(corpus, 3, short_seq_prob=0.0, nsp=False)
    assert (rows[:, 3] == -1).all() and (rows[:, 6] == 0).all()
    assert (rows[:, 2] - rows[:, 1]).max() == MAX_SEQ_LENGTH - 2
    assert (rows[:, 2] > rows[:, 1]).all()
    same_doc = rows[1:, 0] == rows[:-1, 0]
    assert (rows[1:, 1][same_doc] >= rows[:-1, 2][same_doc]).all()  # in order, no overlap
    assert len(np.unique(rows[:, 0])) == corpus.num_documents  # one-sentence docs too


def test_pack_layout():
    corpus = Corpus([[np.array([5, 6, 7]), np.array([8, 9])], [np.array([10])]])
    pair = PairInstance(0, 0, 3, 0, 3, 5, IS_NEXT)
    input_ids, input_mask, segment_ids = pack(corpus, pair, SPECIAL, 10)
    assert input_ids.tolist() == [2, 5, 6, 7, 3, 8, 9, 3, 0, 0]
    assert input_mask.tolist() == [1] * 8 + [0] * 2
    assert segment_ids.tolist() == [0] * 5 + [1] * 3 + [0] * 2
    single = PairInstance(1, 0, 1, -1, 0, 0, 0)
    input_ids, input_mask, segment_ids = pack(corpus, single, SPECIAL, 5)
    assert input_ids.tolist() == [2, 10, 3, 0, 0]
    assert input_mask.tolist() == [1, 1, 1, 0, 0] and not segment_ids.any()


def test_corpus_drops_empty_sentences_and_documents():
    corpus = Corpus([[], [np.array([], np.int32)], [np.array([5]), np.array([], np.int32)]])
    assert corpus.num_documents == 1 and corpus.offsets == [[0, 1]]


def test_nsp_without_multi_sentence_documents_is_an_error():
    corpus = Corpus([[np.array([5, 6])], [np.array([7])]])
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="NSP=False"):
        list(iterate_instances(corpus, [0, 1], rng, max_seq_length=16))
    assert len(list(iterate_instances(corpus, [0, 1], rng, max_seq_length=16, nsp=False))) == 2
