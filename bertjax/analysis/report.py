"""A sweep's results side by side: one row per run (its swept settings, then its final metrics)
as a markdown table and a CSV, and its loss / accuracy curves as one PNG.

Columns: `run`, the settings that differ between the runs (runs.swept_bindings), then the
metrics in REPORT_ORDER that any run has (a run without one shows "-"), then the other dev_
and best_ metrics. Numbers are rounded to 4 significant digits.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence

from bertjax import files
from bertjax.analysis.runs import Run, swept_bindings

# The metrics a paper's ablation table reads, in the order shown.
REPORT_ORDER = ("steps", "pretrain_steps", "pretrain_mlm_perplexity", "pretrain_perplexity",
                "pretrain_mlm_accuracy", "pretrain_lm_accuracy", "pretrain_nsp_accuracy",
                "mlm_perplexity", "perplexity", "mlm_accuracy", "lm_accuracy", "nsp_accuracy",
                "loss", "dev_accuracy", "best_accuracy", "dev_f1", "best_f1",
                "dev_exact_match", "best_exact_match", "dev_pearson", "best_pearson")
# Curves drawn, one panel each when any run has them: (panel title, metric keys tried in order).
PANELS = (("pretraining loss", ("pretrain:loss",)), ("training loss", ("loss",)),
          ("accuracy", ("dev_accuracy", "mlm_accuracy", "lm_accuracy", "accuracy")))


def _rounded(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def table(runs: Sequence[Run], last: int = 5) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the report: run name, swept settings, final metrics."""
    finals = [run.final(last) for run in runs]
    bindings = swept_bindings(list(runs))
    setting_names = list(dict.fromkeys(k for b in bindings for k in b))
    present = {k for final in finals for k in final}
    metrics = [k for k in REPORT_ORDER if k in present]
    metrics += sorted(k for k in present - set(metrics) if k.startswith(("dev_", "best_")))
    header = ["run", *setting_names, *metrics]
    rows = [[run.name, *(b.get(k, "-") for k in setting_names),
             *(_rounded(final.get(k)) for k in metrics)]
            for run, b, final in zip(runs, bindings, finals, strict=True)]
    return header, rows


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub markdown table (| in a cell escaped)."""
    esc = lambda cells: "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"  # noqa: E731
    return "\n".join([esc(header), "|" + "---|" * len(header), *map(esc, rows)]) + "\n"


def csv_text(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """The same table as CSV."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def _series(run: Run, key: str) -> tuple[list[int], list[float]]:
    """A metric's curve; `pretrain:KEY` reads the pretraining run a fine-tuning run started from."""
    if key.startswith("pretrain:"):
        return run.init.series(key.split(":", 1)[1]) if run.init else ([], [])
    return run.series(key)


def plot_curves(runs: Sequence[Run], path: str | os.PathLike) -> files.Path:
    """Loss and accuracy against step, one line per run, one panel per PANELS entry that any
    run has data for; written to `path` (PNG)."""
    from bertjax.analysis.plotting import pyplot

    plt = pyplot()
    panels = []
    for title, keys in PANELS:
        lines = []
        for run in runs:
            for key in keys:
                steps, values = _series(run, key)
                if steps:
                    lines.append((run.name, key, steps, values))
                    break
        if lines:
            panels.append((title, lines))
    if not panels:
        raise ValueError("no loss or accuracy was logged by these runs: nothing to plot")
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.8), squeeze=False,
                             layout="constrained")
    for ax, (title, lines) in zip(axes[0], panels, strict=True):
        for name, key, steps, values in lines:
            label = name if title != "accuracy" else f"{name} ({key.split(':')[-1]})"
            ax.plot(steps, values, marker="." if len(steps) < 30 else None, label=label)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="best")
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=90)
    plt.close(fig)
    path = files.as_path(path)  # local or gs://
    files.write_bytes(path, image.getvalue())
    return path
