"""BERT (Devlin et al. 2018): encoder, pooler, masked-LM and next-sentence heads.

    h = TransformerStack(LayerNorm(token + segment + position embeddings))   post-LN, exact GELU
    pooled = tanh(W h[CLS])
    MLM:  LayerNorm(gelu(W h[masked positions])) @ E_token^T + b      (tied to the embeddings)
    NSP:  W pooled -> 2 classes

Hidden states are gathered at the masked positions before the vocabulary projection, so the
[B, L, V] logits tensor is never built.
"""

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from bertjax.layers.attention import padding_mask
from bertjax.layers.embeddings import BertEmbeddings
from bertjax.layers.transformer import ACTIVATIONS, TransformerConfig, TransformerStack, layer_norm

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """BERT hyper-parameters. `dtype` is the compute dtype; parameters stay `param_dtype`."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    mlp_dim: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    dtype: str = "float32"
    param_dtype: str = "float32"
    remat: bool = False
    scan_layers: bool = False  # TPU configs: compile one block; HF import needs it off

    def transformer(self) -> TransformerConfig:
        return TransformerConfig(
            num_layers=self.num_layers,
            hidden_size=self.hidden_size,
            num_heads=self.num_heads,
            mlp_dim=self.mlp_dim,
            dropout_rate=self.dropout_rate,
            attention_dropout_rate=self.attention_dropout_rate,
            pre_layer_norm=False,
            activation="gelu",
            layer_norm_eps=self.layer_norm_eps,
            initializer_range=self.initializer_range,
            remat=self.remat,
            scan_layers=self.scan_layers,
            dtype=jnp.dtype(self.dtype),
            param_dtype=jnp.dtype(self.param_dtype),
        )


# name: (layers, hidden, heads); mlp is 4 * hidden. Counts are with a 30522 vocab and the
# pretraining heads (the MLM decoder is tied, so it adds only its transform and bias).
SIZES: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}
PARAM_COUNTS: dict[str, int] = {
    "tiny": 4_433_468,
    "mini": 11_267_900,
    "small": 29_058_876,
    "medium": 41_668_412,
    "base": 110_106_428,
    "large": 336_226_108,
}


def bert_config(size: str, **overrides: Any) -> BertConfig:
    """The named size ("tiny" ... "large") with optional field overrides."""
    if size not in SIZES:
        raise ValueError(f"unknown BERT size {size!r}: choose one of {', '.join(SIZES)}")
    unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(BertConfig)})
    if unknown:
        fields = ", ".join(f.name for f in dataclasses.fields(BertConfig))
        raise ValueError(f"unknown BERT setting {unknown[0]!r}: bert_config takes {fields}")
    layers, hidden, heads = SIZES[size]
    fields = dict(num_layers=layers, hidden_size=hidden, num_heads=heads, mlp_dim=4 * hidden)
    return BertConfig(**{**fields, **overrides})


def _dense(features: int, axes: tuple[str, str], cfg: BertConfig, name: str) -> nn.Dense:
    return nn.Dense(
        features,
        kernel_init=nn.with_logical_partitioning(
            nn.initializers.normal(cfg.initializer_range), axes
        ),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, (axes[1],)),
        dtype=jnp.dtype(cfg.dtype),
        param_dtype=jnp.dtype(cfg.param_dtype),
        name=name,
    )


class BertModel(nn.Module):
    """Encoder + pooler. Returns the sequence output, pooled output and all hidden states."""

    config: BertConfig

    def setup(self) -> None:
        cfg = self.config
        self.embeddings = BertEmbeddings(
            vocab_size=cfg.vocab_size,
            hidden_size=cfg.hidden_size,
            max_position_embeddings=cfg.max_position_embeddings,
            type_vocab_size=cfg.type_vocab_size,
            dropout_rate=cfg.dropout_rate,
            layer_norm_eps=cfg.layer_norm_eps,
            initializer_range=cfg.initializer_range,
            dtype=jnp.dtype(cfg.dtype),
            param_dtype=jnp.dtype(cfg.param_dtype),
        )
        self.encoder = TransformerStack(cfg.transformer())
        self.pooler = _dense(cfg.hidden_size, ("embed", "act_embed"), cfg, "pooler")

    def __call__(
        self,
        input_ids: Array,
        segment_ids: Array | None = None,
        input_mask: Array | None = None,
        position_ids: Array | None = None,
        deterministic: bool = True,
    ) -> dict[str, Any]:
        B, L = input_ids.shape
        if L > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence length {L} exceeds max_position_embeddings "
                f"{self.config.max_position_embeddings}: shorten the inputs"
            )
        segment_ids = jnp.zeros_like(input_ids) if segment_ids is None else segment_ids
        input_mask = jnp.ones_like(input_ids) if input_mask is None else input_mask
        if position_ids is None:
            position_ids = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
        x_BxLxE = self.embeddings(input_ids, segment_ids, position_ids, deterministic)
        seq_BxLxE, hidden_states = self.encoder(x_BxLxE, padding_mask(input_mask), deterministic)
        pooled_BxE = jnp.tanh(self.pooler(seq_BxLxE[:, 0]))
        return {
            "sequence_output": seq_BxLxE,
            "pooled_output": pooled_BxE,
            "hidden_states": hidden_states,
        }

    def token_logits(self, h_BxPxE: Array) -> Array:
        """Projection onto the vocabulary with the token embedding table."""
        return self.embeddings.attend(h_BxPxE)


class BertForPreTraining(nn.Module):
    """BERT with the MLM head (on gathered positions only) and the NSP head."""

    config: BertConfig

    @nn.compact
    def __call__(
        self,
        input_ids: Array,
        segment_ids: Array,
        input_mask: Array,
        masked_lm_positions: Array,
        deterministic: bool = True,
    ) -> dict[str, Array]:
        cfg = self.config
        bert = BertModel(cfg, name="bert")
        outputs = bert(input_ids, segment_ids, input_mask, deterministic=deterministic)
        seq_BxLxE = outputs["sequence_output"]

        h_BxPxE = jnp.take_along_axis(seq_BxLxE, masked_lm_positions[..., None], axis=1)
        h_BxPxE = _dense(cfg.hidden_size, ("embed", "act_embed"), cfg, "mlm_transform")(h_BxPxE)
        h_BxPxE = ACTIVATIONS["gelu"](h_BxPxE)
        h_BxPxE = layer_norm(cfg.transformer(), "mlm_layer_norm")(h_BxPxE)
        logits_BxPxV = bert.token_logits(h_BxPxE)
        bias_V = self.param(
            "mlm_bias",
            nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
            (cfg.vocab_size,),
            jnp.dtype(cfg.param_dtype),
        )
        logits_BxPxV = logits_BxPxV + bias_V
        nsp_logits_Bx2 = _dense(2, ("embed", "classes"), cfg, "nsp")(outputs["pooled_output"])
        return {"mlm_logits": logits_BxPxV, "nsp_logits": nsp_logits_Bx2}
