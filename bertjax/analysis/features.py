"""Frozen features of any family: every layer of a BERT, a GPT or an ELMo, mean-pooled over a
text's tokens, for the feature-based approach (a small classifier on top of a frozen model).

    model = load_pretrained("workdir/bert", "bert")        # bertjax.finetune.pretrained
    feats_NxKxE = layer_features(model, ["Stocks rallied.", ...], max_length=64)
    twin = random_twin(model, seed=1)                      # same architecture, no pretraining

Layers, index 0 first (K of them), as each family's `layer_states` numbers them: the static
token vectors (BERT's and GPT's word-piece embedding rows, ELMo's char-CNN output), then
BERT's embedding output (word + segment + position, LayerNorm: a layer, as in the BERT
paper's Table 7) and each contextual layer (BERT's and GPT's Transformer layers, ELMo's
biLSTM layers as [forward; backward]). So K is L + 2 for a BERT of L layers, L + 1 for a GPT
or an ELMo. GPT's last layer is its final hidden state (after the last LayerNorm of a pre-LN
model). Special tokens ([CLS], [SEP], <S>, </S>) are not pooled: every family pools the
vectors of the text's own tokens, so the same classifier reads the same kind of summary from
each. A text longer than `max_length` tokens is cut.

Why mean-pooling: it is the one summary every family has (GPT's extract token and BERT's
[CLS] are only trained when fine-tuned), and it is what a feature-based comparison of frozen
encoders usually reads (Conneau et al. 2017, SentEval).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bertjax.inference.elmo import ElmoEmbedder
from bertjax.models import elmo as elmo_model
from bertjax.models import gpt as gpt_model
from bertjax.models.bert import BertModel
from bertjax.tokenizers.elmo_vocab import tokenize
from bertjax.training import families

BATCH = 64


def _length_bucket(n: int, cap: int) -> int:
    """A power of two (at least 8) holding n, at most `cap`: few shapes to compile."""
    return min(max(8, 1 << max(n - 1, 0).bit_length()), cap)


def _pooled_batches(rows: list[list[int]], pad_to: int, special: tuple[list[int], list[int]],
                    forward: Callable[[np.ndarray, np.ndarray], Any]) -> np.ndarray:
    """Mean over each row's own tokens of every layer [N, K, E]; `special` = ids put before
    and after every row (not pooled); `forward(ids, mask)` -> [K, B, T, E]."""
    before, after = special
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    out: list[Any] = [None] * len(rows)
    for start in range(0, len(order), BATCH):
        chunk = order[start:start + BATCH]
        longest = max(len(rows[i]) for i in chunk) + len(before) + len(after)
        T = _length_bucket(longest, pad_to)
        ids = np.zeros((BATCH, T), np.int32)
        mask = np.zeros((BATCH, T), np.int32)
        pool = np.zeros((BATCH, T), np.float32)
        for b, i in enumerate(chunk):
            row = [*before, *rows[i], *after]
            ids[b, :len(row)], mask[b, :len(row)] = row, 1
            pool[b, len(before):len(before) + len(rows[i])] = 1.0
        states_KxBxTxE = np.asarray(forward(ids, mask), np.float32)
        weights_BxT = pool / np.maximum(pool.sum(1, keepdims=True), 1.0)
        pooled_BxKxE = np.einsum("kbte,bt->bke", states_KxBxTxE, weights_BxT)
        for b, i in enumerate(chunk):
            out[i] = pooled_BxKxE[b]
    return np.stack(out)


def _bert_features(model: Any, texts: Sequence[str], max_length: int) -> np.ndarray:
    vocab, config = model.tokenizer, model.config
    cap = min(max_length, config.max_position_embeddings)
    rows = [vocab.encode(t)[:cap - 2] for t in texts]
    encoder = BertModel(config)
    params = nn.unbox(model.params)

    @jax.jit
    def forward(ids: Any, mask: Any) -> Any:
        return jnp.stack(encoder.apply({"params": params}, ids, None, mask,
                                       method=BertModel.layer_states))

    return _pooled_batches(rows, cap, ([vocab.cls_id], [vocab.sep_id]), forward)


def _gpt_features(model: Any, texts: Sequence[str], max_length: int) -> np.ndarray:
    config = model.config
    cap = min(max_length, config.max_position_embeddings)
    rows = [model.tokenizer.encode(t)[:cap] for t in texts]
    lm = gpt_model.GptLM(config)
    params = nn.unbox(model.params)

    @jax.jit
    def forward(ids: Any, mask: Any) -> Any:
        return jnp.stack(lm.apply({"params": params}, ids, mask,
                                  method=gpt_model.GptLM.layer_states))

    return _pooled_batches(rows, cap, ([], []), forward)


def _elmo_features(model: Any, texts: Sequence[str], max_length: int) -> np.ndarray:
    embedder = ElmoEmbedder(model.config, model.params, model.tokenizer, model.word_tokenizer,
                            batch_size=BATCH)
    words = [tokenize(t, model.word_tokenizer)[:max_length - 2] or ["."] for t in texts]
    return np.stack([layers.mean(axis=1) for layers in embedder.embed(words)])


# The family's base model freshly initialised (what a run with no pretraining starts from):
# BERT's encoder, GPT's LM, ELMo's biLM.
def _bert_random(config: Any, key: jax.Array) -> Any:
    return nn.unbox(BertModel(config).init(key, jnp.zeros((1, 2), jnp.int32))["params"])


def _gpt_random(config: Any, key: jax.Array) -> Any:
    return nn.unbox(gpt_model.GptLM(config).init(key, jnp.zeros((1, 2), jnp.int32))["params"])


def _elmo_random(config: Any, key: jax.Array) -> Any:
    ids, chars = jnp.zeros((1, 2), jnp.int32), jnp.zeros((1, 2, config.max_chars), jnp.int32)
    return nn.unbox(elmo_model.ElmoBiLM(config).init(key, ids, chars, jnp.array([2]))["params"])


families.provide("bert", "features", _bert_features)
families.provide("bert", "random_params", _bert_random)
families.provide("gpt", "features", _gpt_features)
families.provide("gpt", "random_params", _gpt_random)
families.provide("elmo", "features", _elmo_features)
families.provide("elmo", "random_params", _elmo_random)


def layer_features(model: Any, texts: Sequence[str], max_length: int = 64) -> np.ndarray:
    """[N, K, E]: each text's tokens averaged at every layer of `model` (a
    bertjax.finetune.pretrained.Pretrained of any family), static layer first."""
    found = families.pieces("features")
    if model.family not in found:
        raise ValueError(f"no features for family {model.family!r}: choose one of "
                         f"{', '.join(found)}")
    if not texts:
        raise ValueError("no texts to embed: give one or more")
    return found[model.family](model, texts, max_length)


def random_twin(model: Any, seed: int) -> Any:
    """`model` with its parameters replaced by a fresh initialisation from `seed`: the same
    architecture and tokenizer, no pretraining (the papers' "without pre-training" rows)."""
    random_params = families.piece(model.family, "random_params")
    params = random_params(model.config, jax.random.key(seed))
    return dataclasses.replace(model, params=params, source=f"{model.source} (random, seed {seed})")
