"""BERT's speed levers compute what the plain layers compute: Q, K and V from one matrix
product over the concatenated kernels (fused_qkv), and position and segment embeddings by
slice and select (gather_free_embeddings); the parameters, and so checkpoints, are the same."""

import dataclasses

import flax.linen as nn
import jax
import numpy as np
import pytest

from bertjax.models.bert import bert_config
from bertjax.objectives.pretraining import bert_pretraining
from tests.training.test_step import random_batch


def with_levers(config, **levers):
    return dataclasses.replace(config, transformer=dataclasses.replace(config.transformer,
                                                                       **levers))


@pytest.mark.parametrize("lever", ["fused_qkv", "gather_free_embeddings"])
def test_a_lever_changes_no_number_beyond_float32_rounding(lever):
    config = bert_config("tiny", vocab_size=128, max_position_embeddings=64)
    on, off = (bert_pretraining(with_levers(config, **{lever: value})) for value in (True, False))
    batch = random_batch()
    variables = off.init_variables(jax.random.key(0), batch)
    assert jax.tree.map(np.shape, variables) == jax.tree.map(
        np.shape, on.init_variables(jax.random.key(0), batch))
    params = nn.unbox(variables["params"])
    rng = jax.random.key(3)  # dropout on: the same masks either way

    def grads(objective):
        return jax.jit(jax.value_and_grad(lambda p: objective.loss_fn(p, batch, rng)[0]))(params)

    (loss_on, grads_on), (loss_off, grads_off) = grads(on), grads(off)
    np.testing.assert_allclose(loss_on, loss_off, rtol=1e-6)
    scale = max(float(np.abs(g).max()) for g in jax.tree.leaves(grads_off))
    for a, b in zip(jax.tree.leaves(grads_on), jax.tree.leaves(grads_off), strict=True):
        np.testing.assert_allclose(np.asarray(a) / scale, np.asarray(b) / scale, atol=1e-6)
