"""What the training loop needs to know about a model and its training objective.

A family (BERT, GPT, ELMo, ...) brings a model file, an Objective built from its config, and
an example source for its data; the loop, checkpoints, workdir record and CLIs are shared.
"seqio Task" stays seqio's word for a data pipeline; an Objective is the model side.
"""

import dataclasses
from collections.abc import Callable

import flax.linen as nn
import jax
import numpy as np
from flax.typing import VariableDict

from bertjax.models.sizes import FamilyConfig
from bertjax.typing import Params

Array = jax.Array
Batch = dict[str, np.ndarray]
LossFn = Callable[[Params, dict[str, Array], Array | None], tuple[Array, dict[str, Array]]]


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

    init_variables(rng, batch) -> flax variables;  loss_fn(params, batch, rng) -> (loss,
    metrics), with rng None for a deterministic (evaluation) pass. example_batch(batch_size,
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
    loss_fn: LossFn
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
