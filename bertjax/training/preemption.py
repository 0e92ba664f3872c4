"""Stopping a run cleanly when the machine asks: SIGTERM (a preempted or maintained Cloud TPU
VM, a batch scheduler), SIGINT (Ctrl-C), or JAX's preemption notice in a multi-host run.

The loop asks `should_stop(step, agree=...)` after every step; on yes it saves a checkpoint at
that step (the data position included), flushes its metrics and returns, so rerunning the same
command resumes there. All hosts of a multi-host run agree on the step: a signal seen by any
host stops every host at the same step, as does orbax's `reached_preemption` (the sync point
of JAX's preemption service on TPU pods, asked at every step as JAX's protocol requires; it
blocks nothing). Agreeing on signals takes an allgather, which waits for the step before it to
finish on every host, so the host could not queue the next step while one ran: hosts agree only
at the steps the loop names (`agree`: its log and checkpoint steps and a phase's last), and a
signal's checkpoint comes at most K = min(train.log_every, train.checkpoint_every) steps after
it (MaxText checks preemption at its checkpoint steps). One host needs no agreement: it stops
at the step after the signal.

A run watches once, for its whole length (`watch()`, taken by `bertjax.training.run`, around
data preparation too). Until training has started (data preparation, restore, the first
step's compile) there is nothing to save, so a signal raises `Interrupted` at once; the flag
also stays set and the loop checks it at each stage (`check`), since CPython drops an
exception raised while a garbage-collection callback runs, where JAX spends some of its time.
A second signal ends the process at once (exit status 130), whatever it is doing.
"""

import contextlib
import os
import signal
import sys
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from jax.experimental import multihost_utils

if TYPE_CHECKING:
    import orbax.checkpoint as ocp

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(KeyboardInterrupt):
    """A stop signal before training started: there is nothing to save."""


_began = False  # a run of this process has started training (StopSignals.started)


def began_training() -> bool:
    """True once a run of this process has started training: an interrupt after that is no
    longer one "before training started"; `forget_training` resets it (a tool's start)."""
    return _began


def forget_training() -> None:
    """A new tool run starts (tests run several in one process): no training has begun."""
    global _began
    _began = False


class _QuietInterrupts:
    """An unraisable-exception hook that drops `Interrupted`: raised in a garbage-collection
    callback (JAX's `_xla_gc_callback`), it is lost, and CPython prints an "Exception ignored
    in ..." traceback before the tool's own line. The flag stays set and `check` raises it
    again, so the report says nothing; every other report goes to the hook it wraps."""

    def __init__(self, wrapped: Callable[["sys.UnraisableHookArgs"], object]) -> None:
        self.wrapped = wrapped

    def __call__(self, report: "sys.UnraisableHookArgs") -> None:
        if not isinstance(report.exc_value, Interrupted):
            self.wrapped(report)

    @classmethod
    def install(cls) -> None:
        """Wrap the current hook once (a hook set by the user or pytest keeps working)."""
        if not isinstance(sys.unraisablehook, cls):
            sys.unraisablehook = cls(sys.unraisablehook)


class StopSignals:
    """Within `with StopSignals() as stop:`, SIGTERM and SIGINT are noted, not fatal once
    `started()` (training has begun); before that they raise `Interrupted`."""

    def __init__(self) -> None:
        self.received: str | None = None
        self.training = False
        self._previous: dict[int, Any] = {}

    def _note(self, signum: int, frame: types.FrameType | None) -> None:
        del frame
        name = signal.Signals(signum).name
        if self.received is not None:  # a second signal: now
            print(f"{name} again: exiting now", file=sys.stderr, flush=True)
            os._exit(130)
        self.received = name
        if not self.training:
            raise Interrupted(name)

    def started(self) -> None:
        """Training has begun: from now on a signal saves a checkpoint and stops the run."""
        global _began
        self.check()
        self.training = _began = True

    def check(self) -> None:
        """Raise `Interrupted` if a signal came before training started (and was lost)."""
        if self.received is not None and not self.training:
            raise Interrupted(self.received)

    def __enter__(self) -> "StopSignals":
        _QuietInterrupts.install()
        try:
            self._previous = {s: signal.signal(s, self._note) for s in SIGNALS}
        except ValueError:  # not the main thread (e.g. a notebook's worker): no handlers
            self._previous = {}
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def should_stop(self, step: int, manager: "ocp.CheckpointManager | None" = None,
                    agree: bool = True) -> str | None:
        """Why to stop after `step` ("SIGTERM", "SIGINT", "preemption", "a signal to another
        host"), or None. On several hosts a signal counts only at a step where they `agree`
        (every host passes the same value at the same step: it is a collective there)."""
        if jax.process_count() == 1:
            return self.received
        reason = None
        if agree:
            signalled = multihost_utils.process_allgather(np.int32(self.received is not None))
            if signalled.max() > 0:
                reason = self.received or "a signal to another host"
        if reason is None and manager is not None and manager.reached_preemption(step):
            reason = "preemption"
        return reason


@contextlib.contextmanager
def watch() -> Iterator[StopSignals]:
    """StopSignals for the block: SIGTERM and SIGINT handled by the run, the previous
    handlers back when it ends."""
    with StopSignals() as signals:
        yield signals
