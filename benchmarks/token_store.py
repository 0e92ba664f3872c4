"""Token store vs text: build speed, and a run's start-up time and peak memory on each.

A pretraining source given text reads and tokenizes the whole corpus at every start; given a
token store (`bertjax-prepare`, corpus "store:PATH") it maps the ids built once. For each
corpus size (WikiText-2 valid repeated to `--sizes` MB, real text; read from ../shared/data,
never copied into the repository) and family, this script

1. builds the store with `--workers` processes (timed: MB of text per second), then
2. starts the family's source twice in fresh processes, once on the text and once on the
   store: the seconds `prepare` takes plus the first block of examples, and the process's peak
   resident memory over that time above what it held before (Linux: VmHWM, reset through
   /proc/self/clear_refs once the imports are done).

It prints `ratio start-up store over text at N MB (FAMILY): 12.3x` (the text's seconds over
the store's: above 1 the store starts faster) and `ratio peak memory ...` likewise, and checks
that both starts give the same first examples. The vocabulary is learned once from the
unrepeated text (untimed).

    python benchmarks/token_store.py                        # 10 and 100 MB, BERT (minutes)
    python benchmarks/token_store.py --families=bert,gpt,elmo --sizes=10
    python benchmarks/token_store.py --quick                # seconds: 0.5 MB, BERT
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
WIKITEXT = REPO.parent / "shared" / "data" / "wikitext-2" / "valid.txt"
SOURCES = {"bert": ("bertjax.data.bert.source", "BertPretrainingSource", 30522),
           "gpt": ("bertjax.data.gpt.source", "LmPretrainingSource", 8192),
           "elmo": ("bertjax.data.elmo.source", "ElmoSource", 100000)}

# One start of a source in a fresh process: JSON of its seconds and memory on stdout.
START = """
import importlib, json, sys, time
module, name, corpus, vocab, workdir = sys.argv[1:6]
cls = getattr(importlib.import_module(module), name)
import numpy as np


def status(field):  # kB
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from here
base = status("VmRSS")
start = time.perf_counter()
source = cls(corpus=corpus, vocab=vocab) if vocab else cls(corpus=corpus)
source.prepare(workdir)
block = next(source.example_blocks(128, 32, 0, 0, 1))
seconds = time.perf_counter() - start
peak = status("VmHWM")
digest = {k: float(np.asarray(v, np.float64).sum()) for k, v in sorted(block.items())}
print(json.dumps({"seconds": seconds, "peak_mib": (peak - base) / 1024, "first": digest}))
"""


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="10,100", help="comma-separated corpus sizes in MB")
    p.add_argument("--families", default="bert", help="comma-separated: bert, gpt, elmo")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--shard_mb", type=float, default=32.0, help="text per shard, M characters")
    p.add_argument("--quick", action="store_true", help="seconds: 0.5 MB, BERT, 1 worker")
    p.add_argument("--json", default=None, help="write the results to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.families, args.workers, args.shard_mb = "0.5", "bert", 1, 0.2
    args.sizes = [float(s) for s in args.sizes.split(",") if s]
    args.families = [f for f in args.families.split(",") if f]
    if set(args.families) - set(SOURCES) or not args.sizes or min(args.sizes) <= 0:
        p.error(f"--families are {', '.join(SOURCES)}; --sizes positive MB")
    if args.workers < 1 or args.shard_mb <= 0:
        p.error("need --workers >= 1 and --shard_mb > 0")
    return args


def repeated_text(megabytes: float, path: pathlib.Path) -> pathlib.Path:
    """WikiText-2 valid repeated (whole paragraphs) to at least `megabytes` MB."""
    text = WIKITEXT.read_text(encoding="utf-8")
    target, written = megabytes * 1e6, 0
    with path.open("w", encoding="utf-8") as f:
        while written < target:
            for paragraph in text.split("\n \n"):
                f.write(paragraph + "\n \n")
                written += len(paragraph.encode("utf-8")) + 3
                if written >= target:
                    break
    return path


def start(family: str, corpus: str, vocab: str, workdir: pathlib.Path) -> dict:
    module, name, _ = SOURCES[family]
    env = dict(os.environ, PYTHONPATH=str(REPO), XLA_FLAGS="", JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", START, module, name, corpus, vocab,
                             str(workdir)], cwd=REPO, env=env, capture_output=True, text=True,
                            check=False)
    if result.returncode:
        raise SystemExit(f"a start on {corpus} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def learned_vocab(family: str, root: pathlib.Path) -> str:
    import importlib

    module, name, size = SOURCES[family]
    source = getattr(importlib.import_module(module), name)(corpus=str(WIKITEXT),
                                                            vocab_size=size)
    directory = root / f"vocab-{family}"
    source.prepare(directory)
    source.save(directory)
    return str(directory)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not WIKITEXT.is_file():
        print(f"token_store.py: {WIKITEXT} is absent: run beside ../shared", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    from bertjax.data.store.build import build

    rows = []
    with tempfile.TemporaryDirectory(prefix="bertjax-token-store-") as tmp:
        root = pathlib.Path(tmp)
        vocabs = {family: learned_vocab(family, root) for family in args.families}
        for size in args.sizes:
            corpus = repeated_text(size, root / f"corpus-{size:g}MB.txt")
            megabytes = corpus.stat().st_size / 1e6
            for family in args.families:
                out = root / f"store-{family}-{size:g}"
                began = time.perf_counter()
                build(family, str(corpus), vocabs[family], out, workers=args.workers,
                      shard_chars=int(args.shard_mb * 1e6))
                build_s = time.perf_counter() - began
                text = start(family, str(corpus), vocabs[family], root / "run-text")
                store = start(family, f"store:{out}", "", root / "run-store")
                same = text["first"] == store["first"]
                row = {"family": family, "mb": megabytes, "build_s": build_s,
                       "build_mb_per_s": megabytes / build_s, "workers": args.workers,
                       "text": text, "store": store, "same_first_examples": same}
                rows.append(row)
                label = f"at {size:g} MB ({family})"
                print(f"{family} {megabytes:.1f} MB: build {build_s:.1f} s "
                      f"({row['build_mb_per_s']:.2f} MB/s, {args.workers} workers); start-up "
                      f"text {text['seconds']:.2f} s / store {store['seconds']:.2f} s; peak "
                      f"memory text {text['peak_mib']:.0f} MiB / store {store['peak_mib']:.0f} "
                      f"MiB; same first examples: {same}", flush=True)
                print(f"ratio start-up store over text {label}: "
                      f"{text['seconds'] / store['seconds']:.2f}x")
                print(f"ratio peak memory store over text {label}: "
                      f"{max(text['peak_mib'], 1) / max(store['peak_mib'], 1):.2f}x")
                if not same:
                    print(f"token_store.py: the store's first examples differ ({label})",
                          file=sys.stderr)
                    return 1
    print("what differs from the same work on both sides:")
    print("- the store's build is timed once, apart; the text side tokenizes at every start")
    print("- peak memory is above what each process held after its imports, up to its first "
          "examples")
    print("- the build's MB/s includes starting its worker processes (seconds each: "
          "TensorFlow's import)")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
