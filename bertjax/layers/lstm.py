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
"""

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array
Carry = tuple[Array, Array]  # (c [D, B, H], h [D, B, P]), float32


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


def _glorot_uniform(fan_in: int, fan_out: int) -> Any:
    limit = math.sqrt(6.0 / (fan_in + fan_out))

    def init(key: Array, shape: tuple, dtype: Any = jnp.float32) -> Array:
        return jax.random.uniform(key, shape, dtype, -limit, limit)

    return init


class ProjectedLstm(nn.Module):
    """D independent LSTMs with projection over [D, B, T, I] inputs -> [D, B, T, P] outputs."""

    cell_size: int
    proj_size: int | None = None  # None: no projection, outputs are the H-wide cell outputs
    num_directions: int = 2
    cell_clip: float | None = None
    proj_clip: float | None = None
    forget_bias: float = 1.0
    unroll: int = 1
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @property
    def output_size(self) -> int:
        return self.proj_size or self.cell_size

    def zero_carry(self, batch_size: int) -> Carry:
        D, H, P = self.num_directions, self.cell_size, self.output_size
        return jnp.zeros((D, batch_size, H)), jnp.zeros((D, batch_size, P))

    def _params(self, input_size: int) -> tuple[Array, Array, Array, Array | None]:
        D, H, P = self.num_directions, self.cell_size, self.output_size
        gate_init = _glorot_uniform(input_size + P, 4 * H)  # TF's init of the stacked kernel

        def bias_init(key: Array, shape: tuple, dtype: Any = jnp.float32) -> Array:
            return jnp.zeros(shape, dtype).at[:, 1].set(self.forget_bias)

        def param(name: str, init: Any, shape: tuple, axes: tuple) -> Array:
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
        dtype = self.dtype
        x_DxBxTxI = x_DxBxTxI.astype(dtype)
        gx_TxDxBx4xH = jnp.einsum("dbti,digh->tdbgh", x_DxBxTxI, w_x.astype(dtype))
        gx_TxDxBx4xH = gx_TxDxBx4xH.astype(jnp.float32) + b.astype(jnp.float32)[None, :, None]
        w_h, w_p = w_h.astype(dtype), None if w_p is None else w_p.astype(dtype)
        cell_clip, proj_clip = self.cell_clip, self.proj_clip

        def step(carry: Carry, gx_DxBx4xH: Array) -> tuple[Carry, Array]:
            c_DxBxH, h_DxBxP = carry
            g_DxBx4xH = gx_DxBx4xH + jnp.einsum(
                "dbp,dpgh->dbgh", h_DxBxP.astype(dtype), w_h, preferred_element_type=jnp.float32
            )
            i, f, g, o = (g_DxBx4xH[:, :, k] for k in range(4))
            c_DxBxH = jax.nn.sigmoid(f) * c_DxBxH + jax.nn.sigmoid(i) * jnp.tanh(g)
            if cell_clip:
                c_DxBxH = jnp.clip(c_DxBxH, -cell_clip, cell_clip)
            m_DxBxH = jax.nn.sigmoid(o) * jnp.tanh(c_DxBxH)
            if w_p is None:
                h_DxBxP = m_DxBxH
            else:
                h_DxBxP = jnp.einsum(
                    "dbh,dhp->dbp", m_DxBxH.astype(dtype), w_p, preferred_element_type=jnp.float32
                )
            if proj_clip:
                h_DxBxP = jnp.clip(h_DxBxP, -proj_clip, proj_clip)
            return (c_DxBxH, h_DxBxP), h_DxBxP

        carry = self.zero_carry(B) if carry is None else carry
        carry = jax.tree.map(lambda a: a.astype(jnp.float32), carry)
        carry, y_TxDxBxP = jax.lax.scan(step, carry, gx_TxDxBx4xH, unroll=self.unroll)
        return jnp.transpose(y_TxDxBxP, (1, 2, 0, 3)).astype(dtype), carry
