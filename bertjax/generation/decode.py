"""Autoregressive decoding with a key/value cache, jitted once per (shape, settings).

    prompts, LEFT-padded to [B, P] -> one forward pass fills the caches (prefill)
    then a while_loop: one token per step at cache index P + i, position n_b + i

Positions follow the mask (n_b real prompt tokens -> 0 .. n_b - 1), and padded keys are
masked, so the other rows and the padding do not change a row's logits. Sampling draws each
row from its own key: the row of prompt k (its index in its request, `row_ids_B[b]`) uses
`row_key = fold_in(rng, k)` and draws its i-th new token with `fold_in(row_key, i)`. The
continuation of prompt k thus depends only on (seed, k, the prompt, the settings): a prompt
list gives the same continuations in one batch or split into several (each call passing its
prompts' indices), and adding prompts after it or padding the batch longer changes nothing.
Greedy decoding is argmax and uses no key. The loop stops when every row has produced a stop
token or `max_new_tokens` tokens; after its stop token a row produces `pad_id`.
"""

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax.typing import Collection

from bertjax.generation.sampling import GenerationError, Sampling, next_token
from bertjax.layers.embeddings import vocabulary_logits
from bertjax.models.gpt import GptLM, init_cache, positions_from_mask
from bertjax.typing import Params

Array = jax.Array


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int, length: int | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """Token lists -> ids [B, P] and mask [B, P], padded on the left."""
    length = max(len(p) for p in prompts) if length is None else length
    ids = np.full((len(prompts), length), pad_id, np.int32)
    mask = np.zeros((len(prompts), length), np.int32)
    for row, prompt in enumerate(prompts):
        if prompt:
            ids[row, length - len(prompt):] = prompt
            mask[row, length - len(prompt):] = 1
    return ids, mask


def check_fits(prompt_lengths: Sequence[int], max_new_tokens: int, context: int) -> None:
    """One line naming the longest allowed prompt when a prompt plus continuation is too long."""
    if max_new_tokens < 1:
        raise GenerationError(f"max_new_tokens={max_new_tokens}: ask for at least 1 new token")
    room = context - max_new_tokens
    if room < 1:
        raise GenerationError(
            f"max_new_tokens={max_new_tokens} leaves no room for a prompt in the model's "
            f"{context}-token context: lower --max_new_tokens below {context}"
        )
    for row, n in enumerate(prompt_lengths):
        if n > room:
            raise GenerationError(
                f"prompt {row} has {n} tokens but at most {room} fit the model's {context}-token "
                f"context with max_new_tokens={max_new_tokens}: shorten the prompt to {room} "
                "tokens or lower --max_new_tokens"
            )
        if n < 1:
            raise GenerationError(f"prompt {row} is empty: give at least one token")


def _last_logits(model: GptLM, params: Params, cache: Collection, ids_BxL: Array,
                 key_mask_BxT: Array, positions_BxL: Array, vocab_limit: int
                 ) -> tuple[Array, Collection]:
    """Logits [B, V] at the last input position (only that one is projected), new caches."""
    (h_BxLxE, _), mutated = model.apply(
        {"params": params, "cache": cache}, ids_BxL, key_mask_BxT, positions_BxL,
        decode=True, method=GptLM.hidden, mutable=["cache"],
    )
    logits_BxV = model.apply({"params": params}, h_BxLxE[:, -1], method=GptLM.logits)
    logits_BxV = vocabulary_logits(logits_BxV.astype(jnp.float32), vocab_limit)
    return logits_BxV, mutated["cache"]


def row_keys(rng: Array, row_ids_B: Array) -> Array:
    """Per-row keys [B]: fold_in(rng, k) for the prompt index k of each row."""
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(rng, row_ids_B)


@functools.partial(
    jax.jit, static_argnames=("model", "max_new_tokens", "sampling", "stop_ids", "pad_id",
                              "vocab_limit"))
def generate_ids(params: Params, ids_BxP: Array, mask_BxP: Array, rng: Array, *, model: GptLM,
                 max_new_tokens: int, sampling: Sampling, stop_ids: tuple[int, ...] = (),
                 pad_id: int = 0, vocab_limit: int | None = None,
                 row_ids_B: Array | None = None) -> Array:
    """New token ids [B, max_new_tokens] for left-padded prompts (`pad_id` after a stop).

    `row_ids_B` [B] are the prompts' indices in their request (default 0 .. B-1); with `rng`
    (the seed's key) they fix each row's samples, as the module docstring says.
    """
    B, P = ids_BxP.shape
    vocab_limit = model.config.vocab_size if vocab_limit is None else vocab_limit
    row_ids_B = jnp.arange(B, dtype=jnp.int32) if row_ids_B is None else row_ids_B
    if row_ids_B.shape != (B,):
        raise GenerationError(f"row_ids_B has shape {row_ids_B.shape} for {B} prompts: pass "
                              "one index per prompt")
    keys_B = row_keys(rng, row_ids_B)
    step_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))  # (keys [B], i) -> keys [B]
    cache = init_cache(model, B, P + max_new_tokens)
    key_mask_BxT = jnp.concatenate([mask_BxP, jnp.ones((B, max_new_tokens), mask_BxP.dtype)], 1)
    positions_BxP = positions_from_mask(mask_BxP)
    logits_BxV, cache = _last_logits(model, params, cache, ids_BxP, key_mask_BxT, positions_BxP,
                                     vocab_limit)
    first_B = next_token(step_keys(keys_B, 0), logits_BxV, sampling)
    next_pos_B = positions_BxP[:, -1] + 1
    stops = jnp.asarray(stop_ids if stop_ids else (-1,), jnp.int32)
    out_BxN = jnp.full((B, max_new_tokens), pad_id, jnp.int32)

    def cond(carry: tuple) -> Array:
        i, _, done_B, _, _ = carry
        return (i < max_new_tokens) & ~jnp.all(done_B)

    def body(carry: tuple) -> tuple:
        i, token_B, done_B, cache, out_BxN = carry
        out_BxN = out_BxN.at[:, i].set(jnp.where(done_B, pad_id, token_B))
        done_B = done_B | jnp.isin(token_B, stops)
        positions_Bx1 = (next_pos_B + i)[:, None]
        logits_BxV, cache = _last_logits(model, params, cache, token_B[:, None], key_mask_BxT,
                                         positions_Bx1, vocab_limit)
        token_B = next_token(step_keys(keys_B, i + 1), logits_BxV, sampling)
        return i + 1, token_B, done_B, cache, out_BxN

    init = (jnp.zeros((), jnp.int32), first_B, jnp.zeros((B,), bool), cache, out_BxN)
    return jax.lax.while_loop(cond, body, init)[-1]
