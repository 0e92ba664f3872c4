"""BERT (Devlin et al. 2018): encoder, pooler, masked-LM and next-sentence heads.

    h = TransformerStack(LayerNorm(token + segment + position embeddings))   post-LN, exact GELU
    pooled = tanh(W h[CLS])      (causal=True: tanh(W h[last real token]), see BertModel)
    MLM:  LayerNorm(gelu(W h[masked positions])) @ E_token^T + b      (tied to the embeddings)
    NSP:  W pooled -> 2 classes

Hidden states are gathered at the masked positions before the vocabulary projection, so the
[B, L, V] logits tensor is never built.

Packed rows (bertjax/data/bert/packing.py) hold several sequences each: `sequence_ids` says
which sequence a token belongs to (attention never crosses sequences), `position_ids` restart
at every sequence, and the pooler and NSP head read each sequence's [CLS] at `cls_positions`.
"""

import dataclasses
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from bertjax.layers.attention import AttentionMask, keep_queries
from bertjax.layers.embeddings import BertEmbeddings
from bertjax.layers.transformer import (
    ACTIVATIONS,
    TransformerConfig,
    TransformerStack,
    dense,
    layer_norm,
)
from bertjax.models.sizes import FamilyConfig

Array = jax.Array


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
# BERT's Transformer at every size: post-LN blocks, exact (erf) GELU, LayerNorm eps 1e-12.
TRANSFORMER_DEFAULTS = dict(pre_layer_norm=False, activation="gelu", layer_norm_eps=1e-12)


def size_settings(size: str) -> dict[str, Any]:
    """Every setting a named size fixes (all of them the Transformer's), flat."""
    layers, hidden, heads = SIZES[size]
    return dict(num_layers=layers, hidden_size=hidden, num_heads=heads, mlp_dim=4 * hidden,
                **TRANSFORMER_DEFAULTS)


@dataclasses.dataclass(frozen=True)
class BertConfig(FamilyConfig):
    """BERT's own hyper-parameters and its encoder's (`transformer`, BERT-base's by default)."""

    BUILDER: ClassVar[str] = "bert_config"

    vocab_size: int = 30522
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    # Left-to-right attention (BERT Table 5's "LTR & No NSP" model, bert_ltr_pretraining):
    # recorded in model.json, so fine-tuning the checkpoint keeps the pretraining's mask.
    causal: bool = False
    transformer: TransformerConfig = dataclasses.field(
        default_factory=lambda: TransformerConfig(**size_settings("base"))
    )


def bert_config(size: str, **overrides: Any) -> BertConfig:
    """The named size ("tiny" ... "large") with flat overrides, BERT's or the Transformer's
    (`vocab_size=`, `hidden_size=`, `dtype="bfloat16"`, `scan_layers=True`, ...)."""
    if size not in SIZES:
        raise ValueError(f"unknown BERT size {size!r}: set bert_config.size to one of "
                         f"{', '.join(SIZES)}")
    return BertConfig.from_dict({**size_settings(size), **overrides})


class BertModel(nn.Module):
    """Encoder + pooler. Returns the sequence output, pooled output and all hidden states.

    With `config.causal` each token attends to itself and the tokens before it, and the pooler
    reads the last real token (the only one that has seen the whole input), not [CLS].
    `summary_only=True` (heads that read only the pooled output) has the last layer compute
    [CLS] alone; the sequence output is then [B, 1, E] ([B, K, E] for packed rows: every
    sequence's [CLS]). A causal model ignores it.
    `input_mask` is each row's real tokens followed by padding, as every bertjax pipeline
    writes it: fused attention takes the padding as row lengths.
    Packed rows give `sequence_ids` [B, L] (1 .. K per token, 0 padding), `position_ids`
    restarting per sequence and `cls_positions` [B, K]; the pooled output is then [B, K, E],
    one per sequence (a row's unused slots point at any position and are never read).
    """

    config: BertConfig

    def setup(self) -> None:
        cfg = self.config
        self.embeddings = BertEmbeddings(
            cfg.vocab_size, cfg.max_position_embeddings, cfg.type_vocab_size, cfg.transformer
        )
        self.encoder = TransformerStack(cfg.transformer)
        self.pooler = dense(
            cfg.transformer.hidden_size, ("embed", "act_embed"), cfg.transformer, "pooler"
        )

    def __call__(
        self,
        input_ids: Array,
        segment_ids: Array | None = None,
        input_mask: Array | None = None,
        position_ids: Array | None = None,
        deterministic: bool = True,
        summary_only: bool = False,
        sequence_ids: Array | None = None,
        cls_positions: Array | None = None,
    ) -> dict[str, Any]:
        B, L = input_ids.shape
        if L > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence length {L} exceeds max_position_embeddings "
                f"{self.config.max_position_embeddings}: shorten the inputs"
            )
        segment_ids = jnp.zeros_like(input_ids) if segment_ids is None else segment_ids
        input_mask = jnp.ones_like(input_ids) if input_mask is None else input_mask
        x_BxLxE = self.embeddings(input_ids, segment_ids, position_ids, deterministic)
        packed = sequence_ids is not None
        if packed and (cls_positions is None or self.config.causal):
            raise ValueError("packed rows (sequence_ids) need cls_positions and a bidirectional "
                             "model: give cls_positions, or unpacked rows to a causal BERT")
        mask = AttentionMask(input_mask, causal=self.config.causal, real_tokens_first=True,
                             sequence_ids=sequence_ids,
                             max_sequences=cls_positions.shape[-1] if packed else 0)
        last_queries = None
        if summary_only and not self.config.causal:
            last_queries = cls_positions if packed else 1
        seq_BxLxE, hidden_states = self.encoder(x_BxLxE, mask, deterministic,
                                                last_queries=last_queries)
        if packed:  # [B, K, E]: every sequence's [CLS]
            summary = seq_BxLxE if summary_only else keep_queries(seq_BxLxE, cls_positions)
        else:
            summary = self._summary_token(seq_BxLxE, input_mask)
        pooled_BxE = jnp.tanh(self.pooler(summary))
        return {
            "sequence_output": seq_BxLxE,
            "pooled_output": pooled_BxE,
            "hidden_states": hidden_states,
        }

    def _summary_token(self, seq_BxLxE: Array, input_mask_BxL: Array) -> Array:
        """[B, E]: [CLS], or with a causal mask the last real token."""
        if not self.config.causal:
            return seq_BxLxE[:, 0]
        last_B = jnp.maximum(input_mask_BxL.sum(-1) - 1, 0).astype(jnp.int32)
        return jnp.take_along_axis(seq_BxLxE, last_B[:, None, None], axis=1)[:, 0]

    def token_logits(self, h_BxPxE: Array) -> Array:
        """Projection onto the vocabulary with the token embedding table."""
        return self.embeddings.attend(h_BxPxE)

    def layer_states(self, input_ids: Array, segment_ids: Array | None = None,
                     input_mask: Array | None = None) -> list[Array]:
        """Every layer's vector of every token, without dropout: K = num_layers + 2 arrays
        [B, L, E]. What the analyses read and the feature-based heads choose from.

            0      the WordPiece embedding rows alone: static, a piece's vector wherever it
                   stands (every family's layer 0 is its context-free token vectors)
            1      the embedding output: word + segment + position embeddings, LayerNorm
            1 + k  Transformer layer k's output (k = 1 .. num_layers)

        The embedding output is a layer: the paper's feature-based study (Table 7) counts it
        as the "First Layer (Embeddings)". So index 1 + k is `hidden_states[k]`, as is
        Hugging Face's `hidden_states[k]`.

        Layer 0 is in the parameter dtype, the others in the compute dtype: a list, not one
        stacked array, so the caller chooses where the cast happens (inside a jitted function
        XLA may skip rounding to bfloat16 before it)."""
        hidden_states = self(input_ids, segment_ids, input_mask)["hidden_states"]
        table_VxE = self.embeddings.word_embeddings.embedding
        return [table_VxE[input_ids], *hidden_states]


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
        packing: dict[str, Array] | None = None,
    ) -> dict[str, Array]:
        """MLM logits [B, P, V] and NSP logits [B, 2]; for packed rows (`packing`: the
        batch's position_ids, sequence_ids and cls_positions) NSP logits [B, K, 2]."""
        cfg, tcfg = self.config, self.config.transformer
        bert = BertModel(cfg, name="bert")
        packing = packing or {}
        outputs = bert(input_ids, segment_ids, input_mask, packing.get("position_ids"),
                       deterministic=deterministic, sequence_ids=packing.get("sequence_ids"),
                       cls_positions=packing.get("cls_positions"))
        seq_BxLxE = outputs["sequence_output"]

        h_BxPxE = jnp.take_along_axis(seq_BxLxE, masked_lm_positions[..., None], axis=1)
        h_BxPxE = dense(tcfg.hidden_size, ("embed", "act_embed"), tcfg, "mlm_transform")(h_BxPxE)
        h_BxPxE = ACTIVATIONS["gelu"](h_BxPxE)
        h_BxPxE = layer_norm(tcfg, "mlm_layer_norm")(h_BxPxE)
        logits_BxPxV = bert.token_logits(h_BxPxE)
        bias_V = self.param(
            "mlm_bias",
            nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
            (cfg.vocab_size,),
            tcfg.weight_dtype,
        )
        logits_BxPxV = logits_BxPxV + bias_V
        nsp_logits_Bx2 = dense(2, ("embed", "classes"), tcfg, "nsp")(outputs["pooled_output"])
        return {"mlm_logits": logits_BxPxV, "nsp_logits": nsp_logits_Bx2}
