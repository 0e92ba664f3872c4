"""benchmarks/results.jsonl, the benchmark record, and results.md rendered from it: results.md is
the rendering of the record (a figure edited by hand in it fails here), no recorded run is ever
dropped, appending a run keeps the others, and a run that breaks the format is refused."""

import json
import pathlib
import re
import sys

import pytest

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import results_record  # noqa: E402

RECORD = REPO / "benchmarks" / "results.jsonl"
RESULTS_MD = REPO / "benchmarks" / "results.md"
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


def test_results_md_is_the_rendering_of_the_record():
    assert RESULTS_MD.read_text(encoding="utf-8") == results_record.render(
        results_record.load(RECORD)), (
        "benchmarks/results.md is not the rendering of benchmarks/results.jsonl: run "
        "`python benchmarks/results_record.py`, never edit results.md by hand")
    assert results_record.main(["--check"]) == 0


def test_a_figure_edited_by_hand_in_results_md_is_caught(tmp_path):
    record = tmp_path / "results.jsonl"
    record.write_text(RECORD.read_text(encoding="utf-8"), encoding="utf-8")
    text = RESULTS_MD.read_text(encoding="utf-8")
    row = summary_rows(text)[0]
    number = re.search(r"\d+\.\d\dx", row)[0]
    edited = text.replace(row, row.replace(number, f"{float(number[:-1]) + 0.1:.2f}x", 1), 1)
    assert edited != text
    (tmp_path / "results.md").write_text(edited, encoding="utf-8")
    assert results_record.main([f"--results={record}", "--check"]) == 1
    assert results_record.main([f"--results={record}"]) == 0
    assert (tmp_path / "results.md").read_text(encoding="utf-8") == text  # rendered back


def test_no_recorded_run_is_dropped_and_each_is_complete():
    runs = results_record.load(RECORD)
    assert RECORDED <= {(r.benchmark, r.date) for r in runs}
    assert {r.machine for r in runs} >= {"AMD EPYC, 2 cores", "Intel Xeon, 2 cores",
                                         "NVIDIA H100 80GB HBM3"}
    for r in runs:
        assert DATE.match(r.date), r.date
        assert "commit" in r.fields and "versions" in r.fields, r.fields
        assert bool(r.ratios) != r.failed, (r.benchmark, r.date)
    text = RESULTS_MD.read_text(encoding="utf-8")
    for r in runs:  # every run's figures are in the rendering
        assert r.markdown() in text
        assert all(f"| {measure} | {ratio:.2f}x |" in text for measure, ratio in r.ratios)


def test_summary_gives_the_latest_idle_run_and_the_range_on_each_machine():
    runs = [run("b", "2026-01-02 10:00 UTC", "cpu A", "idle", ("x/y", 1.10)),
            run("b", "2026-01-03 10:00 UTC", "cpu A", "loaded (load 5)", ("x/y", 0.80)),
            run("b", "2026-01-01 10:00 UTC", "cpu A", "idle", ("x/y", 1.20), ("x/z", 2.0)),
            run("b", "2026-01-04 10:00 UTC", "cpu B", "idle", ("x/y", 0.50)),
            run("b", "2026-01-05 10:00 UTC", "cpu A", "failed (exit 1)")]
    rows = summary_rows(results_record.render(runs))
    assert rows == [
        "| b | cpu A | x/y | 1.10x (2026-01-02 10:00 UTC) | 0.80-1.20x (3 runs, 1 loaded) |",
        "| b | cpu A | x/z | 2.00x (2026-01-01 10:00 UTC) | 2.00x (1 run, 0 loaded) |",
        "| b | cpu B | x/y | 0.50x (2026-01-04 10:00 UTC) | 0.50x (1 run, 0 loaded) |",
    ]
    only_loaded = [run("c", "2026-01-01", "cpu A", "loaded", ("x/y", 3.0))]
    assert "| c | cpu A | x/y | none | 3.00x (1 run, 1 loaded) |" in summary_rows(
        results_record.render(only_loaded))


def test_append_adds_a_line_keeps_every_earlier_one_and_renders_the_md(tmp_path):
    record = tmp_path / "results.jsonl"
    results_record.append(record, [run("b", "2026-01-01 10:00 UTC", "cpu A", "idle",
                                       ("x/y", 1.5))])  # creates both files
    before = record.read_text(encoding="utf-8")
    later = run("b", "2026-01-02 10:00 UTC", "cpu A", "idle", ("x/y", 1.25))
    results_record.append(record, [later])
    after = record.read_text(encoding="utf-8")
    assert after.startswith(before) and after.count("\n") == 2
    assert json.loads(after.splitlines()[1])["ratios"] == [["x/y", 1.25]]
    md = (tmp_path / "results.md").read_text(encoding="utf-8")
    assert summary_rows(md) == [
        "| b | cpu A | x/y | 1.25x (2026-01-02 10:00 UTC) | 1.25-1.50x (2 runs, 0 loaded) |"]
    assert [r.date for r in results_record.load(record)] == ["2026-01-01 10:00 UTC",
                                                            "2026-01-02 10:00 UTC"]
    assert later.markdown() in md


def test_a_run_that_breaks_the_format_is_refused_by_name(tmp_path):
    with pytest.raises(results_record.RecordError, match="'machine'"):
        results_record.Run({"benchmark": "b", "date": "2026-01-01", "conditions": "idle"})
    with pytest.raises(results_record.RecordError, match="conditions"):
        run("b", "2026-01-01", "cpu A", "quiet", ("x/y", 1.5))
    with pytest.raises(results_record.RecordError, match="failed run has no ratios"):
        run("b", "2026-01-01", "cpu A", "failed (exit 1)", ("x/y", 1.5))
    broken = tmp_path / "results.jsonl"
    broken.write_text(run("b", "2026-01-01", "cpu A", "idle").line().replace(
        '"machine": "cpu A", ', "") + "\n", encoding="utf-8")
    with pytest.raises(results_record.RecordError, match=r"results.jsonl:1: .*'machine'"):
        results_record.load(broken)
    with pytest.raises(results_record.RecordError, match=r"\.jsonl record"):
        results_record.append(tmp_path / "results.md", [run("b", "2026-01-01", "cpu A", "idle")])
