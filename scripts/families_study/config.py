"""The study's sizes, budgets and learning curve, from a gin file (configs/studies/
families_*.gin): one file per scale, so the same study runs larger by configuration alone.

    study = load_study("configs/studies/families_cpu.gin", ["families_study.draws = 5"])

`models` names every pretraining run: (family, experiment gin file, extra gin bindings), after
the `bindings` its family shares; `steps` gives each its budget in steps (FLOPs follow from
the model and batch: flops.py). The learning curve trains every model at each size of
`labels` (stratified AG News draws, `draws` of each, the same draws for every arm),
fine-tuned where `fine_tuned` says so and feature-based (a probe on frozen layers) for every
model in `probed`; `finetune` holds each family's recipe settings (any bertjax.finetune
Recipe setting of that family, e.g. {'bert': {'pooling': 'mean'}} for BERT's mean-pooled
sentence head) and `learning_rates` the grid a run's rate is chosen from, per (model, init,
size), on the draw's held-out tenth.
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
BASELINES = ("tfidf_logreg", "naive_bayes")
TRAIN_ROWS = 4000  # AG News's train.tsv


class StudyError(ValueError):
    """A study configuration that cannot run; the message names the setting and the fix."""


@gin.configurable("families_study")
@dataclasses.dataclass(frozen=True)
class Study:
    """Everything the study varies by scale (see the module docstring)."""

    models: dict[str, tuple[str, str, Sequence[str]]]  # name: (family, experiment, bindings)
    steps: dict[str, int]  # name: pretraining steps (the budget)
    finetune: dict[str, dict[str, Any]]  # family: Recipe settings
    learning_rates: dict[str, Sequence[float]]  # family: the fine-tuning rates to choose from
    labels: Sequence[int] = (100, 400, 1600, 4000)  # labelled-set sizes of the curve
    draws: int = 3  # stratified draws of each size, shared by every arm
    # model: the sizes it is fine-tuned at (a model missing here is fine-tuned at none)
    fine_tuned: dict[str, Sequence[int]] = dataclasses.field(default_factory=dict)
    probed: Sequence[str] = ()  # models read feature-based (a probe) at every size
    baselines: Sequence[str] = BASELINES  # bag-of-words rows at every size
    min_steps: int = 300  # a fine-tuning run trains at least this many steps
    min_epochs: float = 5.0  # and at least this many passes over its rows
    # family: gin bindings every model of that family gets before its own (a scale's sizes,
    # batch, sequence length, vocabulary and corpus)
    bindings: dict[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    shared_data: str = "../shared/data"
    train_rows: int | None = None  # read only the first N training rows (the quick study)
    eval_rows: int | None = None  # score on the first N test rows only (None: all 7,600)
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
        unknown = (set(self.fine_tuned) | set(self.probed)) - set(self.models)
        if unknown:
            raise StudyError(f"families_study.fine_tuned or probed names {sorted(unknown)}, "
                             "not in families_study.models: name pretrained models")
        for model in self.fine_tuned:
            if not self.learning_rates.get(self.family(model)):
                raise StudyError(f"families_study.learning_rates has no rates for family "
                                 f"{self.family(model)!r}: give the grid its runs choose from")
        self._check_recipes()
        rows = self.train_rows or TRAIN_ROWS
        sizes = [*self.labels, *(n for sizes in self.fine_tuned.values() for n in sizes)]
        bad = [n for n in sizes if not 10 <= n <= rows]
        if bad:
            raise StudyError(f"families_study.labels {bad} outside [10, {rows}]: a draw "
                             "needs 10 rows at least and at most the training file's")
        if self.draws < 1:
            raise StudyError(f"families_study.draws is {self.draws}: draw at least once")
        unknown_baselines = set(self.baselines) - set(BASELINES)
        if unknown_baselines:
            raise StudyError(f"unknown baselines {sorted(unknown_baselines)}: choose among "
                             f"{', '.join(BASELINES)}")

    def _check_recipes(self) -> None:
        """Each fine-tuned family's settings make a recipe (finetune.pooling = 'max' and
        the like fail here, in one line, not after the pretraining runs)."""
        from bertjax.finetune.recipe import Recipe

        for family in sorted({self.family(model) for model in self.fine_tuned}):
            try:
                Recipe(family, "classification", **self.finetune.get(family, {}))
            except (ValueError, TypeError) as err:
                raise StudyError(f"families_study.finetune[{family!r}]: {err}") from None

    def family(self, model: str) -> str:
        return self.models[model][0]


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
