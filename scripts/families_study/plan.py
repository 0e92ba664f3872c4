"""Every run of the study, as data: the pretraining runs and the learning curve's points.
Nothing here runs anything, so `--dry_run` and the tests read the plan.

Layout under the study's root:

    pretrain/<model>/                         bertjax-train workdirs (+ heldout.json)
    curve/<model>-<approach>/<init>/n=<N>/draw=<d>/
                                              one point: study.json (its test accuracy and
                                              choices); fine-tuned points hold one run per
                                              learning rate (lr=<rate>/)
    curve/bow-<baseline>/n=<N>/draw=<d>/      a bag-of-words point
    features/<model>/<init>.npz               a model's frozen features, computed once
    senses/<family>-<init>/                   the polysemy view's vectors and separations

A point is (model, approach, init, labelled-set size N, draw d): approach "finetuned"
(bertjax.finetune.run: BERT and GPT fine-tuned whole, ELMo in its task model) or "features"
(the frozen model's mean-pooled layers into the same logistic regression for every family);
init "pretrained" or "random" (the same architecture and tokenizer, initialised from the
draw's seed). Draw d of size N is the same rows for every arm (draws.py), so each pretrained
point has a random twin on the same labels, and the bag-of-words baselines read them too.
"""

from __future__ import annotations

import dataclasses

from families_study.config import Study

INITS = ("pretrained", "random")
APPROACHES = ("finetuned", "features")
APPROACH_NAMES = {"finetuned": "fine-tuned", "features": "feature-based"}  # in tables, plots


@dataclasses.dataclass(frozen=True)
class Pretraining:
    """One bertjax-train run."""

    model: str
    family: str
    experiment: str
    bindings: tuple[str, ...]
    steps: int
    seed: int = 0

    @property
    def workdir(self) -> str:
        return f"pretrain/{self.model}"


@dataclasses.dataclass(frozen=True)
class Point:
    """One point of the learning curve: a model's arm on one draw of N labels."""

    model: str
    family: str
    approach: str
    init: str
    labels: int
    draw: int
    pretraining: Pretraining

    @property
    def workdir(self) -> str:
        return (f"curve/{self.model}-{self.approach}/{self.init}/n={self.labels}/"
                f"draw={self.draw}")


@dataclasses.dataclass(frozen=True)
class Baseline:
    """One bag-of-words point: a scikit-learn classifier on one draw of N labels."""

    kind: str
    labels: int
    draw: int

    @property
    def workdir(self) -> str:
        return f"curve/bow-{self.kind}/n={self.labels}/draw={self.draw}"


@dataclasses.dataclass
class Plan:
    """The study's runs, pretraining first, then the curve's points in the order they run:
    the cheap ones (baselines, probes) before the fine-tuned ones."""

    pretraining: list[Pretraining]
    points: list[Point]
    baselines: list[Baseline]
    labels: tuple[int, ...]
    draws: int

    def rows(self) -> list[tuple[str, str, int]]:
        """(model, approach, N) of every learning-curve row, in table order."""
        return list(dict.fromkeys((p.model, p.approach, p.labels) for p in sorted(
            self.points, key=lambda p: (p.model, p.approach, p.labels))))


def _pretraining(study: Study, model: str) -> Pretraining:
    family, experiment, bindings = study.models[model]
    shared = tuple(study.bindings.get(family, ()))
    return Pretraining(model, family, experiment, shared + tuple(bindings), study.steps[model])


def make_plan(study: Study) -> Plan:
    """The runs of `study`, each once."""
    pretraining = {model: _pretraining(study, model) for model in study.models}
    points = []
    for approach, sizes_of in (("features", {m: study.labels for m in study.probed}),
                               ("finetuned", study.fine_tuned)):
        for model, sizes in sizes_of.items():
            for labels in sizes:
                for draw in range(study.draws):
                    for init in INITS:
                        points.append(Point(model, study.family(model), approach, init,
                                            labels, draw, pretraining[model]))
    sizes = sorted({*study.labels, *(p.labels for p in points)})
    baselines = [Baseline(kind, n, d) for n in sizes for d in range(study.draws)
                 for kind in study.baselines]
    return Plan(list(pretraining.values()), points, baselines, tuple(sizes), study.draws)
