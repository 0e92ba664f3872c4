"""Two JAX processes (4 CPU devices each, gloo collectives) train like one process with 8."""

import json
import pathlib
import socket
import subprocess
import sys

import pytest

from tests.process_env import process_env

REPO = pathlib.Path(__file__).resolve().parents[2]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(workdir, corpus, *extra):
    return [
        sys.executable,
        "-m",
        "bertjax.cli.train",
        "--gin_file=configs/experiments/bert_tiny_cpu.gin",
        f"--workdir={workdir}",
        "--noprogress",
        "--gin.NUM_STEPS=3",
        "--gin.BATCH_SIZE=16",
        "--gin.VOCAB_SIZE=512",
        "--gin.train.log_every=1",
        f"--gin.bert_pretraining_source.corpus='{corpus}'",
        *extra,
    ]


def losses(workdir):
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines]


@pytest.mark.e2e
def test_two_processes_match_one(tmp_path, bert_sample):
    def env(devices):
        return {**process_env(devices), "JAX_PLATFORMS": "cpu"}

    single = subprocess.run(
        command(tmp_path / "one", bert_sample),
        cwd=REPO,
        env=env(8),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert single.returncode == 0, single.stderr[-3000:]

    address = f"127.0.0.1:{free_port()}"
    procs = [
        subprocess.Popen(
            command(
                tmp_path / "two",
                bert_sample,
                f"--coordinator_address={address}",
                "--num_processes=2",
                f"--process_id={i}",
            ),
            cwd=REPO,
            env=env(4),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=900) for p in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-3000:]
    assert "steps 0 -> 3" in outputs[0][0]
    assert "steps 0 -> 3" not in outputs[1][0]  # only process 0 reports
    assert losses(tmp_path / "two") == pytest.approx(losses(tmp_path / "one"), abs=1e-5)
    assert (tmp_path / "two" / "checkpoints" / "3").is_dir()
