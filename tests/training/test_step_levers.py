"""The train step's speed levers (training/step.py, StepOptions) compute what the step computed
before: the finite-step guard read from the gradients, skipping the update under lax.cond or
selecting after it, is bit-equal to the guard that also checked the new parameters, the cond
lets XLA update the donated state in place, and the cheaper dropout generators keep the
keep-rate and resume exactly through a checkpoint."""

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from bertjax.layers.dropout import keep_mask
from bertjax.models.bert import bert_config
from bertjax.objectives.objective import Loss, Mean
from bertjax.objectives.pretraining import bert_pretraining
from bertjax.training.aot import lower_train_step
from bertjax.training.checkpoint import Checkpointer
from bertjax.training.loop import build_trainer
from bertjax.training.mesh import make_mesh
from bertjax.training.optim import make_optimizer
from bertjax.training.state import create_state
from bertjax.training.step import StepOptions, step_key, train_step
from tests.training.test_step import random_batch


def toy_sums(params, batch, rng):
    pred = batch["x"] @ params["w"] + params["b"]
    return {"mse": Mean.of((pred - batch["y"]) ** 2 * batch["scale"])}


toy_loss = Loss(toy_sums, {"mse": 1.0}, lambda batch: {"mse": jnp.float32(batch["y"].size)})


def toy_steps(options, scales):
    tx = make_optimizer(learning_rate=1e-2, warmup_steps=1, total_steps=10)
    params = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}
    state = create_state(params, tx, seed=0)
    step = jax.jit(lambda s, b: train_step(s, b, loss_fn=toy_loss, tx=tx, options=options))
    rng = np.random.default_rng(0)
    flags = []
    for scale in scales:
        batch = {"x": rng.normal(size=(8, 4)).astype(np.float32),
                 "y": rng.normal(size=(8, 3)).astype(np.float32), "scale": np.float32(scale)}
        state, metrics = step(state, batch)
        flags.append(float(metrics["nonfinite"]))
    return state, flags, metrics


def test_the_guard_from_the_gradients_is_the_guard_on_new_parameters_bit_for_bit():
    scales = [1.0, 1.0, np.nan, 1.0, np.inf, 1.0]
    new, flags_new, metrics = toy_steps(StepOptions(), scales)
    selected, flags_selected, _ = toy_steps(StepOptions(skip_by_cond=False), scales)
    old, flags_old, old_metrics = toy_steps(StepOptions(check_new_params=True), scales)
    assert flags_new == flags_selected == flags_old == [0, 0, 1, 0, 1, 0]
    for a, b, c in zip(jax.tree.leaves((new.params, new.opt_state)),
                       jax.tree.leaves((selected.params, selected.opt_state)),
                       jax.tree.leaves((old.params, old.opt_state)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(c))
        np.testing.assert_array_equal(np.asarray(b), np.asarray(c))
    assert "param_norm" not in metrics and "param_norm" in old_metrics  # logged by the loop


def copied_state_buffers(options):
    """The donated state buffers the compiled BERT-tiny step copies before writing them."""
    task = bert_pretraining(bert_config("tiny", vocab_size=128, max_position_embeddings=64))
    tx = make_optimizer(learning_rate=1e-3, warmup_steps=2, total_steps=10)
    trainer = build_trainer(task, tx, make_mesh(devices=jax.devices()[:1]), 8, 32,
                            options=options)
    spec = {key: (value.shape, value.dtype) for key, value in random_batch(vocab_size=128).items()}
    hlo = lower_train_step(trainer, spec).compile().as_text()
    return re.findall(r"= f32\[[\d,]*\]\S* copy\(%state_(\w+)", hlo)


def test_skipping_the_update_under_cond_updates_the_donated_state_in_place():
    """Selecting between old and new state after the update keeps the old state alive beside
    the in-place writes, so XLA copies the donated parameters and Adam moments each step; the
    update under lax.cond (the default) copies none of them."""
    assert copied_state_buffers(StepOptions()) == []
    selected = copied_state_buffers(StepOptions(skip_by_cond=False))
    assert any("opt_state" in name and "mu" in name for name in selected), selected


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_cheaper_dropout_bits_keep_the_rate(impl):
    """Another stream than threefry's, and each element kept with probability 0.9: a binomial
    test on 2**20 elements, and no correlation between neighbours (the 16-bit halves)."""
    key = step_key(jax.random.key_data(jax.random.key(0)), jnp.int32(5), impl)
    mask = np.asarray(keep_mask(jax.random.fold_in(key, 1), 0.1, (256, 4096)))
    reference = np.asarray(keep_mask(jax.random.fold_in(
        step_key(jax.random.key_data(jax.random.key(0)), jnp.int32(5)), 1), 0.1, (256, 4096)))
    assert (mask != reference).mean() > 0.1
    kept = int(mask.sum())
    assert stats.binomtest(kept, mask.size, 58982 / 65536).pvalue > 1e-3
    both = (mask[:, 0::2] & mask[:, 1::2]).mean()
    assert abs(both - mask.mean() ** 2) < 4 * np.sqrt(0.09 / mask[:, 0::2].size)
    with pytest.raises(ValueError, match="train.dropout_rng is 'philox': set it to one of"):
        StepOptions(dropout_rng="philox")


def test_rbg_dropout_resumes_exactly_through_a_checkpoint(tmp_path):
    task = bert_pretraining(bert_config("tiny", vocab_size=128, max_position_embeddings=64))
    tx = make_optimizer(learning_rate=1e-3, warmup_steps=2, total_steps=10)
    trainer = build_trainer(task, tx, make_mesh(devices=jax.devices()[:1]), 8, 32,
                            options=StepOptions(dropout_rng="rbg"))
    batches = [random_batch(vocab_size=128, seed=s) for s in range(4)]
    straight = trainer.init()
    for batch in batches:
        straight, _ = trainer.step(straight, trainer.device_batch(batch))
    state = trainer.init()
    for batch in batches[:2]:
        state, _ = trainer.step(state, trainer.device_batch(batch))
    checkpointer = Checkpointer(tmp_path, async_save=False)
    checkpointer.save(2, state, {"phase": 0, "example_index": 16}, force=True)
    checkpointer.close()
    restored, _ = Checkpointer(tmp_path).restore(trainer.abstract_state)
    for batch in batches[2:]:
        restored, _ = trainer.step(restored, trainer.device_batch(batch))
    for a, b in zip(jax.tree.leaves(nn.unbox(straight.params)),
                    jax.tree.leaves(nn.unbox(restored.params)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    threefry = build_trainer(task, tx, make_mesh(devices=jax.devices()[:1]), 8, 32)
    other = threefry.init()
    for batch in batches:
        other, _ = threefry.step(other, trainer.device_batch(batch))
    differs = [not np.array_equal(a, b) for a, b in zip(
        jax.tree.leaves(other.params), jax.tree.leaves(straight.params), strict=True)]
    assert any(differs)  # rbg really drew other masks
