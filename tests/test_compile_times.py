"""tests/compile_times.py: each test's XLA compiles are recorded under the jitted function's
name, and the summary ranks them."""

import json
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]

SAMPLE = '''
import jax
import jax.numpy as jnp


def doubled_sine(x):
    return jnp.sin(x) * 2


def test_compiles_once():
    jax.jit(doubled_sine)(jnp.ones(3))


def test_compiles_nothing():
    assert True
'''


def test_each_test_records_its_compiles_by_function(tmp_path):
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    out = tmp_path / "compiles.jsonl"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "tests.compile_times", f"--compile-times={out}",
                          str(tmp_path / "test_sample.py")],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    compiled, nothing = [json.loads(line) for line in out.read_text().splitlines()]
    assert compiled["test"].endswith("test_compiles_once")
    assert compiled["by_function"]["jit(doubled_sine)"]["count"] == 1
    assert compiled["compile_s"] >= compiled["by_function"]["jit(doubled_sine)"]["seconds"] > 0
    assert compiled["trace_s"] > 0 and compiled["lower_s"] > 0
    assert nothing["test"].endswith("test_compiles_nothing") and nothing["compiles"] == 0

    summary = subprocess.run([sys.executable, "-m", "tests.compile_times", str(out)],
                             cwd=REPO, capture_output=True, text=True, timeout=120)
    assert summary.returncode == 0, summary.stderr[-2000:]
    assert summary.stdout.startswith("2 tests: ")
    by_test = summary.stdout.split("by test:")[1]
    assert by_test.index("test_compiles_once") < by_test.index("test_compiles_nothing")
    assert "jit(doubled_sine)" in summary.stdout.split("by jitted function:")[1]
