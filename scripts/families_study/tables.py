"""The study's tables and plots, recomputed from the runs' own files every time (nothing is
carried over from the run that made them), into `<root>/report/`:

    families_<task>.md/.csv   per family and approach: pretrained vs random-init twin, mean ±
                              std over seeds, the gain, and whether it is outside the spread
    pretraining.md/.csv       per pretraining model: budget (steps, positions, FLOPs, wall
                              time) and held-out score against the unigram baseline
    <table>.md/.csv           the re-based ablation tables (bert_table5, bert_table6,
                              gpt_table5, elmo_table2)
    polysemy.md/.csv          sense separation of "bank" per layer, per family and init
    curves.png, families.png, polysemy.png

Spreads come from bertjax.analysis.seeds over the runs' workdirs (`<cell>/seed=N`), the same
code as `bertjax-report --over_seeds`. "Outside the spread" means the two mean ± std
intervals do not overlap.
"""

from __future__ import annotations

import json
import math
import pathlib
import statistics
from types import SimpleNamespace
from typing import Any

from bertjax.analysis.report import csv_text, markdown
from bertjax.analysis.runs import load_run
from bertjax.analysis.seeds import Spread, seed_summary
from families_study.flops import training_flops
from families_study.plan import APPROACHES, Plan

TASK_NAMES = {"agnews": "AG News (test_all.tsv, 7,600)", "qnli5": "QNLI-5 (dev, 416 pairs)"}
APPROACH_NAMES = {"finetuned": "fine-tuned (ELMo: its task model)",
                  "features": "feature-based (frozen, same classifier)"}


def _spread(values: list[float]) -> Spread:
    return Spread(tuple(values), tuple(range(len(values))))


def cell_spreads(plan: Plan, root: pathlib.Path, task: str) -> dict[str, Spread]:
    """{cell: accuracy over its seeds} read from each run's eval_results.json."""
    runs = [load_run(root / d.workdir, follow_init=False) for d in plan.downstream
            if d.task == task]
    summary = seed_summary(runs, metrics=["dev_accuracy"])
    return {cell: spreads["dev_accuracy"] for cell, spreads in summary.items()
            if "dev_accuracy" in spreads}


def outside(a: Spread, b: Spread) -> bool:
    """True when a's mean ± std interval lies wholly above b's."""
    return a.mean - a.std > b.mean + b.std


def families_table(plan: Plan, root: pathlib.Path, task: str
                   ) -> tuple[list[str], list[list[str]], list[list[str]]]:
    """(header, markdown rows, CSV rows) of the families table for one task."""
    spreads = cell_spreads(plan, root, task)
    header = ["family", "approach", "seeds", "pretrained", "random init", "gain",
              "outside spread"]
    rows, csv_rows = [], []
    for family in ("elmo", "gpt", "bert"):
        for approach in APPROACHES:
            pre = spreads.get(f"{family}-pretrained-{approach}")
            rand = spreads.get(f"{family}-random-{approach}")
            if pre is None or rand is None:
                continue
            gain = pre.mean - rand.mean
            verdict = "yes" if outside(pre, rand) else ("below" if outside(rand, pre) else "no")
            rows.append([family.upper() if family != "elmo" else "ELMo",
                         APPROACH_NAMES[approach], str(pre.n), pre.text(3), rand.text(3),
                         f"{gain:+.3f}", verdict])
            csv_rows.append([family, approach, str(pre.n), repr(pre.mean), repr(pre.std),
                             repr(rand.mean), repr(rand.std), repr(gain), verdict])
    return header, rows, csv_rows


FAMILIES_CSV = ["family", "approach", "seeds", "pretrained_mean", "pretrained_std",
                "random_mean", "random_std", "gain", "outside_spread"]


def _config(record: dict) -> Any:
    """model.json's config as attributes (nested dicts too)."""
    def ns(value: Any) -> Any:
        return SimpleNamespace(**{k: ns(v) for k, v in value.items()}) if isinstance(
            value, dict) else value
    return ns(record["config"])


def pretraining_rows(plan: Plan, root: pathlib.Path) -> list[dict[str, Any]]:
    """Per pretraining model: budget and held-out scores, over its seeds."""
    out = []
    for model in dict.fromkeys(p.model for p in plan.pretraining):
        runs = [p for p in plan.pretraining if p.model == model]
        first = root / runs[0].workdir
        record = json.loads((first / "model.json").read_text(encoding="utf-8"))
        history = [json.loads(line) for line in (first / "metrics.jsonl").read_text(
            encoding="utf-8").splitlines() if line.strip()]
        seq = int(history[-1].get("seq_length", 0))
        batch = int(record["data"]["batch_size"])
        kind = "bert_ltr" if record.get("objective") == "bert_ltr_pretraining" else runs[0].family
        flops = training_flops(kind, _config(record), batch, seq, runs[0].steps)
        scores = [json.loads((root / p.workdir / "heldout.json").read_text(encoding="utf-8"))
                  for p in runs]
        seconds = [json.loads((root / p.workdir / "study.json").read_text(
            encoding="utf-8"))["seconds"] for p in runs]
        row = {"model": model, "family": runs[0].family, "seeds": len(runs),
               "steps": runs[0].steps, "batch": batch, "seq_length": seq,
               "tflops": flops / 1e12, "seconds": statistics.mean(seconds),
               "target": scores[0]["target"], "scored": "accuracy" in scores[0]}
        if row["scored"]:
            row.update(accuracy=_spread([s["accuracy"] for s in scores]),
                       unigram_accuracy=scores[0]["unigram_accuracy"],
                       loss=_spread([s["loss"] for s in scores]),
                       unigram_loss=scores[0]["unigram_loss"],
                       unigram_token=scores[0]["unigram_token"])
        out.append(row)
    return out


def _scores(r: dict[str, Any]) -> list[str]:
    """The held-out columns of a pretraining row ("-" where the model was not scored)."""
    if not r["scored"]:
        return ["-"] * 6
    return [r["accuracy"].text(3), f"{r['unigram_accuracy']:.3f}", r["loss"].text(2),
            f"{r['unigram_loss']:.2f}", f"{math.exp(r['loss'].mean):.1f}",
            f"{math.exp(r['unigram_loss']):.1f}"]


def pretraining_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]],
                                                           list[str], list[list[str]]]:
    header = ["model", "family", "seeds", "steps", "batch x length", "TFLOPs", "wall s (mean)",
              "held-out target", "accuracy", "unigram accuracy", "loss (nats)", "unigram loss",
              "perplexity", "unigram perplexity"]
    md = [[r["model"], r["family"], str(r["seeds"]), str(r["steps"]),
           f"{r['batch']} x {r['seq_length']}", f"{r['tflops']:.2f}", f"{r['seconds']:.0f}",
           r["target"], *_scores(r)] for r in rows]
    csv_header = ["model", "family", "seeds", "steps", "batch", "seq_length", "tflops",
                  "seconds", "accuracy_mean", "accuracy_std", "unigram_accuracy", "loss_mean",
                  "loss_std", "unigram_loss", "unigram_token"]
    csv_rows = [[r["model"], r["family"], str(r["seeds"]), str(r["steps"]), str(r["batch"]),
                 str(r["seq_length"]), repr(r["tflops"]), repr(r["seconds"]),
                 *([repr(r["accuracy"].mean), repr(r["accuracy"].std),
                    repr(r["unigram_accuracy"]), repr(r["loss"].mean), repr(r["loss"].std),
                    repr(r["unigram_loss"]), r["unigram_token"]] if r["scored"] else [""] * 7)]
                for r in rows]
    return header, md, csv_header, csv_rows


def _size(plan: Plan, root: pathlib.Path, model: str) -> str:
    """"L=2, H=128, A=2" of a BERT model, from its first pretraining run's model.json."""
    run = next(p for p in plan.pretraining if p.model == model)
    record = json.loads((root / run.workdir / "model.json").read_text(encoding="utf-8"))
    t = record["config"]["transformer"]
    return f"L={t['num_layers']}, H={t['hidden_size']}, A={t['num_heads']}"


def ablation_table(plan: Plan, root: pathlib.Path, name: str,
                   pretraining: dict[str, dict[str, Any]]
                   ) -> tuple[list[str], list[list[str]], list[str], list[list[str]]]:
    """An ablation table: per row, AG News accuracy over seeds and its pretraining's held-out
    score."""
    spreads = cell_spreads(plan, root, "agnews")
    header = ["row", "seeds", "AG News accuracy", "pretraining held-out", "accuracy",
              "loss (nats)"]
    csv_header = ["row", "cell", "seeds", "accuracy_mean", "accuracy_std",
                  "pretrain_accuracy_mean", "pretrain_loss_mean"]
    md, csv_rows = [], []
    for row in plan.tables[name]:
        spread = spreads[row.cell]
        model, init = row.cell.split("-")[:2]
        label = _size(plan, root, model) if name == "bert_table6" else row.label
        p = pretraining.get(model) if init == "pretrained" else None
        p = p if p and p["scored"] else None
        md.append([label, str(spread.n), spread.text(3), p["target"] if p else "-",
                   p["accuracy"].text(3) if p else "-", p["loss"].text(2) if p else "-"])
        csv_rows.append([label, row.cell, str(spread.n), repr(spread.mean),
                         repr(spread.std), repr(p["accuracy"].mean) if p else "",
                         repr(p["loss"].mean) if p else ""])
    return header, md, csv_header, csv_rows


def polysemy_rows(root: pathlib.Path) -> list[dict[str, Any]]:
    """Per family and init: the layers and each layer's separations over seeds."""
    out = []
    for family in ("elmo", "gpt", "bert"):
        for init in ("pretrained", "random"):
            files = sorted((root / "senses" / f"{family}-{init}").glob("seed=*/senses.json"))
            results = [json.loads(f.read_text(encoding="utf-8")) for f in files]
            if not results:
                continue
            layers = results[0]["layers"]
            out.append({"family": family, "init": init, "layers": layers, "seeds": len(results),
                        "separation": [_spread([r["separation"][k] for r in results])
                                       for k in range(len(layers))],
                        "cue_before": [_spread([r["separation_cue_before"][k] for r in results])
                                       for k in range(len(layers))]})
    return out


def polysemy_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]],
                                                        list[str], list[list[str]]]:
    header = ["family", "init", "layer", "seeds", "separation (16 sentences)",
              "separation (8, cue before the word)"]
    csv_header = ["family", "init", "layer", "seeds", "separation_mean", "separation_std",
                  "cue_before_mean", "cue_before_std"]
    md, csv_rows = [], []
    for r in rows:
        for k, layer in enumerate(r["layers"]):
            sep, cue = r["separation"][k], r["cue_before"][k]
            name = f"{layer} (static)" if layer == "token" else layer
            md.append([r["family"], r["init"], name, str(r["seeds"]), sep.text(3), cue.text(3)])
            csv_rows.append([r["family"], r["init"], layer, str(r["seeds"]), repr(sep.mean),
                             repr(sep.std), repr(cue.mean), repr(cue.std)])
    return header, md, csv_header, csv_rows


def write_table(out: pathlib.Path, name: str, header: list[str], rows: list[list[str]],
                csv_header: list[str], csv_rows: list[list[str]], title: str) -> str:
    """name.md (a title line, then the table) and name.csv; the markdown."""
    text = f"{title}\n\n{markdown(header, rows)}"
    (out / f"{name}.md").write_text(text, encoding="utf-8")
    (out / f"{name}.csv").write_text(csv_text(csv_header, csv_rows), encoding="utf-8")
    return text


def write_report(plan: Plan, root: pathlib.Path, tasks: list[str]) -> list[str]:
    """Every table and plot into root/report; the markdown texts, in order."""
    from families_study import plots

    out = root / "report"
    out.mkdir(parents=True, exist_ok=True)
    texts = []
    for task in tasks:
        header, rows, csv_rows = families_table(plan, root, task)
        texts.append(write_table(out, f"families_{task}", header, rows, FAMILIES_CSV, csv_rows,
                                 f"Families on {TASK_NAMES[task]}: accuracy, mean ± std over "
                                 "seeds"))
    pre = pretraining_rows(plan, root)
    texts.append(write_table(out, "pretraining", *pretraining_table(pre),
                             title="Pretraining: budget and held-out score against the unigram "
                                   "baseline (same held-out targets)"))
    by_model = {r["model"]: r for r in pre}
    for name in plan.tables:
        texts.append(write_table(out, name, *ablation_table(plan, root, name, by_model),
                                 title=f"{name}: AG News accuracy, mean ± std over seeds"))
    senses = polysemy_rows(root)
    if senses:
        texts.append(write_table(out, "polysemy", *polysemy_table(senses),
                                 title='Polysemy: sense separation of "bank" per layer '
                                       "(within-sense minus across-sense cosine; static = 0)"))
    spreads = {task: cell_spreads(plan, root, task) for task in tasks}
    plots.write_plots(plan, root, out, spreads, pre, senses)
    return texts
