"""benchmarks/token_store.py --quick: it builds a store, starts a source on the text and on the
store (twice) in fresh processes (timed from the process's start to its first batch), checks
they give the same first batch, kills a build halfway and resumes it to the uninterrupted
build's bytes, and prints its ratios."""

import json
import re
import subprocess
import sys

from tests.benchmarks.test_quick import REPO
from tests.conftest import shared_file
from tests.process_env import process_env


def test_quick_mode_builds_starts_and_prints_its_ratios(tmp_path):
    shared_file("wikitext-2/valid.txt")
    result = subprocess.run(
        [sys.executable, "benchmarks/token_store.py", "--quick", "--starts=2",
         f"--json={tmp_path}/r.json"],
        cwd=REPO, env=process_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"ratio start-up store over text at 0.5 MB \(bert\): \d+\.\d+x",
                     result.stdout), result.stdout
    assert re.search(r"ratio peak memory store over text .*: \d+\.\d+x", result.stdout)
    assert re.search(r"ratio start-up store largest over smallest \(bert\): \d+\.\d+x",
                     result.stdout)
    assert re.search(r"store peak memory growth smallest to largest \(bert\): -?\d+ MiB",
                     result.stdout)
    row, = json.loads((tmp_path / "r.json").read_text())
    assert row["same_first_examples"] and row["build_mb_per_s"] > 0
    assert row["store"]["process_to_batch_s"] > row["store"]["seconds"] > 0
    assert len(row["store"]["process_to_batch_all"]) == 2  # --starts: the median of two
    assert row["store"]["same_first_over_starts"]
    assert row["resume"]["identical"] and 0 < row["resume"]["killed_at_shards"] < (
        row["resume"]["shards"])
