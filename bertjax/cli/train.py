"""bertjax-train: run a configured experiment (absl flags + gin); re-running resumes.

    bertjax-train --gin_file=configs/experiments/bert_tiny_cpu.gin --workdir=/tmp/run \
        --gin.NUM_STEPS=200
"""

import json
import logging
import pathlib
import sys
import time
from typing import Any

import gin
import jax
from absl import app, flags

from bertjax.cli import gin_utils
from bertjax.cli.experiment import Experiment
from bertjax.training import distributed, loop
from bertjax.training.mesh import make_mesh

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("gin_file", [], "Gin files, applied in order.")
flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings (also --gin.NAME=VALUE).")
flags.DEFINE_string("workdir", None, "Run directory: checkpoints, TensorBoard, metrics.jsonl.")
flags.DEFINE_bool("progress", True, "Show the progress bar.")
flags.DEFINE_bool("distributed", False, "Multi-host on a TPU pod: peers are detected.")
flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (multi-host by hand).")
flags.DEFINE_integer("num_processes", None, "Number of processes (with --coordinator_address).")
flags.DEFINE_integer("process_id", None, "This process's id (with --coordinator_address).")


def train(workdir: str, show_progress: bool = True) -> dict[str, Any]:
    """Build the configured experiment, prepare its data in `workdir`, train and checkpoint."""
    exp = Experiment()
    mesh = gin.get_configurable(make_mesh)()  # data/fsdp/model from configs/meshes/*.gin
    exp.source.prepare(workdir)
    model_vocab = getattr(getattr(exp.task.model, "config", None), "vocab_size", None)
    if model_vocab is not None and exp.source.vocab_size > model_vocab:
        raise gin_utils.ConfigError(
            f"the vocabulary has {exp.source.vocab_size} tokens but the model's vocab_size is "
            f"{model_vocab}: set bert_config.vocab_size >= {exp.source.vocab_size}"
        )
    return loop.run_training(
        workdir,
        exp.task,
        exp.source,
        exp.optimizer,
        mesh,
        exp.batch_size,
        exp.num_steps,
        exp.seq_phases,
        exp.accum_steps,
        exp.seed,
        exp.log_every,
        exp.checkpoint_every,
        exp.keep_checkpoints,
        show_progress,
    )


def summarize(summary: dict[str, Any], workdir: pathlib.Path, seconds: float) -> str:
    """A few lines a person reads at the end of a run."""
    keys = ("loss", "mlm_accuracy", "nsp_accuracy", "tokens_per_second")
    scalars = {k: round(summary[k], 4) for k in keys if k in summary}
    lines = [
        f"steps {summary['start_step']} -> {summary['step']} in {seconds:.1f}s",
        f"final metrics: {json.dumps(scalars)}" if scalars else "no new steps (run complete)",
        f"checkpoints: {summary['checkpoint_dir']}",
        f"tensorboard: {workdir / 'tensorboard'}   metrics: {workdir / 'metrics.jsonl'}",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    del argv
    logging.getLogger("absl").setLevel(logging.WARNING)
    try:
        if not FLAGS.workdir:
            raise gin_utils.ConfigError("--workdir is required: pass --workdir=DIR")
        if not FLAGS.gin_file:
            raise gin_utils.ConfigError(
                "--gin_file is required: e.g. --gin_file=configs/experiments/bert_tiny_cpu.gin"
            )
        distributed.initialize(
            FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id, auto=FLAGS.distributed
        )
        gin_utils.parse(FLAGS.gin_file, FLAGS.gin_bindings)
        workdir = pathlib.Path(FLAGS.workdir)
        start = time.perf_counter()
        summary = train(str(workdir), show_progress=FLAGS.progress)
        if jax.process_index() == 0:
            (workdir / "config.gin").write_text(gin.operative_config_str(), encoding="utf-8")
            print(summarize(summary, workdir, time.perf_counter() - start))
    except (ValueError, OSError) as err:
        gin_utils.fail("bertjax-train", err)


def run() -> None:
    """Console-script entry point."""
    app.run(main, argv=gin_utils.rewrite_gin_args(sys.argv))


if __name__ == "__main__":
    run()
