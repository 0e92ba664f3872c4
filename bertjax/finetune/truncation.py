"""Counting the training examples cut to finetune.max_seq_length, to say so once per run.

A family's encoder cuts what does not fit (BERT's `_truncate_seq_pair`, GPT's longest field,
ELMo's and a tagger's trailing words) and calls `note(cut)` per row; `Adapter.encode` counts
the training rows inside `counting()` and `warn` logs one line with the count, so a run on
long texts no longer trains on their beginnings alone without a word.
"""

import contextlib
import dataclasses
import logging
from collections.abc import Iterator

_ACTIVE: list["Cut"] = []


@dataclasses.dataclass
class Cut:
    """How many rows were cut while counting."""

    rows: int = 0


@contextlib.contextmanager
def counting() -> Iterator[Cut]:
    """Count the rows cut within the block."""
    cut = Cut()
    _ACTIVE.append(cut)
    try:
        yield cut
    finally:
        _ACTIVE.remove(cut)


def note(cut: bool) -> None:
    """An encoder's report of one row: `cut` when part of it did not fit."""
    if cut and _ACTIVE:
        _ACTIVE[-1].rows += 1


def warn(cut: Cut, rows: int, max_seq_length: int) -> None:
    """One warning with the count, when any training row was cut."""
    if cut.rows:
        logging.warning("%d sequences of the %d training examples are longer than "
                        "finetune.max_seq_length=%d tokens and were cut to it: raise "
                        "finetune.max_seq_length (up to the model's positions) to train on "
                        "all of them", cut.rows, rows, max_seq_length)
