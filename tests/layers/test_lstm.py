"""ProjectedLstm against torch.nn.LSTM(proj_size=...) on a padded batch, both directions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.layers.lstm import ProjectedLstm, reverse_padded

torch = pytest.importorskip("torch")

B, T, IN, H, P = 4, 7, 5, 6, 3
LENGTHS = [7, 3, 5, 1]


def torch_to_params(lstm) -> dict:
    """torch's weight_ih [4H, I] (gates i, f, g, o) etc. -> ProjectedLstm's direction-stacked
    parameters; torch's two biases sum to ours."""

    def direction(suffix):
        w = lambda name: getattr(lstm, f"{name}_l0{suffix}").detach().numpy()
        gates = lambda m: m.reshape(4, H, -1).transpose(2, 0, 1)  # [4H, X] -> [X, 4, H]
        return {
            "input_kernel": gates(w("weight_ih")),
            "recurrent_kernel": gates(w("weight_hh")),
            "bias": (w("bias_ih") + w("bias_hh")).reshape(4, H),
            "projection": w("weight_hr").T,
        }

    fwd, bwd = direction(""), direction("_reverse")
    return {k: jnp.asarray(np.stack([fwd[k], bwd[k]])) for k in fwd}


def padded_batch(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B, T, IN)).astype(np.float32)
    for b, n in enumerate(LENGTHS):
        x[b, n:] = 100.0  # loud padding: any leak shows
    return x


def torch_reference(lstm, x):
    packed = torch.nn.utils.rnn.pack_padded_sequence(
        torch.from_numpy(x), torch.tensor(LENGTHS), batch_first=True, enforce_sorted=False
    )
    out, _ = lstm(packed)
    out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=T)
    out = out.detach().numpy()
    return out[..., :P], out[..., P:]  # forward, backward


def run_ours(params, x, lengths, clip=None):
    layer = ProjectedLstm(H, P, num_directions=2, cell_clip=clip, proj_clip=clip)
    x2 = jnp.stack([x, reverse_padded(x, lengths)])
    y, _ = layer.apply({"params": params}, x2)
    return np.asarray(y[0]), np.asarray(reverse_padded(y[1], lengths))


def test_reverse_padded_reverses_only_tokens():
    x = jnp.arange(2 * 5).reshape(2, 5)
    np.testing.assert_array_equal(
        reverse_padded(x, jnp.array([3, 5])), [[2, 1, 0, 3, 4], [9, 8, 7, 6, 5]]
    )


def test_matches_torch_lstm_with_projection_on_padded_batch():
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(IN, H, batch_first=True, bidirectional=True, proj_size=P)
    x = padded_batch()
    want_fwd, want_bwd = torch_reference(lstm, x)
    got_fwd, got_bwd = run_ours(torch_to_params(lstm), jnp.asarray(x), jnp.array(LENGTHS))
    for b, n in enumerate(LENGTHS):
        np.testing.assert_allclose(got_fwd[b, :n], want_fwd[b, :n], atol=1e-5, rtol=0)
        np.testing.assert_allclose(got_bwd[b, :n], want_bwd[b, :n], atol=1e-5, rtol=0)
    diff_fwd = max(np.abs(got_fwd[b, :n] - want_fwd[b, :n]).max() for b, n in enumerate(LENGTHS))
    diff_bwd = max(np.abs(got_bwd[b, :n] - want_bwd[b, :n]).max() for b, n in enumerate(LENGTHS))
    print(f"max |ours - torch| forward {diff_fwd:.2e} backward {diff_bwd:.2e}")


def test_padding_invariance_alone_vs_in_batch():
    layer = ProjectedLstm(H, P, num_directions=2, cell_clip=3.0, proj_clip=3.0)
    x = jnp.asarray(padded_batch(1))
    params = layer.init(jax.random.key(0), jnp.stack([x, x]))["params"]
    lengths = jnp.array(LENGTHS)
    fwd, bwd = run_ours(params, x, lengths, clip=3.0)
    for b in (1, 2):  # rows padded by 4 and 2 steps
        n = LENGTHS[b]
        alone = x[b:b + 1, :n]
        f1, b1 = run_ours(params, alone, jnp.array([n]), clip=3.0)
        np.testing.assert_allclose(fwd[b, :n], f1[0], atol=1e-6)
        np.testing.assert_allclose(bwd[b, :n], b1[0], atol=1e-6)


def test_clipping_bounds_cells_and_projections():
    layer = ProjectedLstm(H, P, num_directions=1, cell_clip=0.5, proj_clip=0.1)
    x = jnp.asarray(padded_batch(2))[None] * 10
    params = layer.init(jax.random.key(1), x)["params"]
    y, (c, h) = layer.apply({"params": params}, x)
    assert float(jnp.abs(y).max()) <= 0.1 + 1e-7 and float(jnp.abs(c).max()) <= 0.5 + 1e-7


def test_forget_bias_initialised_like_tensorflow():
    layer = ProjectedLstm(H, P, num_directions=2)
    params = layer.init(jax.random.key(0), jnp.zeros((2, 1, 3, IN)))["params"]
    np.testing.assert_array_equal(params["bias"].value[:, 1], 1.0)
    np.testing.assert_array_equal(params["bias"].value[:, [0, 2, 3]], 0.0)
