"""The 16-bit dropout mask: its keep rate, unbiasedness, independence and edge cases."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from scipy import stats

from bertjax.layers.dropout import Dropout, keep_mask, keep_threshold

pytestmark = pytest.mark.unit  # the unit tier: make test-unit


def apply(rate: float, x: jax.Array, seed: int = 0, deterministic: bool = False) -> jax.Array:
    return Dropout(rate).apply({}, x, deterministic, rngs={"dropout": jax.random.key(seed)})


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_kept_fraction_matches_the_rate(rate: float) -> None:
    shape = (7, 12, 129, 131)  # odd sizes: the last 32-bit word is half used
    n = int(np.prod(shape))
    kept = int(keep_mask(jax.random.key(1), rate, shape).sum())
    p = keep_threshold(rate) / 2**16
    assert abs(p - (1 - rate)) <= 2**-17
    assert stats.binomtest(kept, n, p).pvalue > 1e-4


def test_both_halves_of_a_word_are_independent_draws() -> None:
    # Even and odd elements of a row come from the low and the high 16 bits of the same words:
    # each keeps at the rate, and one says nothing about the other (chi-square on 2x2 counts).
    size = 200_000
    mask = np.asarray(keep_mask(jax.random.key(2), 0.5, (4, size // 4))).reshape(-1)
    low, high = mask[0::2], mask[1::2]
    table = np.array([[np.sum(low & high), np.sum(low & ~high)],
                      [np.sum(~low & high), np.sum(~low & ~high)]])
    assert stats.chi2_contingency(table).pvalue > 1e-4
    assert stats.binomtest(int(low.sum()), low.size, 0.5).pvalue > 1e-4


def test_output_is_unbiased_and_kept_values_are_scaled() -> None:
    x = jnp.full((256, 1024), 3.0)
    y = np.asarray(apply(0.1, x))
    kept = y[y != 0]
    np.testing.assert_allclose(kept, 3.0 * 2**16 / keep_threshold(0.1), rtol=1e-6)
    # mean 3 within 4.5 standard errors of the per-element variance 9 * (1 - p) / p
    p = keep_threshold(0.1) / 2**16
    stderr = np.sqrt(9.0 * (1 - p) / p / y.size)
    assert abs(y.mean() - 3.0) < 4.5 * stderr


def test_masks_differ_by_key_and_repeat_for_the_same_key() -> None:
    x = jnp.ones((64, 64))
    np.testing.assert_array_equal(apply(0.3, x, seed=5), apply(0.3, x, seed=5))
    assert not np.array_equal(apply(0.3, x, seed=5), apply(0.3, x, seed=6))


def test_deterministic_zero_and_full_rates() -> None:
    x = jnp.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(apply(0.5, x, deterministic=True), x)
    np.testing.assert_array_equal(apply(0.0, x), x)
    np.testing.assert_array_equal(apply(1.0, x), jnp.zeros_like(x))
    grad = jax.grad(lambda v: apply(1.0, v).sum())(x)
    assert np.all(np.isfinite(grad))


def test_keeps_the_input_dtype() -> None:
    x = jnp.ones((8, 8), jnp.bfloat16)
    assert apply(0.1, x).dtype == jnp.bfloat16


def test_a_batch_sharded_mask_is_drawn_shard_by_shard() -> None:
    # Each of 8 devices draws only the words of its own rows: no collective, and no array of
    # the global mask's size in the per-device program (BERT's attention dropout is B*H*L*L).
    mesh = jax.make_mesh((8,), ("data",))
    batch = NamedSharding(mesh, P("data"))
    x = jax.device_put(jnp.ones((64, 12, 32, 32)), batch)
    mask_of = jax.jit(lambda key, x: keep_mask(key, 0.1, x.shape), out_shardings=batch)
    program = mask_of.lower(jax.random.key(0), x).compile().as_text()
    assert not re.search(r"all-gather|all-to-all|collective-permute|all-reduce", program)
    assert "u32[8,12,32,16]" in program and "u32[64,12,32,16]" not in program
    # and the values do not depend on the sharding
    np.testing.assert_array_equal(mask_of(jax.random.key(0), x),
                                  keep_mask(jax.random.key(0), 0.1, x.shape))
