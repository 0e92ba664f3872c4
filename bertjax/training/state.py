"""Training state: one pytree holding everything a resume needs from the device side."""

from typing import Any

import flax.struct
import jax
import optax


@flax.struct.dataclass
class TrainState:
    """step, parameters, optimizer state and the base RNG key (raw uint32 key data)."""

    step: jax.Array
    params: Any
    opt_state: optax.OptState
    rng: jax.Array


def create_state(params: Any, tx: optax.GradientTransformation, seed: int) -> TrainState:
    """Fresh state at step 0 for `params`."""
    return TrainState(
        step=jax.numpy.zeros((), jax.numpy.int32),
        params=params,
        opt_state=tx.init(params),
        rng=jax.random.key_data(jax.random.key(seed)),
    )
