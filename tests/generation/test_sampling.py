"""Sampling: top-k / top-p never leave their allowed sets, and draw in the right proportions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from bertjax.generation.sampling import GenerationError, Sampling, allowed_logits, next_token

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

PROBS = np.array([0.3, 0.2, 0.15, 0.1, 0.08, 0.07, 0.05, 0.03, 0.015, 0.005])
ORDER = np.random.default_rng(0).permutation(len(PROBS))  # token ids of PROBS[0], PROBS[1], ...
DRAWS = 20_000


def _draws(sampling, seed=0):
    probs = np.zeros(len(PROBS))
    probs[ORDER] = PROBS
    logits = jnp.log(jnp.asarray(probs, jnp.float32))[None].repeat(DRAWS, 0)
    keys = jax.random.split(jax.random.key(seed), DRAWS)  # one key per row
    return np.asarray(jax.jit(next_token, static_argnums=2)(keys, logits, sampling))


def _check(sampling, allowed_ranks, weights):
    tokens = _draws(sampling)
    allowed = set(ORDER[list(allowed_ranks)].tolist())
    assert set(tokens.tolist()) <= allowed  # never outside the allowed set
    if len(allowed) == 1:
        return
    counts = np.array([(tokens == ORDER[r]).sum() for r in allowed_ranks])
    expected = np.asarray(weights) / np.sum(weights) * DRAWS
    p_value = stats.chisquare(counts, expected).pvalue
    assert p_value > 1e-4, (counts, expected.round())  # a wrong rule fails with p ~ 0


def test_top_k_samples_the_k_most_likely_in_proportion():
    _check(Sampling(top_k=3), range(3), PROBS[:3])


def test_top_p_samples_the_smallest_set_reaching_p():
    # cumulative 0.3, 0.5, 0.65, 0.75: p = 0.7 keeps four tokens, p = 0.6 three
    _check(Sampling(top_p=0.7), range(4), PROBS[:4])
    _check(Sampling(top_p=0.6), range(3), PROBS[:3])
    _check(Sampling(top_p=0.1), range(1), PROBS[:1])  # always at least one token


def test_top_k_and_top_p_together_and_temperature():
    _check(Sampling(top_k=2, top_p=0.9), range(2), PROBS[:2])
    _check(Sampling(temperature=0.5), range(10), PROBS**2)  # p^(1/T)
    _check(Sampling(temperature=1.0), range(10), PROBS)


def test_greedy_is_argmax_and_filters_mask_the_rest():
    logits = jnp.log(jnp.asarray([[0.1, 0.6, 0.3]]))
    keys = jax.random.split(jax.random.key(0), 1)
    assert int(next_token(keys, logits, Sampling(temperature=0.0))[0]) == 1
    masked = np.asarray(allowed_logits(logits, Sampling(top_k=2)))
    assert np.isneginf(masked[0, 0]) and np.isfinite(masked[0, 1:]).all()


@pytest.mark.parametrize("kwargs,match", [
    (dict(temperature=-0.5), "temperature"),
    (dict(top_k=0), "top_k"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
])
def test_bad_settings_fail_with_one_line(kwargs, match):
    with pytest.raises(GenerationError, match=match) as err:
        Sampling(**kwargs)
    assert "\n" not in str(err.value)


def test_each_row_draws_with_its_own_key_only():
    logits = jnp.zeros((4, 50))  # uniform: every draw is the key's alone
    keys = jax.random.split(jax.random.key(0), 4)
    tokens = np.asarray(next_token(keys, logits, Sampling()))
    for row in range(4):  # a row alone, or beside other rows, draws the same token
        assert next_token(keys[row:row + 1], logits[:1], Sampling())[0] == tokens[row]
    reordered = np.asarray(next_token(keys[::-1], logits, Sampling()))
    np.testing.assert_array_equal(reordered, tokens[::-1])
    assert len(set(tokens.tolist())) > 1  # the rows' keys differ, and so do their draws
