"""Stopping a run cleanly when the machine asks: SIGTERM (a preempted or maintained Cloud TPU
VM, a batch scheduler), SIGINT (Ctrl-C), or JAX's preemption notice in a multi-host run.

The loop asks `should_stop(step)` after every step; on yes it saves a checkpoint at that step
(the data position included), flushes its metrics and returns, so rerunning the same command
resumes there. All hosts of a multi-host run agree on the step: a signal seen by any host
stops every host at the same step, as does orbax's `reached_preemption` (the sync point of
JAX's preemption service on TPU pods). A second Ctrl-C interrupts at once.
"""

import signal
import types
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """Within `with StopSignals() as stop:`, SIGTERM and SIGINT are noted, not fatal."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def _note(self, signum: int, frame: types.FrameType | None) -> None:
        del frame
        self.received = signal.Signals(signum).name
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C interrupts

    def __enter__(self) -> "StopSignals":
        try:
            self._previous = {s: signal.signal(s, self._note) for s in SIGNALS}
        except ValueError:  # not the main thread (e.g. a notebook's worker): no handlers
            self._previous = {}
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def should_stop(self, step: int, manager: Any = None) -> str | None:
        """Why to stop after `step` ("SIGTERM", "SIGINT", "preemption"), or None."""
        reason = self.received
        if jax.process_count() > 1:
            anyone = multihost_utils.process_allgather(np.int32(reason is not None)).max() > 0
            if anyone and reason is None:
                reason = "a signal to another host"
            if reason is None and manager is not None and manager.reached_preemption(step):
                reason = "preemption"
        return reason
