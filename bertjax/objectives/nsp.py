"""Next-sentence-prediction loss and accuracy (label 0 = IsNext, 1 = random next)."""

import jax
import jax.numpy as jnp
import optax

from bertjax.objectives.objective import Mean, Metrics

Array = jax.Array


def nsp_weights(labels_N: Array, weights_N: Array | None = None) -> Array:
    """The weight of each pair: 1 per row, or packed rows' `next_sentence_weights` [B, K] (1
    where a row holds its k-th pair, 0 in unused slots)."""
    return jnp.ones(labels_N.shape, jnp.float32) if weights_N is None else weights_N


def nsp_loss(logits_Nx2: Array, labels_N: Array, weights_N: Array | None = None) -> Metrics:
    """Cross-entropy over the pairs (float32) and accuracy, as Means (objectives/objective.py).

    Logits [..., 2] and labels [...]: one pair per row, or [B, K] pairs of packed rows with
    their `weights` (nsp_weights)."""
    with jax.named_scope("nsp_loss"):  # the profile's "loss and softmax" row
        logits_Nx2 = logits_Nx2.astype(jnp.float32)
        xent_N = optax.softmax_cross_entropy_with_integer_labels(logits_Nx2, labels_N)
        correct_N = (logits_Nx2.argmax(-1) == labels_N).astype(jnp.float32)
        weights_N = nsp_weights(labels_N, weights_N)
        return {"nsp_loss": Mean.of(xent_N, weights_N),
                "nsp_accuracy": Mean.of(correct_N, weights_N)}
