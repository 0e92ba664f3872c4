"""Downstream task data (the BERT, GPT and ELMo papers' fine-tuning tasks) as plain examples.

`read_task(spec, task_type)` reads a file or a prepared TFDS dataset into a list of frozen
examples, one type per kind of task; each family's encoder turns them into arrays. Nothing here
knows a model or jax, so one reader serves every family and tests compare examples with files.

    task_type                                        example
    classification       SST-2, CoLA, AG News          TextExample, one text, label a string
    pair_classification  MNLI, RTE, MRPC, QNLI, QQP    TextExample, two texts, label a string
    regression           STS-B                         TextExample, one or two texts, a float
    tagging              CoNLL-2003 NER                TaggedSentence (conll.py)
    qa                   SQuAD 1.1 / 2.0               QaExample (squad.py)
    multiple_choice      SWAG                          ChoiceExample

Labels stay strings (AG News labels are names such as "Sports"): the caller builds the label
vocabulary from the training examples, and `check_labels` refuses an eval file with a label
training never saw. Every bad input raises one `TaskDataError` line naming the file (and line)
and the fix. Tables (TSV, CSV, JSON lines) are read in tables.py; `spec` "tfds:NAME[:SPLIT]"
reads TFDS (labelled_tfds.py).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence

from bertjax import files
from bertjax.data.corpora import is_binary

TASK_TYPES = (
    "classification", "pair_classification", "regression", "tagging", "qa", "multiple_choice",
)  # fmt: skip


class TaskDataError(ValueError):
    """Task data that cannot be read; the one-line message names the file (line) and the fix."""


@dataclasses.dataclass(frozen=True)
class TextExample:
    """One or two texts with a class name (classification) or a number (regression).

    `label` is None only for unlabelled data (a test split).
    """

    id: str
    texts: tuple[str, ...]
    label: str | float | None


@dataclasses.dataclass(frozen=True)
class TaggedSentence:
    """A sentence's tokens and one tag per token (NER: IOB tags such as "B-PER")."""

    id: str
    tokens: tuple[str, ...]
    tags: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class QaExample:
    """An extractive question: answers are (text, character start in context) pairs.

    Every answer satisfies context[start:start + len(text)] == text; `impossible` marks a
    SQuAD 2.0 question the context cannot answer (its answers are empty).
    """

    id: str
    question: str
    context: str
    answers: tuple[tuple[str, int], ...]
    impossible: bool


@dataclasses.dataclass(frozen=True)
class ChoiceExample:
    """A context and its candidate endings; `label` is the index of the right one (or None).

    A model scores context + ending for each ending (BERT: sentence A, sentence B).
    """

    id: str
    context: str
    endings: tuple[str, ...]
    label: int | None


Example = TextExample | TaggedSentence | QaExample | ChoiceExample


def read_task(
    spec: str | os.PathLike,
    task_type: str,
    *,
    text_columns: Sequence[str] | None = None,
    label_column: str | None = None,
    split_hint: str = "train",
) -> list[Example]:
    """Examples of a task from a file or "tfds:NAME[:SPLIT]".

    Files: tagging reads CoNLL columns, qa SQuAD JSON, the other task types a table (TSV, CSV
    or JSON lines; tables.py documents the column detection that `text_columns` and
    `label_column` override; label_column="" reads a table without labels). `split_hint` is
    the split the data is: a "train" SQuAD file drops questions left without a valid answer,
    and a TFDS spec without a split reads this one.
    """
    if task_type not in TASK_TYPES:
        raise TaskDataError(f"task type {task_type!r} is not one of {TASK_TYPES}; fix the "
                            "fine-tuning task type")
    # The readers import the example types above, hence imported here rather than at the top.
    if str(spec).startswith("tfds:"):
        from bertjax.data import labelled_tfds

        return labelled_tfds.read_tfds(str(spec), task_type, text_columns=text_columns,
                                       label_column=label_column, split_hint=split_hint)
    from bertjax.data import conll, squad, tables

    path = files.as_path(spec)  # local or gs://
    text = read_text(path)
    if task_type == "tagging":
        examples = conll.read_conll(path, text)
    elif task_type == "qa":
        examples = squad.read_squad(path, text, training=split_hint == "train")
    else:
        examples = tables.read_table(path, text, task_type, text_columns, label_column)
    if not examples:
        raise TaskDataError(f"{path}: no examples in the file (is it empty?); point the task "
                            "data path at a file with data")
    return examples


def read_text(path: files.Path) -> str:
    """The text of a UTF-8 file (a byte-order mark dropped); one TaskDataError line otherwise."""
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "no such file"
        raise TaskDataError(f"{path}: {what}; fix the task data path")
    data = path.read_bytes()
    if is_binary(data):
        raise TaskDataError(f"{path} is a binary file, not text: point the task data path at "
                            "a TSV, CSV, JSON lines, SQuAD JSON or CoNLL file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise TaskDataError(f"{path}:{line}: not UTF-8 text; re-save the file as UTF-8") from None


def check_labels(
    train_examples: Iterable[Example], eval_examples: Iterable[Example], eval_spec: str
) -> list[str]:
    """The sorted label set of the training examples, checked to cover the eval examples.

    Labels are TextExample class names and TaggedSentence tags (regression numbers, QA and
    multiple choice have no label set). An eval label training never saw could never be
    predicted and would have no output unit, so it is refused, naming the label and file.
    """
    known = set(_labels(train_examples))
    unseen = sorted(set(_labels(eval_examples)) - known)
    if unseen:
        more = f" (and {len(unseen) - 1} more)" if len(unseen) > 1 else ""
        raise TaskDataError(f"{eval_spec}: label {unseen[0]!r}{more} never occurs in the "
                            "training data; fix the eval file or add training examples of it")
    return sorted(known)


def _labels(examples: Iterable[Example]) -> Iterable[str]:
    for example in examples:
        if isinstance(example, TaggedSentence):
            yield from example.tags
        elif isinstance(example, TextExample) and isinstance(example.label, str):
            yield example.label
