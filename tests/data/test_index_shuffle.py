"""data/index_shuffle.py: a bijection of [0, n) for every n, the same for the same seed, and
positions spread as a uniformly random permutation spreads them (chi-square tests)."""

import numpy as np
import pytest
from scipy import stats

from bertjax.data.index_shuffle import shuffled_index


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 16, 17, 255, 1000, 4097])
def test_a_permutation_of_range_n(n):
    order = shuffled_index(np.arange(n), n, (0, 1))
    assert sorted(order.tolist()) == list(range(n))
    np.testing.assert_array_equal(order, shuffled_index(np.arange(n), n, (0, 1)))
    assert [int(shuffled_index(i, n, (0, 1))) for i in range(n)] == order.tolist()  # one by one


def test_seeds_name_different_permutations():
    orders = {tuple(shuffled_index(np.arange(50), 50, (seed, 0)).tolist()) for seed in range(20)}
    assert len(orders) == 20
    assert tuple(range(50)) not in orders


def test_positions_are_uniform_over_seeds():
    """Over 4,000 seeds, each value lands at each of 10 positions equally often, and value 0
    comes before value 1 half the time (p-values above 1e-3: a wrong construction, e.g. too
    few rounds or a weak round function, fails them by orders of magnitude)."""
    n, seeds = 10, 4000
    orders = np.stack([shuffled_index(np.arange(n), n, (seed, 7)) for seed in range(seeds)])
    counts = np.stack([np.bincount(orders[:, j], minlength=n) for j in range(n)])
    assert stats.chisquare(counts.ravel()).pvalue > 1e-3
    before = int((orders[:, 0] < orders[:, 1]).sum())
    assert stats.binomtest(before, seeds, 0.5).pvalue > 1e-3


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="n >= 1"):
        shuffled_index(0, 0, (0,))
    with pytest.raises(IndexError, match=r"outside \[0, 5\)"):
        shuffled_index(np.array([0, 5]), 5, (0,))
