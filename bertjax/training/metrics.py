"""Metric sinks: TensorBoard event files and a JSON-lines file, written by process 0.

Both are opened at the first write, so a run that stops before its first logged step leaves
no empty event file or metrics.jsonl behind.
"""

import json
import pathlib

import jax
from tensorboardX import SummaryWriter


class MetricWriter:
    """Writes scalars to `<workdir>/tensorboard` and `<workdir>/metrics.jsonl`."""

    def __init__(self, workdir: str | pathlib.Path):
        self.enabled = jax.process_index() == 0
        self.workdir = pathlib.Path(workdir)
        self.tensorboard = None
        self.jsonl = None

    def _open(self) -> None:
        self.tensorboard = SummaryWriter(str(self.workdir / "tensorboard"))
        self.jsonl = open(self.workdir / "metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115

    def write(self, step: int, scalars: dict[str, float]) -> None:
        if not self.enabled:
            return
        if self.jsonl is None:
            self._open()
        for name, value in scalars.items():
            self.tensorboard.add_scalar(name, value, step)
        self.jsonl.write(json.dumps({"step": step, **scalars}) + "\n")
        self.jsonl.flush()

    def close(self) -> None:
        if self.jsonl is not None:
            self.tensorboard.close()
            self.jsonl.close()
