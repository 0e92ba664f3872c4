"""Timing helpers the benchmark scripts share (they run as `python benchmarks/NAME.py`, so this
module is importable beside them)."""

import statistics
import time
from collections.abc import Callable
from typing import Any


def median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall time of `repeats` calls of `fn`, after one untimed warm-up call."""
    fn()  # warm-up (compilation)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_steps(runner: Any, n: int) -> list[tuple[float, float]]:
    """(wall seconds, process CPU seconds over all threads) of each of `n` runner.step()s."""
    times = []
    for _ in range(n):
        start, cpu = time.perf_counter(), time.process_time()
        runner.step()
        times.append((time.perf_counter() - start, time.process_time() - cpu))
    return times
