"""BERT pretraining train-step throughput: bertjax next to transformers' BertForPreTraining (torch).

Both sides run a full training step (forward, backward, AdamW update with the same no-decay
groups and global-norm clipping at 1.0) in float32 with dropout on, on the same random batch, from
the same initial weights (bertjax's init exported with `bertjax_to_hf`), on one CPU device with
the same number of threads. A float32 GEMM in each framework, timed in the same run, gives the
peak that model FLOPs utilization (MFU) is measured against.

Torch is timed two ways:
  torch-hf        `BertForPreTraining(labels=..., next_sentence_label=...)`: labels are -100 off
                  the masked positions, so the loss covers masked positions only, but HF still
                  computes [B, L, V] logits for every position (as in HF pretraining scripts).
  torch-gathered  the same HF modules, with the sequence output gathered at the masked
                  positions before `cls.predictions` ([B, P, V] logits): the work bertjax does.

    XLA_FLAGS= python benchmarks/bert_pretraining_step.py --size=base            # the full run
    python benchmarks/bert_pretraining_step.py --size=tiny --steps=5 --json=out.json

XLA_FLAGS is replaced by `--xla_flags` (default empty: one CPU device, XLA defaults) before jax
is imported, so a shell that exports e.g. --xla_force_host_platform_device_count=8 for the
tests does not split the CPU into fake devices here.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

from timing import median_seconds, time_steps

GEMM_FLOPS = "2 * n^3 per n x n GEMM"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--size", default="base", choices=["tiny", "mini", "small", "medium", "base", "large"]
    )
    p.add_argument("--seq_length", type=int, default=128)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument(
        "--max_predictions",
        type=int,
        default=None,
        help="masked positions per sequence (default ceil(0.15 * seq_length): 20 at 128, as BERT)",
    )
    p.add_argument("--steps", type=int, default=10, help="timed steps per implementation per round")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (jax: compiles)")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="alternate the implementations this many times (steps each); medians pool all rounds",
    )
    p.add_argument("--impls", default="bertjax,torch-hf,torch-gathered", help="comma-separated")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: JAX's count)")
    p.add_argument("--torch_attn", default="sdpa", choices=["sdpa", "eager"])
    p.add_argument("--matmul_size", type=int, default=2048, help="n of the n x n peak GEMM")
    p.add_argument("--matmul_reps", type=int, default=10)
    p.add_argument("--xla_flags", default="", help="XLA_FLAGS for this run (default: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the results to this file")
    args = p.parse_args(argv)
    if args.max_predictions is None:
        args.max_predictions = max(1, -(-args.seq_length * 15 // 100))
    if args.max_predictions > args.seq_length - 3:
        p.error(f"--max_predictions {args.max_predictions} must be <= seq_length - 3")
    if args.seq_length < 8 or args.batch_size < 1 or args.steps < 1 or args.warmup < 1:
        p.error("need --seq_length >= 8, --batch_size >= 1, --steps >= 1, --warmup >= 1")
    args.impls = [s.strip() for s in args.impls.split(",") if s.strip()]
    unknown = set(args.impls) - {"bertjax", "torch-hf", "torch-gathered"}
    if unknown or not args.impls:
        p.error(f"--impls: unknown {sorted(unknown)}: use bertjax, torch-hf, torch-gathered")
    return args


# ----------------------------------------------------------------------------- batch


def make_batch(batch_size: int, seq_length: int, predictions: int, vocab: int, seed: int) -> dict:
    """A random BERT pretraining batch: [CLS] a [SEP] b [SEP], no padding, `predictions` distinct
    masked positions per row (all replaced by [MASK]), random NSP labels. numpy, seeded."""
    import numpy as np

    cls, sep, mask = 101, 102, 103
    rng = np.random.default_rng(seed)
    B, L, P = batch_size, seq_length, predictions
    ids = rng.integers(1000, vocab, size=(B, L), dtype=np.int32)
    split = L // 2
    ids[:, 0], ids[:, split], ids[:, L - 1] = cls, sep, sep
    segments = np.zeros((B, L), np.int32)
    segments[:, split + 1 :] = 1
    candidates = np.array([i for i in range(1, L - 1) if i != split])
    positions = np.sort(
        np.stack([rng.choice(candidates, size=P, replace=False) for _ in range(B)]), axis=1
    ).astype(np.int32)
    targets = np.take_along_axis(ids, positions, axis=1)
    np.put_along_axis(ids, positions, mask, axis=1)
    return {
        "input_ids": ids,
        "input_mask": np.ones((B, L), np.int32),
        "segment_ids": segments,
        "masked_lm_positions": positions,
        "masked_lm_ids": targets.astype(np.int32),
        "masked_lm_weights": np.ones((B, P), np.float32),
        "next_sentence_label": rng.integers(0, 2, size=(B,), dtype=np.int32),
    }


# ----------------------------------------------------------------------------- FLOPs


def model_flops_per_step(config, counts: dict, B: int, L: int, P: int) -> dict:
    """Model FLOPs of one training step (forward + backward = 3 x forward matmul FLOPs).

    6 * (encoder params * B*L  +  pooler/NSP params * B  +  (MLM transform params + E*V) * B*P)
      + 12 * layers * L * E * B*L      (attention scores QK^T and probs @ V)
    Only work the model needs counts: the same numerator for every implementation, so torch-hf's
    logits at unmasked positions are overhead, not model FLOPs. Embedding lookups, LayerNorm,
    softmax, GELU and the optimizer are not counted.
    """
    E, V, layers = config.transformer.hidden_size, config.vocab_size, config.transformer.num_layers
    T = B * L
    dense = 6 * counts["encoder"] * T
    heads_cls = 6 * counts["pooler_nsp"] * B
    mlm = 6 * (counts["mlm_transform"] + E * V) * B * P
    attention = 12 * layers * L * E * T
    total = dense + heads_cls + mlm + attention
    return {
        "total": total,
        "encoder_dense": dense,
        "pooler_nsp": heads_cls,
        "mlm_head": mlm,
        "attention": attention,
        "simple_6N": 6 * counts["non_embedding"] * T,
    }


def param_groups(params) -> dict:
    """Parameter counts of bertjax's BertForPreTraining by role."""
    import flax
    import numpy as np

    flat = flax.traverse_util.flatten_dict(params)
    groups = {"embedding": 0, "encoder": 0, "pooler_nsp": 0, "mlm_transform": 0, "mlm_bias": 0}
    for path, x in flat.items():
        n = int(np.prod(x.shape))
        if path[:2] == ("bert", "embeddings"):
            table = path[2] != "layer_norm"
            groups["embedding" if table else "encoder"] += n
        elif path[:2] == ("bert", "encoder"):
            groups["encoder"] += n
        elif path[:2] == ("bert", "pooler") or path[0] == "nsp":
            groups["pooler_nsp"] += n
        elif path[0] in ("mlm_transform", "mlm_layer_norm"):
            groups["mlm_transform"] += n
        elif path[0] == "mlm_bias":
            groups["mlm_bias"] += n
        else:
            raise ValueError(f"bert_pretraining_step.py: unexpected parameter {'/'.join(path)}")
    groups["total"] = sum(groups.values())
    groups["non_embedding"] = groups["total"] - groups["embedding"] - groups["mlm_bias"]
    return groups


# ----------------------------------------------------------------------------- peak GEMM


def gemm_peaks(n: int, reps: int) -> dict:
    """float32 n x n GEMM FLOP/s in jax (jnp.dot, jitted) and torch (torch.mm)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    ja, jb = jnp.asarray(a), jnp.asarray(b)
    dot = jax.jit(jnp.dot)
    jax_s = median_seconds(lambda: dot(ja, jb).block_until_ready(), reps)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    torch_s = median_seconds(lambda: torch.mm(ta, tb), reps)
    flops = 2 * n**3
    return {"n": n, "jax_flops_per_s": flops / jax_s, "torch_flops_per_s": flops / torch_s}


# ----------------------------------------------------------------------------- bertjax


class BertjaxRunner:
    """bertjax's jitted, donated train step on a one-device mesh."""

    name = "bertjax"
    note = "jit(train_step), MLM logits at masked positions only [B,P,V]"

    def __init__(self, config, batch: dict, seed: int):
        import jax

        from bertjax.objectives.pretraining import bert_pretraining
        from bertjax.training.loop import build_trainer
        from bertjax.training.mesh import make_mesh
        from bertjax.training.optim import make_optimizer

        tx = make_optimizer("adamw", learning_rate=1e-4, warmup_steps=1, total_steps=10**6)
        mesh = make_mesh(devices=jax.devices()[:1])
        self.trainer = build_trainer(bert_pretraining(config), tx, mesh,
                                     *batch["input_ids"].shape, seed=seed)
        self.state = self.trainer.init()
        self.batch = batch
        self.loss = None

    def host_params(self):
        import jax

        return jax.device_get(self.state.params)

    def step(self) -> None:
        import jax

        self.state, metrics = self.trainer.step(self.state, self.trainer.device_batch(self.batch))
        jax.block_until_ready((self.state, metrics))
        self.last_metrics = metrics

    def finish(self) -> None:
        self.loss = float(self.last_metrics["loss"])


# ----------------------------------------------------------------------------- torch


def hf_config(config, attn: str):
    import transformers

    from bertjax.convert import hf_bert

    hf = transformers.BertConfig(**hf_bert.hf_config(config, "BertForPreTraining"))
    hf._attn_implementation = attn
    return hf


class TorchRunner:
    """transformers' BertForPreTraining with torch.optim.AdamW, eager float32."""

    def __init__(self, name: str, config, attn: str, hf_tensors: dict, batch: dict, seed: int):
        import torch
        import transformers

        self.name = name
        self.gathered = name == "torch-gathered"
        self.note = (
            "HF modules, sequence output gathered before cls.predictions [B,P,V]"
            if self.gathered
            else "BertForPreTraining(labels=-100 off masked), full logits [B,L,V]"
        )
        torch.manual_seed(seed)
        self.model = transformers.BertForPreTraining(hf_config(config, attn)).float()
        state = {k: torch.from_numpy(v) for k, v in hf_tensors.items()}
        self.model.load_state_dict(state, strict=True)
        self.model.train()
        self.attn = self.model.config._attn_implementation
        decay, no_decay = [], []
        for n, p in self.model.named_parameters():
            (no_decay if n.endswith("bias") or "LayerNorm" in n else decay).append(p)
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
            lr=1e-4,
            betas=(0.9, 0.999),
            eps=1e-6,
        )
        t = {k: torch.from_numpy(v).long() for k, v in batch.items() if k != "masked_lm_weights"}
        labels = torch.full_like(t["input_ids"], -100)
        labels.scatter_(1, t["masked_lm_positions"], t["masked_lm_ids"])
        self.inputs = {
            "input_ids": t["input_ids"],
            "token_type_ids": t["segment_ids"],
            "attention_mask": t["input_mask"],
        }
        self.labels, self.nsp_labels = labels, t["next_sentence_label"]
        self.positions, self.targets = t["masked_lm_positions"], t["masked_lm_ids"]
        self.loss = None

    def _loss(self):
        import torch.nn.functional as F

        if not self.gathered:
            out = self.model(**self.inputs, labels=self.labels, next_sentence_label=self.nsp_labels)
            return out.loss
        seq_BxLxE, pooled_BxE = self.model.bert(**self.inputs, return_dict=False)[:2]
        index = self.positions[..., None].expand(-1, -1, seq_BxLxE.shape[-1])
        h_BxPxE = seq_BxLxE.gather(1, index)
        logits_BxPxV = self.model.cls.predictions(h_BxPxE)
        nsp_Bx2 = self.model.cls.seq_relationship(pooled_BxE)
        mlm = F.cross_entropy(logits_BxPxV.flatten(0, 1), self.targets.flatten())
        return mlm + F.cross_entropy(nsp_Bx2, self.nsp_labels)

    def step(self) -> None:
        import torch

        loss = self._loss()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.last_loss = loss.detach()

    def finish(self) -> None:
        self.loss = float(self.last_loss)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())  # tied decoder counted once


# ----------------------------------------------------------------------------- timing


def run(args: argparse.Namespace) -> dict:
    import jax
    import numpy as np
    import torch

    from bertjax.convert.hf_bert import bertjax_to_hf
    from bertjax.models.bert import bert_config

    load_before = os.getloadavg()[0]
    config = bert_config(args.size)
    jax_threads = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    )
    threads = args.threads or jax_threads
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    B, L, P = args.batch_size, args.seq_length, args.max_predictions
    batch = make_batch(B, L, P, config.vocab_size, args.seed)

    peaks = gemm_peaks(args.matmul_size, args.matmul_reps)
    peak = max(peaks["jax_flops_per_s"], peaks["torch_flops_per_s"])

    setup_start = time.perf_counter()
    jax_runner = BertjaxRunner(config, batch, args.seed)
    params = jax_runner.host_params()
    counts = param_groups(params)
    hf_tensors = bertjax_to_hf(params, config)
    runners = [jax_runner] if "bertjax" in args.impls else []
    for name in ("torch-hf", "torch-gathered"):
        if name in args.impls:
            runners.append(TorchRunner(name, config, args.torch_attn, hf_tensors, batch, args.seed))
    del params, hf_tensors
    torch_params = TorchRunner.num_params(runners[-1]) if runners[-1] is not jax_runner else None
    if torch_params is not None and torch_params != counts["total"]:
        raise SystemExit(
            f"bert_pretraining_step.py: parameter counts differ (bertjax {counts['total']}, "
            f"torch {torch_params}): the two models are not the same size"
        )
    setup_s = time.perf_counter() - setup_start

    first, times = {}, {r.name: [] for r in runners}
    for r in runners:
        first[r.name] = time_steps(r, 1)[0][0]
        time_steps(r, args.warmup - 1)
    for _ in range(args.rounds):
        for r in runners:
            times[r.name] += time_steps(r, args.steps)
    for r in runners:
        r.finish()

    flops = model_flops_per_step(config, counts, B, L, P)
    results = []
    for r in runners:
        walls = [w for w, _ in times[r.name]]
        cpus = [c for _, c in times[r.name]]
        t = statistics.median(walls)
        results.append(
            {
                "implementation": r.name,
                "note": r.note,
                "step_ms_median": 1e3 * t,
                "step_ms_mean": 1e3 * statistics.mean(walls),
                "step_ms_min": 1e3 * min(walls),
                "step_ms_all": [1e3 * x for x in walls],
                "cpu_ms_median": 1e3 * statistics.median(cpus),
                "tokens_per_s": B * L / t,
                "mfu": flops["total"] / t / peak,
                "first_step_s": first[r.name],
                "final_loss": r.loss,
                **({"torch_attn_implementation": r.attn} if hasattr(r, "attn") else {}),
            }
        )
    by_name = {r["implementation"]: r for r in results}
    ratios = {}
    if "bertjax" in by_name:
        for peer in ("torch-hf", "torch-gathered"):
            if peer in by_name:
                ratios[f"bertjax/{peer}"] = (
                    by_name["bertjax"]["tokens_per_s"] / by_name[peer]["tokens_per_s"]
                )
    return {
        "size": args.size,
        "seq_length": L,
        "batch_size": B,
        "masked_positions_per_seq": P,
        "tokens_per_step": B * L,
        "dtype": "float32",
        "dropout": True,
        "steps": args.steps,
        "warmup": args.warmup,
        "rounds": args.rounds,
        "seed": args.seed,
        "params": {"bertjax": counts["total"], "torch": torch_params, **counts},
        "threads": {"jax_xla_cpu_pool": jax_threads, "torch_intra_op": torch.get_num_threads()},
        "peak": {**peaks, "peak_flops_per_s": peak, "formula": GEMM_FLOPS},
        "model_flops_per_step": flops,
        "mfu_formula": (
            "model FLOPs/step / step time / peak; model FLOPs/step = 6*(N_encoder*B*L "
            "+ N_pooler_nsp*B + (N_mlm_transform + E*V)*B*P) + 12*layers*L*E*B*L"
        ),
        "results": results,
        "ratios": ratios,
        "setup_s": setup_s,
        "env": {
            "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", ""),
            "jax": jax.__version__,
            "jax_devices": [str(d) for d in jax.devices()],
            "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "load_average_1min": [load_before, os.getloadavg()[0]],
        },
    }


def report(r: dict) -> str:
    p, pk, fl = r["params"], r["peak"], r["model_flops_per_step"]
    torch_count = "-" if p["torch"] is None else f"{p['torch']:,}"
    lines = [
        f"BERT-{r['size']} pretraining train step: seq {r['seq_length']}, batch {r['batch_size']} "
        f"({r['tokens_per_step']} tokens/step), {r['masked_positions_per_seq']} masked "
        "positions/seq, float32, dropout on, AdamW + clip 1.0",
        f"  params: bertjax {p['bertjax']:,}  torch {torch_count}  "
        f"(non-embedding {p['non_embedding']:,}: encoder {p['encoder']:,}, pooler+NSP "
        f"{p['pooler_nsp']:,}, MLM transform {p['mlm_transform']:,})",
        f"  threads: jax (XLA CPU pool = schedulable cores) {r['threads']['jax_xla_cpu_pool']}, "
        f"torch {r['threads']['torch_intra_op']};  XLA_FLAGS={r['env']['XLA_FLAGS']!r}; "
        f"steps {r['steps']} x {r['rounds']} round(s) after {r['warmup']} warmup",
        f"  float32 GEMM {pk['n']}^3: jax {pk['jax_flops_per_s'] / 1e9:.1f} GFLOP/s, torch "
        f"{pk['torch_flops_per_s'] / 1e9:.1f} GFLOP/s -> peak {pk['peak_flops_per_s'] / 1e9:.1f}",
        f"  model FLOPs/step {fl['total'] / 1e9:.2f} G = {r['mfu_formula'].split('= ', 1)[1]}"
        f"  (6*N_non_embedding*tokens alone: {fl['simple_6N'] / 1e9:.2f} G)",
        "",
        f"  {'implementation':<16}{'tokens/s':>10}{'step ms':>10}{'MFU':>8}{'best ms':>10}"
        f"{'CPU ms':>10}{'1st step s':>12}{'loss':>8}  what",
    ]
    for x in r["results"]:
        lines.append(
            f"  {x['implementation']:<16}{x['tokens_per_s']:>10.0f}{x['step_ms_median']:>10.1f}"
            f"{100 * x['mfu']:>7.1f}%{x['step_ms_min']:>10.1f}{x['cpu_ms_median']:>10.1f}"
            f"{x['first_step_s']:>12.2f}{x['final_loss']:>8.3f}  {x['note']}"
        )
    lines.append("")
    for name, value in r["ratios"].items():
        lines.append(f"  ratio {name} (tokens/s): {value:.2f}x")
    lines += [
        "  step ms: median wall time of the timed steps (tokens/s and MFU use it); best ms: the "
        "fastest step; CPU ms: median process CPU time per step, all threads",
        "  what differs from the same work on both sides:",
        "    - bertjax's step also computes the gradient norm for a finite-step guard (its "
        "train_step as the training loop runs it); torch's steps do not",
        "    - torch-hf computes MLM logits at every position [B,L,V] (as BertForPreTraining "
        "does); bertjax and torch-gathered at the masked positions only [B,P,V], so "
        "bertjax/torch-gathered is the like-for-like ratio",
    ]
    load, cores = r["env"]["load_average_1min"], r["env"]["cpu_count"]
    if max(load) > cores:
        lines.append(
            f"  WARNING: 1-minute load average {load[0]:.1f} before / {load[1]:.1f} after on "
            f"{cores} cores: other processes shared the CPU, so these numbers are not reliable"
            " (torch's OpenMP threads spin-wait when starved: OMP_WAIT_POLICY=PASSIVE helps it)"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    previous = os.environ.get("XLA_FLAGS")
    os.environ["XLA_FLAGS"] = args.xla_flags  # before jax is imported
    if previous and previous != args.xla_flags:
        print(
            f"note: XLA_FLAGS={previous!r} from the environment replaced by --xla_flags",
            file=sys.stderr,
        )
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # skip probing an installed libtpu
    results = run(args)
    print(report(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
        print(f"  results written to {args.json}")


if __name__ == "__main__":
    main()
