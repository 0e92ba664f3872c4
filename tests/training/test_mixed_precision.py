"""Mixed precision: float32 parameters and optimizer state, bfloat16 compute, float32 losses.
A tiny BERT trained a few hundred steps in bfloat16 follows the float32 run's loss curve."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.models.bert import bert_config
from bertjax.objectives.pretraining import bert_pretraining
from bertjax.training.loop import build_trainer
from bertjax.training.mesh import make_mesh
from bertjax.training.optim import make_optimizer

VOCAB, MASK, B, L, P, STEPS = 64, 3, 16, 32, 6, 200


def bigram_batches(steps: int, seed: int = 0) -> list[dict]:
    """Masked-LM batches from a random sparse bigram language (2 successors per token), so
    the model has something to learn and its loss keeps falling."""
    rng = np.random.default_rng(seed)
    successors = rng.integers(5, VOCAB, size=(VOCAB, 2))
    batches = []
    for _ in range(steps):
        ids = np.zeros((B, L), np.int32)
        ids[:, 0] = rng.integers(5, VOCAB, size=B)
        for t in range(1, L):
            ids[:, t] = successors[ids[:, t - 1], rng.integers(0, 2, size=B)]
        positions = np.sort(np.stack([rng.choice(np.arange(1, L), P, replace=False)
                                      for _ in range(B)]), 1).astype(np.int32)
        targets = np.take_along_axis(ids, positions, 1)
        np.put_along_axis(ids, positions, MASK, 1)
        batches.append({
            "input_ids": ids, "input_mask": np.ones((B, L), np.int32),
            "segment_ids": np.zeros((B, L), np.int32), "masked_lm_positions": positions,
            "masked_lm_ids": targets, "masked_lm_weights": np.ones((B, P), np.float32),
            "next_sentence_label": rng.integers(0, 2, size=B).astype(np.int32)})
    return batches


def mlm_losses(dtype: str, batches: list[dict]) -> tuple[np.ndarray, dict]:
    config = bert_config("tiny", vocab_size=VOCAB, hidden_size=64, num_heads=2, mlp_dim=128,
                         max_position_embeddings=L, dtype=dtype)
    tx = make_optimizer("adamw", learning_rate=3e-3, warmup_steps=20, total_steps=STEPS)
    mesh = make_mesh(num_devices=1)  # precision, not sharding, is under test: 1 compiles faster
    trainer = build_trainer(bert_pretraining(config), tx, mesh, B, L, seed=0)
    state = trainer.init()
    losses = []
    for batch in batches:
        state, metrics = trainer.step(state, trainer.device_batch(batch))
        losses.append(float(metrics["mlm_loss"]))
    return np.array(losses), state


def test_bfloat16_steps_keep_float32_state_and_the_float32_loss():
    """The fast tier's check: a few bfloat16 steps, state in float32, losses near float32's."""
    batches = bigram_batches(3)
    f32, _ = mlm_losses("float32", batches)
    bf16, bf16_state = mlm_losses("bfloat16", batches)
    for leaf in jax.tree.leaves((bf16_state.params, bf16_state.opt_state)):
        assert leaf.dtype in (jnp.float32, jnp.int32), leaf.dtype
    assert np.all(np.abs(bf16 - f32) < 0.02 * f32), np.c_[f32, bf16]


@pytest.mark.e2e  # a few hundred steps of each; the fast tier takes three (above)
def test_bfloat16_training_tracks_float32():
    batches = bigram_batches(STEPS)
    f32, f32_state = mlm_losses("float32", batches)
    bf16, bf16_state = mlm_losses("bfloat16", batches)
    # Parameters and Adam's moments stay float32 whatever the compute dtype.
    for leaf in jax.tree.leaves((bf16_state.params, bf16_state.opt_state)):
        assert leaf.dtype in (jnp.float32, jnp.int32), leaf.dtype
    window = lambda x: x.reshape(-1, 25).mean(1)  # noqa: E731  (8 windows of 25 steps)
    w32, w16 = window(f32), window(bf16)
    assert w32[-1] < w32[0] - 0.2 and w16[-1] < w16[0] - 0.2  # both runs learn
    assert np.all(np.abs(w16 - w32) < 0.02 * w32), np.c_[w32, w16]
    assert abs(w16[-1] - w32[-1]) < 0.01 * w32[-1], (w32[-1], w16[-1])
