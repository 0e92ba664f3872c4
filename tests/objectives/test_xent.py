"""The cross-entropy without a float32 copy of the logits (objectives/xent.py) equals optax's
on float32 logits, in value and gradient, for float32 and bfloat16 logits; and the compiled
loss holds less temporary memory than the float32-copy loss."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bertjax.objectives.lm import lm_loss
from bertjax.objectives.mlm import mlm_loss
from bertjax.objectives.xent import token_cross_entropy


def reference(logits, targets):
    logits = logits.astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets)


@pytest.mark.parametrize("dtype,rtol", [("float32", 2e-6), ("bfloat16", 2e-6)])
def test_values_and_gradients_equal_optax(dtype, rtol):
    logits = (4 * jax.random.normal(jax.random.key(0), (3, 7, 300))).astype(dtype)
    targets = jax.random.randint(jax.random.key(1), (3, 7), 0, 300)
    weights = jax.random.uniform(jax.random.key(2), (3, 7))
    xent, correct = token_cross_entropy(logits, targets)
    np.testing.assert_allclose(xent, reference(logits, targets), rtol=rtol, atol=1e-6)
    top = np.asarray(logits.astype(jnp.float32)).max(-1)
    target = np.take_along_axis(np.asarray(logits.astype(jnp.float32)), np.asarray(
        targets)[..., None], -1)[..., 0]
    np.testing.assert_array_equal(correct, (target >= top).astype(np.float32))

    got = jax.grad(lambda x: (token_cross_entropy(x, targets)[0] * weights).sum())(logits)
    want = jax.grad(lambda x: (reference(x, targets) * weights).sum())(logits)
    assert got.dtype == logits.dtype
    tolerance = 1e-6 if dtype == "float32" else 1e-2  # the gradient is written in bfloat16
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                               atol=tolerance)


def test_losses_fused_or_not_agree():
    logits = jax.random.normal(jax.random.key(0), (2, 9, 50)).astype(jnp.bfloat16)
    targets = jax.random.randint(jax.random.key(1), (2, 9), 0, 50)
    weights = (jax.random.uniform(jax.random.key(2), (2, 9)) < 0.7).astype(jnp.float32)
    for fn, name in ((lm_loss, "lm_loss"), (mlm_loss, "mlm_loss")):
        fused, unfused = fn(logits, targets, weights), fn(logits, targets, weights, False)
        np.testing.assert_allclose(fused[name].value, unfused[name].value, rtol=1e-6)


def test_the_compiled_loss_keeps_no_float32_copy_of_the_logits():
    """GPT-2's vocabulary at 512 tokens in bfloat16: optax's loss and the argmax hold two
    float32 [N, V] buffers (206 MB), the fused loss at most one (XLA:CPU keeps the float32
    input of its reduction; XLA:GPU fuses it)."""
    logits = jnp.zeros((512, 50257), jnp.bfloat16)
    targets = jnp.zeros((512,), jnp.int32)
    weights = jnp.ones((512,), jnp.float32)
    f32_copy = 512 * 50257 * 4

    def temp_bytes(fused):
        step = jax.jit(jax.grad(lambda x: lm_loss(x, targets, weights, fused)["lm_loss"].value))
        return step.lower(logits).compile().memory_analysis().temp_size_in_bytes

    unfused, fused = temp_bytes(False), temp_bytes(True)
    assert unfused >= 2 * f32_copy
    assert fused <= 1.01 * f32_copy < unfused
