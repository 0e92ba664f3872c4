"""Extractive question answering for BERT (Devlin et al. 2018, sections 4.2 and 4.3): SQuAD
examples into fixed-length windows with start/end labels, and start/end logits back into answers.

Windows follow google-research/bert's `run_squad.py`: `[CLS] question [SEP] context [SEP]`,
contexts too long for one window read in windows `doc_stride` tokens apart, and a context token
seen by several windows scored only in the one where it has the most context. Two departures,
both from having each token's character span in the original context
(`WordPieceVocabulary.encode_with_offsets`):

- labels: the gold character span maps straight to the tokens it overlaps, where the reference
  goes through whitespace words and a search for a better-matching sub-span;
- decoding: the best span is the exact maximum over every valid (start, end) pair of a window,
  where the reference tries only the n highest start and end logits; the answer is the original
  context substring under the span, where the reference re-aligns de-tokenized text.

SQuAD 2.0 (section 4.3): the [CLS] position stands for "no answer"; an example answers "" when
its null score beats its best span score by more than a threshold tuned on dev
(`bertjax.metrics.squad.best_null_threshold` on `null_score_diffs`). SQuAD 1.1 uses the same
path with the threshold at infinity.
"""

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from bertjax.finetune.examples import QaExample
from bertjax.metrics.squad import best_null_threshold
from bertjax.tokenizers.wordpiece import WordPieceVocabulary

SQUAD_PREDICTIONS, SQUAD_NULL_ODDS = "predictions.json", "null_odds.json"


@dataclasses.dataclass(frozen=True, eq=False)
class QaWindow:
    """What decoding needs of one window: where its tokens sit in the example's context."""

    example_id: str
    context: str
    offsets: np.ndarray  # int32 [L, 2]: [start, end) context characters of context tokens, else -1
    max_context: np.ndarray  # bool [L]: context tokens scored in this window (max-context rule)

    @property
    def is_context(self) -> np.ndarray:
        """bool [L]: the tokens of the context (the only ones an answer may start or end on)."""
        return self.offsets[:, 0] >= 0


class QaAnswer(NamedTuple):
    """An example's best span: its context substring and [start, end) characters, its score
    start_logit[i] + end_logit[j], and the null ([CLS]) score, the minimum over windows."""

    text: str
    char_span: tuple[int, int]
    span_score: float
    null_score: float


# ---------------------------------------------------------------- windows


def _check_settings(max_seq_length: int, doc_stride: int | None, max_query_length: int) -> None:
    if max_query_length < 1:
        raise ValueError(f"finetune.max_query_length={max_query_length}: make it at least 1")
    if max_seq_length < max_query_length + 4:
        raise ValueError(
            f"finetune.max_seq_length={max_seq_length} leaves no context token beside a "
            f"{max_query_length}-token question and [CLS] [SEP] [SEP]; raise it above "
            f"{max_query_length + 3} or lower finetune.max_query_length"
        )
    if doc_stride is not None and doc_stride < 0:
        raise ValueError(f"finetune.doc_stride={doc_stride}: use a positive stride or None")


def window_spans(
    num_tokens: int, room: int, doc_stride: int | None, example_id: str, max_seq_length: int
) -> list[tuple[int, int]]:
    """(first context token, length) of each window: the reference's sliding window, whose
    starts are `doc_stride` apart (never more than a window, so no token is skipped)."""
    if num_tokens <= room:
        return [(0, num_tokens)]
    if not doc_stride:
        raise ValueError(
            f"QA example {example_id!r}: its context has {num_tokens} WordPiece tokens, more than "
            f"the {room} that fit beside its question in max_seq_length={max_seq_length}; set "
            "finetune.doc_stride (e.g. 128) to read long contexts in overlapping windows"
        )
    spans, start = [], 0
    while True:
        length = min(num_tokens - start, room)
        spans.append((start, length))
        if start + length == num_tokens:
            return spans
        start += min(length, doc_stride)


def max_context_windows(spans: Sequence[tuple[int, int]], num_tokens: int) -> np.ndarray:
    """bool [W, T]: window w is where context token t has the most context, scored as
    min(left, right context) + 0.01 * window length; the first window wins a tie."""
    start_W = np.array([s for s, _ in spans], np.int64)
    length_W = np.array([n for _, n in spans], np.int64)
    left_WxT = np.arange(num_tokens)[None, :] - start_W[:, None]
    right_WxT = (start_W + length_W - 1)[:, None] - np.arange(num_tokens)[None, :]
    inside_WxT = (left_WxT >= 0) & (right_WxT >= 0)
    score_WxT = np.minimum(left_WxT, right_WxT) + 0.01 * length_W[:, None]
    score_WxT = np.where(inside_WxT, score_WxT, -np.inf)
    best_T = score_WxT.argmax(axis=0)
    return inside_WxT & (best_T[None, :] == np.arange(len(spans))[:, None])


def answer_tokens(example: QaExample, offsets_Tx2: np.ndarray) -> tuple[int, int]:
    """(first, last) context tokens overlapping the first gold answer's characters."""
    if not example.answers:
        raise ValueError(
            f"QA example {example.id!r} is answerable but has no answers; give it one or mark "
            "it impossible"
        )
    text, char_start = example.answers[0]
    char_end = char_start + len(text)
    found = example.context[char_start:char_end]
    if found != text:
        raise ValueError(
            f"QA example {example.id!r}: answer {text!r} is not at character {char_start} of "
            f"its context (found {found!r}); fix its answer_start"
        )
    overlap_T = (offsets_Tx2[:, 1] > char_start) & (offsets_Tx2[:, 0] < char_end)
    tokens = np.flatnonzero(overlap_T)
    if not tokens.size:
        raise ValueError(
            f"QA example {example.id!r}: answer {text!r} covers no token (only spaces or "
            "dropped characters); fix the answer"
        )
    return int(tokens[0]), int(tokens[-1])


def _context_tokens(
    context: str, vocab: WordPieceVocabulary, cache: dict[str, tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """(ids [T], offsets [T, 2]) of a context, tokenized once for all its questions."""
    if context not in cache:
        ids, offsets = vocab.encode_with_offsets(context)
        cache[context] = (
            np.asarray(ids, np.int32),
            np.asarray(offsets, np.int32).reshape(len(offsets), 2),
        )
    return cache[context]


def qa_features(
    examples: Iterable[QaExample],
    vocab: WordPieceVocabulary,
    *,
    max_seq_length: int = 384,
    doc_stride: int | None = 128,
    max_query_length: int = 64,
    training: bool,
) -> tuple[dict[str, np.ndarray], list[QaWindow]]:
    """Windows of `[CLS] question [SEP] context [SEP]`, padded to `max_seq_length`.

    Returns int32 arrays input_ids, segment_ids, input_mask [N, L] and, when `training`,
    start_position and end_position [N]: the first answer's first and last tokens when the
    window holds all of it, else 0 ([CLS], also for impossible questions). With them, one
    `QaWindow` per row for `best_answers`. Questions are cut to `max_query_length` tokens.
    """
    _check_settings(max_seq_length, doc_stride, max_query_length)
    rows: list[tuple[list[int], int, int, int]] = []  # (ids, question length, start, end)
    windows: list[QaWindow] = []
    cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for example in examples:
        question = vocab.encode(example.question)[:max_query_length]
        doc_ids_T, doc_offsets_Tx2 = _context_tokens(example.context, vocab, cache)
        room = max_seq_length - len(question) - 3
        spans = window_spans(len(doc_ids_T), room, doc_stride, example.id, max_seq_length)
        max_context_WxT = max_context_windows(spans, len(doc_ids_T))
        gold = None
        if training and not example.impossible:
            gold = answer_tokens(example, doc_offsets_Tx2)
        doc_offset = len(question) + 2  # the window position of its first context token
        head = [vocab.cls_id, *question, vocab.sep_id]
        for w, (start, length) in enumerate(spans):
            doc, placed = slice(start, start + length), slice(doc_offset, doc_offset + length)
            label = (0, 0)
            if gold is not None and start <= gold[0] and gold[1] < start + length:
                label = (gold[0] - start + doc_offset, gold[1] - start + doc_offset)
            rows.append(([*head, *doc_ids_T[doc].tolist(), vocab.sep_id], len(question), *label))
            offsets_Lx2 = np.full((max_seq_length, 2), -1, np.int32)
            offsets_Lx2[placed] = doc_offsets_Tx2[doc]
            max_context_L = np.zeros(max_seq_length, bool)
            max_context_L[placed] = max_context_WxT[w, doc]
            windows.append(QaWindow(example.id, example.context, offsets_Lx2, max_context_L))
    return _arrays(rows, max_seq_length, training), windows


def _arrays(
    rows: Sequence[tuple[list[int], int, int, int]], max_seq_length: int, training: bool
) -> dict[str, np.ndarray]:
    """Pads the windows' ids into [N, L] arrays; segment 1 starts after the question's [SEP]."""
    input_ids_NxL = np.zeros((len(rows), max_seq_length), np.int32)
    segment_ids_NxL = np.zeros_like(input_ids_NxL)
    input_mask_NxL = np.zeros_like(input_ids_NxL)
    for n, (ids, question_length, _, _) in enumerate(rows):
        input_ids_NxL[n, : len(ids)] = ids
        segment_ids_NxL[n, question_length + 2 : len(ids)] = 1
        input_mask_NxL[n, : len(ids)] = 1
    arrays = {
        "input_ids": input_ids_NxL,
        "segment_ids": segment_ids_NxL,
        "input_mask": input_mask_NxL,
    }
    if training:
        arrays["start_position"] = np.array([r[2] for r in rows], np.int32).reshape(-1)
        arrays["end_position"] = np.array([r[3] for r in rows], np.int32).reshape(-1)
    return arrays


# ---------------------------------------------------------------- decoding


def _top_window_spans(
    start_L: np.ndarray, end_L: np.ndarray, window: QaWindow, max_answer_length: int, n: int
) -> list[tuple[float, int, int]]:
    """The n best (score, start, end) spans of one window: both ends context tokens, the start
    a max-context token, end >= start and end - start < max_answer_length."""
    positions = np.flatnonzero(window.is_context)
    if not positions.size:
        return []
    lo, hi = int(positions[0]), int(positions[-1]) + 1
    i_K, j_K = np.arange(lo, hi), np.arange(lo, hi)
    valid_KxK = (
        window.max_context[lo:hi, None]
        & window.is_context[None, lo:hi]
        & (j_K[None, :] >= i_K[:, None])
        & (j_K[None, :] - i_K[:, None] < max_answer_length)
    )
    i_V, j_V = np.nonzero(valid_KxK)  # the V valid spans, relative to lo
    score_V = start_L[lo + i_V] + end_L[lo + j_V]
    best_V = np.lexsort((j_V, i_V, -score_V))[:n]  # highest score, then earliest start, end
    return [(float(score_V[v]), lo + int(i_V[v]), lo + int(j_V[v])) for v in best_V]


def _check_logits(start: np.ndarray, end: np.ndarray, windows: Sequence[QaWindow]) -> None:
    expected = (len(windows), windows[0].offsets.shape[0]) if windows else (0,)
    if start.shape != expected or end.shape != expected:
        raise ValueError(
            f"start/end logits of shapes {start.shape} and {end.shape} do not match the "
            f"{len(windows)} windows of qa_features (expected {expected}); pass one row per window"
        )


def n_best_answers(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    windows: Sequence[QaWindow],
    max_answer_length: int = 30,
    n_best: int = 20,
) -> dict[str, list[QaAnswer]]:
    """Per example id, its up to `n_best` best distinct spans over all its windows, best first
    (start_logits/end_logits [N, L]: one row per window of `qa_features`). An example without
    a valid span (empty context) gets one empty answer of score -inf."""
    if n_best < 1 or max_answer_length < 1:
        raise ValueError(
            f"n_best={n_best}, max_answer_length={max_answer_length}: both must be at least 1"
        )
    start_NxL = np.asarray(start_logits, np.float64)
    end_NxL = np.asarray(end_logits, np.float64)
    _check_logits(start_NxL, end_NxL, windows)
    candidates: dict[str, list[tuple[float, int, int, int]]] = {}
    null: dict[str, float] = {}
    for n, window in enumerate(windows):
        spans = _top_window_spans(start_NxL[n], end_NxL[n], window, max_answer_length, n_best)
        candidates.setdefault(window.example_id, []).extend((s, n, i, j) for s, i, j in spans)
        null_score = float(start_NxL[n, 0] + end_NxL[n, 0])
        null[window.example_id] = min(null.get(window.example_id, math.inf), null_score)
    return {qid: _ranked(spans, windows, null[qid], n_best) for qid, spans in candidates.items()}


def _ranked(
    spans: list[tuple[float, int, int, int]],
    windows: Sequence[QaWindow],
    null_score: float,
    n_best: int,
) -> list[QaAnswer]:
    """Distinct character spans, best score first (ties: earlier window, start, end)."""
    answers: dict[tuple[int, int], QaAnswer] = {}
    for score, n, i, j in sorted(spans, key=lambda c: (-c[0], c[1], c[2], c[3])):
        window = windows[n]
        char_span = (int(window.offsets[i, 0]), int(window.offsets[j, 1]))
        if char_span not in answers:
            text = window.context[char_span[0] : char_span[1]]
            answers[char_span] = QaAnswer(text, char_span, score, null_score)
        if len(answers) == n_best:
            break
    return list(answers.values()) or [QaAnswer("", (0, 0), -math.inf, null_score)]


def best_answers(start_logits: np.ndarray, end_logits: np.ndarray,
                 windows: Sequence[QaWindow], max_answer_length: int = 30
                 ) -> dict[str, QaAnswer]:
    """Per example id, its best span over all its windows: the first of `n_best_answers`,
    the exact maximum over every valid span."""
    ranked = n_best_answers(start_logits, end_logits, windows, max_answer_length, n_best=1)
    return {qid: answers[0] for qid, answers in ranked.items()}


def null_score_diffs(best: Mapping[str, QaAnswer]) -> dict[str, float]:
    """Null score minus best span score per example: what the SQuAD 2.0 threshold is tuned on."""
    return {qid: answer.null_score - answer.span_score for qid, answer in best.items()}


def predictions_with_threshold(best: Mapping[str, QaAnswer], threshold: float) -> dict[str, str]:
    """Answer texts, "" where null score - best span score > `threshold` (the paper's tau;
    math.inf for SQuAD 1.1, where every question has an answer)."""
    diffs = null_score_diffs(best)
    return {qid: "" if diffs[qid] > threshold else answer.text for qid, answer in best.items()}


def decode_answers(start_logits: np.ndarray, end_logits: np.ndarray,
                   windows: Sequence[QaWindow], examples: Sequence[QaExample],
                   golds: Sequence[list[str]] | None, max_answer_length: int = 30
                   ) -> tuple[list[str], dict]:
    """Each question's answer text from the logits of its windows, and the extras of
    eval_results.json: for SQuAD 2.0 (data with unanswerable questions) the null threshold
    tuned on `golds` to maximise F1, as the paper does (`null_threshold`); "files": the texts
    of the official scripts' files (`squad_files`)."""
    ids = [ex.id for ex in examples]
    best = best_answers(start_logits, end_logits, windows, max_answer_length)
    if not any(ex.impossible for ex in examples):  # SQuAD 1.1
        texts = [best[i].text for i in ids]
        return texts, {"files": squad_files(dict(zip(ids, texts, strict=True)))}
    spans, null_odds = {i: best[i].text for i in ids}, null_score_diffs(best)
    threshold, _, _ = best_null_threshold(null_odds, spans, dict(zip(ids, golds, strict=True)))
    chosen = predictions_with_threshold(best, threshold)
    files = squad_files({i: chosen[i] for i in ids}, {i: null_odds[i] for i in ids})
    return [chosen[i] for i in ids], {"null_threshold": float(threshold), "files": files}


def squad_files(predictions: Mapping[str, str],
                null_odds: Mapping[str, float] | None = None) -> dict[str, str]:
    """{file name: text} of predictions.json ({question id: answer text}, "" for no answer:
    what evaluate-v1.1.py and evaluate-v2.0.py read) and, for SQuAD 2.0, null_odds.json
    ({question id: null score - best span score}: evaluate-v2.0.py's --na-prob-file, as
    google-research/bert's run_squad.py writes it)."""
    files = {SQUAD_PREDICTIONS: json.dumps(dict(predictions), indent=2, ensure_ascii=False)
             + "\n"}
    if null_odds is not None:
        odds = {qid: float(value) for qid, value in null_odds.items()}
        files[SQUAD_NULL_ODDS] = json.dumps(odds, indent=2) + "\n"
    return files
