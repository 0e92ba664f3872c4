"""A pretraining task: the model, how to initialise it from a batch, and its loss."""

import dataclasses
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import numpy as np

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class PretrainingTask:
    """What the training loop needs to know about a model family's objective.

    init_variables(rng, batch) -> flax variables;  loss_fn(params, batch, rng) -> (loss, metrics).
    example_batch(batch_size, seq_length) -> zero arrays shaped like a real batch (for init and
    ahead-of-time compilation without data). `progress` names the metrics shown on the progress
    bar, with short labels.
    """

    name: str
    model: nn.Module
    init_variables: Callable[[Array, dict[str, Array]], Any]
    loss_fn: Callable[[Any, dict[str, Array], Array | None], tuple[Array, dict[str, Array]]]
    example_batch: Callable[[int, int], dict[str, np.ndarray]]
    progress: tuple[tuple[str, str], ...] = (("loss", "loss"),)
