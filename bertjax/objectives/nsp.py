"""Next-sentence-prediction loss and accuracy (label 0 = IsNext, 1 = random next)."""

import jax
import jax.numpy as jnp
import optax

Array = jax.Array


def nsp_loss(logits_Nx2: Array, labels_N: Array, weights_N: Array | None = None
             ) -> tuple[Array, dict[str, Array]]:
    """Mean cross-entropy over the pairs (float32), plus accuracy.

    Logits [..., 2] and labels [...]: one pair per row, or [B, K] pairs of packed rows with
    `weights` 1 where a row holds its k-th pair and 0 in unused slots."""
    with jax.named_scope("nsp_loss"):  # the profile's "loss and softmax" row
        logits_Nx2 = logits_Nx2.astype(jnp.float32)
        xent_N = optax.softmax_cross_entropy_with_integer_labels(logits_Nx2, labels_N)
        correct_N = (logits_Nx2.argmax(-1) == labels_N).astype(jnp.float32)
        if weights_N is None:
            loss, accuracy = xent_N.mean(), correct_N.mean()
        else:
            weights_N = weights_N.astype(jnp.float32)
            denom = jnp.maximum(weights_N.sum(), 1e-6)
            loss = (xent_N * weights_N).sum() / denom
            accuracy = (correct_N * weights_N).sum() / denom
        return loss, {"nsp_loss": loss, "nsp_accuracy": accuracy}
