"""Attention weights of bertjax BERT and GPT models, per layer and head, and their heat maps.

    maps = bert_attention(config, params, vocab, "The bank raised its rates .")
    maps.weights.shape   # [layers, heads, T, T]: row = query token, column = key token
    plot_attention(maps, "attention_layer6.png", layer=-1)   # one panel per head

The attention layers sow their probabilities (before dropout) into the "intermediates"
collection; a model applied with `mutable=["intermediates"]` hands them back, one array per
layer, or one stacked array when the stack is scanned (`scan_layers=True`). Both layouts are
read here, so the result does not depend on how the model was built.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bertjax.analysis.plotting import heatmap_grid
from bertjax.models.bert import BertConfig, BertModel
from bertjax.models.gpt import GptConfig, GptLM
from bertjax.tokenizers.wordpiece import WordPieceVocabulary
from bertjax.typing import Params

SOWN = "attention_weights"  # the name layers/attention.py sows under


@dataclasses.dataclass(frozen=True)
class AttentionMaps:
    """One sequence's attention, `weights[layer, head, query, key]` ([N, H, T, T]), and its
    tokens."""

    tokens: tuple[str, ...]
    weights: np.ndarray

    @property
    def num_layers(self) -> int:
        return self.weights.shape[0]

    @property
    def num_heads(self) -> int:
        return self.weights.shape[1]


def _layer_index(path: tuple) -> int:
    """The N of the `layer_N` a sown array came from (0 for a scanned stack's single entry)."""
    names = [str(getattr(k, "key", k)) for k in path]
    found = [int(m.group(1)) for n in names if (m := re.fullmatch(r"layer_(\d+)", n))]
    return found[-1] if found else 0


def collect_attention(intermediates: Mapping[str, Any]) -> np.ndarray:
    """Every layer's attention probabilities [N, B, H, L, T] from an "intermediates" tree.

    Unrolled stacks sow one [B, H, L, T] array per `layer_i` (ordered here by i, so layer_10
    follows layer_9); a scanned stack sows one [N, B, H, L, T] array.
    """
    found = [
        (path, leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(intermediates)[0]
        if any(getattr(k, "key", None) == SOWN for k in path)
    ]
    if not found:
        raise ValueError("no attention weights among the intermediates: apply the model with "
                         "mutable=['intermediates'] (bertjax.layers.attention sows them)")
    found.sort(key=lambda item: _layer_index(item[0]))
    stacked = [np.asarray(a) if np.ndim(a) == 5 else np.asarray(a)[None] for _, a in found]
    return np.concatenate(stacked, axis=0)  # [N, B, H, L, T]


def bert_attention(
    config: BertConfig,
    params: Params,
    vocab: WordPieceVocabulary,
    text: str,
    text_b: str | None = None,
) -> AttentionMaps:
    """A BERT's attention over `[CLS] text [SEP]` (or a `text_b [SEP]` pair), unpadded."""
    ids_a = vocab.encode(text)
    ids = [vocab.cls_id, *ids_a, vocab.sep_id]
    segments = [0] * len(ids)
    if text_b is not None:
        ids_b = [*vocab.encode(text_b), vocab.sep_id]
        ids, segments = ids + ids_b, segments + [1] * len(ids_b)
    ids_1xT = jnp.asarray([ids], jnp.int32)
    _, state = BertModel(config).apply(
        {"params": nn.unbox(params)}, ids_1xT, jnp.asarray([segments], jnp.int32),
        mutable=["intermediates"],
    )
    weights = collect_attention(state["intermediates"])[:, 0]
    tokens = tuple(vocab.tokens[i] for i in ids)
    return AttentionMaps(tokens, weights)


def gpt_attention(
    config: GptConfig,
    params: Params,
    input_ids: Sequence[int],
    tokens: Sequence[str] | None = None,
) -> AttentionMaps:
    """A GPT's (causal) attention over one unpadded sequence of ids; `tokens` label the axes
    (default: the ids as text)."""
    ids_1xT = jnp.asarray([list(input_ids)], jnp.int32)
    _, state = GptLM(config).apply(
        {"params": nn.unbox(params)}, ids_1xT, method=GptLM.hidden, mutable=["intermediates"]
    )
    weights = collect_attention(state["intermediates"])[:, 0]
    labels = tuple(tokens) if tokens is not None else tuple(str(int(i)) for i in input_ids)
    if len(labels) != ids_1xT.shape[1]:
        raise ValueError(f"{len(labels)} token labels for {ids_1xT.shape[1]} ids: give one "
                         "label per id")
    return AttentionMaps(labels, weights)


def plot_attention(
    maps: AttentionMaps,
    path: str | os.PathLike,
    layer: int = -1,
    heads: Sequence[int] | None = None,
    columns: int = 4,
) -> pathlib.Path:
    """One layer's heads as heat maps (query rows, key columns, scale 0..1) written to PNG."""
    n = maps.num_layers
    if not -n <= layer < n:
        raise ValueError(f"layer {layer} is out of range for {n} layers: pick -{n} .. {n - 1}")
    heads = list(range(maps.num_heads)) if heads is None else list(heads)
    layer_number = layer % n + 1
    return heatmap_grid(
        [maps.weights[layer, h] for h in heads],
        path,
        titles=[f"head {h}" for h in heads],
        row_labels=maps.tokens,
        col_labels=maps.tokens,
        columns=columns,
        value_range=(0.0, 1.0),
        suptitle=f"attention, layer {layer_number} of {n} (rows attend to columns)",
    )
