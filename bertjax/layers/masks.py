"""Attention masks kept symbolic: key padding and causality, each implementation taking them in
its own form (a boolean array, row lengths, segment ids, a causal flag)."""

import jax
import jax.numpy as jnp
from flax import struct

Array = jax.Array


def padding_mask(input_mask_BxL: Array) -> Array:
    """[B, L] 1/0 token mask -> [B, 1, 1, L] boolean mask over keys."""
    return input_mask_BxL[:, None, None, :].astype(bool)


def causal_mask(length: int) -> Array:
    """[1, 1, L, L] boolean lower-triangular mask: query t sees keys <= t."""
    return jnp.tril(jnp.ones((length, length), dtype=bool))[None, None]


@struct.dataclass
class AttentionMask:
    """Which keys each query may attend to: padding over the keys, causality, or both.

    `key_mask`: 1 where the key is a real token (None: no padding). `causal`: query t sees
    keys <= t. `real_tokens_first`: every row is its real tokens followed by padding (as
    every bertjax pipeline writes BERT inputs), so the padding is described by the row
    lengths, which is how fused kernels take it; other masks use the general path.
    """

    key_mask: Array | None = None  # [B, T]
    causal: bool = struct.field(pytree_node=False, default=False)
    real_tokens_first: bool = struct.field(pytree_node=False, default=False)

    def dense(self, num_queries: int, num_keys: int) -> Array | None:
        """Boolean [B or 1, 1, Q, T] mask of the first Q queries over T keys (None: none)."""
        mask = None
        if self.causal:
            mask = (jnp.arange(num_queries)[:, None] >= jnp.arange(num_keys)[None, :])[None, None]
        if self.key_mask is not None:
            keys = padding_mask(self.key_mask)
            mask = keys if mask is None else mask & keys
        return mask

    def key_lengths(self) -> Array:
        """int32 [B]: real tokens per row, at least 1 (a padding row attends to its first key,
        as it does under the dense mask's uniform softmax: finite, and never read)."""
        return jnp.maximum(self.key_mask.astype(jnp.int32).sum(-1), 1)
