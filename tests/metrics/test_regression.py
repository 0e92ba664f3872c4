"""Pearson and Spearman against scipy.stats on random, tied and constant score vectors."""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertjax.metrics.regression import _average_ranks, pearson, spearman

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

stats = pytest.importorskip("scipy.stats")

_FLOATS = st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False)
_TIED = st.integers(-3, 3).map(float)  # few distinct values: many ties


def _vector_pairs(values):
    return st.integers(3, 40).flatmap(
        lambda n: st.tuples(*[st.lists(values, min_size=n, max_size=n)] * 2)
    )


def _scipy(fn, x, y) -> float:
    """A scipy correlation, nan (and quiet) on constant input."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(fn(x, y)[0])


@settings(max_examples=300, deadline=None)
@given(st.one_of(_vector_pairs(_FLOATS), _vector_pairs(_TIED)))
def test_pearson_and_spearman_match_scipy(case):
    gold, pred = case
    for ours, ref in ((pearson, stats.pearsonr), (spearman, stats.spearmanr)):
        # both are undefined (NaN) on constant input, and only there: NaN is compared on purpose
        np.testing.assert_allclose(ours(gold, pred), _scipy(ref, gold, pred), atol=1e-9,
                                   equal_nan=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(_TIED, min_size=1, max_size=30))
def test_average_ranks_match_scipy_rankdata(values):
    np.testing.assert_array_equal(_average_ranks(np.array(values)), stats.rankdata(values))


def test_hand_built_ties():
    gold, pred = [1.0, 2.0, 2.0, 3.0], [1.0, 3.0, 2.0, 2.0]
    # ranks (1, 2.5, 2.5, 4) and (1, 4, 2.5, 2.5): centred (-1.5, 0, 0, 1.5), (-1.5, 1.5, 0, 0)
    assert spearman(gold, pred) == pytest.approx(2.25 / 4.5)
    assert spearman(gold, pred) == pytest.approx(stats.spearmanr(gold, pred)[0])
    x, y = [1, 2, 3], [2, 4, 6.5]
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0])


def test_constant_input_gives_nan_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(pearson([0.1, 0.1, 0.1], [1.0, 2.0, 3.0]))
        assert math.isnan(spearman([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]))


def test_too_few_examples_raise():
    with pytest.raises(ValueError, match="at least 2 examples"):
        pearson([1.0], [2.0])
