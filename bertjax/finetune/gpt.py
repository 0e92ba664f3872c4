"""Supervised fine-tuning of a GPT (Radford et al. 2018, section 3.2).

The final block's activation h at each sequence's extract token feeds a linear layer W_y:

    classification / entailment:  P(y | x) = softmax(h W_y)
    similarity:                   softmax((h_ab + h_ba) W_y)            (both orderings added)
    multiple choice:              softmax over k of (h_k W_y),  W_y: E -> 1
    (one output and a float label: squared error, for regression tasks such as STS-B)

    L3 = L2 (task) + lm_coef * L1 (next-token LM loss on the same inputs)

lm_coef is 0.5 in the paper; 0 is its ablation (then no LM logits are computed). The start,
delimiter and extract tokens are three new rows of the (tied) token embedding table. The paper's
recipe: lr 6.25e-5, batch 32, 3 epochs, warmup over 0.2% of training then linear decay, dropout
0.1 on the classifier. Fine-tuning runs in the shared training loop (training/loop.py).
"""

import dataclasses
import math
import os
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from bertjax import files
from bertjax.data.arrays import ArraySource
from bertjax.finetune.gpt_inputs import SpecialTokens, check_kind
from bertjax.layers.dropout import Dropout
from bertjax.models.gpt import GptConfig, GptLM
from bertjax.objectives.lm import lm_loss
from bertjax.objectives.objective import Objective, init_from_batch
from bertjax.training import loop
from bertjax.training.experiment import Experiment
from bertjax.training.mesh import make_mesh
from bertjax.training.metrics import METRICS, read_metrics
from bertjax.training.optim import make_optimizer

Array = jax.Array
NUM_SPECIAL = 3


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """The task and the paper's fine-tuning hyper-parameters."""

    kind: str = "classification"
    num_classes: int = 2  # 1: regression (classification/entailment/similarity only)
    lm_coef: float = 0.5  # lambda; 0 turns the auxiliary LM objective off
    learning_rate: float = 6.25e-5
    batch_size: int = 32
    epochs: int = 3
    warmup_fraction: float = 0.002
    weight_decay: float = 0.01
    classifier_dropout: float = 0.1
    max_length: int = 512
    seed: int = 0

    def __post_init__(self) -> None:
        check_kind(self.kind)
        if self.kind == "multiple_choice" and self.num_classes != 1:
            object.__setattr__(self, "num_classes", 1)  # one score per choice
        if self.lm_coef < 0:
            raise ValueError(f"lm_coef={self.lm_coef} is negative: use 0.5 (paper) or 0")


def extended_config(config: GptConfig) -> GptConfig:
    """The LM's config with room for the start, delimiter and extract tokens."""
    return dataclasses.replace(config, vocab_size=config.vocab_size + NUM_SPECIAL)


class GptClassifier(nn.Module):
    """A GPT (`gpt`, vocabulary already extended) with the task's linear output layer."""

    config: GptConfig
    kind: str
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
        head = nn.Dense(
            self.num_classes,
            kernel_init=nn.with_logical_partitioning(nn.initializers.normal(0.02),
                                                     ("embed", "classes")),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("classes",)),
            name="head",
        )
        if self.kind == "multiple_choice":
            logits = head(h_BxNxE)[..., 0]  # [B, K]
        elif self.kind == "similarity":
            logits = head(h_BxNxE.sum(axis=1))  # h(a $ b) + h(b $ a)
        else:
            logits = head(h_BxNxE[:, 0])
        lm_logits = gpt.logits(h_MxLxE) if with_lm else None
        return logits.astype(jnp.float32), lm_logits


def task_loss(logits_BxC: Array, label_B: Array) -> tuple[Array, dict[str, Array]]:
    """Cross-entropy and accuracy, or squared error for a one-output (regression) head."""
    if logits_BxC.shape[-1] == 1:
        loss = jnp.mean((logits_BxC[:, 0] - label_B) ** 2)
        return loss, {"task_loss": loss}
    label_B = label_B.astype(jnp.int32)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits_BxC, label_B).mean()
    accuracy = (logits_BxC.argmax(-1) == label_B).mean()
    return loss, {"task_loss": loss, "accuracy": accuracy}


def finetune_loss(params: Any, batch: dict[str, Array], rng: Array | None,
                  model: GptClassifier, lm_coef: float) -> tuple[Array, dict[str, Array]]:
    """L3 = L2 + lm_coef * L1 for one batch; `rng` None is a deterministic (eval) pass."""
    deterministic = rng is None
    ids_BxNxL, mask_BxNxL = batch["input_ids"], batch["input_mask"]
    logits, lm_logits = model.apply(
        {"params": params}, ids_BxNxL, mask_BxNxL, deterministic, lm_coef > 0,
        rngs=None if deterministic else {"dropout": rng},
    )
    loss, metrics = task_loss(logits, batch["label"])
    if lm_coef > 0:
        L = ids_BxNxL.shape[-1]
        ids_MxL, mask_MxL = ids_BxNxL.reshape(-1, L), mask_BxNxL.reshape(-1, L)
        lm, lm_metrics = lm_loss(lm_logits[:, :-1], ids_MxL[:, 1:], mask_MxL[:, 1:])
        loss = loss + lm_coef * lm
        metrics = {**metrics, "lm_loss": lm_metrics["lm_loss"]}
    return loss, {**metrics, "loss": loss}


def gpt_finetuning(config: GptConfig, ft: FinetuneConfig) -> Objective:
    """The fine-tuning model and loss as an objective for the shared training loop.

    `config` is the pretrained LM's; the objective's model has its vocabulary extended."""
    model = GptClassifier(extended_config(config), ft.kind, ft.num_classes,
                          ft.classifier_dropout)

    def loss_fn(params: Any, batch: dict[str, Array], rng: Array | None):  # noqa: ANN202
        return finetune_loss(params, batch, rng, model, ft.lm_coef)

    choices = 2 if ft.kind == "similarity" else 1

    def example_batch(batch_size: int, seq_length: int) -> dict[str, np.ndarray]:
        shape = (batch_size, choices if ft.kind != "multiple_choice" else 4, seq_length)
        return {"input_ids": np.zeros(shape, np.int32), "input_mask": np.ones(shape, np.int32),
                "label": np.zeros((batch_size,), np.float32)}

    progress = (("loss", "loss"), ("accuracy", "acc"))
    init_variables = init_from_batch(model, "input_ids", "input_mask")
    return Objective(f"gpt_{ft.kind}", "gpt", extended_config(config), model, init_variables,
                     loss_fn, example_batch, progress)


def with_special_tokens(pretrained: Any, rng: Array, std: float = 0.02) -> Any:
    """Pretrained GptLM params with three new random rows in the token embeddings."""
    table_VxE = jnp.asarray(pretrained["token_embeddings"]["embedding"])
    new_3xE = std * jax.random.normal(rng, (NUM_SPECIAL, table_VxE.shape[1]), table_VxE.dtype)
    embeddings = {"embedding": jnp.concatenate([table_VxE, new_3xE], axis=0)}
    return {**pretrained, "token_embeddings": embeddings}


def special_tokens(config: GptConfig) -> SpecialTokens:
    """Ids of start / delimiter / extract for a pretrained LM of `config`."""
    return SpecialTokens.after(config.vocab_size)


def finetune(config: GptConfig, pretrained: Any | None, train: dict[str, np.ndarray],
             ft: FinetuneConfig, workdir: str | os.PathLike, mesh: jax.sharding.Mesh | None = None,
             show_progress: bool = False) -> tuple[Any, list[dict[str, float]]]:
    """Fine-tune from `pretrained` GptLM params (None: from scratch) on encoded examples, in
    the shared training loop (checkpoints in `workdir`; re-running resumes).

    Returns the fine-tuned params and the per-step metrics."""
    n = len(train["label"])
    if n < ft.batch_size:
        raise ValueError(f"{n} training examples are fewer than batch_size {ft.batch_size}: "
                         "lower the batch size or add examples")
    steps = ft.epochs * (n // ft.batch_size)
    tx = make_optimizer("adamw", ft.learning_rate, math.ceil(ft.warmup_fraction * steps), steps,
                        eps=1e-8, weight_decay=ft.weight_decay)
    length = train["input_ids"].shape[-1]
    exp = Experiment(gpt_finetuning(config, ft), ArraySource(train, seed=ft.seed), tx,
                     ft.batch_size, steps, seq_phases=((1.0, length),), seed=ft.seed,
                     log_every=1, checkpoint_every=steps)

    def with_pretrained(params: Any) -> Any:
        key = jax.random.fold_in(jax.random.key(ft.seed), 1)
        return {**params, "gpt": with_special_tokens(pretrained, key)}

    result = loop.run(exp, workdir, make_mesh() if mesh is None else mesh, show_progress,
                      with_pretrained if pretrained is not None else None)
    return jax.device_get(result.state.params), read_metrics(files.as_path(workdir) / METRICS)


def predict(config: GptConfig, params: Any, data: dict[str, np.ndarray], ft: FinetuneConfig,
            batch_size: int = 64) -> np.ndarray:
    """Task logits [B, C] (or [B, K]) for encoded examples, deterministically."""
    model = GptClassifier(extended_config(config), ft.kind, ft.num_classes)
    apply = jax.jit(lambda p, i, m: model.apply({"params": p}, i, m, True, False)[0])
    n = len(data["input_ids"])
    out = [apply(params, data["input_ids"][i:i + batch_size], data["input_mask"][i:i + batch_size])
           for i in range(0, n, batch_size)]
    return np.concatenate([np.asarray(o) for o in out])
