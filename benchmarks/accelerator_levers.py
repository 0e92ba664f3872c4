"""The train step's speed levers and packed rows on one accelerator, each measured on and off in
one run, with where the step's time goes before and after.

Every measurement is bertjax's own train step (`build_trainer`, bfloat16 compute, AdamW + clip
1.0, dropout 0.1, parameters from the model's initializers), each in its own process on the
same device, timed as benchmarks/accelerator_step.py times its rows. Compiling a row is most
of its cost (about 50 of 80 s for BERT-large on an H200), so every row is first compiled,
several at once, into JAX's persistent compilation cache; the timed processes load it. The
rows are timed in this order (a deadline stops the timing and lists what is left; the rows a
short run must not miss come first):

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
              float32 logits, the head and loss in sequence slices of 4096 rows
              (objectives/head_xent.py), every lever back.
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
                skip_by_cond=True, check_new_params=False, dropout_rng="threefry",
                attention_dropout=0.0, attention_impl="dot_product", loss_rows=0)
LEVERS = {  # name: what turns the lever back to the step before it (or, padding, on)
    "guard on new params": dict(check_new_params=True),
    "guard by select": dict(skip_by_cond=False),
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
    p.add_argument("--compile_parallel", type=int, default=None,
                   help="compile every row first, this many at a time, into the persistent "
                        "compilation cache (default 6; 2 with --quick; 0: each row compiles "
                        "its own step as it is timed)")
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
    if args.compile_parallel is None:
        args.compile_parallel = 2 if args.quick else 6
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


def setup(spec: dict, args) -> dict:
    """The trainer of a spec's step (its levers, row and batch), and the host batch."""
    import dataclasses

    import jax
    import numpy as np

    from bertjax.objectives.lm import gpt_pretraining
    from bertjax.objectives.pretraining import bert_pretraining
    from bertjax.training.loop import build_trainer
    from bertjax.training.mesh import make_mesh
    from bertjax.training.optim import make_optimizer
    from bertjax.training.step import StepOptions

    levers = {**DEFAULTS, **spec["levers"]}
    r = accel.Row(spec["row"], spec["family"], spec["size"], spec["seq"], (spec["batch"],))
    cfg, _ = accel.configs(r, levers["attention_impl"])
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
                     else gpt_pretraining(cfg, fused_loss=levers["fused_loss"],
                                          loss_rows=levers["loss_rows"]))
    tx = make_optimizer("adamw", learning_rate=1e-4, warmup_steps=1, total_steps=10**6)
    options = StepOptions(dropout_rng=levers["dropout_rng"],
                          skip_by_cond=levers["skip_by_cond"],
                          check_new_params=levers["check_new_params"])
    trainer = build_trainer(objective, tx, make_mesh(devices=jax.devices()[:1]), B, L,
                            seed=args.seed, options=options)
    return {"trainer": trainer, "batch": batch, "row": dataclasses.replace(r, seq=L), "cfg": cfg,
            "B": B}


def compile_only(spec: dict, args) -> dict:
    """Compile the spec's init and step ahead of time into the persistent compilation cache
    (JAX_COMPILATION_CACHE_DIR), touching no parameters: the timed child then loads them."""
    import flax.linen as nn
    import jax

    made = setup(spec, args)
    trainer = made["trainer"]
    device_batch = trainer.device_batch(made["batch"])
    with jax.set_mesh(trainer.mesh), nn.logical_axis_rules(trainer.rules):
        trainer.init.jitted.lower().compile()
        start = time.perf_counter()
        lowered = trainer.step.jitted.lower(trainer.abstract_state, device_batch)
        lowered_at = time.perf_counter()
        lowered.compile()
    return {"lower_s": lowered_at - start, "compile_s": time.perf_counter() - lowered_at}


def child(spec: dict, args) -> dict:
    """One bertjax train step with `spec`'s levers, timed (and traced where asked)."""
    import flax.linen as nn
    import jax
    import numpy as np

    made = setup(spec, args)
    trainer, batch = made["trainer"], made["batch"]
    state = trainer.init()
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
    B, L = made["B"], made["row"].seq
    real = int(np.asarray(batch["input_mask"]).sum()) if "input_mask" in batch else B * L
    stats = jax.devices()[0].memory_stats() or {}
    flops = accel.model_flops(made["row"], made["cfg"], B)
    return {**result, "real_tokens": real, "tokens": B * L, "flops": flops,
            "loss_first": holder["losses"][0], "loss_last": holder["losses"][-1],
            "finite": bool(np.isfinite(holder["losses"]).all()),
            "peak_bytes": stats.get("peak_bytes_in_use"), "backend": jax.default_backend()}


# ----------------------------------------------------------------------------- parent


class Runner:
    """Plans the rows, compiles them all at once (`--compile_parallel` processes filling the
    persistent compilation cache: compiling is most of a row's cost and needs the host's
    cores, not the device), then times them one at a time, each in its own process, until the
    deadline."""

    def __init__(self, args, log):
        self.args, self.log, self.start = args, log, time.perf_counter()
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="bertjax-levers-"))
        self.cache = os.environ.get("JAX_COMPILATION_CACHE_DIR", str(self.tmp / "compile_cache"))
        self.planned: list[dict] = []
        self.results: list[dict] = []
        self.compiled: list[dict] = []
        self.skipped: list[str] = []

    def plan(self, group: str, label: str, r: accel.Row, levers: dict, *, npz: str = "",
             xla_flags: str = "", profile: bool = False) -> None:
        index = len(self.planned)
        self.planned.append({
            "group": group, "label": label, "row": r.name, "family": r.family, "size": r.size,
            "seq": r.seq, "batch": r.batches[0], "levers": levers, "npz": npz,
            "xla_flags": xla_flags, "result": str(self.tmp / f"{index}.json"),
            "profile": str(self.tmp / f"trace{index}") if profile else ""})

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def _child(self, spec: dict, timeout: float) -> dict:
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               "TF_CPP_MIN_LOG_LEVEL": "3", "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
               "JAX_COMPILATION_CACHE_DIR": self.cache,
               "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
               "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
               # a size limit turns on the cache's file lock: rows compiled at once (flags'
               # defaults is bert_large's) never read an entry another is still writing
               "JAX_COMPILATION_CACHE_MAX_SIZE": os.environ.get(
                   "JAX_COMPILATION_CACHE_MAX_SIZE", str(64 * 2**30))}
        if self.args.quick:
            env.update(JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="", XLA_FLAGS="")
        if spec["xla_flags"]:
            env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {spec['xla_flags']}".strip()
        cmd = [sys.executable, __file__, "--child", json.dumps(spec), f"--seed={self.args.seed}",
               f"--seconds_per_window={self.args.seconds_per_window}",
               f"--windows={self.args.windows}", *(["--quick"] if self.args.quick else [])]
        begin = time.perf_counter()
        proc = None
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
            result = json.loads(pathlib.Path(spec["result"]).read_text())
        except (subprocess.TimeoutExpired, FileNotFoundError, json.JSONDecodeError) as err:
            tail = (proc.stderr if proc is not None else "") or ""
            result = {**spec, "ok": False, "error": f"{type(err).__name__} {tail[-800:]}"}
        result["wall_s"] = time.perf_counter() - begin
        return result

    def compile_all(self) -> None:
        """Every planned row's step into the cache, --compile_parallel at a time."""
        from concurrent.futures import ThreadPoolExecutor

        specs = [{**spec, "compile_only": True, "result": spec["result"] + ".compile"}
                 for spec in self.planned]

        def one(spec: dict) -> None:
            result = self._child(spec, self.args.child_timeout_s)
            self.compiled.append(result)
            status = (f"compiled in {result['compile_s']:.0f} s" if result.get("ok")
                      else "compile FAILED " + " ".join(result.get("error", "").split())[:200])
            self.log(f"[{self.elapsed():6.1f}s] {spec['group']}: {spec['label']}: {status}")

        with ThreadPoolExecutor(max(1, self.args.compile_parallel)) as pool:
            list(pool.map(one, specs))

    def time_all(self) -> None:
        """Each planned row timed alone, in plan order, until the deadline."""
        for spec in self.planned:
            if self.elapsed() > self.args.deadline_s:
                self.skipped.append(f"{spec['group']}: {spec['label']}")
                continue
            result = self._child(spec, self.args.child_timeout_s)
            self.results.append(result)
            status = (f"{1e3 * result['step_s']:.2f} ms/step" if result.get("ok")
                      else "FAILED " + " ".join(result.get("error", "").split())[:300])
            self.log(f"[{self.elapsed():6.1f}s] {spec['group']}: {spec['label']}: {status} "
                     f"({result['wall_s']:.0f} s)")


def child_main(args) -> None:
    spec = json.loads(args.child)
    try:
        measured = compile_only(spec, args) if spec.get("compile_only") else child(spec, args)
        result = {**spec, "ok": True, **measured}
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
    references: dict[str, str] = {}  # group: the row its speeds are over
    if "bert_large" in args.groups:
        references["bert_large"] = "before (every lever back)"
        run.plan("bert_large", "defaults", large, {}, profile=True)
        run.plan("bert_large", "before (every lever back)", large, BEFORE, profile=True)
        for name, lever in LEVERS.items():
            run.plan("bert_large", f"{name} (back)", large, lever)
        for name, lever in PADDED.items():
            run.plan("bert_large", name, large, lever)
    if "packing" in args.groups and args.batches:
        for npz in sorted(pathlib.Path(args.batches).glob("bert_*_unpacked.npz")):
            length = npz.stem.split("_")[1]
            references[f"packing {length}"] = "unpacked"
            for layout in ("unpacked", "packed"):
                run.plan(f"packing {length}", layout, base, {},
                         npz=str(npz.with_name(f"bert_{length}_{layout}.npz")))
    if "dropout" in args.groups:
        references["dropout"] = "attention dropout 0.1, XLA"
        for name, levers in DROPOUT.items():
            run.plan("dropout", name, large, levers)
    if "gpt2" in args.groups:
        references["gpt2"] = "before (every lever back)"
        gpt = accel.Row(gpt2.name, gpt2.family, gpt2.size, gpt2.seq, (4 if args.quick else 32,))
        run.plan("gpt2", "defaults", gpt, {})
        run.plan("gpt2", "vocabulary padded to 64", gpt, dict(pad_vocab_to=64))
        run.plan("gpt2", "loss via float32 logits (back)", gpt, dict(fused_loss=False))
        run.plan("gpt2", "head and loss in slices of 4096 rows", gpt, dict(loss_rows=4096))
        run.plan("gpt2", "before (every lever back)", gpt, BEFORE)
    if "flags" in args.groups and not args.quick:
        references["flags"] = "defaults"
        run.plan("flags", "defaults", large, {})
        for name, flag in FLAGS.items():
            run.plan("flags", name, large, {}, xla_flags=flag)
    if args.compile_parallel > 0:
        run.compile_all()
    run.time_all()
    groups = {group: (reference, [r for r in run.results if r["group"] == group])
              for group, reference in references.items()}

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
                                                 "compiled": run.compiled,
                                                 "skipped": run.skipped}, indent=1))
    (out / "levers.md").write_text("\n".join(report) + "\n")


if __name__ == "__main__":
    main()
