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

Rows are filled by best-fit decreasing over windows of consecutive instances
(bertjax/data/packing.py). The windows follow the epoch's shuffled order, so every window is a
random sample of the corpus and packing changes which instances share a step, never which
instances an epoch visits.
"""

from __future__ import annotations

import numpy as np

from bertjax.data.bert.nsp import Instances
from bertjax.data.packing import pack_tokens, slot_values

PACKED_FEATURES = ("position_ids", "sequence_ids", "cls_positions", "next_sentence_weights")

Example = dict[str, np.ndarray]


def instance_lengths(instances: Instances) -> np.ndarray:
    """int64 [N]: tokens of each instance with its [CLS] and [SEP]s."""
    len_a = instances.a_stop - instances.a_start
    has_b = instances.b_doc >= 0
    len_b = np.where(has_b, instances.b_stop - instances.b_start, 0)
    return np.where(has_b, len_a + len_b + 3, len_a + 2).astype(np.int64)


def pack_examples(examples: Example, members: np.ndarray, row_predictions: int) -> Example:
    """Packed rows [R, ...] from unpacked examples [N, ...] (their real tokens first, as
    bertjax writes them): row r holds examples members[r, k] (-1: none) one after the other.

    `examples` has the unpacked features (input_ids, input_mask, segment_ids,
    masked_lm_positions/ids/weights, next_sentence_label); the rows have them too (masked
    positions shifted to where each instance sits, up to `row_predictions` per row) and
    PACKED_FEATURES."""
    R, K = members.shape
    packed, (row_of, slot_of, offset) = pack_tokens(
        {k: examples[k] for k in ("input_ids", "segment_ids")}, examples["input_mask"], members)
    member = members[row_of, slot_of]  # [M] unpacked example of each used slot
    ints = lambda *shape: np.zeros(shape, np.int32)  # noqa: E731

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

    packed["next_sentence_label"] = slot_values(examples["next_sentence_label"], members)
    packed["next_sentence_weights"] = (members >= 0).astype(np.float32)
    return packed
