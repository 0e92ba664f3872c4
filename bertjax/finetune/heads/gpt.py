"""Supervised fine-tuning of a GPT (Radford et al. 2018, section 3.2) as an Objective.

The final block's activation h at each sequence's extract token feeds a linear layer W_y;
the input transformations (section 3.3, bertjax.finetune.families.gpt) decide how many
sequences an example is and how their activations combine:

    classification / entailment:  P(y | x) = softmax(h W_y)                 one sequence
    similarity:                   softmax((h_ab + h_ba) W_y)                both orderings added
    multiple choice:              softmax over k of (h_k W_y),  W_y: E -> 1 one per answer
    (one output and a float label: squared error, for regression tasks such as STS-B)

    L3 = L2 (task) + lm_coef * L1 (next-token LM loss on the same inputs)

lm_coef is 0.5 in the paper; 0 is its ablation (then no LM logits are computed). The start,
delimiter and extract tokens are three new rows of the (tied) token embedding table; dropout
(0.1 in the paper) is applied to the extract activations before W_y.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bertjax.finetune.heads.linear import linear_head
from bertjax.finetune.outputs import Output
from bertjax.layers.dropout import Dropout
from bertjax.models.gpt import GptConfig, GptLM
from bertjax.objectives.lm import lm_loss, lm_weights
from bertjax.objectives.objective import Metrics, Objective, init_from_batch
from bertjax.typing import Params

Array = jax.Array
NUM_SPECIAL = 3
TRANSFORMATIONS = ("classification", "entailment", "similarity", "multiple_choice")


@dataclasses.dataclass(frozen=True)
class SpecialTokens:
    """Ids of the start, delimiter and extract tokens (appended after the LM's vocabulary)."""

    start: int
    delimiter: int
    extract: int

    @classmethod
    def after(cls, vocab_size: int) -> "SpecialTokens":
        return cls(vocab_size, vocab_size + 1, vocab_size + 2)


def special_tokens(config: GptConfig) -> SpecialTokens:
    """Ids of start / delimiter / extract for a pretrained LM of `config`."""
    return SpecialTokens.after(config.vocab_size)


def extended_config(config: GptConfig) -> GptConfig:
    """The LM's config with room for the start, delimiter and extract tokens."""
    return dataclasses.replace(config, vocab_size=config.vocab_size + NUM_SPECIAL)


def check_transformation(transformation: str) -> None:
    if transformation not in TRANSFORMATIONS:
        raise ValueError(f"unknown GPT input transformation {transformation!r}: choose one of "
                         f"{', '.join(TRANSFORMATIONS)}")


class GptClassifier(nn.Module):
    """A GPT (`gpt`, vocabulary already extended) with the task's linear output layer."""

    config: GptConfig
    transformation: str
    num_classes: int
    classifier_dropout: float = 0.1

    @nn.compact
    def __call__(self, input_ids_BxNxL: Array, input_mask_BxNxL: Array,
                 deterministic: bool = True, with_lm: bool = True
                 ) -> tuple[Array, Array | None]:
        """Task logits ([B, C], or [B, K] for multiple choice) and LM logits [B*N, L, V]."""
        B, N, L = input_ids_BxNxL.shape
        gpt = GptLM(self.config, name="gpt")
        mask_MxL = input_mask_BxNxL.reshape(B * N, L)
        h_MxLxE, _ = gpt.hidden(input_ids_BxNxL.reshape(B * N, L), mask_MxL,
                                deterministic=deterministic)
        extract_M = jnp.maximum(mask_MxL.sum(-1) - 1, 0)  # last real token: the extract token
        h_BxNxE = jnp.take_along_axis(h_MxLxE, extract_M[:, None, None], axis=1)
        h_BxNxE = h_BxNxE.reshape(B, N, -1)
        h_BxNxE = Dropout(self.classifier_dropout)(h_BxNxE, deterministic=deterministic)
        head = linear_head(self.num_classes, nn.initializers.normal(0.02), "head")
        if self.transformation == "multiple_choice":
            logits = head(h_BxNxE)[..., 0]  # [B, K]
        elif self.transformation == "similarity":
            logits = head(h_BxNxE.sum(axis=1))  # h(a $ b) + h(b $ a)
        else:
            logits = head(h_BxNxE[:, 0])
        lm_logits = gpt.logits(h_MxLxE) if with_lm else None
        return logits.astype(jnp.float32), lm_logits


def finetune_loss(params: Params, batch: dict[str, Array], rng: Array | None,
                  model: GptClassifier, output: Output, lm_coef: float) -> Metrics:
    """The weighted sums of L3 = L2 + lm_coef * L1 for one batch (the Loss's terms:
    `finetune_terms`); `rng` None is a deterministic (eval) pass. L2 is `output`'s loss
    (cross-entropy, or squared error for one score), L1 the next-token loss over every real
    token of every sequence."""
    deterministic = rng is None
    ids_BxNxL, mask_BxNxL = batch["input_ids"], batch["input_mask"]
    logits, lm_logits = model.apply(
        {"params": params}, ids_BxNxL, mask_BxNxL, deterministic, lm_coef > 0,
        rngs=None if deterministic else {"dropout": rng},
    )
    metrics = output.loss(logits, batch)
    if lm_coef > 0:
        L = ids_BxNxL.shape[-1]
        ids_MxL, mask_MxL = ids_BxNxL.reshape(-1, L), mask_BxNxL.reshape(-1, L)
        lm = lm_loss(lm_logits[:, :-1], ids_MxL[:, 1:], mask_MxL[:, 1:])
        metrics["lm_loss"] = lm["lm_loss"]
    return metrics


def _lm_weights(batch: dict[str, Array]) -> Array:
    """The auxiliary LM's targets summed over a batch: every real token but each first."""
    return lm_weights(batch["input_mask"][..., 1:]).sum()


def gpt_finetuning(config: GptConfig, transformation: str, output: Output, num_classes: int,
                   lm_coef: float = 0.5, classifier_dropout: float = 0.1,
                   num_sequences: int = 1) -> Objective:
    """The fine-tuning model and loss as an objective for the shared training loop.

    `config` is the pretrained LM's; the objective's model has its vocabulary extended.
    `num_sequences`: the sequences per example (2 for similarity, K for multiple choice)."""
    check_transformation(transformation)
    if lm_coef < 0:
        raise ValueError(f"finetune.lm_coef={lm_coef} is negative: use 0.5 (paper) or 0")
    model = GptClassifier(extended_config(config), transformation, num_classes,
                          classifier_dropout)

    def sums(params: Params, batch: dict[str, Array], rng: Array | None) -> Metrics:
        return finetune_loss(params, batch, rng, model, output, lm_coef)

    loss_fn = output.task_loss(sums, **({"lm_loss": (lm_coef, _lm_weights)} if lm_coef > 0
                                        else {}))

    def example_batch(batch_size: int, seq_length: int) -> dict[str, np.ndarray]:
        shape = (batch_size, num_sequences, seq_length)
        return {"input_ids": np.zeros(shape, np.int32), "input_mask": np.ones(shape, np.int32),
                **output.example_targets(batch_size, seq_length)}

    progress = (("loss", "loss"), (output.metric, "acc"))
    init_variables = init_from_batch(model, "input_ids", "input_mask")
    return Objective(f"gpt_{transformation}", "gpt", extended_config(config), model,
                     init_variables, loss_fn, example_batch, progress)


def with_special_tokens(pretrained: Params, rng: Array, std: float = 0.02) -> Params:
    """Pretrained GptLM params with three new random rows in the token embeddings."""
    table_VxE = jnp.asarray(pretrained["token_embeddings"]["embedding"])
    new_3xE = std * jax.random.normal(rng, (NUM_SPECIAL, table_VxE.shape[1]), table_VxE.dtype)
    embeddings = {"embedding": jnp.concatenate([table_VxE, new_3xE], axis=0)}
    return {**pretrained, "token_embeddings": embeddings}
