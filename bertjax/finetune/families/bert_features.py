"""BERT's feature-based approach (paper section 5.3, Table 7): token tagging from a frozen
encoder's features through a two-layer BiLSTM (bertjax.finetune.heads.bert_features), on
BERT's token inputs (families/bert.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import jax

from bertjax.finetune.adapter import Adapter, Arrays, register
from bertjax.finetune.examples import Example
from bertjax.finetune.families.bert import encode_words
from bertjax.finetune.heads.bert import check_pooling, with_pretrained_encoder
from bertjax.finetune.heads.bert_features import FROZEN, bert_feature_objective
from bertjax.finetune.outputs import WORD_CLASSES, Layout
from bertjax.finetune.task import WORDS, Task
from bertjax.typing import Params

if TYPE_CHECKING:
    from bertjax.finetune.pretrained import Pretrained
    from bertjax.finetune.recipe import BertRecipe


@register
class BertFeatures(Adapter):
    """A frozen BERT whose chosen layers (finetune.features) feed a BiLSTM tagger of
    finetune.lstm_size units per direction."""

    family, approach = "bert", "features"
    inputs, outputs = (WORDS,), (WORD_CLASSES.name,)
    frozen = FROZEN
    recipe: BertRecipe

    def __init__(self, recipe: BertRecipe, model: Pretrained, task: Task, num_outputs: int,
                 examples: Sequence[Example]):
        super().__init__(recipe, model, task, num_outputs, examples)
        check_pooling(recipe.pooling, WORD_CLASSES)  # a tagger: "mean" is refused
        self.objective = bert_feature_objective(model.config, recipe.features, num_outputs,
                                                recipe.lstm_size, dropout_rate=recipe.dropout)

    def encode_inputs(self, examples: Sequence[Example], targets: list | None
                      ) -> tuple[Arrays, Layout]:
        return encode_words(self.model.tokenizer, [ex.tokens for ex in examples],
                            self.recipe.max_seq_length)

    def predict(self, params: Params, inputs: Arrays) -> jax.Array:
        return self.objective.model.apply({"params": params}, inputs["input_ids"],
                                           inputs["segment_ids"], inputs["input_mask"])

    def initial_params(self, params: Params) -> Params:
        return with_pretrained_encoder(params, self.model.params)
