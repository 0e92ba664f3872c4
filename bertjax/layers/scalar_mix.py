"""ScalarMix (Peters et al. 2018, eq. 1): a task's learned mix of a model's layers.

    mix = gamma * sum_j softmax(s)_j * norm(h_j)

`h_j` are K same-shaped layers: ELMo's 2L+1 representations (as L+1 layers of [fwd; bwd]),
BERT's `hidden_states` (num_layers + 1) or a GPT's. `norm` is the identity, or (layer_norm)
(h_j - mean) / sqrt(var + eps) with mean and variance taken over the unpadded positions and
all features. By default the statistics are per example, so a sentence's mix does not depend
on the batch it is in; norm_over="batch" pools them over the batch as AllenNLP's ScalarMix does.

Regularisation (paper, section 3.4): l2_coef * sum_j s_j^2, as bilm-tf's `weight_layers`.
s = 0 is the uniform average, so l2_coef = 1 keeps the mix near an average of the layers and
0.001 lets the weights vary. The module sows the penalty into the "losses" collection; add it
to the task loss (see `scalar_mix_penalty`). `mix_weights` reports what a task learned.
"""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from bertjax.layers.dropout import Dropout
from bertjax.typing import Params

Array = jax.Array


def _masked_normalize(x_BxTxF: Array, mask_BxT: Array, over: str, eps: float) -> Array:
    """(x - mean) / sqrt(var + eps), statistics over unpadded positions (and all features)."""
    axes = (1, 2) if over == "example" else (0, 1, 2)
    m_BxTx1 = mask_BxT[..., None].astype(jnp.float32)
    x_BxTxF = x_BxTxF.astype(jnp.float32)
    count = jnp.maximum(jnp.sum(m_BxTx1, axes, keepdims=True) * x_BxTxF.shape[-1], 1.0)
    mean = jnp.sum(x_BxTxF * m_BxTx1, axes, keepdims=True) / count
    var = jnp.sum(jnp.square((x_BxTxF - mean) * m_BxTx1), axes, keepdims=True) / count
    return (x_BxTxF - mean) * jax.lax.rsqrt(var + eps)


class ScalarMix(nn.Module):
    """gamma * sum_j softmax(s)_j h_j over K layers, with options described in the module doc."""

    num_layers: int
    layer_norm: bool = False
    norm_over: str = "example"  # or "batch" (AllenNLP)
    dropout_rate: float = 0.0  # on the mixed output
    l2_coef: float = 0.0
    initial_scalars: Sequence[float] | None = None
    eps: float = 1e-12
    dtype: DTypeLike = jnp.float32

    @nn.compact
    def __call__(
        self,
        layers: Sequence[Array] | Array,
        mask_BxT: Array | None = None,
        deterministic: bool = True,
    ) -> Array:
        """Mix K layers [B, T, F] (a list, or stacked as [K, B, T, F]); mask is 1 on tokens."""
        layers = list(layers)  # a stacked [K, ...] array iterates over its layers
        K = self.num_layers
        if len(layers) != K:
            raise ValueError(f"ScalarMix(num_layers={K}) was given {len(layers)} layers: "
                             f"set num_layers to {len(layers)}")
        if self.norm_over not in ("example", "batch"):
            raise ValueError(f"norm_over={self.norm_over!r}: choose 'example' or 'batch'")
        initial = np.zeros(K) if self.initial_scalars is None else np.asarray(self.initial_scalars)
        s_K = self.param("scalars", lambda _: jnp.asarray(initial, jnp.float32))
        gamma = self.param("gamma", nn.initializers.ones, ())
        if self.l2_coef:
            self.sow("losses", "scalar_mix_l2", scalar_mix_penalty(s_K, self.l2_coef))
        w_K = jax.nn.softmax(s_K)
        if self.layer_norm:
            if mask_BxT is None:
                mask_BxT = jnp.ones(layers[0].shape[:2], jnp.float32)
            layers = [_masked_normalize(h, mask_BxT, self.norm_over, self.eps) for h in layers]
        mixed = sum(w_K[j] * layers[j].astype(jnp.float32) for j in range(K))
        mixed = (gamma * mixed).astype(self.dtype)
        return Dropout(self.dropout_rate)(mixed, deterministic=deterministic)


def scalar_mix_penalty(scalars_K: Array, l2_coef: float) -> Array:
    """The paper's regulariser l2_coef * ||s||^2 on the unnormalised layer scalars."""
    return l2_coef * jnp.sum(jnp.square(scalars_K))


def mix_weights(mix_params: Params) -> dict[str, np.ndarray | float]:
    """The learned softmax layer weights and gamma of a ScalarMix's parameters."""
    scalars = np.asarray(mix_params["scalars"], np.float64)
    weights = np.exp(scalars - scalars.max())
    return {"weights": weights / weights.sum(), "gamma": float(np.asarray(mix_params["gamma"]))}
