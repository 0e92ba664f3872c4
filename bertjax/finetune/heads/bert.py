"""BERT fine-tuning heads (Devlin et al. 2018, section 4) on a shared `bert` encoder subtree.

    sentence / pair classification:  W dropout(pooled [CLS])            -> [B, num_labels]
    token tagging:                   W dropout(h_i) for every token       -> [B, L, num_labels]
    extractive QA:                   (S . h_i, E . h_i) start/end logits  -> [B, L] each

Extractive QA reads the final hidden states without dropout, as google-research/bert's
run_squad.py does. The tagging head keeps dropout before its classifier: google-research/bert
publishes no tagging head, and transformers' BertForTokenClassification (the class bertjax
exports tagging heads to) applies it there, as it does before every sentence classifier.

With `bilstm=H` (Table 5's "+ BiLSTM", `finetune.bilstm`) a randomly initialised BiLSTM (H per
direction) reads the encoder's sequence output first; the sentence heads then read its
max-pool over the real tokens instead of the pooled [CLS].

With `pooling="mean"` (`finetune.pooling`) the sentence heads (classify, regress, choice) read
the mean of the final hidden states over each example's real tokens instead of the pooled
[CLS]; the pooler (dense + tanh, trained by next-sentence prediction) is then left unused. A
small model pretrained briefly has a weak [CLS] and pooler, and the mean of the tokens is the
usual sentence readout of an encoder (Sentence-BERT, Reimers and Gurevych 2019). The token
heads (tag, span) read every token already and refuse the setting.

The [CLS] heads (classify, regress) also train on packed rows (`packed_sequences=K`,
bertjax/finetune/packed.py): up to K examples per row, each attending only to itself, one
prediction per example read at its own [CLS] (or, with mean pooling, averaged over its own
tokens: sequence id k + 1 marks slot k's), [B, K, ...].

Every head keeps the encoder under the name "bert", the same subtree as BertForPreTraining,
so pretrained weights (a bertjax checkpoint or a Hugging Face one, see convert/hf_bert.py)
load by replacing `params["bert"]`.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bertjax.finetune.heads.linear import linear_head
from bertjax.finetune.outputs import CHOICE, CLASSES, SCORE, SPANS, WORD_CLASSES, Output
from bertjax.layers.bilstm import BiLstmEncoder, length_mask
from bertjax.layers.dropout import Dropout
from bertjax.models.bert import BertConfig, BertModel
from bertjax.objectives.objective import Metrics, Objective, init_from_batch
from bertjax.typing import Params

Array = jax.Array


def _classifier(features: int, config: BertConfig, name: str) -> nn.Dense:
    return linear_head(features, nn.initializers.normal(config.transformer.initializer_range),
                       name, config.transformer.weight_dtype)


PACKABLE = (CLASSES, SCORE)  # outputs whose heads also train on packed rows
PACKING_FEATURES = ("position_ids", "sequence_ids", "cls_positions")
POOLINGS = ("cls", "mean")  # what a sentence head reads: the pooled [CLS], or the tokens' mean


@dataclasses.dataclass(frozen=True)
class _Reads:
    """What the head of one output reads and makes: the pooled [CLS] (`summary`) or every
    token, its width (the number of labels, or one score), and dropout before it."""

    summary: bool
    labelled: bool  # width num_labels (else 1, or 2 for spans)
    dropout: bool = True


HEADS: dict[Output, _Reads] = {  # every output a BERT head makes
    CLASSES: _Reads(summary=True, labelled=True),
    SCORE: _Reads(summary=True, labelled=False),
    CHOICE: _Reads(summary=True, labelled=False),  # one score per choice, [B, K]
    WORD_CLASSES: _Reads(summary=False, labelled=True),
    SPANS: _Reads(summary=False, labelled=False, dropout=False),  # run_squad.py's: no dropout
}


def check_pooling(pooling: str, output: Output | None = None, bilstm: bool = False) -> None:
    """`pooling` is one of POOLINGS, and one the head of `output` (with a BiLSTM or not)
    reads; else one line naming finetune.pooling and the fix."""
    if pooling not in POOLINGS:
        raise ValueError(f"finetune.pooling is {pooling!r}: choose one of {', '.join(POOLINGS)}")
    if pooling == "cls" or output is None:
        return
    if not HEADS[output].summary:
        raise ValueError(f"finetune.pooling = {pooling!r} is for the sentence heads (classify, "
                         f"regress, choice); the {output.head} head reads every token: set "
                         "finetune.pooling = 'cls'")
    if bilstm:
        raise ValueError(f"finetune.pooling = {pooling!r} reads the encoder's tokens, but with "
                         "finetune.bilstm the head reads the BiLSTM's max-pool: set "
                         "finetune.pooling = 'cls' or finetune.bilstm = False")


def mean_of_tokens(seq_BxLxE: Array, input_mask_BxL: Array,
                   sequence_ids_BxL: Array | None = None, num_sequences: int = 0) -> Array:
    """[B, E]: the mean of each row's real tokens (`input_mask`); for packed rows
    (`sequence_ids` 1 .. K per token, 0 padding) [B, K, E]: of each example's own tokens, 0
    for an unused slot. Summed in float32, returned in the sequence's dtype."""
    if sequence_ids_BxL is None:
        weights_BxLxK = (input_mask_BxL > 0)[..., None]
    else:
        weights_BxLxK = sequence_ids_BxL[..., None] == jnp.arange(1, num_sequences + 1)
    weights_BxLxK = weights_BxLxK.astype(jnp.float32)
    sums_BxKxE = jnp.einsum("blk,ble->bke", weights_BxLxK, seq_BxLxE.astype(jnp.float32),
                            precision=jax.lax.Precision.HIGHEST)
    counts_BxK = jnp.maximum(weights_BxLxK.sum(1), 1.0)
    mean_BxKxE = (sums_BxKxE / counts_BxK[..., None]).astype(seq_BxLxE.dtype)
    return mean_BxKxE[:, 0] if sequence_ids_BxL is None else mean_BxKxE


class BertHead(nn.Module):
    """Encoder + the head of one `output` (one of HEADS' keys).

    CLASSES: [CLS] -> num_labels logits;  SCORE: [CLS] -> one score;  CHOICE: inputs [B, K, L]
    (one sequence per choice), [CLS] -> one score per choice, [B, K];  WORD_CLASSES: every
    token -> num_labels logits;  SPANS: every token -> start and end logits (extractive QA).
    `bilstm` > 0 puts a BiLSTM of that size per direction between the encoder and the head.
    `pooling="mean"`: the sentence heads read the mean of the tokens instead of [CLS] (see the
    module docstring; check_pooling says which heads take it).
    """

    config: BertConfig
    output: Output
    num_labels: int = 2
    bilstm: int = 0
    pooling: str = "cls"  # one of POOLINGS

    @nn.compact
    def __call__(
        self, input_ids: Array, segment_ids: Array, input_mask: Array, deterministic: bool = True,
        packing: dict[str, Array] | None = None,
    ) -> Array:
        """The head's outputs; `packing` (position_ids, sequence_ids, cls_positions) for
        packed rows of a CLASSES or SCORE head."""
        reads = HEADS[self.output]
        if packing is not None and (self.output not in PACKABLE or self.bilstm):
            raise ValueError(f"packed rows feed the heads of {', '.join(o.name for o in PACKABLE)}"
                             f" without a BiLSTM, not {self.output.name}: set "
                             "finetune.packed_sequences = 0")
        shape = input_ids.shape  # [B, L], or [B, K, L] for choice
        flat = lambda x: x.reshape(-1, shape[-1])  # noqa: E731
        packing = packing or {}
        mean = reads.summary and self.pooling == "mean"
        outputs = BertModel(self.config, name="bert")(
            flat(input_ids), flat(segment_ids), flat(input_mask), packing.get("position_ids"),
            deterministic=deterministic,
            summary_only=reads.summary and not self.bilstm and not mean,
            sequence_ids=packing.get("sequence_ids"), cls_positions=packing.get("cls_positions"),
        )
        dropout = Dropout(self.config.transformer.dropout_rate)
        if self.bilstm:
            outputs = self._bilstm(outputs["sequence_output"], flat(input_mask), dropout,
                                   deterministic)
        if mean:  # [B, E], or [B, K, E] for packed rows
            cls_positions = packing.get("cls_positions")
            x = mean_of_tokens(outputs["sequence_output"], flat(input_mask),
                               packing.get("sequence_ids"),
                               0 if cls_positions is None else cls_positions.shape[-1])
        else:
            x = outputs["pooled_output" if reads.summary else "sequence_output"]
        if reads.dropout:
            x = dropout(x, deterministic=deterministic)
        width = self.num_labels if reads.labelled else (2 if self.output is SPANS else 1)
        logits = _classifier(width, self.config, "span" if self.output is SPANS
                             else "classifier")(x)  # [B(, K), W] or [B, L, W]
        if self.output is CHOICE:
            return logits.reshape(shape[:-1])
        if self.output is SPANS:  # padding can never be a start or an end
            return jnp.where(input_mask[..., None] > 0, logits, -1e9)
        return logits

    def _bilstm(self, seq_BxLxE: Array, input_mask_BxL: Array, dropout: Dropout,
                deterministic: bool) -> dict[str, Array]:
        """The BiLSTM's outputs [B, L, 2H] and their max-pool over real tokens [B, 2H]."""
        cfg = self.config.transformer
        lengths_B = input_mask_BxL.sum(-1).astype(jnp.int32)
        seq_BxLx2H = BiLstmEncoder(self.bilstm, dtype=cfg.compute_dtype,
                                   param_dtype=cfg.weight_dtype, name="bilstm")(
            dropout(seq_BxLxE, deterministic=deterministic), lengths_B, deterministic)
        real_BxLx1 = length_mask(lengths_B, seq_BxLx2H.shape[1])[..., None]
        pooled_Bx2H = jnp.where(real_BxLx1, seq_BxLx2H, -jnp.inf).max(1)
        pooled_Bx2H = jnp.where(lengths_B[:, None] > 0, pooled_Bx2H, 0.0)  # all-padding rows
        return {"sequence_output": seq_BxLx2H, "pooled_output": pooled_Bx2H}


def bert_finetuning(config: BertConfig, output: Output, num_labels: int = 2,
                    num_choices: int = 4, bilstm: int = 0, packed_sequences: int = 0,
                    pooling: str = "cls") -> Objective:
    """The objective of a BERT head for `output` for the shared training loop: init, loss and
    batch shapes. `packed_sequences=K`: training batches are packed rows of up to K examples;
    `pooling`: what a sentence head reads (POOLINGS). Its name, `bert_<output.head>`, is what
    the run's record keeps (training/workdir.py); task.json keeps the pooling."""
    if output not in HEADS:
        raise ValueError(f"BERT has no head for {output.name}: its heads make "
                         f"{', '.join(o.name for o in HEADS)}")
    check_pooling(pooling, output, bool(bilstm))
    model = BertHead(config, output, num_labels, bilstm, pooling)
    K = packed_sequences

    init_variables = init_from_batch(model, "input_ids", "segment_ids", "input_mask")

    def sums(params: Params, batch: dict[str, Array], rng: Array | None) -> Metrics:
        outputs = model.apply(
            {"params": params},
            batch["input_ids"],
            batch["segment_ids"],
            batch["input_mask"],
            deterministic=rng is None,
            packing={k: batch[k] for k in PACKING_FEATURES} if "sequence_ids" in batch else None,
            rngs=None if rng is None else {"dropout": rng},
        )
        return output.loss(outputs, batch)

    loss_fn = output.task_loss(sums)

    def example_batch(batch_size: int, seq_length: int) -> dict[str, np.ndarray]:
        rows = (batch_size, num_choices) if output is CHOICE else (batch_size,)
        ints = np.zeros((*rows, seq_length), np.int32)
        inputs = {"input_ids": ints, "segment_ids": ints, "input_mask": ints}
        targets = output.example_targets(batch_size, seq_length)
        if K:
            targets = {k: np.zeros((batch_size, K), v.dtype) for k, v in targets.items()}
            inputs.update(position_ids=ints, sequence_ids=ints,
                          cls_positions=np.zeros((batch_size, K), np.int32),
                          sequence_weights=np.zeros((batch_size, K), np.float32))
        return {**inputs, **targets}

    progress = (("loss", "loss"), (output.metric, "acc"))
    return Objective(f"bert_{output.head}", "bert", config, model, init_variables, loss_fn,
                     example_batch, progress)


def with_pretrained_encoder(params: Params, encoder_params: Params) -> Params:
    """`params` of a head with its "bert" subtree replaced by a copy of `encoder_params`.

    The copy takes the current parameters' shardings, and the caller's arrays stay valid
    when the train step donates the state.
    """
    expected = jax.tree.map(jnp.shape, params["bert"])
    found = jax.tree.map(jnp.shape, encoder_params)
    if expected != found:
        raise ValueError(
            "pretrained encoder shapes differ from the head's bert_config: "
            "build the head with the checkpoint's config"
        )
    placed = jax.tree.map(
        lambda new, old: jax.device_put(jnp.array(new, copy=True), old.sharding),
        encoder_params,
        params["bert"],
    )
    return {**params, "bert": placed}
