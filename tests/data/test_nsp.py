"""Sentence-pair planning on WikiText-2 (paragraphs as documents, ' . ' as sentence breaks)."""

from types import SimpleNamespace

import numpy as np
import pytest

from bertjax.data.bert import nsp as nsp_module
from bertjax.data.bert.masking import SpecialIds
from bertjax.data.bert.nsp import (
    IS_NEXT,
    RANDOM_NEXT,
    Corpus,
    Instances,
    check_corpus,
    index_dtypes,
    pack,
    plan_instances,
    truncation,
)

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

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


def plan(corpus, seed, **options):
    options.setdefault("max_seq_length", MAX_SEQ_LENGTH)
    return plan_instances(corpus, np.random.default_rng(seed), **options)


@pytest.fixture
def instances(corpus):
    """At least NUM_INSTANCES instances from passes with seeds 0, 1, ...; [N] fields."""
    if "instances" not in _CACHE:
        passes, total, seed = [], 0, 0
        while total < NUM_INSTANCES:
            passes.append(plan(corpus, seed))
            total += len(passes[-1].doc)
            seed += 1
        _CACHE["instances"] = Instances.concatenate(passes)
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
    grid = np.array([(a, b, m) for a in range(1, 25) for b in range(1, 25) for m in range(2, 40)])
    cut_a, cut_b = truncation(grid[:, 0], grid[:, 1], grid[:, 2:3].ravel())
    expected = np.array([_reference_truncation(*row) for row in grid.tolist()])
    np.testing.assert_array_equal(np.stack([cut_a, cut_b], axis=1), expected)


def test_is_next_rate_is_half(instances):
    rate = np.mean(instances.label == IS_NEXT)
    print(f"IsNext rate {rate:.4f} over {len(instances.label)} instances")
    assert abs(rate - 0.5) <= 0.01


def test_pairs_fit_and_are_nonempty(instances):
    len_a = instances.a_stop - instances.a_start
    len_b = instances.b_stop - instances.b_start
    assert len_a.min() >= 1 and len_b.min() >= 1
    assert (len_a + len_b).max() <= MAX_SEQ_LENGTH - 3
    assert (len_a + len_b).max() == MAX_SEQ_LENGTH - 3  # long chunks are truncated to fit


def test_segments_lie_in_their_documents(corpus, instances):
    token_doc = np.repeat(np.arange(corpus.num_documents),
                          np.diff(corpus.sentence_starts[corpus.doc_sentences]))
    assert (token_doc[instances.a_start] == instances.doc).all()
    assert (token_doc[instances.a_stop - 1] == instances.doc).all()
    assert (token_doc[instances.b_start] == instances.b_doc).all()
    assert (token_doc[instances.b_stop - 1] == instances.b_doc).all()


def test_is_next_continues_and_random_next_comes_from_another_document(corpus, instances):
    is_next = instances.label == IS_NEXT
    assert (instances.b_doc[is_next] == instances.doc[is_next]).all()
    # A ends and B starts at the same sentence break, up to the truncated tokens.
    starts = corpus.sentence_starts
    a_stop, b_start = instances.a_stop[is_next], instances.b_start[is_next]
    boundary = starts[np.searchsorted(starts, a_stop, side="left")]
    assert ((a_stop <= boundary) & (boundary <= b_start)).all()
    random_next = instances.label == RANDOM_NEXT
    assert (random_next | is_next).all()
    assert (instances.b_doc[random_next] != instances.doc[random_next]).all()


def test_random_next_documents_are_uniform(corpus, instances):
    """Random next segments come from every other document, single-sentence ones included."""
    chosen = np.bincount(instances.b_doc[instances.label == RANDOM_NEXT],
                         minlength=corpus.num_documents)
    expected = chosen.sum() / corpus.num_documents
    single = corpus.sentences_per_document() == 1
    assert chosen[single].sum() > 0
    chi2 = ((chosen - expected) ** 2 / expected).sum()  # df = D - 1, sd = sqrt(2 (D - 1))
    df = corpus.num_documents - 1
    assert abs(chi2 - df) < 5 * np.sqrt(2 * df), (chi2, df)


def test_single_sentence_documents_never_give_segment_a(corpus, instances):
    assert (corpus.sentences_per_document()[np.unique(instances.doc)] >= 2).all()


def test_one_pass_covers_the_multi_sentence_documents(corpus):
    """Unused sentences of random-next chunks are put back: (nearly) every sentence is used."""
    rows = plan(corpus, 1)
    covered = np.zeros(corpus.tokens.size + 1, np.int64)  # +1 at starts, -1 at stops
    is_next = rows.label == IS_NEXT
    for start, stop in ((rows.a_start, rows.a_stop), (rows.b_start[is_next], rows.b_stop[is_next])):
        np.add.at(covered, start, 1)
        np.add.at(covered, stop, -1)
    token_used = np.cumsum(covered)[:-1] > 0
    sentence_used = np.add.reduceat(token_used, corpus.sentence_starts[:-1]) > 0
    multi = np.repeat(corpus.sentences_per_document() >= 2, corpus.sentences_per_document())
    assert sentence_used[multi].mean() > 0.99


def test_short_seq_prob_shortens_targets(corpus):
    def mean_length(short_seq_prob):
        rows = plan(corpus, 2, short_seq_prob=short_seq_prob)
        return np.mean(rows.a_stop - rows.a_start + rows.b_stop - rows.b_start)

    assert mean_length(1.0) < 0.8 * mean_length(0.0)


def test_no_nsp_gives_consecutive_single_segments(corpus):
    rows = plan(corpus, 3, short_seq_prob=0.0, nsp=False)
    assert (rows.b_doc == -1).all() and (rows.label == 0).all()
    assert (rows.a_stop - rows.a_start).max() == MAX_SEQ_LENGTH - 2
    assert (rows.a_stop > rows.a_start).all()
    same_doc = rows.doc[1:] == rows.doc[:-1]
    assert (rows.a_start[1:][same_doc] >= rows.a_stop[:-1][same_doc]).all()  # in order
    assert len(np.unique(rows.doc)) == corpus.num_documents  # one-sentence docs too


def test_a_document_range_plans_as_a_corpus_of_its_own(corpus):
    """Documents [lo, hi) pair among themselves, exactly as if they were the whole corpus:
    what lets a Beam worker build one static group from that group's documents alone."""
    lo, hi = 100, 400
    inside = plan(corpus, 5, documents=(lo, hi))
    first, stop = corpus.doc_sentences[lo], corpus.doc_sentences[hi]
    own = Corpus.from_arrays(
        corpus.tokens[corpus.sentence_starts[first]:corpus.sentence_starts[stop]],
        np.diff(corpus.sentence_starts)[first:stop], corpus.sentences_per_document()[lo:hi])
    alone = plan(own, 5)
    shift = corpus.sentence_starts[first]
    for docs in (inside.doc, inside.b_doc):
        assert ((docs >= lo) & (docs < hi)).all()
    for field in ("a_start", "a_stop", "b_start", "b_stop"):
        np.testing.assert_array_equal(getattr(inside, field), getattr(alone, field) + shift)
    np.testing.assert_array_equal(inside.doc, alone.doc + lo)
    np.testing.assert_array_equal(inside.label, alone.label)


def test_pack_layout():
    corpus = Corpus([[np.array([5, 6, 7]), np.array([8, 9])], [np.array([10])]])
    pair = Instances(*(np.array([v]) for v in (0, 0, 3, 0, 3, 5, IS_NEXT)))
    single = Instances(*(np.array([v]) for v in (1, 5, 6, -1, 0, 0, 0)))
    input_ids, input_mask, segment_ids = pack(corpus, Instances.concatenate([pair, single]),
                                              SPECIAL, 10)
    assert input_ids.tolist() == [[2, 5, 6, 7, 3, 8, 9, 3, 0, 0], [2, 10, 3, 0, 0, 0, 0, 0, 0, 0]]
    assert input_mask.tolist() == [[1] * 8 + [0] * 2, [1] * 3 + [0] * 7]
    assert segment_ids.tolist() == [[0] * 5 + [1] * 3 + [0] * 2, [0] * 10]
    assert input_ids.dtype == input_mask.dtype == segment_ids.dtype == np.int32


def test_corpus_drops_empty_sentences_and_documents_within_groups():
    empty = np.array([], np.int32)
    corpus = Corpus([[], [empty], [np.array([5]), empty, np.array([6, 7])], [np.array([8])]],
                    group_sizes=[2, 2])
    assert corpus.num_documents == 2 and corpus.sentence_starts.tolist() == [0, 1, 3, 4]
    assert corpus.doc_sentences.tolist() == [0, 2, 3]
    assert [corpus.group(g) for g in range(2)] == [(0, 0), (0, 2)]
    assert corpus.document_tokens(0).tolist() == [5, 6, 7]


def test_nsp_without_multi_sentence_documents_is_an_error():
    corpus = Corpus([[np.array([5, 6])], [np.array([7])]])
    with pytest.raises(ValueError, match="NSP=False"):
        check_corpus(corpus, nsp=True)
    assert len(plan(corpus, 0, max_seq_length=16).doc) == 0
    assert len(plan(corpus, 0, max_seq_length=16, nsp=False).doc) == 2


def test_pack_matches_a_per_row_reference(corpus, instances):
    """Packing a block equals building each row by list concatenation, with or without B."""
    rows = np.random.default_rng(0).choice(len(instances.doc), 500, replace=False)
    table = instances.take(rows)
    single = table._replace(b_doc=np.where(np.arange(500) % 3 == 0, -1, table.b_doc))
    for block in (table, single):
        input_ids, input_mask, segment_ids = pack(corpus, block, SPECIAL, MAX_SEQ_LENGTH)
        for r in range(500):
            a = corpus.tokens[block.a_start[r]:block.a_stop[r]].tolist()
            ids, segments = [SPECIAL.cls, *a, SPECIAL.sep], [0] * (len(a) + 2)
            if block.b_doc[r] >= 0:
                b = corpus.tokens[block.b_start[r]:block.b_stop[r]].tolist()
                ids, segments = ids + b + [SPECIAL.sep], segments + [1] * (len(b) + 1)
            pad = MAX_SEQ_LENGTH - len(ids)
            assert input_ids[r].tolist() == ids + [SPECIAL.pad] * pad, r
            assert input_mask[r].tolist() == [1] * len(ids) + [0] * pad, r
            assert segment_ids[r].tolist() == segments + [0] * pad, r


def _random_corpus(seed=0, documents=60):
    """Documents of 0-8 sentences of 0-40 tokens (empty ones included)."""
    rng = np.random.default_rng(seed)
    return [[rng.integers(5, 100, rng.integers(0, 41)).astype(np.int32)
             for _ in range(rng.integers(0, 9))] for _ in range(documents)]


def test_corpus_counts_kept_sentences_around_empty_documents():
    documents = [[], [np.array([], np.int32)], *_random_corpus(), [np.array([], np.int32)], []]
    corpus = Corpus(documents)
    kept = [[s for s in doc if s.size] for doc in documents]
    kept = [doc for doc in kept if doc]
    assert corpus.sentences_per_document().tolist() == [len(doc) for doc in kept]
    assert np.diff(corpus.sentence_starts).tolist() == [s.size for doc in kept for s in doc]
    assert corpus.sentence_starts.dtype == corpus.doc_sentences.dtype == np.int64


@pytest.mark.parametrize("nsp", [True, False])
def test_planned_tables_are_compact_and_read_as_wide_ones(monkeypatch, nsp):
    """int32 positions and documents, int8 labels; a corpus too large for int32 plans the same
    instances in int64 (index_dtypes), and both pack to the same rows."""
    corpus = Corpus(_random_corpus())
    compact = plan(corpus, 3, max_seq_length=32, nsp=nsp)
    assert [f.dtype for f in compact] == [np.int32] * 6 + [np.int8]
    monkeypatch.setattr(nsp_module, "index_dtypes", lambda corpus: (np.int64, np.int64))
    wide = plan(corpus, 3, max_seq_length=32, nsp=nsp)
    assert [f.dtype for f in wide] == [np.int64] * 6 + [np.int8]
    for a, b in zip(compact, wide, strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(pack(corpus, compact, SPECIAL, 32), pack(corpus, wide, SPECIAL, 32),
                    strict=True):
        assert a.dtype == b.dtype == np.int32
        np.testing.assert_array_equal(a, b)


def test_index_dtypes_widen_past_int32():
    def sized(tokens, documents):  # a zero-stride view: no memory for 2**31 ids
        return SimpleNamespace(tokens=np.broadcast_to(np.int32(0), (tokens,)),
                               num_documents=documents)

    assert index_dtypes(sized(2**31 - 1, 10)) == (np.int32, np.int32)
    assert index_dtypes(sized(2**31, 10)) == (np.int64, np.int32)
    assert index_dtypes(sized(10, 2**31)) == (np.int32, np.int64)
