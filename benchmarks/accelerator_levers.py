"""The train step's speed levers and packed rows on one accelerator, each measured on and off in
one run, with where the step's time goes before and after.

Every measurement is bertjax's own train step (`build_trainer`, bfloat16 compute, AdamW + clip
1.0, dropout 0.1), each in its own process on the same device, timed as
benchmarks/accelerator_step.py times its rows. In the order they run (a deadline stops the
run and lists what is left; the rows a short run must not miss come first):

  bert_large  BERT-large pretraining, seq 128, batch --batch: today's defaults, every lever
              back ("before": the step of the first H100 table), then each lever turned
              back alone and the vocabulary padded to 64 (off by default). The defaults and
              "before" steps are profiled and their time attributed by name stack
              (xplane_summary.py).
  packing     BERT-base on real text (WikiText-2 batches made by accelerator_batches.py and
              carried to the device) at 128 and 512, unpacked and packed: real tokens/s.
  dropout     BERT-large with the paper's attention dropout 0.1: in cuDNN's fused kernel
              (attention_impl "dot_product"), on the XLA path, and the rbg / unsafe_rbg
              generators for the other dropout sites.
  gpt2        GPT-2 124M, seq 1024: defaults, the vocabulary padded to 64, the loss through
              float32 logits, every lever back.
  flags       BERT-large defaults under each candidate XLA GPU flag (FLAGS), alone.

    PYTHONPATH=. python benchmarks/accelerator_levers.py --batches=device_batches --out=OUT
    PYTHONPATH=. python benchmarks/accelerator_levers.py --quick --batches=/tmp/b   # CPU, tiny

Output: one table per group (step ms, tokens/s, MFU against the chip's nominal bf16 peak, and
the speed over the group's reference), the attribution tables, and `ratio ...` lines; with
`--out`, levers.json, levers.md and traces.tar.gz (trace JSON + HLO text per profiled step,
`traceN/`: `python benchmarks/xplane_summary.py TRACE --hlo=traceN/step.hlo.txt` re-reads one).
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import accelerator_step as accel  # noqa: E402  (the rows' configs, weights, FLOPs, timing)

REPO = pathlib.Path(__file__).resolve().parents[1]
DEFAULTS = dict(fused_qkv=True, gather_free_embeddings=True, pad_vocab_to=1, fused_loss=True,
                check_new_params=False, dropout_rng="threefry", attention_dropout=0.0,
                attention_impl="dot_product")
LEVERS = {  # name: what turns the lever back to the step before it (or, padding, on)
    "guard on new params": dict(check_new_params=True),
    "Q, K, V apart": dict(fused_qkv=False),
    "gathered embeddings": dict(gather_free_embeddings=False),
    "loss via float32 logits": dict(fused_loss=False),
}
BEFORE = {k: v for lever in LEVERS.values() for k, v in lever.items()}
PADDED = {"vocabulary padded to 64": dict(pad_vocab_to=64)}
DROPOUT = {
    "attention dropout 0.1, cuDNN": dict(attention_dropout=0.1),
    "attention dropout 0.1, XLA": dict(attention_dropout=0.1, attention_impl="xla"),
    "rbg dropout bits": dict(dropout_rng="rbg"),
    "unsafe_rbg dropout bits": dict(dropout_rng="unsafe_rbg"),
}
FLAGS = {  # candidate XLA GPU flags; one this XLA does not know fails its row, and says so
    "latency-hiding scheduler": "--xla_gpu_enable_latency_hiding_scheduler=true",
    "cuBLASLt": "--xla_gpu_enable_cublaslt=true",
    "cuDNN LayerNorm": "--xla_gpu_enable_cudnn_layer_norm=true",
    "no Triton GEMMs": "--xla_gpu_enable_triton_gemm=false",
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="CPU, tiny sizes: checks the code paths")
    p.add_argument("--groups", default="bert_large,dropout,gpt2,packing,flags")
    p.add_argument("--batch", type=int, default=None, help="BERT-large rows (default 256)")
    p.add_argument("--batches", default=None, help="accelerator_batches.py's directory")
    p.add_argument("--seconds_per_window", type=float, default=None)
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--deadline_s", type=float, default=None,
                   help="start nothing new after this (default 300 s; 600 with --quick)")
    p.add_argument("--child_timeout_s", type=float, default=180.0)
    p.add_argument("--out", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.groups = [g for g in args.groups.split(",") if g]
    if args.deadline_s is None:
        args.deadline_s = 600.0 if args.quick else 300.0
    if args.seconds_per_window is None:
        args.seconds_per_window = 0.05 if args.quick else 0.4
    if args.batch is None:
        args.batch = 4 if args.quick else 256
    return args


def row(name: str, args) -> accel.Row:
    """The model and shape of a group's rows."""
    quick = {"bert_large": ("tiny", 32), "gpt2": ("gpt2_tiny", 64), "bert_base": ("tiny", 64)}
    full = {"bert_large": ("large", 128), "gpt2": ("gpt2_small", 1024),
            "bert_base": ("base", 128)}
    size, seq = (quick if args.quick else full)[name]
    family = "gpt" if name == "gpt2" else "bert"
    return accel.Row(name, family, size, seq, (args.batch,))


# ----------------------------------------------------------------------------- child


def child(spec: dict, args) -> dict:
    """One bertjax train step with `spec`'s levers, timed (and traced where asked)."""
    import dataclasses

    import flax.linen as nn
    import jax
    import numpy as np

    from bertjax.objectives.lm import gpt_pretraining
    from bertjax.objectives.pretraining import bert_pretraining
    from bertjax.training.loop import build_trainer
    from bertjax.training.mesh import make_mesh
    from bertjax.training.optim import make_optimizer
    from bertjax.training.state import create_state
    from bertjax.training.step import StepOptions

    levers = {**DEFAULTS, **spec["levers"]}
    r = accel.Row(spec["row"], spec["family"], spec["size"], spec["seq"], (spec["batch"],))
    cfg, hf = accel.configs(r, levers["attention_impl"])
    transformer = dataclasses.replace(
        cfg.transformer, attention_dropout_rate=levers["attention_dropout"],
        fused_qkv=levers["fused_qkv"], gather_free_embeddings=levers["gather_free_embeddings"],
        pad_vocab_to=levers["pad_vocab_to"])
    cfg = dataclasses.replace(cfg, transformer=transformer)
    if spec.get("npz"):
        batch = dict(np.load(spec["npz"]))
        B, L = batch["input_ids"].shape
        cfg = dataclasses.replace(cfg, max_position_embeddings=max(cfg.max_position_embeddings, L))
        packed = int(batch["cls_positions"].shape[1]) if "cls_positions" in batch else 0
        objective = bert_pretraining(cfg, packed_sequences=packed,
                                     fused_loss=levers["fused_loss"])
    else:
        B, L = spec["batch"], spec["seq"]
        batch = (accel.bert_batch if r.family == "bert" else accel.gpt_batch)(
            B, L, cfg.vocab_size, args.seed)
        objective = (bert_pretraining(cfg, fused_loss=levers["fused_loss"]) if r.family == "bert"
                     else gpt_pretraining(cfg, fused_loss=levers["fused_loss"]))
    tx = make_optimizer("adamw", learning_rate=1e-4, warmup_steps=1, total_steps=10**6)
    options = StepOptions(dropout_rng=levers["dropout_rng"],
                          check_new_params=levers["check_new_params"])
    trainer = build_trainer(objective, tx, make_mesh(devices=jax.devices()[:1]), B, L,
                            seed=args.seed, options=options)
    if spec.get("npz"):
        state = trainer.init()
    else:
        params = accel.bertjax_params(r, cfg, hf, args.seed)
        state = jax.device_put(create_state(params, tx, args.seed, {}), trainer.state_shardings)
    device_batch = trainer.device_batch(batch)
    holder = {"state": state, "losses": []}

    def step():
        holder["state"], holder["metrics"] = trainer.step(holder["state"], device_batch)

    def sync():
        jax.block_until_ready(holder["state"])
        holder["losses"].append(float(holder["metrics"]["loss"]))

    result = accel.timed(step, sync, args.seconds_per_window, args.windows)
    if spec.get("profile"):
        trace_dir = pathlib.Path(spec["profile"])
        jax.profiler.start_trace(str(trace_dir))
        step()
        step()
        sync()
        jax.profiler.stop_trace()
        with jax.set_mesh(trainer.mesh), nn.logical_axis_rules(trainer.rules):
            hlo = trainer.step.jitted.lower(holder["state"], device_batch).compile().as_text()
        (trace_dir / "step.hlo.txt").write_text(hlo)
    real = int(np.asarray(batch["input_mask"]).sum()) if "input_mask" in batch else B * L
    stats = jax.devices()[0].memory_stats() or {}
    flops = accel.model_flops(dataclasses.replace(r, seq=L), cfg, B)
    return {**result, "real_tokens": real, "tokens": B * L, "flops": flops,
            "loss_first": holder["losses"][0], "loss_last": holder["losses"][-1],
            "finite": bool(np.isfinite(holder["losses"]).all()),
            "peak_bytes": stats.get("peak_bytes_in_use"), "backend": jax.default_backend()}


# ----------------------------------------------------------------------------- parent


class Runner:
    def __init__(self, args, log):
        self.args, self.log, self.start = args, log, time.perf_counter()
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="bertjax-levers-"))
        self.results: list[dict] = []
        self.skipped: list[str] = []

    def __call__(self, group: str, label: str, r: accel.Row, levers: dict, *, npz: str = "",
                 xla_flags: str = "", profile: bool = False) -> dict | None:
        if time.perf_counter() - self.start > self.args.deadline_s:
            self.skipped.append(f"{group}: {label}")
            return None
        spec = {"group": group, "label": label, "row": r.name, "family": r.family,
                "size": r.size, "seq": r.seq, "batch": r.batches[0], "levers": levers,
                "npz": npz, "result": str(self.tmp / f"{len(self.results)}.json"),
                "profile": str(self.tmp / f"trace{len(self.results)}") if profile else ""}
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               "TF_CPP_MIN_LOG_LEVEL": "3", "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
               # a profiled row compiles its step twice (timing, then the HLO text): once
               "JAX_COMPILATION_CACHE_DIR": os.environ.get("JAX_COMPILATION_CACHE_DIR",
                                                           str(self.tmp / "compile_cache"))}
        if self.args.quick:
            env.update(JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="", XLA_FLAGS="")
        if xla_flags:
            env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {xla_flags}".strip()
        cmd = [sys.executable, __file__, "--child", json.dumps(spec), f"--seed={self.args.seed}",
               f"--seconds_per_window={self.args.seconds_per_window}",
               f"--windows={self.args.windows}", *(["--quick"] if self.args.quick else [])]
        begin = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                  timeout=self.args.child_timeout_s)
            result = json.loads(pathlib.Path(spec["result"]).read_text())
        except (subprocess.TimeoutExpired, FileNotFoundError, json.JSONDecodeError) as err:
            tail = getattr(locals().get("proc"), "stderr", "") or ""
            result = {**spec, "ok": False, "error": f"{type(err).__name__} {tail[-800:]}"}
        result["wall_s"] = time.perf_counter() - begin
        self.results.append(result)
        status = (f"{1e3 * result['step_s']:.2f} ms/step" if result.get("ok")
                  else "FAILED " + " ".join(result.get("error", "").split())[:300])
        self.log(f"[{time.perf_counter() - self.start:6.1f}s] {group}: {label}: {status} "
                 f"({result['wall_s']:.0f} s)")
        return result


def child_main(args) -> None:
    spec = json.loads(args.child)
    try:
        result = {**spec, "ok": True, **child(spec, args)}
    except Exception as err:  # reported to the parent, which says so in its table
        import traceback

        result = {**spec, "ok": False,
                  "error": f"{type(err).__name__}: {err} | {traceback.format_exc()[-1200:]}"}
    pathlib.Path(spec["result"]).write_text(json.dumps(result))


def group_table(results: list[dict], reference: str, nominal: float | None) -> list[str]:
    """One group's rows beside its reference row (speed = reference step / this step; for
    packing, real tokens/s over the unpacked row's)."""
    ref = next((r for r in results if r["label"] == reference and r.get("ok")), None)
    lines = ["| row | step ms | tokens/s | real tokens/s | MFU (nominal) | vs " + reference
             + " |", "|---|---|---|---|---|---|"]
    for r in results:
        if not r.get("ok"):
            lines.append(f"| {r['label']} | failed: {' '.join(r['error'].split())[:120]} |"
                         " | | | |")
            continue
        t = r["step_s"]
        mfu = f"{100 * r['flops'] / t / nominal:.1f}%" if nominal else "-"
        real_rate = r["real_tokens"] / t
        speed = ""
        if ref:
            speed = f"{(real_rate / (ref['real_tokens'] / ref['step_s'])):.2f}x"
        lines.append(f"| {r['label']} | {1e3 * t:.1f} | {r['tokens'] / t:,.0f} | "
                     f"{real_rate:,.0f} | {mfu} | {speed} |")
    return lines


def attribution(trace_dir: pathlib.Path, steps: int = 2) -> str:
    import xplane_summary

    traces = sorted(trace_dir.rglob("*.trace.json.gz"))
    if not traces:
        return "(no trace written)"
    events = [e for e in xplane_summary.load_events(str(traces[-1]))
              if "train_step" in e.module]
    regions, unmatched = xplane_summary.attribute(events, (trace_dir / "step.hlo.txt")
                                                  .read_text())
    return (xplane_summary.kind_table(events, 8) + "\n\n"
            + xplane_summary.region_table(regions, steps, unmatched))


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.child:
        child_main(args)
        return
    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix="bertjax-levers-out-"))
    out.mkdir(parents=True, exist_ok=True)
    logfile = open(out / "levers_log.txt", "a")  # noqa: SIM115

    def log(line: str) -> None:
        print(line, flush=True)
        logfile.write(line + "\n")
        logfile.flush()

    run = Runner(args, log)
    env = accel.environment(None)
    device = env["nvidia_smi"].split(",")[0] if env["nvidia_smi"] else env["device"]
    nominal = accel.nominal_peak(device)
    log(f"device {device}; versions {env['versions']}; commit {env['commit']}")
    large, gpt2, base = row("bert_large", args), row("gpt2", args), row("bert_base", args)
    groups: dict[str, tuple[str, list[dict]]] = {}

    def measure(group, reference, items):
        results = [r for r in items if r is not None]
        groups[group] = (reference, results)

    if "bert_large" in args.groups:
        items = [run("bert_large", "defaults", large, {}, profile=True),
                 run("bert_large", "before (every lever back)", large, BEFORE, profile=True)]
        items += [run("bert_large", f"{name} (back)", large, lever)
                  for name, lever in LEVERS.items()]
        items += [run("bert_large", name, large, lever) for name, lever in PADDED.items()]
        measure("bert_large", "before (every lever back)", items)
    if "packing" in args.groups and args.batches:
        for npz in sorted(pathlib.Path(args.batches).glob("bert_*_unpacked.npz")):
            length = npz.stem.split("_")[1]
            items = [run(f"packing {length}", layout, base, {},
                         npz=str(npz.with_name(f"bert_{length}_{layout}.npz")))
                     for layout in ("unpacked", "packed")]
            measure(f"packing {length}", "unpacked", items)
    if "dropout" in args.groups:
        items = [run("dropout", name, large, levers) for name, levers in DROPOUT.items()]
        measure("dropout", "attention dropout 0.1, XLA", items)
    if "gpt2" in args.groups:
        gpt = accel.Row(gpt2.name, gpt2.family, gpt2.size, gpt2.seq, (32 if not args.quick
                                                                      else 4,))
        items = [run("gpt2", "defaults", gpt, {}),
                 run("gpt2", "vocabulary padded to 64", gpt, dict(pad_vocab_to=64)),
                 run("gpt2", "loss via float32 logits (back)", gpt, dict(fused_loss=False)),
                 run("gpt2", "before (every lever back)", gpt, BEFORE)]
        measure("gpt2", "before (every lever back)", items)
    if "flags" in args.groups and not args.quick:
        items = [run("flags", "defaults", large, {})]
        items += [run("flags", name, large, {}, xla_flags=flag) for name, flag in FLAGS.items()]
        measure("flags", "defaults", items)

    report = [f"### Speed levers, {env['time']}: {device}", "",
              f"`PYTHONPATH=. python benchmarks/accelerator_levers.py "
              f"{' '.join(sys.argv[1:] if argv is None else argv)}` at {env['commit']}", ""]
    for group, (reference, results) in groups.items():
        report += [f"**{group}**", "", *group_table(results, reference, nominal), ""]
        for r in results:
            ref = next((x for x in results if x["label"] == reference and x.get("ok")), None)
            if r.get("ok") and ref and r is not ref:
                gain = (r["real_tokens"] / r["step_s"]) / (ref["real_tokens"] / ref["step_s"])
                report.append(f"ratio {group}: {r['label']} over {reference}: {gain:.2f}x")
        report.append("")
    for r in run.results:
        if r.get("ok") and r.get("profile"):
            report += [f"**where the time goes: {r['group']} {r['label']}**", "",
                       attribution(pathlib.Path(r["profile"])), ""]
    report += [f"- not run (deadline {args.deadline_s:.0f} s): {s}" for s in run.skipped]
    log("\n".join(report))
    profiled = [pathlib.Path(r["profile"]) for r in run.results if r.get("ok") and r.get("profile")]
    if profiled:  # one file, so the traces come back from a device host's output folder
        with tarfile.open(out / "traces.tar.gz", "w:gz") as tar:
            for trace_dir in profiled:
                tar.add(trace_dir, arcname=trace_dir.name)
    (out / "levers.json").write_text(json.dumps({"env": env, "results": run.results,
                                                 "skipped": run.skipped}, indent=1))
    (out / "levers.md").write_text("\n".join(report) + "\n")


if __name__ == "__main__":
    main()
