"""cuDNN's fused attention for what `jax.nn.dot_product_attention` does not expose: dropout of
the attention probabilities and packed rows (several sequences per row, each attending only
to itself, given as per-sequence offsets and lengths).

Both go through JAX's cuDNN binding (`jax._src.cudnn.fused_attention_stablehlo`), the one
`jax.nn.dot_product_attention(implementation="cudnn")` calls; bertjax pins JAX, and
`tests/layers/test_attention_impls.py` checks the arguments this module passes against the
binding's signature. It runs on NVIDIA GPUs only: callers check `cudnn_runs` first.

Dropout: cuDNN draws its keep mask from its own Philox stream, seeded by a static `seed` at
an offset that each kernel (each custom call of the compiled program) advances at each of its
launches. A layer's forward kernel, its backward kernel and a rematerialised forward each
launch once per step when the layer has a kernel of its own, so they draw the same mask; one
kernel serving every layer of a scanned stack would launch once per layer, forward in layer
order and backward in reverse, and pair each layer's backward with another layer's mask. So
every attention layer has its own seed (`layer_seed`: the module path and the layer index)
and, in a scanned stack, its own kernel (layers/fused_attention.py switches on the layer
index).
"""

import zlib

import jax
import jax.numpy as jnp

from bertjax.layers.masks import AttentionMask

Array = jax.Array


def cudnn_runs(dtype: object, head_dim: int) -> bool:
    """True where cuDNN's flash attention runs a call: an NVIDIA GPU, half-precision compute,
    a head size that is a multiple of 8 and at most 128."""
    half = jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
    return jax.default_backend() == "gpu" and half and head_dim % 8 == 0 and head_dim <= 128


def layer_seed(path: tuple[str, ...], layer: int = 0) -> int:
    """A static dropout seed for one attention layer: its module path and its index in the
    stack hashed, so every layer draws its own masks, unrolled or scanned (whose layers share
    one module path)."""
    return zlib.crc32(f"{'/'.join(path)}#{layer}".encode()) & 0x7FFFFFFF


def _binding():  # noqa: ANN202
    from jax._src.cudnn import fused_attention_stablehlo

    return fused_attention_stablehlo


def cudnn_attention(q_BxQxHxD: Array, k_BxTxHxD: Array, v_BxTxHxD: Array,
                    mask: AttentionMask | None, dropout_rate: float = 0.0,
                    seed: int = 0) -> Array:
    """softmax(q k^T / sqrt(D)) v by cuDNN, with dropout of the probabilities and packed rows:
    [B, Q, H, D]. Padding rows of a packed batch come out as zeros."""
    binding = _binding()
    B, Q, _, D = q_BxQxHxD.shape
    mask = AttentionMask() if mask is None else mask
    q_lengths = kv_lengths = q_offsets = kv_offsets = None
    if mask.packed:
        offsets_BxK1, lengths_BxK = mask.sequence_layout()
        q_offsets = kv_offsets = offsets_BxK1
        q_lengths = kv_lengths = lengths_BxK
    elif mask.key_mask is not None:
        kv_lengths = mask.key_lengths()
        q_lengths = jnp.full((B,), Q, jnp.int32)
    padded = q_lengths is not None
    types = binding.MaskType
    if mask.causal:
        mask_type = types.PADDING_CAUSAL if padded else types.CAUSAL
    else:
        mask_type = types.PADDING if padded else types.NO_MASK
    out_BxQxHxD = binding.dot_product_attention(
        q_BxQxHxD, k_BxTxHxD, v_BxTxHxD, q_seqlen=q_lengths, kv_seqlen=kv_lengths,
        q_offsets=q_offsets, kv_offsets=kv_offsets, scale=1.0 / float(D) ** 0.5,
        mask_type=mask_type, seed=seed, dropout_rate=float(dropout_rate), qkv_layout="BTNH")
    if mask.packed:  # tokens outside every sequence: zeros, never cuDNN's unwritten rows
        real_BxQx1x1 = (mask.sequence_ids[:, :Q] > 0)[:, :, None, None]
        out_BxQxHxD = jnp.where(real_BxQx1x1, out_BxQxHxD, 0)
    return out_BxQxHxD
