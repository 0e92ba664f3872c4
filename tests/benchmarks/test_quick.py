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


def test_the_fine_tuning_profile_attributes_the_packed_step_by_name_stack(tmp_path):
    """--profile runs the packed side on real AG News rows under jax.profiler and prints the
    name-stack table of its train step: every op found in the step's HLO dump, the matrix
    products and the optimizer each a row, in milliseconds per step."""
    result = subprocess.run(
        [sys.executable, "benchmarks/finetune_classification.py", "--quick",
         f"--profile={tmp_path}"], cwd=REPO, env=process_env(), capture_output=True, text=True,
        timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "bertjax-packed under the profiler: 3 steps" in out, out
    rows = dict(re.findall(r"^\| ([^|]+) \| ([\d.]+)% \|", out, re.M))
    assert {"matrix products", "optimizer update", "dropout and its random bits",
            "LayerNorm"} <= set(rows), out
    assert abs(sum(float(v) for v in rows.values()) - 100) < 1, rows
    assert "ops of other programs" not in out  # the step's own HLO names every op
    assert list(tmp_path.glob("hlo/*jit_train_step*after_optimizations.txt"))


@pytest.mark.e2e
@pytest.mark.torch
@pytest.mark.parametrize("script", QUICK)
def test_quick_mode_runs(script):
    result = subprocess.run([sys.executable, f"benchmarks/{script}", "--quick"], cwd=REPO,
                            env=process_env(), capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"\d\.\d+x", result.stdout), result.stdout[-2000:]  # its ratio
