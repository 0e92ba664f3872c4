"""Optimizers as in the BERT paper: AdamW with warmup + linear decay, or LAMB for big batches."""

import flax
import jax
import optax

NO_DECAY_NAMES = ("bias", "scale", "mlm_bias")  # biases and LayerNorm parameters


def decay_mask(params: dict) -> dict:
    """True for parameters that get weight decay: not LayerNorm parameters, not biases."""
    flat = flax.traverse_util.flatten_dict(params)
    mask = {path: path[-1] not in NO_DECAY_NAMES for path in flat}
    return flax.traverse_util.unflatten_dict(mask)


def warmup_linear_decay(peak: float, warmup_steps: int, total_steps: int) -> optax.Schedule:
    """Linear warmup from 0 to `peak`, then linear decay to 0 at `total_steps`."""
    warmup = optax.linear_schedule(0.0, peak, max(warmup_steps, 1))
    decay = optax.linear_schedule(peak, 0.0, max(total_steps - warmup_steps, 1))
    return optax.join_schedules([warmup, decay], [warmup_steps])


def make_optimizer(
    name: str = "adamw",
    learning_rate: float = 1e-4,
    warmup_steps: int = 10_000,
    total_steps: int = 1_000_000,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-6,
    weight_decay: float = 0.01,
    clip_norm: float | None = 1.0,
) -> optax.GradientTransformation:
    """The optimizer for pretraining; `name` is "adamw" (paper) or "lamb" (large batches)."""
    schedule = warmup_linear_decay(learning_rate, warmup_steps, total_steps)
    if name == "adamw":
        opt = optax.adamw(
            schedule, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=decay_mask
        )
    elif name == "lamb":
        opt = optax.lamb(
            schedule, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=decay_mask
        )
    else:
        raise ValueError(f"unknown optimizer {name!r}: set make_optimizer.name to adamw or lamb")
    if clip_norm:
        opt = optax.chain(optax.clip_by_global_norm(clip_norm), opt)
    return opt


def learning_rate_at(
    step: int | jax.Array, learning_rate: float, warmup_steps: int, total_steps: int
) -> jax.Array:
    """The scheduled learning rate at `step` (for logging)."""
    return warmup_linear_decay(learning_rate, warmup_steps, total_steps)(step)
