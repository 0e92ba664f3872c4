"""Packed BERT rows: several instances per row of `max_seq_length` tokens, so that no step is
spent on padding.

Unpacked, every instance is padded to the full length: 10% of BERT's instances are short by
design and documents end mid-sequence, and fine-tuning sentences are far shorter than the
length they are padded to. Packing, as MLPerf BERT and Graphcore's packing paper (Krell et
al. 2021, arXiv 2107.02027) do it, puts up to K instances in one row:

    input_ids      [CLS] a1 [SEP] b1 [SEP] [CLS] a2 [SEP] b2 [SEP] [PAD] ...
    sequence_ids     1   1    1    1   1     2   2    2    2   2     0    which instance
    position_ids     0   1    2    3   4     0   1    2    3   4     0    restart per instance
    segment_ids      0   0    0    1   1     0   0    0    1   1     0    A / B, as unpacked
    cls_positions  [0, 5, 0]   next_sentence_label [l1, l2, 0]   next_sentence_weights [1, 1, 0]

Attention never crosses instances (layers/masks.py), so every instance is computed exactly as
it would be alone; the masked-LM targets of all instances are one list per row (positions
shifted by the instance's offset).

Rows are filled by best-fit decreasing over windows of consecutive instances (`pack_lengths`):
each instance, longest first, goes into the open row with the least room that still fits it
and holds fewer than K. The windows follow the epoch's shuffled order, so every window is a
random sample of the corpus and packing changes which instances share a step, never which
instances an epoch visits.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

from bertjax.data.bert.nsp import Instances

WINDOW = 2048  # instances packed together: larger windows pack a little tighter
PACKED_FEATURES = ("position_ids", "sequence_ids", "cls_positions", "next_sentence_weights")

Example = dict[str, np.ndarray]


def instance_lengths(instances: Instances) -> np.ndarray:
    """int64 [N]: tokens of each instance with its [CLS] and [SEP]s."""
    len_a = instances.a_stop - instances.a_start
    has_b = instances.b_doc >= 0
    len_b = np.where(has_b, instances.b_stop - instances.b_start, 0)
    return np.where(has_b, len_a + len_b + 3, len_a + 2).astype(np.int64)


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


def pack_examples(examples: Example, members: np.ndarray, row_predictions: int) -> Example:
    """Packed rows [R, ...] from unpacked examples [N, ...] (their real tokens first, as
    bertjax writes them): row r holds examples members[r, k] (-1: none) one after the other.

    `examples` has the unpacked features (input_ids, input_mask, segment_ids,
    masked_lm_positions/ids/weights, next_sentence_label); the rows have them too (masked
    positions shifted to where each instance sits, up to `row_predictions` per row) and
    PACKED_FEATURES."""
    R, K = members.shape
    L = examples["input_ids"].shape[1]
    used = members >= 0  # [R, K]
    lengths = examples["input_mask"].astype(np.int64).sum(1)  # [N]
    slot_lengths = np.where(used, lengths[np.maximum(members, 0)], 0)  # [R, K]
    if (slot_lengths.sum(1) > L).any():
        raise ValueError(f"a packed row holds more than {L} tokens: pack by instance_lengths")
    offsets = np.cumsum(slot_lengths, 1) - slot_lengths  # [R, K]
    row_of, slot_of = np.nonzero(used)  # row-major: slots in order within each row
    member = members[row_of, slot_of]  # [M] unpacked example of each used slot
    offset = offsets[row_of, slot_of]  # [M]

    ints = lambda *shape: np.zeros(shape, np.int32)  # noqa: E731
    packed = {name: ints(R, L) for name in
              ("input_ids", "input_mask", "segment_ids", "position_ids", "sequence_ids")}
    which, t = np.nonzero(examples["input_mask"][member] > 0)  # [T] used slot, token
    rows, cols = row_of[which], offset[which] + t
    packed["input_ids"][rows, cols] = examples["input_ids"][member[which], t]
    packed["segment_ids"][rows, cols] = examples["segment_ids"][member[which], t]
    packed["input_mask"][rows, cols] = 1
    packed["position_ids"][rows, cols] = t
    packed["sequence_ids"][rows, cols] = slot_of[which] + 1

    which, p = np.nonzero(examples["masked_lm_weights"][member] > 0)  # [P] used slot, target
    rows = row_of[which]
    per_row = np.bincount(rows, minlength=R)
    if per_row.max(initial=0) > row_predictions:
        raise ValueError(f"a packed row has {per_row.max()} masked positions, more than "
                         f"{row_predictions}: raise the row's prediction count")
    target = np.arange(rows.size) - (np.cumsum(per_row) - per_row)[rows]  # 0, 1, .. per row
    packed["masked_lm_positions"] = ints(R, row_predictions)
    packed["masked_lm_ids"] = ints(R, row_predictions)
    packed["masked_lm_weights"] = np.zeros((R, row_predictions), np.float32)
    packed["masked_lm_positions"][rows, target] = (
        examples["masked_lm_positions"][member[which], p] + offset[which])
    packed["masked_lm_ids"][rows, target] = examples["masked_lm_ids"][member[which], p]
    packed["masked_lm_weights"][rows, target] = 1.0

    packed["cls_positions"] = np.where(used, offsets, 0).astype(np.int32)
    labels = ints(R, K)
    labels[row_of, slot_of] = examples["next_sentence_label"][member]
    packed["next_sentence_label"] = labels
    packed["next_sentence_weights"] = used.astype(np.float32)
    return packed


def padding_share(input_mask: np.ndarray) -> float:
    """The share of a batch's token slots that are padding."""
    return 1.0 - float(np.asarray(input_mask).mean())
