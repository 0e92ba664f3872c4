"""Token, segment and learned position embeddings (BERT's input layer; GPT reuses the parts)."""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array


def embed(
    num: int, features: int, axes: tuple[str, str], std: float, param_dtype: Any, name: str
) -> nn.Embed:
    """An nn.Embed whose table carries logical axis names."""
    return nn.Embed(
        num_embeddings=num,
        features=features,
        embedding_init=nn.with_logical_partitioning(nn.initializers.normal(std), axes),
        param_dtype=param_dtype,
        name=name,
    )


class BertEmbeddings(nn.Module):
    """word + segment + position embeddings, then LayerNorm and dropout."""

    vocab_size: int
    hidden_size: int
    max_position_embeddings: int
    type_vocab_size: int
    dropout_rate: float
    layer_norm_eps: float
    initializer_range: float
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    def setup(self) -> None:
        std = self.initializer_range
        self.word_embeddings = embed(
            self.vocab_size,
            self.hidden_size,
            ("vocab", "embed"),
            std,
            self.param_dtype,
            "word_embeddings",
        )
        self.position_embeddings = embed(
            self.max_position_embeddings,
            self.hidden_size,
            ("position", "embed"),
            std,
            self.param_dtype,
            "position_embeddings",
        )
        self.segment_embeddings = embed(
            self.type_vocab_size,
            self.hidden_size,
            ("segment", "embed"),
            std,
            self.param_dtype,
            "segment_embeddings",
        )
        self.layer_norm = nn.LayerNorm(
            epsilon=self.layer_norm_eps,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
        )
        self.dropout = nn.Dropout(self.dropout_rate)

    def __call__(
        self,
        input_ids_BxL: Array,
        segment_ids_BxL: Array,
        position_ids_BxL: Array,
        deterministic: bool,
    ) -> Array:
        x_BxLxE = (
            self.word_embeddings(input_ids_BxL)
            + self.segment_embeddings(segment_ids_BxL)
            + self.position_embeddings(position_ids_BxL)
        )
        x_BxLxE = self.layer_norm(x_BxLxE.astype(self.dtype))
        return self.dropout(x_BxLxE, deterministic=deterministic)

    def attend(self, h_BxPxE: Array) -> Array:
        """Logits against the token embedding table (the tied output projection)."""
        return self.word_embeddings.attend(h_BxPxE.astype(self.param_dtype))
