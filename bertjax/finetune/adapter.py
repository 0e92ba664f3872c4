"""A family's part of fine-tuning: the `Adapter` contract.

A task type (bertjax.finetune.task) says what is read, predicted and measured; an adapter says
how one family does it, for the task inputs and outputs it supports. It is built once per run
from the recipe, the pretrained model, the task type, the head's width and the training
examples, and never changes after:

    __init__        takes from the training examples what its inputs and head depend on (a
                    pair task's transformation, the number of endings, ELMo's task
                    vocabulary) and builds `objective`; checks shared by every family (the
                    recipe's length against the model's positions) are the base class's
    encode_inputs   examples -> the model's input arrays, and the layout decoding needs
                    (where each word sits, QA windows); `encode` adds the task's targets
    objective       the model with the head for the task's output, and its loss, for the loop
    predict         (params, inputs) -> the head's outputs, in the task's output layout
    initial_params  a fresh run's parameters with the pretrained model put in
    frozen          parameter subtrees the optimizer leaves alone (feature-based models)
    buckets         how batches may be cut to length buckets (None: padded to the maximum)
    packing         how many examples a packed training row may hold (0: one per row)
    report          extras for eval_results.json (ELMo's mix weights)

One adapter per (family, approach), in `bertjax/finetune/families/`, registered with
`@register`: BERT fine-tuned, BERT feature-based, GPT with its input transformations, ELMo
with its task BiLSTM. A task type an adapter cannot serve is one line naming those it can.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import jax
import numpy as np

from bertjax.finetune import truncation
from bertjax.finetune.examples import Example
from bertjax.finetune.outputs import Layout
from bertjax.finetune.task import TASKS, Task
from bertjax.typing import Params

if TYPE_CHECKING:
    from bertjax.finetune.length_buckets import LengthBuckets
    from bertjax.finetune.pretrained import Pretrained
    from bertjax.finetune.recipe import Recipe
    from bertjax.objectives.objective import Objective

Arrays = dict[str, np.ndarray]


class SetupError(ValueError):
    """A recipe, model and data that cannot be combined; the message names the fix."""


@dataclasses.dataclass(frozen=True)
class Encoded:
    """Encoded examples: the model's inputs (and, for training, its targets) as arrays with
    one row per example (per QA window), and what decoding needs of the encoding."""

    arrays: Arrays
    layout: Layout = None


class Adapter:
    """One family's fine-tuning (see the module docstring); built for a recipe, a pretrained
    model and a task type whose head has `num_outputs` outputs."""

    family: ClassVar[str]
    approach: ClassVar[str]
    inputs: ClassVar[tuple[str, ...]]  # the task inputs it encodes (bertjax.finetune.task)
    outputs: ClassVar[tuple[str, ...]]  # the names of the outputs it has heads for
    frozen: tuple[str, ...] = ()
    buckets: LengthBuckets | None = None
    packing: int = 0

    objective: Objective  # built by each adapter's __init__

    def __init__(self, recipe: Recipe, model: Pretrained, task: Task, num_outputs: int,
                 examples: Sequence[Example]):
        self.recipe, self.model, self.task, self.num_outputs = recipe, model, task, num_outputs
        positions = getattr(model.config, "max_position_embeddings", None)
        if positions is not None:
            check_length(recipe, positions)

    @classmethod
    def packs(cls, task: Task, recipe: Recipe) -> bool:
        """True when the adapter trains `task` on packed rows (finetune.packed_sequences)."""
        return False

    @classmethod
    def supports(cls, task: Task) -> bool:
        return task.inputs in cls.inputs and task.output.name in cls.outputs

    def encode(self, examples: Sequence[Example], targets: list | None = None) -> Encoded:
        """The examples as arrays; with `targets` (Task.targets), the target arrays too, and
        one warning counting the training rows cut to max_seq_length (truncation.py)."""
        with truncation.counting() as cut:
            arrays, layout = self.encode_inputs(examples, targets)
        if targets is not None:
            truncation.warn(cut, len(next(iter(arrays.values()))), self.recipe.max_seq_length)
            arrays = {**arrays, **self.task.output.targets(targets, layout,
                                                           self.recipe.max_seq_length)}
        return Encoded(arrays, layout)

    def encode_inputs(self, examples: Sequence[Example], targets: list | None
                      ) -> tuple[Arrays, Layout]:
        """(input arrays, layout) of the examples for the task's inputs; `targets` are given
        for training examples (an encoding that labels as it cuts, such as QA windows,
        uses them)."""
        raise NotImplementedError

    def predict(self, params: Params, inputs: Arrays) -> jax.Array:
        """The head's outputs for a batch of inputs, deterministically (jittable)."""
        raise NotImplementedError

    def seq_length(self, train: Arrays) -> int:
        """The token length of the encoded training rows (the loop's sequence length)."""
        return train["input_ids"].shape[-1]

    def initial_params(self, params: Params) -> Params:
        """A fresh run's parameters with the pretrained model's in place. The loop passes
        abstract parameters (ShapeDtypeStructs with their shardings) and draws the leaves
        returned still abstract (Trainer.init_from), so only the head is initialised."""
        raise NotImplementedError

    def report(self, params: Params) -> dict[str, Any]:
        """Extras for eval_results.json after an evaluation."""
        return {}


ADAPTERS: dict[tuple[str, str], type[Adapter]] = {}


def register(adapter_class: type[Adapter]) -> type[Adapter]:
    """Class decorator: the adapter of (its family, its approach)."""
    ADAPTERS[(adapter_class.family, adapter_class.approach)] = adapter_class
    return adapter_class


def check_supported(adapter_class: type[Adapter], task: Task, recipe: Recipe) -> None:
    """One line naming the task types the adapter serves when it cannot serve `task`, or
    saying so when the recipe packs rows the adapter does not pack for it."""
    if not adapter_class.supports(task):
        served = [name for name, t in sorted(TASKS.items()) if adapter_class.supports(t)]
        raise SetupError(f"finetune.task={task.name!r}: {adapter_class.family.upper()} "
                         f"({adapter_class.approach}) serves {', '.join(served)}: choose one "
                         "of those or another recipe")
    packing = getattr(recipe, "packed_sequences", 0)  # a BERT setting
    if packing and not adapter_class.packs(task, recipe):
        raise SetupError(f"finetune.packed_sequences={packing}: "
                         f"{adapter_class.family.upper()} ({adapter_class.approach}) packs no "
                         f"rows for finetune.task={task.name!r}: set "
                         "finetune.packed_sequences = 0")


def check_length(recipe: Recipe, positions: int) -> None:
    """The recipe's sequences fit the model's position embeddings."""
    if recipe.max_seq_length > positions:
        raise SetupError(f"finetune.max_seq_length={recipe.max_seq_length} exceeds the model's "
                         f"{positions} positions: set finetune.max_seq_length <= {positions}")
