"""Multi-head dot-product attention with logical partitioning (bidirectional or causal).

With `decode=True` the module keeps a key/value cache in the "cache" collection for
autoregressive decoding: the first (initialising) call sizes the cache from its input
[B, T]; later calls write their L new keys/values at the cache index and attend causally over
the T cached positions, also under the caller's [B, 1, 1, T] key mask (padding). Parameters
and the default (decode=False) path are unchanged, so BERT's numerics are too.

`num_queries=n` computes the outputs of the first n positions only (their queries over all
keys): what a last layer needs when the model reads only [CLS].

Each call sows its attention probabilities [B, H, L, T] as "intermediates/attention_weights"
when the caller asks for them (`apply(..., mutable=["intermediates"])`); otherwise nothing is
stored and outputs and parameters are the same (training and analysis path only).

The decode path is laid out for XLA CPU, where one step reads every weight once: the cache
is [B*H, T, D], so both attention products are batched over its leading axis and read the
cache in place (a [B, T, H, D] cache was transposed, i.e. copied, twice per layer and step),
and the projections are plain [B*L, E] x [E, H*D] / [B*L, H*D] x [H*D, E]
matrix products over the stored kernels (the (H, D, E) einsum copied the output kernel into
another layout at every step).
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from bertjax.layers.dropout import Dropout

Array = jax.Array


def padding_mask(input_mask_BxL: Array) -> Array:
    """[B, L] 1/0 token mask -> [B, 1, 1, L] boolean mask over keys."""
    return input_mask_BxL[:, None, None, :].astype(bool)


def causal_mask(length: int) -> Array:
    """[1, 1, L, L] boolean lower-triangular mask: query t sees keys <= t."""
    return jnp.tril(jnp.ones((length, length), dtype=bool))[None, None]


class MultiHeadAttention(nn.Module):
    """Self-attention over [B, L, E] with per-head projections of shape (embed, heads, kv)."""

    num_heads: int
    head_dim: int
    dropout_rate: float = 0.0
    kernel_init_std: float = 0.02
    out_init_std: float = 0.02
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    def _param(self, name: str, shape: tuple, axes: tuple, std: float | None) -> Array:
        init = nn.initializers.zeros if std is None else nn.initializers.normal(std)
        return self.param(name, nn.with_logical_partitioning(init, axes), shape, self.param_dtype)

    def _cached(
        self, k_NxLxD: Array, v_NxLxD: Array, mask: Array | None
    ) -> tuple[Array, Array, Array]:
        """Write the new keys/values [N = B*H, L, D] at the cache index; return the whole
        cache [N, T, D] and the causal mask [.., L, T] (query i sits at position index + i)."""
        initialised = self.has_variable("cache", "cached_key")
        shape, dtype = k_NxLxD.shape, k_NxLxD.dtype
        cached_k = self.variable("cache", "cached_key", jnp.zeros, shape, dtype)
        cached_v = self.variable("cache", "cached_value", jnp.zeros, shape, dtype)
        index = self.variable("cache", "cache_index", lambda: jnp.zeros((), jnp.int32))
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

    def _decode(self, x_BxLxE: Array, mask: Array | None, deterministic: bool,
                kernels: dict[str, tuple[Array, Array]]) -> Array:
        """Attention of the L new positions over the cache: [B, L, E] -> [B, L, H*D].

        The heads of all rows are one batch axis N = B*H, in the cache's own shape: with a
        separate B and H, XLA CPU merged them with a reshape between the cache update and
        the attention product and then fused the update into both of its readers, each on
        its own copy of the cache."""
        B, L, E = x_BxLxE.shape
        H, D = self.num_heads, self.head_dim
        x_BLxE = x_BxLxE.reshape(B * L, E)

        def project(name: str) -> Array:  # [N, L, D]
            w_ExHxD, b_HxD = kernels[name]
            y_BLxHD = x_BLxE @ w_ExHxD.reshape(E, H * D) + b_HxD.reshape(H * D)
            return y_BLxHD.reshape(B, L, H, D).transpose(0, 2, 1, 3).reshape(B * H, L, D)

        q_NxLxD = project("query") / jnp.sqrt(D).astype(self.dtype)
        k_NxTxD, v_NxTxD, mask = self._cached(project("key"), project("value"), mask)
        T = k_NxTxD.shape[1]
        logits_NxLxT = jnp.einsum("nld,ntd->nlt", q_NxLxD, k_NxTxD)
        logits_BxHxLxT = logits_NxLxT.astype(jnp.float32).reshape(B, H, L, T)  # float32 softmax
        logits_BxHxLxT = jnp.where(mask, logits_BxHxLxT, jnp.finfo(jnp.float32).min)
        probs_BxHxLxT = jax.nn.softmax(logits_BxHxLxT, axis=-1).astype(self.dtype)
        probs_BxHxLxT = Dropout(self.dropout_rate)(probs_BxHxLxT, deterministic=deterministic)
        out_NxLxD = jnp.einsum("nlt,ntd->nld", probs_BxHxLxT.reshape(B * H, L, T), v_NxTxD)
        return out_NxLxD.reshape(B, H, L, D).transpose(0, 2, 1, 3).reshape(B, L, H * D)

    @nn.compact
    def __call__(
        self, x_BxLxE: Array, mask: Array | None, deterministic: bool, decode: bool = False,
        num_queries: int | None = None,
    ) -> Array:
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
            out_BxLxHD = self._decode(x_BxLxE, mask, deterministic, kernels)
            return out_BxLxHD @ w_HxDxE.reshape(H * D, E) + b_E

        def project(name: str, x_BxLxE: Array) -> Array:
            w_ExHxD, b_HxD = kernels[name]
            return jnp.einsum("ble,ehd->blhd", x_BxLxE, w_ExHxD) + b_HxD

        queries_BxQxE = x_BxLxE if num_queries is None else x_BxLxE[:, :num_queries]
        if num_queries is not None and mask is not None and mask.shape[-2] > 1:
            mask = mask[..., :num_queries, :]  # a per-query (causal) mask
        q_BxQxHxD = project("query", queries_BxQxE) / jnp.sqrt(D).astype(self.dtype)
        k_BxLxHxD = project("key", x_BxLxE)
        v_BxLxHxD = project("value", x_BxLxE)
        logits_BxHxQxL = jnp.einsum("bqhd,bkhd->bhqk", q_BxQxHxD, k_BxLxHxD)
        logits_BxHxQxL = logits_BxHxQxL.astype(jnp.float32)  # softmax in float32
        if mask is not None:
            logits_BxHxQxL = jnp.where(mask, logits_BxHxQxL, jnp.finfo(jnp.float32).min)
        probs_BxHxQxL = jax.nn.softmax(logits_BxHxQxL, axis=-1).astype(self.dtype)
        # For analysis (bertjax.analysis.attention): kept only when the caller makes
        # "intermediates" mutable, otherwise a no-op. Before dropout: the model's attention.
        self.sow("intermediates", "attention_weights", probs_BxHxQxL)
        probs_BxHxQxL = Dropout(self.dropout_rate)(probs_BxHxQxL, deterministic=deterministic)
        out_BxQxHxD = jnp.einsum("bhqk,bkhd->bqhd", probs_BxHxQxL, v_BxLxHxD)
        return jnp.einsum("blhd,hde->ble", out_BxQxHxD, w_HxDxE) + b_E
