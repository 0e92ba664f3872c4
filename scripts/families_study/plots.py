"""The study's pictures (matplotlib, through bertjax.analysis.plotting):

    curves.png     per family: pretraining loss against step (each seed), the unigram
                   model's loss on the same held-out targets (the line a model must go below),
                   and the held-out loss at the end (dots)
    families.png   per task: accuracy of each family and approach, pretrained and random-init,
                   mean with ± std bars
    polysemy.png   per family: sense separation of "bank" by layer, pretrained (solid) and
                   random-init (dashed); the static token layer at 0
"""

from __future__ import annotations

import io
import json
import pathlib
from typing import Any

from bertjax.analysis.seeds import Spread
from families_study.plan import APPROACHES, Plan

LOSS_KEYS = {"bert": ("mlm_loss", "loss"), "gpt": ("loss",), "elmo": ("loss",)}
COLORS = {"elmo": "tab:green", "gpt": "tab:orange", "bert": "tab:blue"}


def _save(fig: Any, path: pathlib.Path) -> None:
    from bertjax.analysis.plotting import pyplot

    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=90)
    pyplot().close(fig)
    path.write_bytes(image.getvalue())


def _curve(workdir: pathlib.Path, keys: tuple[str, ...]) -> tuple[list[int], list[float]]:
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text(
        encoding="utf-8").splitlines() if line.strip()]
    key = next((k for k in keys if any(k in r for r in rows)), keys[-1])
    points = [(r["step"], r[key]) for r in rows if key in r]
    return [s for s, _ in points], [v for _, v in points]


def plot_curves(plan: Plan, root: pathlib.Path, path: pathlib.Path,
                pretraining: list[dict[str, Any]]) -> None:
    from bertjax.analysis.plotting import pyplot

    plt = pyplot()
    families = ("elmo", "gpt", "bert")
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.9), layout="constrained")
    by_model = {r["model"]: r for r in pretraining}
    for ax, family in zip(axes, families, strict=True):
        for run in (p for p in plan.pretraining if p.model == family):
            steps, values = _curve(root / run.workdir, LOSS_KEYS[family])
            ax.plot(steps, values, color=COLORS[family], alpha=0.7,
                    label=f"training, seed {run.seed}")
            score = json.loads((root / run.workdir / "heldout.json").read_text("utf-8"))
            ax.plot([run.steps], [score["loss"]], "o", color="black", ms=5,
                    label="held-out" if run.seed == 0 else None)
        if family in by_model and by_model[family]["scored"]:
            r = by_model[family]
            ax.axhline(r["unigram_loss"], color="gray", ls="--",
                       label=f"unigram (held-out), '{r['unigram_token']}' acc "
                             f"{r['unigram_accuracy']:.2f}")
            ax.set_title(f"{family.upper() if family != 'elmo' else 'ELMo'}: {r['target']}, "
                         f"{r['tflops']:.1f} TFLOPs", fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy (nats)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    _save(fig, path)


def plot_families(spreads_by_task: dict[str, dict[str, Any]], path: pathlib.Path) -> None:
    from bertjax.analysis.plotting import pyplot

    plt = pyplot()
    tasks = list(spreads_by_task)
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.5 * len(tasks), 3.9), squeeze=False,
                             layout="constrained")
    for ax, task in zip(axes[0], tasks, strict=True):
        spreads = spreads_by_task[task]
        labels, x = [], 0.0
        for family in ("elmo", "gpt", "bert"):
            for approach in APPROACHES:
                for k, init in enumerate(("pretrained", "random")):
                    s = spreads.get(f"{family}-{init}-{approach}")
                    if s is None:
                        continue
                    ax.bar(x + 0.4 * k, s.mean, 0.38, yerr=s.std, capsize=3,
                           color=COLORS[family], alpha=1.0 if k == 0 else 0.4,
                           hatch=None if approach == "finetuned" else "//")
                labels.append((x + 0.2, f"{family}\n{'ft' if approach == 'finetuned' else 'feat'}"))
                x += 1.0
        ax.set_xticks([p for p, _ in labels], [t for _, t in labels], fontsize=8)
        ax.set_ylabel("accuracy")
        ax.set_title(f"{task}: pretrained (solid) vs random init (pale); hatched: frozen "
                     "features", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    _save(fig, path)


def plot_polysemy(senses: list[dict[str, Any]], path: pathlib.Path) -> None:
    from bertjax.analysis.plotting import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.9), layout="constrained")
    for ax, key, title in ((axes[0], "separation", "all 16 sentences"),
                           (axes[1], "cue_before", "8 sentences with the cue before 'bank'")):
        for r in senses:
            xs = list(range(len(r["layers"])))
            means = [s.mean for s in r[key]]
            stds = [s.std for s in r[key]]
            ax.errorbar(xs, means, yerr=stds, capsize=3, color=COLORS[r["family"]],
                        ls="-" if r["init"] == "pretrained" else "--", marker="o", ms=4,
                        label=f"{r['family']} {r['init']}")
        ax.axhline(0.0, color="gray", lw=0.8)
        ax.set_xlabel("layer (0 = static token layer)")
        ax.set_ylabel("within - across sense cosine")
        ax.set_title(f"'bank': sense separation by layer, {title}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    _save(fig, path)


def write_plots(plan: Plan, root: pathlib.Path, out: pathlib.Path,
                spreads: dict[str, dict[str, Spread]], pretraining: list[dict[str, Any]],
                senses: list[dict[str, Any]]) -> None:
    """curves.png, families.png (from `spreads`: each task's cells, tables.cell_spreads) and
    (with senses) polysemy.png into `out`; none without matplotlib (the tables stand without
    them)."""
    try:
        from bertjax.analysis.plotting import pyplot

        pyplot()
    except ImportError as err:
        print(f"families.py: no plots: {err}")
        return
    plot_curves(plan, root, out / "curves.png", pretraining)
    plot_families(spreads, out / "families.png")
    if senses:
        plot_polysemy(senses, out / "polysemy.png")
