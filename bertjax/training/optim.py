"""Optimizers as in the BERT paper: AdamW with warmup + linear decay, or LAMB for big batches."""

from typing import Any

import flax.linen as nn
import jax
import optax

# Parameters that are not weight matrices get no weight decay (BERT, GPT): decay pulls a
# parameter towards 0, which regularises a matrix but only shifts a bias or a gain.
NO_DECAY_SUFFIX = "bias"  # bias, query_/key_/value_/out_bias, mlm_bias, softmax_bias, LSTM bias
NO_DECAY_NAMES = (
    "scale",  # the gain of flax's normalisation layers (LayerNorm); no other module has one
    "scalars",  # ScalarMix's layer weights (softmax logits; its own l2_coef regularises them)
    "gamma",  # ScalarMix's output scale
)


def decays(name: str) -> bool:
    """Whether a parameter called `name` (its last path entry) gets weight decay."""
    return not (name.endswith(NO_DECAY_SUFFIX) or name in NO_DECAY_NAMES)


def _is_box(x: Any) -> bool:
    return isinstance(x, nn.meta.AxisMetadata)  # nn.LogicallyPartitioned and other boxes


def _last_name(path: tuple) -> str:
    """The name of a parameter from its tree path (dict keys, attributes or indices)."""
    key = path[-1]
    return str(getattr(key, "key", getattr(key, "name", getattr(key, "idx", key))))


def decay_mask(params: Any) -> Any:
    """True for parameters that get weight decay: kernels and embeddings, not biases, LayerNorm
    scales or ScalarMix weights (see `decays`).

    Same tree structure as `params`, whose leaves may be arrays, shape structs or flax
    `nn.LogicallyPartitioned` boxes (a box keeps its axis names and holds the bool).
    """

    def flag(path: tuple, leaf: Any) -> Any:
        decayed = decays(_last_name(path)) if path else True
        return leaf.replace_boxed(decayed) if _is_box(leaf) else decayed

    return jax.tree_util.tree_map_with_path(flag, params, is_leaf=_is_box)


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
    frozen: tuple[str, ...] = (),
) -> optax.GradientTransformation:
    """The optimizer for pretraining; `name` is "adamw" (paper) or "lamb" (large batches).

    `frozen` names top-level parameter subtrees that are not trained (a pretrained encoder
    used for features): they get no update and no optimizer state.
    """
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
    if frozen:
        labels = lambda params: {k: "frozen" if k in frozen else "train" for k in params}  # noqa: E731
        opt = optax.multi_transform({"train": opt, "frozen": optax.set_to_zero()}, labels)
    if clip_norm:
        opt = optax.chain(optax.clip_by_global_norm(clip_norm), opt)
    return opt
