"""Entity-level precision, recall and F1 of CoNLL NER, with conlleval's chunking rules.

An entity is a maximal run of one type: it starts at B- or S-, at I- or E- after O, E- or S-,
or wherever the type changes; it ends before B-, S- or O, after E- or S-, or where the type
changes. These rules read IOB1, IOB2 (BIO) and IOBES alike (an I- after O opens an entity
rather than being dropped), which is what conlleval and seqeval's default mode score.
"""

from collections import Counter
from collections.abc import Sequence

_BI, _BIES = ("B", "I"), ("B", "I", "E", "S")
_PREFIXES = {"iob1": _BI, "iob2": _BI, "bio": _BI, "iobes": _BIES}


def _split(tag: str, allowed: tuple[str, ...], where: str) -> tuple[str, str]:
    """(prefix, type) of one tag; O and an untyped prefix have type "_" as in seqeval."""
    if tag == "O" or (tag[:1] in allowed and tag[1:2] in ("", "-")):
        return tag[0], tag[2:] or "_"
    raise ValueError(
        f"tag {tag!r} at {where} is not O or {'/'.join(allowed)}-TYPE: "
        "pass scheme='iobes' for E-/S- tags, or fix the tag set"
    )


def entities(
    tags: Sequence[str], allowed: tuple[str, ...] = _BIES, where: str = ""
) -> set[tuple[str, int, int]]:
    """The (type, first, last) token spans of the entities in one sentence's tags."""
    found, start = set(), 0
    prev_tag, prev_type = "O", "_"
    for i, raw in enumerate([*tags, "O"]):  # a final O closes an entity at sentence end
        tag, type_ = _split(raw, allowed, f"{where}token {i}")
        type_changed = prev_type != type_
        if (
            prev_tag in "ES"
            or (prev_tag in "BI" and tag in "BSO")
            or (prev_tag != "O" and type_changed)
        ):
            found.add((prev_type, start, i - 1))
        if tag in "BS" or (prev_tag in "ESO" and tag in "EI") or (tag != "O" and type_changed):
            start = i
        prev_tag, prev_type = tag, type_
    return found


def _prf(correct: int, n_pred: int, n_gold: int) -> tuple[float, float, float]:
    """Precision, recall, F1; 0.0 where a denominator is zero (seqeval's zero_division)."""
    precision = correct / n_pred if n_pred else 0.0
    recall = correct / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def entity_scores(
    gold_seqs: Sequence[Sequence[str]], pred_seqs: Sequence[Sequence[str]], scheme: str = "iob2"
) -> dict[str, float]:
    """Micro-averaged entity "precision", "recall", "f1" over all types, and per type
    "<TYPE>_precision", "<TYPE>_recall", "<TYPE>_f1", "<TYPE>_support" (gold entity count).

    An entity counts as correct only if its type and both boundaries match. ``scheme``
    ("iob1", "iob2"/"bio", "iobes") says which prefixes are legal; decoding is the same for all.
    """
    if scheme not in _PREFIXES:
        raise ValueError(f"scheme={scheme!r} is unknown: use one of {sorted(_PREFIXES)}")
    if not gold_seqs:
        raise ValueError("gold_seqs is empty: there are no sentences to score")
    if len(gold_seqs) != len(pred_seqs):
        raise ValueError(f"{len(gold_seqs)} gold sentences but {len(pred_seqs)} predicted ones")
    gold_n, pred_n, correct_n = Counter(), Counter(), Counter()
    for s, (gold, pred) in enumerate(zip(gold_seqs, pred_seqs, strict=True)):
        if len(gold) != len(pred):
            raise ValueError(f"sentence {s} has {len(gold)} gold tags but {len(pred)} predicted")
        gold_ents = entities(gold, _PREFIXES[scheme], f"gold sentence {s} ")
        pred_ents = entities(pred, _PREFIXES[scheme], f"predicted sentence {s} ")
        gold_n.update(t for t, _, _ in gold_ents)
        pred_n.update(t for t, _, _ in pred_ents)
        correct_n.update(t for t, _, _ in gold_ents & pred_ents)
    total = _prf(sum(correct_n.values()), sum(pred_n.values()), sum(gold_n.values()))
    scores = dict(zip(("precision", "recall", "f1"), total, strict=True))
    for type_ in sorted(set(gold_n) | set(pred_n)):
        by_type = _prf(correct_n[type_], pred_n[type_], gold_n[type_])
        for name, value in zip(("precision", "recall", "f1"), by_type, strict=True):
            scores[f"{type_}_{name}"] = value
        scores[f"{type_}_support"] = gold_n[type_]
    return scores
