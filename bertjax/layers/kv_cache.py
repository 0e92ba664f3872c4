"""Autoregressive decoding: attention of new positions over a key/value cache.

`MultiHeadAttention(...)(x, mask, deterministic, decode=True)` (layers/attention.py) comes
here. The layer keeps its cache in the "cache" collection: the first (initialising) call sizes
the cache from its input [B, T]; later calls write their L new keys/values at the cache index
and attend causally over the T cached positions, also under the caller's key padding.
Decoding attends the XLA way under every implementation: one query against the cache is a
matrix-vector product that a fused kernel does not speed up.

The cache is kept as [B*H, T, D], so both attention products are batched over its leading
axis and read the cache in place, and the projections are plain [B*L, E] x [E, H*D] matrix
products over the stored kernels.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from bertjax.layers.dropout import Dropout
from bertjax.layers.masks import AttentionMask, padding_mask

Array = jax.Array


def _cached(layer: nn.Module, k_NxLxD: Array, v_NxLxD: Array, mask: Array | None
            ) -> tuple[Array, Array, Array]:
    """Write the new keys/values [N = B*H, L, D] at `layer`'s cache index; return the whole
    cache [N, T, D] and the causal mask [.., L, T] (query i sits at position index + i)."""
    initialised = layer.has_variable("cache", "cached_key")
    shape, dtype = k_NxLxD.shape, k_NxLxD.dtype
    cached_k = layer.variable("cache", "cached_key", jnp.zeros, shape, dtype)
    cached_v = layer.variable("cache", "cached_value", jnp.zeros, shape, dtype)
    index = layer.variable("cache", "cache_index", lambda: jnp.zeros((), jnp.int32))
    L, T = shape[1], cached_k.value.shape[1]
    query_pos_L = (index.value if initialised else 0) + jnp.arange(L)
    causal_1x1xLxT = (jnp.arange(T)[None, :] <= query_pos_L[:, None])[None, None]
    mask = causal_1x1xLxT if mask is None else causal_1x1xLxT & mask
    if not initialised:  # the sizing call: attend over its own keys
        return k_NxLxD, v_NxLxD, mask
    start = (0, index.value, 0)  # in place: the loop carries the cache, never a copy
    cached_k.value = jax.lax.dynamic_update_slice(cached_k.value, k_NxLxD, start)
    cached_v.value = jax.lax.dynamic_update_slice(cached_v.value, v_NxLxD, start)
    index.value = index.value + L
    return cached_k.value, cached_v.value, mask


def decode_attention(layer: nn.Module, x_BxLxE: Array, mask: AttentionMask | None,
                     deterministic: bool, kernels: dict[str, tuple[Array, Array]],
                     dropout_rate: float) -> Array:
    """Attention of the L new positions over the cache: [B, L, E] -> [B, L, H*D].

    `layer` is the calling MultiHeadAttention (it holds the "cache" collection and the
    attention dropout); `kernels` its query, key and value (kernel [E, H, D], bias [H, D])
    pairs; `x_BxLxE` is in the compute dtype.

    The heads of all rows are one batch axis N = B*H, in the cache's own shape: with a
    separate B and H, XLA CPU merged them with a reshape between the cache update and
    the attention product and then fused the update into both of its readers, each on
    its own copy of the cache."""
    B, L, E = x_BxLxE.shape
    H, D = kernels["query"][0].shape[1:]
    x_BLxE = x_BxLxE.reshape(B * L, E)

    def project(name: str) -> Array:  # [N, L, D]
        w_ExHxD, b_HxD = kernels[name]
        y_BLxHD = x_BLxE @ w_ExHxD.reshape(E, H * D) + b_HxD.reshape(H * D)
        return y_BLxHD.reshape(B, L, H, D).transpose(0, 2, 1, 3).reshape(B * H, L, D)

    q_NxLxD = project("query") / jnp.sqrt(D).astype(x_BxLxE.dtype)
    padding = None if mask is None or mask.key_mask is None else padding_mask(
        mask.key_mask)
    k_NxTxD, v_NxTxD, mask = _cached(layer, project("key"), project("value"), padding)
    T = k_NxTxD.shape[1]
    logits_NxLxT = jnp.einsum("nld,ntd->nlt", q_NxLxD, k_NxTxD)
    logits_BxHxLxT = logits_NxLxT.astype(jnp.float32).reshape(B, H, L, T)  # float32 softmax
    logits_BxHxLxT = jnp.where(mask, logits_BxHxLxT, jnp.finfo(jnp.float32).min)
    probs_BxHxLxT = jax.nn.softmax(logits_BxHxLxT, axis=-1).astype(x_BxLxE.dtype)
    # A submodule of `layer` (the module being called), named as in its XLA path.
    probs_BxHxLxT = Dropout(dropout_rate)(probs_BxHxLxT, deterministic=deterministic)
    out_NxLxD = jnp.einsum("nlt,ntd->nld", probs_BxHxLxT.reshape(B * H, L, T), v_NxTxD)
    return out_NxLxD.reshape(B, H, L, D).transpose(0, 2, 1, 3).reshape(B, L, H * D)
