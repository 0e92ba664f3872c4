"""tests/schedule.py: files are handed to the xdist workers longest first, by tier."""

import pathlib
import subprocess
import sys

import pytest

from tests.schedule import file_seconds, load_durations, tier_key

REPO = pathlib.Path(__file__).resolve().parents[1]

RECORDED = {"tests/a.py": 5.0, "tests/a.py [e2e]": 900.0, "tests/b.py": 60.0}


@pytest.mark.unit
def test_a_files_time_is_that_of_the_tier_selected():
    fast = file_seconds([("tests/a.py::t1", False), ("tests/a.py::t2", False),
                         ("tests/b.py::t", False), ("tests/c.py::t", False)], RECORDED)
    assert fast == {"tests/a.py": 5.0, "tests/b.py": 60.0, "tests/c.py": 0.0}
    e2e = file_seconds([("tests/a.py::slow", True), ("tests/b.py::t", False)], RECORDED)
    assert e2e["tests/a.py"] == 900.0
    both = file_seconds([("tests/a.py::t1", False), ("tests/a.py::slow", True)], RECORDED)
    assert both["tests/a.py"] == 905.0


@pytest.mark.unit
def test_the_record_keys_the_e2e_tier_apart():
    assert tier_key("tests/x.py", True) == "tests/x.py [e2e]"
    assert tier_key("tests/x.py", False) == "tests/x.py"


def test_collection_puts_the_longest_files_first():
    """pytest itself, on this repository's record: files collected longest first, each
    file's tests together."""
    names = ["tests/test_files.py", "tests/training/test_faults.py", "tests/test_readme.py"]
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.schedule", "-m",
                          "not e2e", "--collect-only", "-q", *names],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    files = [line.split("::")[0] for line in out.stdout.splitlines() if "::" in line]
    order = list(dict.fromkeys(files))
    recorded = load_durations()
    assert order == sorted(names, key=lambda name: -recorded.get(name, 0.0)), out.stdout[-2000:]
    assert files == [name for name in order for _ in range(files.count(name))]
