"""Runs that differ only by their seed, summarised: per group of runs and metric, the mean, the
standard deviation and the number of seeds, so a difference can be told from seed noise.

    runs = [load_run(p) for p in glob("workdir/study/agnews/*/seed=*")]
    summary = seed_summary(runs)                  # {group: {metric: Spread}}
    header, rows = seed_table(summary)            # "0.812 ± 0.004" cells, and n

A run's seed is its workdir name: `seed=N`, the group being the parent directory's name (the
layout `.../<cell>/seed=N`), or `NAME=VALUE,...,seed=N`, the group being the name without
it. The standard deviation is the sample one (n - 1 in the denominator), 0 for one seed.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Sequence

from bertjax.analysis.report import REPORT_ORDER
from bertjax.analysis.runs import Run

_SEED = re.compile(r"(?:^|,)seed=(-?\d+)$")


@dataclasses.dataclass(frozen=True)
class Spread:
    """One metric over the seeds of a group."""

    values: tuple[float, ...]
    seeds: tuple[int, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)

    @property
    def std(self) -> float:
        """The sample standard deviation (n - 1); 0 for one seed."""
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0

    def text(self, digits: int | None = None) -> str:
        """"0.812 ± 0.004" with `digits` decimals, else 4 significant digits for the mean and
        2 for the deviation ("0.8123 ± 0.0041", "1.2e+02 ± 3.1"); the mean alone for one
        seed."""
        mean = f"{self.mean:.{digits}f}" if digits is not None else f"{self.mean:.4g}"
        if self.n == 1:
            return mean
        std = f"{self.std:.{digits}f}" if digits is not None else f"{self.std:.2g}"
        return f"{mean} ± {std}"


def seed_of(run: Run) -> tuple[str, int]:
    """(group, seed) of a run named `seed=N` (group: its parent's name) or `...,seed=N`."""
    match = _SEED.search(run.name)
    if match is None:
        raise ValueError(f"{run.path}: its name does not end in seed=N: name seeded runs "
                         "<cell>/seed=N or NAME=VALUE,...,seed=N")
    rest = run.name[:match.start()]
    return (rest or run.path.parent.name), int(match.group(1))


def seed_summary(runs: Sequence[Run], metrics: Sequence[str] | None = None, last: int = 5
                 ) -> dict[str, dict[str, Spread]]:
    """{group: {metric: Spread}}, groups in the order their first run comes; `metrics`: those
    to keep (default: every final metric some run of the group has, as Run.final gives them).
    Two runs of one group with the same seed are refused: one would hide the other."""
    values: dict[str, dict[str, list[tuple[int, float]]]] = {}
    seen: dict[str, set[int]] = {}
    for run in runs:
        group, seed = seed_of(run)
        if seed in seen.setdefault(group, set()):
            raise ValueError(f"{run.path}: group {group!r} has seed {seed} twice: give each "
                             "group's runs different seeds")
        seen[group].add(seed)
        final = run.final(last)
        for key in metrics if metrics is not None else sorted(final):
            if isinstance(final.get(key), int | float):
                values.setdefault(group, {}).setdefault(key, []).append((seed, float(final[key])))
        values.setdefault(group, {})
    return {group: {key: Spread(tuple(v for _, v in pairs), tuple(s for s, _ in pairs))
                    for key, pairs in by_metric.items()}
            for group, by_metric in values.items()}


def _metrics(summary: dict[str, dict[str, Spread]]) -> list[str]:
    """Every metric of the summary, bertjax-report's order first (REPORT_ORDER)."""
    present = {k for spreads in summary.values() for k in spreads}
    return [k for k in REPORT_ORDER if k in present] + sorted(present - set(REPORT_ORDER))


def seed_table(summary: dict[str, dict[str, Spread]], metrics: Sequence[str] | None = None,
               digits: int | None = None) -> tuple[list[str], list[list[str]]]:
    """(header, rows) for markdown: group, seeds, then "mean ± std" per metric ("-" where a
    group lacks one); `digits`: decimals (default: significant digits, Spread.text)."""
    if metrics is None:
        metrics = _metrics(summary)
    header = ["run", "seeds", *metrics]
    rows = []
    for group, spreads in summary.items():
        n = max((s.n for s in spreads.values()), default=0)
        rows.append([group, str(n), *(spreads[k].text(digits) if k in spreads else "-"
                                      for k in metrics)])
    return header, rows


def seed_csv_table(summary: dict[str, dict[str, Spread]], metrics: Sequence[str] | None = None
                   ) -> tuple[list[str], list[list[str]]]:
    """(header, rows) for CSV: group, seeds, then METRIC_mean and METRIC_std columns (full
    precision), so the numbers can be read back."""
    if metrics is None:
        metrics = _metrics(summary)
    header = ["run", "seeds", *(f"{k}_{part}" for k in metrics for part in ("mean", "std"))]
    rows = []
    for group, spreads in summary.items():
        n = max((s.n for s in spreads.values()), default=0)
        cells = []
        for k in metrics:
            cells += [repr(spreads[k].mean), repr(spreads[k].std)] if k in spreads else ["", ""]
        rows.append([group, str(n), *cells])
    return header, rows
