"""Causal language modelling: next-token cross-entropy with per-token weights, and the GPT task.

Batches (from data/gpt/) hold `input_ids` [B, L], `target_ids` [B, L] (the inputs shifted by
one token) and `loss_weights` [B, L]. Every position is predicted, so the [B, L, V] logits are
all used; the loss is computed from them in float32 without a float32 copy of them
(objectives/xent.py; `fused=False` takes optax's cross-entropy and an argmax, the A/B
baseline of benchmarks/accelerator_step.py).
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from bertjax.layers.partitioning import target_device
from bertjax.models.gpt import GptConfig, GptLM
from bertjax.objectives import head_xent
from bertjax.objectives.objective import Loss, Mean, Metrics, Objective, init_from_batch
from bertjax.objectives.xent import weighted_cross_entropy
from bertjax.typing import Params

Array = jax.Array

# Rows of a slice of the sequence whose tied head and loss the CPU computes together (the
# slice's logits stay in cache): GPT-2 tiny's step at 32 x 128, V 4096 is fastest near here.
LOSS_ROWS_CPU = 512


def lm_weights(weights_BxL: Array) -> Array:
    """The targets' weights as float32 (a mask of real tokens, or the data's loss weights)."""
    return weights_BxL.astype(jnp.float32)


def lm_loss(
    logits_BxLxV: Array, target_ids_BxL: Array, weights_BxL: Array, fused: bool = True
) -> Metrics:
    """Weighted next-token cross-entropy (float32), accuracy and perplexity = exp(loss), as
    Means (objectives/objective.py), and the weight itself, `lm_weight`."""
    with jax.named_scope("lm_loss"):  # the profile's "loss and softmax" row
        loss, accuracy = weighted_cross_entropy(logits_BxLxV, target_ids_BxL,
                                                lm_weights(weights_BxL), fused)
        return lm_metrics(loss, accuracy)


def lm_metrics(loss: Mean, accuracy: Mean) -> Metrics:
    """The next-token metrics of a loss and an accuracy (weighted sums)."""
    return {"lm_loss": loss, "lm_accuracy": accuracy,
            "perplexity": Mean(loss.total, loss.weight, exp=True), "lm_weight": loss.weight}


def gpt_lm_loss(
    params: Params, batch: dict[str, Array], rng: Array | None, apply_fn: Callable,
    fused: bool = True, config: GptConfig | None = None, loss_rows: int = 0,
) -> Metrics:
    """The weighted sums of GptLM's next-token loss and metrics (a Loss's sums).

    `rng` drives dropout; None gives a deterministic (evaluation) forward pass. `loss_rows`
    > 0 (with the model's `config`) computes the tied head and its loss a slice of the
    sequence of at most that many rows at a time, never the whole logits
    (objectives/head_xent.py).
    """
    deterministic = rng is None
    inputs = dict(deterministic=deterministic, rngs=None if deterministic else {"dropout": rng})
    if loss_rows <= 0 or config is None:
        logits_BxLxV = apply_fn({"params": params}, batch["input_ids"], batch.get("input_mask"),
                                **inputs)
        return lm_loss(logits_BxLxV, batch["target_ids"], batch["loss_weights"], fused)
    h_BxLxE, table_VxE = apply_fn({"params": params}, batch["input_ids"],
                                  batch.get("input_mask"), method=_hidden_and_table, **inputs)
    B, L = batch["target_ids"].shape
    weights_BxL = lm_weights(batch["loss_weights"])
    tcfg = config.transformer
    with jax.named_scope("lm_loss"):
        xent, correct = head_xent.tied_cross_entropy_sums(
            h_BxLxE, table_VxE, batch["target_ids"], weights_BxL,
            head_xent.slices_for(B, L, loss_rows), tcfg.compute_dtype, tcfg.pad_vocab_to)
        weight = weights_BxL.sum()
        return lm_metrics(Mean(xent, weight), Mean(correct, weight))


def _hidden_and_table(model: GptLM, input_ids_BxL: Array, input_mask: Array | None,
                      deterministic: bool) -> tuple[Array, Array]:
    """The final hidden states and the token table of the tied head (a method for apply)."""
    h_BxLxE, _ = model.hidden(input_ids_BxL, input_mask, deterministic=deterministic)
    return h_BxLxE, model.token_embeddings.embedding


def example_lm_batch(batch_size: int, seq_length: int) -> dict[str, np.ndarray]:
    """Zero arrays shaped like a packed LM batch (for init and ahead-of-time compilation)."""
    ids = np.zeros((batch_size, seq_length), np.int32)
    return {
        "input_ids": ids,
        "target_ids": ids,
        "loss_weights": np.zeros((batch_size, seq_length), np.float32),
    }


def gpt_pretraining(config: GptConfig, fused_loss: bool = True,
                    loss_rows: int | None = None) -> Objective:
    """GPT / GPT-2 next-token pretraining for the training loop; `fused_loss=False` computes
    the loss from a float32 copy of the logits (the A/B baseline). `loss_rows`: the rows
    (positions over the batch) of each slice of the sequence whose head and loss are computed
    together, never the whole logits (objectives/head_xent.py); 0 computes the whole logits
    at once; None (the default) slices on the CPU only, LOSS_ROWS_CPU rows a slice, where it
    makes the head's step faster (benchmarks/results.md, time_to_quality)."""
    model = GptLM(config)

    def sums(params: Params, batch: dict[str, Array], rng: Array | None) -> Metrics:
        rows = loss_rows
        if rows is None:  # decided as the step is traced, for the devices it is built for
            rows = LOSS_ROWS_CPU if target_device()[0] == "cpu" else 0
        return gpt_lm_loss(params, batch, rng, model.apply, fused_loss, config,
                           rows if fused_loss else 0)

    loss_fn = Loss(sums, {"lm_loss": 1.0},
                   lambda batch: {"lm_loss": lm_weights(batch["loss_weights"]).sum()})

    progress = (("loss", "loss"), ("perplexity", "ppl"), ("lm_accuracy", "acc"))
    return Objective("gpt_pretraining", "gpt", config, model, init_from_batch(model, "input_ids"),
                     loss_fn, example_lm_batch, progress)
