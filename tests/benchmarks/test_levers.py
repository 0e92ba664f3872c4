"""benchmarks/accelerator_levers.py on the CPU: real-text batches from accelerator_batches.py
(WikiText-2), every row compiled first into the persistent compilation cache, then each timed
in its own process from that cache; each row counts the real tokens of the batch it timed
(end-to-end tier: about a minute). Whether packing carries more real tokens is a property of
the corpus and length, measured by benchmarks/packing.py: at 64 tokens WikiText-2's instances
nearly fill a row either way, and one 8-row batch of either layout may hold more."""

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
    made = json.loads((tmp_path / "b" / "batches.json").read_text())
    for label, row in timed.items():
        share = made[f"bert_64_{label}"]["real_token_share"]
        assert row["real_tokens"] == round(share * 8 * 64) and row["tokens"] == 8 * 64, label
    assert "| packed |" in (tmp_path / "out" / "levers.md").read_text()
