"""bertjax-train end to end: a tiny run, its resume, and one clear line for each bad input."""

import hashlib
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
EXPERIMENT = "configs/experiments/bert_tiny_cpu.gin"


def run_cli(workdir, *bindings, gin_file=EXPERIMENT, corpus=None):
    args = [
        sys.executable,
        "-m",
        "bertjax.cli.train",
        f"--gin_file={gin_file}",
        f"--workdir={workdir}",
        "--noprogress",
        "--gin.NUM_STEPS=2",
        "--gin.BATCH_SIZE=8",
        "--gin.VOCAB_SIZE=512",
        "--gin.bert_config.max_position_embeddings=128",
    ]
    if corpus is not None:
        args.append(f"--gin.bert_pretraining_source.corpus='{corpus}'")
    args += list(bindings)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def error_line(result):
    """The single `bertjax-train: error:` line, checked to be the only one."""
    lines = [line for line in result.stderr.splitlines() if "bertjax-train: error:" in line]
    assert result.returncode == 2, result.stderr[-3000:]
    assert len(lines) == 1, result.stderr[-3000:]
    return lines[0]


def tree_digest(path):
    digest = hashlib.sha256()
    for file in sorted(p for p in pathlib.Path(path).rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def trained(tmp_path_factory, bert_sample):
    workdir = tmp_path_factory.mktemp("run")
    result = run_cli(workdir, corpus=bert_sample)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "steps 0 -> 2" in result.stdout
    return workdir


def test_tiny_run_writes_checkpoint_tensorboard_and_metrics(trained):
    assert (trained / "checkpoints" / "2").is_dir()
    assert list((trained / "tensorboard").glob("events.out.tfevents.*"))
    assert (trained / "metrics.jsonl").read_text().count('"loss"') >= 1
    assert (trained / "vocab.txt").is_file() and (trained / "config.gin").is_file()


def test_rerun_resumes_instead_of_starting_over(trained, bert_sample, tmp_path):
    import shutil

    workdir = tmp_path / "copy"
    shutil.copytree(trained, workdir)
    result = run_cli(workdir, "--gin.NUM_STEPS=3", corpus=bert_sample)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "steps 2 -> 3" in result.stdout
    assert (workdir / "checkpoints" / "3").is_dir()


@pytest.mark.parametrize(
    "make_corpus, expected",
    [
        (lambda d: d / "missing.txt", "no such file"),
        (lambda d: (d / "empty.txt").write_text("\n\n") and d / "empty.txt", "corpus is empty"),
        (
            lambda d: (
                (d / "single.txt").write_text("One sentence.\n\nAnother one.\n")
                and d / "single.txt"
            ),
            "NSP needs documents of 2+ sentences",
        ),
    ],
    ids=["missing-corpus", "empty-corpus", "no-multi-sentence-document"],
)
def test_bad_corpus_fails_with_one_line_and_keeps_checkpoint(
    trained, tmp_path, make_corpus, expected
):
    before = tree_digest(trained / "checkpoints")
    line = error_line(run_cli(trained, corpus=make_corpus(tmp_path)))
    assert expected in line
    assert tree_digest(trained / "checkpoints") == before


def test_invalid_utf8_is_replaced_with_a_warning(tmp_path, bert_sample):
    corpus = tmp_path / "bad_bytes.txt"
    corpus.write_bytes(pathlib.Path(bert_sample).read_bytes().replace(b"the", b"th\xff\xfe", 3))
    result = run_cli(tmp_path / "run", corpus=corpus)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "bad_bytes.txt" in result.stderr and "UTF-8" in result.stderr


def test_unknown_gin_binding(trained, bert_sample):
    line = error_line(run_cli(trained, "--gin.bert_config.hiden_size=64", corpus=bert_sample))
    assert "hiden_size" in line


def test_misspelled_config_name(trained):
    line = error_line(run_cli(trained, gin_file="configs/experiments/bert_tiny_cpuu.gin"))
    assert "bert_tiny_cpuu.gin" in line and "bert_tiny_cpu.gin" in line


def test_batch_not_divisible_by_data_parallel_devices(trained, bert_sample):
    line = error_line(run_cli(trained, "--gin.BATCH_SIZE=12", corpus=bert_sample))
    assert "not divisible by the 8 data-parallel devices" in line


def test_checkpoint_of_another_model_size_is_refused_and_kept(trained, bert_sample):
    before = tree_digest(trained / "checkpoints")
    line = error_line(
        run_cli(trained, "--gin.NUM_STEPS=4", "--gin.bert_config.size='mini'", corpus=bert_sample)
    )
    assert "does not match the configured model" in line
    assert tree_digest(trained / "checkpoints") == before
