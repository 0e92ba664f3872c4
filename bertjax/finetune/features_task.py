"""BERT's feature-based approach (paper section 5.3, Table 7) as a bertjax-finetune task:
token tagging from a frozen encoder's features through a two-layer BiLSTM."""

from typing import Any

import numpy as np

from bertjax.finetune import bert_inputs
from bertjax.finetune.bert import with_pretrained_encoder
from bertjax.finetune.features import FROZEN, bert_feature_objective
from bertjax.finetune.pretrained import Pretrained
from bertjax.finetune.recipe import Recipe
from bertjax.finetune.setup import Arrays, SetupError, TaskSetup, label_index


def bert_features_setup(recipe: Recipe, model: Pretrained, train: list, dev: list,
                        eval_spec: str) -> TaskSetup:
    """The TaskSetup of the feature-based tagger (finetune.approach = 'features')."""
    if recipe.task != "tagging":
        raise SetupError(f"finetune.approach='features' tags tokens (the paper's NER study), not "
                         f"{recipe.task}: set finetune.task='tagging' or approach='fine_tune'")
    vocab, L = model.tokenizer, recipe.max_seq_length
    tags = label_index([t for ex in train for t in ex.tags], [t for ex in dev for t in ex.tags],
                       eval_spec)
    index = {t: i for i, t in enumerate(tags)}
    train_arrays, _ = bert_inputs.encode_tagged(
        vocab, [ex.tokens for ex in train], [[index[t] for t in ex.tags] for ex in train], L)
    dev_arrays, firsts = bert_inputs.encode_tagged(vocab, [ex.tokens for ex in dev], None, L)
    objective = bert_feature_objective(model.config, recipe.features, len(tags),
                                       recipe.lstm_size, dropout_rate=recipe.dropout)

    def predict(params: Any, inputs: Arrays) -> Any:
        return objective.model.apply({"params": params}, inputs["input_ids"],
                                     inputs["segment_ids"], inputs["input_mask"])

    def decode(logits: np.ndarray) -> tuple[list, dict]:
        best = logits.argmax(-1)
        return [[tags[best[r, p]] if p >= 0 else "O" for p in first]
                for r, first in enumerate(firsts)], {}

    return TaskSetup(objective, train_arrays, dev_arrays, predict, decode,
                     [list(ex.tags) for ex in dev], [ex.id for ex in dev],
                     lambda p: with_pretrained_encoder(p, model.params), frozen=FROZEN)
