"""bertjax-prepare, run in-process: it builds a token store a run reads, and refuses bad input
with one line and a nonzero exit status."""

import json
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from bertjax.data.bert.source import BertPretrainingSource
from bertjax.data.store.format import LOCK, MANIFEST, PROGRESS
from tests.in_process import run_tool
from tests.process_env import process_env

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def vocab(bert_sample, tmp_path_factory):
    directory = tmp_path_factory.mktemp("vocab")
    source = BertPretrainingSource(corpus=str(bert_sample), vocab_size=300)
    source.prepare(directory)
    source.save(directory)
    return directory


def prepare(*args):
    return run_tool("bertjax.cli.prepare", *args, cwd=REPO)


def test_a_store_is_built_and_read(bert_sample, vocab, tmp_path):
    out = tmp_path / "store"
    result = prepare("--family=bert", f"--corpus={bert_sample}", f"--vocab={vocab}",
                     f"--out={out}", "--workers=1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(out)
    assert "tokens in 1 shard(s) of uint16" in result.stderr
    assert f"corpus 'store:{out}'" in result.stderr
    stored = BertPretrainingSource(corpus=f"store:{out}", seed=1)
    stored.prepare(tmp_path / "run")
    memory = BertPretrainingSource(corpus=str(bert_sample), vocab=str(vocab), seed=1)
    memory.prepare(tmp_path / "run")
    a, b = (next(s.example_blocks(64, 4, 0, 0, 1)) for s in (memory, stored))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_bad_input_is_one_line(bert_sample, vocab, tmp_path):
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n")
    good = {"family": "bert", "corpus": str(bert_sample), "vocab": str(vocab),
            "out": str(tmp_path / "out"), "workers": "1"}
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / LOCK).write_text("1-0")  # process 1 (init) holds it: alive
    cases = {
        "--out is required": {"out": None},
        "--corpus is required": {"corpus": None},
        "unknown family 't5'": {"family": "t5"},
        "vocab.txt not found": {"vocab": str(tmp_path / "none")},
        "corpus is empty": {"corpus": str(blank)},
        "no such file": {"corpus": str(tmp_path / "missing.txt")},
        "lower_case: not a setting of lm_pretraining_source": {"family": "gpt",
                                                                "lower_case": "false"},
        "--workers=0": {"workers": "0"},
        "s3:// paths are not supported": {"out": "s3://bucket/store"},
        "being built by another bertjax-prepare": {"out": str(busy)},
        "flag --runner=dataflow: value should be one of": {"runner": "dataflow"},
    }
    for words, change in cases.items():
        flags = {**good, **change}
        result = prepare(*(f"--{k}={v}" for k, v in flags.items() if v is not None))
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, (words, result.stderr)
        assert len(lines) == 1 and lines[0].startswith("bertjax-prepare: error: "), lines
        assert words in lines[0], (words, lines[0])
    assert not (tmp_path / "out" / MANIFEST).exists()
    result = prepare(*(f"--{k}={v}" for k, v in good.items()), "--", "--project=p")
    assert result.returncode == 2 and "Beam's options (after --) go with --runner=beam" in (
        result.stderr), result.stderr


def test_the_beam_runner_builds_the_local_store(bert_sample, vocab, tmp_path):
    """--runner=beam with Beam's options after --: the store of the local build, byte for
    byte (BERT's sample text, several shards)."""
    pytest.importorskip("apache_beam")
    common = ("--family=bert", f"--corpus={bert_sample}", f"--vocab={vocab}", "--shard_mb=0.0005")
    local = prepare(*common, f"--out={tmp_path / 'local'}", "--workers=1")
    assert local.returncode == 0, local.stderr
    beam = prepare(*common, f"--out={tmp_path / 'beam'}", "--runner=beam", "--",
                   "--runner=DirectRunner", "--direct_num_workers=1")
    assert beam.returncode == 0, beam.stderr
    assert beam.stdout.strip() == str(tmp_path / "beam")
    tree = [{str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
            for root in (tmp_path / "local", tmp_path / "beam")]
    assert len([n for n in tree[0] if n.startswith("tokens-")]) >= 2
    assert tree[0] == tree[1]


@pytest.mark.slow
def test_bertjax_train_runs_and_resumes_on_a_store(bert_sample, vocab, tmp_path):
    out, workdir = tmp_path / "store", tmp_path / "run"
    assert prepare("--family=bert", f"--corpus={bert_sample}", f"--vocab={vocab}",
                   f"--out={out}", "--workers=1").returncode == 0
    train = ["--gin_file=configs/experiments/bert_tiny_cpu.gin", f"--workdir={workdir}",
             "--noprogress", "--gin.BATCH_SIZE=8", "--gin.VOCAB_SIZE=512",
             "--gin.train.seq_phases=((1.0, 64),)",
             f"--gin.bert_pretraining_source.corpus='store:{out}'"]
    for steps in (2, 3):  # a run, then its resume
        result = run_tool("bertjax.cli.train", *train, f"--gin.NUM_STEPS={steps}", cwd=REPO)
        assert result.returncode == 0, result.stderr[-3000:]
    assert (workdir / "vocab.txt").read_bytes() == (out / "tokenizer" / "vocab.txt").read_bytes()


def _wait_for_shards(progress: pathlib.Path, count: int, process, deadline: float) -> None:
    while time.time() < deadline and process.poll() is None:
        try:
            if len(json.loads(progress.read_text())["shards"]) >= count:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"no {count} shards listed in {progress} in time")


@pytest.mark.e2e
def test_ctrl_c_and_kill_9_mid_build_then_the_rerun_finishes_the_same_store(wikitext_valid,
                                                                            vocab, tmp_path):
    """A real bertjax-prepare with two workers: Ctrl-C is one line and exit 130, kill -9 leaves
    what it finished; each rerun keeps the listed shards and the store is the bytes of one
    uninterrupted build."""
    corpus = tmp_path / "wiki.txt"
    corpus.write_text("\n".join(wikitext_valid.read_text().split("\n")[:1500]))
    args = ["--family=bert", f"--corpus={corpus}", f"--vocab={vocab}", "--shard_mb=0.01"]
    whole = tmp_path / "whole"
    assert prepare(*args, f"--out={whole}", "--workers=1").returncode == 0
    out = tmp_path / "store"
    command = [sys.executable, "-m", "bertjax.cli.prepare", *args, f"--out={out}",
               "--workers=2"]
    for stop, listed in ((signal.SIGINT, 2), (signal.SIGKILL, 4)):
        process = subprocess.Popen(command, cwd=REPO, env=process_env(), text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _wait_for_shards(out / PROGRESS, listed, process, time.time() + 300)
        process.send_signal(stop)
        _, stderr = process.communicate(timeout=120)
        if stop == signal.SIGINT:
            # the line alone: the workers print nothing (TensorFlow's start-up lines included)
            assert process.returncode == 130, stderr[-2000:]
            assert stderr.strip() == "bertjax-prepare: interrupted", stderr[-2000:]
        assert not (out / MANIFEST).exists()
        kept = json.loads((out / PROGRESS).read_text())["shards"]
        assert len(kept) >= listed
    result = prepare(*args, f"--out={out}", "--workers=1")
    assert result.returncode == 0, result.stderr
    files = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert files == {p.name: p.read_bytes() for p in whole.rglob("*") if p.is_file()}
