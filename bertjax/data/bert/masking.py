"""Masked-LM masking of blocks of packed examples, as in BERT (Devlin et al. 2018).

A share `masked_lm_prob` of the non-special tokens is selected for prediction; each selected
token becomes [MASK] 80% of the time, a random token 10% and stays unchanged 10%. The targets
carry explicit weights so the random and unchanged tokens get loss too (seqio's feature
converter weights only [MASK] inputs).

Whole blocks are masked at once in numpy. The random numbers are counter-based: the bits of
(row, position, draw) are a hash of (seed, stream, the row's key, position, draw)
(`counter_bits`), so a row's mask depends on its key alone, never on which other rows share
its block. That keeps every example a pure function of (seed, example index) while a block of
hundreds of examples costs a few numpy calls.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import NamedTuple, Protocol

import numpy as np

MASK_RATE = 0.8  # share of selected tokens replaced by [MASK]
RANDOM_RATE = 0.1  # share replaced by a random token; the rest (10%) stay unchanged

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment
_NEVER = np.uint64(2**64 - 1)  # priority of positions that cannot be selected


class _HasSpecialIds(Protocol):
    pad_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    vocab_size: int


@dataclasses.dataclass(frozen=True)
class SpecialIds:
    """Ids of the structural tokens and the vocabulary size, all masking needs of a vocab."""

    pad: int
    cls: int
    sep: int
    mask: int
    vocab_size: int

    def __post_init__(self) -> None:
        ids = (self.pad, self.cls, self.sep, self.mask)
        if len(set(ids)) != 4 or not all(0 <= i < self.vocab_size for i in ids):
            raise ValueError(
                f"SpecialIds: pad/cls/sep/mask must be 4 distinct ids below vocab_size "
                f"{self.vocab_size}, got {ids}: check the vocabulary's special tokens"
            )

    @classmethod
    def from_vocabulary(cls, vocab: _HasSpecialIds) -> SpecialIds:
        """Reads pad_id, cls_id, sep_id, mask_id and vocab_size from a vocabulary object."""
        return cls(vocab.pad_id, vocab.cls_id, vocab.sep_id, vocab.mask_id, vocab.vocab_size)

    @functools.cached_property
    def structural(self) -> np.ndarray:
        """Sorted ids never selected for prediction nor drawn as random replacements."""
        return np.unique(np.array([self.pad, self.cls, self.sep, self.mask], np.int64))


class MaskedTokens(NamedTuple):
    """A masked block: the corrupted inputs and padded MLM targets, one row per example."""

    input_ids: np.ndarray  # int32 [B, L], selected positions corrupted
    masked_lm_positions: np.ndarray  # int32 [B, P], sorted; 0 in padding
    masked_lm_ids: np.ndarray  # int32 [B, P], original ids; 0 in padding
    masked_lm_weights: np.ndarray  # float32 [B, P], 1.0 real target, 0.0 padding


# ---------------------------------------------------------------- counter-based random bits


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer: a bijective scramble of uint64 values (wraps mod 2**64)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def counter_bits(seed: int, stream: int, keys: np.ndarray, width: int) -> np.ndarray:
    """uint64 [B, width] random bits, a pure function of (seed, stream, keys[b], column).

    Row b is SplitMix64's sequence started from a hash of (seed, stream, keys[b]), so rows
    with different keys are independent streams and a row never depends on the others.
    """
    base = _mix(_mix(np.array([seed % 2**64], np.uint64)) ^ np.uint64(stream % 2**64))
    rows = _mix(base ^ _mix(np.asarray(keys, np.uint64).reshape(-1) + _GOLDEN))  # [B]
    columns = np.arange(1, width + 1, dtype=np.uint64) * _GOLDEN  # [W]
    return _mix(rows[:, None] + columns[None, :])  # [B, W]


def below(bits: np.ndarray, n: int | np.ndarray) -> np.ndarray:
    """int64 uniform in [0, n) from the top 32 bits (n < 2**32; bias below n / 2**32)."""
    return ((bits >> np.uint64(32)) * np.asarray(n, np.uint64) >> np.uint64(32)).astype(np.int64)


# ---------------------------------------------------------------- masking


def num_to_predict(
    num_candidates: np.ndarray | int, masked_lm_prob: float, max_predictions: int
) -> np.ndarray:
    """Targets per row: min(max_predictions, max(1, round(n * prob))), 0 if n == 0.

    Rounds half to even, like Python's round() in google-research/bert.
    """
    n = np.asarray(num_candidates, np.int64)
    count = np.minimum(max_predictions, np.maximum(1, np.round(n * masked_lm_prob)))
    return np.where(n == 0, 0, count).astype(np.int64)


def random_token_ids(bits: np.ndarray, special: SpecialIds) -> np.ndarray:
    """Uniform draws over the vocabulary minus [PAD]/[CLS]/[SEP]/[MASK], one per bits entry.

    Excluding the structural ids keeps a random replacement from faking a segment boundary
    or padding; [UNK] and every ordinary piece stay possible, as in google-research/bert.
    """
    skip = special.structural
    draws = below(bits, special.vocab_size - skip.size)
    # The k-th kept id is k plus the number of skipped ids at or below it.
    return (draws + np.searchsorted(skip - np.arange(skip.size), draws, side="right")).astype(
        np.int32
    )


def _candidates(tokens: np.ndarray, special: SpecialIds) -> np.ndarray:
    """bool [B, L]: positions that may be selected (not [PAD]/[CLS]/[SEP]/[MASK])."""
    return ((tokens != special.pad) & (tokens != special.cls) & (tokens != special.sep)
            & (tokens != special.mask))


def _whole_word_selection(
    candidates: np.ndarray,
    tokens: np.ndarray,
    is_continuation: np.ndarray,
    count: np.ndarray,
    priority: np.ndarray,
) -> np.ndarray:
    """bool [B, L]: whole words in priority order, skipping words that overflow `count`.

    A '##' piece joins the word before it only if that word ends right before it. Words are
    taken greedily in random order as google-research/bert does, never split; the greedy pass
    runs over word ranks with all rows of the block at once.
    """
    batch, length = tokens.shape
    rows = np.arange(batch)[:, None]  # [B, 1]
    previous = np.zeros_like(candidates)
    previous[:, 1:] = candidates[:, :-1]
    starts = candidates & (~is_continuation[tokens] | ~previous)  # [B, L]
    word = np.cumsum(starts, axis=1) - 1  # [B, L] word number of each position in its row
    flat = (rows * length + word)[candidates]  # words are at most L per row
    sizes = np.bincount(flat, minlength=batch * length).reshape(batch, length)  # [B, words]
    start_size = np.where(starts, np.take_along_axis(sizes, np.maximum(word, 0), axis=1), 0)
    order = np.argsort(np.where(starts, priority, _NEVER), axis=1)  # [B, L] starts first
    ranked = np.take_along_axis(start_size, order, axis=1)  # word sizes by priority; 0 after
    total = np.zeros(batch, np.int64)
    taken = np.zeros((batch, length), bool)  # [B, rank]
    for rank in range(length):
        size = ranked[:, rank]
        live = (size > 0) & (total < count)
        if not live.any():
            break
        take = live & (total + size <= count)
        taken[:, rank] = take
        total += np.where(take, size, 0)
    chosen = np.zeros((batch, length), bool)  # [B, L] at word starts
    chosen[rows, order] = taken
    word_start = np.maximum.accumulate(np.where(starts, np.arange(length), 0), axis=1)
    return candidates & np.take_along_axis(chosen, word_start, axis=1)


def mask_block(
    input_ids: np.ndarray,
    special: SpecialIds,
    seed: int,
    stream: int,
    keys: np.ndarray,
    *,
    masked_lm_prob: float = 0.15,
    max_predictions_per_seq: int = 20,
    is_continuation: np.ndarray | None = None,
) -> MaskedTokens:
    """Selects and corrupts MLM targets of a block of packed examples (int ids [B, L]).

    Row b's random numbers come from (seed, stream, keys[b]) only: one 64-bit draw per
    position, whose high half ranks the position for selection and whose low half picks
    [MASK] / random / unchanged; a random token comes from a rehash of the draw. [CLS],
    [SEP], [PAD] and [MASK] are never selected, and no position twice. With `is_continuation`
    (bool per vocab id, True for '##' pieces) whole words are selected together; the
    80/10/10 corruption is still drawn per token, as in google-research/bert.
    """
    tokens = np.asarray(input_ids, np.int32)
    batch, length = tokens.shape
    if is_continuation is not None and len(is_continuation) != special.vocab_size:
        raise ValueError(
            f"is_continuation has {len(is_continuation)} entries but vocab_size is "
            f"{special.vocab_size}: build it with one bool per vocabulary id"
        )
    bits = counter_bits(seed, stream, keys, length)  # [B, L]
    candidates = _candidates(tokens, special)  # [B, L]
    count = num_to_predict(candidates.sum(axis=1), masked_lm_prob, max_predictions_per_seq)
    priority = np.where(candidates, bits >> np.uint64(32), _NEVER)  # [B, L]
    if is_continuation is None:
        best = np.argsort(priority, axis=1)[:, :max_predictions_per_seq]  # [B, <=P]
        keep = np.arange(best.shape[1]) < count[:, None]  # count <= P and <= candidates
        selected = np.zeros_like(candidates)
        selected[np.nonzero(keep)[0], best[keep]] = True
    else:
        selected = _whole_word_selection(candidates, tokens, is_continuation, count, priority)

    rows, positions = np.nonzero(selected)  # [n] each, row-major: positions ascend in a row
    drawn = bits[rows, positions]  # [n]
    choice = (drawn & np.uint64(0xFFFFFFFF)).astype(np.float64) * 2.0**-32  # [n] in [0, 1)
    corrupted = tokens.copy()
    to_mask = choice < MASK_RATE
    corrupted[rows[to_mask], positions[to_mask]] = special.mask
    replace = ~to_mask & (choice < MASK_RATE + RANDOM_RATE)
    replacement = random_token_ids(_mix(drawn[replace] ^ _GOLDEN), special)
    corrupted[rows[replace], positions[replace]] = replacement

    per_row = selected.sum(axis=1)  # [B]
    slots = np.arange(rows.size) - (np.cumsum(per_row) - per_row)[rows]  # [n] 0, 1, ... per row
    shape = (batch, max_predictions_per_seq)
    masked_positions, masked_ids = np.zeros(shape, np.int32), np.zeros(shape, np.int32)
    weights = np.zeros(shape, np.float32)
    masked_positions[rows, slots] = positions
    masked_ids[rows, slots] = tokens[rows, positions]
    weights[rows, slots] = 1.0
    return MaskedTokens(corrupted, masked_positions, masked_ids, weights)


def continuation_mask(tokens: Sequence[str]) -> np.ndarray:
    """bool [vocab_size]: True for WordPiece continuation pieces ('##...'), for whole words."""
    return np.array([t.startswith("##") for t in tokens], dtype=bool)
