"""Metric sinks: TensorBoard event files and a JSON-lines file, written by process 0.

Both are opened at the first write, so a run that stops before its first logged step leaves
no empty event file or metrics.jsonl behind. A resumed run first drops what the interrupted
run logged after the step it resumes from: metrics.jsonl lines directly, TensorBoard events by
a SessionLog START event at the first new step, on which TensorBoard discards the old file's
later steps. Each step is logged once and every write is flushed.

Events are TFRecords of `tensorflow.Event` protos written with TensorFlow's own record writer;
TensorFlow is loaded anyway for tokenization, so logging adds no import of its own.
"""

import itertools
import json
import os
import pathlib
import socket
import time

import jax
import tensorflow as tf
from tensorflow.core.framework.summary_pb2 import Summary
from tensorflow.core.util.event_pb2 import Event, SessionLog

from bertjax.files import write_text

_FILE_NUMBERS = itertools.count()


class EventFile:
    """One TensorBoard event file of scalar summaries in `logdir`.

    Names sort in creation order, as TensorBoard reads them: wall-clock second, host, process,
    then a per-process counter.
    """

    def __init__(self, logdir: str | pathlib.Path, purge_step: int | None = None):
        logdir = pathlib.Path(logdir)
        logdir.mkdir(parents=True, exist_ok=True)
        name = (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}"
                f".{os.getpid()}.{next(_FILE_NUMBERS):04d}")
        self.records = tf.io.TFRecordWriter(str(logdir / name))
        self._write(Event(wall_time=time.time(), file_version="brain.Event:2"))
        if purge_step is not None:
            self._write(Event(wall_time=time.time(), step=purge_step,
                              session_log=SessionLog(status=SessionLog.START)))

    def _write(self, event: Event) -> None:
        self.records.write(event.SerializeToString())

    def add_scalars(self, step: int, scalars: dict[str, float]) -> None:
        values = [Summary.Value(tag=name, simple_value=float(value))
                  for name, value in scalars.items()]
        self._write(Event(wall_time=time.time(), step=step, summary=Summary(value=values)))

    def flush(self) -> None:
        self.records.flush()

    def close(self) -> None:
        self.records.close()


class MetricWriter:
    """Writes scalars to `<workdir>/tensorboard` and `<workdir>/metrics.jsonl`."""

    def __init__(self, workdir: str | pathlib.Path):
        self.enabled = jax.process_index() == 0
        self.workdir = pathlib.Path(workdir)
        self.resumed_at = 0
        self.tensorboard = None
        self.jsonl = None

    def resume_from(self, step: int) -> None:
        """The run continues after `step`: what was logged after it is dropped at opening."""
        self.resumed_at = step

    def _open(self) -> None:
        path = self.workdir / "metrics.jsonl"
        if path.is_file():
            kept = [line for line in path.read_text(encoding="utf-8").splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= self.resumed_at]
            write_text(path, "".join(line + "\n" for line in kept))
        purge = self.resumed_at + 1 if self.resumed_at else None
        self.tensorboard = EventFile(self.workdir / "tensorboard", purge_step=purge)
        self.jsonl = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def write(self, step: int, scalars: dict[str, float]) -> None:
        if not self.enabled:
            return
        if self.jsonl is None:
            self._open()
        self.tensorboard.add_scalars(step, scalars)
        self.tensorboard.flush()
        self.jsonl.write(json.dumps({"step": step, **scalars}) + "\n")
        self.jsonl.flush()

    def close(self) -> None:
        if self.jsonl is not None:
            self.tensorboard.close()
            self.jsonl.close()
