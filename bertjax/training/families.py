"""The model families, each one `Family` record: what its runs record and which function
serves each job the tools do for it (`PIECES`).

A family is declared once, by its record names in `workdir.RECORD_NAMES` (a file format); each
of its pieces registers where it is defined, as task types and adapters do (`@register`):

    @families.provides("bert", "loader")
    def _bert_workdir(path): ...

and the tools ask for the piece of a workdir's family (`families.piece("bert", "loader")`),
never branching on a family's name. The registry sits in training/ and the pieces in the
floors above it (finetune, convert, analysis), so no module imports a higher floor; importing
a piece's module registers it, and a tool imports the modules it dispatches to.
`missing()` names every piece a family lacks (tests/training/test_families.py fails on one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from bertjax.training.workdir import RECORD_NAMES, RecordNames

T = TypeVar("T")

# piece: (the module that registers it, what it is)
PIECES: dict[str, tuple[str, str]] = {
    "loader": ("bertjax.finetune.pretrained",
               "a workdir's base model, config and tokenizer (fine-tuning's --init)"),
    "recipe": ("bertjax.finetune.recipe",
               "the fine-tuning Recipe subclass, its paper defaults in PAPER"),
    "export": ("bertjax.convert.export",
               "{format: a writer or a Refusal} for every export format"),
    "features": ("bertjax.analysis.features", "every layer's mean-pooled features of texts"),
    "random_params": ("bertjax.analysis.features",
                      "the base model freshly initialised (features.random_twin)"),
    "held_out": ("bertjax.analysis.heldout", "its own objective scored on held-out text"),
}


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A piece a family has no way to serve: one line saying why and what to do instead."""

    reason: str


@dataclasses.dataclass
class Family:
    """A model family: its record names (the file format) and its registered pieces."""

    name: str
    names: RecordNames
    pieces: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def objectives(self) -> tuple[str, ...]:
        """The pretraining objectives its runs record ("bert_pretraining", ...)."""
        return tuple(f"{self.name}_{name}" for name in self.names.pretraining)


FAMILIES: dict[str, Family] = {name: Family(name, names) for name, names in RECORD_NAMES.items()}


def provide(family: str, piece: str, value: Any) -> None:
    """Register `value` as `family`'s `piece`; one line for an unknown family or piece."""
    if family not in FAMILIES:
        raise ValueError(f"family {family!r} has no record names: add it to RECORD_NAMES in "
                         "bertjax/training/workdir.py first")
    if piece not in PIECES:
        raise ValueError(f"{piece!r} is not a family piece: choose one of {', '.join(PIECES)}")
    FAMILIES[family].pieces[piece] = value


def provides(family: str, piece: str) -> Callable[[T], T]:
    """Decorator: register the decorated function or class as `family`'s `piece`."""
    def register(value: T) -> T:
        provide(family, piece, value)
        return value

    return register


def piece(family: str, piece: str) -> Any:
    """`family`'s registered `piece`; one line naming the families that have one otherwise."""
    found = FAMILIES.get(family)
    if found is None or piece not in found.pieces:
        raise ValueError(f"family {family!r} has no {piece} ({PIECES[piece][1]}): choose "
                         f"{choices(piece)}")
    return found.pieces[piece]


def pieces(piece: str) -> dict[str, Any]:
    """{family: its `piece`} of every family that registered one."""
    return {name: f.pieces[piece] for name, f in FAMILIES.items() if piece in f.pieces}


def choices(piece: str) -> str:
    """The families that have `piece`, for a message: "bert, gpt or elmo"."""
    names = list(pieces(piece))
    return " or ".join(filter(None, (", ".join(names[:-1]), names[-1]))) if names else "none"


def missing() -> list[str]:
    """One line per piece a family lacks (its pieces' modules imported first) and per
    pretraining objective whose name is not read as pretraining; empty when complete."""
    lines = []
    for family in FAMILIES.values():
        for name, (module, what) in PIECES.items():
            if name not in family.pieces:
                lines.append(f"family {family.name!r} has no {name} ({what}): register one in "
                             f"{module}")
        for objective in family.objectives:
            if not objective.endswith("pretraining"):
                lines.append(f"objective {objective!r} of family {family.name!r} does not end "
                             "in 'pretraining': rename it in workdir.RECORD_NAMES")
    return lines
