"""Next-token choice: greedy, or sampling with temperature, top-k and top-p (nucleus).

`allowed_logits` sets every token outside the allowed set to -inf, so no sampler can pick
one: top-k keeps the k most likely tokens; top-p keeps the most likely tokens whose
probabilities, taken in decreasing order, first reach p (always at least one token).
"""

import dataclasses

import jax
import jax.numpy as jnp

Array = jax.Array


class GenerationError(ValueError):
    """A generation setting or prompt that cannot be used; the message names the fix."""


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How the next token is chosen. temperature 0 means greedy (top_k / top_p unused)."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        if not self.temperature >= 0:  # also rejects NaN
            raise GenerationError(
                f"temperature={self.temperature} is negative: use 0 for greedy decoding or a "
                "positive --temperature"
            )
        if self.top_k is not None and self.top_k < 1:
            raise GenerationError(
                f"top_k={self.top_k} is below 1: use --top_k >= 1, or leave it unset to "
                "sample from the whole vocabulary"
            )
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise GenerationError(
                f"top_p={self.top_p} is outside (0, 1]: use e.g. --top_p=0.9, or 1 to disable"
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


GREEDY = Sampling(temperature=0.0)


def allowed_logits(logits_BxV: Array, sampling: Sampling) -> Array:
    """float32 logits / temperature, -inf outside the top-k and top-p sets."""
    logits_BxV = logits_BxV.astype(jnp.float32) / max(sampling.temperature, 1e-6)
    if sampling.top_k is not None and sampling.top_k < logits_BxV.shape[-1]:
        kth_Bx1 = jax.lax.top_k(logits_BxV, sampling.top_k)[0][:, -1:]
        logits_BxV = jnp.where(logits_BxV < kth_Bx1, -jnp.inf, logits_BxV)
    if sampling.top_p is not None and sampling.top_p < 1:
        sorted_BxV = jnp.sort(logits_BxV, axis=-1)[:, ::-1]  # descending
        probs_BxV = jax.nn.softmax(sorted_BxV, axis=-1)
        before_BxV = jnp.cumsum(probs_BxV, axis=-1) - probs_BxV  # mass of the more likely
        kept_B = jnp.maximum((before_BxV < sampling.top_p).sum(-1), 1)
        threshold_Bx1 = jnp.take_along_axis(sorted_BxV, kept_B[:, None] - 1, axis=-1)
        logits_BxV = jnp.where(logits_BxV < threshold_Bx1, -jnp.inf, logits_BxV)
    return logits_BxV


def next_token(keys_B: Array, logits_BxV: Array, sampling: Sampling) -> Array:
    """Token ids [B]: argmax when greedy, else row b's draw from its allowed set with its own
    key keys_B[b], so a row's token never depends on the other rows or on the batch size."""
    if sampling.greedy:
        return jnp.argmax(logits_BxV, axis=-1).astype(jnp.int32)
    allowed_BxV = allowed_logits(logits_BxV, sampling)
    return jax.vmap(jax.random.categorical)(keys_B, allowed_BxV).astype(jnp.int32)
