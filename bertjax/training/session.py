"""`bertjax.training.run`: one training run over a workdir, its guards taken once.

    run(job, workdir, mesh=..., lease_timeout=..., show_progress=...)
      the stop-signal watch (preemption.py)         a signal before the first step ends the
      the workdir's lease (lease.py)                run with nothing saved and no half-made
      a new run stopped early leaves nothing (unstarted.py)       workdir left behind
        build the job, when given as a function: data read, prepared and encoded, an
          --init loaded (all of it under the guards above)
        check_run: the experiment fits the mesh, and the workdir holds no other run
          (tokenizer files, data, family: check_resume)
        the loop (loop.train): restore or init, phases, evaluation, checkpoints

`bertjax-train`, `bertjax-finetune` (through `bertjax.finetune.run`), `bertjax-glue` and the
benchmarks train through this function; it is the only place that takes these guards, and it
takes each exactly once per run.
"""

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from jax.sharding import Mesh

from bertjax.files import as_path
from bertjax.training import lease, loop, preemption, unstarted
from bertjax.training.evaluation import Evaluator
from bertjax.training.experiment import Experiment


@dataclasses.dataclass
class Job:
    """What a run trains: the experiment (its source prepared), where a fresh run's
    parameters come from (`initial_params`, see loop.train; None: drawn at random) and its
    periodic evaluation (None: none)."""

    experiment: Experiment
    initial_params: Callable[[Any], Any] | None = None
    evaluator: Evaluator | None = None


def run(job: Job | Callable[[], Job], workdir: str | os.PathLike, *, mesh: Mesh,
        show_progress: bool = False, lease_timeout: float = lease.DEFAULT_TIMEOUT
        ) -> loop.RunResult:
    """Train `job` in `workdir` to its num_steps, resuming from the newest checkpoint there.

    `job` is a Job whose source is prepared, or a function that builds one (reading and
    preparing the data): called under the guards, so a stop signal while it runs ends the
    run in one line and a second run on the workdir is refused before it reads anything.
    `lease_timeout`: seconds after which a gs:// lease its run stopped renewing is taken over
    (training/lease.py). Every bad input is a ValueError naming the fix, raised before the
    workdir changes."""
    workdir = as_path(workdir)
    with (preemption.watch() as signals, lease.hold(workdir, lease_timeout),
          unstarted.discard_if_interrupted(workdir)):
        if not isinstance(job, Job):
            job = job()
        signals.check()
        exp = job.experiment
        loop.check_run(exp, mesh, workdir)
        return loop.train(exp, workdir, mesh, signals, show_progress=show_progress,
                          initial_params=job.initial_params, evaluator=job.evaluator)
