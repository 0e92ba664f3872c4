"""Ctrl-C or SIGTERM while a run prepares its data ends it there: one line, exit 130, nothing
half-written, no checkpoint, no workdir left behind (the signal used to land in a JAX garbage
collection callback, where CPython drops it, and the run trained all its steps)."""

import signal
import subprocess
import time

import pytest

from bertjax.training.lease import LEASE
from tests.process_env import process_env
from tests.training.test_faults import REPO, command


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_preparation_ends_the_run_before_training(tmp_path, signum):
    workdir = tmp_path / "run"
    # the default 8,192-piece vocabulary is learned from the stdlib corpus first: seconds
    run = subprocess.Popen(command(workdir, "stdlib", "--gin.VOCAB_SIZE=8192",
                                   "--gin.NUM_STEPS=100000"),
                           cwd=REPO, env=process_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not (workdir / LEASE).exists() and run.poll() is None and time.time() < deadline:
        time.sleep(0.05)  # the lease is taken just before the configuration is read
    time.sleep(1.0)
    run.send_signal(signum)
    out, err = run.communicate(timeout=300)
    assert run.returncode == 130, err
    assert err.strip().splitlines()[-1] == (
        f"bertjax-train: interrupted before training started ({signal.Signals(signum).name}): "
        "nothing was saved")
    assert not workdir.exists()  # no checkpoint, vocabulary, record or lease: nothing at all
