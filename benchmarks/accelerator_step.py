"""Training steps and greedy generation on one accelerator: bertjax next to transformers (torch).

Rows (each bertjax and transformers, on the same device, in the same run, from the same
initial weights and on the same batch):

  bert_base_128    BERT-base pretraining step (MLM + NSP), seq 128, the largest of
                   256/128/64/32 sequences that fits both
  bert_large_128   BERT-large pretraining step, seq 128
  bert_large_512   BERT-large pretraining step, seq 512
  gpt2_1024        GPT-2 124M language-model step, seq 1024
  gpt2_generate    GPT-2 124M greedy generation, batch 1 and 32 (64-token prompts, 256 new)

Implementations:

  bertjax          bertjax's own sharded train step (`build_trainer`: AdamW + clip 1.0, finite
                   guard), bfloat16 compute with float32 parameters and optimizer
                   state, fused attention (`attention_impl`, cuDNN on NVIDIA GPUs)
  torch-hf         transformers' model as its users train it: BertForPreTraining(labels=...)
                   / GPT2LMHeadModel(labels=...), SDPA attention, bf16 autocast, fused AdamW,
                   clip_grad_norm_ 1.0; BERT's MLM logits at every position [B, L, V]
  torch-gathered   (BERT) the same modules with the sequence output gathered at the masked
                   positions before the MLM head: the work bertjax does
  torch-compile    the faster eager torch row's model under torch.compile (default mode)

Both sides: dropout 0.1 on embeddings and residual branches, no attention dropout (as the
first tables ran; benchmarks/accelerator_levers.py times the paper's 0.1 in cuDNN's kernel).
Generation: bfloat16 weights on both sides (bertjax casts its float32 parameters once),
greedy, no stop token, so every row makes exactly the asked-for tokens; transformers runs
`model.generate` with its default cache.

Reported per row: sequences/s, tokens/s, peak device memory, and MFU against (a) the chip's
nominal dense bf16 peak and (b) a bf16 matrix product (8192^3) timed in the same run. Model
FLOPs per step count the matrix products the model needs (3 x forward): see
`model_flops`. Each (row, implementation, batch) runs in its own process, so memory peaks are
its own and an out-of-memory batch falls back to the next smaller one for both sides.

    PYTHONPATH=. python benchmarks/accelerator_step.py                       # the full run
    PYTHONPATH=. python benchmarks/accelerator_step.py --quick               # CPU, tiny sizes
    PYTHONPATH=. python benchmarks/accelerator_step.py --results=benchmarks/results.jsonl

`--quick` runs every code path with tiny models on the CPU (what the test suite runs, so the
script does not rot); its numbers mean nothing. `--results` appends the run as a line of
benchmarks/results.jsonl (results_record.py's format: every bertjax/torch ratio, what differs
between the sides, the table) and renders benchmarks/results.md from it again.
"""

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import results_record

REPO = pathlib.Path(__file__).resolve().parents[1]
MASK, CLS, SEP = 103, 101, 102
# Dense bf16 peaks (no sparsity) from NVIDIA's datasheets, by device-name substring.
NOMINAL_BF16_PEAK = (
    ("H200", 989.4e12), ("H100 PCIe", 756.5e12), ("H100", 989.4e12), ("GH200", 989.4e12),
    ("A100", 312e12), ("L40S", 362.1e12), ("A10G", 70e12),
)


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    family: str  # "bert" | "gpt" | "generate"
    size: str
    seq: int
    batches: tuple[int, ...]
    new_tokens: int = 0

    @property
    def kind(self) -> str:
        return "generate" if self.family == "generate" else "train"


# In the order they run: when the deadline comes, the rows left are listed as not run.
FULL_ROWS = (
    Row("bert_base_128", "bert", "base", 128, (256, 128, 64, 32)),
    Row("bert_large_128", "bert", "large", 128, (256, 128, 64, 32)),
    Row("gpt2_1024", "gpt", "gpt2_small", 1024, (32, 16, 8)),
    Row("gpt2_generate", "generate", "gpt2_small", 64, (1, 32), new_tokens=256),
    Row("bert_large_512", "bert", "large", 512, (64, 32, 16)),
)
QUICK_ROWS = (
    Row("bert_base_128", "bert", "tiny", 32, (8, 4)),
    Row("gpt2_1024", "gpt", "gpt2_tiny", 64, (4,)),
    Row("gpt2_generate", "generate", "gpt2_tiny", 8, (1, 2), new_tokens=8),
)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="CPU, tiny sizes: checks the code paths")
    p.add_argument("--rows", default="", help="comma-separated row names (default: all)")
    p.add_argument("--compile", default=None, choices=["on", "off"],
                   help="torch.compile rows (default: on, off with --quick)")
    p.add_argument("--attention_impl", default="dot_product",
                   help="bertjax's TransformerConfig.attention_impl")
    p.add_argument("--seconds_per_window", type=float, default=None,
                   help="length of a timed window (default 0.5 s; 0.05 with --quick)")
    p.add_argument("--windows", type=int, default=3, help="timed windows; the median counts")
    p.add_argument("--deadline_s", type=float, default=None,
                   help="start no new measurement after this many seconds (the rest are listed "
                        "as not run; default 330, 600 with --quick)")
    p.add_argument("--child_timeout_s", type=float, default=240.0)
    p.add_argument("--out", default=None, help="directory for results.json and the log")
    p.add_argument("--results", default=None,
                   help="append the run to this record (benchmarks/results.jsonl) and render "
                        "its .md beside it")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile_row", default="bert_large_128",
                   help="trace two bertjax steps of this row with jax.profiler (none: '')")
    p.add_argument("--record", default=None,
                   help="a results.json of an earlier run (on a GPU host): report it and, with "
                        "--results, append it, measuring nothing")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--profile_dir", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.compile is None:
        args.compile = "off" if args.quick else "on"
    if args.deadline_s is None:
        args.deadline_s = 600.0 if args.quick else 330.0
    if args.seconds_per_window is None:
        args.seconds_per_window = 0.05 if args.quick else 0.5
    rows = QUICK_ROWS if args.quick else FULL_ROWS
    wanted = [r for r in args.rows.split(",") if r]
    unknown = set(wanted) - {r.name for r in rows}
    if unknown:
        p.error(f"--rows: unknown {sorted(unknown)}: use {', '.join(r.name for r in rows)}")
    args.row_list = [r for r in rows if not wanted or r.name in wanted]
    return args


# ----------------------------------------------------------------------------- batches


def bert_batch(B: int, L: int, vocab: int, seed: int) -> dict:
    """[CLS] a [SEP] b [SEP], no padding, ceil(0.15 L) distinct masked positions, NSP labels."""
    import numpy as np

    rng = np.random.default_rng(seed)
    P = -(-L * 15 // 100)
    ids = rng.integers(1000, vocab, size=(B, L), dtype=np.int32)
    split = L // 2
    ids[:, 0], ids[:, split], ids[:, L - 1] = CLS, SEP, SEP
    segments = np.zeros((B, L), np.int32)
    segments[:, split + 1:] = 1
    candidates = np.array([i for i in range(1, L - 1) if i != split])
    positions = np.sort(np.stack([rng.choice(candidates, size=P, replace=False)
                                  for _ in range(B)]), axis=1).astype(np.int32)
    targets = np.take_along_axis(ids, positions, axis=1)
    np.put_along_axis(ids, positions, MASK, axis=1)
    return {"input_ids": ids, "input_mask": np.ones((B, L), np.int32), "segment_ids": segments,
            "masked_lm_positions": positions, "masked_lm_ids": targets.astype(np.int32),
            "masked_lm_weights": np.ones((B, P), np.float32),
            "next_sentence_label": rng.integers(0, 2, size=(B,), dtype=np.int32)}


def gpt_batch(B: int, L: int, vocab: int, seed: int) -> dict:
    """Random token ids [B, L + 1]: inputs are the first L, targets the last L."""
    import numpy as np

    ids = np.random.default_rng(seed).integers(0, vocab, size=(B, L + 1), dtype=np.int32)
    return {"input_ids": ids[:, :-1], "target_ids": ids[:, 1:],
            "loss_weights": np.ones((B, L), np.float32)}


# ----------------------------------------------------------------------------- models


def configs(row: Row, attention_impl: str):
    """(bertjax config, transformers config) of one row: the same model on both sides."""
    import transformers

    from bertjax.convert.hf_bert import hf_config
    from bertjax.models.bert import bert_config
    from bertjax.models.gpt import gpt_config

    common = dict(dtype="bfloat16", attention_dropout_rate=0.0, attention_impl=attention_impl)
    if row.family == "bert":
        cfg = bert_config(row.size, **common)
        hf = transformers.BertConfig(**hf_config(cfg, "BertForPreTraining"))
    else:
        cfg = gpt_config(row.size, **common)
        t = cfg.transformer
        hf = transformers.GPT2Config(
            vocab_size=cfg.vocab_size, n_positions=cfg.max_position_embeddings,
            n_embd=t.hidden_size, n_layer=t.num_layers, n_head=t.num_heads,
            n_inner=t.mlp_dim, activation_function="gelu_new", resid_pdrop=t.dropout_rate,
            embd_pdrop=t.dropout_rate, attn_pdrop=0.0, layer_norm_epsilon=t.layer_norm_eps,
            initializer_range=t.initializer_range)
    return cfg, hf


def hf_model(row: Row, hf_config, seed: int):
    """transformers' model for the row, initialised on the CPU from `seed` (the weights both
    sides start from)."""
    import torch
    import transformers

    torch.manual_seed(seed)
    hf_config._attn_implementation = "sdpa"
    if row.family == "bert":
        return transformers.BertForPreTraining(hf_config).float()
    return transformers.GPT2LMHeadModel(hf_config).float()


def bertjax_params(row: Row, cfg, hf_config, seed: int):
    """bertjax parameters converted from transformers' seeded init (same weights both sides)."""
    import torch

    with torch.device("cpu"):
        state = {k: v.numpy() for k, v in hf_model(row, hf_config, seed).state_dict().items()}
    if row.family == "bert":
        from bertjax.convert.hf_bert import hf_to_bertjax
        return hf_to_bertjax(state, cfg, heads=True)
    from bertjax.convert.hf_gpt import hf_to_bertjax
    return hf_to_bertjax(state, cfg)


def model_flops(row: Row, cfg, B: int) -> float:
    """Model FLOPs of one training step: 3 x the forward matrix products the model needs.

    BERT: 6 (N_layers B L + N_pooler+NSP B + (N_mlm_transform + E V) B P) + 12 layers L^2 E B
    GPT-2: 6 (N_layers + E V) B L + 12 layers L^2 E B
    N_layers are the Transformer blocks' weights (biases and LayerNorms are not products but
    are counted, as in 6N); attention's two products are 12 layers L^2 E B (causal masking
    not discounted, as PaLM's MFU counts it). Embedding lookups, softmax, norms, GELU and the
    optimizer are not counted: the same numerator for every implementation.
    """
    t = cfg.transformer
    E, Lyr, L, M = t.hidden_size, t.num_layers, row.seq, t.mlp_dim
    block = 4 * E * E + 4 * E + 2 * E * M + M + E + 4 * E  # attention, MLP, 2 LayerNorms
    attention = 12 * Lyr * L * L * E * B
    if row.family == "bert":
        P = -(-L * 15 // 100)
        heads = (E * E + E) + (2 * E + 2)  # pooler, NSP
        mlm = (E * E + E + 2 * E) + E * cfg.vocab_size
        return 6 * (Lyr * block * B * L + heads * B + mlm * B * P) + attention
    return 6 * (Lyr * block + E * cfg.vocab_size) * B * L + attention


# ----------------------------------------------------------------------------- timing


def timed(step, sync, seconds_per_window: float, windows: int) -> dict:
    """Warm up (the first call compiles), size a window to ~seconds_per_window, then the
    median over `windows` windows of back-to-back steps, synchronised at window ends."""
    start = time.perf_counter()
    step()
    sync()
    first_s = time.perf_counter() - start
    for _ in range(2):
        step()
    sync()
    start = time.perf_counter()
    step()
    sync()
    one = max(time.perf_counter() - start, 1e-4)
    n = max(2, min(200, int(seconds_per_window / one)))
    per_step = []
    for _ in range(windows):
        start = time.perf_counter()
        for _ in range(n):
            step()
        sync()
        per_step.append((time.perf_counter() - start) / n)
    return {"first_step_s": first_s, "step_s": statistics.median(per_step),
            "step_s_all": per_step, "steps_per_window": n}


# ----------------------------------------------------------------------------- children


def child_bertjax_train(row: Row, B: int, args) -> dict:
    import jax
    import numpy as np

    from bertjax.objectives.lm import gpt_pretraining
    from bertjax.objectives.pretraining import bert_pretraining
    from bertjax.training.loop import build_trainer
    from bertjax.training.mesh import make_mesh
    from bertjax.training.optim import make_optimizer
    from bertjax.training.state import create_state

    cfg, hf = configs(row, args.attention_impl)
    objective = bert_pretraining(cfg) if row.family == "bert" else gpt_pretraining(cfg)
    batch = (bert_batch if row.family == "bert" else gpt_batch)(B, row.seq, cfg.vocab_size,
                                                                args.seed)
    tx = make_optimizer("adamw", learning_rate=1e-4, warmup_steps=1, total_steps=10**6)
    mesh = make_mesh(devices=jax.devices()[:1])
    trainer = build_trainer(objective, tx, mesh, B, row.seq, seed=args.seed)
    params = bertjax_params(row, cfg, hf, args.seed)
    state = jax.device_put(create_state(params, tx, args.seed, {}), trainer.state_shardings)
    device_batch = trainer.device_batch(batch)
    holder = {"state": state, "losses": []}

    def step():
        holder["state"], metrics = trainer.step(holder["state"], device_batch)
        holder["metrics"] = metrics

    def sync():
        jax.block_until_ready(holder["state"])
        holder["losses"].append(float(holder["metrics"]["loss"]))

    result = timed(step, sync, args.seconds_per_window, args.windows)
    if args.profile_dir:  # two steps under the profiler, for where the step's time goes
        jax.profiler.start_trace(args.profile_dir)
        step()
        step()
        sync()
        jax.profiler.stop_trace()
    stats = jax.devices()[0].memory_stats() or {}
    return {**result, "loss_first": holder["losses"][0], "loss_last": holder["losses"][-1],
            "peak_bytes": stats.get("peak_bytes_in_use"),
            "flops": model_flops(row, cfg, B), "attention_impl": args.attention_impl,
            "backend": jax.default_backend(), "finite": bool(np.isfinite(holder["losses"]).all())}


def child_torch_train(row: Row, B: int, impl: str, args) -> dict:
    import torch
    import torch.nn.functional as F

    device = "cuda" if torch.cuda.is_available() and not args.quick else "cpu"
    cfg, hf = configs(row, args.attention_impl)
    model = hf_model(row, hf, args.seed).to(device).train()
    variant = args.compile_base if impl == "torch-compile" else impl
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if n.endswith("bias") or "LayerNorm" in n or ".ln_" in n else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.999), eps=1e-6, fused=device == "cuda")
    if row.family == "bert":
        b = {k: torch.from_numpy(v).long().to(device)
             for k, v in bert_batch(B, row.seq, cfg.vocab_size, args.seed).items()}
        inputs = {"input_ids": b["input_ids"], "token_type_ids": b["segment_ids"],
                  "attention_mask": b["input_mask"]}
        labels = torch.full_like(b["input_ids"], -100)
        labels.scatter_(1, b["masked_lm_positions"], b["masked_lm_ids"])

        def eager_loss():
            if variant == "torch-hf":
                return model(**inputs, labels=labels,
                             next_sentence_label=b["next_sentence_label"]).loss
            seq_BxLxE, pooled_BxE = model.bert(**inputs, return_dict=False)[:2]
            index = b["masked_lm_positions"][..., None].expand(-1, -1, seq_BxLxE.shape[-1])
            logits_BxPxV = model.cls.predictions(seq_BxLxE.gather(1, index))
            mlm = F.cross_entropy(logits_BxPxV.flatten(0, 1).float(),
                                  b["masked_lm_ids"].flatten())
            nsp = F.cross_entropy(model.cls.seq_relationship(pooled_BxE).float(),
                                  b["next_sentence_label"])
            return mlm + nsp
    else:
        ids = torch.from_numpy(gpt_batch(B, row.seq, cfg.vocab_size, args.seed)["input_ids"])
        tokens = ids.long().to(device)

        def eager_loss():  # transformers shifts the labels itself: L - 1 predictions per row
            return model(input_ids=tokens, labels=tokens).loss

    loss_fn = torch.compile(eager_loss) if impl == "torch-compile" else eager_loss
    holder = {"losses": []}

    def step():
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = loss_fn()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        holder["loss"] = loss.detach()

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()
        holder["losses"].append(float(holder["loss"]))

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    result = timed(step, sync, args.seconds_per_window, args.windows)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else None
    return {**result, "loss_first": holder["losses"][0], "loss_last": holder["losses"][-1],
            "peak_bytes": peak, "flops": model_flops(row, cfg, B), "variant": variant,
            "attention": model.config._attn_implementation,
            "finite": all(x == x for x in holder["losses"])}


def child_bertjax_generate(row: Row, B: int, args) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from bertjax.generation.decode import generate_ids
    from bertjax.generation.sampling import Sampling
    from bertjax.models.gpt import GptLM

    cfg, hf = configs(row, args.attention_impl)
    params = bertjax_params(row, cfg, hf, args.seed)
    params = jax.device_put(jax.tree.map(lambda x: jnp.asarray(x, jnp.bfloat16), params))
    prompts = np.random.default_rng(args.seed).integers(0, cfg.vocab_size, (B, row.seq),
                                                        dtype=np.int32)
    ids, mask = jnp.asarray(prompts), jnp.ones((B, row.seq), jnp.int32)
    model = GptLM(cfg)
    holder = {}

    def step():
        holder["out"] = generate_ids(params, ids, mask, jax.random.key(0), model=model,
                                     max_new_tokens=row.new_tokens,
                                     sampling=Sampling(temperature=0.0))

    def sync():
        jax.block_until_ready(holder["out"])

    result = timed(step, sync, args.seconds_per_window, max(3, args.windows // 2))
    stats = jax.devices()[0].memory_stats() or {}
    return {**result, "tokens": np.asarray(holder["out"])[:, :16].tolist(),
            "peak_bytes": stats.get("peak_bytes_in_use"), "backend": jax.default_backend()}


def child_torch_generate(row: Row, B: int, args) -> dict:
    import numpy as np
    import torch

    device = "cuda" if torch.cuda.is_available() and not args.quick else "cpu"
    cfg, hf = configs(row, args.attention_impl)
    model = hf_model(row, hf, args.seed).to(device=device, dtype=torch.bfloat16).eval()
    prompts = np.random.default_rng(args.seed).integers(0, cfg.vocab_size, (B, row.seq))
    ids = torch.from_numpy(prompts).long().to(device)
    holder = {}

    def step():
        with torch.inference_mode():
            holder["out"] = model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                max_new_tokens=row.new_tokens, min_new_tokens=row.new_tokens,
                pad_token_id=0, eos_token_id=None)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    result = timed(step, sync, args.seconds_per_window, max(3, args.windows // 2))
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else None
    new = holder["out"][:, row.seq:]
    return {**result, "tokens": new[:, :16].cpu().tolist(), "peak_bytes": peak,
            "new_tokens_made": int(new.shape[1])}


def child_peak(args) -> dict:
    """bf16 matrix product rate (n^3 x 2 FLOPs) in jax and torch on this device."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    n = 1024 if args.quick else 8192
    reps = 3 if args.quick else 20
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    ja, jb = (jnp.asarray(x, jnp.bfloat16) for x in (a, b))
    dot = jax.jit(jnp.dot)
    jax_t = timed(lambda: dot(ja, jb).block_until_ready(), lambda: None, 0.2, reps)["step_s"]
    device = "cuda" if torch.cuda.is_available() and not args.quick else "cpu"
    ta, tb = (torch.from_numpy(x).to(device, torch.bfloat16) for x in (a, b))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    torch_t = timed(lambda: torch.mm(ta, tb), sync, 0.2, reps)["step_s"]
    name = (torch.cuda.get_device_name() if device == "cuda"
            else platform.processor() or platform.machine())
    return {"n": n, "jax_flops_per_s": 2 * n**3 / jax_t, "torch_flops_per_s": 2 * n**3 / torch_t,
            "device_name": name, "jax_device": str(jax.devices()[0])}


def run_child(spec: dict, args) -> dict:
    if spec["what"] == "peak":
        return child_peak(args)
    row = next(r for r in args.row_list if r.name == spec["row"])
    impl, B = spec["impl"], spec["batch"]
    args.compile_base = spec.get("compile_base", "torch-hf")
    if row.kind == "generate":
        return (child_bertjax_generate if impl == "bertjax" else child_torch_generate)(
            row, B, args)
    if impl == "bertjax":
        return child_bertjax_train(row, B, args)
    return child_torch_train(row, B, impl, args)


def child_main(args) -> None:
    spec = json.loads(args.child)
    try:
        result = {"ok": True, **run_child(spec, args)}
    except Exception as err:  # reported to the parent: an OOM picks a smaller batch
        import traceback

        text = f"{type(err).__name__}: {err} | {traceback.format_exc()[-1500:]}"
        oom = any(s in text for s in ("RESOURCE_EXHAUSTED", "out of memory", "OutOfMemory"))
        result = {"ok": False, "oom": oom, "error": text[:2000]}
    with open(spec["result_file"], "w") as f:
        json.dump({**spec, **result}, f)


# ----------------------------------------------------------------------------- parent


class Runner:
    """Starts one child process per measurement, under a global deadline."""

    def __init__(self, args, log):
        self.args, self.log, self.start = args, log, time.perf_counter()
        self.tmp = tempfile.mkdtemp(prefix="bertjax-accel-")
        self.results: list[dict] = []
        self.skipped: list[str] = []
        self.profiled = False
        self.jsonl = open(args.out_dir / "results.jsonl", "a") if args.out_dir else None  # noqa

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def __call__(self, **spec) -> dict | None:
        label = " ".join(f"{k}={v}" for k, v in spec.items())
        if self.elapsed() > self.args.deadline_s:
            self.skipped.append(label)
            self.log(f"[{self.elapsed():6.1f}s] skip (deadline) {label}")
            return None
        spec["result_file"] = os.path.join(self.tmp, f"{len(self.results)}.json")
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               "TF_CPP_MIN_LOG_LEVEL": "3", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        if self.args.quick:
            env.update(JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="", XLA_FLAGS="")
        cmd = [sys.executable, __file__, "--child", json.dumps(spec),
               *(["--quick"] if self.args.quick else []),
               f"--attention_impl={spec.pop('attention_impl', self.args.attention_impl)}",
               f"--seconds_per_window={self.args.seconds_per_window}",
               f"--windows={self.args.windows}", f"--seed={self.args.seed}"]
        if self.args.rows:
            cmd.append(f"--rows={self.args.rows}")
        profile = None
        if (spec.get("impl") == "bertjax" and spec.get("row") == self.args.profile_row
                and self.args.out_dir and not self.profiled):
            profile = pathlib.Path(self.tmp) / "profile"
            cmd.append(f"--profile_dir={profile}")
        begin = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                  timeout=self.args.child_timeout_s)
            with open(spec["result_file"]) as f:
                result = json.load(f)
        except (subprocess.TimeoutExpired, FileNotFoundError, json.JSONDecodeError) as err:
            tail = getattr(locals().get("proc"), "stderr", "") or ""
            result = {**spec, "ok": False, "oom": False,
                      "error": f"{type(err).__name__}: {str(err)[:300]} {tail[-1500:]}"}
        result["wall_s"] = time.perf_counter() - begin
        if profile is not None and result["ok"]:
            self.profiled = keep_profile(profile, self.args.out_dir / f"{spec['row']}.xplane.pb.gz")
        self.results.append(result)
        if self.jsonl:
            self.jsonl.write(json.dumps(result) + "\n")
            self.jsonl.flush()
        status = "ok" if result["ok"] else ("OOM" if result.get("oom") else "FAILED")
        detail = (f"{1e3 * result['step_s']:.2f} ms/step" if result["ok"] and "step_s" in result
                  else result.get("error", "")[:300])
        self.log(f"[{self.elapsed():6.1f}s] {status:6} {label}  {detail}  "
                 f"({result['wall_s']:.0f} s)")
        return result


def keep_profile(trace_dir: pathlib.Path, dest: pathlib.Path) -> bool:
    """Gzip the trace's XPlane file to `dest` (beside the results, two folders up at most);
    `python benchmarks/xplane_summary.py dest` says where the step's time went."""
    import gzip
    import shutil

    planes = sorted(trace_dir.rglob("*.xplane.pb"))
    if not planes:
        return False
    with open(planes[-1], "rb") as src, gzip.open(dest, "wb") as out:
        shutil.copyfileobj(src, out)
    return True


def measure_train_row(run: Runner, row: Row, eager: list[str]) -> int | None:
    """bertjax and the eager torch rows at the largest batch that fits all of them."""
    for B in row.batches:
        results = [run(what="train", row=row.name, impl="bertjax", batch=B)]
        if results[0] and not results[0]["ok"] and not results[0].get("oom"):
            # A fused-attention failure (e.g. a cuDNN the kernel does not support) must not
            # cost the row: measure it again with XLA's attention and say so in the table.
            results = [run(what="train", row=row.name, impl="bertjax", batch=B,
                           attention_impl="xla")]
        results += [run(what="train", row=row.name, impl=impl, batch=B) for impl in eager]
        if any(r is None for r in results):
            return None
        if any(r.get("oom") for r in results):
            continue
        return B
    return None


def environment(peak: dict | None) -> dict:
    versions = {}
    for name in ("jax", "jaxlib", "flax", "optax", "orbax.checkpoint", "torch", "transformers",
                 "numpy"):
        with contextlib.suppress(Exception):
            module = __import__(name, fromlist=["__version__"])
            versions[name] = getattr(module, "__version__", "?")
    driver = ""
    with contextlib.suppress(Exception):
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20).stdout.strip()
    commit = ""
    with contextlib.suppress(Exception):
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "bertjax",
                                "benchmarks"], capture_output=True, text=True, timeout=10).stdout
        commit += " with uncommitted changes" if dirty.strip() else ""
    others = ""
    with contextlib.suppress(Exception):
        others = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20).stdout.strip()
    return {"date": datetime.date.today().isoformat(),
            "time": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "other_device_processes": len(others.split()), "load": os.getloadavg()[0],
            "versions": versions,
            "nvidia_smi": driver, "device": (peak or {}).get("device_name", "?"),
            "python": platform.python_version(), "commit": commit,
            "cpu_count": os.cpu_count()}


def nominal_peak(device: str) -> float | None:
    for key, value in NOMINAL_BF16_PEAK:
        if key in device:
            return value
    return None


def table(results: list[dict], rows: list[Row], peak: dict | None, env: dict) -> str:
    """The markdown table: one line per measurement that ran."""
    nominal = nominal_peak(env["device"])
    measured = max(peak["jax_flops_per_s"], peak["torch_flops_per_s"]) if peak else None
    by_row = {r.name: r for r in rows}
    lines = ["| row | implementation | batch | seq/s | tokens/s | step ms | peak GiB "
             "| MFU (nominal) | MFU (measured GEMM) | vs best torch | first step s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    ok = [r for r in results if r.get("ok") and r.get("what") != "peak"]
    for res in ok:
        row = by_row[res["row"]]
        B, t = res["batch"], res["step_s"]
        peers = [p for p in ok if p["row"] == res["row"] and p["batch"] == B
                 and p["impl"] != "bertjax"]
        best_torch = min((p["step_s"] for p in peers), default=None)
        if row.kind == "generate":
            seq_s, tok_s = B / t, B * row.new_tokens / t
            mfu_n = mfu_m = "-"
        else:
            seq_s, tok_s = B / t, B * row.seq / t
            mfu_n = f"{100 * res['flops'] / t / nominal:.1f}%" if nominal else "-"
            mfu_m = f"{100 * res['flops'] / t / measured:.1f}%" if measured else "-"
        ratio = (f"{best_torch / t:.2f}x" if res["impl"] == "bertjax" and best_torch else "")
        mem = f"{res['peak_bytes'] / 2**30:.1f}" if res.get("peak_bytes") else "-"
        impl = res["impl"]
        if impl == "bertjax" and res.get("attention_impl"):
            impl += f" ({res['attention_impl']} attention)"
        elif impl == "torch-compile":
            impl += f" ({res.get('variant')})"
        lines.append(f"| {res['row']} | {impl} | {B} | {seq_s:,.1f} | {tok_s:,.0f} | "
                     f"{1e3 * t:.1f} | {mem} | {mfu_n} | {mfu_m} | {ratio} | "
                     f"{res['first_step_s']:.1f} |")
    return "\n".join(lines)


def checks(results: list[dict]) -> list[str]:
    """Lines that show both sides ran the same model: first-step losses (same weights, same
    batch; dropout masks differ) and greedy tokens (bf16 rounding differs, so they may part)."""
    lines = []
    ok = [r for r in results if r.get("ok") and r.get("what") in ("train", "generate")]
    for res in ok:
        if res["impl"] != "bertjax":
            continue
        peers = [p for p in ok if p["row"] == res["row"] and p["batch"] == res["batch"]
                 and p["impl"] != "bertjax"]
        for peer in peers:
            if res["what"] == "train":
                lines.append(f"- {res['row']} batch {res['batch']}: first-step loss bertjax "
                             f"{res['loss_first']:.4f}, {peer['impl']} {peer['loss_first']:.4f}")
            else:
                same = sum(a == b for x, y in zip(res["tokens"], peer["tokens"], strict=True)
                           for a, b in zip(x, y, strict=False))
                total = sum(len(x) for x in res["tokens"])
                lines.append(f"- {res['row']} batch {res['batch']}: greedy tokens equal to "
                             f"{peer['impl']}'s at {same} of the first {total} positions")
    return lines


DIFFERENCES = (
    "bertjax's step also computes the gradient norm for a finite-step guard (its train_step "
    "as the training loop runs it); torch's steps do not",
    "torch-hf computes BERT's MLM logits at every position [B, L, V] (as BertForPreTraining "
    "does); bertjax and torch-gathered at the masked positions only, the like-for-like peer",
    "no attention dropout on either side (BERT and GPT-2 train with 0.1), as in the first "
    "tables: both sides leave the same part out (accelerator_levers.py times the paper's 0.1 "
    "in cuDNN's kernel and on XLA's path)",
    "GPT-2: transformers shifts the labels itself, so it predicts L - 1 tokens per row where "
    "bertjax predicts L (one position in 1,024 more work for bertjax)",
    "generation: bertjax runs one jitted while_loop on the device, transformers generate() a "
    "Python loop with its dynamic cache; both greedy, bf16 weights, no stop token",
)


def ratios(results: list[dict]) -> list[tuple[str, float]]:
    """(measure, bertjax's speed over the peer's) for every peer measured beside bertjax."""
    found = []
    ok = [r for r in results if r.get("ok") and r.get("what") in ("train", "generate")]
    for res in ok:
        if res["impl"] != "bertjax":
            continue
        for peer in ok:
            if (peer["row"], peer["batch"]) != (res["row"], res["batch"]) or peer is res \
                    or peer["impl"] == "bertjax":
                continue
            name = peer["impl"] + (f"[{peer.get('variant')}]"
                                   if peer["impl"] == "torch-compile" else "")
            found.append((f"{res['row']} batch {res['batch']}: bertjax/{name} (tokens/s)",
                          peer["step_s"] / res["step_s"]))
    return found


def record(args, env: dict, results: list[dict], header: str, text: str, notes: list[str],
           wall_s: float) -> results_record.Run:
    """The run as a line of benchmarks/results.jsonl."""
    kept, skip = [], False
    for arg in args.command_line:  # the command as run, less where its results were written
        if not skip and not arg.startswith("--results"):
            kept.append(arg)
        skip = arg == "--results"
    argv = " ".join(kept)
    busy = env["other_device_processes"] if not args.quick else env["load"] > (
        env["cpu_count"] or 1)
    conditions = ("loaded (other processes on the device or CPU)" if busy
                  else "idle (no other process on the device)")
    if args.quick:
        conditions += "; quick mode: CPU, tiny sizes, not a measurement"
    fields = {"benchmark": "accelerator_step" + (" --quick" if args.quick else ""),
              "date": env["time"], "machine": env["device"], "conditions": conditions,
              "host": f"{env['nvidia_smi'] or '-'}; {env['cpu_count']} CPU cores",
              "versions": ", ".join(f"{k} {v}" for k, v in env["versions"].items()),
              "commit": env["commit"] or "unknown",
              "command": f"`PYTHONPATH=. python benchmarks/accelerator_step.py {argv}`".replace(
                  " `", "`"),
              "wall": f"{wall_s:.0f} s"}
    body = "\n".join([header.split("\n\n", 1)[-1].strip(), "", text, "",
                      *notes, "", "What differs between the sides:", "",
                      *(f"- {line}" for line in DIFFERENCES)])
    return results_record.Run(fields, tuple(ratios(results)), body)


def main(argv=None) -> None:
    args = parse_args(argv)
    args.out_dir = None
    args.command_line = list(sys.argv[1:] if argv is None else argv)
    if args.child:
        child_main(args)
        return
    if args.record:  # a run measured elsewhere: report and record it here
        saved = json.loads(pathlib.Path(args.record).read_text())
        measured = parse_args(saved["command_line"])  # the run's own rows, mode and deadline
        measured.command_line, measured.results = saved["command_line"], args.results
        report(measured, saved["env"], saved["peak"], saved["results"], saved["skipped"],
               saved.get("wall_s", 0.0), print)
        return
    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix="bertjax-accel-out-"))
    out.mkdir(parents=True, exist_ok=True)
    args.out_dir = out
    logfile = open(out / "log.txt", "a")  # noqa: SIM115

    def log(line: str) -> None:
        print(line, flush=True)
        logfile.write(line + "\n")
        logfile.flush()

    run = Runner(args, log)
    peak = run(what="peak")
    peak = peak if peak and peak.get("ok") else None
    env = environment(peak)
    log(f"device {env['device']} ({env['nvidia_smi']}); versions {env['versions']}")
    chosen: dict[str, int] = {}
    for row in args.row_list:
        if row.kind == "generate":
            for B in row.batches:
                for impl in ("bertjax", "torch-hf"):
                    run(what="generate", row=row.name, impl=impl, batch=B)
            continue
        eager = ["torch-hf", "torch-gathered"] if row.family == "bert" else ["torch-hf"]
        B = measure_train_row(run, row, eager)
        if B is not None:
            chosen[row.name] = B
    if args.compile == "on":
        for row in args.row_list:
            if row.name not in chosen:
                continue
            eager_rows = [r for r in run.results if r.get("ok") and r.get("row") == row.name
                          and r.get("batch") == chosen[row.name]
                          and r["impl"] in ("torch-hf", "torch-gathered")]
            base = min(eager_rows, key=lambda r: r["step_s"])["impl"] if eager_rows else "torch-hf"
            run(what="train", row=row.name, impl="torch-compile", batch=chosen[row.name],
                compile_base=base)
    (out / "results.json").write_text(json.dumps(
        {"env": env, "peak": peak, "results": run.results, "skipped": run.skipped,
         "wall_s": run.elapsed(), "command_line": args.command_line}, indent=1))
    report(args, env, peak, run.results, run.skipped, run.elapsed(), log)
    log(f"total {run.elapsed():.0f} s; results in {out}")


def report(args, env: dict, peak: dict | None, results: list[dict], skipped: list[str],
           wall_s: float, log) -> None:
    """The run's table, notes and ratios; with --results, appended to that record."""
    text = table(results, args.row_list, peak, env)
    nominal = nominal_peak(env["device"])
    header = (f"### Accelerator step, {env['date']}: {env['device']}"
              f"{' (quick mode: CPU, tiny sizes; numbers mean nothing)' if args.quick else ''}\n\n"
              f"`PYTHONPATH=. python benchmarks/accelerator_step.py"
              f"{' --quick' if args.quick else ''}` at commit {env['commit']}; "
              f"nvidia-smi: {env['nvidia_smi'] or '-'}; versions: "
              + ", ".join(f"{k} {v}" for k, v in env["versions"].items())
              + f". bf16 GEMM {peak['n'] if peak else '?'}^3 measured: "
              + (f"jax {peak['jax_flops_per_s'] / 1e12:.0f}, torch "
                 f"{peak['torch_flops_per_s'] / 1e12:.0f} TFLOP/s" if peak else "-")
              + (f"; nominal dense bf16 peak {nominal / 1e12:.0f} TFLOP/s" if nominal else "")
              + ".\n")
    failed = [r for r in results if not r.get("ok")]
    notes = [f"- {'OOM' if r.get('oom') else 'failed'}: {r.get('row', r.get('what'))} "
             f"{r.get('impl', '')} batch {r.get('batch', '-')}: "
             f"{' '.join(r.get('error', '').split())[:200]}" for r in failed]
    notes += [f"- not run (deadline {args.deadline_s:.0f} s): {s}" for s in skipped]
    notes += checks(results)
    section = header + "\n" + text + "\n" + ("\n" + "\n".join(notes) + "\n" if notes else "")
    log("\n" + section)
    log("what differs from the same work on both sides:\n"
        + "\n".join(f"  - {line}" for line in DIFFERENCES))
    for measure, value in ratios(results):
        log(f"ratio {measure}: {value:.2f}x")
    if args.results:
        results_record.append(pathlib.Path(args.results), [
            record(args, env, results, header, text, notes, wall_s)])
        log(f"appended the run to {args.results} and rendered "
            f"{results_record.markdown_path(pathlib.Path(args.results))}")


if __name__ == "__main__":
    main()
