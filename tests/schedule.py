"""pytest plugin: the test files with the longest recorded times start first.

`make test` and `make test-e2e` run two xdist workers that each take whole files (`--dist
loadfile`). pytest-xdist hands files out in order of their test count, so a file holding one
long test (a 15-minute TPU compile, a fixture that trains two runs) can start last and run
alone while the other worker waits. With this plugin and `--no-loadscope-reorder`, files are
handed out longest first by the seconds recorded in tests/durations.json: the longest ones
overlap with everything else and the short ones fill in at the end (longest processing time
first). Files with no recorded time go after the others, in collection order. A file's time is
that of the tier being run: its e2e tests count only under `-m e2e`.

To refresh the record after tests move or get faster (each tier updates only its own entries):

    .venv/bin/python -m pytest -p tests.schedule --store-durations -m "not e2e" -n 2 ...
"""

import collections
import json
import os
import pathlib

import pytest

DURATIONS = pathlib.Path(__file__).with_name("durations.json")
E2E = "e2e"
_seconds: collections.Counter = collections.Counter()  # this run's, by tier_key


def tier_key(path: str, e2e: bool) -> str:
    """The record's key: the test file, plus ' [e2e]' for its end-to-end tests."""
    return f"{path} [{E2E}]" if e2e else path


def load_durations(path: pathlib.Path = DURATIONS) -> dict[str, float]:
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store-durations", action="store_true", default=False,
                     help="write each test file's seconds of this run into tests/durations.json")


def file_seconds(tests: list[tuple[str, bool]], recorded: dict[str, float]) -> dict[str, float]:
    """Recorded seconds of each file for the (nodeid, is_e2e) tests selected: a file's e2e
    time counts only when its e2e tests run, its fast-tier time only when those do."""
    seconds: dict[str, float] = collections.Counter()
    for path, e2e in {(nodeid.split("::")[0], e2e) for nodeid, e2e in tests}:
        seconds[path] += recorded.get(tier_key(path, e2e), 0.0)
    return seconds


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seconds = file_seconds([(item.nodeid, item.get_closest_marker(E2E) is not None)
                            for item in items], load_durations())
    items.sort(key=lambda item: -seconds[item.nodeid.split("::")[0]])  # stable: files stay whole


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _seconds[tier_key(report.nodeid.split("::")[0], E2E in report.keywords)] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if not config.getoption("store_durations") or hasattr(config, "workerinput"):
        return  # the controller writes once, from every worker's reports
    merged = {**load_durations(),
              **{k: round(v, 1) for k, v in _seconds.items()}}
    partial = DURATIONS.with_suffix(".json.tmp")
    partial.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n",
                       encoding="utf-8")
    os.replace(partial, DURATIONS)
