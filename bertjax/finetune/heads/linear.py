"""The linear output layer every fine-tuning head ends in: a Dense from the model's features
to the task's outputs, its kernel's axes named ("embed", "classes") for the partitioning rules."""

import flax.linen as nn
import jax.numpy as jnp
from jax.nn.initializers import Initializer
from jax.typing import DTypeLike

LECUN_NORMAL = nn.initializers.lecun_normal()


def linear_head(features: int, kernel_init: Initializer = LECUN_NORMAL,
                name: str | None = None, param_dtype: DTypeLike = jnp.float32) -> nn.Dense:
    """A Dense of `features` outputs, zero bias, kernel from `kernel_init`."""
    return nn.Dense(
        features,
        kernel_init=nn.with_logical_partitioning(kernel_init, ("embed", "classes")),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("classes",)),
        param_dtype=param_dtype,
        name=name,
    )
