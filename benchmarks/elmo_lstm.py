"""ELMo's LSTM layer, forward + backward: bertjax's ProjectedLstm next to torch.nn.LSTM.

What is timed, per step and per implementation, on one CPU device in float32: one layer of
ELMo-original's biLSTM (4096 cells, projection 512, input 512; a forward and a backward
direction, each with its own weights) over a batch of 16 x 20 tokens, then the gradients of
a loss sum(y * r) (r a fixed random [B, T, 2P] tensor) with respect to every weight and to the
input. No optimizer update. Warm-up steps (bertjax compiles in the first) are not timed.

    bertjax       ProjectedLstm(4096, 512, num_directions=2), no clipping; jitted value_and_grad
    torch         torch.nn.LSTM(512, 4096, proj_size=512, bidirectional=True, batch_first=True),
                  then loss.backward() (torch runs LSTMs with projections without oneDNN)
    bertjax-clip  bertjax with bilm-tf's cell and projection clipping at +-3 (torch has none)

`bertjax` and `torch` compute the same function from the same weights (bertjax's init copied
into torch) and inputs: the first step's loss and gradients are compared and printed, and the
ratio `bertjax / torch` is between these two. `bertjax-clip` is ELMo's real layer, which does
a little more work than torch's; its ratio to torch is printed separately.

The machine may be shared, so the implementations alternate within every round (the order
flips each round), each round's torch/bertjax time ratio is kept, and the load average is
sampled every round; a warning says when it exceeded the core count. torch runs as a user
gets it: default settings, intra-op threads = schedulable cores. XLA_FLAGS is replaced by
`--xla_flags` (empty by default) before jax is imported, so a shell that exports the test
suite's fake devices does not split the CPU here.

    python benchmarks/elmo_lstm.py                      # the claim: original size, 15 rounds
    python benchmarks/elmo_lstm.py --quick              # small sizes, a few seconds
    python benchmarks/elmo_lstm.py --json=elmo_lstm.json
"""

import argparse
import json
import os
import platform
import statistics
import sys

from timing import time_steps

QUICK = {"cell_size": 256, "proj_size": 64, "input_size": 64, "batch_size": 4,
         "seq_length": 8, "rounds": 3, "warmup": 1}
CLIP = 3.0  # bilm-tf's cell_clip and proj_clip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cell_size", type=int, default=4096)
    p.add_argument("--proj_size", type=int, default=512)
    p.add_argument("--input_size", type=int, default=512)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--seq_length", type=int, default=20)
    p.add_argument("--rounds", type=int, default=15, help="rounds; each times every row")
    p.add_argument("--steps", type=int, default=1, help="timed steps per row per round")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per row first")
    p.add_argument("--impls", default="bertjax,torch,bertjax-clip",
                   help="comma-separated rows: bertjax, torch, bertjax-clip")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: cores)")
    p.add_argument("--xla_flags", default="", help="XLA_FLAGS for this run (default: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="small sizes: " + str(QUICK))
    p.add_argument("--json", default=None, help="write the results to this file")
    args = p.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    args.impls = args.impls.split(",")
    unknown = set(args.impls) - {"bertjax", "torch", "bertjax-clip"}
    if unknown or "bertjax" not in args.impls:
        p.error(f"--impls: unknown {sorted(unknown)} or no bertjax; the rows are bertjax, torch, "
                "bertjax-clip (bertjax is needed: its init is the weights)")
    return args


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


# ----------------------------------------------------------------------------- the two sides


class BertjaxRunner:
    """A jitted forward + backward of ProjectedLstm over [x, reversed x], outputs realigned."""

    def __init__(self, name: str, args: argparse.Namespace, x_BxTxI, r_BxTx2P, clip=None):
        import jax
        import jax.numpy as jnp

        from bertjax.layers.lstm import ProjectedLstm

        self.name, self.jax = name, jax
        self.note = ("cell and projection clipping at +-3 (bilm-tf); not in torch" if clip
                     else "no clipping, like torch")
        layer = ProjectedLstm(args.cell_size, args.proj_size, num_directions=2,
                              cell_clip=clip, proj_clip=clip)
        x2 = jnp.zeros((2, 1, 1, args.input_size))
        boxed = layer.init(jax.random.key(args.seed), x2)["params"]
        self.params = nn_unbox(boxed)
        self.x, r = jnp.asarray(x_BxTxI), jnp.asarray(r_BxTx2P)

        def loss(params, x_BxTxI):
            x_2xBxTxI = jnp.stack([x_BxTxI, x_BxTxI[:, ::-1]])
            y_2xBxTxP, _ = layer.apply({"params": params}, x_2xBxTxI)
            y_BxTx2P = jnp.concatenate([y_2xBxTxP[0], y_2xBxTxP[1][:, ::-1]], axis=-1)
            return jnp.sum(y_BxTx2P * r)

        self.fn = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))

    def step(self) -> None:
        self.out = self.jax.block_until_ready(self.fn(self.params, self.x))

    def result(self) -> tuple[float, dict]:
        """The loss and the gradients in torch's names and layouts (numpy)."""
        import numpy as np

        loss, (g, gx) = self.jax.device_get(self.out)
        return float(loss), {"x": np.asarray(gx), **to_torch_layout(g)}


def nn_unbox(tree):
    import flax.linen as nn

    return nn.meta.unbox(tree)


def to_torch_layout(params: dict) -> dict:
    """ProjectedLstm's [D, ...] parameters -> torch.nn.LSTM's per-direction tensors (numpy)."""
    import numpy as np

    out = {}
    for d, suffix in enumerate(("", "_reverse")):
        w_x, w_h = np.asarray(params["input_kernel"][d]), np.asarray(params["recurrent_kernel"][d])
        out[f"weight_ih_l0{suffix}"] = w_x.reshape(w_x.shape[0], -1).T  # [4H, I], gates i f g o
        out[f"weight_hh_l0{suffix}"] = w_h.reshape(w_h.shape[0], -1).T
        out[f"bias_ih_l0{suffix}"] = np.asarray(params["bias"][d]).reshape(-1)
        out[f"weight_hr_l0{suffix}"] = np.asarray(params["projection"][d]).T  # [P, H]
    return out


class TorchRunner:
    """torch.nn.LSTM(proj_size=P, bidirectional=True) with bertjax's weights; loss.backward()."""

    name, note = "torch", "torch.nn.LSTM(proj_size, bidirectional), no clipping"

    def __init__(self, args: argparse.Namespace, params: dict, x_BxTxI, r_BxTx2P):
        import torch

        self.torch = torch
        self.lstm = torch.nn.LSTM(args.input_size, args.cell_size, proj_size=args.proj_size,
                                  bidirectional=True, batch_first=True)
        with torch.no_grad():
            for name, value in to_torch_layout(params).items():
                getattr(self.lstm, name).copy_(torch.from_numpy(value.copy()))
            for suffix in ("", "_reverse"):
                getattr(self.lstm, f"bias_hh_l0{suffix}").zero_()
        self.x = torch.from_numpy(x_BxTxI).requires_grad_(True)
        self.r = torch.from_numpy(r_BxTx2P)

    def step(self) -> None:
        self.lstm.zero_grad(set_to_none=True)
        self.x.grad = None
        y_BxTx2P, _ = self.lstm(self.x)
        self.loss = (y_BxTx2P * self.r).sum()
        self.loss.backward()

    def result(self) -> tuple[float, dict]:
        grads = {name: p.grad.numpy() for name, p in self.lstm.named_parameters()
                 if not name.startswith("bias_hh")}
        return float(self.loss.detach()), {"x": self.x.grad.numpy(), **grads}


# ----------------------------------------------------------------------------- timing


def spread(values: list[float]) -> dict:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "q1": q[0], "q3": q[2]}


def compare(ours: tuple[float, dict], theirs: tuple[float, dict]) -> dict:
    """Largest |ours - torch| over each gradient, relative to that gradient's largest |torch|."""
    import numpy as np

    rel = {k: float(np.abs(ours[1][k] - v).max() / max(np.abs(v).max(), 1e-30))
           for k, v in theirs[1].items()}
    return {"loss_bertjax": ours[0], "loss_torch": theirs[0],
            "loss_rel_diff": abs(ours[0] - theirs[0]) / max(abs(theirs[0]), 1e-30),
            "grad_max_rel_diff": max(rel.values()), "grad_rel_diff": rel}


def run(args: argparse.Namespace) -> dict:
    import jax
    import numpy as np
    import torch

    threads = args.threads or cores()
    torch.set_num_threads(threads)
    rng = np.random.default_rng(args.seed)
    B, T, P = args.batch_size, args.seq_length, args.proj_size
    x_BxTxI = rng.normal(size=(B, T, args.input_size)).astype(np.float32)
    r_BxTx2P = rng.normal(size=(B, T, 2 * P)).astype(np.float32)
    loads = [os.getloadavg()[0]]

    runners = [BertjaxRunner("bertjax", args, x_BxTxI, r_BxTx2P)]
    if "torch" in args.impls:
        runners.append(TorchRunner(args, jax.device_get(runners[0].params), x_BxTxI, r_BxTx2P))
    if "bertjax-clip" in args.impls:
        runners.append(BertjaxRunner("bertjax-clip", args, x_BxTxI, r_BxTx2P, clip=CLIP))

    first = {}
    for r in runners:
        first[r.name] = time_steps(r, 1)[0][0]
        time_steps(r, args.warmup - 1)
    by_name = {r.name: r for r in runners}
    check = (compare(by_name["bertjax"].result(), by_name["torch"].result())
             if "torch" in by_name else None)

    times = {r.name: [] for r in runners}
    per_round = []
    for k in range(args.rounds):
        this_round = {}
        for r in runners if k % 2 == 0 else runners[::-1]:
            steps = time_steps(r, args.steps)
            times[r.name] += steps
            this_round[r.name] = statistics.median(w for w, _ in steps)
        loads.append(os.getloadavg()[0])
        per_round.append(this_round)

    results = []
    for r in runners:
        walls = [w for w, _ in times[r.name]]
        results.append({
            "implementation": r.name, "note": r.note,
            "step_ms": {k: 1e3 * v for k, v in spread(walls).items()},
            "step_ms_all": [1e3 * w for w in walls],
            "cpu_ms_median": 1e3 * statistics.median(c for _, c in times[r.name]),
            "tokens_per_s": B * T / statistics.median(walls),
            "first_step_s": first[r.name],
        })
    ratios = {}
    for name in ("bertjax", "bertjax-clip"):
        if name in by_name and "torch" in by_name:
            paired = [rd["torch"] / rd[name] for rd in per_round]
            med = statistics.median
            ratios[f"{name}/torch"] = {
                "speedup_of_medians": med(w for w, _ in times["torch"])
                / med(w for w, _ in times[name]),
                "per_round": spread(paired),
                "like_for_like": name == "bertjax",
            }
    return {
        "what": "one ELMo biLSTM layer (2 directions), forward + gradients of sum(y * r) "
                "w.r.t. all weights and the input; no optimizer update; float32; one CPU device",
        "sizes": {"cell_size": args.cell_size, "proj_size": P, "input_size": args.input_size,
                  "batch_size": B, "seq_length": T, "directions": 2},
        "quick": args.quick, "rounds": args.rounds, "steps": args.steps, "warmup": args.warmup,
        "seed": args.seed, "clip_of_bertjax_clip": CLIP,
        "results": results, "ratios": ratios, "per_round_ms": per_round, "check": check,
        "threads": {"jax_xla_cpu_pool": cores(), "torch_intra_op": torch.get_num_threads()},
        "env": {
            "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", ""),
            "jax": jax.__version__, "jax_devices": [str(d) for d in jax.devices()],
            "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
            "cores": cores(), "load_average_1min": spread(loads), "load_samples": loads,
        },
    }


def report(r: dict) -> str:
    s = r["sizes"]
    lines = [
        f"ELMo LSTM layer, 2 directions: cells {s['cell_size']}, projection {s['proj_size']}, "
        f"input {s['input_size']}, batch {s['batch_size']} x {s['seq_length']} tokens; "
        "forward + backward (all weight and input gradients), no update, float32",
        f"  threads: jax (XLA CPU pool) {r['threads']['jax_xla_cpu_pool']}, torch "
        f"{r['threads']['torch_intra_op']}; XLA_FLAGS={r['env']['XLA_FLAGS']!r}; "
        f"{r['rounds']} interleaved round(s) x {r['steps']} step(s) after {r['warmup']} warm-up",
        "",
        f"  {'implementation':<14}{'median ms':>10}{'q1-q3 ms':>16}{'min-max ms':>16}"
        f"{'CPU ms':>9}{'tokens/s':>10}{'1st s':>7}  what",
    ]
    for x in r["results"]:
        t = x["step_ms"]
        lines.append(
            f"  {x['implementation']:<14}{t['median']:>10.0f}{t['q1']:>8.0f}-{t['q3']:<7.0f}"
            f"{t['min']:>8.0f}-{t['max']:<7.0f}{x['cpu_ms_median']:>9.0f}"
            f"{x['tokens_per_s']:>10.0f}{x['first_step_s']:>7.1f}  {x['note']}")
    lines.append("")
    for name, v in r["ratios"].items():
        pr = v["per_round"]
        kind = "same computation" if v["like_for_like"] else "bertjax also clips"
        lines.append(
            f"  ratio torch time / {name.split('/')[0]} time: {v['speedup_of_medians']:.2f}x "
            f"(ratio of medians); per round median {pr['median']:.2f}x, range "
            f"{pr['min']:.2f}-{pr['max']:.2f}x  [{kind}]")
    lines += [
        "  what differs from the same work on both sides:",
        "    - bertjax and torch: nothing (the same function of the same weights and inputs, "
        "checked below)",
        "    - bertjax-clip also clips cells and projections at +-3 (ELMo's real layer), which "
        "torch.nn.LSTM cannot do: its ratio is not like for like",
    ]
    if r["check"]:
        c = r["check"]
        lines.append(
            f"  same function: loss bertjax {c['loss_bertjax']:.6g} torch {c['loss_torch']:.6g}; "
            f"largest gradient difference {c['grad_max_rel_diff']:.1e} of the gradient's max")
    load, n = r["env"]["load_average_1min"], r["env"]["cores"]
    lines.append(f"  1-minute load average over the run: median {load['median']:.1f}, "
                 f"range {load['min']:.1f}-{load['max']:.1f} on {n} cores")
    if load["max"] > n:
        lines.append(
            f"  WARNING: the load average exceeded the {n} cores: other processes shared the CPU."
            " Absolute times are inflated; the per-round ratios are the better guide.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    previous = os.environ.get("XLA_FLAGS")
    if previous and previous != args.xla_flags:
        print(f"note: XLA_FLAGS={previous!r} from the environment replaced by --xla_flags",
              file=sys.stderr)
    os.environ["XLA_FLAGS"] = args.xla_flags  # before jax is imported
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    result = run(args)
    print(report(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
