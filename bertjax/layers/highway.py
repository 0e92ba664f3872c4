"""Highway layers (Srivastava et al. 2015) in bilm-tf's form, as ELMo's token encoder uses them.

    g = sigmoid(W_carry x + b_carry)          (b_carry starts at -2: mostly pass x through)
    y = g * relu(W_transform x + b_transform) + (1 - g) * x

The names follow bilm-tf (`CNN_high_i/W_carry`, `W_transform`), so imported weights drop in.
"""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

Array = jax.Array


class Highway(nn.Module):
    """`num_layers` highway layers of the input's width."""

    num_layers: int
    dtype: DTypeLike = jnp.float32
    param_dtype: DTypeLike = jnp.float32

    @nn.compact
    def __call__(self, x_NxF: Array) -> Array:
        F = x_NxF.shape[-1]
        init = nn.initializers.normal(math.sqrt(1.0 / F))  # bilm-tf: N(0, 1/F)
        for i in range(self.num_layers):

            def dense(name: str, bias: float, i: int = i) -> nn.Dense:
                return nn.Dense(
                    F,
                    kernel_init=nn.with_logical_partitioning(init, ("filters", "filters_out")),
                    bias_init=nn.with_logical_partitioning(
                        nn.initializers.constant(bias), ("filters_out",)
                    ),
                    dtype=self.dtype,
                    param_dtype=self.param_dtype,
                    name=f"layer_{i}_{name}",
                )

            gate_NxF = jax.nn.sigmoid(dense("carry", -2.0)(x_NxF).astype(jnp.float32))
            transform_NxF = jax.nn.relu(dense("transform", 0.0)(x_NxF).astype(jnp.float32))
            x_NxF = (gate_NxF * transform_NxF + (1.0 - gate_NxF) * x_NxF).astype(self.dtype)
        return x_NxF
