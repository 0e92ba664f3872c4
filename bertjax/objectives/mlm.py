"""Masked-LM loss and accuracy over the gathered masked positions, weighted explicitly."""

import math

import jax

from bertjax.objectives.objective import Metrics
from bertjax.objectives.xent import weighted_cross_entropy

Array = jax.Array


def mlm_loss(
    logits_BxPxV: Array, masked_lm_ids_BxP: Array, masked_lm_weights_BxP: Array,
    fused: bool = True,
) -> Metrics:
    """Weighted cross-entropy over masked positions (float32) and accuracy, as Means (sums
    over the weights: objectives/objective.py), and the weight itself, `mlm_weight`.

    `masked_lm_weights` is 1 for every selected position (whether it became [MASK], a random
    token or stayed unchanged) and 0 for padding, so all selected tokens are predicted.
    `fused` (default) reads the logits without a float32 copy (objectives/xent.py).
    """
    with jax.named_scope("mlm_loss"):  # the profile's "loss and softmax" row
        loss, accuracy = weighted_cross_entropy(logits_BxPxV, masked_lm_ids_BxP,
                                                masked_lm_weights_BxP, fused)
        return {"mlm_loss": loss, "mlm_accuracy": accuracy, "mlm_weight": loss.weight}


def packed_predictions(seq_length: int, packed_sequences: int = 0,
                       masked_lm_prob: float = 0.15) -> int:
    """Masked positions per row: the paper's cap (20 at 128, 80 at 512) for one instance per
    row; for rows of up to K packed instances, room for every instance's own rounding
    (each predicts round(0.15 n) of its n tokens, at least 1): 0.15 L + K, to a multiple of 4."""
    if not packed_sequences:
        return 4 * math.ceil(seq_length * masked_lm_prob / 4)
    return 4 * math.ceil((seq_length * masked_lm_prob + packed_sequences) / 4)
