"""Downstream metrics of the BERT, GPT and ELMo papers, in plain numpy and Python.

``TASK_METRICS`` lists, per task type, the (key, function) pairs reported in order; the first
key is the main metric, the one that picks the best checkpoint. ``compute`` runs them all on
gold labels and predictions and returns one flat dict, ready for eval_results.json.
"""

import inspect
from collections.abc import Callable

from bertjax.metrics import squad
from bertjax.metrics.classification import accuracy, f1, macro_f1, matthews_corrcoef
from bertjax.metrics.regression import pearson, spearman
from bertjax.metrics.tagging import entity_scores

# A function returning a dict (entity_scores, squad.evaluate) is called once for all its keys;
# its extra numbers (per entity type, SQuAD 2.0's HasAns/NoAns) follow the listed keys.
TASK_METRICS: dict[str, tuple[tuple[str, Callable], ...]] = {
    "classification": (("accuracy", accuracy), ("mcc", matthews_corrcoef), ("macro_f1", macro_f1)),
    "pair_classification": (("accuracy", accuracy), ("f1", f1)),
    "regression": (("pearson", pearson), ("spearman", spearman)),
    "tagging": (("f1", entity_scores), ("precision", entity_scores), ("recall", entity_scores)),
    "qa": (("exact", squad.evaluate), ("f1", squad.evaluate)),
    "multiple_choice": (("accuracy", accuracy),),
}


def _metrics(task_type: str) -> tuple[tuple[str, Callable], ...]:
    if task_type not in TASK_METRICS:
        raise ValueError(f"task type {task_type!r} is unknown: use one of {sorted(TASK_METRICS)}")
    return TASK_METRICS[task_type]


def main_metric(task_type: str) -> str:
    """Key of the metric that selects the best checkpoint for ``task_type`` (higher is better)."""
    return _metrics(task_type)[0][0]


def compute(task_type: str, gold: object, pred: object, **extras: object) -> dict[str, float]:
    """All metrics of ``task_type``, main metric first.

    ``gold``/``pred`` are label or score sequences, lists of tag sequences for "tagging", and
    {qid: [answers]} / {qid: text} dicts for "qa". ``extras`` go to the functions that take
    them by name, e.g. ``labels=`` (macro_f1), ``positive=`` (f1), ``scheme=`` (entity_scores).
    """
    metrics = _metrics(task_type)
    unused = set(extras) - {p for _, fn in metrics for p in inspect.signature(fn).parameters}
    if unused:
        raise ValueError(f"{sorted(unused)} are not options of any {task_type!r} metric")
    results: dict[Callable, object] = {}
    scores: dict[str, float] = {}
    for key, fn in metrics:
        if fn not in results:
            params = inspect.signature(fn).parameters
            results[fn] = fn(gold, pred, **{k: v for k, v in extras.items() if k in params})
        value = results[fn]
        scores[key] = value[key] if isinstance(value, dict) else value
    for value in results.values():
        if isinstance(value, dict):
            scores.update({k: v for k, v in value.items() if k not in scores})
    return scores
