"""ProjectedLstm against torch.nn.LSTM(proj_size=...) on a padded batch, both directions:
outputs and gradients; its hand-written backward pass against autodiff of a plain loop."""

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
    y_fwd, y_bwd = ours_fn(clip)(params, x, lengths)
    return np.asarray(y_fwd), np.asarray(y_bwd)


def ours_fn(clip=None):
    """(params, x [B, T, IN], lengths) -> forward, backward outputs [B, T, P], as ELMo runs it."""
    layer = ProjectedLstm(H, P, num_directions=2, cell_clip=clip, proj_clip=clip)

    def fn(params, x, lengths):
        y, _ = layer.apply({"params": params}, jnp.stack([x, reverse_padded(x, lengths)]))
        return y[0], reverse_padded(y[1], lengths)

    return fn


def token_mask() -> np.ndarray:
    return (np.arange(T)[None, :] < np.array(LENGTHS)[:, None]).astype(np.float32)[..., None]


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


def test_gradients_match_torch_on_padded_batch():
    """d(sum(y * r) over real tokens) for every weight and the input, both directions."""
    torch.manual_seed(1)
    lstm = torch.nn.LSTM(IN, H, batch_first=True, bidirectional=True, proj_size=P)
    x = padded_batch(3)
    r = np.random.default_rng(4).normal(size=(B, T, 2 * P)).astype(np.float32) * token_mask()
    x_t = torch.from_numpy(x).requires_grad_(True)
    packed = torch.nn.utils.rnn.pack_padded_sequence(
        x_t, torch.tensor(LENGTHS), batch_first=True, enforce_sorted=False)
    out, _ = torch.nn.utils.rnn.pad_packed_sequence(lstm(packed)[0], batch_first=True,
                                                    total_length=T)
    (out * torch.from_numpy(r)).sum().backward()
    want = {"x": x_t.grad.numpy()}
    for name in ("weight_ih", "weight_hh", "weight_hr", "bias_ih"):
        want[name] = [getattr(lstm, f"{name}_l0{s}").grad.numpy() for s in ("", "_reverse")]

    def loss(params, x):
        y_fwd, y_bwd = ours_fn()(params, x, jnp.array(LENGTHS))
        return jnp.sum(jnp.concatenate([y_fwd, y_bwd], -1) * r)

    g, gx = jax.grad(loss, argnums=(0, 1))(torch_to_params(lstm), jnp.asarray(x))
    got = {
        "x": np.asarray(gx),
        "weight_ih": [np.asarray(g["input_kernel"][d]).reshape(IN, 4 * H).T for d in (0, 1)],
        "weight_hh": [np.asarray(g["recurrent_kernel"][d]).reshape(P, 4 * H).T for d in (0, 1)],
        "weight_hr": [np.asarray(g["projection"][d]).T for d in (0, 1)],
        "bias_ih": [np.asarray(g["bias"][d]).reshape(4 * H) for d in (0, 1)],
    }
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, atol=2e-5, rtol=1e-5, err_msg=name)


def loop_reference(params, x_DxBxTxI, carry, cell_clip, proj_clip):
    """The LSTM equations as a plain Python loop, differentiated by JAX (no custom VJP)."""
    p = {k: getattr(v, "value", v) for k, v in params.items()}
    c, h = carry
    ys = []
    for t in range(x_DxBxTxI.shape[2]):
        z = (jnp.einsum("dbi,digh->dbgh", x_DxBxTxI[:, :, t], p["input_kernel"])
             + jnp.einsum("dbp,dpgh->dbgh", h, p["recurrent_kernel"]) + p["bias"][:, None])
        i, f, g, o = (z[:, :, k] for k in range(4))
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        c = jnp.clip(c, -cell_clip, cell_clip) if cell_clip else c
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        h = jnp.einsum("dbh,dhp->dbp", h, p["projection"]) if "projection" in p else h
        h = jnp.clip(h, -proj_clip, proj_clip) if proj_clip else h
        ys.append(h)
    return jnp.stack(ys, axis=2), (c, h)


@pytest.mark.parametrize("proj_size", [P, None])
@pytest.mark.parametrize("clip", [None, 0.4])
def test_backward_pass_matches_autodiff_of_a_plain_loop(proj_size, clip):
    """Gradients through outputs and the final carry, from a non-zero carry, clips active."""
    layer = ProjectedLstm(H, proj_size, num_directions=2, cell_clip=clip, proj_clip=clip)
    out = proj_size or H
    keys = jax.random.split(jax.random.key(5), 6)
    x = 3.0 * jax.random.normal(keys[0], (2, B, T, IN))
    carry = (jax.random.normal(keys[1], (2, B, H)), 0.3 * jax.random.normal(keys[2], (2, B, out)))
    r_y = jax.random.normal(keys[3], (2, B, T, out))
    r_c, r_h = jax.random.normal(keys[4], (2, B, H)), jax.random.normal(keys[5], (2, B, out))
    params = layer.init(jax.random.key(6), x)["params"]

    def loss(run):
        def fn(params, x, carry):
            y, (c, h) = run(params, x, carry)
            return jnp.sum(y * r_y) + jnp.sum(c * r_c) + jnp.sum(h * r_h)
        return fn

    ours = loss(lambda p, x, carry: layer.apply({"params": p}, x, carry))
    plain = loss(lambda p, x, carry: loop_reference(p, x, carry, clip, clip))
    if clip:  # the clips bind somewhere, so their gradient masks are exercised
        y, (c, _) = layer.apply({"params": params}, x, carry)
        assert float(jnp.abs(c).max()) == pytest.approx(clip)
        if proj_size:  # without a projection |h| <= tanh(clip) < clip: that clip never binds
            assert float(jnp.abs(y).max()) == pytest.approx(clip)
    np.testing.assert_allclose(ours(params, x, carry), plain(params, x, carry), atol=1e-5)
    got = jax.grad(ours, argnums=(0, 1, 2))(params, x, carry)
    want = jax.grad(plain, argnums=(0, 1, 2))(params, x, carry)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5)


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
