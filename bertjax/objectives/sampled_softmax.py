"""Sampled softmax (Jean et al. 2015) with TensorFlow's log-uniform (Zipfian) sampler, as
bilm-tf trains over an 800k-word vocabulary with `tf.nn.sampled_softmax_loss`.

    Q(k) = log((k + 2) / (k + 1)) / log(V + 1)      ids sorted by decreasing frequency
    logits = [h.W_t + b_t - log E_t,  h.W_s + b_s - log E_s for the S sampled ids s]
    loss = cross-entropy with the true class first; a sampled id equal to the target is masked

E is the expected number of times an id appears in the sample: S Q(k) when sampling with
replacement; 1 - (1 - Q(k))^n for S distinct ids (TF's unique=True, the default), where n is
the number of draws that yields S distinct ids. TF counts n while rejecting repeats; here the
S distinct ids come from one Gumbel top-k over log Q (the same distribution as drawing until S
are distinct) and n is the draw count at which S distinct ids are expected.
One sample serves the whole batch, so the cost is [N, S] logits instead of [N, V].
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array
_MASKED = -1e9  # logit of an accidental hit (a sampled id equal to the target)


def log_uniform_log_prob(ids: Array, vocab_size: int) -> Array:
    """log Q(k) of the log-uniform distribution over [0, vocab_size)."""
    ids = ids.astype(jnp.float32)
    return jnp.log(jnp.log1p(1.0 / (ids + 1.0))) - jnp.log(jnp.log(vocab_size + 1.0))


@functools.lru_cache(maxsize=16)
def _draws_for_distinct(num_sampled: int, vocab_size: int, iters: int = 60) -> float:
    """n with sum_k 1 - (1 - Q(k))^n == num_sampled (bisection in log n; numpy, once)."""
    ids = np.arange(vocab_size, dtype=np.float64)
    log1m_q_V = np.log1p(-np.log1p(1.0 / (ids + 1.0)) / np.log(vocab_size + 1.0))
    lo, hi = np.log(num_sampled), np.log(num_sampled) + 30.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if np.sum(-np.expm1(np.exp(mid) * log1m_q_V)) < num_sampled:
            lo = mid
        else:
            hi = mid
    return float(np.exp(0.5 * (lo + hi)))


def sample_log_uniform(
    rng: Array, num_sampled: int, vocab_size: int, unique: bool = True
) -> tuple[Array, Array]:
    """S sampled ids and a function of ids giving log E (see the module docstring)."""
    if unique:
        if num_sampled > vocab_size:
            raise ValueError(f"cannot sample {num_sampled} distinct ids from {vocab_size}: set "
                             "elmo_pretraining.num_sampled below the vocabulary size")
        log_q_V = log_uniform_log_prob(jnp.arange(vocab_size), vocab_size)
        _, sampled_S = jax.lax.top_k(log_q_V + jax.random.gumbel(rng, (vocab_size,)), num_sampled)
        draws = _draws_for_distinct(num_sampled, vocab_size)

        def log_expected(ids: Array) -> Array:
            q = jnp.exp(log_uniform_log_prob(ids, vocab_size))
            return jnp.log(-jnp.expm1(draws * jnp.log1p(-q)))

    else:  # TF's LogUniformSampler: floor(exp(u log(V + 1))) - 1
        u = jax.random.uniform(rng, (num_sampled,))
        sampled_S = jnp.floor(jnp.exp(u * jnp.log(vocab_size + 1.0))).astype(jnp.int32) - 1
        sampled_S = jnp.clip(sampled_S, 0, vocab_size - 1)

        def log_expected(ids: Array) -> Array:
            return jnp.log(float(num_sampled)) + log_uniform_log_prob(ids, vocab_size)

    return sampled_S.astype(jnp.int32), log_expected


def sampled_softmax_xent(
    h_NxP: Array,
    targets_N: Array,
    kernel_VxP: Array,
    bias_V: Array,
    rng: Array,
    num_sampled: int,
    unique: bool = True,
) -> Array:
    """Per-position sampled-softmax cross-entropy [N] (float32)."""
    V = kernel_VxP.shape[0]
    sampled_S, log_expected = sample_log_uniform(rng, num_sampled, V, unique)
    sampled_S = jax.lax.stop_gradient(sampled_S)
    h_NxP = h_NxP.astype(jnp.float32)
    w_true_NxP = jnp.take(kernel_VxP, targets_N, axis=0).astype(jnp.float32)
    true_N = jnp.sum(h_NxP * w_true_NxP, -1) + bias_V[targets_N] - log_expected(targets_N)
    w_S_SxP = jnp.take(kernel_VxP, sampled_S, axis=0).astype(jnp.float32)
    sampled_NxS = h_NxP @ w_S_SxP.T + bias_V[sampled_S] - log_expected(sampled_S)
    sampled_NxS = jnp.where(sampled_S[None, :] == targets_N[:, None], _MASKED, sampled_NxS)
    logits_NxS1 = jnp.concatenate([true_N[:, None], sampled_NxS], axis=1)
    return jax.nn.logsumexp(logits_NxS1, axis=1) - true_N
