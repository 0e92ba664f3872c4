"""benchmarks/accelerator_levers.py on the CPU: real-text batches from accelerator_batches.py
(WikiText-2), every row compiled first into the persistent compilation cache, then each timed
in its own process from that cache; the packed row carries more real tokens than the unpacked
one (end-to-end tier: about a minute)."""

import json
import subprocess
import sys

import pytest

from tests.benchmarks.test_quick import REPO
from tests.process_env import process_env


@pytest.mark.e2e
def test_packing_rows_compile_once_and_time_from_the_cache(wikitext_valid, tmp_path):
    env = {**process_env(), "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "cache")}
    batches = subprocess.run(
        [sys.executable, "benchmarks/accelerator_batches.py", f"--out={tmp_path / 'b'}",
         "--lengths=64", "--batch=8", "--small"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert batches.returncode == 0, batches.stderr[-3000:]
    levers = subprocess.run(
        [sys.executable, "benchmarks/accelerator_levers.py", "--quick", "--groups=packing",
         f"--batches={tmp_path / 'b'}", f"--out={tmp_path / 'out'}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert levers.returncode == 0, levers.stderr[-3000:]
    record = json.loads((tmp_path / "out" / "levers.json").read_text())
    compiled = {r["label"]: r for r in record["compiled"]}
    timed = {r["label"]: r for r in record["results"]}
    assert set(compiled) == set(timed) == {"unpacked", "packed"}
    assert all(r["ok"] for r in [*compiled.values(), *timed.values()]), levers.stdout[-3000:]
    for label, row in timed.items():  # the first timed step traces and loads, compiles nothing
        ahead = compiled[label]
        assert row["first_step_s"] < ahead["lower_s"] + 0.5 * ahead["compile_s"], (row, ahead)
    assert timed["packed"]["real_tokens"] > timed["unpacked"]["real_tokens"]
    assert "| packed |" in (tmp_path / "out" / "levers.md").read_text()
