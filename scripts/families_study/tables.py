"""The study's tables and plots, recomputed from the runs' own files every time (nothing is
carried over from the run that made them), into `<root>/report/`:

    learning_curve.md/.csv   per model, approach and labelled-set size: pretrained and random
                             means over the draws, the paired difference with its 95% interval
                             and verdict, the bag-of-words baselines on the same draws
    comparisons.md/.csv      paired differences between pretrained arms on the same draws:
                             masked LM minus left-to-right (BERT's Table 5), and each
                             fine-tuned model minus TF-IDF logistic regression
    selection.md             the learning rates each fine-tuned arm chose, per size
    pretraining.md/.csv      per pretraining model: budget (steps, positions, FLOPs, wall
                             time) and held-out score against the unigram baseline
    polysemy.md/.csv         sense separation of "bank" per layer, per family and init
    learning_curve.png, curves.png, polysemy.png

learning_curve.csv is the study's result for programs: one row per (family, approach, labels)
with the columns of CURVE_CSV (family is the model's name: bert, bert_ltr, gpt, elmo).
"""

from __future__ import annotations

import collections
import json
import math
import pathlib
import statistics
from types import SimpleNamespace
from typing import Any

from bertjax.analysis.report import csv_text, markdown
from bertjax.training.metrics import read_metrics
from families_study.flops import training_flops
from families_study.plan import APPROACH_NAMES, Plan
from families_study.stats import Paired, paired

CURVE_CSV = ["family", "approach", "labels", "pretrained_mean", "random_mean", "diff_mean",
             "diff_ci_low", "diff_ci_high", "bow_logreg", "bow_nb", "draws"]
VERDICTS = {"better": "pretrained better", "worse": "random better",
            "not shown": "not shown", "one draw": "one draw"}


def _read(path: pathlib.Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def point_accuracies(plan: Plan, root: pathlib.Path) -> dict[tuple, dict[str, list[float]]]:
    """{(model, approach, N): {init: test accuracy per draw, in draw order}} of the finished
    points (a row with a missing draw is left out by `curve_rows`)."""
    out: dict[tuple, dict[str, list[float]]] = collections.defaultdict(
        lambda: collections.defaultdict(list))
    for p in sorted(plan.points, key=lambda p: p.draw):
        path = root / p.workdir / "study.json"
        if path.is_file():
            out[(p.model, p.approach, p.labels)][p.init].append(_read(path)["accuracy"])
    return out


def baseline_means(plan: Plan, root: pathlib.Path) -> dict[tuple[str, int], float]:
    """{(baseline, N): mean test accuracy over the draws}."""
    return {key: statistics.fmean(v) for key, v in baseline_accuracies(plan, root).items()}


def curve_rows(plan: Plan, root: pathlib.Path) -> list[dict[str, Any]]:
    """One dict per learning-curve row whose every draw finished for both inits."""
    accuracies, bow = point_accuracies(plan, root), baseline_means(plan, root)
    rows = []
    for model, approach, labels in plan.rows():
        arms = accuracies.get((model, approach, labels), {})
        pre, rand = arms.get("pretrained", []), arms.get("random", [])
        if len(pre) != plan.draws or len(rand) != plan.draws:
            continue
        rows.append({"family": model, "approach": approach, "labels": labels,
                     "pretrained": pre, "random": rand, "paired": paired(pre, rand),
                     "bow_logreg": bow.get(("tfidf_logreg", labels), math.nan),
                     "bow_nb": bow.get(("naive_bayes", labels), math.nan),
                     "draws": plan.draws})
    return rows


COMPARISONS_CSV = ["comparison", "a", "b", "approach", "labels", "a_mean", "b_mean",
                   "diff_mean", "diff_ci_low", "diff_ci_high", "draws"]


def baseline_accuracies(plan: Plan, root: pathlib.Path) -> dict[tuple[str, int], list[float]]:
    """{(baseline, N): test accuracy per draw, in draw order}."""
    values: dict[tuple[str, int], list[float]] = collections.defaultdict(list)
    for b in sorted(plan.baselines, key=lambda b: b.draw):
        path = root / b.workdir / "study.json"
        if path.is_file():
            values[(b.kind, b.labels)].append(_read(path)["accuracy"])
    return values


def comparison_rows(plan: Plan, root: pathlib.Path) -> list[dict[str, Any]]:
    """Paired comparisons that are not pretrained-against-random, each on the same draws:
    BERT's masked LM against its left-to-right twin (both pretrained, every approach and size
    both have), and every pretrained fine-tuned model against TF-IDF logistic regression.
    A row needs every draw of both sides."""
    accuracies, bow = point_accuracies(plan, root), baseline_accuracies(plan, root)
    pairs = []
    for model, approach, labels in plan.rows():
        if model == "bert_ltr" and ("bert", approach, labels) in set(plan.rows()):
            pairs.append(("masked LM minus left-to-right", "bert", "bert_ltr", approach, labels,
                          accuracies.get(("bert", approach, labels), {}).get("pretrained", []),
                          accuracies.get((model, approach, labels), {}).get("pretrained", [])))
    for model, approach, labels in plan.rows():
        if approach == "finetuned":
            pairs.append(("fine-tuned minus bag-of-words", model, "tfidf_logreg", approach,
                          labels,
                          accuracies.get((model, approach, labels), {}).get("pretrained", []),
                          bow.get(("tfidf_logreg", labels), [])))
    return [{"comparison": name, "a": a, "b": b, "approach": approach, "labels": labels,
             "a_values": va, "b_values": vb, "paired": paired(va, vb), "draws": plan.draws}
            for name, a, b, approach, labels, va, vb in pairs
            if len(va) == len(vb) == plan.draws]


def comparison_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]],
                                                          list[str], list[list[str]]]:
    header = ["comparison", "a", "b", "approach", "labels", "a", "b",
              "a minus b [95% interval]", "verdict"]
    verdicts = {"better": "a better", "worse": "b better", "not shown": "not shown",
                "one draw": "one draw"}
    md = [[r["comparison"], r["a"], r["b"], APPROACH_NAMES[r["approach"]], f"{r['labels']:,}",
           _mean(r["a_values"]), _mean(r["b_values"]), _interval(r["paired"]),
           verdicts[r["paired"].verdict]] for r in rows]
    csv_rows = [[r["comparison"], r["a"], r["b"], APPROACH_NAMES[r["approach"]],
                 str(r["labels"]), repr(statistics.fmean(r["a_values"])),
                 repr(statistics.fmean(r["b_values"])), repr(r["paired"].mean),
                 repr(r["paired"].low), repr(r["paired"].high), str(r["draws"])]
                for r in rows]
    return header, md, COMPARISONS_CSV, csv_rows


def _interval(p: Paired) -> str:
    if math.isnan(p.low):
        return f"{p.mean:+.3f}"
    return f"{p.mean:+.3f} [{p.low:+.3f}, {p.high:+.3f}]"


def _mean(values: list[float]) -> str:
    return f"{statistics.fmean(values):.3f}"


def curve_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]],
                                                      list[str], list[list[str]]]:
    header = ["model", "approach", "labels", "pretrained", "random init",
              "difference [95% interval]", "verdict", "TF-IDF logreg", "naive Bayes"]
    md = [[r["family"], APPROACH_NAMES[r["approach"]], f"{r['labels']:,}",
           _mean(r["pretrained"]), _mean(r["random"]), _interval(r["paired"]),
           VERDICTS[r["paired"].verdict], f"{r['bow_logreg']:.3f}", f"{r['bow_nb']:.3f}"]
          for r in rows]
    csv_rows = [[r["family"], APPROACH_NAMES[r["approach"]], str(r["labels"]),
                 repr(statistics.fmean(r["pretrained"])), repr(statistics.fmean(r["random"])),
                 repr(r["paired"].mean), repr(r["paired"].low), repr(r["paired"].high),
                 repr(r["bow_logreg"]), repr(r["bow_nb"]), str(r["draws"])] for r in rows]
    return header, md, CURVE_CSV, csv_rows


def selection_rows(plan: Plan, root: pathlib.Path) -> list[list[str]]:
    """Per fine-tuned (model, init, N): the rates chosen over the draws and their held-out
    accuracies."""
    chosen: dict[tuple, list[str]] = collections.defaultdict(list)
    for p in sorted(plan.points, key=lambda p: p.draw):
        path = root / p.workdir / "study.json"
        if p.approach == "finetuned" and path.is_file():
            r = _read(path)
            chosen[(p.model, p.init, p.labels)].append(
                f"{r['learning_rate']:g} ({r['heldout_accuracy']:.2f})")
    return [[m, i, f"{n:,}", ", ".join(v)] for (m, i, n), v in sorted(chosen.items())]


def _config(record: dict) -> Any:
    """model.json's config as attributes (nested dicts too)."""
    def ns(value: Any) -> Any:
        return SimpleNamespace(**{k: ns(v) for k, v in value.items()}) if isinstance(
            value, dict) else value
    return ns(record["config"])


def pretraining_rows(plan: Plan, root: pathlib.Path) -> list[dict[str, Any]]:
    """Per pretraining model: budget and held-out score."""
    out = []
    for run in plan.pretraining:
        workdir = root / run.workdir
        record = _read(workdir / "model.json")
        history = read_metrics(workdir / "metrics.jsonl")
        seq = int(history[-1].get("seq_length", 0))
        batch = int(record["data"]["batch_size"])
        kind = "bert_ltr" if record.get("objective") == "bert_ltr_pretraining" else run.family
        score = _read(workdir / "heldout.json")
        row = {"model": run.model, "family": run.family, "steps": run.steps, "batch": batch,
               "seq_length": seq, "vocab": record["tokenizer"]["vocab_size"],
               "tflops": training_flops(kind, _config(record), batch, seq, run.steps) / 1e12,
               "seconds": _read(workdir / "study.json")["seconds"],
               "target": score["target"], "scored": "accuracy" in score}
        if row["scored"]:
            row.update({k: score[k] for k in ("accuracy", "unigram_accuracy", "loss",
                                              "unigram_loss", "unigram_token")})
        out.append(row)
    return out


def pretraining_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]],
                                                           list[str], list[list[str]]]:
    header = ["model", "family", "steps", "batch x length", "vocabulary", "TFLOPs", "wall s",
              "held-out target", "accuracy", "unigram accuracy", "loss (nats)",
              "unigram loss", "perplexity", "unigram perplexity"]

    def scores(r: dict) -> list[str]:
        if not r["scored"]:
            return ["-"] * 6
        return [f"{r['accuracy']:.3f}", f"{r['unigram_accuracy']:.3f}", f"{r['loss']:.2f}",
                f"{r['unigram_loss']:.2f}", f"{math.exp(r['loss']):.1f}",
                f"{math.exp(r['unigram_loss']):.1f}"]

    md = [[r["model"], r["family"], str(r["steps"]), f"{r['batch']} x {r['seq_length']}",
           f"{r['vocab']:,}", f"{r['tflops']:.2f}", f"{r['seconds']:.0f}", r["target"],
           *scores(r)] for r in rows]
    csv_header = ["model", "family", "steps", "batch", "seq_length", "vocab", "tflops",
                  "seconds", "accuracy", "unigram_accuracy", "loss", "unigram_loss"]
    csv_rows = [[r["model"], r["family"], str(r["steps"]), str(r["batch"]),
                 str(r["seq_length"]), str(r["vocab"]), repr(r["tflops"]), repr(r["seconds"]),
                 *([repr(r[k]) for k in ("accuracy", "unigram_accuracy", "loss",
                                         "unigram_loss")] if r["scored"] else [""] * 4)]
                for r in rows]
    return header, md, csv_header, csv_rows


def polysemy_rows(root: pathlib.Path) -> list[dict[str, Any]]:
    """Per family and init: the layers and each layer's separations."""
    out = []
    for family in ("elmo", "gpt", "bert"):
        for init in ("pretrained", "random"):
            path = root / "senses" / f"{family}-{init}" / "senses.json"
            if path.is_file():
                out.append({"family": family, "init": init, **_read(path)})
    return out


def polysemy_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]],
                                                        list[str], list[list[str]]]:
    header = ["family", "init", "layer", "separation (16 sentences)",
              "separation (8, cue before the word)"]
    csv_header = ["family", "init", "layer", "separation", "cue_before"]
    md, csv_rows = [], []
    for r in rows:
        for k, layer in enumerate(r["layers"]):
            sep, cue = r["separation"][k], r["separation_cue_before"][k]
            name = f"{layer} (static)" if layer == "token" else layer
            md.append([r["family"], r["init"], name, f"{sep:.3f}", f"{cue:.3f}"])
            csv_rows.append([r["family"], r["init"], layer, repr(sep), repr(cue)])
    return header, md, csv_header, csv_rows


def write_table(out: pathlib.Path, name: str, header: list[str], rows: list[list[str]],
                csv_header: list[str] | None, csv_rows: list[list[str]] | None,
                title: str) -> str:
    """name.md (a title line, then the table) and name.csv; the markdown."""
    text = f"{title}\n\n{markdown(header, rows)}"
    (out / f"{name}.md").write_text(text, encoding="utf-8")
    if csv_header is not None:
        (out / f"{name}.csv").write_text(csv_text(csv_header, csv_rows), encoding="utf-8")
    return text


def write_report(plan: Plan, root: pathlib.Path) -> list[str]:
    """Every table and plot into root/report; the markdown texts, in order."""
    from families_study import plots

    out = root / "report"
    out.mkdir(parents=True, exist_ok=True)
    curve = curve_rows(plan, root)
    texts = [write_table(out, "learning_curve", *curve_table(curve),
                         title=f"AG News test accuracy (7,600 items) by labelled-set size: "
                               f"means over {plan.draws} paired draws; pretrained minus random "
                               "per draw with its 95% t interval")]
    texts.append(write_table(out, "comparisons", *comparison_table(comparison_rows(plan, root)),
                             title=f"AG News test accuracy: paired differences between "
                                   f"pretrained arms on the same {plan.draws} draws, with "
                                   "their 95% t intervals"))
    texts.append(write_table(out, "selection", ["model", "init", "labels",
                                                "rate chosen per draw (held-out accuracy)"],
                             selection_rows(plan, root), None, None,
                             title="Fine-tuning rates chosen on each draw's held-out tenth"))
    pre = pretraining_rows(plan, root)
    texts.append(write_table(out, "pretraining", *pretraining_table(pre),
                             title="Pretraining: budget and held-out score against the unigram "
                                   "baseline (same held-out targets)"))
    senses = polysemy_rows(root)
    if senses:
        texts.append(write_table(out, "polysemy", *polysemy_table(senses),
                                 title='Polysemy: sense separation of "bank" per layer '
                                       "(within-sense minus across-sense cosine; static = 0)"))
    plots.write_plots(plan, root, out, curve, pre, senses)
    return texts
