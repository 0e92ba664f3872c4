"""Real-text BERT pretraining batches for the accelerator benchmarks, built on this host.

The GPU host has no TensorFlow, no seqio and no ../shared/data, so the rows that train on real
text take their batches from here: WikiText-2 valid through bertjax's BERT pretraining source
(a 30,522-piece WordPiece vocabulary learned from it, MLM + NSP, dynamic masking, seed 0), one
batch per (length, layout): unpacked (each instance padded to the length) and packed
(`packed_sequences` K per row), saved as `bert_{length}_{layout}.npz` with the share of
padding in the file name's companion `batches.json`.

    python benchmarks/accelerator_batches.py --out=device_batches          # 128 and 512
    python benchmarks/accelerator_batches.py --out=/tmp/b --lengths=64 --batch=8 --small

`benchmarks/accelerator_levers.py --batches=device_batches` reads them (docs/gpu.md gives the
device command that carries the folder).
"""

import argparse
import itertools
import json
import os
import pathlib
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

REPO = pathlib.Path(__file__).resolve().parents[1]
WIKITEXT = REPO.parent / "shared" / "data" / "wikitext-2" / "valid.txt"
BATCH = {64: 8, 128: 256, 512: 64}  # rows per batch: the accelerator rows' batch sizes
PER_ROW = {64: 2, 128: 3, 512: 8}  # packed_sequences by length (benchmarks/packing.py)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="directory for the .npz files")
    p.add_argument("--lengths", default="128,512")
    p.add_argument("--batch", type=int, default=None, help="rows per batch (default by length)")
    p.add_argument("--vocab_size", type=int, default=30522)
    p.add_argument("--small", action="store_true", help="a 1,024-piece vocabulary: seconds")
    args = p.parse_args(argv)
    args.lengths = [int(n) for n in args.lengths.split(",") if n]
    if args.small:
        args.vocab_size = 1024
    return args


def main(argv=None) -> None:
    import numpy as np

    from bertjax.data.bert.source import BertPretrainingSource

    args = parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {}
    with tempfile.TemporaryDirectory() as root:
        vocab_dir = pathlib.Path(root) / "vocab"
        learner = BertPretrainingSource(corpus=str(WIKITEXT), corpus_format="plain",
                                        vocab_size=args.vocab_size)
        learner.prepare(vocab_dir)
        learner.save(vocab_dir)
        for length in args.lengths:
            rows = args.batch or BATCH.get(length, 32)
            for layout, K in (("unpacked", 0), ("packed", PER_ROW.get(length, 3))):
                source = BertPretrainingSource(corpus=str(WIKITEXT), corpus_format="plain",
                                               vocab=str(vocab_dir), packed_sequences=K)
                source.prepare(root)
                batches = source.batches(0, length, rows)
                batch = next(itertools.islice(batches, 3, None))  # past the first
                batches.close()
                np.savez(out / f"bert_{length}_{layout}.npz", **batch)
                real = float(batch["input_mask"].mean())
                instances = (float(batch["next_sentence_weights"].sum()) if K else rows)
                summary[f"bert_{length}_{layout}"] = {
                    "length": length, "rows": rows, "packed_sequences": K,
                    "real_token_share": real, "instances": instances,
                    "vocab_size": source.vocab_size}
                print(f"bert_{length}_{layout}: {rows} rows, {instances:.0f} instances, "
                      f"{real:.1%} real tokens")
    (out / "batches.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
