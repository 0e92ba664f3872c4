"""bertjax-compile: compile an experiment's real train step for its TPU slice, on this host.

Prints, for each sequence-length phase, the HBM one core needs against its capacity, the FLOPs
of a step and a roofline estimate of the step and phase times; exits nonzero when a phase does
not fit. Needs libtpu (pip install -e '.[tpu]'), not a TPU.

    bertjax-compile --gin_file=configs/experiments/bert_base_tpu_v3_32.gin
    bertjax-compile --gin_file=configs/experiments/bert_large_tpu_v3_128.gin \
        --gin.aot_compile.topology="'v3:2x2'" --gin.make_mesh.data=8     # on a v3-8 instead?
"""

import dataclasses
import os
import time
from collections.abc import Sequence

import gin
import jax
from absl import flags

from bertjax.cli import gin_utils, runner
from bertjax.training import aot
from bertjax.training.experiment import Experiment
from bertjax.training.step import StepOptions

PROGRAM = "bertjax-compile"
FLAGS = flags.FLAGS

GiB = aot.GiB
FIX = (
    "lower train.batch_size, raise train.accum_steps, set {config}.remat = True, or shard "
    "parameters with make_mesh.fsdp"
)


@dataclasses.dataclass(frozen=True)
class CompileResult:
    """What was compiled (the slice, mesh and batch) and one report per phase."""

    topology: str
    config_name: str  # the model config's gin name, for advice
    accelerator: aot.Accelerator
    mesh_shape: dict[str, int]
    batch_size: int
    accum_steps: int
    phases: list[aot.PhaseReport]
    seconds: float  # wall time to build, lower and compile every phase
    data: str = ""  # what the run reads, when that is known without reading it (a store)

    @property
    def fits(self) -> bool:
        return all(p.fits for p in self.phases)


def compile_experiment(
    gin_files: Sequence[str], bindings: Sequence[str] = (), jobs: int = 1
) -> CompileResult:
    """Parse the gin files from scratch and compile every phase of the experiment they describe.

    No data is read: batches are abstract, shaped as the objective's. The step compiled is the
    one the training loop runs, carried state (ELMo's stream mode) included. A corpus that is
    a token store (store:PATH, local or gs://) has its manifest checked against the model.
    """
    start = time.perf_counter()
    gin.clear_config()
    gin_utils.parse(list(gin_files), list(bindings))
    exp = gin_utils.configured("train")
    target = gin_utils.configured("aot_compile")
    devices = aot.topology_devices(target.topology)
    accel = aot.accelerator_of(devices)
    mesh = gin.get_configurable("bertjax.make_mesh")(devices=devices)  # meshes/*.gin
    gin_utils.check_all_read()
    data = data_line(exp)
    phases = aot.compile_phases(
        exp.objective,
        exp.optimizer,
        mesh,
        exp.batch_size,
        exp.num_steps,
        exp.seq_phases,
        target.hbm_bytes_per_device or accel.hbm_bytes,
        exp.seed,
        exp.accum_steps,
        jobs=jobs,
        options=StepOptions(dropout_rng=exp.dropout_rng),
    )
    return CompileResult(
        target.topology,
        exp.objective.config_name,
        accel,
        dict(mesh.shape),
        exp.batch_size,
        exp.accum_steps,
        phases,
        time.perf_counter() - start,
        data,
    )


def data_line(exp: Experiment) -> str:
    """The report's line on a token-store corpus (its manifest, checked against the model);
    "" for other corpora, which are read only when the run starts."""
    store = getattr(exp.source, "store_path", None)
    if store is None:
        return ""
    from bertjax.data.store.reader import store_summary

    return store_summary(store, exp.objective.family,
                         getattr(exp.objective.config, "vocab_size", None))


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s"


def _phase_row(p: aot.PhaseReport) -> str:
    if p.memory is None:
        needs = f">{p.required_bytes / GiB:.2f}" if p.required_bytes else "?"
        return (
            f"{p.seq_length:>5} {p.steps:>10,} {needs:>9} {'':>6} {'no':>4}   "
            "(the TPU compiler ran out of HBM)"
        )
    m = p.memory
    state = (m.arguments + m.outputs - m.aliased) / GiB
    xla = f"{p.xla_seconds * 1e3:.1f}" if p.xla_seconds else "-"
    return (
        f"{p.seq_length:>5} {p.steps:>10,} {m.total / GiB:>9.2f} {m.total / p.hbm_bytes:>6.1%} "
        f"{'yes' if p.fits else 'no':>4} {state:>6.2f} {m.temporaries / GiB:>5.2f} "
        f"{m.code / GiB:>5.2f} {p.flops * p.num_devices / 1e12:>8.1f} "
        f"{p.model_flops / 1e12:>6.1f} {p.step_seconds * 1e3:>8.1f} {xla:>6} {p.bound:>7} "
        f"{_duration(p.phase_seconds):>9} {p.compile_seconds:>7.0f}"
    )


def format_report(result: CompileResult) -> str:
    """The table a person reads: one row per phase, then the total."""
    a, phases = result.accelerator, result.phases
    mesh = " ".join(f"{k}={v}" for k, v in result.mesh_shape.items())
    params = phases[0].num_params / 1e6
    lines = [
        f"{a.name} slice {result.topology!r}: {phases[0].num_devices} cores, mesh {mesh}; "
        f"global batch {result.batch_size} (accum_steps {result.accum_steps}), "
        f"{params:.1f}M parameters",
        f"per core: {result.phases[0].hbm_bytes / GiB:.1f} GiB HBM, "
        f"{a.peak_flops / 1e12:.1f} TFLOP/s bf16, {a.hbm_bandwidth / 1e9:.0f} GB/s "
        "(roofline = max(FLOPs / peak, bytes / bandwidth); communication not counted)",
        *([result.data] if result.data else []),
        "",
        f"{'':>5} {'':>10} {'HBM/core':>9} {'of HBM':>6} {'':>4} {'-- of which, GiB --':>18} "
        f"{'-- TFLOP/step --':>15} {'--- step, ms ---':>15} {'':>7} {'phase':>9} {'compile':>7}",
        f"{'seq':>5} {'steps':>10} {'GiB':>9} {'%':>6} {'fits':>4} {'state':>6} {'temp':>5} "
        f"{'code':>5} {'XLA':>8} {'6NT':>6} {'roofline':>8} {'XLA':>6} {'bound':>7} "
        f"{'time':>9} {'s':>7}",
    ]
    lines += [_phase_row(p) for p in phases]
    total = _duration(sum(p.phase_seconds for p in phases)) if result.fits else "-"
    steps = sum(p.steps for p in phases)
    lines.append(f"{'total':>5} {steps:>10,} {'':>80} {total:>9} {result.seconds:>7.0f}")
    lines.append(
        "state = parameters, optimizer state and batch (the new state overwrites the "
        "donated one)\nXLA = the TPU compiler's count and estimate; "
        "6NT = 6 x parameters x tokens, the usual estimate"
    )
    return "\n".join(lines)


def check_fits(result: CompileResult) -> None:
    """Raise a one-line error naming the first phase that does not fit and what to change."""
    for p in result.phases:
        if p.fits:
            continue
        if p.memory is None:
            needs = f"{p.required_bytes / GiB:.1f} GiB" if p.required_bytes else "more"
            used = f"its temporaries alone need {needs}"
        else:
            used = f"it needs {p.memory.total / GiB:.1f} GiB"
        raise gin_utils.ConfigError(
            f"the train step at sequence length {p.seq_length} does not fit on a "
            f"{result.accelerator.name} core ({used} of {p.hbm_bytes / GiB:.0f} GiB HBM): "
            + FIX.format(config=result.config_name)
        )


def main() -> None:
    if not FLAGS.gin_file:
        raise gin_utils.ConfigError(
            "--gin_file is required: e.g. --gin_file=configs/experiments/bert_base_tpu_v3_32.gin"
        )
    runner.announce_backend(PROGRAM)
    result = compile_experiment(FLAGS.gin_file, FLAGS.gin_bindings, FLAGS.jobs)
    print(format_report(result), flush=True)
    check_fits(result)


def define_flags() -> None:
    """This tool's flags (defined when it runs: other tools define some of the same names)."""
    runner.define_gin_flags()
    runner.define_once(flags.DEFINE_integer, "jobs", 1, "Phases compiled at once (a BERT-large "
                       "phase for 128 cores takes a core and ~8 GB of RAM).")


def run() -> None:
    """Console-script entry point. This host only compiles, so JAX runs on its CPU."""
    if "JAX_PLATFORMS" not in os.environ:
        jax.config.update("jax_platforms", "cpu")
    define_flags()
    runner.run(PROGRAM, __doc__, main, [__name__, runner.__name__], runs_steps=False)


if __name__ == "__main__":
    run()
