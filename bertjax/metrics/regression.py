"""Correlation metrics of STS-B: Pearson and Spearman between gold and predicted scores.

A constant gold or prediction vector has no correlation: both return nan, silently (scipy warns
on every call, which floods a training log that evaluates an untrained regressor).
"""

from collections.abc import Sequence

import numpy as np

from bertjax.metrics.classification import paired_arrays


def _paired_floats(gold: Sequence[float], pred: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    gold_arr, pred_arr = paired_arrays(gold, pred)
    if len(gold_arr) < 2:
        raise ValueError("a correlation needs at least 2 examples; got 1")
    return gold_arr.astype(np.float64), pred_arr.astype(np.float64)


def _correlation(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r of two float vectors; nan if either is constant."""
    if np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan")
    x, y = x - x.mean(), y - y.mean()
    r = (x / np.linalg.norm(x)) @ (y / np.linalg.norm(y))
    return float(np.clip(r, -1.0, 1.0))


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, tied values sharing the mean of their ranks (scipy's ``rankdata``)."""
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    is_new = np.concatenate([[True], sorted_x[1:] != sorted_x[:-1]])
    starts = np.flatnonzero(is_new)
    bounds = np.append(starts, len(x))
    mean_rank = (bounds[:-1] + 1 + bounds[1:]) / 2.0  # ranks start+1 .. end of each tie group
    ranks = np.empty(len(x))
    ranks[order] = mean_rank[np.cumsum(is_new) - 1]
    return ranks


def pearson(gold: Sequence[float], pred: Sequence[float]) -> float:
    """Pearson correlation; nan if gold or pred is constant."""
    return _correlation(*_paired_floats(gold, pred))


def spearman(gold: Sequence[float], pred: Sequence[float]) -> float:
    """Spearman rank correlation with average ranks for ties; nan if gold or pred is constant."""
    gold_arr, pred_arr = _paired_floats(gold, pred)
    return _correlation(_average_ranks(gold_arr), _average_ranks(pred_arr))
