"""One fine-tuning run, start to end: `bertjax.finetune.run(recipe, init, train, eval, workdir)`.

    read the examples (and any unlabelled files to predict)  -> the task type's readers
    load the pretrained model (--init)                        -> bertjax.finetune.pretrained
    encode, build the objective                               -> setup_task: task x adapter
    AdamW with linear warmup and decay, epochs -> steps        -> training.optim
    task.json, tokenizer files, init.txt before the first step -> task_record.py (a resume with
                                                                  another vocabulary or head
                                                                  setting is refused)
    train under the run's guards, evaluating every eval_every  -> bertjax.training.run +
      steps and at the end                                        evaluate.py
    GLUE submissions from the best checkpoint                  -> official.py

`bertjax-finetune`, `bertjax-glue`, benchmarks/finetune_classification.py and the tests all run
fine-tuning through `run`; re-running with the same workdir resumes.
"""

import dataclasses
import json
import math
import os
from collections.abc import Sequence
from typing import Any

import jax

from bertjax import files, training
from bertjax.finetune import official
from bertjax.finetune.evaluate import make_evaluator
from bertjax.finetune.examples import Example, Examples
from bertjax.finetune.packed import PackedArraySource
from bertjax.finetune.pretrained import Pretrained, load_pretrained
from bertjax.finetune.recipe import Recipe
from bertjax.finetune.setup import Resolved, TaskSetup, resolve, setup_task
from bertjax.finetune.task import Task
from bertjax.finetune.task_record import (
    check_same_head,
    check_same_tokenizer,
    write_task_record,
)
from bertjax.training import loop
from bertjax.training.evaluation import RESULTS
from bertjax.training.experiment import Experiment
from bertjax.training.lease import DEFAULT_TIMEOUT
from bertjax.training.mesh import data_parallel_size, make_mesh
from bertjax.training.optim import make_optimizer
from bertjax.training.session import Job

Data = str | os.PathLike | Sequence[Example]


@dataclasses.dataclass
class RunOutcome:
    """How a fine-tuning run ended: the loop's result, WORKDIR/eval_results.json's contents
    ({"best": ..., "final": ...}; empty if nothing was evaluated), the submission files
    written, and the setup (task, adapter, encoded data) it ran."""

    result: loop.RunResult
    results: dict[str, Any]
    submissions: list[files.Path]
    setup: TaskSetup


def num_steps(recipe: Recipe, num_examples: int) -> int:
    """Training steps of `recipe.epochs` passes over `num_examples` training examples (the
    last batch of the run completes from the next epoch's rows). Examples, not encoded rows:
    a SQuAD question read in several windows counts once, as run_squad.py counts its
    num_train_steps (len(train_examples) / batch * epochs); the batches are still windows."""
    return max(1, math.ceil(recipe.epochs * num_examples / recipe.batch_size))


def _examples(data: Data, task: Task, text_columns: Sequence[str] | None,
              label_column: str | None, split_hint: str) -> tuple[list[Example], str]:
    """(examples, a name for messages) of a file, "tfds:NAME[:SPLIT]" or examples given."""
    if isinstance(data, str | os.PathLike):
        return task.read(data, text_columns=text_columns, label_column=label_column,
                         split_hint=split_hint), str(data)
    examples = data if isinstance(data, Examples) else list(data)  # keeps a label order
    return examples, f"the {split_hint} examples"


@dataclasses.dataclass
class _Prepared:
    """A fine-tuning run once its data is read and encoded: its setup, the files it
    predicts at the end, and the job the training loop runs."""

    setup: TaskSetup
    unlabelled: dict[str, list[Example]]
    job: Job


def _prepare(recipe: Recipe, resolved: Resolved, init: str | Pretrained, train: Data,
             eval: Data, workdir: files.Path, predict: Sequence[str],
             lower_case: bool | None, mesh: jax.sharding.Mesh) -> _Prepared:
    """Read the examples and the files to predict, load --init, encode, and build the
    experiment, the pretrained initialisation and the evaluator: every check of the inputs
    (a resume's head and vocabulary included) before the workdir changes."""
    task, columns = resolved.task, (recipe.text_columns, recipe.label_column)
    train_examples, train_name = _examples(train, task, *columns, "train")
    eval_examples, eval_name = _examples(eval, task, *columns, "validation")
    steps = num_steps(recipe, len(train_examples))
    predict_files = official.read_unlabelled(predict, task, *columns)
    model = init if isinstance(init, Pretrained) else load_pretrained(init, recipe.family,
                                                                       lower_case=lower_case)
    init_spec = init if isinstance(init, str) else model.source
    check_same_tokenizer(workdir, model, init_spec)  # a resume: the vocabulary it trained with
    setup = setup_task(recipe, model, train_examples, eval_examples, eval_name, resolved,
                       train_name)
    official.warn_unseen_labels(predict_files, setup.labels)
    tx = make_optimizer(recipe.optimizer, recipe.learning_rate,
                        math.ceil(recipe.warmup_fraction * steps),
                        steps, eps=recipe.adam_epsilon, weight_decay=recipe.weight_decay,
                        frozen=setup.frozen)
    check_same_head(workdir, recipe)  # a resume: the head its checkpoints were trained with

    def save_records(workdir: files.Path) -> dict:
        """task.json, the tokenizer's files and init.txt, before the first step (process 0)."""
        if jax.process_index() != 0:
            return {}
        return write_task_record(workdir, recipe, model, setup.labels, init_spec)

    source = setup.source(recipe.seed, train_name, save_records)
    batch_size = recipe.batch_size
    if isinstance(source, PackedArraySource):  # rows holding batch_size examples on average
        batch_size = source.rows_per_step(recipe.batch_size, data_parallel_size(mesh))
    exp = Experiment(setup.objective, source, tx, batch_size, steps,
                     ((1.0, setup.adapter.seq_length(setup.train)),), seed=recipe.seed,
                     log_every=min(10, steps), checkpoint_every=max(1, recipe.eval_every))
    evaluator = make_evaluator(setup, min(recipe.eval_every, steps),
                               recipe.eval_batch_size or recipe.batch_size)
    return _Prepared(setup, predict_files, Job(exp, setup.initial_params, evaluator))


def run(recipe: Recipe, init: str | Pretrained, train: Data, eval: Data,
        workdir: str | os.PathLike, *, predict: Sequence[str] = (),
        lower_case: bool | None = None, mesh: jax.sharding.Mesh | None = None,
        show_progress: bool = False, lease_timeout: float = DEFAULT_TIMEOUT) -> RunOutcome:
    """Fine-tune `init` (an --init spec, or a loaded Pretrained) on `train` and evaluate on
    `eval` (files, TFDS specs or examples) in `workdir`; `predict`: unlabelled files to predict
    with the best checkpoint (GLUE submissions, official.py). `lower_case`: do_lower_case of a
    Google BERT directory whose name does not say it. The run's guards (a stop-signal watch,
    the workdir's lease) are bertjax.training.run's; the data is read under them. Every bad
    input is a ValueError whose one-line message names the fix, raised before the workdir
    changes."""
    workdir = files.as_path(workdir)  # local or gs://
    resolved = resolve(recipe)  # the task type and adapter, once
    mesh = mesh if mesh is not None else make_mesh()
    prepared: list[_Prepared] = []

    def build() -> Job:
        prepared.append(_prepare(recipe, resolved, init, train, eval, workdir, predict,
                                 lower_case, mesh))
        return prepared[0].job

    result = training.run(build, workdir, mesh=mesh, show_progress=show_progress,
                          lease_timeout=lease_timeout)
    setup, written = prepared[0].setup, []
    if jax.process_index() == 0:
        written = official.write_submissions(workdir, prepared[0].unlabelled, setup,
                                             recipe.eval_batch_size or recipe.batch_size)
    results_file = workdir / RESULTS
    results = json.loads(results_file.read_text()) if results_file.is_file() else {}
    return RunOutcome(result, results, written, setup)
