"""Log-likelihood of candidate continuations of a context, in one forward pass per batch.

    rows = context + candidate_k (right-padded);  logp_k,j = log p(candidate_k[j] | prefix)

A context too long for the model is cut from the left (its most recent tokens are kept).
"""

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from bertjax.generation.sampling import GenerationError
from bertjax.layers.embeddings import vocabulary_logits
from bertjax.models.gpt import GptLM
from bertjax.typing import Params

Array = jax.Array


@functools.partial(jax.jit, static_argnames=("model", "vocab_size"))
def _token_logprobs(params: Params, ids_BxL: Array, mask_BxL: Array, *, model: GptLM,
                    vocab_size: int) -> Array:
    """log p(ids[:, t + 1] | ids[:, :t + 1]) for t < L - 1: [B, L - 1], float32, over the
    tokenizer's `vocab_size` ids (layers/embeddings.vocabulary_logits)."""
    logits_BxLxV = model.apply({"params": params}, ids_BxL, mask_BxL).astype(jnp.float32)
    logits_BxLxV = vocabulary_logits(logits_BxLxV, vocab_size)
    logp_BxLxV = jax.nn.log_softmax(logits_BxLxV[:, :-1], axis=-1)
    return jnp.take_along_axis(logp_BxLxV, ids_BxL[:, 1:, None], axis=-1)[..., 0]


def continuation_logprobs(model: GptLM, params: Params, context: Sequence[int],
                          candidates: Sequence[Sequence[int]], vocab_size: int | None = None
                          ) -> np.ndarray:
    """Per-token log-probabilities [K, longest candidate] (0 past each candidate's end), each
    token's probability among the tokenizer's `vocab_size` ids (None: every row of the table),
    the distribution generation samples from."""
    if not context:
        raise GenerationError("scoring needs a non-empty context (start it with <|endoftext|>)")
    if not candidates or min(len(c) for c in candidates) == 0:
        raise GenerationError("every candidate continuation needs at least one token")
    longest = max(len(c) for c in candidates)
    room = model.config.max_position_embeddings - longest
    if room < 1:
        raise GenerationError(f"a candidate of {longest} tokens leaves no room for the context in "
                              f"the model's {model.config.max_position_embeddings}-token window: "
                              "shorten the candidates")
    context = list(context)[-room:]
    length = len(context) + longest
    ids = np.zeros((len(candidates), length), np.int32)
    mask = np.zeros_like(ids)
    for k, cand in enumerate(candidates):
        row = context + list(cand)
        ids[k, :len(row)], mask[k, :len(row)] = row, 1
    vocab_size = model.config.vocab_size if vocab_size is None else vocab_size
    logp = np.asarray(_token_logprobs(params, ids, mask, model=model, vocab_size=vocab_size))
    out = np.zeros((len(candidates), longest), np.float32)
    start = len(context) - 1  # logp[:, t] predicts token t + 1
    for k, cand in enumerate(candidates):
        out[k, :len(cand)] = logp[k, start:start + len(cand)]
    return out
