"""What the training loop needs to know about a model and its training objective.

A family (BERT, GPT, ELMo, ...) brings a model file, an Objective built from its config, and
an example source for its data; the loop, checkpoints, workdir record and CLIs are shared.
"seqio Task" stays seqio's word for a data pipeline; an Objective is the model side.
"""

import dataclasses
from collections.abc import Callable, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from flax.typing import VariableDict

from bertjax.models.sizes import FamilyConfig
from bertjax.typing import Params

Array = jax.Array
Batch = dict[str, np.ndarray]


@struct.dataclass
class Mean:
    """A weighted mean kept as its two sums, total = sum(w * x) and weight = sum(w), so that
    the parts of a batch add up to the batch: the mean of a batch split into micro-batches is
    the sum of their totals over the sum of their weights, never a mean of their means.
    `exp`: the metric is exp(mean) (a perplexity)."""

    total: Array
    weight: Array
    exp: bool = struct.field(pytree_node=False, default=False)

    @classmethod
    def of(cls, values: Array, weights: Array | None = None, exp: bool = False) -> "Mean":
        """The weighted mean of `values` (float32), every element weighing 1 by default."""
        values = values.astype(jnp.float32)
        weights = jnp.ones_like(values) if weights is None else weights.astype(jnp.float32)
        return cls((values * weights).sum(), weights.sum(), exp)

    @property
    def value(self) -> Array:
        mean = self.total / _nonzero(self.weight)
        return jnp.exp(mean) if self.exp else mean


def _nonzero(weight: Array) -> Array:
    """A denominator: the weight, or 1 where it is 0 (its total is 0 too: the mean is 0)."""
    return jnp.where(weight == 0, 1.0, weight)


Metrics = dict[str, "Mean | Array"]  # Means, counts (sums) and a carried state's next value
SumsFn = Callable[[Params, dict[str, Array], Array | None], Metrics]


def metric_values(metrics: Metrics) -> dict[str, Array]:
    """Every Mean's value; counts and carried state as they are."""
    return {k: m.value if isinstance(m, Mean) else m for k, m in metrics.items()}


@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity, as jax.jit hashes it
class Loss:
    """An objective's loss, kept as weighted sums so that gradient accumulation is exact.

    `sums(params, batch, rng)` -> metrics: Means (weighted sums and their weights), counts,
    and a carried state's next value (see Carry); rng None is a deterministic (evaluation)
    pass. The loss is sum(terms[name] * mean of metrics[name]): MLM + NSP, GPT's next-token
    loss, the mean of ELMo's two directions, a head's task loss plus its auxiliary terms.
    `weights(batch)` -> {term: its weight summed over the batch}: each term's denominator,
    read from the batch alone (weights are data, never parameters). A step that splits its
    batch (training/step.py) divides every micro-batch's totals by the whole batch's
    weights, so the micro-batches' losses and gradients add up to the full batch's whatever
    their weights (masked positions per row, packed rows, padding), as t5x normalises
    micro-batches by the whole batch's loss normalising factor.

    Called, `loss(params, batch, rng)` -> (the batch's loss, its metrics' values with the
    loss as "loss"), as a deterministic evaluation or a test reads them.
    """

    sums: SumsFn
    terms: Mapping[str, float]
    weights: Callable[[dict[str, Array]], dict[str, Array]]

    def total(self, metrics: Metrics, weights: Mapping[str, Array] | None = None) -> Array:
        """The loss of `metrics`: each term's total over its own weight, or over `weights`
        (a whole batch's, giving one micro-batch's share of the batch's loss)."""
        parts = [coef * metrics[name].total
                 / _nonzero(metrics[name].weight if weights is None else weights[name])
                 for name, coef in self.terms.items()]
        return sum(parts[1:], parts[0])

    def __call__(self, params: Params, batch: dict[str, Array], rng: Array | None
                 ) -> tuple[Array, dict[str, Array]]:
        metrics = self.sums(params, batch, rng)
        loss = self.total(metrics)
        return loss, {**metric_values(metrics), "loss": loss}


@dataclasses.dataclass(frozen=True)
class Carry:
    """State one step hands to the next (truncated back-propagation through time).

    `zeros(batch_size)` gives the state at the start of a stream, one row per batch row. The
    loop keeps it in the train state (sharded like the batch, checkpointed with it) and gives
    it to the loss inside the batch under the same keys; the loss returns the next state in
    its metrics under those keys.
    """

    zeros: Callable[[int], dict[str, np.ndarray]]

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self.zeros(1))


@dataclasses.dataclass(frozen=True)
class Objective:
    """A model, its parameters' initialisation and its loss, for the shared training loop.

    init_variables(rng, batch) -> flax variables;  loss_fn: the Loss (its weighted sums, how
    they make the loss, each term's weights), called as loss_fn(params, batch, rng) -> (loss,
    metrics) with rng None for a deterministic (evaluation) pass. example_batch(batch_size,
    seq_length) -> zero arrays shaped like a real batch, for initialisation and ahead-of-time
    compilation without data. `progress` names the metrics shown while training and in the
    summary, with short labels. `config` is the model config recorded in WORKDIR/model.json;
    its BUILDER (e.g. "bert_config") is the gin name error messages point at.
    """

    name: str  # e.g. "bert_pretraining"
    family: str  # "bert", "gpt", "elmo": the family a workdir's checkpoints belong to
    config: FamilyConfig
    model: nn.Module
    init_variables: Callable[[Array, dict[str, Array]], VariableDict]
    loss_fn: Loss
    example_batch: Callable[[int, int], Batch]
    progress: tuple[tuple[str, str], ...] = (("loss", "loss"),)
    carry: Carry | None = None

    @property
    def config_name(self) -> str:
        """The gin name of the model config (`bert_config`), for messages."""
        return getattr(self.config, "BUILDER", f"{self.family}_config")


def init_from_batch(model: nn.Module, *features: str) -> Callable[[Array, dict], VariableDict]:
    """init_variables(rng, batch) calling `model.init` on the batch's `features`, in order."""

    def init_variables(rng: Array, batch: dict[str, Array]) -> VariableDict:
        return model.init({"params": rng, "dropout": rng}, *(batch[f] for f in features))

    return init_variables
