"""The tied output projection and its cross-entropy, one slice of the sequence at a time.

A language model's logits [B, L, V] and their gradient are the largest arrays of its step, yet
the loss needs only each row's log-sum-exp and target logit. Here the head runs over `slices`
consecutive slices of the sequence in a scan: each slice's logits (h @ table^T, the product in
the compute dtype) give its loss sums and, when differentiated, the loss's gradients for h and
the table in the same pass, so no [B, L, V] array ever exists (the fused linear cross-entropy
of Liger-Kernel; Wijmans et al. 2024, "Cut Your Losses in Large-Vocabulary Language Models").
On the CPU the slices stay in cache: XLA otherwise writes the whole logits out, reads them back
for every reduction and the softmax's gradient, and writes that gradient again. Slicing the
sequence, not the flattened rows, keeps a batch sharded over devices sharded in every slice.

The sums are float32 (the row maximum and target logit read in the compute dtype, as
objectives/xent.py reads them), equal to xent.weighted_cross_entropy on the full logits to
float32 rounding (tests/objectives/test_head_xent.py). The gradient is the loss sum's, made
in the forward pass and scaled by the incoming cotangent (the loss is linear in the sum).
"""

import functools

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from bertjax.layers.embeddings import padded_table
from bertjax.objectives import xent

Array = jax.Array
F32 = jnp.float32


def slices_for(batch_size: int, seq_length: int, rows: int) -> int:
    """How many slices of the sequence give slices of at most `rows` rows (positions over the
    whole batch): the smallest divisor of `seq_length` that does, or `seq_length` (one
    position a slice) when even that is more. `rows` 0 means one slice."""
    if rows <= 0:
        return 1
    for slices in range(1, seq_length + 1):
        if seq_length % slices == 0 and batch_size * (seq_length // slices) <= rows:
            return slices
    return seq_length


def tied_cross_entropy_sums(h_BxLxE: Array, table_VxE: Array, targets_BxL: Array,
                            weights_BxL: Array, slices: int, dtype: DTypeLike,
                            pad_vocab_to: int = 1) -> tuple[Array, Array]:
    """(sum of w * cross-entropy, sum of w * correct), float32 scalars, of the logits
    h @ table^T against `targets`, weighted by `weights` (float32). The product runs in
    `dtype` over the table padded with zero rows to a multiple of `pad_vocab_to` (padded ids
    take no share of the softmax), as layers/embeddings.attend computes it. A target is
    correct where its logit reaches the row maximum. Differentiable in h, the table and the
    weights; `slices` must divide the sequence length."""
    L = h_BxLxE.shape[1]
    if L % slices:
        raise ValueError(f"the loss's {slices} slices do not divide the sequence length {L}: "
                         "set a row count whose slices divide it (slices_for picks one)")
    return _sums(h_BxLxE, table_VxE, targets_BxL, weights_BxL.astype(F32), slices,
                 jnp.dtype(dtype), pad_vocab_to)


def _sliced(x_BxL: Array, slices: int) -> Array:
    """[B, L, ...] -> [slices, B, L / slices, ...]: the scan's leading axis."""
    B, L = x_BxL.shape[:2]
    return jnp.swapaxes(x_BxL.reshape(B, slices, L // slices, *x_BxL.shape[2:]), 0, 1)


def _joined(x_SxBxC: Array) -> Array:
    """The inverse of _sliced."""
    S, B, C = x_SxBxC.shape[:3]
    return jnp.swapaxes(x_SxBxC, 0, 1).reshape(B, S * C, *x_SxBxC.shape[3:])


def _slice_logits(h_BxCxE: Array, table_PxE: Array, vocab_size: int) -> Array:
    """The slice's logits [B, C, P] in the compute dtype, the padded ids' at -inf."""
    logits_BxCxP = jnp.einsum("bce,pe->bcp", h_BxCxE, table_PxE)
    if table_PxE.shape[0] > vocab_size:
        real_P = jnp.arange(table_PxE.shape[0]) < vocab_size
        logits_BxCxP = jnp.where(real_P, logits_BxCxP, -jnp.inf)
    return logits_BxCxP


def _scan(h_BxLxE: Array, table_VxE: Array, targets_BxL: Array, weights_BxL: Array,
          slices: int, dtype: jnp.dtype, pad_vocab_to: int, grads: bool) -> tuple:
    """The sums, the per-token cross-entropy and, with `grads`, d(sum)/dh and d(sum)/dtable."""
    V = table_VxE.shape[0]
    table_PxE = padded_table(table_VxE, dtype, pad_vocab_to)
    P, E = table_PxE.shape

    def body(dtable_ExP: Array, xs: tuple[Array, Array, Array]) -> tuple[Array, tuple]:
        h_BxCxE, targets_BxC, weights_BxC = xs
        h_BxCxE = h_BxCxE.astype(dtype)
        logits_BxCxP = _slice_logits(h_BxCxE, table_PxE, V)
        (xent_BxC, correct_BxC), residuals = xent.cross_entropy_forward(
            logits_BxCxP, targets_BxC)
        if not grads:
            return dtable_ExP, (xent_BxC, correct_BxC)
        g_BxCxP, _ = xent.cross_entropy_backward(residuals, (weights_BxC, None))
        dh_BxCxE = jnp.einsum("bcp,pe->bce", g_BxCxP, table_PxE)
        dtable_ExP = dtable_ExP + jnp.einsum("bce,bcp->ep", h_BxCxE, g_BxCxP,
                                             preferred_element_type=F32)
        return dtable_ExP, (xent_BxC, correct_BxC, dh_BxCxE)

    xs = (_sliced(h_BxLxE, slices), _sliced(targets_BxL, slices), _sliced(weights_BxL, slices))
    dtable_ExP, outs = jax.lax.scan(body, jnp.zeros((E, P) if grads else (), F32), xs)
    xent_BxL, correct_BxL = _joined(outs[0]), _joined(outs[1])
    sums = ((xent_BxL * weights_BxL).sum(), (correct_BxL * weights_BxL).sum())
    if not grads:
        return sums, xent_BxL
    dh_BxLxE = _joined(outs[2]).astype(h_BxLxE.dtype)
    return sums, xent_BxL, dh_BxLxE, dtable_ExP.T[:V].astype(table_VxE.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def _sums(h_BxLxE: Array, table_VxE: Array, targets_BxL: Array, weights_BxL: Array,
          slices: int, dtype: jnp.dtype, pad_vocab_to: int) -> tuple[Array, Array]:
    return _scan(h_BxLxE, table_VxE, targets_BxL, weights_BxL, slices, dtype, pad_vocab_to,
                 grads=False)[0]


def _sums_forward(h_BxLxE: Array, table_VxE: Array, targets_BxL: Array, weights_BxL: Array,
                  slices: int, dtype: jnp.dtype, pad_vocab_to: int) -> tuple:
    sums, xent_BxL, dh_BxLxE, dtable_VxE = _scan(
        h_BxLxE, table_VxE, targets_BxL, weights_BxL, slices, dtype, pad_vocab_to, grads=True)
    return sums, (xent_BxL, dh_BxLxE, dtable_VxE)


def _sums_backward(slices: int, dtype: jnp.dtype, pad_vocab_to: int, residuals: tuple,
                   cotangents: tuple[Array, Array]) -> tuple:
    del slices, dtype, pad_vocab_to
    xent_BxL, dh_BxLxE, dtable_VxE = residuals
    g = cotangents[0]  # the accuracy sum has no gradient
    return ((g * dh_BxLxE).astype(dh_BxLxE.dtype), (g * dtable_VxE).astype(dtable_VxE.dtype),
            None, g * xent_BxL)


_sums.defvjp(_sums_forward, _sums_backward)
