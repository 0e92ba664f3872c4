"""Attention masks kept symbolic: key padding, packed sequences and causality, each
implementation taking them in its own form (a boolean array, row lengths, segment offsets,
segment ids, a causal flag)."""

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
    """Which keys each query may attend to: padding over the keys, packed sequences,
    causality, or a combination.

    `key_mask`: 1 where the key is a real token (None: no padding). `causal`: query t sees
    keys <= t. `real_tokens_first`: every row is its real tokens followed by padding (as
    every bertjax pipeline writes BERT inputs), so the padding is described by the row
    lengths, which is how fused kernels take it; other masks use the general path.

    `sequence_ids` (packed rows, see bertjax/data/bert/packing.py): [B, T] ints, 1 .. K for the
    packed sequence a token belongs to and 0 for padding; a query attends only to keys of its
    own sequence. The sequences of a row are contiguous and in order (1, 2, ...), each starting
    where the one before ends; `max_sequences` is K, the most a row holds (static: fused
    kernels take per-sequence offsets and lengths of that width).

    `query_sequence_ids` [B, Q]: the sequences of queries taken at chosen positions rather
    than the first Q (`at_queries`: a packed row's [CLS] positions), None otherwise.
    """

    key_mask: Array | None = None  # [B, T]
    causal: bool = struct.field(pytree_node=False, default=False)
    real_tokens_first: bool = struct.field(pytree_node=False, default=False)
    sequence_ids: Array | None = None  # [B, T]
    max_sequences: int = struct.field(pytree_node=False, default=0)
    query_sequence_ids: Array | None = None  # [B, Q]

    @property
    def packed(self) -> bool:
        return self.sequence_ids is not None

    def dense(self, num_queries: int, num_keys: int) -> Array | None:
        """Boolean [B or 1, 1, Q, T] mask of the first Q queries over T keys (None: none)."""
        mask = None
        if self.causal:
            mask = (jnp.arange(num_queries)[:, None] >= jnp.arange(num_keys)[None, :])[None, None]
        if self.key_mask is not None:
            keys = padding_mask(self.key_mask)
            mask = keys if mask is None else mask & keys
        if self.sequence_ids is not None:
            ids_BxT = self.sequence_ids
            ids_BxQ = (ids_BxT[:, :num_queries] if self.query_sequence_ids is None
                       else self.query_sequence_ids)
            same_Bx1xQxT = ids_BxQ[:, None, :, None] == ids_BxT[:, None, None, :]
            same_Bx1xQxT = same_Bx1xQxT & (ids_BxT[:, None, None, :] > 0)
            mask = same_Bx1xQxT if mask is None else mask & same_Bx1xQxT
        return mask

    def at_queries(self, positions_BxQ: Array) -> "AttentionMask":
        """This mask for queries at `positions_BxQ` (each row's own positions) over every key:
        the keys a query may see depend on its sequence, not on where it sits in the row."""
        if self.causal:
            raise ValueError("queries at chosen positions need a bidirectional mask: a causal "
                             "mask is defined for the first Q queries only")
        if self.sequence_ids is None:
            return self
        return self.replace(query_sequence_ids=jnp.take_along_axis(self.sequence_ids,
                                                                   positions_BxQ, axis=1))

    def key_lengths(self) -> Array:
        """int32 [B]: real tokens per row, at least 1 (a padding row attends to its first key,
        as it does under the dense mask's uniform softmax: finite, and never read)."""
        return jnp.maximum(self.key_mask.astype(jnp.int32).sum(-1), 1)

    def sequence_layout(self) -> tuple[Array, Array]:
        """(offsets int32 [B, K + 1], lengths int32 [B, K]) of the packed sequences, -1 where a
        row holds fewer than K: the layout cuDNN's fused attention takes packed rows in."""
        K = self.max_sequences
        ids_BxT = self.sequence_ids.astype(jnp.int32)
        onehot_BxTxK = ids_BxT[..., None] == jnp.arange(1, K + 1, dtype=jnp.int32)
        lengths_BxK = onehot_BxTxK.sum(1, dtype=jnp.int32)
        starts_BxK = jnp.cumsum(lengths_BxK, axis=1) - lengths_BxK
        used_BxK = lengths_BxK > 0
        offsets_BxK = jnp.where(used_BxK, starts_BxK, -1)
        unused_Bx1 = jnp.full(offsets_BxK.shape[:1] + (1,), -1, jnp.int32)
        return (jnp.concatenate([offsets_BxK, unused_Bx1], axis=1),
                jnp.where(used_BxK, lengths_BxK, -1))
