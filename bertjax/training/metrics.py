"""Metric sinks: TensorBoard event files and a JSON-lines file, written by process 0.

The loop opens the writer before the first step (`open`), so a metrics.jsonl that cannot be
written (a directory in its place) fails before any compute, and a resumed run first drops
what the interrupted run logged after the step it resumes from: metrics.jsonl lines directly,
TensorBoard events by a SessionLog START event at the first new step, on which TensorBoard
discards the old file's later steps. Each step is logged once and every write is flushed
(locally to disk; on object storage see `files.AppendFile`).

A crash can tear the last line of metrics.jsonl. `read_metrics`, which the writer and every
reader use, drops a torn last line with one warning; a bad line anywhere else is an error
naming the file and the line.

Events are written by `event_file.EventFile` (TFRecords of `Event` protos, encoded without
TensorFlow, so logging works on accelerator images that do not have it).
"""

import json
import logging
import os

from bertjax.files import AppendFile, as_path, write_text
from bertjax.training.event_file import EventFile

METRICS = "metrics.jsonl"


class MetricsError(ValueError):
    """A metrics.jsonl that cannot be read or written; the message names the file and line."""


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """The rows of a metrics.jsonl, each a JSON object with its "step"; a torn last line is
    dropped with one warning; anything else that is not such a row is one line naming the
    file (and the line)."""
    path = as_path(path)
    if path.is_dir():
        raise MetricsError(f"{path} is a directory, not a metrics file: move it away")
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as err:
        raise MetricsError(f"{path} is not UTF-8 text (at byte {err.start}): restore the file "
                           "or move it away") from None
    numbered = [(n, line) for n, line in enumerate(lines, 1) if line.strip()]
    rows = []
    for i, (number, line) in enumerate(numbered):
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not an object")
        except ValueError:
            if i == len(numbered) - 1:
                logging.warning("%s:%d is a torn last line (a crash while it was written): "
                                "dropped", path, number)
                break
            raise MetricsError(f"{path}:{number} is not a JSON object: restore the file or "
                               "delete that line") from None
        if not isinstance(row.get("step"), int) or isinstance(row["step"], bool):
            raise MetricsError(f"{path}:{number} has no \"step\" (a whole number): restore the "
                               "file or delete that line")
        rows.append(row)
    return rows


class MetricWriter:
    """Writes scalars to `<workdir>/tensorboard` and `<workdir>/metrics.jsonl`."""

    def __init__(self, workdir: str | os.PathLike, enabled: bool | None = None):
        if enabled is None:
            import jax

            enabled = jax.process_index() == 0
        self.enabled = enabled
        self.workdir = as_path(workdir)
        self.resumed_at = 0
        self.tensorboard = None
        self.jsonl = None

    def resume_from(self, step: int) -> None:
        """The run continues after `step`: what was logged after it is dropped at opening."""
        self.resumed_at = step

    def open(self) -> None:
        """Keep what was logged up to the resumed step and open both sinks (process 0)."""
        if not self.enabled or self.jsonl is not None:
            return
        path = self.workdir / METRICS
        if path.exists():
            rows = read_metrics(path)
            kept = [row for row in rows if row.get("step", 0) <= self.resumed_at]
            text = "".join(json.dumps(row) + "\n" for row in kept)
            if text != path.read_text(encoding="utf-8"):
                write_text(path, text)
        purge = self.resumed_at + 1 if self.resumed_at else None
        self.jsonl = AppendFile(path)
        self.tensorboard = EventFile(self.workdir / "tensorboard", purge_step=purge)

    def write(self, step: int, scalars: dict[str, float]) -> None:
        if not self.enabled:
            return
        self.open()
        self.tensorboard.add_scalars(step, scalars)
        self.tensorboard.flush()
        self.jsonl.write((json.dumps({"step": step, **scalars}) + "\n").encode("utf-8"))
        self.jsonl.flush()

    def flush(self) -> None:
        """Everything logged so far made durable now (object storage included)."""
        if self.jsonl is not None:
            self.tensorboard.flush(force=True)
            self.jsonl.flush(force=True)

    def close(self) -> None:
        if self.jsonl is not None:
            try:
                self.tensorboard.close()
            finally:  # both files are closed, whichever fails to flush (a full disk)
                self.jsonl.close()
