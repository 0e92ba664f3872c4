"""A task type and a family adapter put together on a run's examples: the objective, the
encoded training and evaluation arrays, how to predict and decode, what to measure.

`setup_task` is the one place they meet; it has no knowledge of any task type or family: the
recipe names both, the registries (bertjax.finetune.tasks, bertjax.finetune.families) supply
them, and a family that cannot serve the task type says so in one line.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax

from bertjax.finetune.adapter import Adapter, Arrays, SetupError, check_supported
from bertjax.finetune.arrays import ArraySource, describe
from bertjax.finetune.examples import Example
from bertjax.finetune.families import get_adapter
from bertjax.finetune.glue_tasks import named_glue_task
from bertjax.finetune.length_buckets import LengthBuckets
from bertjax.finetune.packed import PackedArraySource
from bertjax.finetune.recipe import Recipe
from bertjax.finetune.task import EvalData, Task, integer_labels
from bertjax.finetune.tasks import get_task
from bertjax.objectives.objective import Objective
from bertjax.training.evaluation import jit_inference
from bertjax.typing import Params

if TYPE_CHECKING:  # the pretrained model's loaders import every converter
    from bertjax.finetune.pretrained import Pretrained


@dataclasses.dataclass
class TaskSetup:
    """Everything a fine-tuning run needs once its data is encoded."""

    task: Task
    adapter: Adapter
    objective: Objective
    train: Arrays
    eval: Arrays  # model inputs of the evaluation examples
    data: EvalData  # the evaluation examples' ids, golds, labels and encoding layout
    main_metric: str  # picks the best checkpoint (finetune.main_metric or the task type's)

    @property
    def labels(self) -> list[str] | None:
        """Class or tag names, in the order of the head's outputs."""
        return self.data.labels

    @property
    def frozen(self) -> tuple[str, ...]:
        return self.adapter.frozen

    @property
    def buckets(self) -> LengthBuckets | None:
        return self.adapter.buckets

    @property
    def packing(self) -> int:
        """Examples a packed row may hold (0: one per row), in training and evaluation."""
        return self.adapter.packing

    @property
    def token_outputs(self) -> bool:
        """Predictions have a token axis (axis 1) to pad back after length buckets."""
        return self.task.output.token_axis

    def predict(self, params: Params, inputs: Arrays) -> jax.Array:
        """(params, inputs) -> the head's outputs (jittable)."""
        return self.adapter.predict(params, inputs)

    @functools.cached_property
    def jitted_predict(self) -> Callable[[Params, Arrays], jax.Array]:
        """`predict` compiled for inference, once per setup: the dev evaluation, other
        labelled sets and the --predict files share its compiled shapes."""
        return jit_inference(self.predict)

    def initial_params(self, params: Params) -> Params:
        """A fresh run's params -> with the pretrained model, unless the recipe keeps the
        random initialisation (finetune.pretrained = False: the papers' no-pretraining rows)."""
        return self.adapter.initial_params(params) if self.adapter.recipe.pretrained else params

    def encode_unlabelled(self, examples: Sequence[Example]) -> tuple[Arrays, EvalData]:
        """Model inputs of unlabelled examples (a test split), and what decoding them needs."""
        encoded = self.adapter.encode(examples)
        return encoded.arrays, dataclasses.replace(self.data, examples=examples, golds=None,
                                                   layout=encoded.layout)

    def report(self, params: Params) -> dict[str, Any]:
        return self.adapter.report(params)

    def source(self, seed: int, name: str | None = None,
               save_files: Callable[[Any], dict] | None = None
               ) -> ArraySource | PackedArraySource:
        """The training examples as the loop's data source: packed rows where the adapter
        packs them, else rows of one example, cut to length buckets where it allows. `name`:
        where the examples were read from, which the source records with their rows and
        digest (arrays.describe); `save_files`: see ArraySource."""
        name = None if name is None else describe(name, self.train)
        if not self.adapter.packing:
            return ArraySource(self.train, seed=seed, buckets=self.buckets, name=name,
                               save_files=save_files)
        return PackedArraySource(self.train, self.adapter.packing, seed=seed, name=name,
                                 save_files=save_files)


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A recipe's task type and its family's adapter class, looked up and checked once."""

    task: Task
    adapter_class: type[Adapter]


def resolve(recipe: Recipe) -> Resolved:
    """The recipe's task type and adapter; one line when the family cannot serve the task."""
    task, adapter_class = get_task(recipe.task), get_adapter(recipe.family, recipe.approach)
    check_supported(adapter_class, task, recipe)
    return Resolved(task, adapter_class)


def setup_task(recipe: Recipe, model: Pretrained, train: Sequence[Example],
               dev: Sequence[Example], eval_spec: str, resolved: Resolved | None = None,
               train_spec: str = "") -> TaskSetup:
    """The TaskSetup of `recipe` for the pretrained `model` on the training and evaluation
    examples (`eval_spec`, `train_spec`: where they were read from, for labels and the main
    metric); `resolved`: the recipe's task and adapter, when the caller has looked them up."""
    resolved = resolved or resolve(recipe)
    task, adapter_class = resolved.task, resolved.adapter_class
    order = recipe.labels if recipe.labels is not None else getattr(train, "label_order", None)
    labels = task.label_names(train, dev, eval_spec, order)
    numbered = order is not None or (labels is not None and integer_labels(labels))
    adapter = adapter_class(recipe, model, task, task.num_outputs(labels), train)
    data = EvalData(list(dev), task.golds(dev), labels, None, recipe, numbered)
    main_metric = check_main_metric(task, data, (eval_spec, train_spec))
    train_arrays = adapter.encode(train, task.targets(train, labels)).arrays
    dev_encoded = adapter.encode(dev)
    data = dataclasses.replace(data, layout=dev_encoded.layout)
    return TaskSetup(task, adapter, adapter.objective, train_arrays,
                     dev_encoded.arrays, data, main_metric)


def check_main_metric(task: Task, data: EvalData, specs: Sequence[str] = ()) -> str:
    """The metric that picks the best checkpoint: finetune.main_metric, else the metric that
    ranks the GLUE task the data `specs` name (CoLA's MCC, MRPC's F1: glue_tasks.py) where
    this data reports it, else the task type's; one line when finetune.main_metric is not
    reported for this data."""
    reported = [key for key, _ in task.metric_table(data)]
    chosen = data.recipe.main_metric
    if chosen is None:
        glue = [g for g in map(named_glue_task, filter(None, specs))
                if g is not None and g.task_type == task.name]
        chosen = next((g.main_metric for g in glue if g.main_metric in reported),
                      task.main_metric)
    if chosen not in reported:
        hint = (" (F1 needs a positive class: set finetune.positive_label)"
                if chosen == "f1" and "accuracy" in reported else "")
        raise SetupError(f"finetune.main_metric={chosen!r} is not reported for this task: "
                         f"choose one of {', '.join(reported)}{hint}")
    return chosen
