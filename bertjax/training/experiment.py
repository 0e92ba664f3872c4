"""The experiment a gin file describes: objective, data, optimizer, batch and schedule.

Building one does no work (no data is read, no device is touched), so `bertjax-train` and
`bertjax-compile` share it: the first trains on local devices, the second compiles the same
step for a TPU topology. gin binds it as `train` (see bertjax/configurables.py).
"""

import dataclasses

import optax

from bertjax.objectives.objective import Objective
from bertjax.training.data_source import DataSource
from bertjax.training.step import StepOptions


@dataclasses.dataclass
class Experiment:
    """Everything a run needs besides the mesh (see `make_mesh`) and the workdir."""

    objective: Objective
    source: DataSource
    optimizer: optax.GradientTransformation
    batch_size: int  # global, over all hosts
    num_steps: int
    seq_phases: tuple = ((1.0, 128),)  # (fraction of the steps, sequence length)
    accum_steps: int = 1
    seed: int = 0
    log_every: int = 10
    checkpoint_every: int = 500
    keep_checkpoints: int = 3
    nonfinite: str = "skip"  # a non-finite loss or gradient: "skip" the update, or "stop"
    max_nonfinite: int = 3  # "skip": stop after this many skipped steps in a row
    # the dropout bits' generator: "threefry", "rbg" or "unsafe_rbg" (training/step.py)
    dropout_rng: str = "threefry"

    def __post_init__(self) -> None:
        StepOptions(dropout_rng=self.dropout_rng)  # one line naming the choices
        if self.nonfinite not in ("skip", "stop"):
            raise ValueError(f"train.nonfinite is {self.nonfinite!r}: set it to 'skip' or 'stop'")
        positive = {"NUM_STEPS (train.num_steps)": self.num_steps,
                    "BATCH_SIZE (train.batch_size)": self.batch_size,
                    "train.accum_steps": self.accum_steps, "train.log_every": self.log_every,
                    "train.checkpoint_every": self.checkpoint_every,
                    "train.keep_checkpoints": self.keep_checkpoints,
                    "train.max_nonfinite": self.max_nonfinite}
        for name, value in positive.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} is {value!r}: set it to a positive whole number")
        if self.objective.carry is not None and self.accum_steps != 1:
            raise ValueError(
                f"{self.objective.name} carries state from step to step row by row, which "
                "micro-batches would split: set train.accum_steps = 1"
            )
