"""SQuAD 1.1 / 2.0 scoring, following the rules of the official v2.0 evaluation script.

Answers are compared after normalization (lower-case, no punctuation, no a/an/the, single
spaces). A question is unanswerable when none of its gold answers is a non-empty string (SQuAD
2.0 gives it [""] or []): only a prediction that normalizes to "" is then right. SQuAD 1.1
data, where every question has an answer, are scored by the same rules, as the v2.0 script does.
"""

import math
import re
import string
from collections import Counter
from collections.abc import Collection, Mapping, Sequence

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lower-case, drop ASCII punctuation and the articles a/an/the, and collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _scored_golds(golds: Sequence[str]) -> list[str]:
    """Gold answers that survive normalization, or [""] when none does (unanswerable)."""
    return [g for g in golds if normalize_answer(g)] or [""]


def _token_f1(gold: str, prediction: str) -> float:
    gold_tokens, pred_tokens = normalize_answer(gold).split(), normalize_answer(prediction).split()
    if not gold_tokens or not pred_tokens:  # a no-answer scores 1 against a no-answer, else 0
        return float(gold_tokens == pred_tokens)
    same = sum((Counter(gold_tokens) & Counter(pred_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 if the normalized prediction equals any normalized gold answer, else 0.0."""
    target = normalize_answer(prediction)
    return float(any(normalize_answer(g) == target for g in _scored_golds(golds)))


def f1(prediction: str, golds: Sequence[str]) -> float:
    """Bag-of-tokens F1 between prediction and gold, the best over the gold answers."""
    return max(_token_f1(g, prediction) for g in _scored_golds(golds))


def _require_questions(golds: Mapping) -> None:
    if not golds:
        raise ValueError("the gold answers are empty: there are no questions to score")


def _check_covered(qids: Collection[str], name: str, entries: Mapping) -> None:
    """A one-line error unless ``entries`` has a key for every question in ``qids``."""
    missing = [qid for qid in qids if qid not in entries]
    if missing:
        raise ValueError(
            f"{name} lacks {len(missing)} of {len(qids)} questions (first: {missing[0]!r}): "
            "give every question an entry, '' for no answer"
        )


def _percentages(exact: Mapping, f1s: Mapping, qids: Sequence[str]) -> dict[str, float]:
    total = len(qids)
    return {
        "exact": 100.0 * sum(exact[q] for q in qids) / total,
        "f1": 100.0 * sum(f1s[q] for q in qids) / total,
        "total": total,
    }


def evaluate(
    dataset_golds: Mapping[str, Sequence[str]], predictions: Mapping[str, str]
) -> dict[str, float]:
    """Percent "exact" and "f1", and "total", over every gold question, as the official script.

    When some question is unanswerable (SQuAD 2.0), "HasAns_*" and "NoAns_*" give the same
    numbers over the answerable and unanswerable questions alone. Predictions for questions
    not in ``dataset_golds`` are ignored; a missing one is an error.
    """
    _require_questions(dataset_golds)
    _check_covered(dataset_golds, "predictions", predictions)
    exact = {q: exact_match(predictions[q], g) for q, g in dataset_golds.items()}
    f1s = {q: f1(predictions[q], g) for q, g in dataset_golds.items()}
    scores = _percentages(exact, f1s, list(dataset_golds))
    no_ans = [q for q, golds in dataset_golds.items() if not any(golds)]
    if no_ans:
        has_ans = [q for q, golds in dataset_golds.items() if any(golds)]
        for prefix, qids in (("HasAns", has_ans), ("NoAns", no_ans)):
            part = _percentages(exact, f1s, qids) if qids else {}
            scores.update({f"{prefix}_{k}": v for k, v in part.items()})
    return scores


def apply_null_threshold(
    predictions: Mapping[str, str], null_score_diff: Mapping[str, float], threshold: float
) -> dict[str, str]:
    """Predictions with "" wherever null score minus best span score exceeds ``threshold``."""
    _check_covered(predictions, "null_score_diff", null_score_diff)
    return {q: "" if null_score_diff[q] > threshold else text for q, text in predictions.items()}


def best_null_threshold(
    null_score_diff: Mapping[str, float],
    predictions: Mapping[str, str],
    golds: Mapping[str, Sequence[str]],
    metric: str = "f1",
) -> tuple[float, float, float]:
    """(threshold, exact, f1): the threshold on null-minus-span score that maximizes ``metric``
    ("f1", as the BERT README tunes it, or "exact") over ``golds``, and both scores under it.

    As the official v2 script's ``find_best_thresh``: start from "predict '' everywhere", let
    questions answer in order of increasing score difference, and keep the first observed
    difference that strictly improves the metric. Two choices make the returned threshold
    reproduce the returned scores (``apply_null_threshold`` then ``evaluate``) where the
    official one does not: tied differences are let in together, and when answering nothing
    is best the threshold is just below the smallest difference (the official script says 0.0).
    """
    if metric not in ("f1", "exact"):
        raise ValueError(f"metric={metric!r} is unknown: tune the threshold on 'f1' or 'exact'")
    _require_questions(golds)
    _check_covered(golds, "predictions", predictions)
    _check_covered(golds, "null_score_diff", null_score_diff)
    qids = sorted(golds, key=lambda q: null_score_diff[q])
    null = {q: exact_match("", golds[q]) for q in qids}  # "" scores the same on EM and F1
    totals = [sum(null.values())] * 2  # [exact, f1] summed over questions, all predicting ""
    pick = 0 if metric == "exact" else 1
    best_threshold, best = math.nextafter(null_score_diff[qids[0]], -math.inf), list(totals)
    for i, q in enumerate(qids):
        totals[0] += exact_match(predictions[q], golds[q]) - null[q]
        totals[1] += f1(predictions[q], golds[q]) - null[q]
        diff = null_score_diff[q]
        last_of_tie = i + 1 == len(qids) or null_score_diff[qids[i + 1]] != diff
        if last_of_tie and totals[pick] > best[pick] + 1e-9:  # smaller gains are rounding
            best_threshold, best = diff, list(totals)
    return float(best_threshold), 100.0 * best[0] / len(qids), 100.0 * best[1] / len(qids)
