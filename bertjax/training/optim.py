"""Optimizers as in the BERT paper: AdamW with warmup + linear decay, LAMB for big batches, and
google-research/bert's own AdamWeightDecay ("bert_adam").

"adamw" is optax's: bias-corrected moments, linear warmup to the peak, then linear decay from
the end of warmup to 0. "bert_adam" is what google-research/bert's optimization.py runs (its
checkpoints' pretraining and every run_classifier / run_squad fine-tuning): moments without
bias correction, update m / (sqrt(v) + eps) plus weight_decay * param (decoupled, not on
LayerNorm or bias), and a learning rate that decays linearly from step 0 to 0 at the last step
(polynomial_decay, power 1) while warmup replaces it by peak * step / warmup_steps for the
first steps. Both clip the gradients to global norm 1 first, as BERT does.
"""

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from bertjax.typing import Params

OPTIMIZERS = ("adamw", "bert_adam", "lamb")

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


def _is_box(x: object) -> bool:
    return isinstance(x, nn.meta.AxisMetadata)  # nn.LogicallyPartitioned and other boxes


def _last_name(path: tuple) -> str:
    """The name of a parameter from its tree path (dict keys, attributes or indices)."""
    key = path[-1]
    return str(getattr(key, "key", getattr(key, "name", getattr(key, "idx", key))))


def decay_mask(params: Params) -> Params:
    """True for parameters that get weight decay: kernels and embeddings, not biases, LayerNorm
    scales or ScalarMix weights (see `decays`).

    Same tree structure as `params`, whose leaves may be arrays, shape structs or flax
    `nn.LogicallyPartitioned` boxes (a box keeps its axis names and holds the bool).
    """

    def flag(path: tuple, leaf: jax.Array | jax.ShapeDtypeStruct | nn.meta.AxisMetadata
             ) -> bool | nn.meta.AxisMetadata:
        decayed = decays(_last_name(path)) if path else True
        return leaf.replace_boxed(decayed) if _is_box(leaf) else decayed

    return jax.tree_util.tree_map_with_path(flag, params, is_leaf=_is_box)


def warmup_linear_decay(peak: float, warmup_steps: int, total_steps: int) -> optax.Schedule:
    """Linear warmup from 0 to `peak`, then linear decay to 0 at `total_steps`."""
    warmup = optax.linear_schedule(0.0, peak, max(warmup_steps, 1))
    decay = optax.linear_schedule(peak, 0.0, max(total_steps - warmup_steps, 1))
    return optax.join_schedules([warmup, decay], [warmup_steps])


def warmup_steps_of(warmup_share: float, total_steps: int) -> int:
    """The steps of warmup that are `warmup_share` of a budget of `total_steps`: the one-cycle
    (triangular) schedule of small-budget recipes (Cramming, Izsak et al. 2021) gives its
    warmup as a share of the run, so a shorter or longer budget keeps the shape."""
    if not 0.0 <= warmup_share < 1.0:
        raise ValueError(f"make_optimizer.warmup_share is {warmup_share!r}: set it to a share "
                         "of the steps in [0, 1), e.g. 0.1")
    return round(warmup_share * total_steps)


def bert_schedule(peak: float, warmup_steps: int, total_steps: int) -> optax.Schedule:
    """google-research/bert's learning rate at (0-based) step t: peak * (1 - t / total) (its
    polynomial_decay from step 0), or peak * t / warmup while t < warmup_steps. Unlike
    `warmup_linear_decay`, the decay does not wait for warmup to end: after warmup the rate is
    peak * (1 - warmup / total), not peak."""
    total = max(total_steps, 1)

    def schedule(count: jax.Array) -> jax.Array:
        step = jnp.asarray(count, jnp.float32)
        decayed = peak * (1.0 - jnp.minimum(step, total) / total)
        if warmup_steps <= 0:
            return decayed
        return jnp.where(step < warmup_steps, peak * step / warmup_steps, decayed)

    return schedule


class BertAdamState(NamedTuple):
    """First and second moments of AdamWeightDecay (no step count: no bias correction)."""

    mu: optax.Updates
    nu: optax.Updates


def scale_by_bert_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6
                       ) -> optax.GradientTransformation:
    """AdamWeightDecayOptimizer's direction: m / (sqrt(v) + eps) of the moving averages
    m = b1 m + (1 - b1) g and v = b2 v + (1 - b2) g^2, neither bias-corrected: the first
    step moves (1 - b1) / sqrt(1 - b2) = 3.2 times as far as Adam's, the ratio falling to 1
    as the averages fill (warmup keeps those first steps small)."""

    def init(params: optax.Params) -> BertAdamState:
        zeros = jax.tree.map(jnp.zeros_like, params)
        return BertAdamState(zeros, jax.tree.map(jnp.zeros_like, params))

    def update(updates: optax.Updates, state: BertAdamState, params: optax.Params | None = None
               ) -> tuple[optax.Updates, BertAdamState]:
        del params
        mu = jax.tree.map(lambda g, m: b1 * m + (1 - b1) * g, updates, state.mu)
        nu = jax.tree.map(lambda g, v: b2 * v + (1 - b2) * g * g, updates, state.nu)
        direction = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + eps), mu, nu)
        return direction, BertAdamState(mu, nu)

    return optax.GradientTransformation(init, update)


def bert_adam(peak: float, warmup_steps: int, total_steps: int, b1: float = 0.9,
              b2: float = 0.999, eps: float = 1e-6, weight_decay: float = 0.01
              ) -> optax.GradientTransformation:
    """google-research/bert's AdamWeightDecayOptimizer under its create_optimizer schedule
    (see the module docstring); gradient clipping is make_optimizer's."""
    return optax.chain(scale_by_bert_adam(b1, b2, eps),
                       optax.add_decayed_weights(weight_decay, mask=decay_mask),
                       optax.scale_by_learning_rate(bert_schedule(peak, warmup_steps,
                                                                  total_steps)))


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
    warmup_share: float | None = None,
) -> optax.GradientTransformation:
    """The optimizer of a run: `name` is "adamw" (optax's, warmup then linear decay),
    "bert_adam" (google-research/bert's AdamWeightDecay and schedule) or "lamb" (large
    batches).

    `frozen` names top-level parameter subtrees that are not trained (a pretrained encoder
    used for features): they get no update and no optimizer state.
    `warmup_share` (a share of `total_steps`, e.g. 0.1) replaces `warmup_steps` when given:
    with "adamw" or "lamb" a triangle, linear up to the peak then linear down to 0 at the end
    of the budget.
    """
    if warmup_share is not None:
        warmup_steps = warmup_steps_of(warmup_share, total_steps)
    schedule = warmup_linear_decay(learning_rate, warmup_steps, total_steps)
    if name == "adamw":
        opt = optax.adamw(
            schedule, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=decay_mask
        )
    elif name == "bert_adam":
        opt = bert_adam(learning_rate, warmup_steps, total_steps, b1, b2, eps, weight_decay)
    elif name == "lamb":
        opt = optax.lamb(
            schedule, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=decay_mask
        )
    else:
        raise ValueError(f"unknown optimizer {name!r}: set make_optimizer.name (or "
                         f"finetune.optimizer) to one of {', '.join(OPTIMIZERS)}")
    if frozen:
        labels = lambda params: {k: "frozen" if k in frozen else "train" for k in params}  # noqa: E731
        opt = optax.multi_transform({"train": opt, "frozen": optax.set_to_zero()}, labels)
    if clip_norm:
        opt = optax.chain(optax.clip_by_global_norm(clip_norm), opt)
    return opt
