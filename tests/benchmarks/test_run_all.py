"""`make bench` (benchmarks/run_all.py): one results file with the machine, the load and each
benchmark's ratios; a failed benchmark never overwrites the last good results."""

import dataclasses
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def load_run_all():
    spec = importlib.util.spec_from_file_location("run_all", REPO / "benchmarks" / "run_all.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.torch
def test_quick_run_writes_the_machine_load_and_ratio(tmp_path):
    out = tmp_path / "results.md"
    result = subprocess.run([sys.executable, "benchmarks/run_all.py", "--quick",
                             "--only=elmo_lstm", f"--out={out}"], cwd=REPO,
                            env={**os.environ, "XLA_FLAGS": ""}, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    text = out.read_text()
    assert f"{os.cpu_count()} cores" in text and "jax " in text and "bertjax commit" in text
    summary = text.split("## Summary")[1].split("## elmo_lstm")[0]
    assert re.search(r"\d+\.\d+x", summary), summary  # the ratio, quoted in the summary row
    assert re.search(r"\| \d+\.\d+ / \d+\.\d+ \|", summary)  # load before / after
    assert "`XLA_FLAGS= python benchmarks/elmo_lstm.py --quick`" in text
    assert "Quick mode" in text


def test_a_failed_benchmark_leaves_the_last_results(tmp_path, monkeypatch):
    run_all = load_run_all()
    broken = dataclasses.replace(run_all.CLAIMS[2], quick_args=("--no_such_flag",))
    monkeypatch.setattr(run_all, "CLAIMS", (broken,))
    out = tmp_path / "results.md"
    out.write_text("the last good results\n")
    assert run_all.main(["--quick", f"--out={out}"]) == 1
    assert out.read_text() == "the last good results\n"
    partial = (tmp_path / "results.md.partial").read_text()
    assert "FAILED (exit 2)" in partial and "--no_such_flag" in partial


def test_unknown_benchmark_name_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_run_all().parse_args(["--only=bert_step"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "bert_step" in error and "bert_pretraining_step" in error
