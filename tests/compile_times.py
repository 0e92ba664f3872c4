"""pytest plugin: seconds each test spends in XLA compiles, by jitted function.

Most of the fast tier's time is compiling: a tiny model's train step takes seconds to compile
on XLA:CPU and milliseconds to run. To see which tests and which programs pay it:

    .venv/bin/python -m pytest -p tests.compile_times --compile-times=/tmp/compiles.jsonl ...
    .venv/bin/python -m tests.compile_times /tmp/compiles.jsonl

Each test process (both xdist workers) appends one JSON line per test to the file: compile
seconds and count by jitted function (module fixtures count in the first test that uses
them), persistent-cache hits and misses, tracing and lowering seconds. Only what runs in the
test process is counted: tools started as their own processes are not.
"""

import collections
import json
import sys
from typing import Any

import jax.monitoring
import pytest

COMPILE = "/jax/core/compile/backend_compile_duration"
TRACE = "/jax/core/compile/jaxpr_trace_duration"
LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
CACHE_HITS = "/jax/compilation_cache/cache_hits"
CACHE_MISSES = "/jax/compilation_cache/cache_misses"

_current: dict[str, Any] = {}
_listening = False


def _reset() -> None:
    _current.clear()
    _current.update(compile_s=0.0, compiles=0, trace_s=0.0, lower_s=0.0, cache_hits=0,
                    cache_misses=0, by_function=collections.defaultdict(lambda: [0.0, 0]))


def _on_duration(event: str, duration: float, **kwargs: Any) -> None:
    if not _current:
        return
    if event == COMPILE:
        _current["compile_s"] += duration
        _current["compiles"] += 1
        seconds_count = _current["by_function"][str(kwargs.get("fun_name"))]
        seconds_count[0] += duration
        seconds_count[1] += 1
    elif event == TRACE:
        _current["trace_s"] += duration
    elif event == LOWER:
        _current["lower_s"] += duration


def _on_event(event: str, **kwargs: Any) -> None:
    if _current and event == CACHE_HITS:
        _current["cache_hits"] += 1
    elif _current and event == CACHE_MISSES:
        _current["cache_misses"] += 1


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--compile-times", metavar="PATH", default=None,
                     help="append each test's XLA compile seconds to PATH (JSON lines)")


def pytest_configure(config: pytest.Config) -> None:
    global _listening
    if config.getoption("--compile-times") and not _listening:  # once per process
        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        jax.monitoring.register_event_listener(_on_event)
        _listening = True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    path = item.config.getoption("--compile-times")
    if path:
        _reset()
    yield
    if path:
        record = {"test": item.nodeid, **_current,
                  "by_function": {name: {"seconds": round(s, 3), "count": n}
                                  for name, (s, n) in _current["by_function"].items()}}
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        _current.clear()


def summary(path: str, top: int = 15) -> str:
    """The tests and the jitted functions that compiled longest, from a --compile-times file."""
    with open(path, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    functions: dict[str, list] = collections.defaultdict(lambda: [0.0, 0])
    for record in records:
        for name, f in record["by_function"].items():
            functions[name][0] += f["seconds"]
            functions[name][1] += f["count"]
    total = sum(r["compile_s"] for r in records)
    lines = [f"{len(records)} tests: {total:,.1f} s compiling "
             f"({sum(r['compiles'] for r in records):,} compiles; persistent cache "
             f"{sum(r['cache_hits'] for r in records)} hits, "
             f"{sum(r['cache_misses'] for r in records)} misses), tracing "
             f"{sum(r['trace_s'] for r in records):,.1f} s, lowering "
             f"{sum(r['lower_s'] for r in records):,.1f} s", "", "by jitted function:"]
    for name, (seconds, count) in sorted(functions.items(), key=lambda x: -x[1][0])[:top]:
        lines.append(f"{seconds:9.1f} s {count:6d}x  {name}")
    lines += ["", "by test:"]
    for record in sorted(records, key=lambda r: -r["compile_s"])[:top]:
        lines.append(f"{record['compile_s']:9.1f} s {record['compiles']:6d}x  {record['test']}")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.compile_times PATH (a file written by --compile-times)")
    print(summary(sys.argv[1]))
