"""Multi-head dot-product attention with logical partitioning (bidirectional or causal).

The reference, exact on every platform ("xla", the CPU default):

    q, k, v  = x W_q + b_q, x W_k + b_k, x W_v + b_v          per head: [B, L, H, D]
    p        = softmax(q k^T / sqrt(D), masked)               [B, H, Q, T], softmax in float32
    out      = dropout(p) v W_out + b_out                      [B, Q, E]

with the probabilities materialised. Its attention dropout draws from the run's dropout key, so
a resumed run replays it exactly. Masks are symbolic (`AttentionMask`: key padding, packed
sequences and a causal flag); this path builds them as a boolean [B, 1, Q, T] array.

Each call sows its probabilities [B, H, Q, T] as "intermediates/attention_weights" when the
caller asks for them (`apply(..., mutable=["intermediates"])`), computing them this way
whatever the implementation; otherwise nothing is stored.

`queries` computes the outputs of some positions only (their queries over all keys): the
first n, what a last layer needs when the model reads only [CLS], or each row's own positions
[B, Q], a packed row's [CLS]s (their mask is their sequence's, `AttentionMask.at_queries`).

Elsewhere: the fused kernels (cuDNN, splash) and which one a call runs
(`TransformerConfig.attention_impl`) in layers/fused_attention.py; decoding from a key/value
cache (`decode=True`) in layers/kv_cache.py.
"""


import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from bertjax.layers.dropout import Dropout
from bertjax.layers.fused_attention import Layer, call_impl, kernel_attention
from bertjax.layers.kv_cache import decode_attention
from bertjax.layers.masks import AttentionMask, causal_mask, padding_mask

Array = jax.Array
__all__ = ["AttentionMask", "MultiHeadAttention", "causal_mask", "padding_mask"]

Queries = int | Array | None  # which positions' outputs a layer computes (keep_queries)


class MultiHeadAttention(nn.Module):
    """Self-attention over [B, L, E] with per-head projections of shape (embed, heads, kv)."""

    num_heads: int
    head_dim: int
    dropout_rate: float = 0.0
    implementation: str = "xla"  # one of fused_attention.ATTENTION_IMPLS
    fused_qkv: bool = False  # Q, K, V from one product over the concatenated kernels
    use_bias: bool = True  # False: projections without biases (none in the parameters)
    kernel_init_std: float = 0.02
    out_init_std: float = 0.02
    dtype: DTypeLike = jnp.float32
    param_dtype: DTypeLike = jnp.float32

    def _xla(self, q_BxQxHxD: Array, k_BxLxHxD: Array, v_BxLxHxD: Array,
             mask: AttentionMask | None, deterministic: bool) -> Array:
        """The reference: attention with its probabilities materialised (sown for analysis,
        dropped out)."""
        Q, L, D = q_BxQxHxD.shape[1], k_BxLxHxD.shape[1], self.head_dim
        q_BxQxHxD = q_BxQxHxD / jnp.sqrt(D).astype(self.dtype)
        logits_BxHxQxL = jnp.einsum("bqhd,bkhd->bhqk", q_BxQxHxD, k_BxLxHxD)
        logits_BxHxQxL = logits_BxHxQxL.astype(jnp.float32)  # softmax in float32
        dense = None if mask is None else mask.dense(Q, L)
        if dense is not None:
            logits_BxHxQxL = jnp.where(dense, logits_BxHxQxL, jnp.finfo(jnp.float32).min)
        probs_BxHxQxL = jax.nn.softmax(logits_BxHxQxL, axis=-1).astype(self.dtype)
        # For analysis (bertjax.analysis.attention): kept only when the caller makes
        # "intermediates" mutable, otherwise a no-op. Before dropout: the model's attention.
        self.sow("intermediates", "attention_weights", probs_BxHxQxL)
        probs_BxHxQxL = Dropout(self.dropout_rate)(probs_BxHxQxL, deterministic=deterministic)
        return jnp.einsum("bhqk,bkhd->bqhd", probs_BxHxQxL, v_BxLxHxD)

    def _param(self, name: str, shape: tuple, axes: tuple, std: float | None) -> Array:
        if std is None and not self.use_bias:  # a bias of a bias-free layer: a constant 0
            return jnp.zeros(shape, self.param_dtype)
        init = nn.initializers.zeros if std is None else nn.initializers.normal(std)
        return self.param(name, nn.with_logical_partitioning(init, axes), shape, self.param_dtype)

    @nn.compact
    def __call__(
        self, x_BxLxE: Array, mask: AttentionMask | None, deterministic: bool,
        decode: bool = False, queries: Queries = None, layer: Layer = 0,
    ) -> Array:
        """Attention outputs of every position, or of `queries` only (see `keep_queries`).
        `layer`: this layer's index in its stack (int), or in a scanned stack (index, number
        of layers) with a traced index: it seeds cuDNN's attention dropout."""
        E, H, D = x_BxLxE.shape[-1], self.num_heads, self.head_dim
        x_BxLxE = x_BxLxE.astype(self.dtype)
        kernels = {  # created in this order: it fixes each parameter's init key
            name: (
                self._param(f"{name}_kernel", (E, H, D), ("embed", "heads", "kv"),
                            self.kernel_init_std).astype(self.dtype),
                self._param(f"{name}_bias", (H, D), ("heads", "kv"), None).astype(self.dtype),
            )
            for name in ("query", "key", "value")
        }
        w_HxDxE = self._param("out_kernel", (H, D, E), ("heads", "kv", "embed"), self.out_init_std)
        b_E = self._param("out_bias", (E,), ("embed",), None)
        w_HxDxE, b_E = w_HxDxE.astype(self.dtype), b_E.astype(self.dtype)
        if decode:
            out_BxLxHD = decode_attention(self, x_BxLxE, mask, deterministic, kernels,
                                          self.dropout_rate)
            return out_BxLxHD @ w_HxDxE.reshape(H * D, E) + b_E

        def project(name: str, x_BxLxE: Array) -> Array:
            w_ExHxD, b_HxD = kernels[name]
            return jnp.einsum("ble,ehd->blhd", x_BxLxE, w_ExHxD) + b_HxD

        if self.fused_qkv and queries is None:
            q_BxQxHxD, k_BxLxHxD, v_BxLxHxD = _fused_qkv(x_BxLxE, kernels)
        else:
            q_BxQxHxD = project("query", keep_queries(x_BxLxE, queries))
            k_BxLxHxD = project("key", x_BxLxE)
            v_BxLxHxD = project("value", x_BxLxE)
        if queries is not None and not isinstance(queries, int) and mask is not None:
            mask = mask.at_queries(queries)
        impl = call_impl(self.implementation, self.dropout_rate, deterministic, self.dtype, D,
                         q_BxQxHxD.shape[1], k_BxLxHxD.shape[1])
        if impl == "xla" or self.is_mutable_collection("intermediates"):
            out_BxQxHxD = self._xla(q_BxQxHxD, k_BxLxHxD, v_BxLxHxD, mask, deterministic)
        else:
            out_BxQxHxD = kernel_attention(impl, q_BxQxHxD, k_BxLxHxD, v_BxLxHxD, mask,
                                           self.dropout_rate, deterministic, self.scope.path,
                                           layer)
        return jnp.einsum("blhd,hde->ble", out_BxQxHxD, w_HxDxE) + b_E


def keep_queries(x_BxLxE: Array, queries: Queries) -> Array:
    """The rows of `x_BxLxE` a layer computes outputs for: every position (None), the first n
    (an int n: [CLS]), or each row's own positions (int [B, Q]: a packed row's [CLS]s)."""
    if queries is None:
        return x_BxLxE
    if isinstance(queries, int):
        return x_BxLxE[:, :queries]
    return jnp.take_along_axis(x_BxLxE, queries[..., None], axis=1)


def _fused_qkv(x_BxLxE: Array, kernels: dict[str, tuple[Array, Array]]
               ) -> tuple[Array, Array, Array]:
    """Q, K and V [B, L, H, D] from one matrix product over the kernels stacked as
    [E, 3, H, D]: one read of x and one kernel launch instead of three."""
    names = ("query", "key", "value")
    w_Ex3xHxD = jnp.stack([kernels[n][0] for n in names], axis=1)
    b_3xHxD = jnp.stack([kernels[n][1] for n in names], axis=0)
    qkv_BxLx3xHxD = jnp.einsum("ble,ethd->blthd", x_BxLxE, w_Ex3xHxD) + b_3xHxD
    return qkv_BxLx3xHxD[:, :, 0], qkv_BxLx3xHxD[:, :, 1], qkv_BxLx3xHxD[:, :, 2]
