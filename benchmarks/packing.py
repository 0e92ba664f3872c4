"""Packed against unpacked BERT pretraining on real text: padding share and real tokens per second.

For each corpus (WikiText-2 valid and google-research/bert's sample text, from ../shared/data)
and sequence length, the BERT pretraining source builds its MLM + NSP rows twice, unpacked
(every instance padded to the length) and packed (`packed_sequences=K`: up to K instances per
row, bertjax/data/bert/packing.py), with the same vocabulary, seed and masking. Reported per
row: the share of padding, real tokens per row, and the train step of BERT (`--size`, float32,
dropout on, AdamW; the step the training loop jits) on those rows: steps/s and real tokens/s.
The ratio is packed over unpacked real tokens/s: the speed-up of a run on that text.

    python benchmarks/packing.py                         # BERT-mini, 128 and 512, both corpora
    python benchmarks/packing.py --quick                 # seconds: tiny, 64 only, few steps

Both sides run the same model, optimizer, batch of rows and device; what differs is only the
layout of the rows (and so the attention mask: packed rows attend within each instance, and
NSP reads every instance's [CLS]). The batches are built before the timing, so the input
pipeline is not timed (benchmarks/pretraining_pipeline.py times it).
"""

import argparse
import itertools
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

os.environ["XLA_FLAGS"] = ""  # one CPU device, whatever the shell exports for the tests
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

REPO = pathlib.Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
CORPORA = {"wikitext2": (DATA / "wikitext-2" / "valid.txt", "plain"),
           "bert_sample": (DATA / "bert-sample" / "sample_text.txt", "bert")}
PER_ROW = {64: 2, 128: 3, 512: 8}  # instances a packed row may hold, by length


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpora", default="wikitext2,bert_sample")
    p.add_argument("--lengths", default="128,512")
    p.add_argument("--size", default="mini", help="BERT size: tiny, mini, small, ...")
    p.add_argument("--batch_size", type=int, default=16, help="rows per step")
    p.add_argument("--steps", type=int, default=10, help="timed steps per repeat")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--vocab_size", type=int, default=8192)
    p.add_argument("--quick", action="store_true", help="a tiny run that checks the script")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.lengths, args.size, args.batch_size, args.steps, args.repeats = "64", "tiny", 4, 2, 1
        args.corpora, args.vocab_size = "bert_sample", 1024
    args.corpora = [c for c in args.corpora.split(",") if c]
    args.lengths = [int(n) for n in args.lengths.split(",") if n]
    return args


def rows(corpus: str, fmt: str, length: int, per_row: int, vocab: str, args) -> list[dict]:
    """The first batches of rows of the BERT source (packed when per_row > 0)."""
    from bertjax.data.bert.source import BertPretrainingSource

    source = BertPretrainingSource(corpus=corpus, corpus_format=fmt, vocab=vocab,
                                   vocab_size=args.vocab_size, packed_sequences=per_row)
    with tempfile.TemporaryDirectory() as workdir:
        source.prepare(workdir)
    batches = source.batches(0, length, args.batch_size)
    taken = list(itertools.islice(batches, 2 + args.steps * args.repeats))
    batches.close()
    return taken


def time_steps(batches: list[dict], length: int, per_row: int, vocab_size: int, args) -> dict:
    """Steps/s of the training loop's step on `batches` (the first two untimed)."""
    import jax

    from bertjax.models.bert import bert_config
    from bertjax.objectives.pretraining import bert_pretraining
    from bertjax.training.loop import build_trainer
    from bertjax.training.mesh import make_mesh
    from bertjax.training.optim import make_optimizer

    config = bert_config(args.size, vocab_size=vocab_size, max_position_embeddings=length)
    objective = bert_pretraining(config, packed_sequences=per_row)
    tx = make_optimizer("adamw", 1e-4, 10, 1000)
    trainer = build_trainer(objective, tx, make_mesh(devices=jax.devices()[:1]),
                            args.batch_size, length)
    state = trainer.init()
    for batch in batches[:2]:  # compile and warm up
        state, metrics = trainer.step(state, trainer.device_batch(batch))
    jax.block_until_ready(metrics)
    rates = []
    for r in range(args.repeats):
        chunk = batches[2 + r * args.steps:2 + (r + 1) * args.steps]
        start = time.perf_counter()
        for batch in chunk:
            state, metrics = trainer.step(state, trainer.device_batch(batch))
        jax.block_until_ready(metrics)
        rates.append(len(chunk) / (time.perf_counter() - start))
    return {"steps_per_s": statistics.median(rates), "rates": rates,
            "loss": float(metrics["loss"])}


def measure(name: str, length: int, vocab_dir: str, args) -> dict:
    path, fmt = CORPORA[name]
    per_row = PER_ROW.get(length, 3)
    out = {}
    for label, K in (("unpacked", 0), ("packed", per_row)):
        batches = rows(str(path), fmt, length, K, vocab_dir, args)
        real = sum(int(b["input_mask"].sum()) for b in batches) / (len(batches) * args.batch_size)
        instances = (sum(float(b["next_sentence_weights"].sum()) for b in batches) if K
                     else len(batches) * args.batch_size) / (len(batches) * args.batch_size)
        timing = time_steps(batches, length, K, args.vocab_size, args)
        out[label] = {"per_row": K, "padding": 1 - real / length, "real_tokens_per_row": real,
                      "instances_per_row": instances, **timing,
                      "real_tokens_per_s": timing["steps_per_s"] * args.batch_size * real}
        print(f"{name:12} {length:4d} {label:9} K={K:<2d} padding {out[label]['padding']:6.1%}  "
              f"{real:6.1f} real tokens/row  {instances:4.2f} instances/row  "
              f"{timing['steps_per_s']:6.2f} steps/s  "
              f"{out[label]['real_tokens_per_s']:9,.0f} real tokens/s", flush=True)
    ratio = out["packed"]["real_tokens_per_s"] / out["unpacked"]["real_tokens_per_s"]
    print(f"ratio packed/unpacked real tokens/s, {name} at {length}: {ratio:.2f}x", flush=True)
    return {**out, "ratio": ratio}


def main(argv=None) -> None:
    args = parse_args(argv)
    from bertjax.data.bert.source import BertPretrainingSource

    load = os.getloadavg()[0]
    if load > (os.cpu_count() or 1):
        print(f"warning: load average {load:.1f} exceeds the cores: timings are noisy",
              file=sys.stderr)
    print(f"BERT-{args.size} pretraining step, float32, batch {args.batch_size} rows, one CPU "
          f"device; {args.vocab_size}-piece WordPiece learned per corpus (load {load:.2f})")
    results = {}
    with tempfile.TemporaryDirectory() as root:
        for name in args.corpora:
            path, fmt = CORPORA[name]
            if not path.exists():
                print(f"{path} is absent: skipping {name}", file=sys.stderr)
                continue
            vocab_dir = pathlib.Path(root) / name
            learner = BertPretrainingSource(corpus=str(path), corpus_format=fmt,
                                            vocab_size=args.vocab_size)
            learner.prepare(vocab_dir)
            learner.save(vocab_dir)
            for length in args.lengths:
                results[f"{name}_{length}"] = measure(name, length, str(vocab_dir), args)
    print("what differs from the same work on both sides:")
    print("  - packed rows hold several instances: attention is masked within each instance "
          "(the unpacked side masks only padding), NSP reads K [CLS] positions per row, and "
          "the packed rows carry 0.15 L + K masked positions instead of 0.15 L")
    print("  - a packed step trains on more instances (instances/row above): the same rows, "
          "not the same instances, per step")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"results": results, "load": load,
                                                       "args": vars(args)}))


if __name__ == "__main__":
    main()
