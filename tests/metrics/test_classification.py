"""Classification metrics against scikit-learn on random and hand-built label vectors."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertjax.metrics.classification import accuracy, f1, macro_f1, matthews_corrcoef

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

sk = pytest.importorskip("sklearn.metrics")


def _label_pairs(max_classes: int = 5, max_len: int = 40):
    """(gold, pred, n_classes): equal-length int label lists over 1..max_classes classes."""

    def pair(k_n):
        k, n = k_n
        labels = st.lists(st.integers(0, k - 1), min_size=n, max_size=n)
        return st.tuples(labels, labels, st.just(k))

    return st.tuples(st.integers(1, max_classes), st.integers(1, max_len)).flatmap(pair)


def _sk(fn, *args, **kwargs):
    """A scikit-learn metric with its undefined-metric warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


@settings(max_examples=300, deadline=None)
@given(_label_pairs())
def test_accuracy_mcc_macro_f1_match_sklearn(case):
    gold, pred, _ = case
    assert accuracy(gold, pred) == pytest.approx(sk.accuracy_score(gold, pred), abs=1e-12)
    assert matthews_corrcoef(gold, pred) == pytest.approx(
        _sk(sk.matthews_corrcoef, gold, pred), abs=1e-12
    )
    assert macro_f1(gold, pred) == pytest.approx(
        _sk(sk.f1_score, gold, pred, average="macro", zero_division=0), abs=1e-12
    )


@settings(max_examples=200, deadline=None)
@given(_label_pairs(max_classes=2))
def test_binary_f1_matches_sklearn(case):
    gold, pred, _ = case
    for positive in (0, 1):
        expected = _sk(sk.f1_score, gold, pred, pos_label=positive, labels=[0, 1], zero_division=0)
        assert f1(gold, pred, positive=positive) == pytest.approx(expected, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(_label_pairs(), st.data())
def test_macro_f1_with_explicit_labels_matches_sklearn(case, data):
    """Listed classes absent from gold and pred count as F1 0; unlisted classes are ignored."""
    gold, pred, k = case
    labels = data.draw(st.lists(st.integers(0, k + 2), min_size=1, max_size=k + 3, unique=True))
    expected = _sk(sk.f1_score, gold, pred, labels=labels, average="macro", zero_division=0)
    assert macro_f1(gold, pred, labels=labels) == pytest.approx(expected, abs=1e-12)


def test_large_random_vectors_and_string_labels_match_sklearn():
    rng = np.random.default_rng(0)
    names = np.array(["entailment", "neutral", "contradiction"])
    gold = names[rng.integers(0, 3, 5000)]
    pred = np.where(rng.random(5000) < 0.7, gold, names[rng.integers(0, 3, 5000)])
    assert accuracy(gold, pred) == pytest.approx(sk.accuracy_score(gold, pred))
    assert matthews_corrcoef(gold, pred) == pytest.approx(sk.matthews_corrcoef(gold, pred))
    assert macro_f1(gold, pred) == pytest.approx(sk.f1_score(gold, pred, average="macro"))
    expected = sk.f1_score(gold, pred, labels=["neutral"], average="macro")
    assert f1(gold, pred, positive="neutral") == pytest.approx(expected)


def test_hand_built_cases():
    gold, pred = [1, 1, 1, 0], [1, 0, 1, 1]
    assert accuracy(gold, pred) == 0.5
    assert matthews_corrcoef(gold, pred) == pytest.approx(-1 / 3)
    assert f1(gold, pred) == pytest.approx(2 / 3)  # TP 2, FP 1, FN 1
    assert macro_f1(gold, pred) == pytest.approx((0.0 + 2 / 3) / 2)
    assert macro_f1(gold, pred, labels=[0, 1, 2]) == pytest.approx((0.0 + 2 / 3 + 0.0) / 3)


def test_undefined_cases_score_zero_like_sklearn():
    gold, constant = [0, 1, 1, 0], [1, 1, 1, 1]
    assert matthews_corrcoef(gold, constant) == 0.0 == _sk(sk.matthews_corrcoef, gold, constant)
    assert matthews_corrcoef([2, 2], [2, 2]) == 0.0
    assert f1([0, 0], [0, 0], positive=1) == 0.0  # positive class never gold nor predicted


def test_mismatched_or_empty_inputs_raise_one_line_errors():
    with pytest.raises(ValueError, match="gold has shape \\(3,\\) but pred has \\(2,\\)"):
        accuracy([0, 1, 1], [0, 1])
    with pytest.raises(ValueError, match="no examples"):
        matthews_corrcoef([], [])
    with pytest.raises(ValueError, match="labels is empty"):
        macro_f1([0], [0], labels=[])
