"""Which implementation one attention call runs, and the fused kernels' calls.

`MultiHeadAttention` (layers/attention.py) computes the exact XLA attention itself and hands
every other call here. Implementations (`TransformerConfig.attention_impl`):

* "xla": einsums with the [B, H, Q, T] probabilities materialised (layers/attention.py); exact,
  and the CPU default. Its attention dropout draws from the run's dropout key, so a resumed run
  replays it exactly.
* "dot_product": `jax.nn.dot_product_attention`; cuDNN's fused (flash) kernel on NVIDIA GPUs
  for bfloat16 compute, XLA's composition elsewhere. With attention dropout the cuDNN kernel
  drops out the probabilities itself (layers/cudnn_attention.py); where cuDNN cannot run, the
  "xla" path does.
* "splash": Pallas splash attention on TPU v4 and later (layers/splash.py), heads sharded
  over the mesh's model axis. No attention dropout.
* "auto": "dot_product" on GPUs where cuDNN runs the call (half-precision compute, a head
  size it supports) or no attention dropout applies; "xla" otherwise and on CPU and TPU.

Masks are symbolic (`AttentionMask`), so each kernel takes them in its own form: the padding
as sequence lengths, packed sequences as per-sequence offsets and lengths (cuDNN) or segment
ids (splash), causality as a flag.

cuDNN's attention dropout takes its random bits from cuDNN's own Philox stream: a static
seed per attention layer (a hash of the layer's module path and index) and an offset that
each kernel advances at every launch; in a scanned stack each layer gets its kernel through a
switch on the layer index (layers/cudnn_attention.py says why). Its masks are as random as
the XLA path's, but not a function of the run's dropout key, so a run resumed from a
checkpoint does not replay the same attention masks (the "xla" path does).
"""

import functools

import jax
from jax.typing import DTypeLike

from bertjax.layers.cudnn_attention import cudnn_attention, cudnn_runs, layer_seed
from bertjax.layers.masks import AttentionMask
from bertjax.layers.splash import splash_attention

Array = jax.Array

ATTENTION_IMPLS = ("auto", "xla", "dot_product", "splash")
FUSED_IMPLS = ("dot_product", "splash")
NO_DROPOUT_IMPLS = ("splash",)  # kernels that cannot drop out attention probabilities

Layer = int | tuple[Array, int]  # a layer's index, or a scanned layer's (index, layers)


def resolve_impl(impl: str, dropout_rate: float, deterministic: bool,
                 cudnn: bool = False) -> str:
    """The implementation a call uses. `cudnn`: cuDNN runs this call (see `cudnn_runs`).

    "auto" picks "dot_product" on GPUs when cuDNN runs the call or no attention dropout
    applies, "xla" otherwise; "dot_product" falls back to "xla" where it would have to drop
    out attention probabilities without cuDNN."""
    dropout = not deterministic and dropout_rate > 0.0
    if impl == "auto":
        on_gpu = jax.default_backend() == "gpu"
        return "dot_product" if on_gpu and (cudnn or not dropout) else "xla"
    if impl == "dot_product" and dropout and not cudnn:
        return "xla"
    return impl


def call_impl(impl: str, dropout_rate: float, deterministic: bool, dtype: DTypeLike,
              head_dim: int, num_queries: int, num_keys: int) -> str:
    """The implementation one layer's call runs: `resolve_impl`'s choice, and "xla" for a
    layer that computes fewer queries than keys (the [CLS]-only layer) where a kernel would not
    serve it."""
    cudnn = cudnn_runs(dtype, head_dim)
    impl = resolve_impl(impl, dropout_rate, deterministic, cudnn)
    if impl == "splash" and num_queries != num_keys:
        impl = "xla"  # the [CLS]-only layer: one query, below splash's 128-row blocks
    dropout = not deterministic and dropout_rate > 0.0
    if impl == "dot_product" and dropout and num_queries != num_keys:
        impl = "xla"  # the [CLS]-only layer under dropout: one query, not worth a kernel
    return impl


def fused_attention(q_BxQxHxD: Array, k_BxTxHxD: Array, v_BxTxHxD: Array,
                    mask: AttentionMask | None) -> Array:
    """softmax(q k^T / sqrt(D)) v through `jax.nn.dot_product_attention`: [B, Q, H, D].

    cuDNN's fused kernel on GPUs for half-precision compute and head sizes it supports (a
    multiple of 8, at most 128), XLA's implementation otherwise. Right-padded keys go in as
    lengths; packed rows through `cudnn_attention` (as per-sequence offsets) where cuDNN
    runs; other masks as a boolean mask (XLA's implementation)."""
    Q, T, D = q_BxQxHxD.shape[1], k_BxTxHxD.shape[1], q_BxQxHxD.shape[-1]
    cudnn = cudnn_runs(q_BxQxHxD.dtype, D)
    mask = AttentionMask() if mask is None else mask
    if mask.packed and cudnn and Q == T:
        return cudnn_attention(q_BxQxHxD, k_BxTxHxD, v_BxTxHxD, mask)
    padded = mask.key_mask is not None
    if mask.packed or (padded and not mask.real_tokens_first) or (mask.causal and Q != T):
        return jax.nn.dot_product_attention(q_BxQxHxD, k_BxTxHxD, v_BxTxHxD,
                                            mask=mask.dense(Q, T), implementation="xla")
    return jax.nn.dot_product_attention(
        q_BxQxHxD, k_BxTxHxD, v_BxTxHxD, is_causal=mask.causal,
        key_value_seq_lengths=mask.key_lengths() if padded else None,
        implementation="cudnn" if cudnn else "xla",
    )


def kernel_attention(impl: str, q_BxQxHxD: Array, k_BxLxHxD: Array, v_BxLxHxD: Array,
                     mask: AttentionMask | None, dropout_rate: float, deterministic: bool,
                     path: tuple[str, ...], layer: Layer) -> Array:
    """Attention [B, Q, H, D] by the fused implementation `impl` ("splash" or "dot_product",
    as `call_impl` chose it). `path` (the layer's module path) and `layer` seed cuDNN's
    attention dropout."""
    if impl == "splash":
        return splash_attention(q_BxQxHxD, k_BxLxHxD, v_BxLxHxD, mask)
    if not deterministic and dropout_rate > 0.0:  # call_impl chose dot_product: cuDNN runs it
        return cudnn_dropout_attention(q_BxQxHxD, k_BxLxHxD, v_BxLxHxD, mask, dropout_rate,
                                       path, layer)
    return fused_attention(q_BxQxHxD, k_BxLxHxD, v_BxLxHxD, mask)


def cudnn_dropout_attention(q_BxQxHxD: Array, k_BxLxHxD: Array, v_BxLxHxD: Array,
                            mask: AttentionMask | None, dropout_rate: float,
                            path: tuple[str, ...], layer: Layer) -> Array:
    """cuDNN attention with dropout seeded for this layer: one kernel per layer, a layer
    of a scanned stack choosing its own among the stack's (lax.switch on its index)."""
    attend = functools.partial(cudnn_attention, mask=mask, dropout_rate=dropout_rate)
    if isinstance(layer, int):
        return attend(q_BxQxHxD, k_BxLxHxD, v_BxLxHxD, seed=layer_seed(path, layer))
    index, num_layers = layer
    kernels = [functools.partial(attend, seed=layer_seed(path, i)) for i in range(num_layers)]
    return jax.lax.switch(index, kernels, q_BxQxHxD, k_BxLxHxD, v_BxLxHxD)
