"""GPT-2 throughput, bertjax (JAX) vs transformers (torch), same machine, weights and batches.

    training step:  tokens/s of forward + backward + AdamW update (the same no-decay groups,
                    eps and clipping at 1.0) on [batch, seq] next-token LM, once per
                    --train_dropout rate: GPT-2's 0.1 on the embeddings, residual branches and
                    attention probabilities on both sides, and 0 (dropout off on both sides)
    generation:     new tokens/s, greedy, --new_tokens per prompt, batch 1 and 8 (left-padded
                    prompts), bertjax's jitted KV-cache loop vs transformers' generate()

    XLA_FLAGS= python benchmarks/gpt2_step_and_generate.py --size=gpt2_small
    XLA_FLAGS= python benchmarks/gpt2_step_and_generate.py --size=gpt2_small --steps=2 \
        --gen_batches=1,8 --json=/tmp/gpt2_bench.json
    XLA_FLAGS= python benchmarks/gpt2_step_and_generate.py --size=gpt2_tiny --vocab_size=4096 \
        --batch=32 --steps=20 --gen_batches= --loss_rows=0,512,1024   # the sliced head

Times exclude compilation (one warm-up call each side) and are the median of --repeats.
At batch 1 a decode step reads every weight once, so the run also prints the rate at which this
machine can stream the model's float32 weights (a torch matrix-vector product over as many
numbers): no implementation generates faster than that at batch 1. The output ends with what
differs between the two sides, and one `ratio MEASURE: 1.23x` line per row (benchmarks/run_all.py
records those).
"""

import argparse
import json

import jax
import numpy as np
import torch
import transformers
from timing import median_seconds

from bertjax.convert.hf_gpt import config_from_hf, hf_to_bertjax
from bertjax.generation.decode import generate_ids, left_pad
from bertjax.generation.sampling import GREEDY
from bertjax.models.gpt import SIZES, GptLM
from bertjax.objectives.lm import gpt_pretraining
from bertjax.training.loop import build_trainer
from bertjax.training.mesh import make_mesh
from bertjax.training.optim import make_optimizer


def hf_model(size: str, dropout: float = 0.0, vocab_size: int = 50257):
    """transformers' GPT-2 of `size` from a seeded init (the same weights at any `dropout`)."""
    layers, hidden, heads, _ = SIZES[size]
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads,
                                     vocab_size=vocab_size, resid_pdrop=dropout,
                                     embd_pdrop=dropout, attn_pdrop=dropout)
    return transformers.GPT2LMHeadModel(config)


def no_decay(name: str) -> bool:
    """Biases and LayerNorms get no weight decay, as in bertjax's optimizer."""
    return name.endswith("bias") or ".ln_" in name


def train_step_rates(model, batch, seq, steps, loss_rows=(None,)):
    """(bertjax's tokens/s at each of `loss_rows` (gpt_pretraining's: None is its default),
    torch's tokens/s)."""
    rng = np.random.default_rng(0)
    ids = rng.integers(0, model.config.vocab_size, (batch, seq + 1))
    tokens = batch * seq
    config = config_from_hf(model.config.to_dict())
    jax_rates = [tokens / median_seconds(jax_step_fn(config, ids, rows), steps)
                 for rows in loss_rows]
    return jax_rates, tokens / median_seconds(torch_step_fn(model, ids), steps)


def jax_step_fn(config, ids, loss_rows):
    """bertjax's train step on `ids` [batch, seq + 1], as a call that waits for it."""
    batch, seq = ids.shape[0], ids.shape[1] - 1
    task = gpt_pretraining(config, loss_rows=loss_rows)
    tx = make_optimizer(learning_rate=1e-4, warmup_steps=10, total_steps=1000)
    jax_batch = {"input_ids": ids[:, :-1].astype(np.int32),
                 "target_ids": ids[:, 1:].astype(np.int32),
                 "loss_weights": np.ones((batch, seq), np.float32)}
    trainer = build_trainer(task, tx, make_mesh(devices=jax.devices()[:1]), batch, seq)
    holder = {"state": trainer.init()}
    device_batch = trainer.device_batch(jax_batch)

    def jax_step():
        holder["state"], metrics = trainer.step(holder["state"], device_batch)
        jax.block_until_ready(metrics["loss"])

    return jax_step


def torch_step_fn(model, ids):
    """transformers' train step on the same ids, AdamW with the same groups and clipping."""
    model.train()
    params = list(model.named_parameters())
    optimizer = torch.optim.AdamW(
        [{"params": [p for n, p in params if not no_decay(n)], "weight_decay": 0.01},
         {"params": [p for n, p in params if no_decay(n)], "weight_decay": 0.0}],
        lr=1e-4, eps=1e-6)
    torch_ids = torch.from_numpy(ids[:, :-1]).long()
    labels = torch.from_numpy(ids).long()

    def torch_step():
        optimizer.zero_grad(set_to_none=True)
        logits = model(input_ids=torch_ids).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 labels[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return torch_step


def generation_rates(model, batch, prompt_len, new_tokens, repeats):
    config = config_from_hf(model.config.to_dict())
    params = jax.device_put(hf_to_bertjax(model.state_dict(), config))
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, 50257, rng.integers(prompt_len // 2, prompt_len + 1)).tolist()
               for _ in range(batch)]
    ids, mask = left_pad(prompts, pad_id=50256, length=prompt_len)
    gpt = GptLM(config)

    def jax_generate():
        out = generate_ids(params, ids, mask, jax.random.key(0), model=gpt,
                           max_new_tokens=new_tokens, sampling=GREEDY)
        return np.asarray(out)

    model.eval()
    torch_ids, torch_mask = torch.from_numpy(ids).long(), torch.from_numpy(mask).long()

    def torch_generate():
        with torch.no_grad():
            return model.generate(torch_ids, attention_mask=torch_mask, do_sample=False,
                                  max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                  pad_token_id=50256)[:, ids.shape[1]:].numpy()

    same = float((jax_generate() == torch_generate()).mean())
    tokens = batch * new_tokens
    return (tokens / median_seconds(jax_generate, repeats),
            tokens / median_seconds(torch_generate, repeats), same)


def weight_read_bound(model, repeats: int = 10) -> float:
    """Passes per second of a float32 matrix-vector product over as many weights as the model."""
    n = sum(p.numel() for p in model.parameters())
    weights = torch.ones(n // 768, 768)
    vector = torch.ones(768)
    return 1.0 / median_seconds(lambda: weights @ vector, repeats)


def differences(rates: list[float]) -> list[str]:
    """What the two sides do differently, for the output (none of it is hidden in a ratio)."""
    lines = []
    if 0.0 in rates:
        lines.append("the 'dropout off' train step turns dropout off on both sides (GPT-2 trains "
                     "with 0.1), leaving out a known part of bertjax's step cost; the "
                     "'dropout 0.1' row has it on on both sides")
    if rates:
        lines.append("bertjax's head and loss: by default a slice of the sequence at a time on "
                     "the CPU (objectives/head_xent.py; a 'whole logits' row turns it off), "
                     "transformers' over the whole [batch, seq, vocab] logits")
        lines.append("bertjax's train step also computes the gradient norm for a finite-step "
                     "guard (its train_step as the loop runs it); torch's does not")
    lines.append("generation: transformers' generate() is told min_new_tokens so both sides "
                 "make every token; bertjax's loop is one jitted while_loop, transformers' a "
                 "Python loop (that difference is what is measured)")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="gpt2_small", choices=[s for s in SIZES if "gpt2" in s])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3, help="timed training steps (0: skip)")
    parser.add_argument("--train_dropout", default="0.1,0",
                        help="dropout rates of the timed train steps, both sides (0: off)")
    parser.add_argument("--vocab_size", type=int, default=50257,
                        help="both sides' vocabulary (the time-to-quality benchmark's is 4096)")
    parser.add_argument("--loss_rows", default="",
                        help="bertjax train rows at each gpt_pretraining.loss_rows (0: the "
                             "whole logits; N: the head in slices of N rows); '': its default")
    parser.add_argument("--new_tokens", type=int, default=128)
    parser.add_argument("--prompt_len", type=int, default=32)
    parser.add_argument("--gen_batches", default="1,8", help="generation batch sizes ('': skip)")
    parser.add_argument("--repeats", type=int, default=3, help="timed generate calls")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()

    model = hf_model(args.size, vocab_size=args.vocab_size)
    rows, results = [], {"size": args.size, "vocab_size": args.vocab_size,
                         "torch_threads": torch.get_num_threads(),
                         "jax_devices": str(jax.devices()[0])}
    rates = [float(r) for r in args.train_dropout.split(",") if r] if args.steps else []
    loss_rows = [int(r) for r in args.loss_rows.split(",")] if args.loss_rows else [None]
    for rate in rates:
        jax_rates, torch_rate = train_step_rates(
            hf_model(args.size, rate, args.vocab_size), args.batch, args.seq, args.steps,
            loss_rows)
        dropout = f"dropout {rate:g}" if rate else "dropout off"
        for rows_a_slice, jax_rate in zip(loss_rows, jax_rates, strict=True):
            head = "" if rows_a_slice is None else (
                ", whole logits" if rows_a_slice == 0 else f", head in {rows_a_slice}-row slices")
            rows.append((f"train step, batch {args.batch} x {args.seq}, {dropout}{head}",
                         jax_rate, torch_rate, None))
            print(f"{rows[-1][0]}: bertjax {jax_rate:,.0f} tok/s, torch {torch_rate:,.0f}",
                  flush=True)
            key = f"train_tokens_per_s_{dropout.replace(' ', '_')}" + (
                "" if rows_a_slice is None else f"_loss_rows_{rows_a_slice}")
            results[key] = {"bertjax": jax_rate, "torch": torch_rate}
    for batch in (int(b) for b in args.gen_batches.split(",") if b):
        jax_rate, torch_rate, same = generation_rates(model, batch, args.prompt_len,
                                                      args.new_tokens, args.repeats)
        rows.append((f"greedy generate, batch {batch}, {args.new_tokens} new", jax_rate,
                     torch_rate, same))
        print(f"{rows[-1][0]}: bertjax {jax_rate:,.0f} tok/s, torch {torch_rate:,.0f}",
              flush=True)
        results[f"generate_batch{batch}_tokens_per_s"] = {
            "bertjax": jax_rate, "torch": torch_rate, "same_tokens": same}

    print(f"\n{args.size} on {results['jax_devices']} (torch threads: "
          f"{results['torch_threads']})")
    print(f"{'':66} {'bertjax tok/s':>14} {'torch tok/s':>12} {'ratio':>7}  same tokens")
    for name, ours, theirs, same in rows:
        agree = "" if same is None else f"  {same:.0%}"
        print(f"{name:66} {ours:>14,.0f} {theirs:>12,.0f} {ours / theirs:>6.2f}x{agree}")
    if "1" in args.gen_batches.split(","):
        bound = weight_read_bound(model)
        results["weight_read_bound_tokens_per_s"] = bound
        print(f"batch-1 bound: the float32 weights stream {bound:,.0f} times/s on this machine "
              f"(torch matrix-vector product, {torch.get_num_threads()} threads)")
    print("what differs from the same work on both sides:")
    for line in differences(rates):
        print(f"  - {line}")
    for name, ours, theirs, _ in rows:
        print(f"ratio bertjax/torch, {name}: {ours / theirs:.2f}x")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
