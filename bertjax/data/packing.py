"""Packing variable-length examples into fixed-length rows: several examples per row, so that
a step spends its work on real tokens, not on padding (BERT pretraining, bertjax/data/bert/
packing.py; fine-tuning, bertjax/finetune/packed.py).

`pack_lengths` decides which examples share a row: best-fit decreasing within windows of
consecutive examples (each example, longest first, goes into the open row with the least room
that still fits it and holds fewer than K), as Graphcore's packing paper (Krell et al. 2021,
arXiv 2107.02027) and MLPerf BERT do on whole datasets. `pack_tokens` lays the examples out:

    sequence_ids   1 1 1 1 2 2 2 0 0     which example of the row a token belongs to (0: pad)
    position_ids   0 1 2 3 0 1 2 0 0     positions restart at every example
    cls_positions  [0, 4, 0]             where each example starts (unused slots: 0)
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

import numpy as np

WINDOW = 2048  # examples packed together: larger windows pack a little tighter


def most_per_row(capacity: int, shortest: int) -> int:
    """The most examples a row of `capacity` tokens can hold when the shortest example has
    `shortest` tokens: a packing setting above it reserves slots (and memory: K targets per
    row, [B, K] arrays) that no row can ever fill."""
    return capacity // shortest


def check_per_row(setting: str, per_row: int, capacity: int, shortest: int, what: str) -> None:
    """One line when `per_row` examples (the value of `setting`) exceed what a row of
    `capacity` tokens holds, `what` (e.g. "instances of 5+ tokens") being the examples."""
    most = most_per_row(capacity, shortest)
    if per_row > most:
        raise ValueError(f"{setting} is {per_row}, but a row of {capacity} tokens holds at most "
                         f"{most} {what}: set it to {most} or less (0: no packing)")


def pack_lengths(lengths: Sequence[int], capacity: int, max_sequences: int,
                 rng: np.random.Generator | None = None, window: int = WINDOW) -> np.ndarray:
    """int64 [R, K]: the items of each row (indices into `lengths`), -1 in unused slots.

    Best-fit decreasing within each window of `window` consecutive items; rows of a window
    come out in a random order (`rng`) so that step-to-step row lengths do not trend."""
    lengths = np.asarray(lengths, np.int64)
    if lengths.size and (lengths.max() > capacity or lengths.min() < 1):
        raise ValueError(f"items of length {lengths.min()}..{lengths.max()} do not fit rows of "
                         f"{capacity}: every item needs 1..capacity tokens")
    rows: list[list[int]] = []
    for start in range(0, len(lengths), window):
        window_rows = _best_fit(lengths[start:start + window], capacity, max_sequences)
        order = rng.permutation(len(window_rows)) if rng is not None else range(len(window_rows))
        rows.extend([start + i for i in window_rows[r]] for r in order)
    table = np.full((len(rows), max_sequences), -1, np.int64)
    for r, items in enumerate(rows):
        table[r, :len(items)] = items
    return table


def _best_fit(lengths: np.ndarray, capacity: int, max_sequences: int) -> list[list[int]]:
    """Best-fit decreasing: rows of item indices, each within `capacity` and K items."""
    rows: list[list[int]] = []
    open_rows: list[tuple[int, int]] = []  # (room left, row), sorted: rows that take more
    for item in np.argsort(-lengths, kind="stable"):
        need = int(lengths[item])
        at = bisect.bisect_left(open_rows, (need, -1))
        if at < len(open_rows):
            room, row = open_rows.pop(at)
        else:
            room, row = capacity, len(rows)
            rows.append([])
        rows[row].append(int(item))
        room -= need
        if room > 0 and len(rows[row]) < max_sequences:
            bisect.insort(open_rows, (room, row))
    return rows


def pack_tokens(token_arrays: Mapping[str, np.ndarray], input_mask: np.ndarray,
                members: np.ndarray) -> tuple[dict[str, np.ndarray], tuple[np.ndarray, ...]]:
    """Rows [R, L] of the token arrays [N, L] of the examples `members` [R, K] names (-1: an
    unused slot), each example's real tokens (`input_mask`, real tokens first) one after the
    other, and input_mask, position_ids, sequence_ids and cls_positions [R, K].

    Also gives (row, slot, offset) of every used slot in row-major order, for features the
    caller places itself (e.g. masked positions, shifted by the offset)."""
    R, K = members.shape
    L = input_mask.shape[1]
    used = members >= 0  # [R, K]
    lengths = input_mask.astype(bool).sum(1)  # [N]
    slot_lengths = np.where(used, lengths[np.maximum(members, 0)], 0)  # [R, K]
    if (slot_lengths.sum(1) > L).any():
        raise ValueError(f"a packed row holds more than {L} tokens: pack by the examples' "
                         "lengths (pack_lengths)")
    offsets = np.cumsum(slot_lengths, 1) - slot_lengths  # [R, K]
    row_of, slot_of = np.nonzero(used)  # row-major: slots in order within each row
    member = members[row_of, slot_of]  # [M] the example of each used slot
    offset = offsets[row_of, slot_of]  # [M]
    which, t = np.nonzero(input_mask[member] > 0)  # [T] (used slot, token) of real tokens
    rows, cols = row_of[which], offset[which] + t
    packed = {}
    for name, values in token_arrays.items():
        packed[name] = np.zeros((R, L), values.dtype)
        packed[name][rows, cols] = values[member[which], t]
    for name, values in (("input_mask", 1), ("position_ids", t),
                         ("sequence_ids", slot_of[which] + 1)):
        packed[name] = np.zeros((R, L), np.int32)
        packed[name][rows, cols] = values
    packed["cls_positions"] = np.where(used, offsets, 0).astype(np.int32)
    return packed, (row_of, slot_of, offset)


def slot_values(values: np.ndarray, members: np.ndarray) -> np.ndarray:
    """[R, K, ...] per-example values (labels, ...) of each row's slots; 0 in unused slots."""
    out = np.zeros(members.shape + values.shape[1:], values.dtype)
    used = members >= 0
    out[used] = values[members[used]]
    return out


def padding_share(input_mask: np.ndarray) -> float:
    """The share of a batch's token slots that are padding."""
    return 1.0 - float(np.asarray(input_mask).mean())
