"""Transformer block and stack, written once for BERT (post-LN, bidirectional) and GPT (pre- or
post-LN, causal). The caller supplies the attention mask, so the same code serves both."""

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from bertjax.layers.attention import (
    AttentionMask,
    Layer,
    MultiHeadAttention,
    Queries,
    keep_queries,
)
from bertjax.layers.dropout import Dropout
from bertjax.layers.fused_attention import ATTENTION_IMPLS, NO_DROPOUT_IMPLS

Array = jax.Array

ACTIVATIONS = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),  # BERT: exact erf GELU
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),  # GPT / GPT-2
    "relu": jax.nn.relu,
}
DTYPES = ("float32", "bfloat16")  # float16 is refused: see dtype_name


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters shared by every Transformer stack in bertjax (BERT's and GPT's).

    The one place these settings live: a family config holds one of these beside its own
    fields (vocabulary, positions), and its size table supplies the family's defaults (BERT
    post-LN with exact GELU, GPT-2 pre-LN with scaled residual init, ...). `dtype` (compute)
    and `param_dtype` are dtype names, so `dataclasses.asdict` of a config is JSON; the layers
    read them as `compute_dtype` and `weight_dtype`.
    """

    num_layers: int
    hidden_size: int
    num_heads: int
    mlp_dim: int
    dropout_rate: float = 0.1  # embeddings and residual branches
    attention_dropout_rate: float = 0.1
    pre_layer_norm: bool = False
    # Biases on the Dense layers and attention projections (blocks, pooler, heads built with
    # `dense`). False drops them, as Cramming (Geiping & Goldstein 2022) does for a small
    # budget; LayerNorms and the MLM output bias keep theirs.
    use_bias: bool = True
    activation: str = "gelu"
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    scale_residual_init: bool = False  # GPT-2: residual projections scaled by 1/sqrt(2 L)
    remat: bool = False
    # One scanned block: compile time independent of depth. XLA's cost analysis then counts
    # the FLOPs of one layer only, so bertjax-compile reports are made unrolled. Parameters
    # are stacked on a leading "layers" axis, so Hugging Face import/export needs it off.
    scan_layers: bool = False
    dtype: str = "float32"  # compute dtype; "bfloat16" on TPU and GPU
    param_dtype: str = "float32"
    # "auto" (XLA on CPU and TPU; cuDNN's fused kernel on GPU, attention dropout included),
    # "xla", "dot_product" or "splash": see layers/fused_attention.py.
    attention_impl: str = "auto"
    # Q, K and V from one matrix product (their kernels concatenated as the step runs: the
    # parameters and checkpoints stay three), and BERT's position and segment embeddings by
    # slice and select instead of gathers whose gradients are scatter-adds. Each is measured
    # on and off by benchmarks/accelerator_step.py; both compute the same numbers.
    fused_qkv: bool = True
    gather_free_embeddings: bool = True
    # The tied output projection over the vocabulary padded (as it is computed) to a multiple
    # of this many rows, tiles the matrix units take whole (layers/embeddings.py, attend), e.g.
    # 64; 1 computes over the vocabulary as it is. Parameters and logits keep the real
    # vocabulary. Off by default: on the CPU the padding costs a pass over the table (XLA:CPU
    # no longer fuses its cast into the product) and the GPU rows are not measured yet.
    pad_vocab_to: int = 1

    def __post_init__(self) -> None:
        for name in ("dtype", "param_dtype"):  # jnp.bfloat16 and "bfloat16" alike: the name
            object.__setattr__(self, name, dtype_name(name, getattr(self, name)))
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}: set activation to one "
                             f"of {', '.join(ACTIVATIONS)}")
        if self.attention_impl not in ATTENTION_IMPLS:
            raise ValueError(f"unknown attention_impl {self.attention_impl!r}: set "
                             f"attention_impl to one of {', '.join(ATTENTION_IMPLS)}")
        if self.attention_impl in NO_DROPOUT_IMPLS and self.attention_dropout_rate > 0:
            raise ValueError(
                f"attention_impl={self.attention_impl!r} runs a kernel that does not drop "
                f"out attention probabilities, but attention_dropout_rate="
                f"{self.attention_dropout_rate}: set attention_dropout_rate=0 or "
                "attention_impl='xla'")
        if self.pad_vocab_to < 1:
            raise ValueError(f"pad_vocab_to is {self.pad_vocab_to}: set it to 1 (no padding) "
                             "or a multiple such as 64")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads "
                             f"{self.num_heads}: change one of them")

    @property
    def compute_dtype(self) -> jnp.dtype:
        """The dtype activations are computed in (softmax and losses stay float32)."""
        return jnp.dtype(self.dtype)

    @property
    def weight_dtype(self) -> jnp.dtype:
        """The dtype parameters are stored (and updated) in."""
        return jnp.dtype(self.param_dtype)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def residual_init_std(self) -> float:
        if self.scale_residual_init:
            return self.initializer_range / math.sqrt(2 * self.num_layers)
        return self.initializer_range


def dtype_name(setting: str, value: object) -> str:
    """The name of a dtype given by name or as a jnp type, if it is one bertjax computes in.

    float16 is refused: its range ends at 6e-5 (subnormals at 6e-8), so without loss scaling
    most small gradients underflow to zero (at BERT-base MLM size 93% of the non-target logit
    gradients), and bertjax scales no loss. bfloat16 has float32's range; it is what TPUs and
    Ampere-or-newer GPUs compute in, without loss scaling, as MaxText and t5x train."""
    try:
        name = jnp.dtype(value).name
    except TypeError:
        name = None
    if name == "float16":
        raise ValueError(f"{setting} float16 trains with gradients that underflow to zero "
                         f"(bertjax scales no loss): set {setting} = 'bfloat16', which has "
                         "float32's range")
    if name not in DTYPES:
        choices = ", ".join(DTYPES)
        raise ValueError(f"unknown {setting} {value!r}: set {setting} to one of {choices}")
    return name


def layer_norm(config: TransformerConfig, name: str | None) -> nn.LayerNorm:
    """LayerNorm with logically partitioned scale and bias, statistics in float32 (`name`
    None inside a `setup`, which names it after its attribute)."""
    return nn.LayerNorm(
        epsilon=config.layer_norm_eps,
        dtype=config.compute_dtype,
        param_dtype=config.weight_dtype,
        scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
        name=name,
    )


def dense(features: int, axes: tuple[str, str], config: TransformerConfig, name: str,
          std: float | None = None) -> nn.Dense:
    """A Dense layer whose kernel (normal, `std` or the config's initializer range) and bias
    (zeros; none when the config's `use_bias` is False) carry logical axis names, computed in
    the config's dtypes."""
    return nn.Dense(
        features,
        use_bias=config.use_bias,
        kernel_init=nn.with_logical_partitioning(
            nn.initializers.normal(config.initializer_range if std is None else std), axes),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, (axes[1],)),
        dtype=config.compute_dtype,
        param_dtype=config.weight_dtype,
        name=name,
    )


class MlpBlock(nn.Module):
    """Position-wise feed-forward: Dense(mlp) -> activation -> Dense(embed)."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, x_BxLxE: Array) -> Array:
        cfg = self.config
        h_BxLxM = dense(cfg.mlp_dim, ("embed", "mlp"), cfg, "wi")(x_BxLxE)
        h_BxLxM = ACTIVATIONS[cfg.activation](h_BxLxM)
        h_BxLxM = nn.with_logical_constraint(h_BxLxM, ("batch", "length", "act_mlp"))
        return dense(x_BxLxE.shape[-1], ("mlp", "embed"), cfg, "wo",
                     std=cfg.residual_init_std)(h_BxLxM)


class TransformerBlock(nn.Module):
    """One attention + MLP block; post-LN (BERT, GPT-1) or pre-LN (GPT-2).

    `queries`: the outputs of those positions only, [B, Q, E] (attending to all keys; see
    layers/attention.py's keep_queries)."""

    config: TransformerConfig

    @nn.compact
    def __call__(
        self, x_BxLxE: Array, mask: AttentionMask | None, deterministic: bool, decode: bool = False,
        queries: Queries = None, layer: Layer = 0,
    ) -> Array:
        """`layer`: the block's index in its stack (see MultiHeadAttention)."""
        cfg = self.config
        attention = MultiHeadAttention(
            num_heads=cfg.num_heads,
            head_dim=cfg.head_dim,
            dropout_rate=cfg.attention_dropout_rate,
            implementation=cfg.attention_impl,
            fused_qkv=cfg.fused_qkv,
            use_bias=cfg.use_bias,
            kernel_init_std=cfg.initializer_range,
            out_init_std=cfg.residual_init_std,
            dtype=cfg.compute_dtype,
            param_dtype=cfg.weight_dtype,
            name="attention",
        )
        dropout = Dropout(cfg.dropout_rate)
        mlp = MlpBlock(cfg, name="mlp")
        ln_attention = layer_norm(cfg, "attention_layer_norm")
        ln_mlp = layer_norm(cfg, "mlp_layer_norm")

        kept_BxQxE = keep_queries(x_BxLxE, queries)
        if cfg.pre_layer_norm:
            x_BxLxE = kept_BxQxE + dropout(
                attention(ln_attention(x_BxLxE), mask, deterministic, decode, queries, layer),
                deterministic,
            )
            x_BxLxE = x_BxLxE + dropout(mlp(ln_mlp(x_BxLxE)), deterministic)
        else:
            attended = dropout(attention(x_BxLxE, mask, deterministic, decode, queries, layer),
                               deterministic)
            x_BxLxE = ln_attention(kept_BxQxE + attended)
            x_BxLxE = ln_mlp(x_BxLxE + dropout(mlp(x_BxLxE), deterministic))
        return nn.with_logical_constraint(x_BxLxE, ("batch", "length", "act_embed"))


class TransformerStack(nn.Module):
    """`num_layers` blocks; returns the final states and every layer's output.

    The list of hidden states starts with the stack's input (the embeddings), so it has
    num_layers + 1 entries: what feature extraction and scalar mixes consume. `decode=True`
    runs the attention layers from their key/value caches (see layers/kv_cache.py); with
    `scan_layers` the caches are stacked on the leading layer axis like the parameters.
    `last_queries` (a model that reads only some positions: the first n, e.g. [CLS], or each
    row's own positions [B, Q], e.g. a packed row's [CLS]s) returns the final states of those
    positions only, [B, Q, E]; unscanned, the last block computes just them (most of one
    layer's work saved, the same numbers).
    """

    config: TransformerConfig

    @nn.compact
    def __call__(
        self, x_BxLxE: Array, mask: AttentionMask | None, deterministic: bool, decode: bool = False,
        last_queries: Queries = None,
    ) -> tuple[Array, list[Array]]:
        cfg = self.config
        if cfg.scan_layers:
            y_BxLxE, hidden_states = self._scanned(x_BxLxE, mask, deterministic, decode)
            return keep_queries(y_BxLxE, last_queries), hidden_states
        block_cls = TransformerBlock
        if cfg.remat and not decode:
            block_cls = nn.remat(TransformerBlock, static_argnums=(3, 4, 5, 6))
        hidden_states = [x_BxLxE]
        for i in range(cfg.num_layers):
            queries = last_queries if i == cfg.num_layers - 1 else None
            x_BxLxE = block_cls(cfg, name=f"layer_{i}")(x_BxLxE, mask, deterministic, decode,
                                                         queries, i)
            hidden_states.append(x_BxLxE)
        if cfg.pre_layer_norm:
            x_BxLxE = layer_norm(cfg, "final_layer_norm")(x_BxLxE)
        return x_BxLxE, hidden_states

    def _scanned(
        self, x_BxLxE: Array, mask: AttentionMask | None, deterministic: bool, decode: bool
    ) -> tuple[Array, list[Array]]:
        """The blocks as one `nn.scan`: parameters (and caches) stacked on a "layers" axis."""
        cfg = self.config
        body = _ScanBlock
        if cfg.remat and not decode:
            body = nn.remat(_ScanBlock, prevent_cse=False)
        scanned = nn.scan(
            body,
            variable_axes={"params": 0, "cache": 0, "intermediates": 0},
            split_rngs={"params": True, "dropout": True},
            in_axes=(nn.broadcast, 0),  # the mask, and each layer's index
            length=cfg.num_layers,
            metadata_params={nn.PARTITION_NAME: "layers"},
        )
        layers = scanned(cfg, deterministic, decode, name="layers")
        y_BxLxE, stacked_NxBxLxE = layers(x_BxLxE, mask, jnp.arange(cfg.num_layers))
        hidden_states = [x_BxLxE, *stacked_NxBxLxE]
        if cfg.pre_layer_norm:
            y_BxLxE = layer_norm(cfg, "final_layer_norm")(y_BxLxE)
        return y_BxLxE, hidden_states


class _ScanBlock(nn.Module):
    """A TransformerBlock in scan form: (carry, mask, layer index) -> (carry, this layer's
    output)."""

    config: TransformerConfig
    deterministic: bool
    decode: bool = False

    @nn.compact
    def __call__(self, x_BxLxE: Array, mask: AttentionMask | None, layer: Array
                 ) -> tuple[Array, Array]:
        block = TransformerBlock(self.config, name="block")
        y_BxLxE = block(x_BxLxE, mask, self.deterministic, self.decode, None,
                        (layer, self.config.num_layers))
        return y_BxLxE, y_BxLxE
