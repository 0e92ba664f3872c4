"""ELMo's character-level token encoder (Kim et al. 2016; Peters et al. 2018).

    char ids [B, T, C] -> char embeddings [B, T, C, 16]
      -> for each (width w, n filters): conv over characters, max over positions, activation
      -> concat [B, T, sum n] -> highway layers -> linear projection [B, T, P]

Character ids follow bilm-tf's inference numbering (see `bertjax.tokenizers.elmo_vocab`): 0 marks a
padded token, UTF-8 bytes are 1..256, then begin/end of sentence, begin/end of word and the
in-word padding character. Words are cut to C characters by the data pipeline, so any word
fits. Parameter shapes match bilm-tf's `char_embed`, `CNN/W_cnn_i`, `CNN_high_i`, `CNN_proj`.
"""

import math
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.nn.initializers import Initializer
from jax.typing import DTypeLike

from bertjax.layers.highway import Highway

Array = jax.Array

# The paper's filters: (width, number of filters), 2048 in all.
ELMO_FILTERS: tuple[tuple[int, int], ...] = (
    (1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024),
)  # fmt: skip
ACTIVATIONS = {"relu": jax.nn.relu, "tanh": jnp.tanh}


class CharCnnEncoder(nn.Module):
    """Characters of each token -> one `output_dim` vector per token."""

    output_dim: int
    filters: Sequence[tuple[int, int]] = ELMO_FILTERS
    num_highway: int = 2
    char_embed_dim: int = 16
    num_chars: int = 262
    activation: str = "relu"
    dtype: DTypeLike = jnp.float32
    param_dtype: DTypeLike = jnp.float32

    @nn.compact
    def __call__(self, char_ids_BxTxC: Array) -> Array:
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown char CNN activation {self.activation!r}: set elmo_config."
                "char_activation to relu or tanh"
            )
        B, T, C = char_ids_BxTxC.shape
        widest = max(width for width, _ in self.filters)
        if C < widest:
            raise ValueError(
                f"{C} characters per token is fewer than the widest filter ({widest}): "
                "set elmo_config.max_chars >= the widest char filter"
            )
        table = nn.Embed(
            self.num_chars,
            self.char_embed_dim,
            embedding_init=nn.with_logical_partitioning(
                _shifted(nn.initializers.uniform(2.0), -1.0), ("chars", "char_embed")
            ),  # bilm-tf: U(-1, 1)
            param_dtype=self.param_dtype,
            name="char_embed",
        )
        x_NxCxE = table(char_ids_BxTxC.reshape(B * T, C)).astype(self.dtype)
        act = ACTIVATIONS[self.activation]
        pooled = []
        for i, (width, num) in enumerate(self.filters):
            if self.activation == "relu":
                kernel_init = nn.initializers.uniform(0.1)  # Kim et al.: U(-0.05, 0.05)
                shift = -0.05
            else:
                kernel_init = nn.initializers.normal(math.sqrt(1.0 / (width * self.char_embed_dim)))
                shift = 0.0
            conv = nn.Conv(
                num,
                kernel_size=(width,),
                padding="VALID",
                kernel_init=nn.with_logical_partitioning(
                    _shifted(kernel_init, shift), ("char_width", "char_embed", "filters")
                ),
                bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("filters",)),
                dtype=self.dtype,
                param_dtype=self.param_dtype,
                name=f"conv_{i}",
            )
            y_NxWxF = conv(x_NxCxE)
            pooled.append(act(y_NxWxF.max(axis=1)))  # max over positions, then activation
        h_NxF = jnp.concatenate(pooled, axis=-1)
        if self.num_highway:
            h_NxF = Highway(self.num_highway, self.dtype, self.param_dtype, name="highway")(h_NxF)
        n_filters = h_NxF.shape[-1]
        if n_filters != self.output_dim:
            h_NxF = nn.Dense(
                self.output_dim,
                kernel_init=nn.with_logical_partitioning(
                    nn.initializers.normal(math.sqrt(1.0 / n_filters)), ("filters", "embed")
                ),
                bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
                dtype=self.dtype,
                param_dtype=self.param_dtype,
                name="projection",
            )(h_NxF)
        return h_NxF.reshape(B, T, -1)


def _shifted(init: Initializer, shift: float) -> Initializer:
    """`init` plus a constant: turns flax's U(0, s) into bilm-tf's symmetric U(-s/2, s/2)."""

    def shifted_init(key: Array, shape: tuple, dtype: DTypeLike = jnp.float32) -> Array:
        return init(key, shape, dtype) + jnp.asarray(shift, dtype)

    return shifted_init
