"""Every benchmark that has a --quick mode runs it, so none of them rots between `make bench`
runs: each must exit 0 and print the ratio it exists to measure (end-to-end tier; the fast tier
runs `run_all.py --quick` on one of them, tests/benchmarks/test_run_all.py)."""

import pathlib
import re
import subprocess
import sys

import pytest

from tests.process_env import process_env

REPO = pathlib.Path(__file__).resolve().parents[2]
QUICK = sorted(p.name for p in (REPO / "benchmarks").glob("*.py")
               if "--quick" in p.read_text(encoding="utf-8") and p.name != "run_all.py")


def test_the_benchmarks_with_a_quick_mode_are_found():
    assert {"elmo_lstm.py", "finetune_classification.py"} <= set(QUICK)


@pytest.mark.e2e
@pytest.mark.torch
@pytest.mark.parametrize("script", QUICK)
def test_quick_mode_runs(script):
    result = subprocess.run([sys.executable, f"benchmarks/{script}", "--quick"], cwd=REPO,
                            env=process_env(), capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"\d\.\d+x", result.stdout), result.stdout[-2000:]  # its ratio
