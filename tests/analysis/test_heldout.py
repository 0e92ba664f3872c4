"""The unigram model the held-out scores are read against: add-one smoothed frequencies, its
accuracy that of always guessing the most frequent token. (Held-out scores of real runs of
each family: the families study's quick run, tests/scripts/test_families.py.)"""

import collections
import math

import numpy as np
import pytest

from bertjax.analysis.heldout import Unigram, held_out


def test_unigram_accuracy_and_loss():
    unigram = Unigram(collections.Counter({2: 6, 3: 2}), size=4)  # total 8 + 4
    assert unigram.top == 2
    accuracy, loss = unigram.score(np.array([2, 3, 0, 2]))
    assert accuracy == 0.5
    expected = -np.mean([math.log(7 / 12), math.log(3 / 12), math.log(1 / 12), math.log(7 / 12)])
    assert loss == pytest.approx(expected)


def test_unknown_family_is_one_line():
    with pytest.raises(ValueError, match="choose bert, gpt or elmo"):
        held_out("workdir", "t5", "a.txt", "b.txt")
