"""What the training loop needs from a data source: the `DataSource` protocol.

Every pretraining source (bertjax.data.source.Source and its families') and fine-tuning's
in-memory examples (bertjax.finetune.arrays.ArraySource) provide it; `Experiment.source` is
one, and the loop reads nothing else of it.
"""

import os
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import numpy as np

FeatureSpec = dict[str, tuple[tuple[int, ...], Any]]  # name: (shape of one example, dtype)


@runtime_checkable
class DataSource(Protocol):
    """Batches for the loop, and what it checks and records before the first step."""

    setting: str  # the setting that configures the source, named in error messages
    corpus_name: str | None  # the corpus setting it reads (model.json records it); None: none

    @property
    def vocab_size(self) -> int:
        """Token ids the examples use (0: no token ids); checked against the model's."""

    def prepare(self, workdir: str | os.PathLike) -> None:
        """Read and encode what the batches need; writes nothing (called before the run)."""

    def save(self, workdir: str | os.PathLike) -> dict[str, Any]:
        """Put the tokenizer's files in the workdir; the tokenizer part of model.json."""

    def feature_spec(self, seq_length: int, batch_size: int) -> FeatureSpec:
        """{feature: (shape, dtype)} of one example, checked against the objective's batch."""

    def batches(self, start_index: int, seq_length: int, batch_size: int
                ) -> Iterator[dict[str, np.ndarray]]:
        """This host's rows of every global batch from global example `start_index` on
        (`batch_size` rows per host), endlessly."""

    def row_facts(self) -> dict[str, Any]:
        """What model.json records of how its rows are made, beyond the batch size and corpus
        (a resume announces a change): {} or, for a source that packs rows, how many
        sequences a row holds."""

    def padded_length(self, batch: dict[str, np.ndarray], seq_length: int) -> int:
        """Tokens per row of a batch it gave: `seq_length`, or the length bucket it cut the
        batch to (the loop's tokens-per-second count)."""
