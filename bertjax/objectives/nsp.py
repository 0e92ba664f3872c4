"""Next-sentence-prediction loss and accuracy (label 0 = IsNext, 1 = random next)."""

import jax
import jax.numpy as jnp
import optax

Array = jax.Array


def nsp_loss(logits_Bx2: Array, labels_B: Array) -> tuple[Array, dict[str, Array]]:
    """Mean cross-entropy over the batch (float32), plus accuracy."""
    logits_Bx2 = logits_Bx2.astype(jnp.float32)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits_Bx2, labels_B).mean()
    accuracy = (logits_Bx2.argmax(-1) == labels_B).astype(jnp.float32).mean()
    return loss, {"nsp_loss": loss, "nsp_accuracy": accuracy}
