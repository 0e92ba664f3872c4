"""bilm-tf's optimizer for ELMo: Adagrad (lr 0.2, accumulators starting at 1.0), gradients
clipped to global norm 10. (AdamW from `make_optimizer` also trains small biLMs well.)"""

import optax


def adagrad_optimizer(
    learning_rate: float = 0.2, initial_accumulator_value: float = 1.0, clip_norm: float = 10.0
) -> optax.GradientTransformation:
    """Adagrad with global-norm clipping, as bilm-tf trained the original ELMo."""
    opt = optax.adagrad(learning_rate, initial_accumulator_value=initial_accumulator_value)
    return optax.chain(optax.clip_by_global_norm(clip_norm), opt) if clip_norm else opt
