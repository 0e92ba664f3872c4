"""Entity scores against seqeval's default (conlleval-compatible) mode, on tricky hand-built
sentences and random IOB1 / IOB2 / IOBES tag sequences."""

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertjax.metrics.tagging import entities, entity_scores

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

seqeval_metrics = pytest.importorskip("seqeval.metrics")
from seqeval.metrics.sequence_labeling import get_entities  # noqa: E402
from seqeval.scheme import IOB2, IOBES  # noqa: E402

TYPES = ("PER", "LOC", "MISC")


def seqeval_scores(gold, pred, mode=None, strict=None) -> dict[str, float]:
    """The numbers of ``entity_scores`` as seqeval computes them (zero_division=0)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scores = {
            name: fn(gold, pred, zero_division=0, mode=mode, scheme=strict)
            for name, fn in (
                ("precision", seqeval_metrics.precision_score),
                ("recall", seqeval_metrics.recall_score),
                ("f1", seqeval_metrics.f1_score),
            )
        }
        if mode:  # strict mode: the micro averages only
            return scores
        names = sorted({t for t, _, _ in get_entities(gold) + get_entities(pred)})
        per_type = seqeval_metrics.sequence_labeling.precision_recall_fscore_support(
            gold, pred, average=None, zero_division=0
        )
    for i, name in enumerate(names):
        for key, values in zip(("precision", "recall", "f1", "support"), per_type, strict=True):
            scores[f"{name}_{key}"] = values[i]
    return scores


def assert_matches_seqeval(gold, pred, scheme="iobes", mode=None, strict=None):
    ours, ref = entity_scores(gold, pred, scheme=scheme), seqeval_scores(gold, pred, mode, strict)
    if mode:
        ours = {k: ours[k] for k in ref}
    assert ours.keys() == ref.keys()
    for key, value in ref.items():
        assert ours[key] == pytest.approx(value, abs=1e-12), key


TRICKY = {
    "I- after O opens an entity": (
        [["O", "I-PER", "I-PER", "O"]],
        [["O", "B-PER", "I-PER", "O"]],
    ),
    "type change inside a run": (
        [["B-PER", "I-PER", "I-LOC", "I-LOC"]],
        [["B-PER", "I-PER", "B-LOC", "I-LOC"]],
    ),
    "type change after B": ([["B-PER", "I-LOC", "O"]], [["B-PER", "B-LOC", "O"]]),
    "entity at sentence end": (
        [["O", "B-LOC", "I-LOC"], ["B-PER"]],
        [["O", "B-LOC", "O"], ["B-PER"]],
    ),
    "empty sentences": ([[], ["B-PER"], [], []], [[], ["I-PER"], [], []]),
    "B-B of one type splits": ([["B-PER", "B-PER", "I-PER"]], [["B-PER", "I-PER", "I-PER"]]),
    "IOB1: B only between same-type neighbours": (
        [["I-PER", "I-PER", "B-PER", "O", "I-LOC"]],
        [["I-PER", "B-PER", "B-PER", "O", "I-LOC"]],
    ),
    "no entities anywhere": ([["O", "O"], []], [["O", "O"], []]),
    "predictions only": ([["O", "O"]], [["B-MISC", "O"]]),
    "IOBES singles and ends": (
        [["S-PER", "B-LOC", "E-LOC", "S-LOC", "O", "B-MISC", "I-MISC", "E-MISC"]],
        [["S-PER", "B-LOC", "I-LOC", "E-LOC", "O", "B-MISC", "E-MISC", "E-MISC"]],
    ),
    "IOBES: I or E after E opens a new entity": (
        [["B-PER", "E-PER", "I-PER", "E-PER", "E-PER"]],
        [["O", "E-PER", "I-PER", "I-PER", "S-PER"]],
    ),
    "entity crossing a sentence boundary is two entities": (
        [["O", "B-PER"], ["I-PER", "O"]],
        [["O", "B-PER"], ["B-PER", "O"]],
    ),
}


@pytest.mark.parametrize("name", TRICKY)
def test_tricky_cases_match_seqeval(name):
    gold, pred = TRICKY[name]
    assert_matches_seqeval(gold, pred)


def test_hand_built_entities_and_scores():
    assert entities(["O", "I-PER", "I-PER", "B-PER", "I-LOC", "O", "B-MISC"]) == {
        ("PER", 1, 2),
        ("PER", 3, 3),
        ("LOC", 4, 4),
        ("MISC", 6, 6),
    }
    scores = entity_scores(*TRICKY["type change inside a run"])
    # gold PER(0-1), LOC(2-3); pred the same: the I-LOC run after I-PER is its own entity
    assert (scores["f1"], scores["PER_support"], scores["LOC_support"]) == (1.0, 1, 1)
    scores = entity_scores(*TRICKY["entity at sentence end"])
    assert scores["precision"] == scores["recall"] == 0.5  # LOC boundary wrong, PER right


def _random_corpus(prefixes):
    tag = st.one_of(
        st.just("O"), st.builds("{}-{}".format, st.sampled_from(prefixes), st.sampled_from(TYPES))
    )
    lengths = st.lists(st.integers(0, 12), min_size=1, max_size=6)

    def corpus(ns):
        sentence = lambda n: st.lists(tag, min_size=n, max_size=n)  # noqa: E731
        side = st.tuples(*[sentence(n) for n in ns]).map(list)
        return st.tuples(side, side)

    return lengths.flatmap(corpus)


@settings(max_examples=400, deadline=None)
@given(_random_corpus("BI"))
def test_random_iob_sequences_match_seqeval(corpus):
    gold, pred = corpus
    assert_matches_seqeval(gold, pred, scheme="iob2")


@settings(max_examples=400, deadline=None)
@given(_random_corpus("BIES"))
def test_random_iobes_sequences_match_seqeval(corpus):
    gold, pred = corpus
    assert_matches_seqeval(gold, pred, scheme="iobes")


def _encode(spans, length, iobes):
    """Well-formed tags of non-overlapping (type, first, last) spans."""
    tags = ["O"] * length
    for type_, first, last in spans:
        for i in range(first, last + 1):
            tags[i] = f"I-{type_}"
        tags[first] = f"B-{type_}"
        if iobes:
            tags[last] = f"S-{type_}" if first == last else f"E-{type_}"
    return tags


@st.composite
def _well_formed(draw, iobes):
    """Gold and predicted sentences of valid tags, and the gold entity spans."""

    def spans(length):
        cuts = sorted(draw(st.lists(st.integers(0, length), max_size=8)))
        pairs = zip(cuts, cuts[1:], strict=False)
        return [(draw(st.sampled_from(TYPES)), a, b - 1) for a, b in pairs if b > a]

    gold, pred, gold_spans = [], [], []
    for _ in range(draw(st.integers(1, 5))):
        length = draw(st.integers(0, 12))
        gold_spans.append(spans(length))
        gold.append(_encode(gold_spans[-1], length, iobes))
        pred.append(_encode(spans(length), length, iobes))
    return gold, pred, gold_spans


@settings(max_examples=200, deadline=None)
@given(_well_formed(iobes=False), _well_formed(iobes=True))
def test_well_formed_sequences_agree_with_strict_mode(bio, bioes):
    """On valid IOB2 / IOBES tags, conlleval and strict decoding agree; ours finds the spans."""
    for (gold, pred, gold_spans), scheme, strict in ((bio, "iob2", IOB2), (bioes, "iobes", IOBES)):
        assert_matches_seqeval(gold, pred, scheme=scheme)
        assert_matches_seqeval(gold, pred, scheme=scheme, mode="strict", strict=strict)
        for tags, spans in zip(gold, gold_spans, strict=True):
            assert entities(tags) == set(spans)


def test_bad_tags_and_shapes_raise_one_line_errors():
    with pytest.raises(ValueError, match="'E-PER' at predicted sentence 0 token 1"):
        entity_scores([["B-PER", "I-PER"]], [["B-PER", "E-PER"]], scheme="iob2")
    with pytest.raises(ValueError, match="'PER' at gold sentence 0 token 0"):
        entity_scores([["PER"]], [["O"]])
    with pytest.raises(ValueError, match="sentence 1 has 2 gold tags but 1 predicted"):
        entity_scores([["O"], ["O", "O"]], [["O"], ["O"]])
    with pytest.raises(ValueError, match="no sentences"):
        entity_scores([], [])
    with pytest.raises(ValueError, match="scheme='ioe2' is unknown"):
        entity_scores([["O"]], [["O"]], scheme="ioe2")
