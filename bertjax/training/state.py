"""Training state: one pytree holding everything a resume needs from the device side."""

from collections.abc import Mapping

import flax.struct
import jax
import optax

from bertjax.typing import Params


@flax.struct.dataclass
class TrainState:
    """step, parameters, optimizer state, the base RNG key (raw uint32 key data) and the
    state a step hands to the next (`carry`: ELMo's LSTM state in stream mode, else empty)."""

    step: jax.Array
    params: Params
    opt_state: optax.OptState
    rng: jax.Array
    carry: dict[str, jax.Array]


def create_state(params: Params, tx: optax.GradientTransformation, seed: int,
                 carry: Mapping[str, jax.Array] | None = None) -> TrainState:
    """Fresh state at step 0 for `params` (and the initial `carry`)."""
    return TrainState(
        step=jax.numpy.zeros((), jax.numpy.int32),
        params=params,
        opt_state=tx.init(params),
        rng=jax.random.key_data(jax.random.key(seed)),
        carry=dict(carry or {}),
    )
