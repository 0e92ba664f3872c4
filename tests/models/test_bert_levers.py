"""BERT's and GPT's speed levers compute what the plain layers compute: Q, K and V from one
matrix product over the concatenated kernels (fused_qkv), position and segment embeddings by
slice and select (gather_free_embeddings), the output projection over a vocabulary padded to a
multiple of 64 (pad_vocab_to); the parameters, and so checkpoints, are the same."""

import dataclasses

import flax.linen as nn
import jax
import numpy as np
import pytest

from bertjax.models.bert import bert_config
from bertjax.models.gpt import GptLM, gpt_config
from bertjax.objectives.pretraining import bert_pretraining
from tests.training.test_step import random_batch


def with_levers(config, **levers):
    return dataclasses.replace(config, transformer=dataclasses.replace(config.transformer,
                                                                       **levers))


@pytest.mark.parametrize("lever", ["fused_qkv", "gather_free_embeddings", "pad_vocab_to"])
def test_a_lever_changes_no_number_beyond_float32_rounding(lever):
    config = bert_config("tiny", vocab_size=123, max_position_embeddings=64)
    values = (64, 1) if lever == "pad_vocab_to" else (True, False)
    on, off = (bert_pretraining(with_levers(config, **{lever: value})) for value in values)
    batch = random_batch(vocab_size=config.vocab_size)
    assert set(np.unique(batch["segment_ids"])) == {0, 1}  # both segment rows are read
    variables = off.init_variables(jax.random.key(0), batch)
    assert jax.tree.map(np.shape, variables) == jax.tree.map(
        np.shape, on.init_variables(jax.random.key(0), batch))
    params = nn.unbox(variables["params"])
    rng = jax.random.key(3)  # dropout on: the same masks either way

    def grads(objective):
        return jax.jit(jax.value_and_grad(lambda p: objective.loss_fn(p, batch, rng)[0]))(params)

    (loss_on, grads_on), (loss_off, grads_off) = grads(on), grads(off)
    leaves = jax.tree.leaves((loss_on, grads_on, loss_off, grads_off))
    assert all(np.isfinite(leaf).all() for leaf in leaves)  # NaN would compare equal to NaN
    np.testing.assert_allclose(loss_on, loss_off, rtol=1e-6)
    scale = max(float(np.abs(g).max()) for g in jax.tree.leaves(grads_off))
    for a, b in zip(jax.tree.leaves(grads_on), jax.tree.leaves(grads_off), strict=True):
        np.testing.assert_allclose(np.asarray(a) / scale, np.asarray(b) / scale, atol=1e-6)
    # At init the loss barely depends on Q and K (the scores are near zero), so their kernels'
    # gradients are compared on their own scale: a Q/K swap is far outside these tolerances.
    for layer in ("layer_0", "layer_1"):
        on_qk, off_qk = (g["bert"]["encoder"][layer]["attention"] for g in (grads_on, grads_off))
        q, k = (np.asarray(off_qk[f"{name}_kernel"]) for name in ("query", "key"))
        assert np.abs(q - k).max() > 0.5 * np.abs(q).max() > 0
        for name in ("query_kernel", "key_kernel"):
            want = np.asarray(off_qk[name])
            np.testing.assert_allclose(on_qk[name], want, rtol=1e-4,
                                       atol=1e-4 * np.abs(want).max(), err_msg=f"{layer} {name}")


def test_gpt_logits_over_a_padded_vocabulary_are_the_real_vocabulary():
    config = gpt_config("gpt2_tiny", vocab_size=301)
    padded, plain = (dataclasses.replace(config, transformer=dataclasses.replace(
        config.transformer, pad_vocab_to=m)) for m in (64, 1))
    ids = jax.random.randint(jax.random.key(0), (2, 9), 0, 301)
    params = GptLM(plain).init(jax.random.key(1), ids)
    got, want = GptLM(padded).apply(params, ids), GptLM(plain).apply(params, ids)
    assert got.shape == want.shape == (2, 9, 301)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
