"""BERT's feature-based approach (paper section 5.3, Table 7): token tagging from a frozen
encoder's features through a two-layer BiLSTM (bertjax.finetune.heads.bert_features), on
BERT's token inputs (families/bert.py)."""

from collections.abc import Sequence
from typing import Any

from bertjax.finetune.adapter import Adapter, Arrays, register
from bertjax.finetune.families.bert import encode_words
from bertjax.finetune.heads.bert import with_pretrained_encoder
from bertjax.finetune.heads.bert_features import FROZEN, bert_feature_objective
from bertjax.finetune.outputs import WORD_CLASSES
from bertjax.finetune.task import WORDS


@register
class BertFeatures(Adapter):
    """A frozen BERT whose chosen layers (finetune.features) feed a BiLSTM tagger of
    finetune.lstm_size units per direction."""

    family, approach = "bert", "features"
    inputs, outputs = (WORDS,), (WORD_CLASSES.name,)
    frozen = FROZEN

    def __init__(self, recipe: Any, model: Any, task: Any, num_outputs: int,
                 examples: Sequence[Any]):
        super().__init__(recipe, model, task, num_outputs, examples)
        self.objective = bert_feature_objective(model.config, recipe.features, num_outputs,
                                                recipe.lstm_size, dropout_rate=recipe.dropout)

    def encode_inputs(self, examples: Sequence[Any], targets: list | None
                      ) -> tuple[Arrays, Any]:
        return encode_words(self.model.tokenizer, [ex.tokens for ex in examples],
                            self.recipe.max_seq_length)

    def predict(self, params: Any, inputs: Arrays) -> Any:
        return self.objective.model.apply({"params": params}, inputs["input_ids"],
                                           inputs["segment_ids"], inputs["input_mask"])

    def initial_params(self, params: Any) -> Any:
        return with_pretrained_encoder(params, self.model.params)
