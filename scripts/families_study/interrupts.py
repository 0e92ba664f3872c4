"""Ctrl-C and SIGTERM to the families study: it stops at once, and rerunning it resumes.

The pretraining runs are bertjax-train processes, each started in a process group of its own
(`start`), so a terminal's Ctrl-C reaches the study alone; the study passes the signal on once
to each run under way, which saves a checkpoint where it is and stops (a run that got the
terminal's signal too would take the study's as a second one and end at once, unsaved). No run
starts after the signal, and no run under way is recorded as finished. The runs made in this
process (bertjax.finetune.run) watch the signals themselves while they train; the study
stops after such a run (`check`).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_lock = threading.RLock()  # the handler runs on the main thread, maybe while a worker holds it
_running: set[subprocess.Popen] = set()
_received: list[str] = []  # the signal that stopped the study (its first)


class StudyInterrupted(KeyboardInterrupt):
    """A signal stopped the study; its name ("SIGINT") is the message."""


def received() -> str | None:
    """The signal that stopped the study, or None."""
    return _received[0] if _received else None


def note(name: str) -> None:
    """Record a signal the study did not handle itself (one a run in this process took after
    its last step): the study stops at the next `check`."""
    with _lock:
        if not _received:
            _received.append(name)


def check() -> None:
    """Raise StudyInterrupted if a signal came (between runs: an exception the handler raised
    can be lost, in a garbage-collection callback for one)."""
    if _received:
        raise StudyInterrupted(_received[0])


def _on_signal(signum: int, frame: object) -> None:
    del frame
    name = signal.Signals(signum).name
    note(name)
    with _lock:
        for process in _running:  # a second signal: they end at once, as asked
            process.send_signal(signum)
    raise StudyInterrupted(name)


@contextlib.contextmanager
def watch() -> Iterator[None]:
    """SIGINT and SIGTERM stop the study within the block (its main thread's)."""
    _received.clear()
    previous = {signum: signal.signal(signum, _on_signal) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def start(command: Sequence[str], **options: Any) -> subprocess.Popen:
    """Start a run's process in a process group of its own (see the module docstring),
    unless the study is stopping; `finished` forgets it."""
    with _lock:
        check()
        process = subprocess.Popen(command, start_new_session=True, **options)
        _running.add(process)
    return process


def finished(process: subprocess.Popen) -> None:
    with _lock:
        _running.discard(process)
