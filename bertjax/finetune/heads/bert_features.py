"""BERT's feature-based approach (Devlin et al. 2018, section 5.3 and Table 7) as an Objective.

    states   = frozen BERT's layer_states(tokens)           num_layers + 2 layers [B, L, E]
    features = one of COMBINES                              [B, L, E] (concat: [B, L, 4E])
    logits   = W dropout(BiLSTM(features))                  two layers, `hidden` per direction

The paper's NER study: activations of one or more layers of a BERT that is not fine-tuned feed
a randomly initialised two-layer 768-unit BiLSTM and a token classifier; a word's label sits
on its first WordPiece and the other pieces get weight 0 in the loss. The feature choices, as
indices into `BertModel.layer_states` (0 the static WordPiece rows, 1 the embedding output,
1 + k Transformer layer k):

    embeddings        states[1] (the embedding output, the paper's "First Layer")
    second_to_last    states[-2]
    last              states[-1]
    sum_last_four     ScalarMix of the last four: learned softmax weights and a scale
    concat_last_four  [h_-4; h_-3; h_-2; h_-1]              4E wide (the paper's best)
    sum_all           ScalarMix of every Transformer layer (states[2:], not the embeddings)

BERT's parameters sit under the top-level key "bert" (as for every BERT head, so
`bertjax.finetune.heads.bert.with_pretrained_encoder` loads them); the loss stops their gradients,
BERT runs without dropout, and the optimizer must freeze them: `make_optimizer(frozen=FROZEN)`.

Batch: input_ids, segment_ids, input_mask int32 [B, L]; labels int32 [B, L]; label_weights
float32 [B, L] (1 on the first WordPiece of each labelled word, else 0).
"""

import dataclasses
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bertjax.finetune.heads.linear import linear_head
from bertjax.finetune.outputs import WORD_CLASSES
from bertjax.layers.bilstm import BiLstmEncoder
from bertjax.layers.dropout import Dropout
from bertjax.layers.scalar_mix import ScalarMix
from bertjax.models.bert import BertConfig, BertModel
from bertjax.objectives.objective import Metrics, Objective, init_from_batch
from bertjax.typing import Params

Array = jax.Array
FROZEN = ("bert",)  # make_optimizer(frozen=FROZEN)
COMBINES = ("embeddings", "second_to_last", "last", "sum_last_four", "concat_last_four",
            "sum_all")
WEIGHTED = ("sum_last_four", "sum_all")


def feature_layers(combine: str, num_layers: int) -> tuple[int, ...]:
    """Indices into the num_layers + 2 `BertModel.layer_states` that `combine` reads."""
    last = num_layers + 1
    chosen = {
        "embeddings": (1,),
        "second_to_last": (last - 1,),
        "last": (last,),
        "sum_last_four": tuple(range(last - 3, last + 1)),
        "concat_last_four": tuple(range(last - 3, last + 1)),
        "sum_all": tuple(range(2, last + 1)),
    }
    if combine not in chosen:
        raise ValueError(f"unknown feature combination {combine!r}: choose one of "
                         f"{', '.join(COMBINES)}")
    if min(chosen[combine]) < 1:
        raise ValueError(f"{combine} needs at least 4 Transformer layers, the model has "
                         f"{num_layers}: choose another combination")
    return chosen[combine]


def feature_size(combine: str, hidden_size: int) -> int:
    """Width of the features `combine` gives a BiLSTM."""
    return 4 * hidden_size if combine == "concat_last_four" else hidden_size


class BertFeatureTagger(nn.Module):
    """Frozen BERT -> chosen features -> BiLSTM -> per-token classifier."""

    config: BertConfig
    combine: str
    num_labels: int
    hidden: int = 768
    num_layers: int = 2
    dropout_rate: float = 0.1

    def setup(self) -> None:
        self.layer_ids = feature_layers(self.combine, self.config.transformer.num_layers)
        self.bert = BertModel(self.config)
        if self.combine in WEIGHTED:
            self.layer_mix = ScalarMix(len(self.layer_ids))
        self.encoder = BiLstmEncoder(self.hidden, self.num_layers, self.dropout_rate)
        self.dropout = Dropout(self.dropout_rate)
        self.classifier = linear_head(self.num_labels)

    def features(self, input_ids: Array, segment_ids: Array, input_mask: Array) -> Array:
        """[B, L, F] token features of the frozen encoder (F = feature_size(combine, E))."""
        states = self.bert.layer_states(input_ids, segment_ids, input_mask)
        chosen = [states[i].astype(jnp.float32) for i in self.layer_ids]
        if self.combine in WEIGHTED:
            return self.layer_mix(chosen, input_mask)
        return jnp.concatenate(chosen, axis=-1)

    def __call__(self, input_ids: Array, segment_ids: Array, input_mask: Array,
                 deterministic: bool = True) -> Array:
        """Logits [B, L, num_labels]; input_mask is 1 on each row's first tokens (BERT's
        layout), so its sum is the length the BiLSTM reads."""
        x_BxLxF = self.features(input_ids, segment_ids, input_mask)
        h_BxLx2H = self.encoder(x_BxLxF, input_mask.sum(-1), deterministic)
        return self.classifier(self.dropout(h_BxLx2H, deterministic=deterministic))


def bert_feature_objective(
    bert_config: BertConfig, combine: str, num_labels: int, hidden: int = 768,
    num_layers: int = 2, dropout_rate: float = 0.1,
) -> Objective:
    """Token tagging from frozen BERT features (`combine`, one of COMBINES) through a
    `num_layers` BiLSTM of `hidden` units per direction. Train with
    `make_optimizer(frozen=FROZEN)`; load BERT with `with_pretrained_encoder`."""
    feature_layers(combine, bert_config.transformer.num_layers)  # refuse bad settings now
    model = BertFeatureTagger(bert_config, combine, num_labels, hidden, num_layers, dropout_rate)

    def sums(params: Params, batch: dict[str, Array], rng: Array | None) -> Metrics:
        params = {**params, "bert": jax.lax.stop_gradient(params["bert"])}
        logits = model.apply({"params": params}, batch["input_ids"], batch["segment_ids"],
                             batch["input_mask"], deterministic=rng is None,
                             rngs=None if rng is None else {"dropout": rng})
        return WORD_CLASSES.loss(logits, batch)

    loss_fn = WORD_CLASSES.task_loss(sums)

    def example_batch(batch_size: int, seq_length: int) -> dict[str, np.ndarray]:
        ints = np.zeros((batch_size, seq_length), np.int32)
        return {"input_ids": ints, "segment_ids": ints, "input_mask": ints,
                **WORD_CLASSES.example_targets(batch_size, seq_length)}

    init_variables = init_from_batch(model, "input_ids", "segment_ids", "input_mask")
    return Objective(f"bert_features_{combine}", "bert", bert_config, model, init_variables,
                     loss_fn, example_batch, (("loss", "loss"), ("accuracy", "acc")))


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """Which encoder layers to read and how to combine them (the paper's feature-based study)."""

    layers: tuple[int, ...] = (-4, -3, -2, -1)  # indices into the num_layers + 1 hidden states
    combine: str = "concat"  # concat | sum | mean


def extract_features(
    apply_fn: Callable,
    params: Params,
    input_ids: Array,
    segment_ids: Array,
    input_mask: Array,
    spec: FeatureSpec = FeatureSpec(),
) -> Array:
    """Contextual token features from a BertModel, e.g. concat of the last four layers.

    `apply_fn` is `BertModel(config).apply`; `params` its parameters (no dropout).
    """
    outputs = apply_fn({"params": params}, input_ids, segment_ids, input_mask)
    chosen = [outputs["hidden_states"][i] for i in spec.layers]
    if spec.combine == "concat":
        return jnp.concatenate(chosen, axis=-1)
    if spec.combine == "sum":
        return sum(chosen)
    if spec.combine == "mean":
        return sum(chosen) / len(chosen)
    raise ValueError(f"unknown combine {spec.combine!r}: use concat, sum or mean")
