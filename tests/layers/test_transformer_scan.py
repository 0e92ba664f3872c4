"""The Transformer stack: scanned equals unrolled, and a last layer computing fewer queries
equals the first rows of the full one."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.layers.attention import AttentionMask
from bertjax.layers.transformer import TransformerConfig, TransformerStack


@pytest.mark.parametrize("pre_layer_norm", [False, True], ids=["post-ln", "pre-ln"])
def test_scanned_stack_equals_unrolled(pre_layer_norm):
    config = TransformerConfig(
        num_layers=3, hidden_size=32, num_heads=4, mlp_dim=64, pre_layer_norm=pre_layer_norm
    )
    x_BxLxE = jax.random.normal(jax.random.key(0), (2, 7, 32))
    mask = AttentionMask(causal=True)
    unrolled = TransformerStack(config)
    params = nn.unbox(unrolled.init(jax.random.key(1), x_BxLxE, mask, True)["params"])
    scanned = TransformerStack(dataclasses.replace(config, scan_layers=True))
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *[params[f"layer_{i}"] for i in range(3)])
    scanned_params = {"layers": {"block": stacked}}
    if pre_layer_norm:
        scanned_params["final_layer_norm"] = params["final_layer_norm"]
    expected, expected_hidden = unrolled.apply({"params": params}, x_BxLxE, mask, True)
    got, got_hidden = scanned.apply({"params": scanned_params}, x_BxLxE, mask, True)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert len(got_hidden) == len(expected_hidden) == 4
    for a, b in zip(got_hidden, expected_hidden, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("remat", [False, True], ids=["plain", "remat"])
@pytest.mark.parametrize("pre_layer_norm", [False, True], ids=["post-ln", "pre-ln"])
def test_last_queries_are_the_first_rows_of_the_full_output(pre_layer_norm, remat):
    config = TransformerConfig(num_layers=2, hidden_size=32, num_heads=4, mlp_dim=64,
                               pre_layer_norm=pre_layer_norm, remat=remat)
    x_BxLxE = jax.random.normal(jax.random.key(0), (2, 7, 32))
    padding = AttentionMask(jnp.arange(7) < jnp.array([[5], [7]]), real_tokens_first=True)
    for mask in (AttentionMask(causal=True), padding):
        stack = TransformerStack(config)
        params = stack.init(jax.random.key(1), x_BxLxE, mask, True)["params"]
        full, _ = stack.apply({"params": params}, x_BxLxE, mask, True)
        first, hidden = stack.apply({"params": params}, x_BxLxE, mask, True, last_queries=2)
        assert first.shape == (2, 2, 32) and hidden[-1].shape == (2, 2, 32)
        np.testing.assert_allclose(first, full[:, :2], atol=1e-5)
