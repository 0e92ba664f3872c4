"""The GLUE tasks' definitions (Wang et al. 2018): each task's data, type, classes and the
metric that ranks it, and which task a data spec names, so that a fine-tuning run keeps its
best checkpoint by GLUE's metric (CoLA: MCC, MRPC and QQP: F1, STS-B: Spearman) wherever it
starts: bertjax-glue, or bertjax-finetune and `bertjax.finetune.run` on GLUE's files or TFDS's
glue datasets (bertjax/finetune/setup.py)."""

import dataclasses
import os
import pathlib


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """One GLUE task: where its data is and what the paper reports of it."""

    name: str  # GLUE's spelling, its directory in glue_data
    tfds: str  # the TFDS config of glue/
    task_type: str  # a bertjax.finetune task type
    # reported, in order; the first is averaged, keeps each run's best checkpoint and
    # selects the learning rate
    metrics: tuple[str, ...]
    # the classes as GLUE's files spell them, in GLUE's numbering (TFDS's ClassLabel order);
    # None for STS-B's scores
    labels: tuple[str, ...] | None = ("0", "1")
    dev: tuple[str, ...] = ("dev",)  # dev files (stems) of the GLUE directory
    tfds_dev: tuple[str, ...] = ("validation",)
    headerless: bool = False  # CoLA's TSVs: source, label, original label, sentence
    averaged: bool = True  # part of the paper's GLUE average

    @property
    def main_metric(self) -> str:
        return self.metrics[0]


NLI = ("entailment", "not_entailment")
GLUE_TASKS = (
    GlueTask("CoLA", "cola", "classification", ("mcc",), headerless=True),
    GlueTask("SST-2", "sst2", "classification", ("accuracy",)),
    GlueTask("MRPC", "mrpc", "pair_classification", ("f1", "accuracy")),
    GlueTask("QQP", "qqp", "pair_classification", ("f1", "accuracy")),
    GlueTask("STS-B", "stsb", "regression", ("spearman", "pearson"), labels=None),
    GlueTask("MNLI", "mnli", "pair_classification", ("accuracy",),
             labels=("entailment", "neutral", "contradiction"),
             dev=("dev_matched", "dev_mismatched"),
             tfds_dev=("validation_matched", "validation_mismatched")),
    GlueTask("QNLI", "qnli", "pair_classification", ("accuracy",), labels=NLI),
    GlueTask("RTE", "rte", "pair_classification", ("accuracy",), labels=NLI),
    GlueTask("WNLI", "wnli", "pair_classification", ("accuracy",), averaged=False),
)
BY_NAME = {t.name.lower().replace("-", ""): t for t in GLUE_TASKS}
TFDS_NAMES = {t.tfds: t for t in GLUE_TASKS}


def named_glue_task(spec: str | os.PathLike) -> GlueTask | None:
    """The GLUE task whose data `spec` is: a file in GLUE's directory layout
    (glue_data/CoLA/dev.tsv) or a TFDS glue dataset (tfds:glue/cola[:SPLIT], MNLI's
    tfds:glue/mnli_matched); else None."""
    spec = os.fspath(spec)
    if spec.startswith("tfds:"):
        name = spec.split(":")[1]
        family, _, config = name.partition("/")
        if family != "glue":
            return None
        return TFDS_NAMES.get(config.split("_")[0] if config.startswith("mnli") else config)
    folder = pathlib.PurePath(spec).parent.name.lower().replace("-", "")
    return BY_NAME.get(folder)
