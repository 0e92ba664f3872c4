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
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.typing import Collection

from bertjax.layers.attention import AttentionMask
from bertjax.layers.dropout import Dropout
from bertjax.layers.embeddings import attend, token_and_position_tables
from bertjax.layers.transformer import TransformerConfig, TransformerStack
from bertjax.models.sizes import TRANSFORMER_FIELDS, FamilyConfig
from bertjax.typing import Params

Array = jax.Array
FAMILY = "gpt"


# Family defaults, flat: the config's own fields and its Transformer's. Both use the tanh GELU
# and LayerNorm eps 1e-5; GPT-2 adds pre-LN blocks (+ a final LayerNorm) and residual init /
# sqrt(2 L); GPT-1 is post-LN.
GPT1 = dict(vocab_size=40478, max_position_embeddings=512, pre_layer_norm=False,
            scale_residual_init=False, activation="gelu_tanh", layer_norm_eps=1e-5)
GPT2 = dict(vocab_size=50257, max_position_embeddings=1024, pre_layer_norm=True,
            scale_residual_init=True, activation="gelu_tanh", layer_norm_eps=1e-5)
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


def size_settings(size: str) -> dict[str, Any]:
    """Every setting a named size fixes, flat (the config's own and its Transformer's)."""
    layers, hidden, heads, family = SIZES[size]
    return dict(num_layers=layers, hidden_size=hidden, num_heads=heads, mlp_dim=4 * hidden,
                **family)


def _gpt2_small_transformer() -> TransformerConfig:
    settings = size_settings("gpt2_small")
    return TransformerConfig(**{k: settings[k] for k in settings if k in TRANSFORMER_FIELDS})


@dataclasses.dataclass(frozen=True)
class GptConfig(FamilyConfig):
    """GPT's own hyper-parameters and its Transformer's (`transformer`, GPT-2 small's by
    default)."""

    BUILDER: ClassVar[str] = "gpt_config"

    vocab_size: int = 50257
    max_position_embeddings: int = 1024
    transformer: TransformerConfig = dataclasses.field(default_factory=_gpt2_small_transformer)


def gpt_config(size: str, **overrides: Any) -> GptConfig:
    """The named size ("gpt1", "gpt2_tiny" ... "gpt2_xl") with flat overrides, GPT's or the
    Transformer's (`vocab_size=`, `num_layers=`, `remat=True`, `scan_layers=True`, ...)."""
    if size not in SIZES:
        raise ValueError(
            f"unknown GPT size {size!r}: set gpt_config.size to one of {', '.join(SIZES)}"
        )
    return GptConfig.from_dict({**size_settings(size), **overrides})


def positions_from_mask(input_mask_BxL: Array) -> Array:
    """Position of each token counted over real tokens only: left padding does not shift it."""
    return jnp.maximum(jnp.cumsum(input_mask_BxL.astype(jnp.int32), axis=-1) - 1, 0)


class GptLM(nn.Module):
    """The GPT / GPT-2 language model; `__call__` gives next-token logits [B, L, V]."""

    config: GptConfig

    def setup(self) -> None:
        cfg, tcfg = self.config, self.config.transformer
        self.token_embeddings, self.position_embeddings = token_and_position_tables(
            cfg.vocab_size, cfg.max_position_embeddings, tcfg, "token_embeddings")
        self.dropout = Dropout(tcfg.dropout_rate)
        self.transformer = TransformerStack(tcfg)

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
        B, L = input_ids_BxL.shape
        mask_BxT = jnp.ones((B, L), jnp.int32) if input_mask is None else input_mask
        if position_ids_BxL is None:
            if decode:
                raise ValueError("decode=True needs explicit position_ids")
            position_ids_BxL = positions_from_mask(mask_BxT)
        x_BxLxE = self.token_embeddings(input_ids_BxL) + self.position_embeddings(position_ids_BxL)
        x_BxLxE = x_BxLxE.astype(self.config.transformer.compute_dtype)
        x_BxLxE = self.dropout(x_BxLxE, deterministic=deterministic)
        # Decoding adds the causal part from the cache index (layers/kv_cache.py).
        mask = AttentionMask(None if input_mask is None else mask_BxT, causal=not decode)
        return self.transformer(x_BxLxE, mask, deterministic, decode)

    def logits(self, h_BxLxE: Array) -> Array:
        """Projection onto the vocabulary with the token embedding table (tied)."""
        tcfg = self.config.transformer
        return attend(self.token_embeddings, h_BxLxE, tcfg.compute_dtype, tcfg.pad_vocab_to)

    def __call__(self, *args: Any, **kwargs: Any) -> Array:
        """Next-token logits [B, L, V]; the arguments are `hidden`'s."""
        h_BxLxE, _ = self.hidden(*args, **kwargs)
        return self.logits(h_BxLxE)

    def layer_states(self, input_ids_BxL: Array, input_mask: Array | None = None
                     ) -> list[Array]:
        """Every layer's vector of every token, without dropout: K = num_layers + 1 arrays
        [B, L, E] (layer 0 in the parameter dtype, the others in the compute dtype, as
        `BertModel.layer_states`). What the analyses read.

            0   the token embedding rows alone: static, a token's vector wherever it stands
                (every family's layer 0 is its context-free token vectors)
            k   Transformer layer k's output (k = 1 .. num_layers); the last one is the final
                hidden state, after the final LayerNorm of a pre-LN model (GPT-2)

        The sum of token and position embeddings that feeds layer 1 is not a layer here: the
        GPT papers count the Transformer's layers only."""
        final_BxLxE, hidden_states = self.hidden(input_ids_BxL, input_mask)
        table_VxE = self.token_embeddings.embedding
        return [table_VxE[input_ids_BxL], *hidden_states[1:-1], final_BxLxE]


def init_cache(model: GptLM, batch_size: int, cache_length: int) -> Collection:
    """Zeroed key/value caches for decoding `cache_length` positions of `batch_size` rows."""
    ids_BxT = jnp.zeros((batch_size, cache_length), jnp.int32)

    def make() -> Collection:
        positions_BxT = jnp.zeros_like(ids_BxT)
        return model.init(jax.random.key(0), ids_BxT, None, positions_BxT, decode=True)["cache"]

    shapes = jax.eval_shape(make)
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def abstract_params(config: GptConfig) -> Params:
    """The LM's parameter tree as shapes and dtypes (nothing is initialised)."""
    ids = jnp.zeros((1, 1), jnp.int32)
    return nn.unbox(jax.eval_shape(lambda: GptLM(config).init(jax.random.key(0), ids))["params"])


def count_params(config: GptConfig) -> int:
    """Number of parameters of the LM (shapes only: nothing is initialised)."""
    return sum(x.size for x in jax.tree.leaves(abstract_params(config)))
