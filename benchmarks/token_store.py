"""Token store vs text: build speed, resume after a kill, and a run's start-up and memory.

A pretraining source given text reads and tokenizes the whole corpus at every start; given a
token store (`bertjax-prepare`, corpus "store:PATH") it maps the ids built once. For each
corpus size (WikiText-2 valid repeated to `--sizes` MB, real text; read from ../shared/data,
never copied into the repository) and family, this script

1. builds the store with each of `--workers` (a list: 1,2 by default), timed: MB of text per
   second of WordPiece (BERT), byte-level BPE (GPT) or words (ELMo); every worker count must
   give the same bytes;
2. starts a run's source in fresh processes on the store (`--starts` of them, the median
   reported; and, up to `--text_up_to` MB, once on the text): the seconds from the
   process's start (Python, imports) to its first batch of `seq 128 x batch 32` through the
   source's tf.data pipeline (the first step's batch), the seconds of `prepare` plus that
   batch alone, and the process's peak resident memory above what it held once its imports
   were done (Linux: VmHWM, reset through /proc/self/clear_refs). The builds' written
   pages are flushed first (os.sync): a 1 GB build leaves about a GB of dirty pages whose
   writeback, in the kernel's threads, would otherwise compete with the starts that follow;
3. at the largest size, kills a build (`bertjax-prepare`, kill -9) once half of its shards are
   listed, reruns it to the end, and compares the store byte for byte with the uninterrupted
   build (the seconds of the resumed run too).

It prints `ratio start-up store over text at N MB (FAMILY): 12.3x` (the text's seconds over
the store's: above 1 the store starts faster) and `ratio peak memory ...` likewise where the
text ran, and per family across sizes `ratio start-up store largest over smallest (FAMILY)`
(the target: within 1.1x) and `store peak memory growth smallest to largest (FAMILY): N MiB`
(the target: at most 100 MiB). The vocabulary is learned once from the unrepeated text
(untimed). Timed sizes take a quiet machine: the 1000 MB builds take minutes per family and
worker count.

    python benchmarks/token_store.py --families=bert,gpt,elmo --sizes=10,100,1000
    python benchmarks/token_store.py --families=bert --sizes=10 --workers=1
    python benchmarks/token_store.py --quick                # seconds: 0.5 MB, BERT
"""

import argparse
import json
import os
import pathlib
import shutil
import signal
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
import time
began = time.time()  # the wall clock, compared with the parent's launch time
import importlib, json, sys
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
batch = next(iter(source.batches(0, 128, 32)))
seconds = time.perf_counter() - start
ready = time.time()
peak = status("VmHWM")
digest = {k: float(np.asarray(v, np.float64).sum()) for k, v in sorted(batch.items())}
print(json.dumps({"seconds": seconds, "ready": ready, "imports_s": ready - began - seconds,
                  "peak_mib": (peak - base) / 1024, "first": digest}))
"""


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="10,100", help="comma-separated corpus sizes in MB "
                   "(the issue's targets: 10,100,1000)")
    p.add_argument("--families", default="bert", help="comma-separated: bert, gpt, elmo")
    p.add_argument("--workers", default="1,2", help="comma-separated worker counts to build with")
    p.add_argument("--shard_mb", type=float, default=32.0, help="text per shard, M characters")
    p.add_argument("--text_up_to", type=float, default=100.0,
                   help="start on the text too up to this size in MB (at 1 GB a start on the "
                        "text takes some 12 minutes and 5 GB)")
    p.add_argument("--starts", type=int, default=5,
                   help="fresh-process starts on each store; the median is reported")
    p.add_argument("--no_resume", action="store_true", help="skip the kill-and-resume build")
    p.add_argument("--quick", action="store_true", help="seconds: 0.5 MB, BERT, 1 worker")
    p.add_argument("--json", default=None, help="write the results to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.families, args.workers, args.shard_mb = "0.5", "bert", "1", 0.02
    args.sizes = sorted(float(s) for s in args.sizes.split(",") if s)
    args.families = [f for f in args.families.split(",") if f]
    try:
        args.workers = [int(w) for w in str(args.workers).split(",") if w]
    except ValueError:
        p.error("--workers is a comma-separated list of counts, e.g. 1,2")
    if set(args.families) - set(SOURCES) or not args.sizes or min(args.sizes) <= 0:
        p.error(f"--families are {', '.join(SOURCES)}; --sizes positive MB")
    if not args.workers or min(args.workers) < 1 or args.shard_mb <= 0 or args.starts < 1:
        p.error("need --workers >= 1, --shard_mb > 0 and --starts >= 1")
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


def median_start(family: str, corpus: str, vocab: str, workdir: pathlib.Path, starts: int
                 ) -> dict:
    """`start` `starts` times: the start whose seconds from the process's start are the median,
    with every start's in `process_to_batch_all`. One start's imports vary by a few tenths of
    a second on a 2-core host (more after a build has filled the page cache with corpus and
    store), which is as much as the corpus-size effect measured here."""
    runs = sorted((start(family, corpus, vocab, workdir) for _ in range(starts)),
                  key=lambda r: r["process_to_batch_s"])
    median = dict(runs[len(runs) // 2])
    median["process_to_batch_all"] = [round(r["process_to_batch_s"], 3) for r in runs]
    median["same_first_over_starts"] = all(r["first"] == runs[0]["first"] for r in runs)
    return median


def start(family: str, corpus: str, vocab: str, workdir: pathlib.Path) -> dict:
    module, name, _ = SOURCES[family]
    env = dict(os.environ, PYTHONPATH=str(REPO), XLA_FLAGS="", JAX_PLATFORMS="cpu")
    launched = time.time()
    result = subprocess.run([sys.executable, "-c", START, module, name, corpus, vocab,
                             str(workdir)], cwd=REPO, env=env, capture_output=True, text=True,
                            check=False)
    if result.returncode:
        raise SystemExit(f"a start on {corpus} failed:\n{result.stderr[-3000:]}")
    row = json.loads(result.stdout.strip().splitlines()[-1])
    row["process_to_batch_s"] = row.pop("ready") - launched
    return row


def contents(directory: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def kill_and_resume(family: str, corpus: pathlib.Path, vocab: str, out: pathlib.Path,
                    workers: int, shard_mb: float, reference: pathlib.Path) -> dict:
    """A real bertjax-prepare killed (-9) once half its shards are listed, then rerun to the
    end: whether the store is the uninterrupted build's bytes, and the rerun's seconds."""
    total = len(json.loads((reference / "manifest.json").read_text())["shards"])
    command = [sys.executable, "-m", "bertjax.cli.prepare", f"--family={family}",
               f"--corpus={corpus}", f"--vocab={vocab}", f"--out={out}",
               f"--workers={workers}", f"--shard_mb={shard_mb}"]
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
    builder = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    listed = 0
    while builder.poll() is None:
        try:
            listed = len(json.loads((out / "build.json").read_text())["shards"])
        except (OSError, ValueError, KeyError):
            listed = 0
        if listed >= max(1, total // 2):
            builder.send_signal(signal.SIGKILL)
            break
        time.sleep(0.01)
    builder.wait()
    interrupted = builder.returncode == -signal.SIGKILL and not (out / "manifest.json").exists()
    began = time.perf_counter()
    rerun = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                           check=False)
    if rerun.returncode:
        raise SystemExit(f"the resumed build failed:\n{rerun.stderr[-3000:]}")
    return {"interrupted": interrupted, "killed_at_shards": listed, "shards": total,
            "resume_s": time.perf_counter() - began,
            "identical": contents(out) == contents(reference)}


def learned_vocab(family: str, root: pathlib.Path) -> str:
    import importlib

    module, name, size = SOURCES[family]
    source = getattr(importlib.import_module(module), name)(corpus=str(WIKITEXT),
                                                            vocab_size=size)
    directory = root / f"vocab-{family}"
    source.prepare(directory)
    source.save(directory)
    return str(directory)


def build_all(family: str, corpus: pathlib.Path, vocab: str, root: pathlib.Path,
              args: argparse.Namespace, label: str) -> tuple[pathlib.Path, list[dict]]:
    """The store built with each worker count (timed); one line if their bytes differ."""
    from bertjax.data.store.build import build

    megabytes, builds, first = corpus.stat().st_size / 1e6, [], None
    for workers in args.workers:
        out = root / f"store-{label}-w{workers}"
        began = time.perf_counter()
        build(family, str(corpus), vocab, out, workers=workers,
              shard_chars=int(args.shard_mb * 1e6))
        seconds = time.perf_counter() - began
        builds.append({"workers": workers, "build_s": seconds,
                       "build_mb_per_s": megabytes / seconds})
        print(f"{label}: build {seconds:.1f} s ({megabytes / seconds:.2f} MB/s, {workers} "
              f"worker{'s' if workers > 1 else ''})", flush=True)
        if first is None:
            first = out
        elif contents(out) != contents(first):
            raise SystemExit(f"token_store.py: {workers} workers built other bytes ({label})")
    return first, builds


def main(argv=None) -> int:
    args = parse_args(argv)
    if not WIKITEXT.is_file():
        print(f"token_store.py: {WIKITEXT} is absent: run beside ../shared", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))

    rows = []
    with tempfile.TemporaryDirectory(prefix="bertjax-token-store-") as tmp:
        root = pathlib.Path(tmp)
        vocabs = {family: learned_vocab(family, root) for family in args.families}
        for size in args.sizes:
            corpus = repeated_text(size, root / f"corpus-{size:g}MB.txt")
            megabytes = corpus.stat().st_size / 1e6
            for family in args.families:
                label = f"at {size:g} MB ({family})"
                out, builds = build_all(family, corpus, vocabs[family], root, args,
                                        f"{family}-{size:g}")
                last = builds[-1]
                for path in root.glob(f"store-{family}-{size:g}-w*"):
                    if path != out:
                        shutil.rmtree(path, ignore_errors=True)  # only `out` is started on
                os.sync()  # the builds' writeback is theirs, not the starts' (see the docstring)
                store = median_start(family, f"store:{out}", "", root / "run-store",
                                     args.starts)
                row = {"family": family, "size_mb": size, "mb": megabytes, **last,
                       "builds": builds, "store": store}
                print(f"{family} {megabytes:.1f} MB: start-up on the store {store['seconds']:.2f}"
                      f" s ({store['process_to_batch_s']:.2f} s from the process's start to "
                      f"its first batch, the median of {args.starts}: "
                      f"{', '.join(f'{t:.2f}' for t in store['process_to_batch_all'])}); peak "
                      f"memory {store['peak_mib']:.0f} MiB", flush=True)
                if not store["same_first_over_starts"]:
                    print(f"token_store.py: starts on the same store gave different first "
                          f"batches ({label})", file=sys.stderr)
                    return 1
                if size <= args.text_up_to:
                    text = start(family, str(corpus), vocabs[family], root / "run-text")
                    row["text"] = text
                    row["same_first_examples"] = same = text["first"] == store["first"]
                    print(f"{family} {megabytes:.1f} MB: start-up on the text "
                          f"{text['seconds']:.2f} s, peak memory {text['peak_mib']:.0f} MiB; "
                          f"same first batch: {same}", flush=True)
                    print(f"ratio start-up store over text {label}: "
                          f"{text['seconds'] / store['seconds']:.2f}x")
                    print(f"ratio peak memory store over text {label}: "
                          f"{max(text['peak_mib'], 1) / max(store['peak_mib'], 1):.2f}x")
                    if not same:
                        print(f"token_store.py: the store's first batch differs ({label})",
                              file=sys.stderr)
                        return 1
                if size == args.sizes[-1] and not args.no_resume:
                    resumed = kill_and_resume(family, corpus, vocabs[family],
                                              root / f"killed-{family}", args.workers[-1],
                                              args.shard_mb, out)
                    row["resume"] = resumed
                    print(f"{label}: killed at {resumed['killed_at_shards']} of "
                          f"{resumed['shards']} shards (interrupted: {resumed['interrupted']}),"
                          f" resumed in {resumed['resume_s']:.1f} s; byte-identical to the "
                          f"uninterrupted build: {resumed['identical']}", flush=True)
                    if not resumed["identical"]:
                        print(f"token_store.py: the resumed store differs ({label})",
                              file=sys.stderr)
                        return 1
                rows.append(row)
                for path in root.glob(f"store-{family}-{size:g}-w*"):
                    shutil.rmtree(path, ignore_errors=True)  # 1 GB corpora: free the disk
                shutil.rmtree(root / f"killed-{family}", ignore_errors=True)
            corpus.unlink()
    for family in args.families:
        mine = [r for r in rows if r["family"] == family]
        small, large = mine[0]["store"], mine[-1]["store"]
        print(f"ratio start-up store largest over smallest ({family}): "
              f"{large['process_to_batch_s'] / small['process_to_batch_s']:.2f}x")
        print(f"store peak memory growth smallest to largest ({family}): "
              f"{large['peak_mib'] - small['peak_mib']:.0f} MiB")
    print("what differs from the same work on both sides:")
    print("- the store's build is timed once, apart; the text side tokenizes at every start")
    print("- start-up from the process's start includes Python's and the imports' seconds, the "
          "same on both sides")
    print("- peak memory is above what each process held after its imports, up to its first "
          "batch")
    print("- the build's MB/s includes starting its worker processes (seconds each: "
          "TensorFlow's import)")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
