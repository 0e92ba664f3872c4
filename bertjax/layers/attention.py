"""Multi-head dot-product attention with logical partitioning (bidirectional or causal).

Masks are symbolic (`AttentionMask`: key padding, packed sequences and a causal flag), so each
implementation takes them in its own form: the XLA path builds a boolean [B, 1, Q, T] array, a
fused kernel takes the padding as sequence lengths, packed sequences as per-sequence offsets
and lengths (cuDNN) or segment ids (splash), and causality as a flag. Implementations
(`TransformerConfig.attention_impl`):

* "xla": einsums with the [B, H, Q, T] probabilities materialised; exact, and the CPU default.
  Its attention dropout draws from the run's dropout key, so a resumed run replays it exactly.
* "dot_product": `jax.nn.dot_product_attention`; cuDNN's fused (flash) kernel on NVIDIA GPUs
  for bfloat16 compute, XLA's composition elsewhere. With attention dropout the
  cuDNN kernel drops out the probabilities itself (`cudnn_attention`); where cuDNN cannot
  run, the "xla" path does.
* "splash": Pallas splash attention on TPU v4 and later (layers/splash.py), heads sharded
  over the mesh's model axis. No attention dropout.
* "auto": "dot_product" on GPUs where cuDNN runs the call (half-precision compute, a head
  size it supports) or no attention dropout applies; "xla" otherwise and on CPU and TPU.

cuDNN's attention dropout takes its random bits from cuDNN's own Philox stream: a static
seed per attention layer (a hash of the layer's module path and index) and an offset that
each kernel advances at every launch; in a scanned stack each layer gets its kernel through a
switch on the layer index (layers/cudnn_attention.py says why). Its masks are as random as
the XLA path's, but not a function of the run's dropout key, so a run resumed from a
checkpoint does not replay the same attention masks (the "xla" path does).

With `decode=True` the module keeps a key/value cache in the "cache" collection for
autoregressive decoding: the first (initialising) call sizes the cache from its input
[B, T]; later calls write their L new keys/values at the cache index and attend causally over
the T cached positions, also under the caller's key padding. Decoding attends with the XLA
path under every implementation: one query against the cache is a matrix-vector product that
a fused kernel does not speed up.

`queries` computes the outputs of some positions only (their queries over all keys): the
first n, what a last layer needs when the model reads only [CLS], or each row's own positions
[B, Q], a packed row's [CLS]s (their mask is their sequence's, `AttentionMask.at_queries`).

Each call sows its attention probabilities [B, H, Q, T] as "intermediates/attention_weights"
when the caller asks for them (`apply(..., mutable=["intermediates"])`), computing them with
the XLA path whatever the implementation; otherwise nothing is stored.

The decode path keeps its cache as [B*H, T, D], so both attention products are batched over
its leading axis and read the cache in place, and its projections are plain [B*L, E] x
[E, H*D] / [B*L, H*D] x [H*D, E] matrix products over the stored kernels.
"""


import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from bertjax.layers.cudnn_attention import cudnn_attention, cudnn_runs, layer_seed
from bertjax.layers.dropout import Dropout
from bertjax.layers.masks import AttentionMask, causal_mask, padding_mask
from bertjax.layers.splash import splash_attention

Array = jax.Array
__all__ = ["AttentionMask", "MultiHeadAttention", "causal_mask", "padding_mask"]

ATTENTION_IMPLS = ("auto", "xla", "dot_product", "splash")
FUSED_IMPLS = ("dot_product", "splash")
NO_DROPOUT_IMPLS = ("splash",)  # kernels that cannot drop out attention probabilities


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


Queries = int | Array | None  # which positions' outputs a layer computes (keep_queries)
Layer = int | tuple[Array, int]  # a layer's index, or a scanned layer's (index, layers)


def keep_queries(x_BxLxE: Array, queries: Queries) -> Array:
    """The rows of `x_BxLxE` a layer computes outputs for: every position (None), the first n
    (an int n: [CLS]), or each row's own positions (int [B, Q]: a packed row's [CLS]s)."""
    if queries is None:
        return x_BxLxE
    if isinstance(queries, int):
        return x_BxLxE[:, :queries]
    return jnp.take_along_axis(x_BxLxE, queries[..., None], axis=1)


def _fused_qkv(x_BxLxE: Array, kernels: dict[str, tuple[Array, Array]]
               ) -> tuple[Array, Array, Array]:
    """Q, K and V [B, L, H, D] from one matrix product over the kernels stacked as
    [E, 3, H, D]: one read of x and one kernel launch instead of three."""
    names = ("query", "key", "value")
    w_Ex3xHxD = jnp.stack([kernels[n][0] for n in names], axis=1)
    b_3xHxD = jnp.stack([kernels[n][1] for n in names], axis=0)
    qkv_BxLx3xHxD = jnp.einsum("ble,ethd->blthd", x_BxLxE, w_Ex3xHxD) + b_3xHxD
    return qkv_BxLx3xHxD[:, :, 0], qkv_BxLx3xHxD[:, :, 1], qkv_BxLx3xHxD[:, :, 2]


class MultiHeadAttention(nn.Module):
    """Self-attention over [B, L, E] with per-head projections of shape (embed, heads, kv)."""

    num_heads: int
    head_dim: int
    dropout_rate: float = 0.0
    implementation: str = "xla"  # one of ATTENTION_IMPLS
    fused_qkv: bool = False  # Q, K, V from one product over the concatenated kernels
    use_bias: bool = True  # False: projections without biases (none in the parameters)
    kernel_init_std: float = 0.02
    out_init_std: float = 0.02
    dtype: DTypeLike = jnp.float32
    param_dtype: DTypeLike = jnp.float32

    def _param(self, name: str, shape: tuple, axes: tuple, std: float | None) -> Array:
        if std is None and not self.use_bias:  # a bias of a bias-free layer: a constant 0
            return jnp.zeros(shape, self.param_dtype)
        init = nn.initializers.zeros if std is None else nn.initializers.normal(std)
        return self.param(name, nn.with_logical_partitioning(init, axes), shape, self.param_dtype)

    def _cached(
        self, k_NxLxD: Array, v_NxLxD: Array, mask: Array | None
    ) -> tuple[Array, Array, Array]:
        """Write the new keys/values [N = B*H, L, D] at the cache index; return the whole
        cache [N, T, D] and the causal mask [.., L, T] (query i sits at position index + i)."""
        initialised = self.has_variable("cache", "cached_key")
        shape, dtype = k_NxLxD.shape, k_NxLxD.dtype
        cached_k = self.variable("cache", "cached_key", jnp.zeros, shape, dtype)
        cached_v = self.variable("cache", "cached_value", jnp.zeros, shape, dtype)
        index = self.variable("cache", "cache_index", lambda: jnp.zeros((), jnp.int32))
        L, T = shape[1], cached_k.value.shape[1]
        query_pos_L = (index.value if initialised else 0) + jnp.arange(L)
        causal_1x1xLxT = (jnp.arange(T)[None, :] <= query_pos_L[:, None])[None, None]
        mask = causal_1x1xLxT if mask is None else causal_1x1xLxT & mask
        if not initialised:  # the sizing call: attend over its own keys
            return k_NxLxD, v_NxLxD, mask
        start = (0, index.value, 0)  # in place: the loop carries the cache, never a copy
        cached_k.value = jax.lax.dynamic_update_slice(cached_k.value, k_NxLxD, start)
        cached_v.value = jax.lax.dynamic_update_slice(cached_v.value, v_NxLxD, start)
        index.value = index.value + L
        return cached_k.value, cached_v.value, mask

    def _decode(self, x_BxLxE: Array, mask: AttentionMask | None, deterministic: bool,
                kernels: dict[str, tuple[Array, Array]]) -> Array:
        """Attention of the L new positions over the cache: [B, L, E] -> [B, L, H*D].

        The heads of all rows are one batch axis N = B*H, in the cache's own shape: with a
        separate B and H, XLA CPU merged them with a reshape between the cache update and
        the attention product and then fused the update into both of its readers, each on
        its own copy of the cache."""
        B, L, E = x_BxLxE.shape
        H, D = self.num_heads, self.head_dim
        x_BLxE = x_BxLxE.reshape(B * L, E)

        def project(name: str) -> Array:  # [N, L, D]
            w_ExHxD, b_HxD = kernels[name]
            y_BLxHD = x_BLxE @ w_ExHxD.reshape(E, H * D) + b_HxD.reshape(H * D)
            return y_BLxHD.reshape(B, L, H, D).transpose(0, 2, 1, 3).reshape(B * H, L, D)

        q_NxLxD = project("query") / jnp.sqrt(D).astype(self.dtype)
        padding = None if mask is None or mask.key_mask is None else padding_mask(
            mask.key_mask)
        k_NxTxD, v_NxTxD, mask = self._cached(project("key"), project("value"), padding)
        T = k_NxTxD.shape[1]
        logits_NxLxT = jnp.einsum("nld,ntd->nlt", q_NxLxD, k_NxTxD)
        logits_BxHxLxT = logits_NxLxT.astype(jnp.float32).reshape(B, H, L, T)  # float32 softmax
        logits_BxHxLxT = jnp.where(mask, logits_BxHxLxT, jnp.finfo(jnp.float32).min)
        probs_BxHxLxT = jax.nn.softmax(logits_BxHxLxT, axis=-1).astype(self.dtype)
        probs_BxHxLxT = Dropout(self.dropout_rate)(probs_BxHxLxT, deterministic=deterministic)
        out_NxLxD = jnp.einsum("nlt,ntd->nld", probs_BxHxLxT.reshape(B * H, L, T), v_NxTxD)
        return out_NxLxD.reshape(B, H, L, D).transpose(0, 2, 1, 3).reshape(B, L, H * D)

    @nn.compact
    def __call__(
        self, x_BxLxE: Array, mask: AttentionMask | None, deterministic: bool,
        decode: bool = False, queries: Queries = None, layer: Layer = 0,
    ) -> Array:
        """Attention outputs of every position, or of `queries` only (see `keep_queries`).
        `layer`: this layer's index in its stack (int), or in a scanned stack (index, number
        of layers) with a traced index: it seeds cuDNN's attention dropout."""
        E, H, D = x_BxLxE.shape[-1], self.num_heads, self.head_dim
        x_BxLxE = x_BxLxE.astype(self.dtype)
        kernels = {  # created in this order: it fixes each parameter's init key
            name: (
                self._param(f"{name}_kernel", (E, H, D), ("embed", "heads", "kv"),
                            self.kernel_init_std).astype(self.dtype),
                self._param(f"{name}_bias", (H, D), ("heads", "kv"), None).astype(self.dtype),
            )
            for name in ("query", "key", "value")
        }
        w_HxDxE = self._param("out_kernel", (H, D, E), ("heads", "kv", "embed"), self.out_init_std)
        b_E = self._param("out_bias", (E,), ("embed",), None)
        w_HxDxE, b_E = w_HxDxE.astype(self.dtype), b_E.astype(self.dtype)
        if decode:
            out_BxLxHD = self._decode(x_BxLxE, mask, deterministic, kernels)
            return out_BxLxHD @ w_HxDxE.reshape(H * D, E) + b_E

        def project(name: str, x_BxLxE: Array) -> Array:
            w_ExHxD, b_HxD = kernels[name]
            return jnp.einsum("ble,ehd->blhd", x_BxLxE, w_ExHxD) + b_HxD

        if self.fused_qkv and queries is None:
            q_BxQxHxD, k_BxLxHxD, v_BxLxHxD = _fused_qkv(x_BxLxE, kernels)
        else:
            q_BxQxHxD = project("query", keep_queries(x_BxLxE, queries))
            k_BxLxHxD = project("key", x_BxLxE)
            v_BxLxHxD = project("value", x_BxLxE)
        if queries is not None and not isinstance(queries, int) and mask is not None:
            mask = mask.at_queries(queries)
        cudnn = cudnn_runs(self.dtype, D)
        impl = resolve_impl(self.implementation, self.dropout_rate, deterministic, cudnn)
        if impl == "splash" and q_BxQxHxD.shape[1] != k_BxLxHxD.shape[1]:
            impl = "xla"  # the [CLS]-only layer: one query, below splash's 128-row blocks
        dropout = not deterministic and self.dropout_rate > 0.0
        if impl == "dot_product" and dropout and q_BxQxHxD.shape[1] != k_BxLxHxD.shape[1]:
            impl = "xla"  # the [CLS]-only layer under dropout: one query, not worth a kernel
        if impl == "xla" or self.is_mutable_collection("intermediates"):
            out_BxQxHxD = self._xla(q_BxQxHxD, k_BxLxHxD, v_BxLxHxD, mask, deterministic)
        elif impl == "splash":
            out_BxQxHxD = splash_attention(q_BxQxHxD, k_BxLxHxD, v_BxLxHxD, mask)
        elif dropout:  # resolve_impl chose dot_product with dropout: cuDNN runs it
            out_BxQxHxD = self._cudnn_dropout(q_BxQxHxD, k_BxLxHxD, v_BxLxHxD, mask, layer)
        else:
            out_BxQxHxD = fused_attention(q_BxQxHxD, k_BxLxHxD, v_BxLxHxD, mask)
        return jnp.einsum("blhd,hde->ble", out_BxQxHxD, w_HxDxE) + b_E

    def _cudnn_dropout(self, q_BxQxHxD: Array, k_BxLxHxD: Array, v_BxLxHxD: Array,
                       mask: AttentionMask | None, layer: Layer) -> Array:
        """cuDNN attention with dropout seeded for this layer: one kernel per layer, a layer
        of a scanned stack choosing its own among the stack's (lax.switch on its index)."""
        path = self.scope.path
        attend = functools.partial(cudnn_attention, mask=mask, dropout_rate=self.dropout_rate)
        if isinstance(layer, int):
            return attend(q_BxQxHxD, k_BxLxHxD, v_BxLxHxD, seed=layer_seed(path, layer))
        index, num_layers = layer
        kernels = [functools.partial(attend, seed=layer_seed(path, i)) for i in range(num_layers)]
        return jax.lax.switch(index, kernels, q_BxQxHxD, k_BxLxHxD, v_BxLxHxD)

    def _xla(self, q_BxQxHxD: Array, k_BxLxHxD: Array, v_BxLxHxD: Array,
             mask: AttentionMask | None, deterministic: bool) -> Array:
        """Attention with its probabilities materialised (sown for analysis, dropped out)."""
        Q, L, D = q_BxQxHxD.shape[1], k_BxLxHxD.shape[1], self.head_dim
        q_BxQxHxD = q_BxQxHxD / jnp.sqrt(D).astype(self.dtype)
        logits_BxHxQxL = jnp.einsum("bqhd,bkhd->bhqk", q_BxQxHxD, k_BxLxHxD)
        logits_BxHxQxL = logits_BxHxQxL.astype(jnp.float32)  # softmax in float32
        dense = None if mask is None else mask.dense(Q, L)
        if dense is not None:
            logits_BxHxQxL = jnp.where(dense, logits_BxHxQxL, jnp.finfo(jnp.float32).min)
        probs_BxHxQxL = jax.nn.softmax(logits_BxHxQxL, axis=-1).astype(self.dtype)
        # For analysis (bertjax.analysis.attention): kept only when the caller makes
        # "intermediates" mutable, otherwise a no-op. Before dropout: the model's attention.
        self.sow("intermediates", "attention_weights", probs_BxHxQxL)
        probs_BxHxQxL = Dropout(self.dropout_rate)(probs_BxHxQxL, deterministic=deterministic)
        return jnp.einsum("bhqk,bkhd->bqhd", probs_BxHxQxL, v_BxLxHxD)
