"""Pallas splash attention (TPU v4 and later), sharded with `shard_map`.

A Pallas kernel is not partitioned by XLA, so the call is wrapped in `jax.shard_map` over the
ambient mesh: each device runs the kernel on its rows of the batch (the logical "batch" axis)
and its heads (the logical "heads" axis, the mesh's model axis). Padding goes in as segment
ids (a real key is segment 1, padding 0; every query is segment 1, so a query on a padded
position attends to the real keys, as under the XLA path's mask); packed rows as their
sequence ids, for queries and keys alike (a padded query then attends to the padding:
finite, and never read); causality as the kernel's causal mask. Sequence lengths must be
multiples of the kernel's 128-row blocks.

TPU v3 cannot run it: Mosaic, the TPU kernel compiler, does not compile the kernel's bfloat16
matrix products for v3 (error E2001), so a v3 run says so in one line. On the CPU the kernel
runs in Pallas's interpreter (exact and slow: the equivalence tests use it); GPUs use
attention_impl="dot_product".
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from bertjax.layers.masks import AttentionMask
from bertjax.layers.partitioning import target_device

Array = jax.Array
BLOCK = 128
NOT_ON_V3 = ("attention_impl='splash' needs TPU v4 or later (Mosaic does not compile its "
             "bfloat16 matrix products for TPU v3): use attention_impl='xla' on v3")


@functools.lru_cache(maxsize=64)
def _kernel(heads: int, q_len: int, kv_len: int, causal: bool, interpret: bool):  # noqa: ANN202
    from jax.experimental.pallas.ops.tpu.splash_attention import (
        splash_attention_kernel as kernels,
    )
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

    one = masks.CausalMask((q_len, kv_len)) if causal else masks.FullMask((q_len, kv_len))
    return kernels.make_splash_mha(masks.MultiHeadMask([one] * heads), head_shards=1,
                                   q_seq_shards=1, interpret=interpret)


def _check_platform() -> bool:
    """True to interpret (CPU); raises a one-line error where the kernel cannot run."""
    platform, kind = target_device()
    if platform == "cpu":
        return True
    if platform != "tpu":
        raise ValueError(f"attention_impl='splash' is a TPU kernel and this is a {platform}: "
                         "use attention_impl='dot_product'")
    if "v3" in kind.lower():
        raise ValueError(NOT_ON_V3)
    return False


def _axis_size(mesh: jax.sharding.AbstractMesh, axes: object) -> int:
    if axes is None:
        return 1
    names = axes if isinstance(axes, tuple) else (axes,)
    size = 1
    for name in names:
        size *= mesh.shape[name]
    return size


def splash_attention(q_BxQxHxD: Array, k_BxTxHxD: Array, v_BxTxHxD: Array,
                     mask: AttentionMask | None) -> Array:
    """softmax(q k^T / sqrt(D)) v by the splash kernel: [B, Q, H, D]."""
    B, Q, H, D = q_BxQxHxD.shape
    T = k_BxTxHxD.shape[1]
    if Q % BLOCK or T % BLOCK:
        raise ValueError(f"attention_impl='splash' needs sequence lengths that are multiples "
                         f"of {BLOCK}, not {Q} x {T}: pad the inputs or use attention_impl='xla'")
    interpret = _check_platform()
    mask = AttentionMask() if mask is None else mask
    segments_BxT = (jnp.ones((B, T), jnp.int32) if mask.key_mask is None
                    else mask.key_mask.astype(jnp.int32))
    q_segments_BxQ = jnp.ones((B, Q), jnp.int32)
    if mask.packed:
        segments_BxT = mask.sequence_ids.astype(jnp.int32)
        q_segments_BxQ = segments_BxT[:, :Q]
    q_BxHxQxD = (q_BxQxHxD / jnp.sqrt(D).astype(q_BxQxHxD.dtype)).transpose(0, 2, 1, 3)
    k_BxHxTxD, v_BxHxTxD = (x.transpose(0, 2, 1, 3) for x in (k_BxTxHxD, v_BxTxHxD))

    mesh = jax.sharding.get_abstract_mesh()
    batch_axes, head_axes = (None, None)
    if not mesh.empty:
        batch_axes, head_axes = nn.logical_to_mesh_axes(("batch", "heads"))
    local_heads = H // _axis_size(mesh, head_axes) if not mesh.empty else H

    def local(q: Array, k: Array, v: Array, q_segments: Array, kv_segments: Array) -> Array:
        from jax.experimental.pallas.ops.tpu.splash_attention import (
            splash_attention_kernel as kernels,
        )

        kernel = _kernel(local_heads, Q, T, mask.causal, interpret)
        ids = kernels.SegmentIds(q=q_segments, kv=kv_segments)
        return jax.vmap(kernel)(q, k, v, segment_ids=ids)

    if mesh.empty:
        out_BxHxQxD = local(q_BxHxQxD, k_BxHxTxD, v_BxHxTxD, q_segments_BxQ, segments_BxT)
    else:
        heads = PartitionSpec(batch_axes, head_axes, None, None)
        rows = PartitionSpec(batch_axes, None)
        out_BxHxQxD = jax.shard_map(local, in_specs=(heads, heads, heads, rows, rows),
                                    out_specs=heads, check_vma=False)(
            q_BxHxQxD, k_BxHxTxD, v_BxHxTxD, q_segments_BxQ, segments_BxT)
    return out_BxHxQxD.transpose(0, 2, 1, 3)
