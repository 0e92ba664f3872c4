"""Pure train and eval steps. The loop jits them once with shardings; nothing here jits.

A step whose loss or gradients are not finite changes nothing but the step count. The guard
reads the gradient norm and the loss, which the step has before the update, and runs the
optimizer update under `lax.cond` only when both are finite: XLA then writes parameters and
moments in place, one pass over each. (Updating and then selecting between old and new state,
`StepOptions(skip_by_cond=False)`, computes the same bits but keeps the old state alive beside
the in-place writes, so XLA copies every donated parameter and moment at the start of the
step; checking the norm of the new parameters as well, `check_new_params=True`, makes XLA
materialise the new parameters and moments and reduce them before it can select: a second
pass over all of them.) The parameter norm is logged by the loop on logging steps only
(`param_norm`).
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax

from bertjax.objectives.objective import Loss, Metrics, metric_values
from bertjax.training.state import TrainState
from bertjax.typing import Params

Array = jax.Array
DROPOUT_RNGS = ("threefry", "rbg", "unsafe_rbg")


@dataclasses.dataclass(frozen=True)
class StepOptions:
    """How the train step is built; each field is a lever benchmarks/accelerator_step.py times
    on and off.

    `dropout_rng`: the generator of the dropout bits. "threefry" (JAX's default: counter-based,
    the same bits on any mesh), or "rbg" / "unsafe_rbg" (XLA's RngBitGenerator, Philox on GPUs
    and the TPU's hardware generator: far cheaper per bit on accelerators, as MaxText uses;
    the bits depend on how the step is partitioned). The key of step n is derived from the
    run's threefry key and n either way, so checkpoints do not change and a run resumed on
    the same mesh replays exactly.
    `skip_by_cond`: skip a non-finite step's optimizer update with `lax.cond` (in-place
    update); False: update, then select old state where the step is not finite (the same
    bits, with a copy of the donated state each step; see the module docstring).
    `check_new_params`: also skip a step whose new parameters are not finite (the guard
    bertjax had before; costs a pass over parameters and moments, and selects).
    """

    dropout_rng: str = "threefry"
    skip_by_cond: bool = True
    check_new_params: bool = False

    def __post_init__(self) -> None:
        if self.dropout_rng not in DROPOUT_RNGS:
            raise ValueError(f"train.dropout_rng is {self.dropout_rng!r}: set it to one of "
                             f"{', '.join(DROPOUT_RNGS)}")


def step_key(rng_data: Array, step: Array, dropout_rng: str = "threefry") -> Array:
    """The dropout key of `step`: fold_in(the run's threefry key, step), as an "rbg" or
    "unsafe_rbg" key made of that key's bits where the options ask for one."""
    key = jax.random.fold_in(jax.random.wrap_key_data(rng_data), step)
    if dropout_rng == "threefry":
        return key
    return jax.random.wrap_key_data(jax.random.bits(key, (4,), jnp.uint32), impl=dropout_rng)


def _grads_and_sums(
    loss: Loss, params: Params, batch: dict[str, Array], rng: Array, accum_steps: int
) -> tuple[Params, Metrics]:
    """Gradients of the batch's loss and its metrics' sums, over `accum_steps` micro-batches
    scanned so memory is one micro-batch.

    Each micro-batch's totals are divided by the whole batch's weights (`loss.weights`, read
    from the data), so the micro-batches' losses and gradients add up to the full batch's
    (a weighted mean over masked positions or packed slots is not the mean of the
    micro-batches' means), and the metrics' sums add up to the batch's sums. Micro-batch i
    takes examples i, i + accum_steps, ... so each device keeps its own slice of the batch
    and no data moves between devices.
    """

    def share(params: Params, batch: dict[str, Array], rng: Array,
              weights: dict[str, Array] | None) -> tuple[Array, Metrics]:
        sums = loss.sums(params, batch, rng)
        return loss.total(sums, weights), sums

    grad_fn = jax.value_and_grad(share, has_aux=True)
    if accum_steps == 1:
        (_, sums), grads = grad_fn(params, batch, rng, None)
        return grads, sums

    def split(x: Array) -> Array:
        x = x.reshape(x.shape[0] // accum_steps, accum_steps, *x.shape[1:])
        return jnp.swapaxes(x, 0, 1)

    weights = loss.weights(batch)
    micro_batches = jax.tree.map(split, batch)

    def accumulate(carry: tuple, xs: tuple) -> tuple:
        index, micro_batch = xs
        (_, sums), grads = grad_fn(params, micro_batch, jax.random.fold_in(rng, index), weights)
        return jax.tree.map(jnp.add, carry, (grads, sums)), None

    first = jax.tree.map(lambda x: x[0], micro_batches)
    (_, zero_sums), zero_grads = jax.tree.map(
        lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(grad_fn, params, first, rng, weights)
    )
    (grads, sums), _ = jax.lax.scan(
        accumulate, (zero_grads, zero_sums), (jnp.arange(accum_steps), micro_batches)
    )
    return grads, sums


def _keep_if_finite(finite: Array, new: Any, old: Any) -> Any:
    """`new` where the step is finite, else `old`, leaf by leaf."""
    return jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)


def train_step(
    state: TrainState,
    batch: dict[str, Array],
    *,
    loss_fn: Loss,
    tx: optax.GradientTransformation,
    accum_steps: int = 1,
    options: StepOptions = StepOptions(),
) -> tuple[TrainState, dict[str, Array]]:
    """One optimizer step. Dropout key = fold_in(base key, step), so a resume replays exactly.

    A carried state enters the loss inside the batch and leaves it in the metrics, under the
    carry's keys (see objectives.objective.Carry); it never carries gradients back.
    """
    rng = step_key(state.rng, state.step, options.dropout_rng)
    inputs = {**batch, **state.carry}
    grads, sums = _grads_and_sums(loss_fn, state.params, inputs, rng, accum_steps)
    carry = {key: sums.pop(key) for key in state.carry}
    metrics = {**metric_values(sums), "loss": loss_fn.total(sums)}
    with jax.named_scope("nonfinite_guard"):
        # A step whose loss or gradients are not finite changes nothing but the step count:
        # the loop counts these skips and stops as train.nonfinite says.
        grad_norm = optax.tree.norm(grads)
        finite = jnp.isfinite(grad_norm) & jnp.isfinite(metrics["loss"])

    def update(operands: tuple) -> tuple[Params, optax.OptState]:
        params, opt_state, grads = operands
        with jax.named_scope("optimizer"):
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

    operands = (state.params, state.opt_state, grads)
    if options.skip_by_cond and not options.check_new_params:
        params, opt_state = jax.lax.cond(finite, update, lambda o: (o[0], o[1]), operands)
    else:  # update, then keep the old state where the step is not finite
        params, opt_state = update(operands)
        with jax.named_scope("nonfinite_guard"):
            if options.check_new_params:
                param_norm = optax.tree.norm(params)
                finite = finite & jnp.isfinite(param_norm)
            params, opt_state = _keep_if_finite(finite, (params, opt_state),
                                                (state.params, state.opt_state))
    carry = _keep_if_finite(finite, carry, state.carry)
    # No update norm: reading `updates` after the in-place parameter update makes XLA copy
    # every parameter buffer each step (440 MB at BERT-base, benchmarks/README.md).
    metrics = {
        **metrics,
        "grad_norm": grad_norm,
        "nonfinite": 1.0 - finite.astype(jnp.float32),
    }
    if options.check_new_params:
        metrics["param_norm"] = param_norm
    new_state = state.replace(
        step=state.step + 1, params=params, opt_state=opt_state, carry=carry
    )
    return new_state, metrics


def eval_step(state: TrainState, batch: dict[str, Array], *, loss_fn: Loss) -> dict[str, Array]:
    """Metrics of a deterministic forward pass (no dropout)."""
    _, metrics = loss_fn(state.params, batch, None)
    return metrics
