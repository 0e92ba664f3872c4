"""The metric tables: key order, main metric per kind of task, extras routed by name."""

import pytest

from bertjax import metrics
from bertjax.metrics import compute, squad
from bertjax.metrics.classification import macro_f1
from bertjax.metrics.tagging import entity_scores

pytestmark = pytest.mark.unit  # the unit tier: make test-unit


def test_main_metric_per_table():
    tables = {"CLASSIFICATION": "accuracy", "PAIR_CLASSIFICATION": "accuracy",
              "REGRESSION": "pearson", "TAGGING": "f1", "SQUAD": "exact",
              "MULTIPLE_CHOICE": "accuracy"}
    assert {name: getattr(metrics, name)[0][0] for name in tables} == tables


def test_compute_lists_headline_keys_first_then_details():
    gold, pred = [0, 1, 2, 2], [0, 2, 2, 1]
    scores = compute(metrics.CLASSIFICATION, gold, pred, labels=[0, 1, 2, 3])
    assert list(scores) == ["accuracy", "mcc", "macro_f1"]
    assert scores["macro_f1"] == macro_f1(gold, pred, labels=[0, 1, 2, 3])
    assert list(compute(metrics.PAIR_CLASSIFICATION, [1, 0], [1, 1], positive=0)) == [
        "accuracy", "f1"]
    assert list(compute(metrics.REGRESSION, [1.0, 2.0, 3.0], [1.0, 3.0, 2.0])) == [
        "pearson", "spearman"]

    tags = [["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]]
    scores = compute(metrics.TAGGING, *tags, scheme="iob1")
    assert list(scores)[:3] == ["f1", "precision", "recall"]
    assert scores == entity_scores(*tags)

    golds, preds = {"a": ["cat"], "b": [""]}, {"a": "the cat", "b": "dog"}
    scores = compute(metrics.SQUAD, golds, preds)
    assert list(scores)[:2] == ["exact", "f1"] and scores == squad.evaluate(golds, preds)


def test_an_unknown_option_is_a_one_line_error():
    with pytest.raises(ValueError, match="\\['scheme'\\] are not options of any of the metrics "
                                         "\\['pearson', 'spearman'\\]"):
        compute(metrics.REGRESSION, [1.0, 2.0], [1.0, 2.0], scheme="iob2")
