"""The tied head and its loss a slice of the sequence at a time (objectives/head_xent.py) equal
optax's cross-entropy on the whole float32 logits h @ table^T, in value and in the gradients
of h, the table and the weights; the compiled step keeps no [B, L, V] array; and a GPT trained
either way takes the same steps, on one device and sharded over eight."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bertjax.models.gpt import gpt_config
from bertjax.objectives.head_xent import slices_for, tied_cross_entropy_sums
from bertjax.objectives.lm import gpt_pretraining
from bertjax.training.loop import build_trainer
from bertjax.training.mesh import make_mesh
from bertjax.training.optim import make_optimizer

pytestmark = pytest.mark.unit  # the unit tier: make test-unit


def reference_sums(h, table, targets, weights):
    """optax on the whole float32 logits; correct where the target's logit is the maximum."""
    logits = jnp.einsum("ble,ve->blv", h, table)
    xent = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    target = jnp.take_along_axis(logits, targets[..., None], -1)[..., 0]
    correct = (target >= logits.max(-1)).astype(jnp.float32)
    return (xent * weights).sum(), (correct * weights).sum()


def inputs(B=3, L=8, E=16, V=300, seed=0):
    keys = jax.random.split(jax.random.key(seed), 4)
    h = jax.random.normal(keys[0], (B, L, E))
    table = jax.random.normal(keys[1], (V, E))
    targets = jax.random.randint(keys[2], (B, L), 0, V)
    weights = jax.random.uniform(keys[3], (B, L)) * (jnp.arange(L) < L - 2)  # some rows 0
    return h, table, targets, weights


def grads(fn, h, table, targets, weights):
    return jax.grad(lambda h, t, w: fn(h, t, targets, w)[0], argnums=(0, 1, 2))(h, table, weights)


@pytest.mark.parametrize("slices,pad_vocab_to", [(1, 1), (2, 1), (4, 1), (8, 1), (4, 64)])
def test_sums_and_gradients_equal_optax_on_the_whole_logits(slices, pad_vocab_to):
    h, table, targets, weights = inputs()
    ours = lambda h, t, y, w: tied_cross_entropy_sums(  # noqa: E731
        h, t, y, w, slices, jnp.float32, pad_vocab_to)
    got, want = ours(h, table, targets, weights), reference_sums(h, table, targets, weights)
    np.testing.assert_allclose(got[0], want[0], rtol=2e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
    for ours_g, want_g in zip(grads(ours, h, table, targets, weights),
                              grads(reference_sums, h, table, targets, weights), strict=True):
        np.testing.assert_allclose(ours_g, want_g, rtol=1e-5, atol=1e-6)


def test_a_scaled_loss_scales_its_gradient_and_accuracy_has_none():
    """The gradient is made in the forward pass: the cotangent must still scale it."""
    h, table, targets, weights = inputs()

    def loss(h, scale):
        xent, correct = tied_cross_entropy_sums(h, table, targets, weights, 2, jnp.float32)
        return scale * xent + correct

    g1, g3 = jax.grad(loss)(h, 1.0), jax.grad(loss)(h, 3.0)
    np.testing.assert_allclose(g3, 3 * g1, rtol=1e-6)
    want = grads(reference_sums, h, table, targets, weights)[0]
    np.testing.assert_allclose(g1, want, rtol=1e-5, atol=1e-6)


def test_bfloat16_product_is_close_to_float32():
    h, table, targets, weights = inputs(V=512)
    got = tied_cross_entropy_sums(h, table, targets, weights, 4, jnp.bfloat16)
    want = reference_sums(h, table, targets, weights)
    np.testing.assert_allclose(got[0], want[0], rtol=2e-2)
    g = grads(lambda *a: tied_cross_entropy_sums(*a, 4, jnp.bfloat16), h, table, targets,
              weights)
    assert g[0].dtype == h.dtype and g[1].dtype == table.dtype


def test_slices_for_picks_the_fewest_slices_within_the_rows():
    assert slices_for(32, 128, 512) == 8  # 32 x 16 rows
    assert slices_for(32, 128, 1000) == 8  # 32 x 32 would be 1024
    assert slices_for(32, 128, 0) == 1
    assert slices_for(4, 6, 8) == 3  # divisors of 6 only: 4 x 2 rows
    assert slices_for(64, 8, 16) == 8  # never below one position a slice


def test_slices_that_do_not_divide_the_sequence_are_refused_in_one_line():
    h, table, targets, weights = inputs(L=8)
    with pytest.raises(ValueError, match="slices do not divide the sequence length 8"):
        tied_cross_entropy_sums(h, table, targets, weights, 3, jnp.float32)


def test_the_compiled_gradient_keeps_no_whole_logits():
    """At 8 x 512 positions and V 8192 the whole logits are 128 MiB in float32; the sliced
    head's temporaries are a few slices' logits (8 slices of 16 MiB), under half of them,
    where the whole-logits path holds at least one whole copy."""
    B, L, E, V = 8, 512, 64, 8192
    h = jnp.zeros((B, L, E))
    table = jnp.zeros((V, E))
    targets = jnp.zeros((B, L), jnp.int32)
    weights = jnp.ones((B, L))
    whole = B * L * V * 4

    def temp_bytes(fn):
        step = jax.jit(jax.grad(lambda h, t: fn(h, t, targets, weights)[0], argnums=(0, 1)))
        return step.lower(h, table).compile().memory_analysis().temp_size_in_bytes

    sliced = temp_bytes(lambda *a: tied_cross_entropy_sums(*a, slices_for(B, L, 512),
                                                           jnp.float32))
    assert temp_bytes(reference_sums) >= whole
    assert sliced < whole / 2


def train_losses(loss_rows, mesh, steps=3):
    config = gpt_config("gpt2_tiny", vocab_size=500, max_position_embeddings=16, num_layers=1)
    objective = gpt_pretraining(config, loss_rows=loss_rows)
    tx = make_optimizer(learning_rate=1e-3, warmup_steps=0, total_steps=10)
    trainer = build_trainer(objective, tx, mesh, 8, 16)
    rng = np.random.default_rng(0)
    state, losses = trainer.init(), []
    for _ in range(steps):
        ids = rng.integers(0, 500, (8, 17))
        batch = {"input_ids": ids[:, :-1].astype(np.int32),
                 "target_ids": ids[:, 1:].astype(np.int32),
                 "loss_weights": (rng.random((8, 16)) < 0.9).astype(np.float32)}
        state, metrics = trainer.step(state, trainer.device_batch(batch))
        losses.append((float(metrics["loss"]), float(metrics["lm_accuracy"])))
    return losses, jax.device_get(state.params)


@pytest.mark.parametrize("devices", [1, 8])
def test_gpt_trains_the_same_with_the_sliced_head(devices):
    mesh = make_mesh(devices=jax.devices()[:devices])
    whole, whole_params = train_losses(0, mesh)
    sliced, sliced_params = train_losses(32, mesh)  # 4 slices of 8 x 4 positions
    np.testing.assert_allclose(sliced, whole, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(sliced_params), jax.tree.leaves(whole_params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
