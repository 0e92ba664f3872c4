"""A resume never changes what a checkpoint means, and a crash cannot poison the metrics:
a missing or changed tokenizer file is refused before any compute, a changed corpus or batch
size is announced, a torn last metrics line is dropped with a warning, a metrics.jsonl that
cannot be written fails before the first step, and a bad --workdir is one line."""

import json
import shutil

import pytest

from bertjax.data.corpora import stdlib_documents, write_bert_format
from tests.in_process import run_tool
from tests.training.test_faults import REPO, arguments, logged_steps


def train(workdir, corpus, *bindings):
    return run_tool("bertjax.cli.train", *arguments(workdir, corpus, *bindings), cwd=REPO)


@pytest.fixture(scope="module")
def other_corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "other.txt"
    write_bert_format(stdlib_documents("held_out"), path)
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 2-step run with a checkpoint at step 2 (the tests copy it before changing it)."""
    workdir = tmp_path_factory.mktemp("resume") / "run"
    done = train(workdir, "stdlib", "--gin.NUM_STEPS=2", "--gin.train.checkpoint_every=2")
    assert done.returncode == 0, done.stderr
    return workdir


def copy_of(trained, tmp_path):
    shutil.copytree(trained, tmp_path / "run")
    return tmp_path / "run"


@pytest.mark.parametrize("damage", ["delete", "change"])
def test_a_missing_or_changed_vocabulary_is_refused_before_any_compute(
        trained, tmp_path, other_corpus, damage):
    workdir = copy_of(trained, tmp_path)
    vocab, record = workdir / "vocab.txt", (workdir / "model.json").read_text()
    if damage == "delete":
        vocab.unlink()
    else:
        vocab.write_text(vocab.read_text() + "zebra\n")  # a token more: other ids
    refused = train(workdir, other_corpus, "--gin.NUM_STEPS=4")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        f"bertjax-train: error: {vocab}, which checkpoint 2 was trained with, is missing or "
        "changed: restore it or use a new --workdir")
    assert (workdir / "model.json").read_text() == record  # nothing relearned or rewritten
    assert vocab.exists() == (damage == "change")
    assert logged_steps(workdir) == [1, 2]


def test_a_changed_corpus_and_batch_size_resume_with_one_line(trained, tmp_path, other_corpus):
    workdir = copy_of(trained, tmp_path)
    done = train(workdir, other_corpus, "--gin.NUM_STEPS=3", "--gin.BATCH_SIZE=16")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stderr.splitlines() if "resuming with" in line]
    assert "batch_size 16 (checkpoint 2 was trained with 8)" in line
    assert f"corpus '{other_corpus}' (checkpoint 2 was trained with 'stdlib')" in line
    assert json.loads((workdir / "model.json").read_text())["data"] == {
        "batch_size": 16, "corpus": str(other_corpus), "packed_sequences": 0}
    assert logged_steps(workdir) == [1, 2, 3]


def test_a_resume_with_other_packing_says_so_in_one_line(trained, tmp_path):
    """Packed rows (PACKED_SEQUENCES) in a resume of an unpacked run, or the other way round,
    went on without a word. (The run is complete: the line comes before anything trains.)"""
    workdir = copy_of(trained, tmp_path)
    done = train(workdir, "stdlib", "--gin.NUM_STEPS=2", "--gin.PACKED_SEQUENCES=4")
    assert done.returncode == 0, done.stderr
    assert [line.split("] ", 1)[-1] for line in done.stderr.splitlines()
            if "resuming with" in line] == [
        f"{workdir}: resuming with packed_sequences 4 (checkpoint 2 was trained with 0)"]


def test_a_torn_last_metrics_line_is_dropped_with_one_warning(trained, tmp_path):
    workdir = copy_of(trained, tmp_path)
    metrics = workdir / "metrics.jsonl"
    with metrics.open("a") as f:
        f.write('{"step": 3, "loss": 6.9, "mlm_acc')  # a crash in the middle of a write
    report = run_tool("bertjax.cli.report", workdir)
    assert report.returncode == 0, report.stderr
    assert "torn last line" in report.stderr and f"{metrics}:3" in report.stderr
    done = train(workdir, "stdlib", "--gin.NUM_STEPS=3")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("torn last line") == 1
    assert logged_steps(workdir) == [1, 2, 3]
    assert all(json.loads(line) for line in metrics.read_text().splitlines())


def test_a_bad_metrics_line_before_the_last_names_file_and_line(trained, tmp_path):
    workdir = copy_of(trained, tmp_path)
    metrics = workdir / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    metrics.write_text("\n".join(["{garbled", *lines[1:]]) + "\n")
    report = run_tool("bertjax.cli.report", workdir)
    assert report.returncode == 2
    assert f"{metrics}:1 is not a JSON object" in report.stderr
    resumed = train(workdir, "stdlib", "--gin.NUM_STEPS=3")
    assert resumed.returncode == 2
    assert resumed.stderr.strip().splitlines()[-1] == (
        f"bertjax-train: error: {metrics}:1 is not a JSON object: restore the file or delete "
        "that line")
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["2"]


def test_a_metrics_file_that_is_a_directory_fails_before_the_first_step(trained, tmp_path):
    workdir = copy_of(trained, tmp_path)
    (workdir / "metrics.jsonl").unlink()
    (workdir / "metrics.jsonl").mkdir()
    refused = train(workdir, "stdlib", "--gin.NUM_STEPS=6", "--gin.train.checkpoint_every=1")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        f"bertjax-train: error: {workdir / 'metrics.jsonl'} is a directory, not a metrics "
        "file: move it away")
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["2"]  # no step ran


def test_a_workdir_under_a_file_or_of_another_scheme_is_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    under = tmp_path / "notes.txt" / "run"
    refused = train(under, "stdlib")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        f"bertjax-train: error: --workdir={under} lies under {tmp_path / 'notes.txt'}, which is "
        "a file: pass a directory path")
    refused = train("s3://bucket/run", "stdlib")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        "bertjax-train: error: s3://bucket/run: s3:// paths are not supported: use a local "
        "path or gs://BUCKET/PATH")


def test_a_run_checks_its_workdir_reading_model_json_once(tmp_path, monkeypatch):
    """check_run reads the record once for the resume checks and the family check (it read
    model.json twice); a workdir of another family is still one line."""
    from types import SimpleNamespace

    from bertjax.training import loop
    from bertjax.training import workdir as workdir_lib

    workdir = tmp_path / "run"
    shutil.copytree(REPO / "tests" / "fixtures" / "workdirs" / "bert_pretraining", workdir)
    reads = []
    read_record = workdir_lib.read_record
    monkeypatch.setattr(workdir_lib, "read_record",
                        lambda path: reads.append(path) or read_record(path))
    monkeypatch.setattr(loop.mesh_lib, "check_batch", lambda *args: None)
    source = SimpleNamespace(corpus_name=None, row_facts=dict, vocab_size=10)
    objective = SimpleNamespace(family="gpt", config=SimpleNamespace(vocab_size=10),
                                config_name="gpt_config")
    exp = SimpleNamespace(batch_size=8, accum_steps=1, source=source, objective=objective,
                          num_steps=1, seq_phases=None)
    with pytest.raises(loop.RunError, match="holds a BERT run, not GPT"):
        loop.check_run(exp, None, workdir)
    assert len(reads) == 1
