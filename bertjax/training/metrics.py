"""Metric sinks: TensorBoard event files and a JSON-lines file, written by process 0.

Both are opened at the first write, so a run that stops before its first logged step leaves
no empty event file or metrics.jsonl behind. A resumed run first drops what the interrupted
run logged after the step it resumes from: metrics.jsonl lines directly, TensorBoard events by
a SessionLog START event at the first new step, on which TensorBoard discards the old file's
later steps. Each step is logged once and every write is flushed.

Events are written by `event_file.EventFile` (TFRecords of `Event` protos, encoded without
TensorFlow, so logging works on accelerator images that do not have it).
"""

import json
import pathlib

import jax

from bertjax.files import write_text
from bertjax.training.event_file import EventFile


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
