"""The task table: key order, main metric per task type, extras routed by name."""

import pytest

from bertjax.metrics import TASK_METRICS, compute, main_metric, squad
from bertjax.metrics.classification import macro_f1
from bertjax.metrics.tagging import entity_scores


def test_main_metric_per_task_type():
    assert {task: main_metric(task) for task in TASK_METRICS} == {
        "classification": "accuracy",
        "pair_classification": "accuracy",
        "regression": "pearson",
        "tagging": "f1",
        "qa": "exact",
        "multiple_choice": "accuracy",
    }


def test_compute_lists_headline_keys_first_then_details():
    gold, pred = [0, 1, 2, 2], [0, 2, 2, 1]
    scores = compute("classification", gold, pred, labels=[0, 1, 2, 3])
    assert list(scores) == ["accuracy", "mcc", "macro_f1"]
    assert scores["macro_f1"] == macro_f1(gold, pred, labels=[0, 1, 2, 3])
    assert list(compute("pair_classification", [1, 0], [1, 1], positive=0)) == ["accuracy", "f1"]
    assert list(compute("regression", [1.0, 2.0, 3.0], [1.0, 3.0, 2.0])) == ["pearson", "spearman"]

    tags = [["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]]
    scores = compute("tagging", *tags, scheme="iob1")
    assert list(scores)[:3] == ["f1", "precision", "recall"]
    assert scores == entity_scores(*tags)

    golds, preds = {"a": ["cat"], "b": [""]}, {"a": "the cat", "b": "dog"}
    scores = compute("qa", golds, preds)
    assert list(scores)[:2] == ["exact", "f1"] and scores == squad.evaluate(golds, preds)


def test_unknown_task_or_option_is_a_one_line_error():
    with pytest.raises(ValueError, match="task type 'ner' is unknown"):
        compute("ner", [], [])
    with pytest.raises(ValueError, match="\\['scheme'\\] are not options of any 'regression'"):
        compute("regression", [1.0, 2.0], [1.0, 2.0], scheme="iob2")
