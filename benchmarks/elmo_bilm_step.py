"""ELMo biLM train-step throughput: bertjax next to the same biLM built from torch.nn.LSTM.

The torch model is ELMo's biLM written with torch's own modules: char embedding, Conv1d per
filter width + max-pool + ReLU, highway layers, projection, then per direction L stacked
`torch.nn.LSTM(P, H, proj_size=P)` (residual from layer 2, the backward stack over the flipped
sequence) and a shared full softmax. Both sides start from the same weights (bertjax's init,
copied into torch), run a full training step (forward, backward, Adam update) in float32 on the
same batch of full-length sentences, on one CPU device with the same number of threads.
torch.nn.LSTM has no cell/projection clipping, so both run without it; dropout is off. The
first step's losses are printed side by side: they agree, so the two compute the same thing.

    python benchmarks/elmo_bilm_step.py --size=tiny --batch_size=32 --seq_length=20
    python benchmarks/elmo_bilm_step.py --size=small --vocab_size=8192 --steps=3

XLA_FLAGS is cleared before jax is imported (one CPU device, XLA defaults), so a shell that
exports fake-device flags for the tests does not split the CPU here.
"""

import argparse
import os
import statistics
import time


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="tiny", choices=["tiny", "small", "medium", "original"])
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--seq_length", type=int, default=20)
    p.add_argument("--vocab_size", type=int, default=8192)
    p.add_argument("--steps", type=int, default=5, help="timed steps per side per round")
    p.add_argument("--rounds", type=int, default=2, help="alternate the sides this many times")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (jax compiles)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: cores)")
    return p.parse_args(argv)


def make_batch(args, max_chars):
    import numpy as np

    rng = np.random.default_rng(0)
    B, T = args.batch_size, args.seq_length
    return {
        "token_ids": rng.integers(0, args.vocab_size, (B, T)).astype(np.int32),
        "lengths": np.full((B,), T, np.int32),
        "char_ids": rng.integers(1, 262, (B, T, max_chars)).astype(np.int32),
    }


def build_jax(args):
    import jax

    from bertjax.models.elmo import elmo_config
    from bertjax.objectives.bilm import elmo_pretraining
    from bertjax.training.loop import build_trainer
    from bertjax.training.mesh import make_mesh
    from bertjax.training.optim import make_optimizer

    config = elmo_config(args.size, vocab_size=args.vocab_size, cell_clip=None, proj_clip=None,
                         dropout_rate=0.0)
    task = elmo_pretraining(config)
    tx = make_optimizer(learning_rate=1e-3, warmup_steps=0, total_steps=10**6, eps=1e-8,
                        weight_decay=0.0, clip_norm=None)
    batch = make_batch(args, config.max_chars)
    trainer = build_trainer(task, tx, make_mesh(devices=jax.devices()[:1]),
                            *batch["token_ids"].shape)
    state = trainer.init()
    device_batch = trainer.device_batch(batch)

    def step(state):
        state, metrics = trainer.step(state, device_batch)
        jax.block_until_ready(metrics["loss"])
        return state, float(metrics["loss"])

    return config, jax.device_get(state.params), state, step, batch


def build_torch(config, params, batch, threads):
    import numpy as np
    import torch
    from torch import nn

    if threads:
        torch.set_num_threads(threads)
    t = lambda x: torch.from_numpy(np.array(x, np.float32))  # noqa: E731
    enc = params["token_encoder"]
    P, H, L = config.proj_size, config.cell_size, config.num_layers

    class TorchBiLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.char_embed = nn.Embedding(config.num_chars, config.char_embed_dim)
            self.convs = nn.ModuleList(nn.Conv1d(config.char_embed_dim, n, w)
                                       for w, n in config.char_filters)
            F = sum(n for _, n in config.char_filters)
            self.highway = nn.ModuleList(nn.ModuleList([nn.Linear(F, F), nn.Linear(F, F)])
                                         for _ in range(config.num_highway))
            self.proj = nn.Linear(F, P)
            self.lstms = nn.ModuleList(nn.ModuleList(
                nn.LSTM(P, H, proj_size=P, batch_first=True) for _ in range(L)) for _ in range(2))
            self.softmax = nn.Linear(P, config.vocab_size)

        def encode(self, chars):
            B, T, C = chars.shape
            x = self.char_embed(chars.reshape(B * T, C)).transpose(1, 2)
            h = torch.cat([torch.relu(conv(x).max(dim=2).values) for conv in self.convs], 1)
            for carry, transform in self.highway:
                g = torch.sigmoid(carry(h))
                h = g * torch.relu(transform(h)) + (1 - g) * h
            return self.proj(h).reshape(B, T, P)

        def forward(self, chars, targets, weights):
            x = self.encode(chars)
            tops = []
            for d, inputs in enumerate((x, torch.flip(x, [1]))):
                for k, lstm in enumerate(self.lstms[d]):
                    y, _ = lstm(inputs)
                    inputs = y + inputs if k > 0 else y
                tops.append(inputs if d == 0 else torch.flip(inputs, [1]))
            logits = self.softmax(torch.stack(tops))  # [2, B, T, V]
            xent = nn.functional.cross_entropy(logits.flatten(0, 2), targets.flatten(),
                                               reduction="none").reshape(weights.shape)
            nll = (xent * weights).sum((1, 2)) / weights.sum((1, 2))
            return 0.5 * nll.sum()

    model = TorchBiLM()
    with torch.no_grad():
        model.char_embed.weight.copy_(t(enc["char_embed"]["embedding"]))
        for i, conv in enumerate(model.convs):
            conv.weight.copy_(t(enc[f"conv_{i}"]["kernel"]).permute(2, 1, 0))
            conv.bias.copy_(t(enc[f"conv_{i}"]["bias"]))
        for i, (carry, transform) in enumerate(model.highway):
            for layer, part in ((carry, "carry"), (transform, "transform")):
                layer.weight.copy_(t(enc["highway"][f"layer_{i}_{part}"]["kernel"]).T)
                layer.bias.copy_(t(enc["highway"][f"layer_{i}_{part}"]["bias"]))
        model.proj.weight.copy_(t(enc["projection"]["kernel"]).T)
        model.proj.bias.copy_(t(enc["projection"]["bias"]))
        for d in range(2):
            for k, lstm in enumerate(model.lstms[d]):
                ours = params[f"lstms_{k}"]
                lstm.weight_ih_l0.copy_(t(ours["input_kernel"][d]).reshape(P, 4 * H).T)
                lstm.weight_hh_l0.copy_(t(ours["recurrent_kernel"][d]).reshape(P, 4 * H).T)
                lstm.bias_ih_l0.copy_(t(ours["bias"][d]).reshape(4 * H))
                lstm.bias_hh_l0.zero_()
                lstm.weight_hr_l0.copy_(t(ours["projection"][d]).T)
        model.softmax.weight.copy_(t(params["softmax_kernel"]))
        model.softmax.bias.copy_(t(params["softmax_bias"]))
    ids = torch.from_numpy(batch["token_ids"].astype(np.int64))
    T = ids.shape[1]
    targets = torch.stack([torch.roll(ids, -1, 1), torch.roll(ids, 1, 1)])
    weights = torch.ones(targets.shape)
    weights[0, :, T - 1] = 0  # no next token after the last, no previous before the first
    weights[1, :, 0] = 0
    chars = torch.from_numpy(batch["char_ids"].astype(np.int64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-8, weight_decay=0.0)

    def step(_):
        opt.zero_grad(set_to_none=True)
        loss = model(chars, targets, weights)
        loss.backward()
        opt.step()
        return None, float(loss.detach())

    return step


def timed(step, state, n):
    times = []
    loss = None
    for _ in range(n):
        start = time.perf_counter()
        state, loss = step(state)
        times.append(time.perf_counter() - start)
    return state, times, loss


def main(argv=None) -> None:
    args = parse_args(argv)
    os.environ["XLA_FLAGS"] = ""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    config, params, state, jax_step, batch = build_jax(args)
    torch_step = build_torch(config, params, batch, args.threads or os.cpu_count())
    _, jax_first = jax_step(state)  # compiles; `state` was donated, take the new one below
    config, params, state, jax_step, batch = build_jax(args)
    state, _, jax_first = timed(jax_step, state, 1)
    _, _, torch_first = timed(torch_step, None, 1)
    print(f"first-step loss: bertjax {jax_first:.6f}  torch {torch_first:.6f}")
    state, _, _ = timed(jax_step, state, args.warmup)
    timed(torch_step, None, args.warmup)
    results = {"bertjax": [], "torch": []}
    for _ in range(args.rounds):
        state, times, _ = timed(jax_step, state, args.steps)
        results["bertjax"] += times
        _, times, _ = timed(torch_step, None, args.steps)
        results["torch"] += times
    tokens = args.batch_size * args.seq_length
    rates = {k: tokens / statistics.median(v) for k, v in results.items()}
    print(f"ELMo {args.size} (cells {config.cell_size}, projection {config.proj_size}, "
          f"{config.num_layers} layers, vocab {args.vocab_size}), batch {args.batch_size} x "
          f"{args.seq_length} tokens, {os.cpu_count()} CPU threads")
    for name, rate in rates.items():
        print(f"  {name:8s} {rate:10,.0f} tokens/s  (median step "
              f"{statistics.median(results[name]) * 1e3:.0f} ms)")
    print("  what differs from the same work on both sides:")
    print("    - both sides leave out two parts of ELMo's training step: dropout, and the LSTM "
          "cell and projection clipping (torch.nn.LSTM has none)")
    print("    - bertjax's step also computes the gradient norm for a finite-step guard; "
          "torch's does not")
    print(f"  ratio bertjax / torch: {rates['bertjax'] / rates['torch']:.2f}x")


if __name__ == "__main__":
    main()
