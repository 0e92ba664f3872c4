"""benchmarks/results.md: its summary is what its run sections say (a number edited by hand in
the summary fails here), no recorded run is ever dropped, and appending a run keeps the others."""

import pathlib
import re
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import results_record  # noqa: E402

RESULTS = REPO / "benchmarks" / "results.md"
DATE = re.compile(r"^\d{4}-\d\d-\d\d( \d\d:\d\d UTC)?$")

# Every run recorded so far, as (benchmark, date): runs are appended, never removed.
RECORDED = {
    ("bert_pretraining_step --size=tiny --steps=1 --rounds=20", "2026-11-22"),
    ("bert_pretraining_step --size=base --steps=1 --rounds=4", "2026-11-22"),
    ("pretraining_pipeline --quick --baseline=main", "2026-11-23"),
    ("bert_pretraining_step --size=base", "2026-11-23 21:15 UTC"),
    ("gpt2_step_and_generate --size=gpt2_small", "2026-11-23 21:15 UTC"),
    ("elmo_lstm", "2026-11-23 21:15 UTC"),
    ("elmo_bilm_step --size=small", "2026-11-23 21:15 UTC"),
    ("pretraining_pipeline", "2026-11-23 21:15 UTC"),
    ("finetune_classification", "2026-11-23 21:15 UTC"),
    ("gpt2_step_and_generate --size=gpt2_small", "2026-11-24 00:47 UTC"),
    ("finetune_classification", "2026-11-24 00:51 UTC"),
    ("bert_pretraining_step --size=base", "2026-11-24 22:03 UTC"),
    ("finetune_classification", "2026-11-24 22:11 UTC"),
    ("gpt2_step_and_generate --size=gpt2_small", "2026-11-24 22:21 UTC"),
    ("bert_pretraining_step --size=base", "2026-11-25 06:26 UTC"),
    ("finetune_classification", "2026-11-25 06:30 UTC"),
    ("finetune_classification", "2026-11-25 15:05 UTC"),
    ("finetune_classification", "2026-11-25 21:28 UTC"),
    ("finetune_classification", "2026-11-26 07:17 UTC"),
    ("bert_pretraining_step --size=base", "2026-11-26 10:58 UTC"),
    ("gpt2_step_and_generate --size=gpt2_small", "2026-11-26 10:58 UTC"),
    ("accelerator_step", "2026-11-26"),
    ("multihost_loop --rounds=2 --steps=300", "2026-12-02 08:28 UTC"),
}


def run(benchmark, date, machine, conditions, *ratios):
    fields = {"benchmark": benchmark, "date": date, "machine": machine, "conditions": conditions}
    return results_record.Run(fields, tuple(ratios), "```\nits output\n```")


def summary_rows(text):
    block = text.split(results_record.SUMMARY_START)[1].split(results_record.SUMMARY_END)[0]
    return [line for line in block.splitlines() if line.startswith("| ") and "---" not in line
            and not line.startswith("| benchmark |")]


def test_the_summary_is_generated_from_the_runs():
    text = RESULTS.read_text(encoding="utf-8")
    assert results_record.regenerate(text) == text, (
        "benchmarks/results.md's summary does not match its runs: run "
        "`python benchmarks/results_record.py`, never edit the summary by hand")


def test_a_summary_number_edited_by_hand_is_caught(tmp_path):
    text = RESULTS.read_text(encoding="utf-8")
    row = summary_rows(text)[0]
    number = re.search(r"\d+\.\d\dx", row)[0]
    edited_row = row.replace(number, f"{float(number[:-1]) + 0.1:.2f}x", 1)
    edited = text.replace(row, edited_row, 1)
    assert edited != text and results_record.regenerate(edited) != edited
    path = tmp_path / "results.md"
    path.write_text(edited, encoding="utf-8")
    assert results_record.main([f"--results={path}", "--check"]) == 1
    assert results_record.main([f"--results={path}"]) == 0
    assert path.read_text(encoding="utf-8") == text  # regenerated back to the runs' numbers


def test_no_recorded_run_is_dropped_and_each_is_complete():
    runs = results_record.parse(RESULTS.read_text(encoding="utf-8"))
    assert RECORDED <= {(r.benchmark, r.date) for r in runs}
    assert {r.machine for r in runs} >= {"AMD EPYC, 2 cores", "Intel Xeon, 2 cores",
                                         "NVIDIA H100 80GB HBM3"}
    for r in runs:
        assert DATE.match(r.date), r.date
        assert "commit" in r.fields and "versions" in r.fields, r.fields
        failed = r.fields["conditions"].startswith("failed")
        assert bool(r.ratios) != failed, (r.benchmark, r.date)


def test_summary_gives_the_latest_idle_run_and_the_range_on_each_machine():
    runs = [run("b", "2026-01-02 10:00 UTC", "cpu A", "idle", ("x/y", 1.10)),
            run("b", "2026-01-03 10:00 UTC", "cpu A", "loaded (load 5)", ("x/y", 0.80)),
            run("b", "2026-01-01 10:00 UTC", "cpu A", "idle", ("x/y", 1.20), ("x/z", 2.0)),
            run("b", "2026-01-04 10:00 UTC", "cpu B", "idle", ("x/y", 0.50)),
            run("b", "2026-01-05 10:00 UTC", "cpu A", "failed (exit 1)")]
    rows = summary_rows(results_record.render(results_record.HEADER, runs))
    assert rows == [
        "| b | cpu A | x/y | 1.10x (2026-01-02 10:00 UTC) | 0.80-1.20x (3 runs, 1 loaded) |",
        "| b | cpu A | x/z | 2.00x (2026-01-01 10:00 UTC) | 2.00x (1 run, 0 loaded) |",
        "| b | cpu B | x/y | 0.50x (2026-01-04 10:00 UTC) | 0.50x (1 run, 0 loaded) |",
    ]
    only_loaded = [run("c", "2026-01-01", "cpu A", "loaded", ("x/y", 3.0))]
    assert "| c | cpu A | x/y | none | 3.00x (1 run, 1 loaded) |" in summary_rows(
        results_record.render(results_record.HEADER, only_loaded))


def test_append_keeps_every_earlier_section_and_updates_the_summary(tmp_path):
    path = tmp_path / "results.md"
    first = run("b", "2026-01-01 10:00 UTC", "cpu A", "idle", ("x/y", 1.5))
    results_record.append(path, [first])  # creates the file
    before = path.read_text(encoding="utf-8")
    section = before.split(results_record.RUNS_HEADING)[1]
    results_record.append(path, [run("b", "2026-01-02 10:00 UTC", "cpu A", "idle",
                                     ("x/y", 1.25))])
    after = path.read_text(encoding="utf-8")
    assert after.split(results_record.RUNS_HEADING)[1].startswith(section)
    assert summary_rows(after) == [
        "| b | cpu A | x/y | 1.25x (2026-01-02 10:00 UTC) | 1.25-1.50x (2 runs, 0 loaded) |"]
    assert [r.date for r in results_record.parse(after)] == ["2026-01-01 10:00 UTC",
                                                            "2026-01-02 10:00 UTC"]


def test_a_run_without_its_required_lines_is_refused_by_name():
    text = results_record.render(results_record.HEADER, [
        run("b", "2026-01-01", "cpu A", "idle", ("x/y", 1.5))])
    broken = text.replace("- machine: cpu A\n", "")
    with pytest.raises(results_record.RecordError, match="machine"):
        results_record.parse(broken)
    with pytest.raises(results_record.RecordError, match="conditions"):
        results_record.parse(text.replace("- conditions: idle", "- conditions: quiet"))
