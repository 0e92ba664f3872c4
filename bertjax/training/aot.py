"""Ahead-of-time compilation of the real train step for a TPU slice, on a host without TPUs.

libtpu describes a named slice ("v3:4x4" is a v3-32) as compile-only devices. The jitted,
sharded, donating step from `build_trainer` is lowered over a mesh of them with abstract state
and batch, and the TPU compiler reports what one core needs: HBM (parameters, optimizer state,
temporaries, program) and FLOPs. A roofline turns FLOPs and bytes into a step time.

The roofline leaves out communication between cores (the gradient all-reduce, which XLA
overlaps with the backward pass) and assumes every FLOP runs at the bf16 matmul peak and every
byte moves at full HBM bandwidth: a lower bound on the step time, not a prediction of it.
"""

import concurrent.futures
import dataclasses
import os
import re
import time
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import optax
from jax.experimental import topologies
from jax.sharding import Mesh

from bertjax.layers.partitioning import DEFAULT_RULES
from bertjax.objectives.objective import Objective
from bertjax.training import mesh as mesh_lib
from bertjax.training.loop import Trainer, build_trainer, phase_plan
from bertjax.training.step import StepOptions

GiB = 2**30


class AotError(ValueError):
    """A topology, accelerator or configuration that cannot be compiled for."""


@dataclasses.dataclass
class CompileTarget:
    """The TPU slice `bertjax-compile` compiles for (gin: aot_compile, bound by the
    configs/meshes/tpu_*.gin files that `bertjax-train` reads too)."""

    topology: str = ""  # libtpu's name, e.g. 'v3:4x4' for a v3-32
    hbm_bytes_per_device: int | None = None  # None: the device's own (16 GiB on TPU v3)


@dataclasses.dataclass(frozen=True)
class Accelerator:
    """Peak rates of one JAX device (one TensorCore on TPU v2/v3)."""

    name: str
    peak_flops: float  # FLOP/s, bf16 matrix units
    hbm_bandwidth: float  # bytes/s
    hbm_bytes: int


# Cloud TPU system architecture (cloud.google.com/tpu/docs/v3, v4, v5e): a v3 chip has 123
# TFLOP/s of bf16 compute and 32 GiB of HBM at 900 GB/s, split over its two TensorCores, and JAX
# sees each TensorCore as one device. A v4 chip (275 TFLOP/s, 32 GiB at 1,200 GB/s) is one
# device (its two TensorCores run as one megacore); so is a v5e chip (197 TFLOP/s, 16 GiB at
# 819 GB/s). Keyed by `device.device_kind`.
ACCELERATORS: dict[str, Accelerator] = {
    "TPU v3": Accelerator(
        "TPU v3", peak_flops=123e12 / 2, hbm_bandwidth=900e9 / 2, hbm_bytes=16 * GiB
    ),
    "TPU v4": Accelerator("TPU v4", peak_flops=275e12, hbm_bandwidth=1200e9, hbm_bytes=32 * GiB),
    "TPU v5 lite": Accelerator(
        "TPU v5e", peak_flops=197e12, hbm_bandwidth=819e9, hbm_bytes=16 * GiB
    ),
}


def _prepare_libtpu() -> None:
    """Environment for loading libtpu only to compile; values already set (a TPU VM's) are kept.

    libtpu takes /tmp/libtpu_lockfile for the life of any process that loads it, including any
    JAX process on a CPU host whose platforms are not restricted to cpu; compiling touches no
    chip, so it need not wait for that lock. Without a local worker named, libtpu also prints
    "could not determine TPU accelerator type" and an INVALID_ARGUMENT trace.
    """
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v3-8")


def topology_devices(topology: str) -> list[Any]:
    """Compile-only devices of a named TPU slice, e.g. "v3:4x4" (v3-32) or "v3:8x8" (v3-128)."""
    hint = "set aot_compile.topology to a name like 'v3:4x4' (v3-32) or 'v3:8x8' (v3-128)"
    if not topology:
        raise AotError(
            f"no TPU topology to compile for: {hint}, or include a configs/meshes/tpu_*.gin file"
        )
    _prepare_libtpu()
    try:
        return list(topologies.get_topology_desc(topology, platform="tpu").devices)
    except RuntimeError as err:  # JaxRuntimeError is a RuntimeError too
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if "not installed" in first:
            raise AotError(
                "libtpu is not installed, so TPU programs cannot be compiled here: "
                "pip install -e '.[tpu]' (jax[tpu]==0.10.2)"
            ) from err
        if "INVALID_ARGUMENT" in first:
            raise AotError(f"unknown TPU topology {topology!r} ({first}): {hint}") from err
        raise AotError(
            f"libtpu could not describe TPU topology {topology!r} ({first}): "
            "check the libtpu install (pip install -e '.[tpu]')"
        ) from err


def accelerator_of(devices: Sequence[Any]) -> Accelerator:
    """Peak rates of the devices' kind; one line naming the kinds known otherwise."""
    kind = devices[0].device_kind
    if kind not in ACCELERATORS:
        raise AotError(
            f"no peak FLOP/s and bandwidth figures for {kind!r}: choose a "
            f"{' or '.join(ACCELERATORS)} topology, or add it to aot.ACCELERATORS"
        )
    return ACCELERATORS[kind]


def batch_spec(objective: Objective, batch_size: int, seq_length: int) -> dict[str, tuple]:
    """{feature: (shape, dtype)} of the objective's batch, as its data pipeline yields it."""
    example = objective.example_batch(batch_size, seq_length)
    return {k: (v.shape, v.dtype) for k, v in example.items()}


@dataclasses.dataclass(frozen=True)
class MemoryUse:
    """Bytes one device holds while the step runs, from XLA's buffer assignment."""

    arguments: int  # state + this device's share of the batch
    outputs: int
    aliased: int  # outputs written in place of donated arguments (the new state)
    temporaries: int  # activations, gradients, optimizer scratch
    code: int  # the compiled program

    @property
    def total(self) -> int:
        return self.arguments + self.outputs - self.aliased + self.temporaries + self.code


@dataclasses.dataclass(frozen=True)
class PhaseReport:
    """One sequence-length phase compiled for one device of the slice.

    `memory` is None when the compiler ran out of HBM; `required_bytes` is then what it said
    the temporaries alone need. FLOPs and bytes are per device per step (XLA's count).
    """

    seq_length: int
    steps: int
    batch_size: int  # global
    num_params: int
    num_devices: int
    hbm_bytes: int
    compile_seconds: float
    memory: MemoryUse | None
    required_bytes: int | None = None
    flops: float = 0.0
    bytes_accessed: float = 0.0
    compute_seconds: float = 0.0  # flops at peak
    memory_seconds: float = 0.0  # bytes_accessed at peak HBM bandwidth
    xla_seconds: float | None = None  # the TPU compiler's own estimate of the step time

    @property
    def fits(self) -> bool:
        return self.memory is not None and self.memory.total <= self.hbm_bytes

    @property
    def step_seconds(self) -> float:
        """Roofline step time: the slower of compute and HBM traffic."""
        return max(self.compute_seconds, self.memory_seconds)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_seconds >= self.memory_seconds else "memory"

    @property
    def model_flops(self) -> float:
        """6 * parameters * tokens: the usual estimate for the whole step, for comparison."""
        return 6.0 * self.num_params * self.batch_size * self.seq_length

    @property
    def phase_seconds(self) -> float:
        return self.steps * self.step_seconds


def memory_use(compiled: jax.stages.Compiled) -> MemoryUse:
    """Per-device bytes from `compiled.memory_analysis()`."""
    stats = compiled.memory_analysis()
    return MemoryUse(
        arguments=stats.argument_size_in_bytes,
        outputs=stats.output_size_in_bytes,
        aliased=stats.alias_size_in_bytes,
        temporaries=stats.temp_size_in_bytes,
        code=stats.generated_code_size_in_bytes,
    )


def _cost(compiled: jax.stages.Compiled) -> dict[str, float]:
    cost = compiled.cost_analysis()
    return cost[0] if isinstance(cost, list) else cost  # a list of one dict in older releases


_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def required_bytes(message: str) -> int | None:
    """The memory the TPU compiler said it needs, from its RESOURCE_EXHAUSTED message."""
    match = re.search(r"\(([\d.]+)([KMGT]?)\)", message)
    return int(float(match.group(1)) * _UNITS[match.group(2)]) if match else None


def lower_train_step(trainer: Trainer, spec: dict[str, tuple]) -> jax.stages.Lowered:
    """Lower the step the training loop runs (state, carried state included, and batch
    abstract), in the trainer's mesh and rules."""
    sharding = mesh_lib.batch_sharding(trainer.mesh)
    batch = {k: jax.ShapeDtypeStruct(s, d, sharding=sharding) for k, (s, d) in spec.items()}
    with jax.set_mesh(trainer.mesh), nn.logical_axis_rules(trainer.rules):
        return trainer.step.jitted.lower(trainer.abstract_state, batch)


def lower_phase(objective: Objective, tx: optax.GradientTransformation, mesh: Mesh,
                batch_size: int, seq_length: int, **trainer_options: Any
                ) -> tuple[jax.stages.Lowered, int]:
    """(the train step lowered at one sequence length, its parameter count)."""
    trainer = build_trainer(objective, tx, mesh, batch_size, seq_length, **trainer_options)
    num_params = sum(x.size for x in jax.tree.leaves(trainer.abstract_state.params))
    spec = batch_spec(objective, batch_size, seq_length)
    return lower_train_step(trainer, spec), num_params


def compile_and_measure(lowered: jax.stages.Lowered, accel: Accelerator) -> dict[str, Any]:
    """Compile and read XLA's analyses: the measured fields of a PhaseReport.

    The TPU compiler refuses a program that does not fit in HBM; that is a result here.
    """
    start = time.perf_counter()
    try:
        compiled = lowered.compile()
    except jax.errors.JaxRuntimeError as err:
        if "RESOURCE_EXHAUSTED" not in str(err):
            raise
        return dict(memory=None, required_bytes=required_bytes(str(err)),
                    compile_seconds=time.perf_counter() - start)
    cost = _cost(compiled)
    flops, traffic = float(cost.get("flops", 0.0)), float(cost.get("bytes accessed", 0.0))
    return dict(
        memory=memory_use(compiled),
        flops=flops,
        bytes_accessed=traffic,
        compute_seconds=flops / accel.peak_flops,
        memory_seconds=traffic / accel.hbm_bandwidth,
        # The compiler's own estimate; it reports a negative time where it has no model of the
        # chip (seen for TPU v5e), which is no estimate at all.
        xla_seconds=cost["optimal_seconds"] if cost.get("optimal_seconds", -1) > 0 else None,
        compile_seconds=time.perf_counter() - start,
    )


def compile_phases(
    objective: Objective,
    tx: optax.GradientTransformation,
    mesh: Mesh,
    batch_size: int,
    num_steps: int,
    seq_phases: Sequence[tuple[float, int]],
    hbm_bytes: int,
    seed: int = 0,
    accum_steps: int = 1,
    rules: Sequence = DEFAULT_RULES,
    jobs: int = 1,
    options: StepOptions | None = None,
) -> list[PhaseReport]:
    """One report per sequence-length phase, with batches shaped by `objective.example_batch`.

    Phases are lowered one after another, then compiled `jobs` at a time: the TPU compiler runs
    outside the GIL and dominates the time, but each BERT-large compile holds ~8 GB of RAM.
    """
    mesh_lib.check_batch(batch_size, accum_steps, mesh)  # as run_training checks it
    accel = accelerator_of(list(mesh.devices.flat))
    plan = phase_plan(num_steps, seq_phases)
    lowered = [
        lower_phase(objective, tx, mesh, batch_size, length, seed=seed, accum_steps=accum_steps,
                    rules=rules, options=options)
        for _, length in plan
    ]
    with concurrent.futures.ThreadPoolExecutor(max(1, min(jobs, len(plan)))) as pool:
        measured = list(pool.map(lambda pair: compile_and_measure(pair[0], accel), lowered))
    reports, begin = [], 0
    for (end, length), (_, num_params), fields in zip(plan, lowered, measured, strict=True):
        reports.append(
            PhaseReport(
                seq_length=length,
                steps=end - begin,
                batch_size=batch_size,
                num_params=num_params,
                num_devices=mesh.size,
                hbm_bytes=hbm_bytes,
                **fields,
            )
        )
        begin = end
    return reports
