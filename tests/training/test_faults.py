"""Runs that survive what happens to real runs: kill -9 at any moment, SIGTERM (preemption),
damaged checkpoints, a full disk, a loss that turns non-finite; and metrics logged once."""

import errno
import json
import logging
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from bertjax.models.bert import bert_config
from bertjax.objectives.pretraining import bert_pretraining
from bertjax.training.checkpoint import Checkpointer, restore_params
from bertjax.training.loop import build_trainer
from bertjax.training.mesh import make_mesh
from bertjax.training.optim import make_optimizer
from tests.in_process import run_tool
from tests.process_env import process_env

REPO = pathlib.Path(__file__).resolve().parents[2]
TINY = ["--gin.BATCH_SIZE=8", "--gin.VOCAB_SIZE=512", "--gin.train.seq_phases=((1.0, 32),)",
        "--gin.bert_config.max_position_embeddings=32", "--gin.train.log_every=1"]


def arguments(workdir, corpus, *bindings):
    return ["--gin_file=configs/experiments/bert_tiny_cpu.gin", f"--workdir={workdir}",
            "--noprogress", f"--gin.bert_pretraining_source.corpus='{corpus}'", *TINY, *bindings]


def command(workdir, corpus, *bindings):
    return [sys.executable, "-m", "bertjax.cli.train", *arguments(workdir, corpus, *bindings)]


def train_alone(workdir, corpus, *bindings):
    """A run in its own process on one device: what the kill and signal tests compare with."""
    env = process_env()
    return subprocess.run(command(workdir, corpus, *bindings), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)


def train(workdir, corpus, *bindings):
    """A run in the test process, on one device like a tool's own process (tests/in_process.py):
    the same programs, so its parameters equal bit for bit those of a run in a process."""
    return run_tool("bertjax.cli.train", *arguments(workdir, corpus, *bindings), cwd=REPO)


def start(workdir, corpus, *bindings):
    env = process_env()
    return subprocess.Popen(command(workdir, corpus, *bindings), cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def logged_steps(workdir):
    path = workdir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]


def final_params(workdir, step):
    task = bert_pretraining(bert_config("tiny", vocab_size=512, max_position_embeddings=32))
    trainer = build_trainer(task, make_optimizer(), make_mesh(devices=jax.devices()[:1]), 8, 32)
    checkpointer = Checkpointer(workdir, create=False)
    state, data = checkpointer.restore(trainer.abstract_state, step)
    checkpointer.close()
    return jax.device_get(state.params), data


def wait_for_steps(process, workdir, steps, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        if len(logged_steps(workdir)) >= steps:
            return True
        time.sleep(0.2)
    return False


def assert_same_run(straight, resumed, steps):
    """Bit-equal final parameters and data position, each step logged once, with the loss of
    the uninterrupted run (no example skipped or repeated)."""
    a, data_a = final_params(straight, steps)
    b, data_b = final_params(resumed, steps)
    assert data_a == data_b
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)
    lines = [json.loads(line) for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == list(range(1, steps + 1))
    want = {json.loads(line)["step"]: json.loads(line)["loss"]
            for line in (straight / "metrics.jsonl").read_text().splitlines()}
    assert all(m["loss"] == want[m["step"]] for m in lines)


def test_kill_9_once_changes_nothing(bert_sample, tmp_path):
    """Killed three steps into a run that saves every 2 steps (so a save may be under way),
    rerun: the same run as one never interrupted, bit for bit. The end-to-end tier kills
    twice, and 10 times at random moments."""
    check_kills_change_nothing(bert_sample, tmp_path, wait_steps=(3,))


@pytest.mark.e2e
def test_kill_9_twice_changes_nothing(bert_sample, tmp_path):
    """Killed twice, three steps and then one step into a run (a checkpoint every 2 steps,
    so a save may be under way), rerun: the same run as one never interrupted, bit for bit."""
    check_kills_change_nothing(bert_sample, tmp_path, wait_steps=(3, 1))


def check_kills_change_nothing(bert_sample, tmp_path, wait_steps):
    """A 12-step run killed after each of `wait_steps` more logged steps, then finished: its
    parameters, data position and logged losses are those of the uninterrupted run."""
    steps = 12
    straight = train(tmp_path / "straight", bert_sample, f"--gin.NUM_STEPS={steps}",
                     f"--gin.train.checkpoint_every={steps}")
    assert straight.returncode == 0, straight.stderr[-3000:]
    workdir, kills = tmp_path / "killed", 0
    for wait in wait_steps:
        process = start(workdir, bert_sample, f"--gin.NUM_STEPS={steps}",
                        "--gin.train.checkpoint_every=2")
        assert wait_for_steps(process, workdir, len(logged_steps(workdir)) + wait)
        process.send_signal(signal.SIGKILL)
        process.wait()
        kills += process.returncode == -signal.SIGKILL
    assert kills == len(wait_steps) and len(logged_steps(workdir)) < steps
    finish = train(workdir, bert_sample, f"--gin.NUM_STEPS={steps}",
                   "--gin.train.checkpoint_every=2")
    assert finish.returncode == 0, finish.stderr[-3000:]
    assert_same_run(tmp_path / "straight", workdir, steps)


@pytest.mark.e2e
def test_kill_9_at_random_moments_changes_nothing(bert_sample, tmp_path):
    """Killed 10 times (some during a save, with a checkpoint every 2 steps), rerun each time:
    the final parameters equal the uninterrupted run's (which saves only at its end) bit for
    bit, and each step is logged once with the loss the uninterrupted run had (no example
    skipped or repeated)."""
    steps = 120
    straight = train_alone(tmp_path / "straight", bert_sample, f"--gin.NUM_STEPS={steps}",
                           f"--gin.train.checkpoint_every={steps}")
    assert straight.returncode == 0, straight.stderr[-3000:]
    rng, workdir, kills = np.random.default_rng(0), tmp_path / "killed", 0
    while kills < 10:
        process = start(workdir, bert_sample, f"--gin.NUM_STEPS={steps}",
                        "--gin.train.checkpoint_every=2")
        done = len(logged_steps(workdir))
        if not wait_for_steps(process, workdir, done + 1):
            break  # the run finished (or never got to a step) before this kill
        time.sleep(rng.uniform(0.0, 1.5))
        if process.poll() is not None:
            break
        process.send_signal(signal.SIGKILL)
        process.wait()
        kills += 1
    finish = train_alone(workdir, bert_sample, f"--gin.NUM_STEPS={steps}",
                         "--gin.train.checkpoint_every=2")
    assert finish.returncode == 0, finish.stderr[-3000:]
    assert kills >= 10, f"only {kills} kills landed before the run completed"
    assert_same_run(tmp_path / "straight", workdir, steps)


def test_sigterm_saves_at_the_step_and_resume_continues(bert_sample, tmp_path):
    process = start(tmp_path, bert_sample, "--gin.NUM_STEPS=100000",
                    "--gin.train.checkpoint_every=100000")
    assert wait_for_steps(process, tmp_path, 3)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr[-3000:]
    line = [x for x in stderr.splitlines() if "stopped at step" in x]
    assert len(line) == 1 and "(SIGTERM)" in line[0] and "rerun" in line[0], stderr[-2000:]
    stopped = int(line[0].split("stopped at step ")[1].split()[0])
    assert (tmp_path / "checkpoints" / str(stopped)).is_dir()
    assert logged_steps(tmp_path)[-1] == stopped  # flushed up to the stop
    again = train(tmp_path, bert_sample, f"--gin.NUM_STEPS={stopped + 2}")
    assert again.returncode == 0 and f"steps {stopped} -> {stopped + 2}" in again.stdout


def data_files(step_dir):
    return [p for p in (step_dir / "state").rglob("*") if p.is_file() and "/d/" in str(p)]


def truncate(file):
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 3])


def truncate_largest(step_dir):
    truncate(max(data_files(step_dir), key=lambda p: p.stat().st_size))


@pytest.fixture(scope="module")
def four_steps(bert_sample, tmp_path_factory):
    """A finished 4-step run with checkpoints at steps 2 and 4; each test damages a copy."""
    workdir = tmp_path_factory.mktemp("four_steps") / "run"
    first = train(workdir, bert_sample, "--gin.NUM_STEPS=4", "--gin.train.checkpoint_every=2")
    assert first.returncode == 0, first.stderr[-3000:]
    return workdir


def copy_of(run, tmp_path):
    return pathlib.Path(shutil.copytree(run, tmp_path / "run"))


@pytest.mark.parametrize("damage", ["truncated", "garbled_metadata", "empty_step"])
def test_damaged_newest_checkpoint_falls_back_and_is_kept_aside(bert_sample, four_steps, tmp_path,
                                                                damage):
    workdir = copy_of(four_steps, tmp_path)
    checkpoints = workdir / "checkpoints"
    newest = 4
    if damage == "truncated":
        truncate_largest(checkpoints / "4")
    elif damage == "garbled_metadata":
        (checkpoints / "4" / "state" / "_METADATA").write_text("{garbled")
    else:
        (checkpoints / "6").mkdir()
        newest = 6
    result = train(workdir, bert_sample, "--gin.NUM_STEPS=8", "--gin.train.checkpoint_every=2")
    assert result.returncode == 0, result.stderr[-3000:]
    warnings = [x for x in result.stderr.splitlines() if "cannot be read" in x]
    assert len(warnings) == 1 and f"corrupt-{newest}" in warnings[0], result.stderr[-3000:]
    resumed_from = 2 if damage != "empty_step" else 4
    assert f"steps {resumed_from} -> 8" in result.stdout
    assert (checkpoints / f"corrupt-{newest}").is_dir()  # kept aside, not deleted
    assert "Traceback" not in result.stderr


def tiny_abstract_params():
    task = bert_pretraining(bert_config("tiny", vocab_size=512, max_position_embeddings=32))
    trainer = build_trainer(task, make_optimizer(), make_mesh(devices=jax.devices()[:1]), 8, 32)
    return trainer.abstract_state.params


def listing(workdir):
    return sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*"))


def test_restore_for_inference_falls_back_and_moves_nothing(four_steps, tmp_path, caplog):
    """A reader (generate, embed, fill-mask, --init, export) skips an unreadable checkpoint
    with one warning and leaves it where it is: quarantine is the lease holder's alone (a
    reader that moved one beside a training run used to kill that run)."""
    workdir = copy_of(four_steps, tmp_path)
    # Every data file: which file holds the parameters (all this read needs) varies by run.
    for file in data_files(workdir / "checkpoints" / "4"):
        truncate(file)
    before = listing(workdir)
    with caplog.at_level(logging.WARNING):
        _, _, step = restore_params(workdir, tiny_abstract_params())
    assert step == 2 and listing(workdir) == before
    warned = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    assert len(warned) == 1 and "left in place" in warned[0], warned


def test_an_init_with_no_readable_checkpoint_is_named_as_the_fault(four_steps, tmp_path):
    """bertjax-finetune --init of a run whose every checkpoint is unreadable said "start again
    in a new --workdir", which was fine: the --init is what to change."""
    init = copy_of(four_steps, tmp_path)
    for step_dir in (init / "checkpoints").iterdir():
        for file in data_files(step_dir):
            truncate(file)
    before = listing(init)
    rows = "".join(f"the {word} rose\t{word}\n" for word in ("team", "market") * 4)
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + rows)
    workdir = tmp_path / "finetuned"
    result = run_tool("bertjax.cli.finetune", "--gin_file=configs/finetune/bert_classification.gin",
                      f"--init={init}", f"--train={tmp_path / 'train.tsv'}",
                      f"--eval={tmp_path / 'train.tsv'}", f"--workdir={workdir}", "--noprogress",
                      cwd=REPO)
    errors = [x for x in result.stderr.splitlines() if "error:" in x]
    assert result.returncode == 2 and len(errors) == 1, result.stderr[-3000:]
    assert errors[0] == (
        f"bertjax-finetune: error: --init={init} has no readable checkpoint "
        f"({init / 'checkpoints'}: unreadable, left in place: 2, 4): pass another --init, or "
        "restore that run's checkpoints from a copy"), errors[0]
    assert listing(init) == before and not workdir.exists()


def vanishing(monkeypatch, step_dir):
    """Make the next read of `step_dir` find it deleted half-way, as a run that keeps only its
    newest checkpoints deletes an old one while a reader reads it."""
    read = ocp.CheckpointManager.restore

    def deleted_meanwhile(manager, step, *args, **kwargs):
        if step_dir.exists() and int(step_dir.name) == step:
            shutil.rmtree(step_dir)
        return read(manager, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "restore", deleted_meanwhile)


def test_a_checkpoint_deleted_while_read_is_a_retry_not_corruption(four_steps, tmp_path,
                                                                   monkeypatch, caplog):
    workdir = copy_of(four_steps, tmp_path)
    vanishing(monkeypatch, workdir / "checkpoints" / "4")
    with caplog.at_level(logging.WARNING):
        _, _, step = restore_params(workdir, tiny_abstract_params())
    assert step == 2
    assert not list((workdir / "checkpoints").glob("corrupt-*"))
    assert "cannot be read" not in caplog.text


def test_export_reads_past_a_checkpoint_deleted_while_read(four_steps, tmp_path, monkeypatch):
    from bertjax.training.checkpoint import restore_saved_params

    workdir = copy_of(four_steps, tmp_path)
    vanishing(monkeypatch, workdir / "checkpoints" / "4")
    _, _, which = restore_saved_params(workdir)
    assert which == "step 2" and not list((workdir / "checkpoints").glob("corrupt-*"))


def test_no_readable_checkpoint_is_one_line(bert_sample, tmp_path):
    first = train(tmp_path, bert_sample, "--gin.NUM_STEPS=2", "--gin.train.checkpoint_every=2")
    assert first.returncode == 0
    (tmp_path / "checkpoints" / "2" / "state" / "_METADATA").write_text("")
    result = train(tmp_path, bert_sample, "--gin.NUM_STEPS=4")
    assert result.returncode == 2
    errors = [x for x in result.stderr.splitlines() if "error:" in x]
    assert len(errors) == 1 and "no readable checkpoint" in errors[0], result.stderr[-2000:]


@pytest.fixture
def small_disk(tmpfs):
    """A 9 MiB tmpfs: one tiny-BERT checkpoint (5.7 MiB) fits, two do not (needs root)."""
    return tmpfs("9m")


def test_full_disk_is_one_line_and_the_previous_checkpoint_stays(bert_sample, small_disk):
    workdir = small_disk / "run"
    result = train_alone(workdir, bert_sample, "--gin.NUM_STEPS=20",
                         "--gin.train.checkpoint_every=1")
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [x for x in result.stderr.splitlines() if x.strip() and "JAX backend" not in x]
    assert len(lines) == 1, result.stderr[-3000:]  # no orbax or asyncio tracebacks around it
    assert lines[0].startswith("bertjax-train: error: no space left"), lines
    assert str(workdir / "checkpoints") in lines[0] and "MiB" in lines[0]
    manager = ocp.CheckpointManager(workdir / "checkpoints", item_names=("state",))
    step = manager.latest_step()
    assert step is not None
    restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
    assert int(restored.state["step"]) == step  # intact and readable
    assert not list((workdir / "checkpoints").glob("*tmp*"))


def fill(disk):
    """Take every free byte of `disk`, as another program filling it would."""
    # unbuffered: a buffered file keeps the part of a write the disk refused and raises it
    # again, unnamed, when closed
    with open(disk / "filler", "ab", buffering=0) as f:
        try:
            while f.write(b"\0" * 65536):
                pass
        except OSError:
            pass


def one_error_line(result):
    lines = [x for x in result.stderr.splitlines() if x.strip() and "JAX backend" not in x]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
    return lines[0]


def test_an_already_full_disk_is_one_line_naming_the_file(bert_sample, small_disk):
    """It was a bare "error: [Errno 28] No space left on device", with an empty lease.json
    left in a new workdir."""
    fill(small_disk)
    workdir = small_disk / "run"
    line = one_error_line(train(workdir, bert_sample, "--gin.NUM_STEPS=2"))
    assert line.startswith(f"bertjax-train: error: no space left on the device to write "
                           f"{workdir / 'lease.json'} (0.0 MiB free there)"), line
    assert not workdir.exists()


def test_a_disk_that_fills_between_checkpoints_is_one_line_and_the_rerun_resumes(
        bert_sample, small_disk, monkeypatch):
    from bertjax.training.metrics import MetricWriter

    write, save = MetricWriter.write, Checkpointer.save

    def filled_after_step_5(writer, step, scalars):
        if step == 6 and not (small_disk / "filler").exists():
            deadline = time.time() + 120  # the checkpoint at step 5 finishes first (async)
            while not (workdir / "checkpoints" / "5" / "commit_success.txt").exists():
                assert time.time() < deadline
                time.sleep(0.05)
            fill(small_disk)  # the metrics and events files fill their last pages, then fail
        return write(writer, step, scalars)

    workdir, steps = small_disk / "run", ["--gin.NUM_STEPS=100", "--gin.train.checkpoint_every=5"]
    with monkeypatch.context() as patch:
        patch.setattr(MetricWriter, "write", filled_after_step_5)
        patch.setattr(Checkpointer, "save", lambda self, step, *a, **k: step == 5 and save(
            self, step, *a, **k))  # the test is of the steps between checkpoints
        with_bar = [a for a in arguments(workdir, bert_sample, *steps) if a != "--noprogress"]
        result = run_tool("bertjax.cli.train", *with_bar, cwd=REPO)
    # The progress bar is closed before the line: the line was glued to the bar, and the bar
    # was drawn again under it.
    lines = [x for x in result.stderr.split("\n") if x.strip() and "JAX backend" not in x]
    errors = [x for x in lines if "error:" in x]
    assert result.returncode == 2 and len(errors) == 1, result.stderr[-3000:]
    line = errors[0]
    assert lines[-1] == line, lines[-3:]
    assert line.startswith(f"bertjax-train: error: no space left on the device to write "
                           f"{workdir}/"), line  # metrics.jsonl or a TensorBoard file
    assert re.search(r"\(0\.0 MiB free there; a checkpoint of this run takes about \d+ MiB\)", line)
    assert line.endswith("checkpoint 5 is intact and rerunning resumes from it"), line
    assert not (workdir / "lease.json").exists()
    (small_disk / "filler").unlink()
    (workdir / "checkpoints" / "10.orbax-checkpoint-tmp-1764318000").mkdir()  # a killed save
    again = train(workdir, bert_sample, "--gin.NUM_STEPS=5")  # (a second checkpoint: no room)
    assert again.returncode == 0 and "steps 5 -> 5" in again.stdout, again.stderr[-3000:]
    assert not list((workdir / "checkpoints").glob("*tmp*"))


def test_a_disk_full_before_the_final_save_names_the_checkpoint_a_rerun_resumes_from(
        bert_sample, small_disk, monkeypatch):
    """The final save's failure came back from closing the checkpoints as a bare "no space
    left on the device to write a file", without the directory, a checkpoint's size or the
    step a rerun resumes from."""
    save = Checkpointer.save

    def filled_before_the_final_save(self, step, *args, force=False, **kwargs):
        if force:  # the end of the run: checkpoint 5 is finished, then the disk fills
            self.wait()
            fill(small_disk)
        return save(self, step, *args, force=force, **kwargs)

    workdir = small_disk / "run"
    monkeypatch.setattr(Checkpointer, "save", filled_before_the_final_save)
    line = one_error_line(train(workdir, bert_sample, "--gin.NUM_STEPS=8",
                                "--gin.train.checkpoint_every=5"))
    assert line.startswith("bertjax-train: error: no space left on the device to save a "
                           f"checkpoint in {workdir / 'checkpoints'} (one takes about "), line
    assert re.search(r"\(one takes about [1-9]\d* MiB\)", line), line
    assert line.endswith("checkpoint 5 is intact and rerunning resumes from it"), line


def test_a_save_failing_in_the_background_names_the_size_of_what_it_saved(small_disk):
    """With no finished checkpoint to measure, a save that failed in the background was
    reported by a later call that had no state at hand: "one takes about 0 MiB"."""
    from bertjax.training.checkpoint import CheckpointError

    checkpointer = Checkpointer(small_disk / "run", quarantine=True)
    fill(small_disk)
    state = {"params": np.zeros(2**20, np.float32)}  # 4 MiB
    with pytest.raises(CheckpointError) as raised:
        checkpointer.save(1, state, {"phase": 0, "example_index": 0})
        checkpointer.close()
    assert "(one takes about 4 MiB)" in str(raised.value), raised.value
    assert str(raised.value).endswith("no checkpoint was written")


@pytest.mark.e2e  # the fast tier's kill -9 test checks each step is logged once, too
def test_metrics_hold_each_step_once_after_a_crash(bert_sample, tmp_path):
    process = start(tmp_path, bert_sample, "--gin.NUM_STEPS=100000",
                    "--gin.train.checkpoint_every=3")
    assert wait_for_steps(process, tmp_path, 5)
    process.send_signal(signal.SIGKILL)
    process.wait()
    crashed = logged_steps(tmp_path)
    # The kill may come before the first save is final: then the rerun starts from step 0.
    last_checkpoint = max((int(p.name) for p in (tmp_path / "checkpoints").iterdir()
                           if p.name.isdigit()), default=None)
    result = train_alone(tmp_path, bert_sample, f"--gin.NUM_STEPS={max(crashed) + 3}")
    assert result.returncode == 0, result.stderr[-3000:]
    steps = logged_steps(tmp_path)
    assert steps == list(range(1, max(crashed) + 4)), (crashed, last_checkpoint, steps)


@pytest.mark.parametrize("mode, expected_skips", [("skip", 3), ("stop", 1)])
def test_non_finite_loss_is_skipped_then_stops_with_one_line(bert_sample, tmp_path, mode,
                                                             expected_skips):
    result = train(tmp_path, bert_sample, "--gin.NUM_STEPS=50", "--gin.train.checkpoint_every=50",
                   "--gin.make_optimizer.learning_rate=1e30", "--gin.make_optimizer.clip_norm=None",
                   "--gin.make_optimizer.warmup_steps=1", f"--gin.train.nonfinite='{mode}'")
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [x for x in result.stderr.splitlines() if "error:" in x]
    assert len(errors) == 1 and "not finite at step" in errors[0], result.stderr[-3000:]
    assert f"({expected_skips} step(s) in a row" in errors[0]
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["nonfinite"] == 1.0


def test_asyncio_report_of_a_failed_orbax_read_is_dropped(tmp_path):
    """A failed restore can leave asyncio's 'exception was never retrieved' record, whose message
    names only tensorstore's error: the traceback through orbax marks it as the failure the
    Checkpointer already reported in one line; asyncio's other records still reach the log."""
    from bertjax.training.checkpoint import _QuietOrbax

    def failure_from(filename):
        code = compile("raise Exception('Encountered error while reading array index')",
                       filename, "exec")
        try:
            exec(code)
        except Exception:
            return sys.exc_info()

    def record(exc_info):
        return logging.LogRecord("asyncio", logging.ERROR, "/usr/lib/asyncio/base_events.py",
                                 1771, "_GatheringFuture exception was never retrieved", None,
                                 exc_info)

    quiet = _QuietOrbax()
    from_orbax = failure_from("/venv/site-packages/orbax/checkpoint/_src/serialization.py")
    from_elsewhere = failure_from("/venv/site-packages/someone/else.py")
    assert not quiet.filter(record(from_orbax))
    assert quiet.filter(record(from_elsewhere))
    assert quiet.filter(record(None))
    collected = logging.LogRecord(  # collected later: asyncio frames, tensorstore's text
        "asyncio", logging.ERROR, "/usr/lib/asyncio/base_events.py", 1771,
        "Task exception was never retrieved\nfuture: <Task finished exception=ValueError("
        "'OUT_OF_RANGE: Error opening \"zarr\" driver [tensorstore_spec=...]')>", None, None)
    assert not quiet.filter(collected)


def test_a_full_disk_error_naming_no_file_is_named_after_the_full_workdir(small_disk, tmp_path):
    """A write that fails without naming its file (a library's, a buffered file closed late) is
    named after the workdir when the workdir's disk is the full one, and left alone when it
    is not (the full disk is somewhere else)."""

    from bertjax import files

    unnamed = OSError(errno.ENOSPC, "No space left on device")
    assert files.on_full_directory(unnamed, tmp_path) is unnamed  # room there: not that disk
    workdir = small_disk / "run"
    workdir.mkdir()
    fill(small_disk)
    named = files.on_full_directory(unnamed, workdir)
    assert named.filename == f"{workdir}/" and named.errno == errno.ENOSPC
    assert files.no_space_message(named).startswith(
        f"no space left on the device to write {workdir}/ (0.0 MiB free there)")
    other = OSError(errno.EIO, "I/O error")
    assert files.on_full_directory(other, workdir) is other


def test_an_unfinished_save_refilled_while_it_is_removed_is_removed_again(tmp_path):
    """After a save fails on a full disk, orbax's other writers can still add files to its
    directory for a moment: removing it then failed with "Directory not empty" (ENOTEMPTY)
    instead of giving the one line."""
    from bertjax.training.checkpoint import _remove_partial

    class Refilled:  # a directory that two removals find refilled by a late writer
        attempts = 0

        def rmtree(self, missing_ok=False):
            self.attempts += 1
            if self.attempts <= 2:
                raise OSError(errno.ENOTEMPTY, "Directory not empty", "ocdbt.process_0")

    partial = Refilled()
    _remove_partial(partial)
    assert partial.attempts == 3

    class Stuck(Refilled):  # one that never empties: the error is not swallowed
        def rmtree(self, missing_ok=False):
            raise OSError(errno.ENOTEMPTY, "Directory not empty", "ocdbt.process_0")

    with pytest.raises(OSError, match="not empty"):
        _remove_partial(Stuck(), patience_s=0.3)
