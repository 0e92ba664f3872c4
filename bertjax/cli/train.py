"""bertjax-train: run a configured pretraining experiment (absl flags + gin); re-running resumes.

    bertjax-train --gin_file=configs/experiments/bert_tiny_cpu.gin --workdir=/tmp/run \
        --gin.NUM_STEPS=200

The gin file names the model, objective, data and optimizer (configs/experiments/ has one per
paper setup; files shipped with bertjax are found from any directory). --init=DIR continues BERT
pretraining from released weights (a Google BERT or Hugging Face BERT directory; the model
sizes and the data's vocab.txt and case must be the checkpoint's: convert/continued.py). The
workdir receives checkpoints, TensorBoard events, metrics.jsonl, the tokenizer files and
config.gin. Bad input (a gin typo, a binding nothing reads, a corpus that is missing or
binary, a checkpoint of another model) is refused before anything in the workdir changes.
"""

import json
import os
import time

import gin
from absl import flags

from bertjax import files, training
from bertjax.cli import gin_utils, runner
from bertjax.objectives.objective import Objective
from bertjax.training import distributed, lease, loop

PROGRAM = "bertjax-train"
FLAGS = flags.FLAGS


def define_flags() -> None:
    """This tool's flags (defined when it runs: other tools define some of the same names)."""
    runner.define_gin_flags()
    string, integer, boolean = flags.DEFINE_string, flags.DEFINE_integer, flags.DEFINE_bool
    for define, name, default, help_text in (
        (string, "workdir", None, "Run directory: checkpoints, TensorBoard, metrics.jsonl; "
                                  "re-running with the same directory resumes."),
        (string, "init", None, "Continue BERT pretraining from a Google BERT directory "
                               "(bert_config.json, vocab.txt, bert_model.ckpt.*) or a Hugging "
                               "Face BERT directory; a fresh run starts from its weights."),
        (boolean, "do_lower_case", None, "Whether the --init checkpoint is uncased, where its "
                                         "directory name does not say."),
        (boolean, "progress", True, "Show the progress bar."),
        (boolean, "distributed", False, "Multi-host on a TPU pod: peers are detected."),
        (string, "coordinator_address", None, "host:port of process 0 (multi-host by hand)."),
        (integer, "num_processes", None, "Number of processes (with --coordinator_address)."),
        (integer, "process_id", None, "This process's id (with --coordinator_address)."),
    ):
        runner.define_once(define, name, default, help_text)
    runner.define_lease_flag()


def check_workdir(workdir: str | None) -> files.Path:
    """The workdir as a local or gs:// path; one line when it is missing, of a scheme bertjax
    cannot write, or is (or lies under) a file."""
    if not workdir:
        raise gin_utils.ConfigError("--workdir is required: pass --workdir=DIR (a new directory, "
                                    "or an existing run's to resume it)")
    path = files.as_path(workdir)
    if files.is_remote(path):
        return path
    if path.exists() and not path.is_dir():
        raise gin_utils.ConfigError(f"--workdir={workdir} is a file, not a directory: pass a new "
                                    "directory, or an existing run's directory to resume it")
    parent = files.absolute(path).parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise gin_utils.ConfigError(f"--workdir={workdir} lies under {parent}, which is a file: "
                                    "pass a directory path")
    return path


def train(workdir: str | os.PathLike, show_progress: bool = True, init: str | None = None,
          lower_case: bool | None = None, lease_timeout: float = lease.DEFAULT_TIMEOUT
          ) -> tuple[loop.RunResult, Objective]:
    """Build the configured experiment and train it (bertjax.training.run); with `init`, a
    fresh run starts from those pretrained weights. Nothing is written to `workdir` until
    every check has passed."""
    exp = gin_utils.configured("train")
    mesh = gin.get_configurable("bertjax.make_mesh")()  # data/fsdp/model from meshes/*.gin
    gin_utils.check_all_read(ignore=("aot_compile",))  # TPU mesh files also bind the compiler

    def build() -> training.Job:
        exp.source.prepare(workdir)
        if not init:
            return training.Job(exp)
        from bertjax.convert import continued  # reads TensorFlow checkpoints: only when asked

        return training.Job(exp, continued.initial_params(init, exp.objective, exp.source,
                                                          lower_case))

    result = training.run(build, workdir, mesh=mesh, show_progress=show_progress,
                          lease_timeout=lease_timeout)
    return result, exp.objective


def summarize(result: loop.RunResult, objective: Objective, workdir: files.Path,
              seconds: float) -> str:
    """A few lines a person reads at the end of a run: the objective's own metrics."""
    keys = [key for key, _ in objective.progress] + ["tokens_per_second"]
    scalars = {k: round(result.metrics[k], 4) for k in keys if k in result.metrics}
    lines = [
        f"steps {result.start_step} -> {result.step} in {seconds:.1f}s",
        f"final metrics: {json.dumps(scalars)}" if scalars else "no new steps (run complete)",
        f"checkpoints: {result.checkpoint_dir}",
        f"tensorboard: {workdir / 'tensorboard'}   metrics: {workdir / 'metrics.jsonl'}",
    ]
    return "\n".join(lines)


def main() -> None:
    workdir = check_workdir(FLAGS.workdir)
    if not FLAGS.gin_file:
        raise gin_utils.ConfigError(
            "--gin_file is required: e.g. --gin_file=configs/experiments/bert_tiny_cpu.gin"
        )
    # JAX's distributed client installs a SIGTERM handler of its own (its preemption notice),
    # so the run's handlers go in after it, which keeps SIGTERM a stop at a saved step.
    distributed.initialize(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id,
                           auto=FLAGS.distributed)
    runner.announce_backend(PROGRAM)
    gin_utils.parse(FLAGS.gin_file, FLAGS.gin_bindings)
    start = time.perf_counter()
    result, objective = train(workdir, FLAGS.progress, FLAGS.init, FLAGS.do_lower_case,
                              FLAGS.lease_timeout)
    runner.finish_run(PROGRAM, result, workdir, lambda: summarize(
        result, objective, workdir, time.perf_counter() - start))


def run() -> None:
    """Console-script entry point."""
    define_flags()
    runner.run(PROGRAM, __doc__, main, [__name__, runner.__name__])


if __name__ == "__main__":
    run()
