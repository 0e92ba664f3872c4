"""One run per workdir: a second run is refused before it touches anything, a lease left by a
dead run is taken over with one warning, and two runs started together cannot both train."""

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from bertjax.training.lease import LEASE, Lease, WorkdirInUseError
from tests.process_env import process_env
from tests.training.test_faults import REPO, command, logged_steps

HOLD = """
import sys, time
from bertjax.training.lease import Lease
Lease(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(600)
"""


def hold_in_a_process(workdir):
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(workdir)], cwd=REPO,
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_second_lease_is_refused_with_who_holds_it(tmp_path):
    workdir = tmp_path / "run"
    holder = hold_in_a_process(workdir)
    try:
        with pytest.raises(WorkdirInUseError) as refused:
            Lease(workdir).acquire()
        assert str(refused.value).startswith(
            f"{workdir} is in use by PID {holder.pid} on {socket.gethostname()} since ")
        assert "use another --workdir" in str(refused.value)
    finally:
        holder.kill()
        holder.wait()


def test_the_lease_of_a_killed_run_is_taken_over_with_one_warning(tmp_path, caplog):
    workdir = tmp_path / "run"
    holder = hold_in_a_process(workdir)
    holder.send_signal(signal.SIGKILL)  # no chance to release it
    holder.wait()
    lease = Lease(workdir)
    with caplog.at_level(logging.WARNING):
        lease.acquire()
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning.startswith(f"{workdir}: taking over the lease of PID {holder.pid} on "
                              f"{socket.gethostname()} (since ")
    assert warning.endswith("that process has ended")
    assert json.loads((workdir / LEASE).read_text())["pid"] == os.getpid()
    lease.release()
    assert not (workdir / LEASE).exists() and (workdir).is_dir()


def test_a_refused_run_leaves_no_workdir_it_created(tmp_path):
    lease = Lease(tmp_path / "new")
    lease.acquire()
    assert (tmp_path / "new" / LEASE).is_file()
    lease.release()
    assert not (tmp_path / "new").exists()  # nothing but the lease was written


def test_a_released_lease_removes_the_empty_parents_it_created(tmp_path):
    """bertjax-glue stopped before a task's first step left WORKDIR/TASK/lr_RATE/ behind."""
    (tmp_path / "kept").mkdir()
    lease = Lease(tmp_path / "kept" / "glue" / "SST-2" / "lr_2e-05" / "seed_0")
    lease.acquire()
    lease.release()
    assert list(tmp_path.iterdir()) == [tmp_path / "kept"] and not any(
        (tmp_path / "kept").iterdir())


def test_two_runs_started_together_one_refused_the_other_complete(tmp_path):
    """Two identical bertjax-train on one workdir: one ends at once with one line, exit 2;
    the other trains every step and logs each once."""
    workdir = tmp_path / "run"
    args = ("stdlib", "--gin.NUM_STEPS=4", "--gin.train.checkpoint_every=2")
    runs = [subprocess.Popen(command(workdir, *args), cwd=REPO, env=process_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    started = time.time()
    results = [(run.wait(timeout=900), *run.communicate()) for run in runs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    refused = next(err for code, _, err in results if code == 2)
    winner = next(run for run, (code, _, _) in zip(runs, results, strict=True) if code == 0)
    assert refused.strip().splitlines()[-1].startswith(
        f"bertjax-train: error: {workdir} is in use by PID {winner.pid} on "), refused
    assert logged_steps(workdir) == [1, 2, 3, 4]
    assert not (workdir / LEASE).exists()
    assert time.time() - started < 900
