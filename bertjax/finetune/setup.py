"""A task type and a family adapter put together on a run's examples: the objective, the
encoded training and evaluation arrays, how to predict and decode, what to measure.

`setup_task` is the one place they meet; it has no knowledge of any task type or family: the
recipe names both, the registries (bertjax.finetune.tasks, bertjax.finetune.families) supply
them, and a family that cannot serve the task type says so in one line.
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from bertjax.finetune.adapter import Adapter, Arrays, check_supported
from bertjax.finetune.arrays import ArraySource
from bertjax.finetune.examples import Example
from bertjax.finetune.families import get_adapter
from bertjax.finetune.length_buckets import LengthBuckets
from bertjax.finetune.recipe import Recipe
from bertjax.finetune.task import EvalData, Task
from bertjax.finetune.tasks import get_task
from bertjax.objectives.objective import Objective


@dataclasses.dataclass
class TaskSetup:
    """Everything a fine-tuning run needs once its data is encoded."""

    task: Task
    adapter: Adapter
    objective: Objective
    train: Arrays
    eval: Arrays  # model inputs of the evaluation examples
    data: EvalData  # the evaluation examples' ids, golds, labels and encoding layout

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
    def token_outputs(self) -> bool:
        """Predictions have a token axis (axis 1) to pad back after length buckets."""
        return self.task.output.token_axis

    def predict(self, params: Any, inputs: Arrays) -> Any:
        """(params, inputs) -> the head's outputs (jittable)."""
        return self.adapter.predict(params, inputs)

    def initial_params(self, params: Any) -> Any:
        """A fresh run's params -> with the pretrained model, unless the recipe keeps the
        random initialisation (finetune.pretrained = False: the papers' no-pretraining rows)."""
        return self.adapter.initial_params(params) if self.adapter.recipe.pretrained else params

    def decode(self, outputs: Any) -> tuple[list, dict]:
        """The evaluation examples' predictions and extras (see Task.decode)."""
        return self.task.decode(outputs, self.data)

    def measure(self, predictions: list) -> dict[str, float]:
        return self.task.measure(predictions, self.data)

    def encode_unlabelled(self, examples: Sequence[Example]) -> tuple[Arrays, EvalData]:
        """Model inputs of unlabelled examples (a test split), and what decoding them needs."""
        encoded = self.adapter.encode(examples)
        return encoded.arrays, EvalData(examples, None, self.data.labels, encoded.layout,
                                        self.data.recipe)

    def report(self, params: Any) -> dict[str, Any]:
        return self.adapter.report(params)

    def source(self, seed: int, name: str | None = None,
               save_files: Callable[[Any], dict] | None = None) -> ArraySource:
        """The training examples as the loop's data source (`name` and `save_files`: see
        ArraySource)."""
        return ArraySource(self.train, seed=seed, buckets=self.buckets, name=name,
                           save_files=save_files)


def setup_task(recipe: Recipe, model: Any, train: Sequence[Example], dev: Sequence[Example],
               eval_spec: str) -> TaskSetup:
    """The TaskSetup of `recipe` for `model` (a bertjax.finetune.pretrained.Pretrained) on the
    training and evaluation examples."""
    task = get_task(recipe.task)
    adapter_class = get_adapter(recipe.family, recipe.approach)
    check_supported(adapter_class, task)
    labels = task.label_names(train, dev, eval_spec)
    adapter = adapter_class(recipe, model, task, task.num_outputs(labels))
    train_arrays = adapter.encode(train, task.targets(train, labels)).arrays
    dev_encoded = adapter.encode(dev)
    data = EvalData(list(dev), task.golds(dev), labels, dev_encoded.layout, recipe)
    return TaskSetup(task, adapter, adapter.objective(train_arrays), train_arrays,
                     dev_encoded.arrays, data)
