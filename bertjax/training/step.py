"""Pure train and eval steps. The loop jits them once with shardings; nothing here jits."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from bertjax.training.state import TrainState

Array = jax.Array
LossFn = Callable[[Any, dict[str, Array], Array | None], tuple[Array, dict[str, Array]]]


def _grads_and_metrics(
    loss_fn: LossFn, params: Any, batch: dict[str, Array], rng: Array, accum_steps: int
) -> tuple[Any, dict[str, Array]]:
    """Gradients averaged over `accum_steps` micro-batches, scanned so memory is one micro-batch.

    Micro-batch i takes examples i, i + accum_steps, ... so each device keeps its own slice of
    the batch and no data moves between devices.
    """
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    if accum_steps == 1:
        (_, metrics), grads = grad_fn(params, batch, rng)
        return grads, metrics

    def split(x: Array) -> Array:
        x = x.reshape(x.shape[0] // accum_steps, accum_steps, *x.shape[1:])
        return jnp.swapaxes(x, 0, 1)

    micro_batches = jax.tree.map(split, batch)

    def accumulate(carry: tuple, xs: tuple) -> tuple:
        index, micro_batch = xs
        (_, metrics), grads = grad_fn(params, micro_batch, jax.random.fold_in(rng, index))
        return jax.tree.map(jnp.add, carry, (grads, metrics)), None

    first = jax.tree.map(lambda x: x[0], micro_batches)
    zeros = jax.tree.map(
        lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(grad_fn, params, first, rng)
    )
    zero_grads, zero_metrics = zeros[1], zeros[0][1]
    (grads, metrics), _ = jax.lax.scan(
        accumulate, (zero_grads, zero_metrics), (jnp.arange(accum_steps), micro_batches)
    )
    scale = 1.0 / accum_steps
    return jax.tree.map(lambda g: g * scale, grads), jax.tree.map(lambda m: m * scale, metrics)


def train_step(
    state: TrainState,
    batch: dict[str, Array],
    *,
    loss_fn: LossFn,
    tx: optax.GradientTransformation,
    accum_steps: int = 1,
) -> tuple[TrainState, dict[str, Array]]:
    """One optimizer step. Dropout key = fold_in(base key, step), so a resume replays exactly.

    A carried state enters the loss inside the batch and leaves it in the metrics, under the
    carry's keys (see objectives.objective.Carry); it never carries gradients back.
    """
    rng = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
    inputs = {**batch, **state.carry}
    grads, metrics = _grads_and_metrics(loss_fn, state.params, inputs, rng, accum_steps)
    carry = {key: metrics.pop(key) for key in state.carry}
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    grad_norm = optax.tree.norm(grads)
    # A step whose loss, gradients or new parameters are not finite changes nothing but the
    # step count: the loop counts these skips and stops as train.nonfinite says.
    param_norm = optax.tree.norm(params)
    finite = (jnp.isfinite(grad_norm) & jnp.isfinite(param_norm)
              & jnp.isfinite(metrics.get("loss", 0.0)))
    keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)  # noqa
    params, opt_state = keep(params, state.params), keep(opt_state, state.opt_state)
    carry = keep(carry, state.carry)
    # No update norm: reading `updates` after the in-place parameter update makes XLA copy
    # every parameter buffer each step (440 MB at BERT-base, benchmarks/README.md).
    metrics = {
        **metrics,
        "grad_norm": grad_norm,
        "param_norm": param_norm,
        "nonfinite": 1.0 - finite.astype(jnp.float32),
    }
    new_state = state.replace(
        step=state.step + 1, params=params, opt_state=opt_state, carry=carry
    )
    return new_state, metrics


def eval_step(state: TrainState, batch: dict[str, Array], *, loss_fn: LossFn) -> dict[str, Array]:
    """Metrics of a deterministic forward pass (no dropout)."""
    _, metrics = loss_fn(state.params, batch, None)
    return metrics
