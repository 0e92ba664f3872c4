"""BERT pretraining objectives: MLM + NSP (NSP dropped when the data has it switched off), and
the left-to-right ablation of Devlin et al. 2018, Table 5 ("LTR & No NSP").

MLM + NSP also trains on packed rows (`packed_sequences=K`, bertjax/data/bert/packing.py):
several instances per row, each attending only to itself, with positions restarting per
instance and NSP read at each instance's [CLS]. The masked positions of all instances are one
list per row, so the loss is the same sum over the same targets as unpacked.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax.typing import VariableDict

from bertjax.models.bert import BertConfig, BertForPreTraining
from bertjax.objectives.lm import lm_loss, lm_weights
from bertjax.objectives.mlm import mlm_loss, packed_predictions
from bertjax.objectives.nsp import nsp_loss, nsp_weights
from bertjax.objectives.objective import Loss, Metrics, Objective, init_from_batch
from bertjax.typing import Params

Array = jax.Array


PACKING_FEATURES = ("position_ids", "sequence_ids", "cls_positions")


def bert_pretraining_loss(
    params: Params, batch: dict[str, Array], rng: Array, apply_fn: Callable, use_nsp: bool = True,
    fused_loss: bool = True,
) -> Metrics:
    """The weighted sums of BertForPreTraining's MLM (+ NSP) loss and metrics (a Loss's sums).

    `rng` drives dropout; pass None for a deterministic (evaluation) forward pass. A packed
    batch carries PACKING_FEATURES and `next_sentence_weights` besides the usual features.
    """
    deterministic = rng is None
    packed = "sequence_ids" in batch
    outputs = apply_fn(
        {"params": params},
        batch["input_ids"],
        batch["segment_ids"],
        batch["input_mask"],
        batch["masked_lm_positions"],
        deterministic=deterministic,
        packing={k: batch[k] for k in PACKING_FEATURES} if packed else None,
        rngs=None if deterministic else {"dropout": rng},
    )
    metrics = mlm_loss(
        outputs["mlm_logits"], batch["masked_lm_ids"], batch["masked_lm_weights"], fused_loss
    )
    if use_nsp:
        metrics |= nsp_loss(outputs["nsp_logits"], batch["next_sentence_label"],
                            batch.get("next_sentence_weights"))
    return metrics


def bert_pretraining_weights(batch: dict[str, Array], use_nsp: bool = True
                             ) -> dict[str, Array]:
    """The masked positions' and (with NSP) the pairs' weights summed over `batch`."""
    weights = {"mlm_loss": batch["masked_lm_weights"].astype(jnp.float32).sum()}
    if use_nsp:
        weights["nsp_loss"] = nsp_weights(batch["next_sentence_label"],
                                          batch.get("next_sentence_weights")).sum()
    return weights


def bert_pretraining(config: BertConfig, use_nsp: bool = True,
                     packed_sequences: int = 0, fused_loss: bool = True) -> Objective:
    """BERT's MLM (+ NSP) pretraining objective for the training loop; `packed_sequences=K`
    reads packed rows of at most K instances (the source's setting of the same name);
    `fused_loss=False` computes the MLM loss from float32 logits (objectives/xent.py)."""
    if packed_sequences < 0 or packed_sequences == 1:
        raise ValueError(f"bert_pretraining.packed_sequences is {packed_sequences}: set 0 "
                         "(one instance per row) or the most instances a packed row holds (2+)")
    model = BertForPreTraining(config)
    K = packed_sequences

    init_variables = init_from_batch(
        model, "input_ids", "segment_ids", "input_mask", "masked_lm_positions"
    )

    def sums(params: Params, batch: dict[str, Array], rng: Array | None) -> Metrics:
        return bert_pretraining_loss(params, batch, rng, model.apply, use_nsp=use_nsp,
                                     fused_loss=fused_loss)

    terms = {"mlm_loss": 1.0, "nsp_loss": 1.0} if use_nsp else {"mlm_loss": 1.0}
    loss_fn = Loss(sums, terms, lambda batch: bert_pretraining_weights(batch, use_nsp))

    def example_batch(batch_size: int, seq_length: int) -> dict[str, np.ndarray]:
        predictions = packed_predictions(seq_length, K)
        ints = lambda *shape: np.zeros(shape, np.int32)  # noqa: E731
        pairs = (batch_size, K) if K else (batch_size,)
        batch = {
            "input_ids": ints(batch_size, seq_length),
            "input_mask": ints(batch_size, seq_length),
            "segment_ids": ints(batch_size, seq_length),
            "masked_lm_positions": ints(batch_size, predictions),
            "masked_lm_ids": ints(batch_size, predictions),
            "masked_lm_weights": np.zeros((batch_size, predictions), np.float32),
            "next_sentence_label": ints(*pairs),
        }
        if K:
            batch.update(position_ids=ints(batch_size, seq_length),
                         sequence_ids=ints(batch_size, seq_length),
                         cls_positions=ints(batch_size, K),
                         next_sentence_weights=np.zeros((batch_size, K), np.float32))
        return batch

    progress = (("loss", "loss"), ("mlm_accuracy", "mlm_acc"))
    if use_nsp:
        progress += (("nsp_accuracy", "nsp_acc"),)
    return Objective("bert_pretraining", "bert", config, model, init_variables, loss_fn,
                     example_batch, progress)


def next_token_positions(input_ids_BxL: Array) -> Array:
    """[B, L-1] positions 0 .. L-2: every position but the last predicts the token after it."""
    B, L = input_ids_BxL.shape
    return jnp.broadcast_to(jnp.arange(L - 1, dtype=jnp.int32), (B, L - 1))


def bert_ltr_loss(
    params: Params, batch: dict[str, Array], rng: Array | None, apply_fn: Callable
) -> Metrics:
    """The sums of a causal BertForPreTraining: next-token cross-entropy at every real token.

    The MLM head (transform, LayerNorm, tied projection) reads positions 0 .. L-2 and predicts
    input_ids[:, 1:]; a target counts where it is a real token (input_mask). NSP is not used.
    """
    deterministic = rng is None
    ids_BxL = batch["input_ids"]
    outputs = apply_fn(
        {"params": params},
        ids_BxL,
        batch["segment_ids"],
        batch["input_mask"],
        next_token_positions(ids_BxL),
        deterministic=deterministic,
        rngs=None if deterministic else {"dropout": rng},
    )
    return lm_loss(outputs["mlm_logits"], ids_BxL[:, 1:], batch["input_mask"][:, 1:])


def bert_ltr_pretraining(config: BertConfig) -> Objective:
    """BERT's left-to-right ablation: a causal BERT predicting every next token, no NSP.

    The config is made causal (`causal=True`, recorded in model.json), so the checkpoint
    fine-tunes through the BERT heads with the same left-to-right mask. Pair it with the source
    setting `masking='none'` and `nsp=False` (configs/runs/pretrain_ltr.gin): the inputs must
    not be corrupted by MLM masking.
    """
    config = config.replace(causal=True)
    model = BertForPreTraining(config)

    def init_variables(rng: Array, batch: dict[str, Array]) -> VariableDict:
        ids = batch["input_ids"]
        return model.init({"params": rng, "dropout": rng}, ids, batch["segment_ids"],
                          batch["input_mask"], next_token_positions(ids))

    def sums(params: Params, batch: dict[str, Array], rng: Array | None) -> Metrics:
        return bert_ltr_loss(params, batch, rng, model.apply)

    loss_fn = Loss(sums, {"lm_loss": 1.0},
                   lambda batch: {"lm_loss": lm_weights(batch["input_mask"][:, 1:]).sum()})

    def example_batch(batch_size: int, seq_length: int) -> dict[str, np.ndarray]:
        ints = np.zeros((batch_size, seq_length), np.int32)
        return {"input_ids": ints, "input_mask": ints, "segment_ids": ints}

    progress = (("loss", "loss"), ("perplexity", "ppl"), ("lm_accuracy", "acc"))
    return Objective("bert_ltr_pretraining", "bert", config, model, init_variables, loss_fn,
                     example_batch, progress)
