"""cuDNN's attention dropout on a GPU, layer by layer: every layer of a stack draws its own mask,
the backward pass drops out what the forward dropped, and a rematerialised forward draws the
forward's mask again, in an unrolled stack and a scanned one (bertjax/layers/cudnn_attention.py
says why a scanned stack switches to a kernel per layer). A last, control row runs a scanned
stack whose layers share one kernel, the wiring before the switch: what the checks catch.

A probe reads the masks. Each layer attends over T positions with one head of size D = T; its
queries and keys are zero, so its probabilities are 1/T, and its values are one-hot (v[t] =
e_t), so its output at query q is row q of the kept, rescaled probabilities: > 0 exactly where
the forward kept (q, t). The gradient of sum(output[q, d] [d == q]) with respect to the
values is the backward's dropped probabilities, transposed: > 0 where the backward kept
(q, t). The rematerialisation check gives the queries and keys random kernels instead (the
backward then reads the forward's outputs): the gradients with and without
rematerialisation must be equal to bfloat16 rounding.

    PYTHONPATH=. python benchmarks/cudnn_dropout.py --out=$OUT/cudnn_dropout

prints one line per check and writes cudnn_dropout.json; exits 1 when a check of the unrolled
or switched stacks fails. tests/benchmarks/test_cudnn_dropout.py runs it on the CPU with a
stand-in for the cuDNN binding (a dropout mask per seed), which checks the wiring only.
"""

import argparse
import json
import pathlib
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bertjax.layers.attention import MultiHeadAttention

T = 64  # positions, and the head size (one-hot values)
LAYERS, BATCH, RATE = 4, 8, 0.1
STACKS = ("unrolled", "scanned", "scanned, one kernel (control)")


class _Layer(nn.Module):
    """One attention layer on its own input (the probe's stacks do not chain their layers)."""

    @nn.compact
    def __call__(self, x_BxTxT: jax.Array, layer: object) -> jax.Array:
        attention = MultiHeadAttention(num_heads=1, head_dim=T, dropout_rate=RATE,
                                       implementation="dot_product", dtype=jnp.bfloat16,
                                       name="attention")
        return attention(x_BxTxT, None, False, layer=layer)


class _ScanLayer(nn.Module):
    shared_kernel: bool

    @nn.compact
    def __call__(self, carry: jax.Array, x_BxTxT: jax.Array, index: jax.Array) -> tuple:
        layer = 0 if self.shared_kernel else (index, LAYERS)
        return carry, _Layer(name="layer")(x_BxTxT, layer)


class Stack(nn.Module):
    """LAYERS probe layers, unrolled or scanned, each reading its own slice of x [N, B, T, T]."""

    stack: str
    remat: bool = False

    @nn.compact
    def __call__(self, x_NxBxTxT: jax.Array) -> jax.Array:
        if self.stack == "unrolled":
            layer_cls = nn.remat(_Layer, static_argnums=(2,)) if self.remat else _Layer
            return jnp.stack([layer_cls(name=f"layer_{i}")(x_NxBxTxT[i], i)
                              for i in range(LAYERS)])
        body = nn.remat(_ScanLayer, prevent_cse=False) if self.remat else _ScanLayer
        scanned = nn.scan(body, variable_axes={"params": 0}, split_rngs={"params": True},
                          in_axes=(0, 0), length=LAYERS,
                          metadata_params={nn.PARTITION_NAME: "layers"})
        _, out_NxBxTxT = scanned(shared_kernel=self.stack != "scanned", name="layers")(
            jnp.zeros(()), x_NxBxTxT, jnp.arange(LAYERS))
        return out_NxBxTxT


def _probe_params(model: Stack, x: jax.Array, qk_std: float) -> dict:
    """Identity value and output projections; query and key kernels zero, or N(0, qk_std)."""
    params = jax.jit(model.init)(jax.random.key(0), x)["params"]
    rng = np.random.default_rng(1)

    def set_kernel(path: tuple, leaf: jax.Array) -> jax.Array:
        name = path[-1].key
        eye = np.eye(T, dtype=np.float32)
        shape = leaf.shape
        if name in ("value_kernel", "out_kernel"):
            return jnp.broadcast_to(eye.reshape(shape[-3:]), shape)
        if name in ("query_kernel", "key_kernel"):
            return jnp.asarray(qk_std * rng.standard_normal(shape), leaf.dtype)
        return jnp.zeros(shape, leaf.dtype)

    return jax.tree_util.tree_map_with_path(set_kernel, nn.unbox(params))


def probe(stack: str, remat: bool, qk_std: float = 0.0) -> dict[str, np.ndarray]:
    """The stack's forward outputs [N, B, T, T] and the gradient of sum(out[.., q, d] [d == q])
    with respect to its inputs, each from one jitted step (a fresh program: every kernel's
    dropout offset starts where the others' do)."""
    model = Stack(stack, remat)
    x = jnp.broadcast_to(jnp.eye(T, dtype=jnp.bfloat16), (LAYERS, BATCH, T, T))
    params = _probe_params(model, x, qk_std)
    select = jnp.eye(T, dtype=jnp.float32)  # G[q, d] = [d == q]

    def loss(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        out = model.apply({"params": params}, x, rngs={"dropout": jax.random.key(2)})
        return (out.astype(jnp.float32) * select).sum(), out

    (_, out), grad = jax.jit(jax.value_and_grad(loss, has_aux=True))(x)
    return {"out": np.asarray(out, np.float32), "grad": np.asarray(grad, np.float32)}


def masks(stack: str, remat: bool) -> dict[str, np.ndarray]:
    """The forward's kept positions [N, B, Q, T] and the backward's."""
    result = probe(stack, remat)
    return {"forward": result["out"] > 0, "backward": np.swapaxes(result["grad"], -1, -2) > 0}


def check_stack(stack: str) -> dict[str, object]:
    """The three checks on one stack: figures and a verdict each."""
    plain, remat = masks(stack, False), masks(stack, True)
    forward = plain["forward"]
    kept = float(forward.mean())
    apart = [float((forward[i] != forward[j]).mean())
             for i in range(LAYERS) for j in range(i + 1, LAYERS)]
    # independent masks disagree at 2 r (1 - r) of positions (0.18); one mask at none
    layers_differ = min(apart) > 0.5 * 2 * RATE * (1 - RATE)
    backward_same = [float((m["forward"] != m["backward"]).mean()) for m in (plain, remat)]
    with_qk = [probe(stack, r, qk_std=1.0)["grad"] for r in (False, True)]
    remat_error = float(np.linalg.norm(with_qk[1] - with_qk[0]) / np.linalg.norm(with_qk[0]))
    return {
        "stack": stack,
        "keep_rate": kept,
        "layers_disagree_min": min(apart),
        "layers_differ": layers_differ and abs(kept - (1 - RATE)) < 0.01,
        "backward_disagrees": backward_same,
        "backward_reuses_forward_mask": max(backward_same) == 0.0,
        "remat_grad_relative_error": remat_error,
        "remat_draws_forward_mask": remat_error < 2e-2,
    }


def report_lines(rows: list[dict]) -> list[str]:
    lines = []
    for row in rows:
        lines.append(
            f"{row['stack']}: keep rate {row['keep_rate']:.3f}; layers differ "
            f"{'yes' if row['layers_differ'] else 'NO'} (min disagreement "
            f"{row['layers_disagree_min']:.3f}); backward reuses the forward's mask "
            f"{'yes' if row['backward_reuses_forward_mask'] else 'NO'} (disagreement "
            f"{', '.join(f'{d:.3f}' for d in row['backward_disagrees'])}); remat draws it "
            f"again {'yes' if row['remat_draws_forward_mask'] else 'NO'} (gradient error "
            f"{row['remat_grad_relative_error']:.2e})")
    return lines


def passed(rows: list[dict]) -> bool:
    """Every check of the stacks bertjax builds (the control row is expected to fail)."""
    checks = ("layers_differ", "backward_reuses_forward_mask", "remat_draws_forward_mask")
    return all(row[c] for row in rows if "control" not in row["stack"] for c in checks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="directory for cudnn_dropout.json")
    args = parser.parse_args(argv)
    rows = [check_stack(stack) for stack in STACKS]
    print("\n".join(report_lines(rows)))
    ok = passed(rows)
    if args.out:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        record = {"device": str(jax.devices()[0]), "passed": ok, "rows": rows}
        (out / "cudnn_dropout.json").write_text(json.dumps(record, indent=2) + "\n")
    print("cudnn dropout checks:", "passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
