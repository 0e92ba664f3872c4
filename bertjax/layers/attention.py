"""Multi-head dot-product attention with logical partitioning (bidirectional or causal)."""

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

    @nn.compact
    def __call__(self, x_BxLxE: Array, mask: Array | None, deterministic: bool) -> Array:
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

        logits_BxHxLxL = jnp.einsum("bqhd,bkhd->bhqk", q_BxLxHxD, k_BxLxHxD)
        logits_BxHxLxL = logits_BxHxLxL.astype(jnp.float32)  # softmax in float32
        if mask is not None:
            logits_BxHxLxL = jnp.where(mask, logits_BxHxLxL, jnp.finfo(jnp.float32).min)
        probs_BxHxLxL = jax.nn.softmax(logits_BxHxLxL, axis=-1).astype(self.dtype)
        probs_BxHxLxL = nn.Dropout(self.dropout_rate)(probs_BxHxLxL, deterministic=deterministic)
        out_BxLxHxD = jnp.einsum("bhqk,bkhd->bqhd", probs_BxHxLxL, v_BxLxHxD)

        w_HxDxE = self._param("out_kernel", (H, D, E), ("heads", "kv", "embed"), self.out_init_std)
        b_E = self._param("out_bias", (E,), ("embed",), None)
        return jnp.einsum("blhd,hde->ble", out_BxLxHxD, w_HxDxE.astype(self.dtype)) + b_E.astype(
            self.dtype
        )
