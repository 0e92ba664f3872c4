"""The small-budget BERT pretraining levers, each toggled from one baseline at a fixed budget:
the held-out masked-LM loss and accuracy each run ends at.

    python benchmarks/pretraining_levers.py                      # every lever, 300 steps
    python benchmarks/pretraining_levers.py --levers=pre_ln,no_bias --steps=100
    python benchmarks/pretraining_levers.py --seeds=3 --pick=packed,dropout_0   # the pick

The baseline is configs/experiments/bert_agnews_cpu.gin at 128 tokens a row and 32 rows a
step: BERT-tiny, masked LM without NSP, AdamW at 3e-3 with a linear warmup over the
experiment's 100 steps and a linear decay to 0 at the last step. Each lever adds its gin
bindings (LEVERS); `--pick` names the levers of the recipe (configs/runs/
pretrain_budget.gin), which then runs with `--seeds` seeds beside the baseline. The budget
is a number of steps of the same shape (32 x 128 tokens), so every row does the same work
whatever else runs on the machine; a lever that changes the
shape says how it keeps the budget.

Corpus: AG News's unlabelled news (`../shared/data/agnews/unlabelled.txt`, or `--corpus` with
one text item a line), every 20th item held out and never trained on (the families study's
split, scripts/families_study/data.py). The score is bertjax.analysis.heldout's: 64 batches
of 32 held-out instances masked with a fixed seed, so every run with the same vocabulary is
scored on the same targets. Runs are bertjax-train processes under `--root`; a finished run
is not rerun, so an interrupted sweep resumes. The table goes to `<root>/levers.md`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from families_study.data import split_corpus  # noqa: E402

CORPUS = REPO.parent / "shared" / "data" / "agnews" / "unlabelled.txt"
EXPERIMENT = "configs/experiments/bert_agnews_cpu.gin"
BASELINE = ("SEQ_LENGTH=128", "BATCH_SIZE=32")
# name: (what it changes, gin bindings on top of the baseline). NUM_STEPS is set per run.
LEVERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "baseline": ("post-LN, biases, dropout 0.1, warmup 100 steps, 32 x 128 unpacked, 4,096 pieces",
                 ()),
    "pre_ln": ("pre-LN blocks (a final LayerNorm after the stack)",
               ("bert_config.pre_layer_norm=True",)),
    "no_bias": ("no biases in Dense layers and attention projections",
                ("bert_config.use_bias=False",)),
    "dropout_0": ("dropout 0 (embeddings, residuals, attention)",
                  ("bert_config.dropout_rate=0.0", "bert_config.attention_dropout_rate=0.0")),
    "warmup_50": ("one-cycle triangle: warmup half the budget, then linear decay to 0",
                  ("make_optimizer.warmup_share=0.5",)),
    "peak_2x": ("peak learning rate 6e-3 (twice the baseline's)",
                ("make_optimizer.learning_rate=6e-3",)),
    "accum_2": ("64 rows a step by accumulating 2 x 32, half the steps (the same tokens)",
                ("BATCH_SIZE=64", "train.accum_steps=2")),
    "seq_90_10": ("90% of the steps at 64 tokens, the last 10% at 128 (fewer tokens)",
                  ("train.seq_phases=((0.9,64),(0.1,128))",)),
    "packed": ("up to 3 items packed in each row (more real tokens a step, no padding)",
               ("PACKED_SEQUENCES=3",)),
    "vocab_8192": ("8,192 WordPiece pieces (loss not comparable: other targets)",
                   ("VOCAB_SIZE=8192",)),
}
HELD_OUT_BATCHES = 64
UNIGRAM_DOCUMENTS = 500


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/tmp/bertjax_levers",
                        help="where the data split, the runs and the table go")
    parser.add_argument("--corpus", default=str(CORPUS),
                        help="plain text, one item (document) a line")
    parser.add_argument("--steps", type=int, default=300, help="the budget, in 32 x 128 steps")
    parser.add_argument("--levers", default=",".join(LEVERS),
                        help="comma-separated names of LEVERS to toggle one at a time")
    parser.add_argument("--pick", default="",
                        help="comma-separated levers together: the recipe run with --seeds")
    parser.add_argument("--seeds", type=int, default=1, help="seeds of the baseline and pick")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time")
    return parser.parse_args(argv)


def prepare(corpus: pathlib.Path, root: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """(pretraining text, held-out text) under root/data, items as documents; beside them
    unigram.txt, the pretraining text's first UNIGRAM_DOCUMENTS items (the held-out score's
    unigram model, which the table does not show, counted on a slice to save minutes)."""
    if not corpus.is_file():
        raise SystemExit(f"{corpus} is missing: pass --corpus=FILE (one text item a line)")
    data = root / "data"
    pretrain, heldout = data / "pretrain.txt", data / "heldout.txt"
    if not (pretrain.is_file() and heldout.is_file()):
        kept, held = split_corpus(corpus.read_text(encoding="utf-8").splitlines())
        data.mkdir(parents=True, exist_ok=True)
        pretrain.write_text(kept, encoding="utf-8")
        heldout.write_text(held, encoding="utf-8")
        items = kept.split("\n\n")[:UNIGRAM_DOCUMENTS]
        (data / "unigram.txt").write_text("\n\n".join(items), encoding="utf-8")
    return pretrain, heldout


def bindings(levers: list[str], steps: int, seed: int, pretrain: pathlib.Path,
             vocab: pathlib.Path) -> list[str]:
    """The gin bindings of a run with `levers` on: halves the steps when it accumulates, and
    reads the baseline's vocabulary (`vocab`, once learned) unless it sets its own size."""
    chosen = [b for name in levers for b in LEVERS[name][1]]
    accum = next((int(b.split("=")[1]) for b in chosen if b.startswith("train.accum_steps")), 1)
    shared = ([f"bert_pretraining_source.vocab='{vocab}'"]
              if vocab.is_file() and not any(b.startswith("VOCAB_SIZE") for b in chosen) else [])
    return [*BASELINE, *chosen, *shared, f"NUM_STEPS={steps // accum}", f"SEED={seed}",
            f"CORPUS='{pretrain}'"]


def run_one(name: str, levers: list[str], seed: int, args: argparse.Namespace,
            data: tuple[pathlib.Path, pathlib.Path]) -> dict:
    """Train (unless done) and score one run; its record (also written to result.json)."""
    root = pathlib.Path(args.root)
    workdir = root / "runs" / f"{name}_s{seed}_{args.steps}"
    result = workdir / "result.json"
    if result.is_file():
        return json.loads(result.read_text(encoding="utf-8"))
    pretrain, heldout = data
    gin = bindings(levers, args.steps, seed, pretrain, root / "vocab.txt")
    command = [sys.executable, "-m", "bertjax.cli.train", f"--workdir={workdir}",
               f"--gin_file={EXPERIMENT}", *(f"--gin.{b}" for b in gin), "--noprogress"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.setdefault("JAX_COMPILATION_CACHE_DIR", str(root / "jax_cache"))
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"run {workdir.name} failed: {tail}")
    score = subprocess.run(
        [sys.executable, "-c", "import json, sys; from bertjax.analysis.heldout import held_out; "
         "print(json.dumps(held_out(*sys.argv[1:5], batches=int(sys.argv[5])).as_dict()))",
         str(workdir), "bert", str(heldout), str(pretrain.parent / "unigram.txt"),
         str(HELD_OUT_BATCHES)],
        cwd=REPO, env=env, capture_output=True, text=True, check=True)
    record = {"name": name, "levers": levers, "seed": seed, "bindings": gin,
              "train_seconds": round(seconds, 1),
              **json.loads(score.stdout.strip().splitlines()[-1])}
    result.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    if name == "baseline" and not (root / "vocab.txt").is_file():
        shutil.copy(workdir / "vocab.txt", root / "vocab.txt")  # every later run reads it
    return record


def table(records: list[dict], baseline: float | None) -> str:
    """A markdown table: one row per run name (mean and spread over its seeds)."""
    lines = ["| run | what it changes | seeds | held-out MLM loss | vs baseline | "
             "held-out MLM accuracy | train s |", "|---|---|---|---|---|---|---|"]
    by_name: dict[str, list[dict]] = {}
    for record in records:
        by_name.setdefault(record["name"], []).append(record)
    for name, runs in by_name.items():
        losses = [r["loss"] for r in runs]
        accs = [r["accuracy"] for r in runs]
        spread = f" ± {statistics.stdev(losses):.3f}" if len(runs) > 1 else ""
        delta = f"{statistics.mean(losses) - baseline:+.3f}" if baseline is not None else ""
        what = ("the pick: " + ", ".join(runs[0]["levers"]) if name == "pick"
                else LEVERS[name][0])
        lines.append(f"| {name} | {what} | {len(runs)} | {statistics.mean(losses):.3f}"
                     f"{spread} | {delta} | {statistics.mean(accs):.3f} | "
                     f"{statistics.mean(r['train_seconds'] for r in runs):.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = pathlib.Path(args.root)
    data = prepare(pathlib.Path(args.corpus), root)
    wanted = [n for n in args.levers.split(",") if n]
    pick = [n for n in args.pick.split(",") if n]
    for name in [*wanted, *pick]:
        if name not in LEVERS:
            raise SystemExit(f"unknown lever {name!r}: choose among {', '.join(LEVERS)}")
    jobs = [(n, [] if n == "baseline" else [n], 0) for n in wanted]
    if pick:
        jobs += [("baseline", [], s) for s in range(1, args.seeds)]
        jobs += [("pick", pick, s) for s in range(args.seeds)]
    if ("baseline", [], 0) in jobs:
        jobs.remove(("baseline", [], 0))
    run_one("baseline", [], 0, args, data)  # first: it learns the vocabulary the others read
    jobs.insert(0, ("baseline", [], 0))
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        records = list(pool.map(lambda job: run_one(*job, args, data), jobs))
    records.sort(key=lambda r: (r["name"] != "baseline", r["name"] == "pick"))
    base = [r["loss"] for r in records if r["name"] == "baseline"]
    text = (f"{args.steps} steps of 32 x 128 tokens, {len(jobs)} runs, "
            f"{time.strftime('%Y-%m-%d', time.gmtime())}\n\n"
            + table(records, statistics.mean(base) if base else None))
    (root / "levers.md").write_text(text, encoding="utf-8")
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
