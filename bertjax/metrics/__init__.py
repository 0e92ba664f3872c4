"""Downstream metrics of the BERT, GPT and ELMo papers, in plain numpy and Python.

The tables below list, per kind of task, the (key, function) pairs reported in order; the
first key is the main metric, the one that picks the best checkpoint. A task type
(bertjax.finetune.tasks) names its table; ``compute`` runs one on gold labels and predictions
and returns one flat dict, ready for eval_results.json.
"""

import inspect
from collections.abc import Callable, Sequence

from bertjax.metrics import squad
from bertjax.metrics.classification import accuracy, f1, macro_f1, matthews_corrcoef
from bertjax.metrics.regression import pearson, spearman
from bertjax.metrics.tagging import entity_scores

Metrics = Sequence[tuple[str, Callable]]

# A function returning a dict (entity_scores, squad.evaluate) is called once for all its keys;
# its extra numbers (per entity type, SQuAD 2.0's HasAns/NoAns) follow the listed keys.
CLASSIFICATION: Metrics = (("accuracy", accuracy), ("mcc", matthews_corrcoef),
                           ("macro_f1", macro_f1))
PAIR_CLASSIFICATION: Metrics = (("accuracy", accuracy), ("f1", f1))
REGRESSION: Metrics = (("pearson", pearson), ("spearman", spearman))
TAGGING: Metrics = (("f1", entity_scores), ("precision", entity_scores),
                    ("recall", entity_scores))
SQUAD: Metrics = (("exact", squad.evaluate), ("f1", squad.evaluate))
MULTIPLE_CHOICE: Metrics = (("accuracy", accuracy),)


def compute(metrics: Metrics, gold: object, pred: object, **extras: object) -> dict[str, float]:
    """All of ``metrics``, main first, as floats.

    ``gold``/``pred`` are label or score sequences, lists of tag sequences for TAGGING, and
    {qid: [answers]} / {qid: text} dicts for SQUAD. ``extras`` go to the functions that take
    them by name, e.g. ``labels=`` (macro_f1), ``positive=`` (f1), ``scheme=`` (entity_scores).
    """
    unused = set(extras) - {p for _, fn in metrics for p in inspect.signature(fn).parameters}
    if unused:
        raise ValueError(f"{sorted(unused)} are not options of any of the metrics "
                         f"{[key for key, _ in metrics]}")
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
    return {k: float(v) for k, v in scores.items()}
