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

from bertjax.models.gpt import GptConfig, GptLM
from bertjax.objectives.objective import Loss, Mean, Metrics, Objective, init_from_batch
from bertjax.objectives.xent import weighted_cross_entropy
from bertjax.typing import Params

Array = jax.Array


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
        return {"lm_loss": loss, "lm_accuracy": accuracy,
                "perplexity": Mean(loss.total, loss.weight, exp=True), "lm_weight": loss.weight}


def gpt_lm_loss(
    params: Params, batch: dict[str, Array], rng: Array | None, apply_fn: Callable,
    fused: bool = True,
) -> Metrics:
    """The weighted sums of GptLM's next-token loss and metrics (a Loss's sums).

    `rng` drives dropout; None gives a deterministic (evaluation) forward pass.
    """
    deterministic = rng is None
    logits_BxLxV = apply_fn(
        {"params": params},
        batch["input_ids"],
        batch.get("input_mask"),
        deterministic=deterministic,
        rngs=None if deterministic else {"dropout": rng},
    )
    return lm_loss(logits_BxLxV, batch["target_ids"], batch["loss_weights"], fused)


def example_lm_batch(batch_size: int, seq_length: int) -> dict[str, np.ndarray]:
    """Zero arrays shaped like a packed LM batch (for init and ahead-of-time compilation)."""
    ids = np.zeros((batch_size, seq_length), np.int32)
    return {
        "input_ids": ids,
        "target_ids": ids,
        "loss_weights": np.zeros((batch_size, seq_length), np.float32),
    }


def gpt_pretraining(config: GptConfig, fused_loss: bool = True) -> Objective:
    """GPT / GPT-2 next-token pretraining for the training loop; `fused_loss=False` computes
    the loss from a float32 copy of the logits (the A/B baseline)."""
    model = GptLM(config)

    def sums(params: Params, batch: dict[str, Array], rng: Array | None) -> Metrics:
        return gpt_lm_loss(params, batch, rng, model.apply, fused_loss)

    loss_fn = Loss(sums, {"lm_loss": 1.0},
                   lambda batch: {"lm_loss": lm_weights(batch["loss_weights"]).sum()})

    progress = (("loss", "loss"), ("perplexity", "ppl"), ("lm_accuracy", "acc"))
    return Objective("gpt_pretraining", "gpt", config, model, init_from_batch(model, "input_ids"),
                     loss_fn, example_lm_batch, progress)
