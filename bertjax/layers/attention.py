"""Multi-head dot-product attention with logical partitioning (bidirectional or causal).

With `decode=True` the module keeps a key/value cache in the "cache" collection for
autoregressive decoding: the first (initialising) call sizes the cache from its input
[B, T]; later calls write their L new keys/values at the cache index and attend causally over
the T cached positions, also under the caller's [B, 1, 1, T] key mask (padding). Parameters
and the default (decode=False) path are unchanged, so BERT's numerics are too.

Each call sows its attention probabilities [B, H, L, T] as "intermediates/attention_weights"
when the caller asks for them (`apply(..., mutable=["intermediates"])`); otherwise nothing is
stored and outputs and parameters are the same.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

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
        self, k_BxLxHxD: Array, v_BxLxHxD: Array, mask: Array | None
    ) -> tuple[Array, Array, Array]:
        """Append k/v at the cache index: the whole cache [B, T, H, D] and the causal mask."""
        initialised = self.has_variable("cache", "cached_key")
        shape, dtype = k_BxLxHxD.shape, k_BxLxHxD.dtype
        cached_k = self.variable("cache", "cached_key", jnp.zeros, shape, dtype)
        cached_v = self.variable("cache", "cached_value", jnp.zeros, shape, dtype)
        index = self.variable("cache", "cache_index", lambda: jnp.zeros((), jnp.int32))
        L, T = shape[1], cached_k.value.shape[1]
        query_pos_L = (index.value if initialised else 0) + jnp.arange(L)
        causal_1x1xLxT = (jnp.arange(T)[None, :] <= query_pos_L[:, None])[None, None]
        mask = causal_1x1xLxT if mask is None else causal_1x1xLxT & mask
        if not initialised:  # the sizing call: attend over its own keys
            return k_BxLxHxD, v_BxLxHxD, mask
        start = (0, index.value, 0, 0)
        cached_k.value = jax.lax.dynamic_update_slice(cached_k.value, k_BxLxHxD, start)
        cached_v.value = jax.lax.dynamic_update_slice(cached_v.value, v_BxLxHxD, start)
        index.value = index.value + L
        return cached_k.value, cached_v.value, mask

    @nn.compact
    def __call__(
        self, x_BxLxE: Array, mask: Array | None, deterministic: bool, decode: bool = False
    ) -> Array:
        E, H, D = x_BxLxE.shape[-1], self.num_heads, self.head_dim
        x_BxLxE = x_BxLxE.astype(self.dtype)

        def project(name: str) -> Array:
            w_ExHxD = self._param(
                f"{name}_kernel", (E, H, D), ("embed", "heads", "kv"), self.kernel_init_std
            )
            b_HxD = self._param(f"{name}_bias", (H, D), ("heads", "kv"), None)
            return jnp.einsum("ble,ehd->blhd", x_BxLxE, w_ExHxD.astype(self.dtype)) + b_HxD.astype(
                self.dtype
            )

        q_BxLxHxD = project("query") / jnp.sqrt(D).astype(self.dtype)
        k_BxLxHxD = project("key")
        v_BxLxHxD = project("value")
        if decode:  # keys/values over the whole cache: [B, T, H, D]
            k_BxLxHxD, v_BxLxHxD, mask = self._cached(k_BxLxHxD, v_BxLxHxD, mask)

        logits_BxHxLxL = jnp.einsum("bqhd,bkhd->bhqk", q_BxLxHxD, k_BxLxHxD)
        logits_BxHxLxL = logits_BxHxLxL.astype(jnp.float32)  # softmax in float32
        if mask is not None:
            logits_BxHxLxL = jnp.where(mask, logits_BxHxLxL, jnp.finfo(jnp.float32).min)
        probs_BxHxLxL = jax.nn.softmax(logits_BxHxLxL, axis=-1).astype(self.dtype)
        # For analysis (bertjax.analysis.attention): kept only when the caller makes
        # "intermediates" mutable, otherwise a no-op. Before dropout: the model's attention.
        self.sow("intermediates", "attention_weights", probs_BxHxLxL)
        probs_BxHxLxL = nn.Dropout(self.dropout_rate)(probs_BxHxLxL, deterministic=deterministic)
        out_BxLxHxD = jnp.einsum("bhqk,bkhd->bqhd", probs_BxHxLxL, v_BxLxHxD)

        w_HxDxE = self._param("out_kernel", (H, D, E), ("heads", "kv", "embed"), self.out_init_std)
        b_E = self._param("out_bias", (E,), ("embed",), None)
        return jnp.einsum("blhd,hde->ble", out_BxLxHxD, w_HxDxE.astype(self.dtype)) + b_E.astype(
            self.dtype
        )
