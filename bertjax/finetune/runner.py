"""One fine-tuning run, start to end: `bertjax.finetune.run(recipe, init, train, eval, workdir)`.

    read the examples (and any unlabelled files to predict)  -> the task type's readers
    load the pretrained model (--init)                        -> bertjax.finetune.pretrained
    encode, build the objective                               -> setup_task: task x adapter
    AdamW with linear warmup and decay, epochs -> steps        -> training.optim
    task.json, tokenizer files, init.txt before the first step -> task_record.py (a resume with
                                                                  another vocabulary is refused)
    train, evaluating every eval_every steps and at the end    -> training.loop + evaluate.py
    GLUE submissions from the best checkpoint                  -> official.py

`bertjax-finetune`, `bertjax-glue`, benchmarks/finetune_classification.py and the tests all run
fine-tuning through `run`; re-running with the same workdir resumes.
"""

import dataclasses
import json
import math
import os
import pathlib
from collections.abc import Sequence
from typing import Any

import jax

from bertjax import files
from bertjax.finetune import official
from bertjax.finetune.adapter import check_supported
from bertjax.finetune.arrays import describe
from bertjax.finetune.evaluate import make_evaluator
from bertjax.finetune.examples import Example, Examples
from bertjax.finetune.families import get_adapter
from bertjax.finetune.packed import PackedArraySource
from bertjax.finetune.pretrained import Pretrained, load_pretrained
from bertjax.finetune.recipe import Recipe
from bertjax.finetune.setup import TaskSetup, setup_task
from bertjax.finetune.task_record import check_same_tokenizer, write_task_record
from bertjax.finetune.tasks import get_task
from bertjax.training import loop
from bertjax.training.evaluation import RESULTS
from bertjax.training.experiment import Experiment
from bertjax.training.mesh import data_parallel_size, make_mesh
from bertjax.training.optim import make_optimizer

Data = str | os.PathLike | Sequence[Example]


@dataclasses.dataclass
class RunOutcome:
    """How a fine-tuning run ended: the loop's result, WORKDIR/eval_results.json's contents
    ({"best": ..., "final": ...}; empty if nothing was evaluated), the submission files
    written, and the setup (task, adapter, encoded data) it ran."""

    result: loop.RunResult
    results: dict[str, Any]
    submissions: list[pathlib.Path]
    setup: TaskSetup


def num_steps(recipe: Recipe, num_examples: int) -> int:
    """Training steps of `recipe.epochs` passes over `num_examples` training examples (the
    last batch of the run completes from the next epoch's rows). Examples, not encoded rows:
    a SQuAD question read in several windows counts once, as run_squad.py counts its
    num_train_steps (len(train_examples) / batch * epochs); the batches are still windows."""
    return max(1, math.ceil(recipe.epochs * num_examples / recipe.batch_size))


def _examples(data: Data, recipe: Recipe, split_hint: str) -> tuple[list[Example], str]:
    """(examples, a name for messages) of a file, "tfds:NAME[:SPLIT]" or examples given."""
    if isinstance(data, str | os.PathLike):
        task = get_task(recipe.task)
        return task.read(data, text_columns=recipe.text_columns,
                         label_column=recipe.label_column, split_hint=split_hint), str(data)
    examples = data if isinstance(data, Examples) else list(data)  # keeps a label order
    return examples, f"the {split_hint} examples"


def run(recipe: Recipe, init: str | Pretrained, train: Data, eval: Data,
        workdir: str | os.PathLike, *, predict: Sequence[str] = (),
        lower_case: bool | None = None, mesh: jax.sharding.Mesh | None = None,
        show_progress: bool = False) -> RunOutcome:
    """Fine-tune `init` (an --init spec, or a loaded Pretrained) on `train` and evaluate on
    `eval` (files, TFDS specs or examples) in `workdir`; `predict`: unlabelled files to predict
    with the best checkpoint (GLUE submissions, official.py). `lower_case`: do_lower_case of a
    Google BERT directory whose name does not say it. Every bad input is a ValueError whose
    one-line message names the fix, raised before the workdir changes."""
    workdir = files.as_path(workdir)  # local or gs://
    check_supported(get_adapter(recipe.family, recipe.approach), get_task(recipe.task),
                    recipe)
    train_examples, train_name = _examples(train, recipe, "train")
    eval_examples, eval_name = _examples(eval, recipe, "validation")
    unlabelled = official.read_unlabelled(predict, recipe)
    model = init if isinstance(init, Pretrained) else load_pretrained(init, recipe.family,
                                                                       lower_case=lower_case)
    init_spec = init if isinstance(init, str) else model.source
    check_same_tokenizer(workdir, model, init_spec)  # a resume: the vocabulary it trained with
    setup = setup_task(recipe, model, train_examples, eval_examples, eval_name)
    official.warn_unseen_labels(predict, recipe, setup.labels)
    steps = num_steps(recipe, len(train_examples))
    tx = make_optimizer(recipe.optimizer, recipe.learning_rate,
                        math.ceil(recipe.warmup_fraction * steps),
                        steps, eps=recipe.adam_epsilon, weight_decay=recipe.weight_decay,
                        frozen=setup.frozen)
    length = setup.adapter.seq_length(setup.train)
    mesh = mesh if mesh is not None else make_mesh()

    def save_records(workdir: files.Path) -> dict:
        """task.json, the tokenizer's files and init.txt, before the first step (process 0)."""
        if jax.process_index() != 0:
            return {}
        return write_task_record(workdir, recipe, model, setup.labels, init_spec)

    source = setup.source(recipe.seed, describe(train_name, setup.train), save_records)
    batch_size = recipe.batch_size
    if isinstance(source, PackedArraySource):  # rows holding batch_size examples on average
        batch_size = source.rows_per_step(recipe.batch_size, data_parallel_size(mesh))
    exp = Experiment(setup.objective, source, tx, batch_size, steps,
                     ((1.0, length),), seed=recipe.seed, log_every=min(10, steps),
                     checkpoint_every=max(1, recipe.eval_every))
    evaluator = make_evaluator(setup, min(recipe.eval_every, steps),
                               recipe.eval_batch_size or recipe.batch_size)
    result = loop.run(exp, workdir, mesh, show_progress, setup.initial_params, evaluator)
    written = []
    if jax.process_index() == 0:
        written = official.write_submissions(workdir, unlabelled, setup,
                                             recipe.eval_batch_size or recipe.batch_size)
    results_file = workdir / RESULTS
    results = json.loads(results_file.read_text()) if results_file.is_file() else {}
    return RunOutcome(result, results, written, setup)
