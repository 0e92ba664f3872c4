"""bertjax-report on real tiny runs: a 3-step BERT (MLM + NSP), a 3-step left-to-right BERT
and a fine-tuning of the latter with a BiLSTM head (Table 5's last row) on a slice of AG News:
one table row per run with what tells them apart, a CSV, curves, and one line for bad input."""

import csv
import pathlib
import subprocess
import sys

import pytest

from tests.in_process import run_tool
from tests.process_env import process_env

REPO = pathlib.Path(__file__).resolve().parents[2]
TINY = ["--noprogress", "--gin.NUM_STEPS=3", "--gin.BATCH_SIZE=8", "--gin.VOCAB_SIZE=512"]
ENV = process_env()


def module(name, *args):
    return [sys.executable, "-m", name, *args]


def run(cmd):
    return subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def runs(agnews_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    train = {name: root / name for name in ("mlm_nsp", "ltr")}
    experiments = {"mlm_nsp": "bert_tiny_cpu", "ltr": "bert_ltr_tiny_cpu"}
    for name, path in train.items():
        result = run_tool("bertjax.cli.train", f"--workdir={path}",
                          f"--gin_file=configs/experiments/{experiments[name]}.gin", *TINY,
                          cwd=REPO)
        assert result.returncode == 0, result.stderr[-3000:]
    lines = (agnews_dir / "train.tsv").read_text(encoding="utf-8").splitlines()
    (root / "train.tsv").write_text("\n".join(lines[:65]) + "\n", encoding="utf-8")
    (root / "dev.tsv").write_text("\n".join(lines[:1] + lines[65:97]) + "\n", encoding="utf-8")
    finetuned = root / "ltr_bilstm"
    recipe = "--gin_file=configs/finetune/bert_classification.gin"
    result = run_tool("bertjax.cli.finetune", recipe,
                      f"--init={train['ltr']}", f"--train={root / 'train.tsv'}",
                      f"--eval={root / 'dev.tsv'}", f"--workdir={finetuned}", "--noprogress",
                      "--gin.finetune.bilstm=True", "--gin.finetune.lstm_size=16",
                      "--gin.finetune.max_seq_length=32", "--gin.finetune.epochs=1.0",
                      "--gin.finetune.learning_rate=1e-3", cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    return {**train, "finetuned": finetuned}


@pytest.mark.slow
def test_table_csv_and_curves_of_two_runs(runs, tmp_path):
    out = tmp_path / "report"
    result = run(module("bertjax.cli.report", str(runs["mlm_nsp"]), str(runs["ltr"]),
                        f"--out={out}"))
    assert result.returncode == 0, result.stderr[-2000:]
    table = (out / "report.md").read_text()
    assert table == result.stdout.split("written:")[0]
    header, *rows = table.strip().splitlines()[0:1] + table.strip().splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == ["| mlm_nsp", "| ltr"]
    for column in ("objective", "masking", "mlm_perplexity", "perplexity", "nsp_accuracy"):
        assert f" {column} " in header
    assert "@bert_ltr_pretraining()" in rows[1] and "@bert_pretraining()" in rows[0]
    with open(out / "report.csv", newline="") as f:
        records = list(csv.DictReader(f))
    assert [r["run"] for r in records] == ["mlm_nsp", "ltr"] and records[0]["steps"] == "3"
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_a_finetuned_run_shows_its_pretraining(runs, tmp_path):
    assert (runs["finetuned"] / "init.txt").read_text().strip() == str(runs["ltr"].resolve())
    result = run_tool("bertjax.cli.report", runs["finetuned"], f"--out={tmp_path}")
    assert result.returncode == 0, result.stderr[-2000:]
    with open(tmp_path / "report.csv", newline="") as f:
        (record,) = csv.DictReader(f)
    assert 0 <= float(record["dev_accuracy"]) <= 1 and float(record["pretrain_perplexity"]) > 1
    assert record["pretrain_steps"] == "3"


def test_a_directory_without_metrics_is_one_line(tmp_path):
    result = run(module("bertjax.cli.report", str(tmp_path)))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"bertjax-report: error: {tmp_path}: no metrics.jsonl: pass the --workdir of a "
        "bertjax-train or bertjax-finetune run that has logged at least one step"]


def test_bad_metrics_an_out_file_and_a_bad_last_are_one_line_each(tmp_path):
    """A binary metrics.jsonl gave a bare UTF-8 decoding error naming no file, lines without
    "step" counted as steps, --out naming a file gave "[Errno 17] File exists", and --last=0
    or -3 were taken (and averaged over every step, or all but the first three)."""
    def run_dir(name, data):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_bytes(data)
        return tmp_path / name

    good = run_dir("good", b'{"step": 1, "loss": 2.0}\n')
    binary = run_dir("binary", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    stepless = run_dir("stepless", b'{"loss": 2.0}\n{"loss": 1.0}\n{"step": 3, "loss": 0.5}\n')
    (tmp_path / "a_file").write_text("mine")
    for args, message in [
            ((binary,), f"{binary / 'metrics.jsonl'} is not UTF-8 text (at byte 0)"),
            ((stepless,), f'{stepless / "metrics.jsonl"}:1 has no "step"'),
            ((good, f"--out={tmp_path / 'a_file'}"), f"--out={tmp_path / 'a_file'} is a file"),
            ((good, f"--out={tmp_path / 'a_file' / 'report'}"), "which is a file"),
            ((good, "--last=0"), "--last=0"), ((good, "--last=-3"), "--last=-3")]:
        result = run_tool("bertjax.cli.report", *args)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, (args, result.stderr[-2000:])
        assert lines[0].startswith("bertjax-report: error: ") and message in lines[0], lines
    assert (tmp_path / "a_file").read_text() == "mine"


def test_a_report_on_a_full_disk_leaves_no_folder_behind(tmpfs):
    """--out on a full disk left an empty report folder (issue #45's last finding); a folder
    that existed keeps what it held."""
    from bertjax.cli.report import report

    disk = tmpfs("64k")
    run_dir = str(REPO / "tests" / "fixtures" / "workdirs" / "bert_pretraining")
    (disk / "filler").write_bytes(b"\0" * 60 * 1024)
    (disk / "kept").mkdir()
    (disk / "kept" / "notes.txt").write_text("mine")
    for out in (disk / "report" / "sub", disk / "kept"):
        with pytest.raises(OSError) as full:
            report([run_dir] * 40, str(out), plot=False)
        assert full.value.errno == 28
    assert sorted(p.name for p in disk.iterdir()) == ["filler", "kept"]
    assert [p.name for p in (disk / "kept").iterdir()] == ["notes.txt"]
