"""Transformer block and stack, written once for BERT (post-LN, bidirectional) and GPT (pre- or
post-LN, causal). The caller supplies the attention mask, so the same code serves both."""

import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from bertjax.layers.attention import MultiHeadAttention

Array = jax.Array

ACTIVATIONS = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),  # BERT: exact erf GELU
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),  # GPT / GPT-2
    "relu": jax.nn.relu,
}


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters shared by every Transformer stack in bertjax."""

    num_layers: int
    hidden_size: int
    num_heads: int
    mlp_dim: int
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    pre_layer_norm: bool = False
    activation: str = "gelu"
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    scale_residual_init: bool = False  # GPT-2: residual projections scaled by 1/sqrt(2 L)
    remat: bool = False
    # One scanned block: compile time independent of depth. XLA's cost analysis then counts
    # the FLOPs of one layer only, so bertjax-compile reports are made unrolled.
    scan_layers: bool = False
    dtype: Any = jnp.float32  # compute dtype
    param_dtype: Any = jnp.float32

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def residual_init_std(self) -> float:
        if self.scale_residual_init:
            return self.initializer_range / math.sqrt(2 * self.num_layers)
        return self.initializer_range


def layer_norm(config: TransformerConfig, name: str) -> nn.LayerNorm:
    """LayerNorm with logically partitioned scale and bias, statistics in float32."""
    return nn.LayerNorm(
        epsilon=config.layer_norm_eps,
        dtype=config.dtype,
        param_dtype=config.param_dtype,
        scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
        name=name,
    )


class MlpBlock(nn.Module):
    """Position-wise feed-forward: Dense(mlp) -> activation -> Dense(embed)."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, x_BxLxE: Array) -> Array:
        cfg = self.config
        h_BxLxM = nn.Dense(
            cfg.mlp_dim,
            kernel_init=nn.with_logical_partitioning(
                nn.initializers.normal(cfg.initializer_range), ("embed", "mlp")
            ),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("mlp",)),
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            name="wi",
        )(x_BxLxE)
        h_BxLxM = ACTIVATIONS[cfg.activation](h_BxLxM)
        h_BxLxM = nn.with_logical_constraint(h_BxLxM, ("batch", "length", "act_mlp"))
        return nn.Dense(
            x_BxLxE.shape[-1],
            kernel_init=nn.with_logical_partitioning(
                nn.initializers.normal(cfg.residual_init_std), ("mlp", "embed")
            ),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            name="wo",
        )(h_BxLxM)


class TransformerBlock(nn.Module):
    """One attention + MLP block; post-LN (BERT, GPT-1) or pre-LN (GPT-2)."""

    config: TransformerConfig

    @nn.compact
    def __call__(
        self, x_BxLxE: Array, mask: Array | None, deterministic: bool, decode: bool = False
    ) -> Array:
        cfg = self.config
        attention = MultiHeadAttention(
            num_heads=cfg.num_heads,
            head_dim=cfg.head_dim,
            dropout_rate=cfg.attention_dropout_rate,
            kernel_init_std=cfg.initializer_range,
            out_init_std=cfg.residual_init_std,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            name="attention",
        )
        dropout = nn.Dropout(cfg.dropout_rate)
        mlp = MlpBlock(cfg, name="mlp")
        ln_attention = layer_norm(cfg, "attention_layer_norm")
        ln_mlp = layer_norm(cfg, "mlp_layer_norm")

        if cfg.pre_layer_norm:
            x_BxLxE = x_BxLxE + dropout(
                attention(ln_attention(x_BxLxE), mask, deterministic, decode), deterministic
            )
            x_BxLxE = x_BxLxE + dropout(mlp(ln_mlp(x_BxLxE)), deterministic)
        else:
            attended = dropout(attention(x_BxLxE, mask, deterministic, decode), deterministic)
            x_BxLxE = ln_attention(x_BxLxE + attended)
            x_BxLxE = ln_mlp(x_BxLxE + dropout(mlp(x_BxLxE), deterministic))
        return nn.with_logical_constraint(x_BxLxE, ("batch", "length", "act_embed"))


class TransformerStack(nn.Module):
    """`num_layers` blocks; returns the final states and every layer's output.

    The list of hidden states starts with the stack's input (the embeddings), so it has
    num_layers + 1 entries: what feature extraction and scalar mixes consume. `decode=True`
    runs the attention layers from their key/value caches (see layers/attention.py).
    """

    config: TransformerConfig

    @nn.compact
    def __call__(
        self, x_BxLxE: Array, mask: Array | None, deterministic: bool, decode: bool = False
    ) -> tuple[Array, list[Array]]:
        cfg = self.config
        if cfg.scan_layers and not decode:
            return self._scanned(x_BxLxE, mask, deterministic)
        block_cls = TransformerBlock
        if cfg.remat and not decode:
            block_cls = nn.remat(TransformerBlock, static_argnums=(3, 4))
        hidden_states = [x_BxLxE]
        for i in range(cfg.num_layers):
            x_BxLxE = block_cls(cfg, name=f"layer_{i}")(x_BxLxE, mask, deterministic, decode)
            hidden_states.append(x_BxLxE)
        if cfg.pre_layer_norm:
            x_BxLxE = layer_norm(cfg, "final_layer_norm")(x_BxLxE)
        return x_BxLxE, hidden_states

    def _scanned(
        self, x_BxLxE: Array, mask: Array | None, deterministic: bool
    ) -> tuple[Array, list[Array]]:
        """The blocks as one `nn.scan`: parameters stacked on a leading "layers" axis."""
        cfg = self.config
        body = _ScanBlock
        if cfg.remat:
            body = nn.remat(_ScanBlock, prevent_cse=False)
        scanned = nn.scan(
            body,
            variable_axes={"params": 0},
            split_rngs={"params": True, "dropout": True},
            in_axes=nn.broadcast,
            length=cfg.num_layers,
            metadata_params={nn.PARTITION_NAME: "layers"},
        )
        y_BxLxE, stacked_NxBxLxE = scanned(cfg, deterministic, name="layers")(x_BxLxE, mask)
        hidden_states = [x_BxLxE, *stacked_NxBxLxE]
        if cfg.pre_layer_norm:
            y_BxLxE = layer_norm(cfg, "final_layer_norm")(y_BxLxE)
        return y_BxLxE, hidden_states


class _ScanBlock(nn.Module):
    """A TransformerBlock in scan form: (carry, mask) -> (carry, this layer's output)."""

    config: TransformerConfig
    deterministic: bool

    @nn.compact
    def __call__(self, x_BxLxE: Array, mask: Array | None) -> tuple[Array, Array]:
        y_BxLxE = TransformerBlock(self.config, name="block")(x_BxLxE, mask, self.deterministic)
        return y_BxLxE, y_BxLxE
