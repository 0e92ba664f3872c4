"""Time to quality: bertjax's pretraining against transformers' own recipe, end to end.

Each row pretrains from scratch on the same corpus, in its own fresh process, for the same
wall-clock budget (from the process's first line: imports, tokenizing the corpus, building the
model, compiling and training; saving checkpoints is taken off the clock on both sides), and
saves checkpoints at evenly spaced points of the budget. One scorer, bertjax's
(benchmarks/time_to_quality_score.py), then scores every checkpoint of every row on the same
held-out part of the corpus (never trained on) with the same fixed masks.

    XLA_FLAGS= python benchmarks/time_to_quality.py                  # 600 s a row, 2 cores
    python benchmarks/time_to_quality.py --corpus=../shared/data/wikitext-2/valid.txt
    python benchmarks/time_to_quality.py --quick                     # minutes: a smoke test

Rows: `transformers run_mlm` (benchmarks/peers/hf_mlm.py), `bertjax, same recipe` (the same
shape, sequence length, batch, optimizer, schedule and masking through bertjax-train's gin),
`bertjax, best small-budget recipe` (`--best_gin`, skipped when absent), and GPT-2 the same:
`transformers run_clm` (benchmarks/peers/hf_clm.py) against `bertjax GPT-2, same recipe`.
Output: a CSV (row, wall_s, step, heldout_loss, heldout_acc), one plot of held-out loss against
wall time, the time each row takes to reach its peer's final held-out loss (interpolated
linearly between checkpoints), the ratios (peer time over bertjax time; a row that never reaches
it prints 0.00x) and where each row's time went.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import time_to_quality_score as scorer

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
PEERS = HERE / "peers"
DEFAULT_CORPUS = REPO.parent / "shared" / "data" / "agnews" / "unlabelled.txt"
DEFAULT_BEST_GIN = REPO / "configs" / "runs" / "pretrain_budget.gin"
DEFAULT_PLOT = REPO / "docs" / "time_to_quality" / "curves.png"
ROWS = ("run_mlm", "same_recipe", "best_recipe", "run_clm", "gpt_same_recipe")
DEVICE_DEFAULTS = {  # flags left unset take these
    "cpu": dict(budget_s=600.0, checkpoints=6, bert_size="mini", gpt_size="gpt2_tiny",
                vocab_size=4096, batch_size=32, learning_rate=1e-3, warmup_steps=0, max_steps=2000),
    # BERT-base and GPT-2 124M for 3 minutes a side on one GPU: a larger batch, a lower peak
    # with a short warmup (the CPU recipe's 1e-3 from step 0 is for 4-layer models), and 4
    # checkpoints (a BERT-base train state is 1.3 GB to save and score)
    "gpu": dict(budget_s=180.0, checkpoints=4, bert_size="base", gpt_size="gpt2_small",
                vocab_size=30522, batch_size=64, learning_rate=5e-4, warmup_steps=200,
                max_steps=4000),
}
PREPARED = "prepared.json"  # what --prepare_only writes beside the files it lists


@dataclasses.dataclass(frozen=True)
class Row:
    key: str  # one of ROWS
    name: str  # as the outputs print it
    family: str  # "bert" or "gpt"
    peer: str  # the key of the row it is measured against (itself for a peer)
    command: tuple[str, ...]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default=str(DEFAULT_CORPUS),
                   help="plain text or google-research/bert's format (one sentence a line, "
                        "blank lines between documents)")
    p.add_argument("--corpus_format", default="bert", choices=("bert", "plain"),
                   help="how bertjax reads the corpus (transformers reads it line by line)")
    p.add_argument("--heldout_share", type=float, default=0.05,
                   help="the corpus's last share of lines, never trained on")
    p.add_argument("--max_lines", type=int, default=0, help="use the corpus's first N lines")
    p.add_argument("--device", default="cpu", choices=sorted(DEVICE_DEFAULTS),
                   help="cpu: float32 on the host's cores; gpu: one GPU, bfloat16 compute on "
                        "both sides (transformers' bf16 mixed precision), BERT-base and GPT-2 "
                        "124M; the flags below default per device")
    p.add_argument("--budget_s", type=float, default=None, help="wall-clock seconds per row")
    p.add_argument("--checkpoints", type=int, default=None, help="checkpoints per row")
    p.add_argument("--bert_size", default=None, help="bert_config.size of both BERT sides")
    p.add_argument("--gpt_size", default=None, help="gpt_config.size of both GPT sides")
    p.add_argument("--vocab_size", type=int, default=None,
                   help="WordPiece and BPE vocabularies, learned by bertjax, used by all rows")
    p.add_argument("--seq_length", type=int, default=128)
    p.add_argument("--batch_size", type=int, default=None)
    p.add_argument("--learning_rate", type=float, default=None)
    p.add_argument("--warmup_steps", type=int, default=None,
                   help="the linear schedule's warmup (same-recipe rows and peers)")
    p.add_argument("--max_steps", type=int, default=None,
                   help="the linear schedule's length (same-recipe rows and peers)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--best_gin", default=str(DEFAULT_BEST_GIN),
                   help="the small-budget recipe (a configs/runs/ file); its row is skipped "
                        "when the file is absent")
    p.add_argument("--best_steps", type=int, default=0,
                   help="the best recipe's schedule length when its file leaves NUM_STEPS "
                        "open (default: the steps the same-recipe row made in the budget, so "
                        "its schedule ends with the budget; --max_steps if under 10)")
    p.add_argument("--bertjax_binding", action="append", default=[],
                   help="a gin binding added to every bertjax row, after the row's own (e.g. "
                        "\"bert_config.attention_impl='xla'\"); repeatable")
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated: {', '.join(ROWS)}")
    p.add_argument("--eval_rows", type=int, default=256, help="held-out rows scored")
    p.add_argument("--out", default="", help="a directory for the runs (default: a temporary one)")
    p.add_argument("--csv", default="", help="the CSV (default: OUT/time_to_quality.csv)")
    p.add_argument("--plot", default="",
                   help=f"the plot (default: {DEFAULT_PLOT.relative_to(REPO)}; OUT/curves.png "
                        "with --quick)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke test: tiny models, 2,000 lines, 45 s a row; measures nothing")
    p.add_argument("--prepare_only", action="store_true",
                   help="write what the rows read into --out (the split corpus, vocabularies, "
                        "transformers' configs and tokenizers, bertjax's token stores) and "
                        "stop: for a host without TensorFlow (the GPU host), which then runs "
                        "the rows with --prepared=OUT")
    p.add_argument("--prepared", default="",
                   help="a directory --prepare_only wrote (inside the repository, so it "
                        "travels with it): run the rows from it; bertjax's rows read its token "
                        "stores, and its sizes and sequence length are the run's")
    args = p.parse_args(argv)
    for name, value in DEVICE_DEFAULTS[args.device].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.quick:
        args.budget_s, args.checkpoints, args.max_lines = 45.0, 2, args.max_lines or 2000
        args.bert_size, args.batch_size, args.max_steps = "tiny", 8, 200
        args.vocab_size, args.eval_rows = 1024, 32
    args.rows = [r for r in args.rows.split(",") if r]
    unknown = sorted(set(args.rows) - set(ROWS))
    if unknown:
        p.error(f"--rows names {', '.join(unknown)}: choose from {', '.join(ROWS)}")
    if args.prepare_only and (args.prepared or not args.out):
        p.error("--prepare_only writes into a new --out (inside the repository, so it travels "
                "to the GPU host) and takes no --prepared")
    if not args.prepared and not pathlib.Path(args.corpus).is_file():
        p.error(f"--corpus={args.corpus}: no such file; pass a text file (the default is "
                "../shared/data/agnews/unlabelled.txt, beside the repository)")
    missing = [m for m in ("torch", "transformers", "accelerate")
               if importlib.util.find_spec(m) is None]
    if missing and {"run_mlm", "run_clm"} & set(args.rows):
        p.error(f"the transformers rows need {', '.join(missing)}: pip install -e .[bench] "
                "(or leave them out with --rows)")
    if not 0 < args.heldout_share < 0.5:
        p.error(f"--heldout_share={args.heldout_share}: pass a share between 0 and 0.5")
    return args


# ---------------------------------------------------------------- the corpus and vocabularies


def split_corpus(corpus: pathlib.Path, share: float, max_lines: int, out: pathlib.Path
                 ) -> tuple[pathlib.Path, list[str]]:
    """(the training file, the held-out lines): the last `share` of the lines held out, cut at
    a blank line (a document boundary) where the corpus has one near there.

    Every line is stripped of its surrounding whitespace, so all rows train on the same text
    and the held-out lines are that text too: bertjax's corpus reader strips lines, run_clm
    reads them verbatim, and unstripped held-out text would be full of tokens only one side
    trained on (" \n" at every line with trailing spaces; one line in eight of AG News)."""
    lines = [line.strip() for line in corpus.read_text(encoding="utf-8").splitlines()]
    if max_lines:
        lines = lines[:max_lines]
    cut = int(len(lines) * (1 - share))
    blank = next((i for i in range(cut, len(lines)) if not lines[i].strip()), None)
    cut = blank if blank is not None and blank - cut < len(lines) * share / 2 else cut
    train = out / "train.txt"
    train.write_text("\n".join(lines[:cut]) + "\n", encoding="utf-8")
    return train, [line for line in lines[cut:] if line.strip()]


def learn_vocabularies(train: pathlib.Path, vocab_size: int, seq_length: int,
                       out: pathlib.Path) -> dict[str, pathlib.Path]:
    """bertjax's WordPiece and byte-level BPE learned once from the training file (untimed,
    outside every row) and transformers' tokenizer files for them."""
    from bertjax.convert import hf_tokenizer  # noqa: PLC0415
    from bertjax.tokenizers.bpe import learn_bpe  # noqa: PLC0415
    from bertjax.tokenizers.wordpiece import learn_vocabulary, write_vocab  # noqa: PLC0415

    lines = [line for line in train.read_text(encoding="utf-8").splitlines() if line.strip()]
    paths = {name: out / name for name in ("wordpiece", "bpe", "hf_wordpiece", "hf_bpe")}
    for path in paths.values():
        path.mkdir(parents=True, exist_ok=True)
    write_vocab(learn_vocabulary(lines, vocab_size, lower_case=True),
                paths["wordpiece"] / "vocab.txt")
    learn_bpe((line + "\n" for line in lines), vocab_size).save(paths["bpe"])
    hf_tokenizer.write_wordpiece(paths["hf_wordpiece"], paths["wordpiece"] / "vocab.txt",
                                 lower_case=True, max_length=seq_length)
    hf_tokenizer.write_bpe(paths["hf_bpe"], paths["bpe"] / "vocab.json",
                           paths["bpe"] / "merges.txt", max_length=seq_length)
    return paths


def hf_configs(args: argparse.Namespace, vocab: dict[str, pathlib.Path], out: pathlib.Path
               ) -> dict[str, pathlib.Path]:
    """transformers config.json files of the same shapes as bertjax's sides."""
    from bertjax.convert import hf_bert, hf_gpt  # noqa: PLC0415
    from bertjax.models.bert import bert_config  # noqa: PLC0415
    from bertjax.models.gpt import gpt_config  # noqa: PLC0415

    bert_vocab = len((vocab["wordpiece"] / "vocab.txt").read_text(encoding="utf-8").split("\n"))
    bert_vocab -= 1  # the file ends with a newline
    gpt_vocab = len(json.loads((vocab["bpe"] / "vocab.json").read_text(encoding="utf-8")))
    bert = bert_config(args.bert_size, vocab_size=bert_vocab,
                       max_position_embeddings=args.seq_length)
    gpt = gpt_config(args.gpt_size, vocab_size=gpt_vocab, max_position_embeddings=args.seq_length)
    paths = {"bert": out / "hf_bert_config.json", "gpt": out / "hf_gpt_config.json",
             "sizes": out / "vocab_sizes.json"}
    paths["bert"].write_text(json.dumps(hf_bert.hf_config(bert, "BertForMaskedLM")))
    paths["gpt"].write_text(json.dumps(hf_gpt.hf_config(gpt)))
    paths["sizes"].write_text(json.dumps({"bert": bert_vocab, "gpt": gpt_vocab}))
    return paths


def prepare(args: argparse.Namespace, out: pathlib.Path
            ) -> tuple[dict[str, pathlib.Path], list[str]]:
    """(the files the rows read, the held-out lines): the corpus split, the vocabularies
    learned, transformers' configs written, all in `out` (untimed, outside every row)."""
    train, heldout_lines = split_corpus(pathlib.Path(args.corpus), args.heldout_share,
                                        args.max_lines, out)
    paths = {"train": train, **learn_vocabularies(train, args.vocab_size, args.seq_length, out)}
    paths.update(hf_configs(args, paths, out))
    return paths, heldout_lines


SETTINGS = ("corpus", "corpus_format", "heldout_share", "max_lines", "bert_size", "gpt_size",
            "vocab_size", "seq_length")  # what a prepared directory fixes for its rows


def write_prepared(args: argparse.Namespace, paths: dict[str, pathlib.Path],
                   heldout_lines: list[str], out: pathlib.Path) -> None:
    """Add to `out` what a host without TensorFlow needs to run the rows: bertjax's token
    stores of the training text (bertjax-prepare's build), the held-out lines and
    prepared.json (the files, relative to `out`, and the SETTINGS they were made with)."""
    from bertjax.data.store import build  # noqa: PLC0415

    for family, vocab in (("bert", paths["wordpiece"]), ("gpt", paths["bpe"])):
        paths[f"store_{family}"] = out / f"store_{family}"
        build.build(family, str(paths["train"]), str(vocab), paths[f"store_{family}"],
                    corpus_format=args.corpus_format)
    paths["heldout"] = out / "heldout.txt"
    paths["heldout"].write_text("\n".join(heldout_lines) + "\n", encoding="utf-8")
    record = {"files": {k: str(v.resolve().relative_to(out.resolve())) for k, v in paths.items()},
              "settings": {name: getattr(args, name) for name in SETTINGS}}
    (out / PREPARED).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"prepared in {out}: {len(heldout_lines)} held-out lines, token stores of "
          f"{paths['train'].name}; run the rows with --prepared={out} --device={args.device}")


def load_prepared(args: argparse.Namespace) -> tuple[dict[str, pathlib.Path], list[str]]:
    """The files and held-out lines of a --prepare_only directory; its SETTINGS become the
    run's."""
    directory = pathlib.Path(args.prepared)
    try:
        record = json.loads((directory / PREPARED).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise SystemExit(f"time_to_quality: error: --prepared={directory}: no readable "
                         f"{PREPARED} ({err}): pass a directory --prepare_only wrote") from None
    for name, value in record["settings"].items():
        setattr(args, name, value)
    paths = {key: directory / name for key, name in record["files"].items()}
    lines = paths["heldout"].read_text(encoding="utf-8").splitlines()
    return paths, [line for line in lines if line.strip()]


# ---------------------------------------------------------------- the rows


def _peer(script: str, args: argparse.Namespace, train: pathlib.Path, config: pathlib.Path,
          tokenizer: pathlib.Path, out: pathlib.Path) -> tuple[str, ...]:
    return (sys.executable, str(PEERS / script), f"--train_file={train}",
            f"--model_config={config}", f"--tokenizer={tokenizer}", f"--out={out}",
            f"--budget_s={args.budget_s}", f"--checkpoints={args.checkpoints}",
            f"--batch_size={args.batch_size}", f"--seq_length={args.seq_length}",
            f"--learning_rate={args.learning_rate}", f"--warmup_steps={args.warmup_steps}",
            f"--max_steps={args.max_steps}", f"--seed={args.seed}",
            f"--device={'cuda' if args.device == 'gpu' else 'cpu'}")


def _bertjax(args: argparse.Namespace, gin_files: list[str], bindings: list[str],
             out: pathlib.Path) -> tuple[str, ...]:
    common = ["train.checkpoint_every = 1", "train.keep_checkpoints = 1000",
              "train.log_every = 50", f"train.seed = {args.seed}"]
    return (sys.executable, str(PEERS / "bertjax_train.py"), f"--out={out}",
            f"--budget_s={args.budget_s}", f"--checkpoints={args.checkpoints}",
            f"--tokens_per_step={args.batch_size * args.seq_length}",
            *(f"--gin_file={f}" for f in gin_files),
            *(f"--gin_binding={b}" for b in [*bindings, *common, *args.bertjax_binding]))


def same_recipe_optimizer(args: argparse.Namespace) -> list[str]:
    """transformers' defaults as bertjax's make_optimizer settings (AdamW, linear schedule,
    the run's warmup)."""
    return [f"NUM_STEPS = {args.max_steps}", f"BATCH_SIZE = {args.batch_size}",
            f"make_optimizer.learning_rate = {args.learning_rate}",
            f"make_optimizer.warmup_steps = {args.warmup_steps}", "make_optimizer.eps = 1e-8",
            "make_optimizer.weight_decay = 0.0", "make_optimizer.clip_norm = 1.0",
            f"train.seq_phases = ((1.0, {args.seq_length}),)"]


def corpus_setting(paths: dict[str, pathlib.Path], family: str) -> str:
    """What bertjax's rows read: the prepared token store where there is one (--prepared),
    else the training text."""
    store = paths.get(f"store_{family}")
    return f"store:{store}" if store is not None else str(paths["train"])


def dtype_bindings(args: argparse.Namespace, family: str) -> list[str]:
    """bfloat16 compute on a GPU (float32 parameters and optimizer, as transformers' bf16
    mixed precision keeps them); the models' float32 default on the CPU."""
    if args.device != "gpu":
        return []
    return [f"{family}_config.dtype = 'bfloat16'"]


def bert_data(args: argparse.Namespace, paths: dict[str, pathlib.Path], size: int
              ) -> list[str]:
    return [f"bert_config.vocab_size = {size}",
            f"bert_config.max_position_embeddings = {args.seq_length}",
            f"bert_pretraining_source.corpus = '{corpus_setting(paths, 'bert')}'",
            f"bert_pretraining_source.corpus_format = '{args.corpus_format}'",
            f"bert_pretraining_source.vocab = '{paths['wordpiece']}'",
            f"bert_pretraining_source.vocab_size = {size}",
            f"bert_pretraining_source.seed = {args.seed}"]


def best_recipe_bindings(best_gin: pathlib.Path, args: argparse.Namespace, num_steps: int
                         ) -> list[str]:
    """What the best recipe leaves for the run to set: the batch and the step count, when the
    file does not set them itself."""
    text = best_gin.read_text(encoding="utf-8")
    bindings = []
    for macro, value in (("BATCH_SIZE", args.batch_size), ("NUM_STEPS", num_steps)):
        if not re.search(rf"^{macro}\s*=", text, re.M):
            bindings.append(f"{macro} = {value}")
    return bindings


def best_row(args: argparse.Namespace, paths: dict[str, pathlib.Path], out: pathlib.Path,
             num_steps: int) -> Row:
    """The best small-budget recipe's row: its gin file on the same shape, corpus and
    vocabulary; `num_steps` is its schedule's length when the file leaves NUM_STEPS open."""
    sizes = json.loads(paths["sizes"].read_text())
    best_gin = pathlib.Path(args.best_gin)
    files = [f"configs/models/bert_{args.bert_size}.gin", "configs/meshes/cpu.gin",
             str(best_gin)]
    bindings = [*best_recipe_bindings(best_gin, args, num_steps),
                *bert_data(args, paths, sizes["bert"]), *dtype_bindings(args, "bert")]
    return Row("best_recipe", "bertjax, best small-budget recipe", "bert", "run_mlm",
               _bertjax(args, files, bindings, out / "best_recipe"))


def steps_in_budget(points: dict, fallback: int) -> int:
    """The steps a row of the same shape and batch makes in the budget (the same-recipe row's,
    when the budget stopped it after at least 10), so a schedule ends with the budget."""
    return points["steps"] if points["stopped"] == "budget" and points["steps"] >= 10 \
        else fallback


def build_rows(args: argparse.Namespace, paths: dict[str, pathlib.Path], out: pathlib.Path
               ) -> tuple[list[Row], list[str]]:
    """(the rows to run, a line for each row skipped)."""
    sizes = json.loads(paths["sizes"].read_text())
    train, skipped = paths["train"], []
    bert_models = [f"configs/models/bert_{args.bert_size}.gin", "configs/meshes/cpu.gin"]
    same_bert = [*same_recipe_optimizer(args), "NSP = False", "PACKED_SEQUENCES = 0",
                 "bert_pretraining_source.short_seq_prob = 0.0",
                 *bert_data(args, paths, sizes["bert"]), *dtype_bindings(args, "bert")]
    gpt_bindings = [*same_recipe_optimizer(args),
                    f"gpt_config.vocab_size = {sizes['gpt']}",
                    f"gpt_config.max_position_embeddings = {args.seq_length}",
                    f"lm_pretraining_source.corpus = '{corpus_setting(paths, 'gpt')}'",
                    f"lm_pretraining_source.corpus_format = '{args.corpus_format}'",
                    f"lm_pretraining_source.vocab = '{paths['bpe']}'",
                    f"lm_pretraining_source.vocab_size = {sizes['gpt']}",
                    f"lm_pretraining_source.seed = {args.seed}", *dtype_bindings(args, "gpt")]
    gpt_files = [f"configs/models/{args.gpt_size}.gin", "configs/meshes/cpu.gin",
                 "configs/runs/gpt_pretrain.gin"]
    rows = {
        "run_mlm": Row("run_mlm", "transformers run_mlm", "bert", "run_mlm", _peer(
            "hf_mlm.py", args, train, paths["bert"], paths["hf_wordpiece"], out / "run_mlm")),
        "same_recipe": Row("same_recipe", "bertjax, same recipe", "bert", "run_mlm", _bertjax(
            args, [*bert_models, "configs/runs/pretrain.gin"], same_bert, out / "same_recipe")),
        "run_clm": Row("run_clm", "transformers run_clm", "gpt", "run_clm", _peer(
            "hf_clm.py", args, train, paths["gpt"], paths["hf_bpe"], out / "run_clm")),
        "gpt_same_recipe": Row("gpt_same_recipe", "bertjax GPT-2, same recipe", "gpt",
                               "run_clm", _bertjax(args, gpt_files, gpt_bindings,
                                                   out / "gpt_same_recipe")),
    }
    best_gin = pathlib.Path(args.best_gin)
    if "best_recipe" in args.rows and best_gin.is_file():
        rows["best_recipe"] = best_row(args, paths, out, args.best_steps or args.max_steps)
    elif "best_recipe" in args.rows:
        skipped.append(f"row bertjax, best small-budget recipe: skipped: {best_gin} does not "
                       "exist (pass --best_gin=FILE, a configs/runs/ recipe)")
    return [rows[key] for key in ROWS if key in rows and key in args.rows], skipped


def run_row(row: Row, timeout: float) -> dict:
    """Run one row in its own process; its points.json, with its process's wall time."""
    out = pathlib.Path(next(a for a in row.command if a.startswith("--out=")).split("=", 1)[1])
    env = {**os.environ, "XLA_FLAGS": "", "TOKENIZERS_PARALLELISM": "false",
           "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    begin = time.perf_counter()
    result = subprocess.run(row.command, cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=timeout)
    seconds = time.perf_counter() - begin
    if result.returncode != 0 or not (out / "points.json").is_file():
        raise RuntimeError(f"row {row.name} failed (exit {result.returncode}); the end of its "
                           f"output:\n{(result.stdout + result.stderr)[-3000:]}")
    points = json.loads((out / "points.json").read_text())
    points["process_s"] = seconds
    return points


# ---------------------------------------------------------------- the report


def time_to_reach(curve: list[tuple[float, float]], target: float) -> float | None:
    """The wall time at which the (wall_s, loss) curve first reaches `target`, interpolated
    linearly between the checkpoints around it; None when it never does."""
    previous = None
    for wall_s, loss in curve:
        if loss <= target:
            if previous is None or previous[1] == loss:
                return wall_s
            share = (previous[1] - target) / (previous[1] - loss)
            return previous[0] + share * (wall_s - previous[0])
        previous = (wall_s, loss)
    return None


def ratio_lines(rows: list[Row], curves: dict[str, list[tuple[float, float]]]) -> list[str]:
    """Each bertjax row's time to its peer's final loss, and the ratio line."""
    lines = []
    for row in rows:
        if row.peer not in curves or row.key not in curves:
            continue
        target = curves[row.peer][-1][1]
        peer_time = time_to_reach(curves[row.peer], target)
        reached = time_to_reach(curves[row.key], target)
        lines.append(f"{row.name}: reaches {target:.4f} (the peer's final held-out loss) at "
                     + (f"{reached:.1f} s" if reached is not None else "never (within the "
                        "budget)"))
        if row.key != row.peer:
            value = peer_time / reached if reached else 0.0
            note = "" if reached else " (never reached the peer's final held-out loss)"
            lines.append(f"ratio time_to_quality {row.key}: {value:.2f}x{note}")
    return lines


def where_the_time_went(row: Row, points: dict, scoring_s: float) -> str:
    return (f"{row.name}: {points['steps']} steps of {points['tokens_per_step']} tokens; "
            f"imports done at {points['imports_s']:.1f} s, data prepared at "
            f"{points['data_s']:.1f} s, first step done at {points['first_step_s']:.1f} s "
            f"(model, compile, the step), then "
            f"{points['steps_per_s']:.2f} steps/s; saves {points['save_s']:.1f} s "
            f"(off the clock); stopped at the {points['stopped']}; evaluation: none while "
            f"training (scored afterwards, {scoring_s:.1f} s a checkpoint); process "
            f"{points['process_s']:.0f} s")


DIFFERENCES = (
    "text: the corpus's lines are stripped of surrounding whitespace for every row (bertjax "
    "reads them stripped); GPT rows: run_clm tokenizes each line with its line break and "
    "joins them without EOS (a blank line is a line break), bertjax joins a document's lines "
    "with line breaks and puts EOS after each document (blank lines separate documents); "
    "transformers predicts L - 1 tokens of a block, bertjax L",
    "masking: transformers' collator selects each non-special token with probability 0.15; "
    "bertjax selects round(15%) of each instance's tokens (at most 20 at 128); both 80/10/10",
    "rows: transformers concatenates [CLS] line [SEP] for every line and cuts blocks; bertjax "
    "builds [CLS] segment [SEP] instances from consecutive lines of a document "
    "(short_seq_prob 0); the held-out rows are built as transformers builds its rows",
    "BERT MLM logits: transformers computes them at every position, bertjax at the masked "
    "positions only (part of what the same-recipe row measures)",
    "bertjax's step also computes the gradient norm for a finite-step guard",
    "host memory: bertjax's process sets glibc's malloc to keep the memory XLA frees, as "
    "bertjax-train does on a host without an accelerator (bertjax/training/host_memory.py); "
    "the peers run with malloc as it comes",
    "checkpoints: transformers saves the weights (save_pretrained), bertjax the whole train "
    "state; save time is off the clock on both sides",
    "the best-recipe row runs its own recipe (its gin file) on the same shape, corpus and "
    "vocabulary",
)


def differences(args: argparse.Namespace) -> list[str]:
    """DIFFERENCES, and what a GPU run or a prepared corpus adds."""
    lines = [line for line in DIFFERENCES if args.device == "cpu" or "host memory" not in line]
    if args.device == "gpu":
        lines.append("precision: transformers runs bf16 mixed precision (autocast; float32 "
                     "weights and optimizer), bertjax bfloat16 compute with float32 "
                     "parameters, optimizer, softmax, LayerNorm statistics and losses")
    if args.prepared:
        lines.append("data: bertjax's rows read token stores built on the preparing host "
                     "(their tokenizing is off the clock); the peers tokenize the text on "
                     "theirs (see 'data prepared at' above)")
    return lines


def plot(path: pathlib.Path, rows: list[Row], curves: dict[str, list[tuple[float, float]]],
         budget_s: float) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    families = [f for f in ("bert", "gpt") if any(r.family == f and r.key in curves
                                                  for r in rows)]
    fig, axes = plt.subplots(1, len(families), figsize=(6 * len(families), 4), squeeze=False)
    for ax, family in zip(axes[0], families, strict=True):
        for row in rows:
            if row.family == family and row.key in curves:
                ax.plot(*zip(*curves[row.key], strict=True), marker="o", label=row.name)
        peer = "run_mlm" if family == "bert" else "run_clm"
        if peer in curves:
            ax.axhline(curves[peer][-1][1], color="gray", linestyle="--", linewidth=1,
                       label="the peer's final loss")
        ax.set_title("BERT: held-out MLM loss" if family == "bert" else
                     "GPT-2: held-out next-token loss")
        ax.set_xlabel(f"wall-clock seconds (budget {budget_s:.0f} s a row)")
        ax.set_ylabel("held-out loss")
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix="time_to_quality-"))
    out.mkdir(parents=True, exist_ok=True)
    if any(out.glob("*/points.json")):
        print(f"time_to_quality: error: {out} holds an earlier run: pass a new --out",
              file=sys.stderr)
        return 2
    if args.prepared:
        paths, heldout_lines = load_prepared(args)
    else:
        paths, heldout_lines = prepare(args, out)
    if args.prepare_only:
        write_prepared(args, paths, heldout_lines, out)
        return 0
    rows, skipped = build_rows(args, paths, out)
    print(f"corpus {args.corpus}: {len(heldout_lines)} held-out lines; {args.device}; budget "
          f"{args.budget_s:.0f} s a row, {args.checkpoints} checkpoints; BERT {args.bert_size}, "
          f"GPT {args.gpt_size}, vocabulary {args.vocab_size} (learned: "
          f"{json.loads(paths['sizes'].read_text())}), batch {args.batch_size} x "
          f"{args.seq_length}, lr {args.learning_rate}, linear schedule over {args.max_steps} "
          f"steps after {args.warmup_steps} of warmup; {os.cpu_count()} cores; load "
          f"{os.getloadavg()[0]:.1f}" + (f"; prepared in {args.prepared}" if args.prepared
                                          else ""), flush=True)
    for line in skipped:
        print(line, flush=True)
    results = {}
    for row in rows:
        if row.key == "best_recipe" and not args.best_steps and "same_recipe" in results:
            row = best_row(args, paths, out, steps_in_budget(results["same_recipe"],
                                                             args.max_steps))
        print(f"running {row.name} ...", flush=True)
        results[row.key] = run_row(row, timeout=args.budget_s * 3 + 600)
    heldout = {"bert": scorer.bert_heldout(heldout_lines, paths["wordpiece"] / "vocab.txt",
                                           args.seq_length, args.eval_rows),
               "gpt": scorer.gpt_heldout(heldout_lines, paths["bpe"], args.seq_length,
                                         args.eval_rows)}
    table, curves, scoring = [], {}, {}
    for row in rows:
        seconds = []
        for point in results[row.key]["points"]:
            loss, acc, took = scorer.score(point["path"], heldout[row.family])
            seconds.append(took)
            table.append((row.name, round(point["wall_s"], 2), point["step"], round(loss, 5),
                          round(acc, 5)))
            curves.setdefault(row.key, []).append((point["wall_s"], loss))
        scoring[row.key] = sum(seconds) / max(len(seconds), 1)
    csv_path = pathlib.Path(args.csv or out / "time_to_quality.csv")
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(("row", "wall_s", "step", "heldout_loss", "heldout_acc"))
        writer.writerows(table)
    plot_path = pathlib.Path(args.plot or (out / "curves.png" if args.quick else DEFAULT_PLOT))
    plot(plot_path, rows, curves, args.budget_s)
    print(f"held-out: {heldout['bert'].rows} BERT rows, {heldout['gpt'].rows} GPT-2 rows of "
          f"{args.seq_length}")
    print("| row | wall_s | step | heldout_loss | heldout_acc |\n|---|---|---|---|---|")
    for entry in table:
        print("| " + " | ".join(map(str, entry)) + " |")
    print("\n".join(ratio_lines(rows, curves)))
    print("where the time went:")
    for row in rows:
        print("  - " + where_the_time_went(row, results[row.key], scoring[row.key]))
    print("what differs from the same work on both sides:")
    for line in differences(args):
        print(f"  - {line}")
    print(f"csv: {csv_path}\nplot: {plot_path}")
    if args.quick:
        print("quick mode: tiny sizes and budget, a smoke test; measures nothing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
