"""GPT fine-tuned (Radford et al. 2018, sections 3.2-3.3): the task-specific input
transformations (figure 1) and the adapter that trains a linear output layer with the
auxiliary LM loss (bertjax.finetune.heads.gpt).

Structured inputs become token sequences around three new tokens, start <s>, delimiter $ and
extract <e>, whose final-block activation feeds the linear output layer:

    classification   <s> text <e>                                  1 sequence
    entailment       <s> premise $ hypothesis <e>                  1 sequence
    similarity       <s> a $ b <e>,  <s> b $ a <e>                 2 sequences (activations added)
    multiple_choice  <s> context $ answer_k <e>  for each k        K sequences (softmax over k)

A one-text example is a classification; a text pair is an entailment, or, with
finetune.pair_transformation = 'similarity', the paper's similarity transformation, which it
uses for its similarity tasks (STS-B, and the paraphrase tasks MRPC and QQP); a context with
endings is a multiple choice. `encode` right-pads the sequences to [B, N, L] with a mask (L the
longest sequence), cutting the longest field from its end until a sequence fits `max_length`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import jax
import numpy as np

from bertjax.finetune import truncation
from bertjax.finetune.adapter import Adapter, Arrays, SetupError, register
from bertjax.finetune.examples import Example
from bertjax.finetune.heads.gpt import (
    GptClassifier,
    SpecialTokens,
    check_transformation,
    extended_config,
    gpt_finetuning,
    special_tokens,
    with_special_tokens,
)
from bertjax.finetune.outputs import CHOICE, CLASSES, SCORE, Layout
from bertjax.finetune.task import CHOICES, TEXTS, Task
from bertjax.typing import Params

if TYPE_CHECKING:
    from bertjax.finetune.pretrained import Pretrained
    from bertjax.finetune.recipe import GptRecipe

PAIR_TRANSFORMATIONS = ("entailment", "similarity")


def _fit(fields: list[list[int]], budget: int) -> list[list[int]]:
    """Cut the longest field's tail until the fields' total length is at most `budget`."""
    fields = [list(f) for f in fields]
    truncation.note(sum(len(f) for f in fields) > budget)
    while sum(len(f) for f in fields) > budget:
        longest = max(range(len(fields)), key=lambda i: len(fields[i]))
        if not fields[longest]:
            break
        fields[longest].pop()
    return fields


def sequences(transformation: str, example: Sequence, special: SpecialTokens, max_length: int
              ) -> list[list[int]]:
    """The token sequences of one example (fields as token-id lists; choices a list of them)."""
    check_transformation(transformation)
    s, d, e = special.start, special.delimiter, special.extract
    if transformation == "classification":
        (text,) = _fit([example[0]], max_length - 2)
        return [[s, *text, e]]
    if transformation == "multiple_choice":
        context, choices = example
        out = []
        for choice in choices:
            ctx, ans = _fit([context, choice], max_length - 3)
            out.append([s, *ctx, d, *ans, e])
        return out
    a, b = _fit([example[0], example[1]], max_length - 3)
    if transformation == "entailment":
        return [[s, *a, d, *b, e]]
    return [[s, *a, d, *b, e], [s, *b, d, *a, e]]  # similarity: both orderings


def encode(transformation: str, examples: Sequence[Sequence], special: SpecialTokens,
           max_length: int) -> Arrays:
    """input_ids / input_mask [B, N, L], right-padded with 0."""
    rows = [sequences(transformation, ex, special, max_length) for ex in examples]
    counts = {len(r) for r in rows}
    if len(counts) != 1:
        raise ValueError(f"examples have {sorted(counts)} choices: give every multiple-choice "
                         "example the same number of choices")
    B, N = len(rows), counts.pop()
    L = max(len(seq) for r in rows for seq in r)
    ids = np.zeros((B, N, L), np.int32)
    mask = np.zeros((B, N, L), np.int32)
    for b, r in enumerate(rows):
        for n, seq in enumerate(r):
            ids[b, n, :len(seq)], mask[b, n, :len(seq)] = seq, 1
    return {"input_ids": ids, "input_mask": mask}


@register
class GptFineTuned(Adapter):
    """GPT with a linear output layer on the extract token, trained with L3 = L2 + lambda
    L1 (finetune.lm_coef); dropout finetune.dropout on the classifier."""

    family, approach = "gpt", "fine_tune"
    inputs = (TEXTS, CHOICES)
    outputs = (CLASSES.name, SCORE.name, CHOICE.name)
    recipe: GptRecipe

    def __init__(self, recipe: GptRecipe, model: Pretrained, task: Task, num_outputs: int,
                 examples: Sequence[Example]):
        super().__init__(recipe, model, task, num_outputs, examples)
        if recipe.pair_transformation not in PAIR_TRANSFORMATIONS:
            raise SetupError(f"finetune.pair_transformation={recipe.pair_transformation!r}: "
                             f"choose one of {', '.join(PAIR_TRANSFORMATIONS)}")
        self.special = special_tokens(model.config)
        self.transformation = self._transformation(examples)  # the training examples'
        self.objective = gpt_finetuning(model.config, self.transformation, task.output,
                                        num_outputs, recipe.lm_coef, recipe.dropout,
                                        self._sequences_per_example(examples))
        self.classifier = GptClassifier(extended_config(model.config), self.transformation,
                                        num_outputs)

    def _transformation(self, examples: Sequence[Example]) -> str:
        if self.task.inputs == CHOICES:
            return "multiple_choice"
        return "classification" if len(examples[0].texts) == 1 else self.recipe.pair_transformation

    def _sequences_per_example(self, examples: Sequence[Example]) -> int:
        """Sequences each example becomes: its endings, two orderings (similarity), or one."""
        if self.transformation == "multiple_choice":
            return len(examples[0].endings)
        return 2 if self.transformation == "similarity" else 1

    def encode_inputs(self, examples: Sequence[Example], targets: list | None
                      ) -> tuple[Arrays, Layout]:
        transformation = self._transformation(examples)
        if transformation != self.transformation:
            raise SetupError(f"the training examples are a {self.transformation} task, these a "
                             f"{transformation} one: give every file the same number of texts")
        bpe = self.model.tokenizer
        if transformation == "multiple_choice":
            fields = [(bpe.encode(ex.context), [bpe.encode(e) for e in ex.endings])
                      for ex in examples]
        else:
            fields = [tuple(bpe.encode(t) for t in ex.texts) for ex in examples]
        return encode(transformation, fields, self.special, self.recipe.max_seq_length), None

    def predict(self, params: Params, inputs: Arrays) -> jax.Array:
        return self.classifier.apply({"params": params}, inputs["input_ids"],
                                     inputs["input_mask"], True, False)[0]

    def initial_params(self, params: Params) -> Params:
        key = jax.random.fold_in(jax.random.key(self.recipe.seed), 1)
        return {**params, "gpt": with_special_tokens(self.model.params, key)}
