"""Classification metrics of the GLUE-style papers: accuracy, Matthews correlation, F1.

Labels may be ints, bools or strings; predictions are labels (argmax done by the caller).
Every ill-defined case scores 0.0, as scikit-learn does with ``zero_division=0``, so a
degenerate dev set gives a number rather than a warning or nan.
"""

from collections.abc import Hashable, Sequence

import numpy as np


def paired_arrays(gold: Sequence, pred: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """Gold and predictions as 1-D arrays of one length; a one-line error if they are not."""
    gold_arr, pred_arr = np.asarray(gold), np.asarray(pred)
    if gold_arr.ndim != 1 or gold_arr.shape != pred_arr.shape:
        raise ValueError(
            f"gold has shape {gold_arr.shape} but pred has {pred_arr.shape}: "
            "pass one label per example, in the same order"
        )
    if gold_arr.size == 0:
        raise ValueError("gold and pred are empty: there are no examples to score")
    return gold_arr, pred_arr


def accuracy(gold: Sequence, pred: Sequence) -> float:
    """Fraction of examples whose predicted label equals the gold label."""
    gold_arr, pred_arr = paired_arrays(gold, pred)
    return float(np.mean(gold_arr == pred_arr))


def matthews_corrcoef(gold: Sequence, pred: Sequence) -> float:
    """Matthews correlation (CoLA's metric) in its multi-class form (Gorodkin's R_K).

    0.0 when undefined (gold or pred holds a single class), as scikit-learn returns.
    """
    gold_arr, pred_arr = paired_arrays(gold, pred)
    n = len(gold_arr)
    _, ids = np.unique(np.concatenate([gold_arr, pred_arr]), return_inverse=True)
    gold_counts = np.bincount(ids[:n], minlength=ids.max() + 1).astype(np.float64)
    pred_counts = np.bincount(ids[n:], minlength=ids.max() + 1).astype(np.float64)
    correct = float(np.sum(gold_arr == pred_arr))
    cov_gold_pred = correct * n - gold_counts @ pred_counts
    var_pred = float(n) ** 2 - pred_counts @ pred_counts
    var_gold = float(n) ** 2 - gold_counts @ gold_counts
    if var_pred * var_gold == 0:
        return 0.0
    return float(cov_gold_pred / np.sqrt(var_pred * var_gold))


def _class_f1(gold: np.ndarray, pred: np.ndarray, label: Hashable) -> float:
    """F1 of one class, 2*TP / (2*TP + FP + FN); 0.0 when the class is never gold nor predicted."""
    is_gold, is_pred = gold == label, pred == label
    denominator = int(is_gold.sum() + is_pred.sum())  # = 2*TP + FP + FN
    return 2.0 * int(np.sum(is_gold & is_pred)) / denominator if denominator else 0.0


def f1(gold: Sequence, pred: Sequence, positive: Hashable = 1) -> float:
    """Binary F1 of the ``positive`` class (MRPC and QQP report it next to accuracy)."""
    gold_arr, pred_arr = paired_arrays(gold, pred)
    return _class_f1(gold_arr, pred_arr, positive)


def macro_f1(gold: Sequence, pred: Sequence, labels: Sequence | None = None) -> float:
    """Unweighted mean of per-class F1 over ``labels`` (default: every gold or predicted label).

    Equals scikit-learn's ``f1_score(average="macro", labels=labels, zero_division=0)``: a class
    listed in ``labels`` with no gold and no predicted example has F1 0.0 and still counts in
    the mean, so pass the full label set to get a score comparable across dev sets; labels not
    listed are ignored.
    """
    gold_arr, pred_arr = paired_arrays(gold, pred)
    classes = np.unique(np.concatenate([gold_arr, pred_arr])) if labels is None else labels
    if len(classes) == 0:
        raise ValueError("labels is empty: list the classes to average over, or pass None")
    return float(np.mean([_class_f1(gold_arr, pred_arr, label) for label in classes]))
