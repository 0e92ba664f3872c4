"""LSTM with a projection layer (Sak et al. 2014), several independent directions run as one.

    gates = x_t W_x + h_{t-1} W_h + b             gates in torch's order: i, f, g, o
    c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)      then clipped to +-cell_clip
    h_t = (sigmoid(o) * tanh(c_t)) W_p                     then clipped to +-proj_clip

This is torch.nn.LSTM(proj_size=P) (whose two biases sum to `b`) and TF's LSTMCell(num_proj=P)
(gate order i, j, f, o with a constant 1.0 added to f; the converter folds it into `b`).
The forget-gate bias starts at `forget_bias`, so freshly initialised cells behave like TF's.

`ProjectedLstm` runs D directions with separate weights in one `jax.lax.scan` (weights carry a
leading direction axis), so a biLM pays the per-step loop overhead once, not twice. Inputs
for a backward direction are reversed by the caller: `reverse_padded` reverses each row's
unpadded prefix only, so padding comes last in both directions and never reaches a real token.
The x W_x products for all steps are one matmul before the scan; the scan does the rest.

Speed. At ELMo's size (H=4096, P=512, a batch of 16) every step multiplies a few rows by W_h
(32 MB per direction) and W_p (8 MB): the loop is bound by memory traffic, so whatever is not
a per-step necessity belongs outside it. The recurrence (`_recurrence`) has its own VJP: the
backward loop carries only (dc, dh), multiplies by W_h^T and W_p^T once per step and writes
the gate gradients; dW_h and dW_p are then one matmul each over all T*B rows. Autodiff of the
scan instead, per step, re-transposed W_h (a 64 MB copy), wrote a 64 MB dW_h term and added it
to the accumulator in a transposed layout (and the same for W_p), which made the backward
pass about four times the forward. Time is axis 1 of the [D, T, B, ...] arrays inside, so
the matmuls before and after the loops read and write their operands without transposes.
"""

import functools
import math
from collections.abc import Callable
from typing import NamedTuple, TypeVar

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.nn.initializers import Initializer
from jax.typing import DTypeLike

Array = jax.Array
Carry = tuple[Array, Array]  # (c [D, B, H], h [D, B, P]), float32
Xs = TypeVar("Xs")  # a step's inputs: [D, B, ...] arrays (a tuple of them); [D, T, B, ...] stacked
Ys = TypeVar("Ys")  # a step's outputs, likewise


def reverse_padded(x_BxTx: Array, lengths_B: Array) -> Array:
    """Reverse the first lengths[b] steps of each row b; padding stays where it is.

    Its own inverse: applying it to a reversed sequence's outputs realigns them with the input.
    """
    T = x_BxTx.shape[1]
    t_T = jnp.arange(T)
    lengths_Bx1 = lengths_B[:, None]
    index_BxT = jnp.where(t_T < lengths_Bx1, lengths_Bx1 - 1 - t_T, t_T)
    index = index_BxT.reshape(index_BxT.shape + (1,) * (x_BxTx.ndim - 2))
    return jnp.take_along_axis(x_BxTx, index, axis=1)


def _glorot_uniform(fan_in: int, fan_out: int) -> Initializer:
    limit = math.sqrt(6.0 / (fan_in + fan_out))

    def init(key: Array, shape: tuple, dtype: DTypeLike = jnp.float32) -> Array:
        return jax.random.uniform(key, shape, dtype, -limit, limit)

    return init


class _Spec(NamedTuple):
    """The static part of a recurrence: clipping bounds, matmul operand dtype, scan unroll."""

    cell_clip: float | None
    proj_clip: float | None
    dtype: jnp.dtype  # per-step matmul operands; they accumulate, and the state stays, in f32
    unroll: int = 1


class _Saved(NamedTuple):
    """What the forward pass keeps per step for the backward pass, all [D, T, B, ...]."""

    y: Array  # h after its clip, the output                      [D, T, B, P]
    act: Array  # sigmoid i, sigmoid f, tanh g, sigmoid o            [D, T, B, 4, H]
    c_raw: Array  # c before its clip                                 [D, T, B, H]
    h_raw: Array | None  # h before its clip; None when it is y       [D, T, B, P]


def _clip(x: Array, bound: float | None) -> Array:
    return x if not bound else jnp.clip(x, -bound, bound)


def _inside(x: Array, bound: float | None) -> Array | bool:
    """Where the clip passes gradients (lax.clamp's rule: strictly inside the bounds)."""
    return True if not bound else jnp.abs(x) < bound


def _matmul(spec: _Spec, equation: str, a: Array, w: Array) -> Array:
    return jnp.einsum(equation, a.astype(spec.dtype), w, preferred_element_type=jnp.float32)


def _time_loop(step: Callable[[Carry, Xs], tuple[Carry, Ys]], carry: Carry, xs: Xs,
               num_steps: int, reverse: bool, unroll: int) -> tuple[Carry, Ys]:
    """`lax.scan` over axis 1 of [D, T, ...] arrays: step(carry, xs_t) -> (carry, ys_t).

    The ys are stacked on axis 1 too. Keeping time second (not first, as scan would) lets the
    matmuls before and after the loop read and write [D, T*B, ...] in place, with no
    transposes of the [D, T, B, 4H] gate tensors.
    """
    at = lambda a, t: jax.lax.dynamic_index_in_dim(a, t, 1, keepdims=False)  # noqa: E731
    xs_0 = jax.tree.map(lambda a: at(a, 0), xs)
    _, ys_0 = jax.eval_shape(step, carry, xs_0)
    ys = jax.tree.map(
        lambda s: jnp.zeros((s.shape[0], num_steps, *s.shape[1:]), s.dtype), ys_0)

    def body(state: tuple, t: Array) -> tuple[tuple, None]:
        carry, ys = state
        carry, ys_t = step(carry, jax.tree.map(lambda a: at(a, t), xs))
        ys = jax.tree.map(lambda a, y: jax.lax.dynamic_update_index_in_dim(a, y, t, 1), ys, ys_t)
        return (carry, ys), None

    (carry, ys), _ = jax.lax.scan(body, (carry, ys), jnp.arange(num_steps), reverse=reverse,
                                  unroll=unroll)
    return carry, ys


def _step(spec: _Spec, w_h: Array, w_p: Array | None, carry: Carry,
          gx_DxBx4H: Array) -> tuple[Carry, _Saved]:
    """One time step: the new carry, and the step's slice of `_Saved`."""
    c_DxBxH, h_DxBxP = carry
    D, B, H = c_DxBxH.shape
    z_DxBx4xH = (gx_DxBx4H + _matmul(spec, "dbp,dpk->dbk", h_DxBxP, w_h)).reshape(D, B, 4, H)
    act_DxBx4xH = jnp.stack([
        jax.nn.sigmoid(z_DxBx4xH[:, :, 0]), jax.nn.sigmoid(z_DxBx4xH[:, :, 1]),
        jnp.tanh(z_DxBx4xH[:, :, 2]), jax.nn.sigmoid(z_DxBx4xH[:, :, 3]),
    ], axis=2)
    i, f, g, o = (act_DxBx4xH[:, :, k] for k in range(4))
    c_raw_DxBxH = f * c_DxBxH + i * g
    c_DxBxH = _clip(c_raw_DxBxH, spec.cell_clip)
    m_DxBxH = o * jnp.tanh(c_DxBxH)
    h_raw_DxBxP = m_DxBxH if w_p is None else _matmul(spec, "dbh,dhp->dbp", m_DxBxH, w_p)
    h_DxBxP = _clip(h_raw_DxBxP, spec.proj_clip)
    h_raw_DxBxP = h_raw_DxBxP if spec.proj_clip else None
    return (c_DxBxH, h_DxBxP), _Saved(h_DxBxP, act_DxBx4xH, c_raw_DxBxH, h_raw_DxBxP)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _recurrence(spec: _Spec, gx_DxTxBx4H: Array, w_h: Array, w_p: Array | None,
                c0_DxBxH: Array, h0_DxBxP: Array) -> tuple[Array, Carry]:
    """Outputs y [D, T, B, P] and the final carry, given gx = x W_x + b and W_h [D, P, 4H]."""

    def step(carry: Carry, gx_DxBx4H: Array) -> tuple[Carry, Array]:
        carry, saved = _step(spec, w_h, w_p, carry, gx_DxBx4H)
        return carry, saved.y

    carry, y_DxTxBxP = _time_loop(step, (c0_DxBxH, h0_DxBxP), gx_DxTxBx4H,
                                  gx_DxTxBx4H.shape[1], False, spec.unroll)
    return y_DxTxBxP, carry


def _recurrence_fwd(spec: _Spec, gx_DxTxBx4H: Array, w_h: Array, w_p: Array | None,
                    c0_DxBxH: Array, h0_DxBxP: Array) -> tuple[tuple[Array, Carry], tuple]:
    """The forward loop, keeping `_Saved` for the backward pass."""
    step = functools.partial(_step, spec, w_h, w_p)
    carry, saved = _time_loop(step, (c0_DxBxH, h0_DxBxP), gx_DxTxBx4H, gx_DxTxBx4H.shape[1],
                              False, spec.unroll)
    return (saved.y, carry), (w_h, w_p, c0_DxBxH, h0_DxBxP, saved)


def _recurrence_bwd(spec: _Spec, res: tuple, cotangents: tuple) -> tuple:
    """Backward loop over (dc, dh) alone; the weight gradients are one matmul each afterwards.

    Per step this applies W_p^T and W_h^T once (dm = dh W_p^T, dh_prev = dz W_h^T) and writes
    the gate gradients dz [D, B, 4H]; dW_h = sum_t h_{t-1}^T dz_t and dW_p = sum_t m_t^T dh_t
    are then matmuls over all T*B rows, which run near peak instead of once per step.
    """
    w_h, w_p, c0_DxBxH, h0_DxBxP, saved = res
    dy_DxTxBxP, (dc_DxBxH, dh_DxBxP) = cotangents
    D, T, B, _, H = saved.act.shape
    c_DxTxBxH = _clip(saved.c_raw, spec.cell_clip)
    c_prev_DxTxBxH = jnp.concatenate([c0_DxBxH[:, None], c_DxTxBxH[:, :-1]], axis=1)
    tanh_c_DxTxBxH = jnp.tanh(c_DxTxBxH)
    h_raw_DxTxBxP = saved.y if saved.h_raw is None else saved.h_raw
    # Transposed copies made once: given W_h or W_p, XLA re-transposes them at every step.
    w_hT_Dx4HxP = jnp.swapaxes(w_h, 1, 2)
    w_pT_DxPxH = None if w_p is None else jnp.swapaxes(w_p, 1, 2)

    def step(carry: Carry, xs: tuple) -> tuple[Carry, tuple[Array, Array]]:
        dc_DxBxH, dh_DxBxP = carry
        dy_DxBxP, act_DxBx4xH, c_raw_DxBxH, c_prev_DxBxH, tanh_c_DxBxH, h_raw_DxBxP = xs
        i, f, g, o = (act_DxBx4xH[:, :, k] for k in range(4))
        dh_DxBxP = jnp.where(_inside(h_raw_DxBxP, spec.proj_clip), dy_DxBxP + dh_DxBxP, 0.0)
        dm_DxBxH = dh_DxBxP if w_p is None else _matmul(spec, "dbp,dph->dbh", dh_DxBxP, w_pT_DxPxH)
        dc_DxBxH = dc_DxBxH + dm_DxBxH * o * (1.0 - tanh_c_DxBxH**2)
        dc_DxBxH = jnp.where(_inside(c_raw_DxBxH, spec.cell_clip), dc_DxBxH, 0.0)
        dz_DxBx4H = jnp.concatenate([
            dc_DxBxH * g * i * (1.0 - i), dc_DxBxH * c_prev_DxBxH * f * (1.0 - f),
            dc_DxBxH * i * (1.0 - g**2), dm_DxBxH * tanh_c_DxBxH * o * (1.0 - o),
        ], axis=-1)
        dh_prev_DxBxP = _matmul(spec, "dbk,dkp->dbp", dz_DxBx4H, w_hT_Dx4HxP)
        return (dc_DxBxH * f, dh_prev_DxBxP), (dz_DxBx4H, dh_DxBxP)

    xs = (dy_DxTxBxP, saved.act, saved.c_raw, c_prev_DxTxBxH, tanh_c_DxTxBxH, h_raw_DxTxBxP)
    (dc0_DxBxH, dh0_DxBxP), (dz_DxTxBx4H, dh_DxTxBxP) = _time_loop(
        step, (dc_DxBxH, dh_DxBxP), xs, T, True, spec.unroll)
    h_prev_DxTxBxP = jnp.concatenate([h0_DxBxP[:, None], saved.y[:, :-1]], axis=1)
    dw_h = _matmul(spec, "dtbp,dtbk->dpk", h_prev_DxTxBxP, dz_DxTxBx4H).astype(w_h.dtype)
    dw_p = None
    if w_p is not None:
        m_DxTxBxH = saved.act[:, :, :, 3] * tanh_c_DxTxBxH
        dw_p = _matmul(spec, "dtbh,dtbp->dhp", m_DxTxBxH, dh_DxTxBxP).astype(w_p.dtype)
    return dz_DxTxBx4H, dw_h, dw_p, dc0_DxBxH, dh0_DxBxP


_recurrence.defvjp(_recurrence_fwd, _recurrence_bwd)


class ProjectedLstm(nn.Module):
    """D independent LSTMs with projection over [D, B, T, I] inputs -> [D, B, T, P] outputs."""

    cell_size: int
    proj_size: int | None = None  # None: no projection, outputs are the H-wide cell outputs
    num_directions: int = 2
    cell_clip: float | None = None
    proj_clip: float | None = None
    forget_bias: float = 1.0
    unroll: int = 1
    dtype: DTypeLike = jnp.float32
    param_dtype: DTypeLike = jnp.float32

    @property
    def output_size(self) -> int:
        return self.proj_size or self.cell_size

    def zero_carry(self, batch_size: int) -> Carry:
        D, H, P = self.num_directions, self.cell_size, self.output_size
        return jnp.zeros((D, batch_size, H)), jnp.zeros((D, batch_size, P))

    def _params(self, input_size: int) -> tuple[Array, Array, Array, Array | None]:
        D, H, P = self.num_directions, self.cell_size, self.output_size
        gate_init = _glorot_uniform(input_size + P, 4 * H)  # TF's init of the stacked kernel

        def bias_init(key: Array, shape: tuple, dtype: DTypeLike = jnp.float32) -> Array:
            return jnp.zeros(shape, dtype).at[:, 1].set(self.forget_bias)

        def param(name: str, init: Initializer, shape: tuple, axes: tuple) -> Array:
            boxed = nn.with_logical_partitioning(init, axes)
            return self.param(name, boxed, shape, self.param_dtype)

        gate_axes = ("direction", "embed", "gates", "mlp")
        w_x = param("input_kernel", gate_init, (D, input_size, 4, H), gate_axes)
        w_h = param("recurrent_kernel", gate_init, (D, P, 4, H), gate_axes)
        b = param("bias", bias_init, (D, 4, H), ("direction", "gates", "mlp"))
        w_p = None
        if self.proj_size:
            w_p = param("projection", _glorot_uniform(H, P), (D, H, P),
                        ("direction", "mlp", "embed"))
        return w_x, w_h, b, w_p

    @nn.compact
    def __call__(self, x_DxBxTxI: Array, carry: Carry | None = None) -> tuple[Array, Carry]:
        D, B, T, n_in = x_DxBxTxI.shape
        if D != self.num_directions:
            raise ValueError(f"inputs have {D} directions, the LSTM {self.num_directions}")
        w_x, w_h, b, w_p = self._params(n_in)
        H, dtype = self.cell_size, self.dtype
        x_DxTxBxI = jnp.swapaxes(x_DxBxTxI, 1, 2).astype(dtype)
        w_x_DxIx4H = w_x.reshape(D, n_in, 4 * H).astype(dtype)
        gx_DxTxBx4H = jnp.einsum("dtbi,dik->dtbk", x_DxTxBxI, w_x_DxIx4H,
                                 preferred_element_type=jnp.float32)
        gx_DxTxBx4H = gx_DxTxBx4H + b.reshape(D, 1, 1, 4 * H).astype(jnp.float32)
        w_h_DxPx4H = w_h.reshape(D, -1, 4 * H).astype(dtype)
        w_p = None if w_p is None else w_p.astype(dtype)
        c0_DxBxH, h0_DxBxP = self.zero_carry(B) if carry is None else carry
        spec = _Spec(self.cell_clip, self.proj_clip, jnp.dtype(dtype), self.unroll)
        y_DxTxBxP, carry = _recurrence(spec, gx_DxTxBx4H, w_h_DxPx4H, w_p,
                                       c0_DxBxH.astype(jnp.float32), h0_DxBxP.astype(jnp.float32))
        return jnp.swapaxes(y_DxTxBxP, 1, 2).astype(dtype), carry
