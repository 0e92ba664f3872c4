"""Metric sinks: TensorBoard event files and a JSON-lines file, written by process 0."""

import json
import pathlib

import jax
from tensorboardX import SummaryWriter


class MetricWriter:
    """Writes scalars to `<workdir>/tensorboard` and `<workdir>/metrics.jsonl`."""

    def __init__(self, workdir: str | pathlib.Path):
        self.enabled = jax.process_index() == 0
        if not self.enabled:
            return
        workdir = pathlib.Path(workdir)
        self.tensorboard = SummaryWriter(str(workdir / "tensorboard"))
        self.jsonl = open(workdir / "metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115

    def write(self, step: int, scalars: dict[str, float]) -> None:
        if not self.enabled:
            return
        for name, value in scalars.items():
            self.tensorboard.add_scalar(name, value, step)
        self.jsonl.write(json.dumps({"step": step, **scalars}) + "\n")
        self.jsonl.flush()

    def close(self) -> None:
        if self.enabled:
            self.tensorboard.close()
            self.jsonl.close()
