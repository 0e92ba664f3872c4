"""Downstream task data read into examples (bertjax.finetune.examples), one reader per file
format, chosen by the task type's `Reading`:

    format   files                                              module
    table    GLUE TSV, CSV, JSON lines (text, pair, regression,  tables.py
             multiple choice)
    conll    CoNLL column files (tagging)                       conll.py
    squad    SQuAD 1.1 / 2.0 JSON (extractive QA)               squad.py

A spec "tfds:NAME[:SPLIT]" reads a prepared TFDS dataset instead (tfds.py), through the same
format's rules, so a dataset read from TFDS and from its files gives the same examples. Every
bad input raises one `TaskDataError` line naming the file (and line) and the fix.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from bertjax import files
from bertjax.data.corpora import is_binary
from bertjax.finetune.examples import Example, Reading, TaskDataError
from bertjax.finetune.readers import tfds
from bertjax.finetune.readers.formats import reader


def read(
    spec: str | os.PathLike,
    reading: Reading,
    *,
    text_columns: Sequence[str] | None = None,
    label_column: str | None = None,
    split_hint: str = "train",
    labels_optional: bool = False,
) -> list[Example]:
    """Examples of a task from a file or "tfds:NAME[:SPLIT]".

    `text_columns` and `label_column` override a table's column detection (tables.py;
    label_column="" reads a table without labels). `split_hint` is the split the data is: a
    "train" SQuAD file drops questions left without a valid answer, and a TFDS spec without a
    split reads this one. `labels_optional`: a file that may hold labels or not (a test split
    to predict), read once: with its labels where its label column reads, else unlabelled
    (label None), as label_column="" reads it.
    """
    def parse(label: str | None) -> list[Example]:
        if str(spec).startswith("tfds:"):
            return tfds.read_tfds(str(spec), reading, text_columns=text_columns,
                                  label_column=label, split_hint=split_hint)
        return reader(reading).read_file(path, text, reading, text_columns=text_columns,
                                         label_column=label, training=split_hint == "train")

    path = None if str(spec).startswith("tfds:") else files.as_path(spec)  # local or gs://
    text = "" if path is None else read_text(path)
    try:
        examples = parse(label_column)
    except TaskDataError:  # with labels_optional: no label column, an unlabelled file
        if not labels_optional:
            raise
        examples = parse("")
    return examples if path is None else _some(path, examples)


def _some(path: files.Path, examples: list[Example]) -> list[Example]:
    """`examples`, refused in one line when the file held none."""
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
