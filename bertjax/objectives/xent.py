"""Cross-entropy over a vocabulary without a float32 copy of the logits.

Language-model logits are the largest tensor of a step (GPT-2 at 32 x 1024 tokens: 3.3 GB in
bfloat16). `optax.softmax_cross_entropy_with_integer_labels` on logits cast to float32 reads
a float32 copy ([N, V] float32: 6.6 GB) for its log-softmax, and the accuracy's argmax is one
more pass. Here every pass reads the logits in their own dtype and widens them inside the
reduction: the row maximum (exact in bfloat16), the sum of exp(x - max) in float32, and the
target's logit. The gradient, (softmax - onehot) * g, is one elementwise pass written in the
logits' dtype (a custom VJP, so autodiff keeps no float32 softmax either). The loss is the
same as optax's to float32 rounding (tests/objectives/test_xent.py); the accuracy counts a
target whose logit reaches the row maximum, as mlm_loss always has.
"""

import jax
import jax.numpy as jnp
import optax

from bertjax.objectives.objective import Mean

Array = jax.Array


@jax.custom_vjp
def token_cross_entropy(logits_NxV: Array, targets_N: Array) -> tuple[Array, Array]:
    """(cross-entropy float32 [...], correct float32 [...]) of logits [..., V] against int
    targets [...]; differentiable in the logits (the second output has no gradient)."""
    return cross_entropy_forward(logits_NxV, targets_N)[0]


def cross_entropy_forward(logits_NxV: Array, targets_N: Array
                          ) -> tuple[tuple[Array, Array], tuple]:
    """((cross-entropy, correct), residuals (logits, targets, log-sum-exp)): the forward pass
    of token_cross_entropy, for cross_entropy_backward (also objectives/head_xent.py's)."""
    max_N = jax.lax.stop_gradient(logits_NxV.max(-1)).astype(jnp.float32)
    shifted_NxV = logits_NxV.astype(jnp.float32) - max_N[..., None]  # fused into the sum
    lse_N = max_N + jnp.log(jnp.exp(shifted_NxV).sum(-1))
    target_N = jnp.take_along_axis(logits_NxV, targets_N[..., None], -1)[..., 0]
    target_N = target_N.astype(jnp.float32)
    correct_N = (target_N >= max_N).astype(jnp.float32)
    return (lse_N - target_N, correct_N), (logits_NxV, targets_N, lse_N)


def cross_entropy_backward(residuals: tuple, cotangents: tuple[Array, Array | None]
                           ) -> tuple[Array, None]:
    """(g * (softmax - onehot) in the logits' dtype, None) from cross_entropy_forward's
    residuals and the cross-entropy's cotangent g."""
    logits_NxV, targets_N, lse_N = residuals
    g_N = cotangents[0]
    vocab_V = jnp.arange(logits_NxV.shape[-1], dtype=targets_N.dtype)
    probs_NxV = jnp.exp(logits_NxV.astype(jnp.float32) - lse_N[..., None])
    onehot_NxV = vocab_V == targets_N[..., None]
    return (g_N[..., None] * (probs_NxV - onehot_NxV)).astype(logits_NxV.dtype), None


token_cross_entropy.defvjp(cross_entropy_forward, cross_entropy_backward)


def weighted_cross_entropy(logits_NxV: Array, targets_N: Array, weights_N: Array,
                           fused: bool = True) -> tuple[Mean, Mean]:
    """(weighted cross-entropy, weighted accuracy) as Means (float32 sums over the weights) of
    logits [..., V] against targets [...]: `token_cross_entropy`, or with `fused=False` optax's
    cross-entropy on float32 logits (the A/B baseline of the speed levers). A target counts as
    correct where its logit reaches the row maximum."""
    if fused:
        xent_N, correct_N = token_cross_entropy(logits_NxV, targets_N)
    else:
        logits_NxV = logits_NxV.astype(jnp.float32)
        xent_N = optax.softmax_cross_entropy_with_integer_labels(logits_NxV, targets_N)
        target_N = jnp.take_along_axis(logits_NxV, targets_N[..., None], -1)[..., 0]
        correct_N = (target_N >= logits_NxV.max(-1)).astype(jnp.float32)
    return Mean.of(xent_N, weights_N), Mean.of(correct_N, weights_N)
