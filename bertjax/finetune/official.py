"""Fine-tuning results in the formats the tasks' official tools read.

SQuAD (written with the best evaluation, beside predictions.jsonl, by the spans output's
decoding: `squad_files`, bertjax.finetune.qa):

    predictions.json   {question id: answer text}, "" for no answer: what the official
                       evaluate-v1.1.py and evaluate-v2.0.py read as their prediction file
    null_odds.json     SQuAD 2.0 only: {question id: null score - best span score}, the file
                       evaluate-v2.0.py reads with --na-prob-file (as google-research/bert's
                       run_squad.py writes it); its best_f1_thresh then tunes the threshold

GLUE (`bertjax-finetune --predict=FILE`, for the task types that have submissions:
classification, pair classification, regression): the best checkpoint predicts an unlabelled file
(a GLUE test split) into WORKDIR/submission/NAME.tsv, `index<TAB>prediction` rows in the
file's order, NAME and the label spelling as the GLUE server expects them: the file name is
the task's (SST-2.tsv, MNLI-m.tsv, MNLI-mm.tsv, AX.tsv, ...), found from GLUE's directory
layout (glue_data/SST-2/test.tsv) or a TFDS name (tfds:glue/sst2:test), else the file's stem;
labels are 0/1 for CoLA, SST-2, MRPC, QQP and WNLI (TFDS's class names are mapped back),
entailment / not_entailment / neutral / contradiction as spelled for MNLI, QNLI, RTE and AX,
and STS-B scores are numbers with three decimals.
"""

import dataclasses
import logging
import os
import pathlib
import re
from collections.abc import Mapping, Sequence

from bertjax import files
from bertjax.files import write_text
from bertjax.finetune.evaluate import predict_arrays
from bertjax.finetune.examples import Example
from bertjax.finetune.qa import (  # noqa: F401 (this module's SQuAD part)
    SQUAD_NULL_ODDS,
    SQUAD_PREDICTIONS,
    squad_files,
)
from bertjax.finetune.setup import TaskSetup
from bertjax.finetune.task import TASKS, Task
from bertjax.training.checkpoint import restore_saved_params

SUBMISSION_DIR = "submission"
# GLUE's directory (glue_data/NAME) or TFDS config: its submission file name
_GLUE_NAMES = {
    "cola": "CoLA", "sst-2": "SST-2", "sst2": "SST-2", "mrpc": "MRPC", "qqp": "QQP",
    "sts-b": "STS-B", "stsb": "STS-B", "mnli": "MNLI", "qnli": "QNLI", "rte": "RTE",
    "wnli": "WNLI", "ax": "AX", "diagnostic": "AX",
    # TFDS's MNLI configs that hold one of the two evaluation sets (glue/mnli_mismatched:test)
    "mnli_matched": "MNLI-m", "mnli_mismatched": "MNLI-mm",
}
# TFDS's class names of the GLUE tasks whose submissions are 0/1
_BINARY = {
    "CoLA": ("unacceptable", "acceptable"), "SST-2": ("negative", "positive"),
    "MRPC": ("not_equivalent", "equivalent"), "QQP": ("not_duplicate", "duplicate"),
    "WNLI": ("not_entailment", "entailment"),
}


# ---------------------------------------------------------------- GLUE submissions


def submission_name(spec: str) -> str:
    """The GLUE submission file name (without .tsv) of a test file or TFDS spec."""
    if spec.startswith("tfds:"):
        _, name, *split = spec.split(":")
        config = name.rsplit("/", 1)[-1].lower()
        task = _GLUE_NAMES.get(config, config)
    else:
        path = pathlib.PurePosixPath(spec)  # its names only: GLUE's layout, local or gs://
        task = _GLUE_NAMES.get(path.parent.name.lower(), None)
        split = [path.stem]
        if task is None:
            return path.stem
    if task == "MNLI" and split and "mismatched" in split[0]:
        return "MNLI-mm"
    if task == "MNLI" and split and "matched" in split[0]:
        return "MNLI-m"
    return task


def read_unlabelled(specs: Sequence[str], task: Task,
                    text_columns: Sequence[str] | None = None,
                    label_column: str | None = None) -> dict[str, list[Example]]:
    """{submission name: examples} of the files to predict (of the run's `task`, with the
    recipe's finetune.text_columns and finetune.label_column), each read once and before
    training starts, so a bad file fails in one line before anything runs. An example keeps
    its label where its file has a label column: `warn_unseen_labels` reads them, the
    submissions never do."""
    if not specs:
        return {}
    if not task.submissions:
        kinds = ", ".join(name for name, t in TASKS.items() if t.submissions)
        raise ValueError(f"--predict writes GLUE submissions of {kinds}; this recipe's task "
                         f"type is {task.name}: drop --predict")
    named: dict[str, list[Example]] = {}
    for spec in specs:
        name = submission_name(spec)
        if name in named:
            raise ValueError(f"--predict={spec}: a second file for {name}.tsv: pass one file "
                             "per task")
        named[name] = task.read(spec, text_columns=text_columns, label_column=label_column,
                                split_hint="test", labels_optional=True)
    return named


def warn_unseen_labels(named: Mapping[str, list[Example]], labels: Sequence[str] | None
                       ) -> None:
    """One warning per file to predict (`read_unlabelled`'s) whose label column, when it has
    one, holds labels the model was never trained on: likely another task's file (AG News
    through an SST-2 model), whose submission would be written without a word."""
    if not labels:
        return
    for name, examples in named.items():
        found = [ex.label for ex in examples if getattr(ex, "label", None) is not None]
        unseen = sorted({str(label) for label in found} - {str(label) for label in labels})
        if unseen:
            count = sum(str(label) in unseen for label in found)
            logging.warning("--predict file of %s.tsv: %d of its %d rows have labels the model "
                            "was never trained on (%s): it predicts only %s; check that the "
                            "file is of this task", name, count, len(examples),
                            ", ".join(unseen[:5]), ", ".join(map(str, labels)))


def glue_label(name: str, prediction: str | float) -> str:
    """One prediction as the GLUE server expects it in NAME.tsv."""
    if isinstance(prediction, float):
        return f"{prediction:.3f}"
    if name in _BINARY and prediction in _BINARY[name]:
        return str(_BINARY[name].index(prediction))
    return str(prediction)


def submission_tsv(name: str, ids: Sequence[str], predictions: Sequence[str | float]) -> str:
    """The text of NAME.tsv: a header, then `index<TAB>prediction` per example."""
    rows = [f"{index}\t{glue_label(name, p)}" for index, p in zip(ids, predictions, strict=True)]
    return "\n".join(["index\tprediction", *rows]) + "\n"


def write_submissions(workdir: str | os.PathLike, named: Mapping[str, list[Example]],
                      setup: TaskSetup, batch_size: int) -> list[files.Path]:
    """Predict each file's examples with the run's best checkpoint and write
    WORKDIR/submission/NAME.tsv; the paths written. `setup` is the run's TaskSetup: its
    encoder, model and decoder, as the dev evaluation uses them."""
    if not named:
        return []
    params, _, _ = restore_saved_params(workdir)
    written = []
    for name, examples in named.items():
        examples = [dataclasses.replace(ex, label=None) if getattr(ex, "label", None)
                    is not None else ex for ex in examples]  # predicted, never read
        inputs, data = setup.encode_unlabelled(examples)
        outputs = predict_arrays(setup, params, inputs, batch_size)
        predictions, _ = setup.task.decode(outputs, data)
        path = files.as_path(workdir) / SUBMISSION_DIR / f"{_safe(name)}.tsv"
        write_text(path, submission_tsv(name, [ex.id for ex in examples], predictions))
        written.append(path)
    return written


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "predictions"
