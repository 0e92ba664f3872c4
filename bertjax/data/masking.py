"""Masked-LM masking of one packed example, as in BERT (Devlin et al. 2018).

A share `masked_lm_prob` of the non-special tokens is selected for prediction; each selected
token becomes [MASK] 80% of the time, a random token 10% and stays unchanged 10%. The targets
carry explicit weights so the random and unchanged tokens get loss too (seqio's feature
converter weights only [MASK] inputs).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import NamedTuple, Protocol

import numpy as np

MASK_RATE = 0.8  # share of selected tokens replaced by [MASK]
RANDOM_RATE = 0.1  # share replaced by a random token; the rest (10%) stay unchanged


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
    """One masked example: the corrupted inputs and padded MLM targets."""

    input_ids: np.ndarray  # int32 [L], selected positions corrupted
    masked_lm_positions: np.ndarray  # int32 [P], sorted; 0 in padding
    masked_lm_ids: np.ndarray  # int32 [P], original ids; 0 in padding
    masked_lm_weights: np.ndarray  # float32 [P], 1.0 real target, 0.0 padding


def num_to_predict(num_candidates: int, masked_lm_prob: float, max_predictions: int) -> int:
    """Number of targets: min(max_predictions, max(1, round(n * prob))), 0 if n == 0."""
    if num_candidates == 0:
        return 0
    return min(max_predictions, max(1, int(round(num_candidates * masked_lm_prob))))


def random_token_ids(rng: np.random.Generator, special: SpecialIds, size: int) -> np.ndarray:
    """Uniform draws over the vocabulary minus [PAD]/[CLS]/[SEP]/[MASK].

    Excluding the structural ids keeps a random replacement from faking a segment boundary
    or padding; [UNK] and every ordinary piece stay possible, as in google-research/bert.
    """
    skip = special.structural
    draws = rng.integers(0, special.vocab_size - skip.size, size=size)
    # The k-th kept id is k plus the number of skipped ids at or below it.
    return (draws + np.searchsorted(skip - np.arange(skip.size), draws, side="right")).astype(
        np.int32
    )


def _whole_word_positions(
    candidates: np.ndarray,
    tokens: np.ndarray,
    is_continuation: np.ndarray,
    count: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Positions of randomly ordered whole words, skipping words that overflow `count`."""
    # A '##' piece joins the word before it only if that word ends right before it.
    starts = ~is_continuation[tokens[candidates]] | (np.diff(candidates, prepend=-2) != 1)
    bounds = np.append(np.flatnonzero(starts), candidates.size).tolist()
    chosen: list[int] = []
    total = 0
    for w in rng.permutation(len(bounds) - 1).tolist():
        if total >= count:
            break
        lo, hi = bounds[w], bounds[w + 1]
        if total + hi - lo <= count:  # as google-research/bert: never split a word
            chosen.extend(range(lo, hi))
            total += hi - lo
    return candidates[np.asarray(chosen, np.int64)]


def mask_tokens(
    input_ids: np.ndarray,
    special: SpecialIds,
    rng: np.random.Generator,
    *,
    masked_lm_prob: float = 0.15,
    max_predictions_per_seq: int = 20,
    is_continuation: np.ndarray | None = None,
) -> MaskedTokens:
    """Selects and corrupts MLM targets of one packed example (int ids [L]).

    [CLS], [SEP], [PAD] and [MASK] are never selected, and no position twice. With
    `is_continuation` (bool per vocab id, True for '##' pieces) whole words are selected
    together; the 80/10/10 corruption is still drawn per token, as in google-research/bert.
    """
    tokens = np.asarray(input_ids, np.int32)
    candidates = np.flatnonzero(
        (tokens != special.pad)
        & (tokens != special.cls)
        & (tokens != special.sep)
        & (tokens != special.mask)
    )
    count = num_to_predict(candidates.size, masked_lm_prob, max_predictions_per_seq)
    if is_continuation is None:
        positions = candidates[rng.permutation(candidates.size)[:count]]
    else:
        if len(is_continuation) != special.vocab_size:
            raise ValueError(
                f"is_continuation has {len(is_continuation)} entries but vocab_size is "
                f"{special.vocab_size}: build it with one bool per vocabulary id"
            )
        positions = _whole_word_positions(candidates, tokens, is_continuation, count, rng)
    positions = np.sort(positions)
    originals = tokens[positions]

    corrupted = tokens.copy()
    u = rng.random(positions.size)
    corrupted[positions[u < MASK_RATE]] = special.mask
    use_random = (u >= MASK_RATE) & (u < MASK_RATE + RANDOM_RATE)
    if use_random.any():
        corrupted[positions[use_random]] = random_token_ids(rng, special, int(use_random.sum()))

    n = positions.size
    padded_positions = np.zeros(max_predictions_per_seq, np.int32)
    padded_ids = np.zeros(max_predictions_per_seq, np.int32)
    weights = np.zeros(max_predictions_per_seq, np.float32)
    padded_positions[:n] = positions
    padded_ids[:n] = originals
    weights[:n] = 1.0
    return MaskedTokens(corrupted, padded_positions, padded_ids, weights)


def continuation_mask(tokens: Sequence[str]) -> np.ndarray:
    """bool [vocab_size]: True for WordPiece continuation pieces ('##...'), for whole words."""
    return np.array([t.startswith("##") for t in tokens], dtype=bool)
