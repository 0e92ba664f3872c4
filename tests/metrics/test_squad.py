"""SQuAD scoring on cases worked out by hand from the official v2.0 script's rules (the
transformers release installed here no longer ships its port, squad_metrics), a brute-force
check of the null-threshold search, and the real SQuAD 2.0 dev sample."""

import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertjax.metrics.squad import (
    apply_null_threshold,
    best_null_threshold,
    evaluate,
    exact_match,
    f1,
    normalize_answer,
)
from tests.conftest import shared_file

pytestmark = pytest.mark.unit  # the unit tier: make test-unit


def test_normalization_drops_case_punctuation_articles_and_extra_spaces():
    assert normalize_answer("  The  Denver-Broncos, a TEAM!  ") == "denverbroncos team"
    assert normalize_answer("An apple; the end.") == "apple end"
    assert normalize_answer("theatre anthem") == "theatre anthem"  # articles are whole words
    assert normalize_answer("The.") == ""


@pytest.mark.parametrize(
    "prediction, golds, em, f1_value",
    [
        ("The Cat.", ["cat"], 1, 1.0),  # case, article and punctuation differences
        ("a cat sat", ["the cat"], 0, 2 / 3),  # P 1/2, R 1
        ("Denver Broncos", ["Broncos", "Denver Broncos", "the Denver Broncos team"], 1, 1.0),
        ("Denver", ["Denver Broncos", "Broncos of Denver"], 0, 2 / 3),  # max(2/3, 1/2)
        ("the the cat cat cat", ["cat cat"], 0, 0.8),  # shared tokens counted with multiplicity
        ("dog", ["cat"], 0, 0.0),
        ("", ["cat"], 0, 0.0),  # empty prediction on an answerable question
        ("", [""], 1, 1.0),  # SQuAD 2.0 unanswerable: only "" is right
        ("", [], 1, 1.0),
        ("The .", [""], 1, 1.0),  # normalizes to ""
        ("nothing", [""], 0, 0.0),
        ("cat", ["the", "cat"], 1, 1.0),  # a gold answer that normalizes to "" is dropped
    ],
)
def test_exact_match_and_f1_hand_built(prediction, golds, em, f1_value):
    assert exact_match(prediction, golds) == em
    assert f1(prediction, golds) == pytest.approx(f1_value)


GOLDS = {"q1": ["Paris", "the city of Paris"], "q2": ["1066"], "q3": [""], "q4": [""]}
PREDS = {"q1": "city of Paris", "q2": "in 1066 AD", "q3": "", "q4": "London", "extra": "ignored"}


def test_evaluate_squad2_reports_answerable_and_unanswerable_apart():
    scores = evaluate(GOLDS, PREDS)
    # EM: q1 1, q2 0, q3 1, q4 0. F1: q1 1, q2 1/2 (P 1/3, R 1), q3 1, q4 0.
    assert scores == pytest.approx(
        {
            "exact": 50.0,
            "f1": 62.5,
            "total": 4,
            "HasAns_exact": 50.0,
            "HasAns_f1": 75.0,
            "HasAns_total": 2,
            "NoAns_exact": 50.0,
            "NoAns_f1": 50.0,
            "NoAns_total": 2,
        }
    )


def test_evaluate_squad11_has_no_split_and_missing_predictions_raise():
    scores = evaluate({"a": ["x y"], "b": ["z"]}, {"a": "x", "b": "z"})
    assert scores == pytest.approx({"exact": 50.0, "f1": 100 * (2 / 3 + 1) / 2, "total": 2})
    with pytest.raises(ValueError, match="predictions lacks 1 of 2 questions \\(first: 'b'\\)"):
        evaluate({"a": ["x"], "b": ["y"]}, {"a": "x"})
    with pytest.raises(ValueError, match="no questions to score"):
        evaluate({}, {})


def test_best_null_threshold_hand_built():
    # Sorted by null-minus-span difference: q2 (-2.0), q1 (-1.0), q4 (0.5), q3 (3.0).
    diffs = {"q1": -1.0, "q2": -2.0, "q3": 3.0, "q4": 0.5}
    # All "": EM 2 (q3, q4). Letting answers in: q2 +0 EM / +0.5 F1, q1 +1 / +1,
    # q4 -1 / -1, q3 +0 / +0 ("" anyway). Best F1 (3.5/4) at threshold -1.0, EM 3/4 there.
    assert best_null_threshold(diffs, PREDS, GOLDS) == pytest.approx((-1.0, 75.0, 87.5))
    assert best_null_threshold(diffs, PREDS, GOLDS, metric="exact") == pytest.approx(
        (-1.0, 75.0, 87.5)
    )
    with pytest.raises(ValueError, match="null_score_diff lacks 1 of 5 questions"):
        apply_null_threshold(PREDS, diffs, -1.0)  # "extra" has no score difference
    thresholded = apply_null_threshold({q: PREDS[q] for q in GOLDS}, diffs, -1.0)
    assert thresholded["q4"] == "" and thresholded["q1"] == "city of Paris"
    assert evaluate(GOLDS, thresholded)["f1"] == pytest.approx(87.5)


def test_best_null_threshold_when_answering_nothing_is_best():
    golds, preds = {"a": [""], "b": [""]}, {"a": "x", "b": "y"}
    diffs = {"a": 1.0, "b": 2.0}
    threshold, exact, f1_value = best_null_threshold(diffs, preds, golds)
    assert (exact, f1_value) == (100.0, 100.0) and threshold < 1.0
    assert evaluate(golds, apply_null_threshold(preds, diffs, threshold))["exact"] == 100


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["f1", "exact"]))
def test_best_null_threshold_is_the_brute_force_optimum(seed, metric):
    """Over every observed difference (and 'all empty'), no threshold scores higher, the
    returned one is the smallest that scores best (the official search keeps the first strict
    improvement), and it reproduces the returned scores through evaluate()."""
    rng = random.Random(seed)
    words = ["red", "blue", "the", "green", "a", "cat"]
    phrase = lambda: " ".join(rng.choices(words, k=rng.randint(0, 3)))  # noqa: E731
    qids = [f"q{i}" for i in range(rng.randint(1, 12))]
    golds = {q: [phrase() for _ in range(rng.randint(1, 2))] for q in qids}
    preds = {q: phrase() for q in qids}
    diffs = {q: float(rng.randint(-3, 3)) for q in qids}  # many ties
    threshold, exact, f1_value = best_null_threshold(diffs, preds, golds, metric=metric)
    realized = evaluate(golds, apply_null_threshold(preds, diffs, threshold))
    assert (realized["exact"], realized["f1"]) == pytest.approx((exact, f1_value))
    candidates = sorted({-math.inf, *diffs.values()})
    scores = [evaluate(golds, apply_null_threshold(preds, diffs, t))[metric] for t in candidates]
    assert {"exact": exact, "f1": f1_value}[metric] == pytest.approx(max(scores))
    first_best = candidates[next(i for i, v in enumerate(scores) if v > max(scores) - 1e-9)]
    assert threshold == first_best or (first_best == -math.inf and threshold < min(diffs.values()))


def test_real_squad2_dev_sample():
    data = json.loads(shared_file("squad-v2-dev-5/dev.json").read_text())
    golds = {
        qa["id"]: [a["text"] for a in qa["answers"]]
        for article in data["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    }
    n_no_ans = sum(not answers for answers in golds.values())
    assert 0 < n_no_ans < len(golds) == 1407
    perfect = evaluate(golds, {q: (answers or [""])[0] for q, answers in golds.items()})
    assert perfect["exact"] == perfect["f1"] == 100.0 and perfect["NoAns_total"] == n_no_ans
    abstain = evaluate(golds, dict.fromkeys(golds, ""))
    assert abstain["exact"] == pytest.approx(100.0 * n_no_ans / len(golds))
    assert abstain["HasAns_f1"] == 0.0 and abstain["NoAns_f1"] == 100.0
