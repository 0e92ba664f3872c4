"""ScalarMix: the formula, masked layer normalisation, the L2 regulariser, BERT/GPT layers."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bertjax.layers.scalar_mix import ScalarMix, mix_weights, scalar_mix_penalty

K, B, T, F = 3, 2, 5, 4
LENGTHS = np.array([5, 2])


def layers_and_mask(seed=0):
    rng = np.random.default_rng(seed)
    layers = rng.normal(size=(K, B, T, F)).astype(np.float32) * np.arange(1, K + 1)[:, None, None,
                                                                                    None]
    mask = (np.arange(T)[None] < LENGTHS[:, None]).astype(np.float32)
    return layers, mask


def apply(mix, params, layers, mask=None):
    return np.asarray(mix.apply({"params": params}, jnp.asarray(layers), mask))


@pytest.mark.unit
def test_matches_formula():
    layers, _ = layers_and_mask()
    mix = ScalarMix(K)
    params = {"scalars": jnp.array([0.5, -1.0, 2.0]), "gamma": jnp.array(1.7)}
    w = np.exp([0.5, -1.0, 2.0]) / np.exp([0.5, -1.0, 2.0]).sum()
    want = 1.7 * np.einsum("k,kbtf->btf", w, layers)
    np.testing.assert_allclose(apply(mix, params, layers), want, rtol=1e-5, atol=1e-6)
    # a list of layers works the same as a stacked array; defaults are the plain average
    init = mix.init(jax.random.key(0), list(layers))["params"]
    np.testing.assert_allclose(apply(mix, init, list(layers)), layers.mean(0), atol=1e-6)


def reference_norm(x, mask, over):
    out = np.empty_like(x)
    groups = [[b] for b in range(B)] if over == "example" else [list(range(B))]
    for rows in groups:
        values = x[rows][mask[rows] > 0]  # unpadded positions only, all features
        out[rows] = (x[rows] - values.mean()) / np.sqrt(values.var() + 1e-12)
    return out


@pytest.mark.unit
def test_layer_norm_uses_unpadded_positions_only():
    layers, mask = layers_and_mask()
    params = {"scalars": jnp.array([0.3, 0.0, -0.2]), "gamma": jnp.array(1.0)}
    w = np.asarray(jax.nn.softmax(params["scalars"]))
    for over in ("example", "batch"):
        mix = ScalarMix(K, layer_norm=True, norm_over=over)
        got = apply(mix, params, layers, mask)
        want = sum(w[k] * reference_norm(layers[k], mask, over) for k in range(K))
        valid = mask > 0
        np.testing.assert_allclose(got[valid], want[valid], rtol=1e-4, atol=1e-5)
        noisy = layers.copy()
        noisy[:, ~valid] = 1e4  # padding changes: no unpadded output moves
        np.testing.assert_allclose(apply(mix, params, noisy, mask)[valid], got[valid], atol=1e-5)


@pytest.mark.unit
def test_per_example_norm_is_batch_independent():
    layers, mask = layers_and_mask()
    mix = ScalarMix(K, layer_norm=True)
    params = mix.init(jax.random.key(0), jnp.asarray(layers), mask)["params"]
    both = apply(mix, params, layers, mask)
    alone = apply(mix, params, layers[:, 1:, :2], mask[1:, :2])
    np.testing.assert_allclose(both[1, :2], alone[0], atol=1e-5)


def fit_weights(l2_coef, steps=300):
    """Fit a mix to a target that is layer 0, with the paper's regulariser on the scalars."""
    layers, _ = layers_and_mask(1)
    mix = ScalarMix(K, l2_coef=l2_coef)
    params = mix.init(jax.random.key(0), jnp.asarray(layers))["params"]
    target = jnp.asarray(layers[0])

    def loss(p):
        out, aux = mix.apply({"params": p}, jnp.asarray(layers), mutable=["losses"])
        return jnp.mean((out - target) ** 2) + sum(jax.tree.leaves(aux["losses"]))

    tx = optax.adam(0.05)

    def step(carry, _):
        params, state = carry
        updates, state = tx.update(jax.grad(loss)(params), state)
        return (optax.apply_updates(params, updates), state), None

    (params, _), _ = jax.jit(lambda c: jax.lax.scan(step, c, None, length=steps))(
        (params, tx.init(params)))
    return mix_weights(params)["weights"]


@pytest.mark.unit
def test_l2_penalty_pulls_towards_the_average():
    np.testing.assert_allclose(scalar_mix_penalty(jnp.array([1.0, 2.0]), 0.5), 2.5)
    strong, weak = fit_weights(1.0), fit_weights(0.001)
    uniform = np.full(K, 1 / K)
    assert np.abs(strong - uniform).max() < np.abs(weak - uniform).max()
    assert weak[0] > 0.8  # free to select the useful layer
    print("lambda=1 weights", strong.round(3), "lambda=0.001 weights", weak.round(3))


def test_mixes_bert_hidden_states_and_reports_weights():
    from bertjax.models.bert import BertModel, bert_config

    cfg = bert_config("tiny", vocab_size=64, max_position_embeddings=16)
    ids = jnp.ones((2, 6), jnp.int32)
    bert = BertModel(cfg)
    variables = jax.jit(bert.init)(jax.random.key(0), ids)
    hidden = jax.jit(bert.apply)(variables, ids)["hidden_states"]
    layers, E = cfg.transformer.num_layers, cfg.transformer.hidden_size
    assert len(hidden) == layers + 1
    mix = ScalarMix(layers + 1, layer_norm=True)
    params = mix.init(jax.random.key(1), hidden, jnp.ones((2, 6)))["params"]
    assert mix.apply({"params": params}, hidden, jnp.ones((2, 6))).shape == (2, 6, E)
    report = mix_weights({"scalars": jnp.array([0.0, 1.0, 2.0]), "gamma": jnp.array(2.0)})
    np.testing.assert_allclose(report["weights"].sum(), 1.0)
    assert report["gamma"] == 2.0 and report["weights"].argmax() == 2


def test_mixes_gpt_hidden_states():
    from bertjax.models.gpt import GptLM, gpt_config

    cfg = gpt_config("gpt2_tiny", vocab_size=64, max_position_embeddings=16)
    ids = jnp.ones((2, 6), jnp.int32)
    gpt = GptLM(cfg)
    variables = jax.jit(gpt.init)(jax.random.key(0), ids)
    _, hidden = jax.jit(lambda v, i: gpt.apply(v, i, method=GptLM.hidden))(variables, ids)
    mix = ScalarMix(len(hidden))
    params = mix.init(jax.random.key(1), hidden)["params"]
    assert mix.apply({"params": params}, hidden).shape == (2, 6, cfg.transformer.hidden_size)
