"""The small classifier of the feature-based approach: multinomial logistic regression on
frozen features, the same for every family, so differences come from the features.

    probe = fit_probe(train_NxD, train_labels, seed=0)
    probe.accuracy(test_MxD, test_labels)

Features are standardised with the training set's mean and deviation; the L2 weight is chosen
among `L2_GRID` on a held-out tenth of the training rows (never the evaluation rows), then the
classifier is refitted on all of them. Full-batch L-BFGS (optax) to convergence: no learning
rate or epochs to tune, and the same rows give the same classifier whatever the seed, apart
from the held-out split the seed draws.

Sentence pairs read [u; v; |u - v|; u * v] of the two texts' features (`pair_features`), as
InferSent and SentEval combine frozen sentence vectors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

L2_GRID = (1e-4, 1e-3, 1e-2)
MAX_ITERATIONS = 300


def pair_features(u_NxD: np.ndarray, v_NxD: np.ndarray) -> np.ndarray:
    """[u; v; |u - v|; u * v] per pair: [N, 4D]."""
    return np.concatenate([u_NxD, v_NxD, np.abs(u_NxD - v_NxD), u_NxD * v_NxD], axis=-1)


@jax.jit(static_argnames="classes")
def _solve(x_NxD: jax.Array, y_N: jax.Array, weights_N: jax.Array, l2: jax.Array,
           classes: int) -> tuple[jax.Array, jax.Array]:
    """Weights [D, C] and bias [C] minimising the weighted mean cross-entropy + l2 * |W|^2.
    Row weights (0 leaves a row out) keep one compiled program for every fit of a data set."""

    def loss(params: tuple[jax.Array, jax.Array]) -> jax.Array:
        w_DxC, b_C = params
        nll_N = optax.softmax_cross_entropy_with_integer_labels(x_NxD @ w_DxC + b_C, y_N)
        return jnp.sum(weights_N * nll_N) / jnp.sum(weights_N) + l2 * jnp.sum(w_DxC**2)

    solver = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(loss)

    def step(carry: tuple, _: None) -> tuple:
        params, state = carry
        value, grad = value_and_grad(params, state=state)
        updates, state = solver.update(grad, state, params, value=value, grad=grad,
                                       value_fn=loss)
        return (optax.apply_updates(params, updates), state), None

    params = (jnp.zeros((x_NxD.shape[1], classes), jnp.float32),
              jnp.zeros((classes,), jnp.float32))
    (params, _), _ = jax.lax.scan(step, (params, solver.init(params)), None,
                                  length=MAX_ITERATIONS)
    return params


def _fit(x_NxD: np.ndarray, y_N: np.ndarray, weights_N: np.ndarray, classes: int,
         l2: float) -> tuple[np.ndarray, np.ndarray]:
    w, b = _solve(jnp.asarray(x_NxD, jnp.float32), jnp.asarray(y_N, jnp.int32),
                  jnp.asarray(weights_N, jnp.float32), jnp.float32(l2), classes)
    return np.asarray(w), np.asarray(b)


@dataclasses.dataclass(frozen=True)
class Probe:
    """A fitted classifier: standardisation (mean, scale: [D]), weights [D, C] and bias [C],
    the L2 weight chosen and its held-out accuracy."""

    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: np.ndarray
    l2: float
    heldout_accuracy: float

    def predict(self, x_NxD: np.ndarray) -> np.ndarray:
        """Class ids [N]."""
        z_NxD = (np.asarray(x_NxD, np.float32) - self.mean) / self.scale
        return np.argmax(z_NxD @ self.weights + self.bias, axis=-1)

    def accuracy(self, x_NxD: np.ndarray, y_N: Sequence[int]) -> float:
        return float(np.mean(self.predict(x_NxD) == np.asarray(y_N)))


def fit_probe(x_NxD: np.ndarray, y_N: Sequence[int], seed: int = 0,
              l2_grid: Sequence[float] = L2_GRID, held_out: np.ndarray | None = None,
              refit_all: bool = True) -> Probe:
    """Standardise, choose the L2 weight on held-out rows (`held_out`, a boolean [N] mask, or
    a tenth drawn with `seed`), then refit on every row (`refit_all`) or on the rows that
    were not held out (so a study's arms all fit on the same rows)."""
    x = np.asarray(x_NxD, np.float32)
    y = np.asarray(y_N, np.int64)
    if x.ndim != 2 or len(x) != len(y) or len(x) < 10:
        raise ValueError(f"features {x.shape} and {len(y)} labels: give [N, D] features and N "
                         "labels, N >= 10")
    classes = int(y.max()) + 1
    mean, scale = x.mean(0), x.std(0) + 1e-6
    z = (x - mean) / scale
    if held_out is None:
        held = np.zeros(len(z), bool)
        held[np.random.default_rng(seed).permutation(len(z))[:len(z) // 10]] = True
    else:
        held = np.asarray(held_out, bool)
        if held.shape != (len(z),) or held.all() or not held.any():
            raise ValueError(f"held_out has shape {held.shape} with {int(held.sum())} rows "
                             f"held: give a boolean mask over the {len(z)} rows holding some, "
                             "not all")
    scores = {}
    for l2 in l2_grid:
        w, b = _fit(z, y, (~held).astype(np.float32), classes, l2)
        predicted = np.argmax(z[held] @ w + b, axis=-1)
        scores[l2] = float(np.mean(predicted == y[held]))
    best = max(l2_grid, key=lambda l2: (scores[l2], l2))  # ties: the stronger regulariser
    weights = np.ones(len(z), np.float32) if refit_all else (~held).astype(np.float32)
    w, b = _fit(z, y, weights, classes, best)
    return Probe(mean, scale, w, b, best, scores[best])
