"""GPT / GPT-2 model: sizes against transformers, causality, and the decode (KV cache) path."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.models.gpt import (
    PARAM_COUNTS,
    SIZES,
    GptLM,
    count_params,
    gpt_config,
    init_cache,
    positions_from_mask,
)

TINY = dict(vocab_size=64, max_position_embeddings=16, num_layers=2, hidden_size=32,
            num_heads=4, mlp_dim=48)


def _init(config, length=8, seed=0):
    ids = jnp.zeros((1, length), jnp.int32)
    init = jax.jit(lambda key: GptLM(config).init(key, ids)["params"])
    return nn.unbox(init(jax.random.key(seed)))


def _shapes(config):
    ids = jnp.zeros((1, 8), jnp.int32)
    return jax.eval_shape(lambda: GptLM(config).init(jax.random.key(0), ids))["params"]


@pytest.mark.torch
def test_param_counts_equal_transformers_models_on_meta_device():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    for size, (layers, hidden, heads, _) in SIZES.items():
        cfg = gpt_config(size)
        kwargs = dict(vocab_size=cfg.vocab_size, n_positions=cfg.max_position_embeddings,
                      n_embd=hidden, n_layer=layers, n_head=heads)
        with torch.device("meta"):
            if size == "gpt1":
                model = transformers.OpenAIGPTLMHeadModel(transformers.OpenAIGPTConfig(**kwargs))
            else:
                model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**kwargs))
        expected = sum(p.numel() for p in model.parameters())  # tied head counted once
        assert count_params(cfg) == expected == PARAM_COUNTS[size], size


def test_sizes_follow_the_papers():
    gpt1, small = gpt_config("gpt1"), gpt_config("gpt2_small")
    assert (gpt1.vocab_size, gpt1.max_position_embeddings, gpt1.transformer.pre_layer_norm) == (
        40478, 512, False)
    assert (small.vocab_size, small.max_position_embeddings, small.transformer.pre_layer_norm) == (
        50257, 1024, True)
    assert small.transformer.residual_init_std == pytest.approx(0.02 / np.sqrt(24))
    assert "final_layer_norm" in _shapes(gpt_config("gpt2_tiny", **TINY))["transformer"]
    assert "final_layer_norm" not in _shapes(gpt_config("gpt1", **TINY))["transformer"]
    with pytest.raises(ValueError, match="gpt_config.size"):
        gpt_config("gpt3")


def test_residual_projections_are_initialised_smaller_in_gpt2():
    cfg = gpt_config("gpt2_tiny", **{**TINY, "num_layers": 8, "hidden_size": 256, "num_heads": 4,
                                     "mlp_dim": 1024})
    layer = _init(cfg)["transformer"]["layer_3"]
    std_out = float(np.std(layer["mlp"]["wo"]["kernel"]))
    std_in = float(np.std(layer["mlp"]["wi"]["kernel"]))
    assert std_in == pytest.approx(0.02, rel=0.05)
    assert std_out == pytest.approx(0.02 / 4, rel=0.05)  # 1 / sqrt(2 * 8)


@pytest.mark.parametrize("size", ["gpt2_tiny", "gpt1"])
def test_output_at_t_does_not_depend_on_later_inputs(size):
    """d logits[t] / d position_embedding[p] is zero exactly when p > t (position p is used only
    by the token at p, so this is the gradient with respect to that token's input)."""
    cfg = gpt_config(size, **TINY)
    params = _init(cfg)
    ids = jnp.asarray(np.random.default_rng(0).integers(0, 64, (1, 8)), jnp.int32)
    model = GptLM(cfg)

    @jax.jit
    def position_grads(p):  # [L (outputs), P (position rows)] gradient norms
        def out_t(wpe, t):
            q = {**p, "position_embeddings": {"embedding": wpe}}
            return model.apply({"params": q}, ids)[0, t].sum()

        wpe = p["position_embeddings"]["embedding"]
        return jnp.stack([jnp.abs(jax.grad(out_t)(wpe, t)).sum(-1) for t in range(8)])

    grads = np.asarray(position_grads(params))
    for t in range(8):
        norms = grads[t, :8]
        assert np.all(norms[t + 1:] == 0), (t, norms)
        assert np.all(norms[:t + 1] > 0), (t, norms)


def test_positions_follow_the_mask():
    mask = jnp.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    np.testing.assert_array_equal(positions_from_mask(mask), [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]])


def test_decode_steps_match_the_full_forward_pass():
    cfg = gpt_config("gpt2_tiny", **TINY)
    model, params = GptLM(cfg), _init(cfg)
    ids = jnp.asarray(np.random.default_rng(1).integers(0, 64, (2, 10)), jnp.int32)
    full = jax.jit(model.apply)({"params": params}, ids)
    key_mask = jnp.ones((2, 12), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(10), (2, 10))

    @jax.jit
    def decode(cache, ids_BxL, positions_BxL):
        logits, mutated = model.apply({"params": params, "cache": cache}, ids_BxL, key_mask,
                                      positions_BxL, decode=True, mutable=["cache"])
        return logits, mutated["cache"]

    prefill, cache = decode(init_cache(model, 2, 12), ids[:, :6], positions[:, :6])
    np.testing.assert_allclose(prefill, full[:, :6], atol=1e-5)
    for t in range(6, 10):
        step, cache = decode(cache, ids[:, t:t + 1], positions[:, t:t + 1])
        np.testing.assert_allclose(step[:, 0], full[:, t], atol=1e-5)
