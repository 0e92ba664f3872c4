"""Token, segment and learned position embeddings (BERT's input layer; GPT reuses the parts)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from bertjax.layers.dropout import Dropout
from bertjax.layers.transformer import TransformerConfig, layer_norm

Array = jax.Array


def embed(
    num: int, features: int, axes: tuple[str, str], std: float, param_dtype: DTypeLike, name: str
) -> nn.Embed:
    """An nn.Embed whose table carries logical axis names."""
    return nn.Embed(
        num_embeddings=num,
        features=features,
        embedding_init=nn.with_logical_partitioning(nn.initializers.normal(std), axes),
        param_dtype=param_dtype,
        name=name,
    )


def token_and_position_tables(vocab_size: int, max_positions: int, config: TransformerConfig,
                              token_name: str) -> tuple[nn.Embed, nn.Embed]:
    """The token table (`token_name`) and the learned position table
    ("position_embeddings"), with the stack's width, init and parameter dtype: the input
    tables BERT and GPT share."""
    std, E, dtype = config.initializer_range, config.hidden_size, config.weight_dtype
    return (embed(vocab_size, E, ("vocab", "embed"), std, dtype, token_name),
            embed(max_positions, E, ("position", "embed"), std, dtype, "position_embeddings"))


class BertEmbeddings(nn.Module):
    """word + segment + position embeddings, then LayerNorm and dropout.

    Width, dropout, LayerNorm epsilon, init and dtypes are the encoder's (`config`), so the
    embeddings cannot disagree with the stack they feed.
    """

    vocab_size: int
    max_position_embeddings: int
    type_vocab_size: int
    config: TransformerConfig

    def setup(self) -> None:
        cfg = self.config
        self.word_embeddings, self.position_embeddings = token_and_position_tables(
            self.vocab_size, self.max_position_embeddings, cfg, "word_embeddings")
        self.segment_embeddings = embed(
            self.type_vocab_size, cfg.hidden_size, ("segment", "embed"), cfg.initializer_range,
            cfg.weight_dtype, "segment_embeddings"
        )
        self.layer_norm = layer_norm(cfg, None)
        self.dropout = Dropout(cfg.dropout_rate)

    def __call__(
        self,
        input_ids_BxL: Array,
        segment_ids_BxL: Array,
        position_ids_BxL: Array | None,
        deterministic: bool,
    ) -> Array:
        """Embedded inputs [B, L, E]; `position_ids` None means 0 .. L-1 in every row."""
        x_BxLxE = (
            self.word_embeddings(input_ids_BxL)
            + self._segments(segment_ids_BxL)
            + self._positions(position_ids_BxL, input_ids_BxL.shape)
        )
        x_BxLxE = self.layer_norm(x_BxLxE.astype(self.config.compute_dtype))
        return self.dropout(x_BxLxE, deterministic=deterministic)

    def _segments(self, segment_ids_BxL: Array) -> Array:
        """Segment embeddings; with two segments and gather_free_embeddings a select between
        the two rows (its gradient is two sums, not a scatter-add over every token)."""
        if not self.config.gather_free_embeddings or self.type_vocab_size != 2:
            return self.segment_embeddings(segment_ids_BxL)
        table_2xE = self.segment_embeddings.embedding
        return jnp.where(segment_ids_BxL[..., None] == 1, table_2xE[1], table_2xE[0])

    def _positions(self, position_ids_BxL: Array | None, shape: tuple[int, int]) -> Array:
        """Position embeddings [B or 1, L, E]: the table's first L rows broadcast over the
        batch when every row counts 0 .. L-1 (its gradient a sum over the batch), else a
        gather."""
        B, L = shape
        if position_ids_BxL is None:
            if self.config.gather_free_embeddings:
                return self.position_embeddings.embedding[None, :L]
            position_ids_BxL = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
        return self.position_embeddings(position_ids_BxL)

    def attend(self, h_BxPxE: Array) -> Array:
        """Logits against the token embedding table (the tied output projection)."""
        return attend(self.word_embeddings, h_BxPxE, self.config.compute_dtype,
                      self.config.pad_vocab_to)


def attend(table: nn.Embed, h_BxLxE: Array, dtype: DTypeLike, pad_vocab_to: int = 1) -> Array:
    """[B, L, V] logits of h against an embedding table, the product in the compute dtype
    (bfloat16 logits feed a float32 loss, as in mixed-precision training generally).

    `pad_vocab_to=m`: the product runs over the table padded with zero rows to a multiple of
    m (GPT-2's 50,257 rows to 50,304 at m = 64), tile sizes the matrix units take whole, and
    the logits are cut back to V. The padding is made as the table is cast to the compute
    dtype, so parameters, checkpoints and logits keep the real vocabulary."""
    V = table.embedding.shape[0]
    table_PxE = padded_table(table.embedding, dtype, pad_vocab_to)
    logits = tied_logits(h_BxLxE.astype(dtype), table_PxE)
    return logits[..., :V] if table_PxE.shape[0] > V else logits


def padded_table(table_VxE: Array, dtype: DTypeLike, pad_vocab_to: int = 1) -> Array:
    """The token table in the compute dtype, padded with zero rows to a multiple of
    `pad_vocab_to` (see attend)."""
    table_VxE = table_VxE.astype(dtype)
    pad = -table_VxE.shape[0] % pad_vocab_to
    return jnp.pad(table_VxE, ((0, pad), (0, 0))) if pad else table_VxE


@jax.custom_vjp
def tied_logits(h_xE: Array, table_VxE: Array) -> Array:
    """h @ table^T: [..., V] logits of vectors h [..., E] against a table [V, E].

    Its gradient for the table, g^T h summed over every position, is computed as (h^T g)^T:
    the product's operands are then h transposed (as small as the hidden states) and the
    logits' gradient g in its own layout. Written as g^T h, XLA:CPU lays the product out by
    copying g, the [positions, V] array that is the largest of the step, into a transposed
    layout, with the softmax's backward fused into that strided copy (a fifth of a GPT-2 tiny
    step at V = 4096). On GPUs and TPUs both forms are one matrix product."""
    return h_xE @ table_VxE.T


def _tied_logits_forward(h_xE: Array, table_VxE: Array) -> tuple[Array, tuple[Array, Array]]:
    return h_xE @ table_VxE.T, (h_xE, table_VxE)


def _tied_logits_backward(residuals: tuple[Array, Array], g_xV: Array) -> tuple[Array, Array]:
    h_xE, table_VxE = residuals
    E, V = h_xE.shape[-1], g_xV.shape[-1]
    h_NxE, g_NxV = h_xE.reshape(-1, E), g_xV.reshape(-1, V)
    # The barrier keeps XLA from folding the transposes back into g^T h (see tied_logits).
    table_ExV = jax.lax.optimization_barrier(h_NxE.T @ g_NxV)
    return (g_xV @ table_VxE).astype(h_xE.dtype), table_ExV.T.astype(table_VxE.dtype)


tied_logits.defvjp(_tied_logits_forward, _tied_logits_backward)


def vocabulary_logits(logits_xV: Array, vocab_size: int) -> Array:
    """`logits_xV` with the ids past a tokenizer's `vocab_size` tokens set to -inf.

    A token table may have more rows than its vocabulary has tokens (VOCAB_SIZE 8192 over a
    vocab.txt of 7,297 learned tokens): no text encodes to those rows, so no tool may predict,
    sample or decode them, and they take no share of a softmax. Every tool that turns logits
    into tokens or probabilities applies this rule (fill-mask, generation and scoring, the
    held-out scores); training does not need it, since no target lies there."""
    V = logits_xV.shape[-1]
    if vocab_size >= V:
        return logits_xV
    return jnp.where(jnp.arange(V) < vocab_size, logits_xV, -jnp.inf)
