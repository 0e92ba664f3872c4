"""`make bench` (benchmarks/run_all.py): each benchmark's run is appended to the record
(results.jsonl) with the machine, the load, every ratio it printed and what differs between the
sides; results.md is rendered again; earlier runs are kept; a failed benchmark is recorded as
failed."""

import dataclasses
import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import results_record  # noqa: E402


def load_run_all():
    spec = importlib.util.spec_from_file_location("run_all", REPO / "benchmarks" / "run_all.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.torch
def test_quick_run_appends_the_machine_load_ratios_and_differences(tmp_path):
    out = tmp_path / "results.jsonl"
    result = subprocess.run([sys.executable, "benchmarks/run_all.py", "--quick",
                             "--only=elmo_lstm", f"--out={out}"], cwd=REPO,
                            env={**os.environ, "XLA_FLAGS": ""}, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    [run] = results_record.load(out)
    text = (tmp_path / "results.md").read_text()
    assert text == results_record.render([run])
    assert run.benchmark == "elmo_lstm --quick"
    assert run.machine.endswith(f"{os.cpu_count()} cores")
    assert "quick mode" in run.fields["conditions"]
    assert "jax " in run.fields["versions"] and run.fields["commit"]
    assert " before / " in run.fields["load"]
    assert run.fields["command"] == "`XLA_FLAGS= python benchmarks/elmo_lstm.py --quick`"
    assert [m for m, _ in run.ratios] == ["torch time / bertjax time",
                                          "torch time / bertjax-clip time"]
    assert "bertjax-clip also clips" in run.body  # the benchmark's own list of differences
    assert "| elmo_lstm --quick |" in text.split(results_record.SUMMARY_END)[0]


def test_a_failed_benchmark_is_recorded_and_earlier_runs_are_kept(tmp_path, monkeypatch):
    run_all = load_run_all()
    broken = dataclasses.replace(run_all.CLAIMS[2], quick_args=("--no_such_flag",))
    monkeypatch.setattr(run_all, "CLAIMS", (broken,))
    out = tmp_path / "results.jsonl"
    earlier = results_record.Run({"benchmark": "elmo_lstm", "date": "2026-01-01",
                                  "machine": "cpu", "conditions": "idle"}, (("a/b", 1.5),))
    results_record.append(out, [earlier])
    assert run_all.main(["--quick", f"--out={out}"]) == 1
    runs = results_record.load(out)
    assert runs[0] == earlier
    assert runs[1].fields["conditions"].startswith("failed (exit 2)") and not runs[1].ratios
    assert "--no_such_flag" in runs[1].body
    assert "1.50x (2026-01-01)" in (tmp_path / "results.md").read_text()  # still summarised


@pytest.mark.unit
def test_ratio_and_difference_lines_are_read_from_the_output():
    run_all = load_run_all()
    stdout = "\n".join([
        "  ratio bertjax/torch-hf (tokens/s): 1.23x",
        "ratio bertjax/torch, train step, batch 4 x 128, dropout 0.1: 0.95x",
        "  ratio torch time / bertjax time: 2.15x (ratio of medians); per round 2.20x",
        "bertjax is 1.75x faster than transformers (wall time of training and evaluation)",
        "bertjax is 0.73x faster (wall time of training and evaluation)",
        "train step, batch 4 x 128          162   152   1.07x",  # a table row: not a ratio line
        "what differs from the same work on both sides:",
        "  - dropout off on both sides",
        "  - bertjax also computes norms",
        "done",
    ])
    outcome = run_all.Outcome(run_all.CLAIMS[0], ["python"], 0, 1.0, 0.0, 0.0, stdout, "")
    assert outcome.ratios == [
        ("bertjax/torch-hf (tokens/s)", 1.23),
        ("bertjax/torch, train step, batch 4 x 128, dropout 0.1", 0.95),
        ("torch time / bertjax time", 2.15),
        ("bertjax/transformers (wall-time speed)", 1.75),
        ("bertjax/transformers (wall-time speed)", 0.73),
    ]
    assert outcome.differences == ["dropout off on both sides", "bertjax also computes norms"]


@pytest.mark.unit
def test_quick_sizes_never_go_into_the_results_file(capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_run_all().parse_args(["--quick"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--quick" in error and "--out" in error


@pytest.mark.unit
def test_the_out_file_is_a_jsonl_record(capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_run_all().parse_args(["--quick", "--out=/tmp/results.md"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "/tmp/results.md" in error and ".jsonl" in error


@pytest.mark.unit
def test_unknown_benchmark_name_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_run_all().parse_args(["--only=bert_step"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "bert_step" in error and "bert_pretraining_step" in error


@pytest.mark.unit
def test_extra_arguments_go_to_the_one_benchmark_named(monkeypatch, capsys):
    run_all = load_run_all()
    seen = {}

    def fake_run(command, **kwargs):
        seen["command"] = command
        return subprocess.CompletedProcess(command, 0, "ratio a/b: 1.50x\n", "")

    monkeypatch.setattr(run_all.subprocess, "run", fake_run)
    outcome = run_all.run(run_all.CLAIMS[0], False, 60, "--rows=run_clm,gpt_same_recipe --x='a b'")
    assert seen["command"][-2:] == ["--rows=run_clm,gpt_same_recipe", "--x=a b"]
    assert outcome.ratios == [("a/b", 1.5)]
    with pytest.raises(SystemExit):
        run_all.parse_args(["--args=--rows=run_clm", "--only=elmo_lstm,time_to_quality"])
    assert "name that benchmark alone with --only" in capsys.readouterr().err
