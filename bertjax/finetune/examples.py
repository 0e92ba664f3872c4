"""Downstream examples (the BERT, GPT and ELMo papers' fine-tuning tasks) as plain values.

    example          task types                          data
    TextExample      classification, pair, regression    SST-2, CoLA, AG News; MNLI, MRPC; STS-B
    TaggedSentence   tagging                             CoNLL-2003 NER
    QaExample        extractive QA                       SQuAD 1.1 / 2.0
    ChoiceExample    multiple choice                     SWAG, HellaSwag

Nothing here knows a model, a file format or jax: readers (`bertjax.finetune.readers`) make
these from files and TFDS, each family's adapter encodes them, so one reader serves every
family and tests compare examples with files. Labels stay strings (AG News labels are names
such as "Sports"); a task type builds its label vocabulary from the training examples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence


class TaskDataError(ValueError):
    """Task data that cannot be read or used; the one-line message names the file (line) and
    the fix."""


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
    """A sentence's tokens and one tag per token (NER: IOB tags such as "B-PER"). `document`
    numbers the document the sentence belongs to (CoNLL's -DOCSTART- lines), in file order;
    None where the data marks no documents (a file without -DOCSTART-, TFDS's conll2003)."""

    id: str
    tokens: tuple[str, ...]
    tags: tuple[str, ...]
    document: int | None = None


@dataclasses.dataclass(frozen=True)
class QaExample:
    """An extractive question: answers are (text, character start in context) pairs.

    Every answer satisfies context[start:start + len(text)] == text: the spans a model trains
    on; `impossible` marks a SQuAD 2.0 question the context cannot answer (its answers are
    empty). `references`: every answer text the data gives, an answer whose start does not
    point at its text included: what scoring compares against, as the official SQuAD scripts
    read the answers' texts and never their starts (empty: the answers' texts).
    """

    id: str
    question: str
    context: str
    answers: tuple[tuple[str, int], ...]
    impossible: bool
    references: tuple[str, ...] = ()

    @property
    def gold_texts(self) -> tuple[str, ...]:
        """The answer texts a prediction is scored against."""
        return self.references or tuple(text for text, _ in self.answers)


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


class Examples(list):
    """The examples of one source, with the class names the source numbers (TFDS's ClassLabel
    names, in id order) when it declares them, so label i means the dataset's class i end to
    end: in the head's outputs, the metrics and an exported model's id2label. A plain list
    otherwise; `label_order` None when the source has no numbering (a file of names)."""

    def __init__(self, examples: Iterable[Example] = (),
                 label_order: Sequence[str] | None = None) -> None:
        super().__init__(examples)
        self.label_order = tuple(label_order) if label_order is not None else None


@dataclasses.dataclass(frozen=True)
class Reading:
    """How a task type's examples are read: the reader of its file format and, for tables,
    the layout of their columns (see readers/tables.py)."""

    format: str  # "table", "conll" or "squad": a reader in bertjax.finetune.readers
    task: str  # the task type's name, for messages
    text_counts: tuple[int, ...] = ()  # table: how many text columns an example may have
    numeric_label: bool = False  # table: the label is a number (regression), not a class
    choices: bool = False  # table: a context and its endings (multiple choice)
