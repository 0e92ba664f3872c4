"""Orbax's failure reports are dropped in a bertjax tool's process only: a notebook that saves
and restores with bertjax's Checkpointer keeps its own orbax and asyncio log records and its
unraisable-exception hook (the first Checkpointer used to install the filters for the whole
process, for as long as it ran)."""

import logging
import sys

import jax
import jax.numpy as jnp
import pytest

from bertjax.training import checkpoint
from bertjax.training.checkpoint import Checkpointer, _QuietOrbax
from bertjax.training.state import TrainState
from tests.in_process import run_tool

LOGGERS = ("absl", "asyncio")  # where orbax's and asyncio's failure reports are logged


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def unfiltered(monkeypatch):
    """The loggers and hook as a process that never ran a tool has them (tools run in this
    test process leave theirs, as they would for the life of their own process)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "filters",
                            [f for f in logger.filters if not isinstance(f, _QuietOrbax)])
    hook = sys.unraisablehook
    while hasattr(hook, "wrapped"):  # bertjax's wrappers of the hook they found
        hook = hook.wrapped
    monkeypatch.setattr(sys, "unraisablehook", hook)
    return hook


def orbax_reports(collect):
    """Log what a user's own failed orbax save looks like on each logger; what reached it."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        logger.addHandler(collect)
        try:
            logger.error("%s: orbax could not save gs://my-bucket/ckpt (tensorstore error)",
                         name)
        finally:
            logger.removeHandler(collect)
    return collect.messages


def tiny_state():
    params = {"w": jnp.arange(4, dtype=jnp.float32)}
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=(),
                      rng=jax.random.key_data(jax.random.key(0)), carry={})


def test_a_library_users_orbax_records_survive_bertjaxs_checkpointer(unfiltered, tmp_path):
    state = tiny_state()
    saver = Checkpointer(tmp_path)
    saver.save(1, state, {"phase": 0, "example_index": 8}, force=True)
    saver.close()
    reader = Checkpointer(tmp_path, create=False)
    restored, position = reader.restore(jax.eval_shape(lambda: state))
    reader.close()
    assert int(restored.step) == 0 and position["example_index"] == 8
    assert orbax_reports(Collect()) == [
        f"{name}: orbax could not save gs://my-bucket/ckpt (tensorstore error)"
        for name in LOGGERS]
    assert sys.unraisablehook is unfiltered


def test_a_tool_still_drops_them(unfiltered, tmp_path):
    result = run_tool("bertjax.cli.report", str(tmp_path / "no_such_run"),
                      f"--out={tmp_path / 'report'}", "--noplot")
    assert result.returncode == 2  # any tool: the filters come with the tool's start
    assert orbax_reports(Collect()) == []
    assert sys.unraisablehook is not unfiltered
    checkpoint.quiet_orbax_failures()  # once only, however often it is called
    assert [isinstance(f, _QuietOrbax) for f in logging.getLogger("absl").filters].count(
        True) == 1
