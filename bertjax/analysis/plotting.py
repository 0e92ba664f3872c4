"""Heat-map grids written to PNG: the one drawing routine the analysis pictures share.

matplotlib is an optional dependency (the `notebooks` extra), imported only when a picture is
drawn, so `bertjax.analysis` computes vectors, similarities and attention without it. The
Agg backend is chosen unless a notebook already picked one: pictures are files first.
"""

from __future__ import annotations

import math
import os
import pathlib
import sys
import types
from collections.abc import Sequence

import numpy as np

INSTALL_HINT = "pip install bertjax[notebooks]"


def pyplot() -> types.ModuleType:
    """matplotlib.pyplot (Agg backend when none is set), or one line saying what to install."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError(
            f"bertjax.analysis plots need matplotlib: {INSTALL_HINT} (or pip install matplotlib)"
        ) from None
    if "MPLBACKEND" not in os.environ and "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def heatmap_grid(
    maps_PxRxC: np.ndarray | Sequence[np.ndarray],
    path: str | os.PathLike,
    titles: Sequence[str],
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    columns: int | None = None,
    value_range: tuple[float, float] | None = None,
    annotate: bool = False,
    suptitle: str | None = None,
    cmap: str = "viridis",
    panel_inches: float = 2.6,
) -> pathlib.Path:
    """Draw P heat maps (rows R x columns C each) side by side on a grid; write a PNG.

    One shared colour scale (`value_range`, else the data's range) so panels compare;
    `annotate` prints each cell's value (for small maps such as 5 x 5 similarities).
    Returns the path written; the figure is closed (nothing accumulates in a long session).
    """
    plt = pyplot()
    maps = [np.asarray(m, np.float64) for m in maps_PxRxC]
    P = len(maps)
    if len(titles) != P:
        raise ValueError(f"{len(titles)} titles for {P} heat maps: give one title per map")
    columns = min(P, columns or P)
    rows = math.ceil(P / columns)
    lo, hi = value_range or (min(m.min() for m in maps), max(m.max() for m in maps))
    R, C = maps[0].shape
    scale = max(1.0, max(R, C) / 8)  # long token sequences get larger panels
    fig, axes = plt.subplots(rows, columns, squeeze=False, layout="constrained",
                             figsize=(columns * panel_inches * scale,
                                      rows * panel_inches * scale + 0.6))
    image = None
    for i, ax in enumerate(axes.flat):
        if i >= P:
            ax.axis("off")
            continue
        image = ax.imshow(maps[i], vmin=lo, vmax=hi, cmap=cmap)
        ax.set_title(titles[i], fontsize=9)
        ax.set_xticks(range(C), col_labels, rotation=90, fontsize=7)
        ax.set_yticks(range(R), row_labels, fontsize=7)
        if annotate:
            for (r, c), value in np.ndenumerate(maps[i]):
                shade = "black" if value > lo + 0.6 * (hi - lo) else "white"
                ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=6, color=shade)
    if suptitle:
        fig.suptitle(suptitle, fontsize=11)
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8)
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
