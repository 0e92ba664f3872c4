"""The study's sizes and budgets, from a gin file (configs/studies/families_*.gin): one file
per scale, so the same study runs larger by configuration alone.

    study = load_study("configs/studies/families_cpu.gin", ["families_study.seeds = 5"])

`models` names every pretraining run of the study: (family, experiment gin file, extra gin
bindings), after the `bindings` its family shares; `steps` gives each its budget in steps
(FLOPs follow from the model and batch: flops.py); `finetune` the recipe settings per family
(bertjax.finetune.recipe.Recipe fields).
Relative paths are read from the repository root.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Sequence
from typing import Any

import gin

REPO = pathlib.Path(__file__).resolve().parents[2]
FAMILIES = ("bert", "gpt", "elmo")
TABLES = ("bert_table5", "bert_table6", "gpt_table5", "elmo_table2")


class StudyError(ValueError):
    """A study configuration that cannot run; the message names the setting and the fix."""


@gin.configurable("families_study")
@dataclasses.dataclass(frozen=True)
class Study:
    """Everything the study varies by scale (see the module docstring)."""

    models: dict[str, tuple[str, str, Sequence[str]]]  # name: (family, experiment, bindings)
    steps: dict[str, int]  # name: pretraining steps (the budget)
    finetune: dict[str, dict[str, Any]]  # family: Recipe settings for every task
    seeds: int = 3
    pretrain_seeds: dict[str, int] = dataclasses.field(default_factory=dict)  # default: seeds
    # family: gin bindings every model of that family gets before its own (a scale's sizes,
    # batch, sequence length, vocabulary and corpus)
    bindings: dict[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    shared_data: str = "../shared/data"
    tasks: Sequence[str] = ("agnews", "qnli5")
    tables: Sequence[str] = TABLES
    table6: Sequence[str] = ("bert_small", "bert", "bert_large")  # Table 6's sizes, in order
    train_rows: int | None = None  # use only the first N training rows of each task
    eval_rows: int | None = None  # evaluate on the first N rows only (None: all 7,600)
    probe_max_length: int = 64  # tokens a feature-based run reads of a text
    heldout_batches: int = 64  # held-out scoring: at most this many batches of 32 rows
    polysemy: bool = True
    # the mesh gin file `--compile` adds to each pretraining experiment (a TPU slice's, which
    # names the topology bertjax-compile compiles for); None: the study has no compile target
    compile_mesh: str | None = None

    def __post_init__(self) -> None:
        for name, (family, experiment, _) in self.models.items():
            if family not in FAMILIES:
                raise StudyError(f"families_study.models[{name!r}] is of family {family!r}: "
                                 f"choose one of {', '.join(FAMILIES)}")
            if not (REPO / experiment).is_file():
                raise StudyError(f"families_study.models[{name!r}]: {experiment} does not "
                                 "exist: name an experiment gin file of the repository")
            if name not in self.steps or self.steps[name] < 1:
                raise StudyError(f"families_study.steps has no positive budget for {name!r}: "
                                 "give every model its pretraining steps")
        missing = [f for f in FAMILIES if f not in self.models]
        if missing:
            raise StudyError(f"families_study.models lacks {', '.join(missing)}: the study "
                             "pretrains one model named after each family")
        unknown = set(self.tables) - set(TABLES) | set(self.tasks) - {"agnews", "qnli5"}
        if unknown:
            raise StudyError(f"unknown tables or tasks {sorted(unknown)}: tables are "
                             f"{', '.join(TABLES)}; tasks agnews, qnli5")
        if self.seeds < 1:
            raise StudyError(f"families_study.seeds is {self.seeds}: run at least one seed")

    def family(self, model: str) -> str:
        return self.models[model][0]

    def seeds_of(self, model: str) -> int:
        """How many pretraining seeds model `model` runs (downstream seed s reads s mod n)."""
        return min(self.pretrain_seeds.get(model, self.seeds), self.seeds)


def load_study(study_file: str, bindings: Sequence[str] = ()) -> Study:
    """The Study a gin file (and extra bindings) describes; one StudyError line otherwise."""
    path = pathlib.Path(study_file)
    path = path if path.is_absolute() else REPO / path
    if not path.is_file():
        raise StudyError(f"--study={study_file} does not exist: pass a configs/studies/*.gin file")
    gin.clear_config()
    gin.add_config_file_search_path(str(REPO))
    try:
        gin.parse_config_files_and_bindings([str(path)], list(bindings))
        return Study()
    except (ValueError, TypeError, KeyError, SyntaxError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise StudyError(f"{study_file}: {first}") from None
