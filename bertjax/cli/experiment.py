"""The experiment a gin file describes: task, data, optimizer, batch and schedule.

Building it does no work (no data is read, no device is touched), so `bertjax-train` and
`bertjax-compile` share it: the first trains on local devices, the second compiles the same
step for a TPU topology.
"""

import dataclasses
from typing import Any

import gin


@gin.configurable("train", module="bertjax")
@dataclasses.dataclass
class Experiment:
    """Everything `bertjax-train` needs besides the mesh (see `make_mesh`) and the workdir."""

    task: Any = gin.REQUIRED
    source: Any = gin.REQUIRED
    optimizer: Any = gin.REQUIRED
    batch_size: int = gin.REQUIRED
    num_steps: int = gin.REQUIRED
    seq_phases: tuple = ((1.0, 128),)
    accum_steps: int = 1
    seed: int = 0
    log_every: int = 10
    checkpoint_every: int = 500
    keep_checkpoints: int = 3

    def __post_init__(self) -> None:
        positive = {"NUM_STEPS (train.num_steps)": self.num_steps,
                    "BATCH_SIZE (train.batch_size)": self.batch_size,
                    "train.accum_steps": self.accum_steps, "train.log_every": self.log_every,
                    "train.checkpoint_every": self.checkpoint_every,
                    "train.keep_checkpoints": self.keep_checkpoints}
        for name, value in positive.items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} is {value!r}: set it to a positive whole number")


@gin.configurable("aot_compile", module="bertjax")
@dataclasses.dataclass
class CompileTarget:
    """The TPU slice `bertjax-compile` compiles for (bound by configs/meshes/tpu_*.gin).

    Registered here, beside `train`, so that both CLIs parse the TPU mesh files.
    """

    topology: str = ""  # libtpu's name, e.g. 'v3:4x4' for a v3-32
    hbm_bytes_per_device: int | None = None  # None: the device's own (16 GiB on TPU v3)
