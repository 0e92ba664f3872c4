"""The compute budget of a pretraining run in FLOPs, counted from its model and batch.

Training FLOPs = 6 x multiply-adds of one forward pass per position (2 per multiply-add, the
backward pass twice the forward), over every position a step computes, padding included:
steps x batch x sequence length. Per position:

    BERT / GPT   L (4 H^2 + 2 H F + 2 T H)      Q, K, V and output projections, the MLP,
                                                attention scores and their weighted sum
                 + H V                          GPT: the tied output layer at every position
                 + m (H^2 + H V)                BERT: its MLM head at the masked share m
    ELMo         C sum_w(w d n_w)               the char CNN at each of C characters
                 + k 2 D^2 + D P                highway layers and the projection
                 + 2 L (4 S (P + P) + S P)      both directions' LSTMs with projections
                 + 2 P V                        the softmax, both directions (a full one)

Embedding lookups, layer norms, activations and the optimizer are left out (a few percent at
these sizes), as in Kaplan et al. (2020)'s 6N estimate, which this refines with the attention
and output-layer terms that dominate at small width.
"""

from __future__ import annotations

from typing import Any


def transformer_macs(config: Any, seq_length: int, outputs: float) -> float:
    """Forward multiply-adds per position of a BERT or GPT config; `outputs`: the share of
    positions whose vocabulary logits are computed (1 for GPT, the masked share for BERT)."""
    t = config.transformer
    H, F, L = t.hidden_size, t.mlp_dim, t.num_layers
    layers = L * (4 * H * H + 2 * H * F + 2 * seq_length * H)
    return layers + outputs * H * config.vocab_size


def bert_macs(config: Any, seq_length: int, masked_share: float = 0.15) -> float:
    """BERT: the encoder, plus the MLM head's transform and output at the masked share."""
    H = config.transformer.hidden_size
    return transformer_macs(config, seq_length, masked_share) + masked_share * H * H


def elmo_macs(config: Any) -> float:
    """ELMo's biLM, per token (its char CNN runs over max_chars characters)."""
    D = sum(n for _, n in config.char_filters)
    P, S, L = config.proj_size, config.cell_size, config.num_layers
    cnn = config.max_chars * sum(w * config.char_embed_dim * n for w, n in config.char_filters)
    encoder = cnn + config.num_highway * 2 * D * D + D * P
    lstms = 2 * L * (4 * S * (P + P) + S * P)
    return encoder + lstms + 2 * P * config.vocab_size


def position_macs(family: str, config: Any, seq_length: int) -> float:
    """Forward multiply-adds per position for `family`'s pretraining objective."""
    if family == "bert":
        return bert_macs(config, seq_length)
    if family in ("gpt", "bert_ltr"):
        return transformer_macs(config, seq_length, 1.0)
    if family == "elmo":
        return elmo_macs(config)
    raise ValueError(f"no FLOP count for family {family!r}")


def training_flops(family: str, config: Any, batch_size: int, seq_length: int,
                   steps: int) -> float:
    """FLOPs of `steps` training steps of batch_size x seq_length positions."""
    return 6.0 * position_macs(family, config, seq_length) * batch_size * seq_length * steps
