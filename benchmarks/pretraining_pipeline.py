"""Pretraining input pipeline throughput: examples/s of `source.batches(...)`, as the loop reads it.

Rows: BERT with dynamic masking, static masking (dupe_factor passes) and, when the source has a
`cache_dir` option and apache_beam is installed, static examples read back from a seqio cache
written by `seqio.scripts.cache_tasks_main` (DirectRunner) beforehand; NSP on. With `--others`,
GPT (packed byte-level BPE) and ELMo (sentences) rows too. Corpora: the offline "stdlib" corpus
and WikiText-2 valid, read from ../shared/data (never copied into the repository).

Each row prepares its source once (the vocabulary is learned once per corpus and given to the
later rows), reads `--warmup` batches, then times `--repeats` runs of `--batches` batches of
`--batch_size` (per host) at `--seq_length`. Reported: the median examples/s over the repeats,
min and max, the spread (max - min) / median, and the load average before and after each row;
BERT rows also as a ratio to the 8,000 examples/s target at seq 128 (`ratio ROW / 8,000
examples/s target: 1.23x`). No peer runs here: the target is a fixed rate.

    python benchmarks/pretraining_pipeline.py                 # the full run (a few minutes)
    python benchmarks/pretraining_pipeline.py --quick --json=out.json     # seconds
    python benchmarks/pretraining_pipeline.py --no-others --baseline=5d7cd1a  # vs that commit

The machine may be shared: the script warns when the load average exceeds the core count, and
the spread says how far to trust a row. `--baseline=COMMIT` measures that commit's package
side by side (its tree from `git archive`, imported by a child process running this script,
once before and once after this commit's rows), so the speed-up is read from one run.
"""

import argparse
import contextlib
import itertools
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
WIKITEXT = REPO.parent / "shared" / "data" / "wikitext-2" / "valid.txt"
CORPORA = {"stdlib": ("stdlib", "bert"), "wikitext2": (str(WIKITEXT), "plain")}
TARGET = 8000  # BERT examples/s at seq 128 on a 2-core machine: the pipeline's design target


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpora", default="stdlib,wikitext2",
                   help="comma-separated: stdlib, wikitext2")
    p.add_argument("--modes", default="dynamic,static,cache",
                   help="comma-separated BERT rows: dynamic, static, cache")
    p.add_argument("--others", action=argparse.BooleanOptionalAction, default=True,
                   help="also time the GPT and ELMo sources")
    p.add_argument("--seq_length", type=int, default=128)
    p.add_argument("--batch_size", type=int, default=32, help="per-host batch")
    p.add_argument("--batches", type=int, default=100, help="timed batches per repeat")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=20, help="untimed batches first")
    p.add_argument("--dupe_factor", type=int, default=5)
    p.add_argument("--vocab_size", type=int, default=30522)
    p.add_argument("--quick", action="store_true",
                   help="seconds: stdlib only, 2 x 10 batches, 3 warm-up, no cache row")
    p.add_argument("--label", default="", help="a name for this run in the output (e.g. a commit)")
    p.add_argument("--baseline", default="",
                   help="a git commit (e.g. the parent) to time first with the same settings, "
                        "rows interleaved: prints each BERT row's speed-up over it")
    p.add_argument("--json", default=None, help="write the results to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.corpora, args.batches, args.repeats, args.warmup = "stdlib", 10, 2, 3
        args.modes = ",".join(m for m in args.modes.split(",") if m != "cache")
        args.others = False
    args.corpora = [c for c in args.corpora.split(",") if c]
    args.modes = [m for m in args.modes.split(",") if m]
    unknown = set(args.corpora) - set(CORPORA) | set(args.modes) - {"dynamic", "static", "cache"}
    if unknown:
        p.error(f"unknown corpora or modes {sorted(unknown)}")
    if min(args.batches, args.repeats, args.batch_size) < 1 or args.warmup < 0:
        p.error("need --batches, --repeats, --batch_size >= 1 and --warmup >= 0")
    return args


def load() -> float:
    return os.getloadavg()[0]


def time_batches(batches, args) -> dict:
    """Examples/s of `args.repeats` runs of `args.batches` batches after a warm-up."""
    start = time.perf_counter()
    first = next(batches)  # the pipeline starts here (planning, first blocks)
    first_s = time.perf_counter() - start
    for _ in range(args.warmup):
        next(batches)
    rates = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for batch in itertools.islice(batches, args.batches):
            assert len(batch[next(iter(batch))]) == args.batch_size
        rates.append(args.batches * args.batch_size / (time.perf_counter() - start))
    median = statistics.median(rates)
    return {"examples_per_s": median, "min": min(rates), "max": max(rates),
            "spread": (max(rates) - min(rates)) / median, "first_batch_s": first_s,
            "rates": rates, "features": sorted(first)}


def run_row(name: str, make_source, workdir: pathlib.Path, args) -> dict:
    before = load()
    start = time.perf_counter()
    source = make_source()
    source.prepare(workdir)
    prepare_s = time.perf_counter() - start
    result = time_batches(source.batches(0, args.seq_length, args.batch_size), args)
    result.update(row=name, prepare_s=prepare_s, load_before=before, load_after=load())
    cores = os.cpu_count() or 1
    busy = max(before, result["load_after"]) > cores
    result["loaded"] = busy
    print(f"{name:28s} {result['examples_per_s']:9.0f} ex/s  [{result['min']:.0f}, "
          f"{result['max']:.0f}] spread {result['spread']:5.1%}  prepare {prepare_s:5.1f} s  "
          f"first batch {result['first_batch_s']:5.2f} s  load {before:.2f} -> "
          f"{result['load_after']:.2f}{'  (LOADED)' if busy else ''}", flush=True)
    return result


def learned_vocab(source_cls, corpus, fmt, args, root: pathlib.Path, **kwargs) -> str:
    """Learn the vocabulary once (untimed) and return the directory holding it."""
    directory = root / f"vocab-{source_cls.__name__}"
    source = source_cls(corpus=corpus, corpus_format=fmt, vocab_size=args.vocab_size, **kwargs)
    source.prepare(directory)
    source.save(directory)
    return str(directory)


def write_cache(settings: dict, cache_dir: pathlib.Path) -> float:
    """Cache static examples with seqio's Beam pipeline (DirectRunner); returns the seconds."""
    from bertjax.data.bert import cache as pretraining_cache

    path = cache_dir / "settings.json"
    path.write_text(json.dumps(settings))
    name = pretraining_cache.task_name(pretraining_cache.Settings(**settings))
    command = [sys.executable, "-m", "seqio.scripts.cache_tasks_main",
               f"--module_import={pretraining_cache.__name__}", f"--tasks={name}",
               f"--output_cache_dir={cache_dir}", "--min_shards=4",
               f"--pipeline_options=--runner=DirectRunner,--bertjax_cache_settings={path}"]
    start = time.perf_counter()
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode:
        raise SystemExit(f"caching failed:\n{run.stderr[-3000:]}")
    seconds = time.perf_counter() - start
    print(f"  cached {name} with the DirectRunner in {seconds:.0f} s", flush=True)
    return seconds


def read_rates(task, groups: int) -> dict:
    """Examples/s reading the whole cache: through seqio (use_cached=True) and as raw records."""
    import tensorflow as tf

    splits = [f"group{g:05d}" for g in range(groups)]
    start, count = time.perf_counter(), 0
    for split in splits:
        dataset = task.get_dataset(split=split, use_cached=True, shuffle=False,
                                   try_in_mem_cache=False)
        for batch in dataset.batch(4096).as_numpy_iterator():
            count += len(batch["input_ids"])
    seqio_rate = count / (time.perf_counter() - start)
    files = [f for split in splits for f in tf.io.gfile.glob(f"{task.cache_dir}/{split}.tfrecord*")]
    start, records = time.perf_counter(), 0
    for batch in tf.data.TFRecordDataset(files).batch(4096).as_numpy_iterator():
        records += len(batch)
    raw_rate = records / (time.perf_counter() - start)
    size = sum(tf.io.gfile.stat(f).length for f in files)
    print(f"  cache of {count} examples, {size / count:.0f} bytes each: seqio reads "
          f"{seqio_rate:.0f} ex/s, raw TFRecords {raw_rate:.0f} records/s", flush=True)
    return {"cache_examples": count, "cache_bytes_per_example": size / count,
            "cache_read_seqio_per_s": seqio_rate, "cache_read_raw_per_s": raw_rate}


def bert_rows(corpus_key: str, args, root: pathlib.Path) -> list[dict]:
    from bertjax.data.bert.source import BertPretrainingSource

    corpus, fmt = CORPORA[corpus_key]
    vocab = learned_vocab(BertPretrainingSource, corpus, fmt, args, root)
    common = dict(corpus=corpus, corpus_format=fmt, vocab=vocab, nsp=True, seed=0)
    rows = []
    for mode in args.modes:
        options = dict(common, masking="static", dupe_factor=args.dupe_factor)
        if mode == "dynamic":
            options = dict(common, masking="dynamic")
        elif mode == "cache":
            if "cache_dir" not in BertPretrainingSource.__init__.__code__.co_varnames:
                print(f"{'bert/cache':28s} skipped: this commit has no cache_dir option")
                continue
            try:
                import apache_beam  # noqa: F401
            except ImportError:
                print(f"{'bert/cache':28s} skipped: apache_beam is not installed "
                      "(pip install -e '.[beam]')")
                continue
            cache_dir = root / f"cache-{corpus_key}"
            cache_dir.mkdir()
            settings = dict(corpus=corpus, corpus_format=fmt, seed=0, nsp=True,
                            vocab=str(pathlib.Path(vocab) / "vocab.txt"),
                            seq_length=args.seq_length, dupe_factor=args.dupe_factor)
            extra = {"cache_write_s": write_cache(settings, cache_dir)}
            options["cache_dir"] = str(cache_dir)
        name = f"bert/{mode}/{corpus_key}"
        rows.append(run_row(name, lambda o=options: BertPretrainingSource(**o),
                            root / f"work-{mode}-{corpus_key}", args))
        rows[-1].update(family="bert", mode=mode, corpus=corpus_key,
                        of_target=rows[-1]["examples_per_s"] / TARGET)
        print(f"{'':28s} ratio {name} / {TARGET:,} examples/s target: "
              f"{rows[-1]['of_target']:.2f}x", flush=True)
        if mode == "cache":
            source = BertPretrainingSource(**options)
            source.prepare(root / f"work-rates-{corpus_key}")
            rows[-1].update(extra, **read_rates(source.cache_task(args.seq_length), 1))
    return rows


def other_rows(corpus_key: str, args, root: pathlib.Path) -> list[dict]:
    from bertjax.data.elmo.source import ElmoSource
    from bertjax.data.gpt.source import LmPretrainingSource

    corpus, fmt = CORPORA[corpus_key]
    rows = []
    for family, cls, size in (("gpt", LmPretrainingSource, 8000), ("elmo", ElmoSource, 50000)):
        vocab = learned_vocab(cls, corpus, fmt, argparse.Namespace(vocab_size=size), root)
        options = dict(corpus=corpus, corpus_format=fmt, vocab=vocab)
        rows.append(run_row(f"{family}/{corpus_key}", lambda c=cls, o=options: c(**o),
                            root / f"work-{family}-{corpus_key}", args))
        rows[-1].update(family=family, mode="", corpus=corpus_key)
    return rows


def git_commit() -> str:
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              check=True, capture_output=True, text=True).stdout.strip()
    return ""


def own_options_dropped(argv: list[str], names: tuple[str, ...]) -> list[str]:
    """argv without the options `names` (as --name=value or --name value)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in names:
            skip = True
        elif not arg.startswith(tuple(f"{name}=" for name in names)):
            kept.append(arg)
    return kept


def run_baseline(commit: str, argv: list[str], root: pathlib.Path) -> dict[str, float]:
    """Examples/s of each row at `commit`: this script run on that commit's package."""
    tree = root / f"baseline-{commit}"
    tree.mkdir(exist_ok=True)
    if not (tree / "bertjax").is_dir():
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "bertjax"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    out = root / f"baseline-{commit}-{time.monotonic_ns()}.json"
    command = [sys.executable, __file__, *argv, f"--json={out}", f"--label=baseline {commit}"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    run = subprocess.run(command, env=env, text=True, capture_output=True)
    if run.returncode:
        raise SystemExit(f"baseline {commit} failed:\n{run.stderr[-3000:]}")
    print(run.stdout.rstrip(), flush=True)
    rows = json.loads(out.read_text())["rows"]
    return {row["row"]: row["examples_per_s"] for row in rows}


def compare(rows: list[dict], before: dict[str, float], after: dict[str, float],
            commit: str) -> None:
    """Each BERT row's speed-up over the baseline (the mean of its runs before and after)."""
    for row in rows:
        if row["row"] in before and row["row"] in after:
            base = (before[row["row"]] + after[row["row"]]) / 2
            row["baseline_examples_per_s"], row["speedup"] = base, row["examples_per_s"] / base
            print(f"{row['row']:28s} {row['speedup']:.2f}x {commit} ({base:.0f} ex/s: "
                  f"{before[row['row']]:.0f} before, {after[row['row']]:.0f} after)", flush=True)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    child_argv = own_options_dropped(argv, ("--baseline", "--json", "--label"))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    cores = os.cpu_count() or 1
    print(f"{platform.processor() or platform.machine()}, {cores} cores, load {load():.2f}; "
          f"seq {args.seq_length}, batch {args.batch_size}, {args.repeats} x {args.batches} "
          f"batches after {args.warmup} warm-up; commit {git_commit()} {args.label}", flush=True)
    if load() > cores:
        print(f"WARNING: load average {load():.2f} exceeds the {cores} cores: other processes "
              "share the CPU, so the rates below are low and noisy; read the spread")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bertjax-pipeline-bench-") as tmp:
        root = pathlib.Path(tmp)
        if args.baseline:
            before = run_baseline(args.baseline, child_argv, root)
        for corpus_key in args.corpora:
            if corpus_key == "wikitext2" and not WIKITEXT.is_file():
                print(f"skipping wikitext2: {WIKITEXT} is absent (it is read from ../shared)")
                continue
            rows += bert_rows(corpus_key, args, root)
            if args.others:
                rows += other_rows(corpus_key, args, root)
        if args.baseline:
            compare(rows, before, run_baseline(args.baseline, child_argv, root), args.baseline)
    if args.json:
        record = {"benchmark": "pretraining_pipeline", "commit": git_commit(),
                  "label": args.label, "cores": cores, "seq_length": args.seq_length,
                  "batch_size": args.batch_size, "batches": args.batches,
                  "repeats": args.repeats, "warmup": args.warmup,
                  "dupe_factor": args.dupe_factor, "baseline": args.baseline, "rows": rows}
        pathlib.Path(args.json).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
