"""The study's pictures (matplotlib, through bertjax.analysis.plotting):

    learning_curve.png  per model and approach: test accuracy against labelled-set size (log
                        scale), pretrained and random init (each draw a dot, the mean a line),
                        the bag-of-words baselines on the same draws
    curves.png          per pretraining model: training loss against step, the unigram
                        model's loss on the same held-out targets (the line a model must go
                        below), and the held-out loss at the end (a dot)
    polysemy.png        per family: sense separation of "bank" by layer, pretrained (solid)
                        and random init (dashed); the static token layer at 0
"""

from __future__ import annotations

import io
import pathlib
import statistics
from typing import Any

from bertjax.training.metrics import read_metrics
from families_study.plan import APPROACH_NAMES, Plan

LOSS_KEYS = {"bert": ("mlm_loss", "loss"), "gpt": ("loss",), "elmo": ("loss",)}
COLORS = {"elmo": "tab:green", "gpt": "tab:orange", "bert": "tab:blue",
          "bert_ltr": "tab:purple"}
INIT_STYLE = {"pretrained": "-", "random": "--"}


def _save(fig: Any, path: pathlib.Path) -> None:
    from bertjax.analysis.plotting import pyplot

    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=90)
    pyplot().close(fig)
    path.write_bytes(image.getvalue())


def _curve(workdir: pathlib.Path, keys: tuple[str, ...]) -> tuple[list[int], list[float]]:
    rows = read_metrics(workdir / "metrics.jsonl")
    key = next((k for k in keys if any(k in r for r in rows)), keys[-1])
    points = [(r["step"], r[key]) for r in rows if key in r and "step" in r]
    return [s for s, _ in points], [v for _, v in points]


def plot_learning_curve(rows: list[dict[str, Any]], path: pathlib.Path) -> None:
    from bertjax.analysis.plotting import pyplot

    plt = pyplot()
    panels = list(dict.fromkeys((r["family"], r["approach"]) for r in rows))
    if not panels:
        return
    cols = min(4, len(panels))
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.6 * nrows), squeeze=False,
                             layout="constrained")
    for ax, (model, approach) in zip(axes.flat, panels, strict=False):
        mine = [r for r in rows if (r["family"], r["approach"]) == (model, approach)]
        sizes = [r["labels"] for r in mine]
        color = COLORS.get(model, "black")
        for init, marker in (("pretrained", "o"), ("random", "s")):
            face = color if init == "pretrained" else "white"
            ax.plot(sizes, [statistics.fmean(r[init]) for r in mine], INIT_STYLE[init],
                    color=color, marker=marker, ms=6, mfc=face, label=f"{init} (mean)")
            for r in mine:
                ax.plot([r["labels"]] * len(r[init]), r[init], marker, color=color, ms=3,
                        mfc=face, alpha=0.5)
        ax.plot(sizes, [r["bow_logreg"] for r in mine], ":", color="black", marker="x",
                label="TF-IDF logreg")
        ax.plot(sizes, [r["bow_nb"] for r in mine], ":", color="gray", marker="+",
                label="naive Bayes")
        ax.set_xscale("log")
        ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
        ax.set_xlabel("labelled items")
        ax.set_ylabel("test accuracy")
        ax.set_title(f"{model}, {APPROACH_NAMES[approach]}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    _save(fig, path)


def plot_pretraining(plan: Plan, root: pathlib.Path, path: pathlib.Path,
                     pretraining: list[dict[str, Any]]) -> None:
    from bertjax.analysis.plotting import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, len(plan.pretraining), figsize=(4.2 * len(plan.pretraining),
                                                               3.6),
                             squeeze=False, layout="constrained")
    by_model = {r["model"]: r for r in pretraining}
    for ax, run in zip(axes[0], plan.pretraining, strict=True):
        steps, values = _curve(root / run.workdir, LOSS_KEYS[run.family])
        ax.plot(steps, values, color=COLORS.get(run.model, "black"), alpha=0.8,
                label="training")
        r = by_model[run.model]
        if r["scored"]:
            ax.plot([run.steps], [r["loss"]], "o", color="black", ms=5, label="held-out")
            ax.axhline(r["unigram_loss"], color="gray", ls="--",
                       label=f"unigram (held-out), '{r['unigram_token']}' acc "
                             f"{r['unigram_accuracy']:.2f}")
        ax.set_title(f"{run.model}: {r['target']}, {r['tflops']:.1f} TFLOPs", fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy (nats)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    _save(fig, path)


def plot_polysemy(senses: list[dict[str, Any]], path: pathlib.Path) -> None:
    from bertjax.analysis.plotting import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.9), layout="constrained")
    for ax, key, title in ((axes[0], "separation", "all 16 sentences"),
                           (axes[1], "separation_cue_before",
                            "8 sentences with the cue before 'bank'")):
        for r in senses:
            ax.plot(range(len(r["layers"])), r[key], INIT_STYLE[r["init"]], marker="o", ms=4,
                    color=COLORS[r["family"]], label=f"{r['family']} {r['init']}")
        ax.axhline(0.0, color="gray", lw=0.8)
        ax.set_xlabel("layer (0 = static token layer)")
        ax.set_ylabel("within - across sense cosine")
        ax.set_title(f"'bank': sense separation by layer, {title}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    _save(fig, path)


def write_plots(plan: Plan, root: pathlib.Path, out: pathlib.Path, curve: list[dict[str, Any]],
                pretraining: list[dict[str, Any]], senses: list[dict[str, Any]]) -> None:
    """learning_curve.png, curves.png and (with senses) polysemy.png into `out`; none without
    matplotlib (the tables stand without them)."""
    try:
        from bertjax.analysis.plotting import pyplot

        pyplot()
    except ImportError as err:
        print(f"families.py: no plots: {err}")
        return
    plot_learning_curve(curve, out / "learning_curve.png")
    plot_pretraining(plan, root, out / "curves.png", pretraining)
    if senses:
        plot_polysemy(senses, out / "polysemy.png")
