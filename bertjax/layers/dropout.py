"""Dropout that draws 16 random bits per element instead of flax's 32.

The keep mask of every dropout in bertjax comes from here. On CPU the counter-based
generator (threefry) is a large share of a training step: BERT's attention dropout alone
draws B*H*L*L numbers per layer. Each 32-bit random word here gives two neighbouring
elements their 16-bit uniforms, halving that work. An element is kept when its uniform is below
`round(keep * 2**16)`, so the keep probability is that threshold / 2**16 (within 2**-17 of
`1 - rate`), and kept values are scaled by its inverse: the layer is unbiased exactly.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array

_LEVELS = 1 << 16


def keep_threshold(rate: float) -> int:
    """The 16-bit threshold below which an element is kept, for a dropout `rate` in [0, 1)."""
    return max(1, round((1.0 - rate) * _LEVELS))


def keep_mask(key: Array, rate: float, shape: tuple[int, ...]) -> Array:
    """Boolean mask of `shape`, True with probability keep_threshold(rate) / 2**16.

    Word j of a row gives the row's elements 2j (low half) and 2j + 1 (high half), so the
    draw is laid out like the mask itself: under a sharded jit each device draws only the
    words of its own shard (threefry is partitionable), with no gather of a global mask.
    """
    if not shape:
        return keep_mask(key, rate, (1,)).reshape(())
    *lead, n = shape
    words = jax.random.bits(key, (*lead, (n + 1) // 2), jnp.uint32)
    halves = jnp.stack([words & 0xFFFF, words >> 16], axis=-1).reshape(*lead, -1)[..., :n]
    return halves < keep_threshold(rate)


class Dropout(nn.Module):
    """Inverted dropout: zero each element with probability ~`rate`, scale the rest.

    A drop-in for `flax.linen.Dropout(rate)(x, deterministic=...)` (rng collection
    "dropout"); see the module docstring for the exact keep probability."""

    rate: float

    @nn.compact
    def __call__(self, x: Array, deterministic: bool) -> Array:
        if deterministic or self.rate == 0.0:
            return x
        if self.rate >= 1.0:
            return jnp.zeros_like(x)
        keep = keep_mask(self.make_rng("dropout"), self.rate, x.shape)
        scale = _LEVELS / keep_threshold(self.rate)
        return jnp.where(keep, x * jnp.asarray(scale, x.dtype), jnp.zeros_like(x))
