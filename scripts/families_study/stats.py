"""Paired statistics of the learning curve: a pretrained point and its random twin share the
same labelled draw, so the draw's difference is the unit, and its 95% interval is Student's
t over the draws (n - 1 degrees of freedom). "Pretrained better" only where the whole
interval lies above 0; with one draw there is no interval and nothing is claimed.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence

CONFIDENCE = 0.95


def t_quantile(probability: float, degrees: int) -> float:
    """Student's t quantile (scipy's), e.g. t_quantile(0.975, 2) = 4.303."""
    from scipy import stats

    return float(stats.t.ppf(probability, degrees))


@dataclasses.dataclass(frozen=True)
class Paired:
    """Per-draw differences a - b, their mean and 95% interval (nan with one draw)."""

    differences: tuple[float, ...]
    mean: float
    low: float
    high: float

    @property
    def verdict(self) -> str:
        """"better" (interval above 0), "worse" (below 0), "not shown" or "one draw"."""
        if len(self.differences) < 2:
            return "one draw"
        if self.low > 0:
            return "better"
        if self.high < 0:
            return "worse"
        return "not shown"


def paired(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> Paired:
    """The paired comparison of a and b, draw by draw (the same order in both)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"{len(a)} and {len(b)} values: pair the same draws, at least one")
    diffs = tuple(x - y for x, y in zip(a, b, strict=True))
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return Paired(diffs, mean, math.nan, math.nan)
    half = (t_quantile(0.5 + confidence / 2, len(diffs) - 1) * statistics.stdev(diffs)
            / math.sqrt(len(diffs)))
    return Paired(diffs, mean, mean - half, mean + half)
