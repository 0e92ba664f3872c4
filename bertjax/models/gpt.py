"""GPT (Radford et al. 2018) and GPT-2 (Radford et al. 2019): causal Transformer language models.

    x = dropout(token_embedding[ids] + position_embedding[positions])
    h = TransformerStack(x, causal & padding mask)
        GPT-1: post-LN blocks;  GPT-2: pre-LN blocks + final LayerNorm, residual init / sqrt(2L)
    logits = h @ token_embedding^T                                  (tied, no bias)

Positions are given by the caller or derived from the mask (cumsum - 1), so a left-padded
prompt gets the same positions as the prompt alone. `decode=True` runs one step of
autoregressive decoding from the attention layers' key/value caches (see `init_cache`).
"""

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from bertjax.layers.attention import causal_mask, padding_mask
from bertjax.layers.embeddings import embed
from bertjax.layers.transformer import TransformerConfig, TransformerStack

Array = jax.Array
FAMILY = "gpt"


@dataclasses.dataclass(frozen=True)
class GptConfig:
    """GPT / GPT-2 hyper-parameters. `dtype` is the compute dtype; parameters stay `param_dtype`."""

    vocab_size: int = 50257
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    mlp_dim: int = 3072
    max_position_embeddings: int = 1024
    pre_layer_norm: bool = True  # GPT-2; GPT-1 is post-LN
    scale_residual_init: bool = True  # GPT-2: residual projections' init std / sqrt(2 L)
    activation: str = "gelu_tanh"
    dropout_rate: float = 0.1  # embeddings, residual branches
    attention_dropout_rate: float = 0.1
    layer_norm_eps: float = 1e-5
    initializer_range: float = 0.02
    dtype: str = "float32"
    param_dtype: str = "float32"
    remat: bool = False

    def transformer(self) -> TransformerConfig:
        return TransformerConfig(
            num_layers=self.num_layers,
            hidden_size=self.hidden_size,
            num_heads=self.num_heads,
            mlp_dim=self.mlp_dim,
            dropout_rate=self.dropout_rate,
            attention_dropout_rate=self.attention_dropout_rate,
            pre_layer_norm=self.pre_layer_norm,
            activation=self.activation,
            layer_norm_eps=self.layer_norm_eps,
            initializer_range=self.initializer_range,
            scale_residual_init=self.scale_residual_init,
            remat=self.remat,
            dtype=jnp.dtype(self.dtype),
            param_dtype=jnp.dtype(self.param_dtype),
        )


GPT1 = dict(
    vocab_size=40478, max_position_embeddings=512, pre_layer_norm=False,
    scale_residual_init=False,
)
GPT2 = dict(vocab_size=50257, max_position_embeddings=1024, pre_layer_norm=True,
            scale_residual_init=True)
# name: (layers, hidden, heads, family defaults); mlp is 4 * hidden.
SIZES: dict[str, tuple[int, int, int, dict]] = {
    "gpt1": (12, 768, 12, GPT1),
    "gpt2_tiny": (2, 128, 2, GPT2),
    "gpt2_mini": (4, 256, 4, GPT2),
    "gpt2_small": (12, 768, 12, GPT2),
    "gpt2_medium": (24, 1024, 16, GPT2),
    "gpt2_large": (36, 1280, 20, GPT2),
    "gpt2_xl": (48, 1600, 25, GPT2),
}
# Parameters of the LM (embeddings tied to the output) at each size's default vocab and
# positions; equal to transformers' GPT2LMHeadModel / OpenAIGPTLMHeadModel (tests check).
PARAM_COUNTS: dict[str, int] = {
    "gpt1": 116_534_784,
    "gpt2_tiny": 6_960_768,
    "gpt2_mini": 16_287_488,
    "gpt2_small": 124_439_808,
    "gpt2_medium": 354_823_168,
    "gpt2_large": 774_030_080,
    "gpt2_xl": 1_557_611_200,
}


def gpt_config(size: str, **overrides: Any) -> GptConfig:
    """The named size ("gpt1", "gpt2_tiny" ... "gpt2_xl") with optional field overrides."""
    if size not in SIZES:
        raise ValueError(
            f"unknown GPT size {size!r}: set gpt_config.size to one of {', '.join(SIZES)}"
        )
    layers, hidden, heads, family = SIZES[size]
    fields = dict(num_layers=layers, hidden_size=hidden, num_heads=heads, mlp_dim=4 * hidden)
    return GptConfig(**{**fields, **family, **overrides})


def positions_from_mask(input_mask_BxL: Array) -> Array:
    """Position of each token counted over real tokens only: left padding does not shift it."""
    return jnp.maximum(jnp.cumsum(input_mask_BxL.astype(jnp.int32), axis=-1) - 1, 0)


class GptLM(nn.Module):
    """The GPT / GPT-2 language model; `__call__` gives next-token logits [B, L, V]."""

    config: GptConfig

    def setup(self) -> None:
        cfg = self.config
        std, param_dtype = cfg.initializer_range, jnp.dtype(cfg.param_dtype)
        self.token_embeddings = embed(
            cfg.vocab_size, cfg.hidden_size, ("vocab", "embed"), std, param_dtype,
            "token_embeddings",
        )
        self.position_embeddings = embed(
            cfg.max_position_embeddings, cfg.hidden_size, ("position", "embed"), std,
            param_dtype, "position_embeddings",
        )
        self.dropout = nn.Dropout(cfg.dropout_rate)
        self.transformer = TransformerStack(cfg.transformer())

    def hidden(
        self,
        input_ids_BxL: Array,
        input_mask: Array | None = None,
        position_ids_BxL: Array | None = None,
        deterministic: bool = True,
        decode: bool = False,
    ) -> tuple[Array, list[Array]]:
        """Final hidden states [B, L, E] and every layer's output.

        `input_mask` is [B, L] over the inputs, or with `decode=True` [B, T] over the whole
        cache (which positions hold real tokens). `position_ids` default to the mask's.
        """
        cfg = self.config
        B, L = input_ids_BxL.shape
        mask_BxT = jnp.ones((B, L), jnp.int32) if input_mask is None else input_mask
        if position_ids_BxL is None:
            if decode:
                raise ValueError("decode=True needs explicit position_ids")
            position_ids_BxL = positions_from_mask(mask_BxT)
        x_BxLxE = self.token_embeddings(input_ids_BxL) + self.position_embeddings(position_ids_BxL)
        x_BxLxE = self.dropout(x_BxLxE.astype(jnp.dtype(cfg.dtype)), deterministic=deterministic)
        if decode:  # the attention layers add the causal part from their cache index
            mask_Bx1xLxT = padding_mask(mask_BxT)
        else:
            mask_Bx1xLxT = causal_mask(L) & padding_mask(mask_BxT)
        return self.transformer(x_BxLxE, mask_Bx1xLxT, deterministic, decode)

    def logits(self, h_BxLxE: Array) -> Array:
        """Projection onto the vocabulary with the token embedding table (tied)."""
        return self.token_embeddings.attend(h_BxLxE.astype(jnp.dtype(self.config.param_dtype)))

    def __call__(
        self,
        input_ids_BxL: Array,
        input_mask: Array | None = None,
        position_ids_BxL: Array | None = None,
        deterministic: bool = True,
        decode: bool = False,
    ) -> Array:
        h_BxLxE, _ = self.hidden(input_ids_BxL, input_mask, position_ids_BxL, deterministic, decode)
        return self.logits(h_BxLxE)


def init_cache(model: GptLM, batch_size: int, cache_length: int) -> Any:
    """Zeroed key/value caches for decoding `cache_length` positions of `batch_size` rows."""
    ids_BxT = jnp.zeros((batch_size, cache_length), jnp.int32)

    def make() -> Any:
        positions_BxT = jnp.zeros_like(ids_BxT)
        return model.init(jax.random.key(0), ids_BxT, None, positions_BxT, decode=True)["cache"]

    shapes = jax.eval_shape(make)
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def count_params(config: GptConfig) -> int:
    """Number of parameters of the LM (shapes only: nothing is initialised)."""
    ids = jnp.zeros((1, 1), jnp.int32)
    shapes = jax.eval_shape(lambda: GptLM(config).init(jax.random.key(0), ids))["params"]
    return sum(x.size for x in jax.tree.leaves(nn.unbox(shapes)))
