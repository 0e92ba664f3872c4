"""Tables of task examples: GLUE-style TSV, CSV and JSON lines, their columns found by name.

Formats, by extension (else by the first line: "{" JSON lines, a tab TSV, otherwise CSV):
- .tsv: tab-separated with a header row, NOT quoted (csv.QUOTE_NONE) as GLUE's files are, so
  a text may begin with `"`; a row must have as many fields as the header.
- .csv: comma-separated with a header row, quoted ("" escapes a quote inside a field).
- .jsonl / .json: one JSON object a line, its keys the columns (the first object's keys are
  the header). Non-string labels become their JSON spelling (2 -> "2", true -> "true").

Columns, unless `text_columns` / `label_column` name them (finetune.text_columns /
finetune.label_column), are found in the header among the well-known names below; none, or
more than one candidate, is an error naming the columns found and the setting to fix.
`label_column=""` reads a table without labels (label None). The id is the first ID_COLUMNS
column present, else the 0-based row index.

Multiple choice (SWAG): endings are the columns ending0, ending1, ... (or a JSON list
"endings"); the context is sent1 with sent2 starting every ending, as BERT's SWAG reader does,
else startphrase, else context; text_columns = (context, ending, ending, ...) overrides.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import pathlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from bertjax.finetune.examples import ChoiceExample, Reading, TaskDataError, TextExample

SINGLE_TEXT_COLUMNS = ("sentence", "text", "content", "review")  # SST-2, CoLA; AG News, IMDB
PAIR_TEXT_COLUMNS = (
    ("sentence1", "sentence2"),  # RTE, MNLI, STS-B, WNLI (GLUE TSVs); MRPC (GLUE/HF)
    ("#1 String", "#2 String"),  # MRPC as Microsoft published it
    ("question", "sentence"),  # QNLI
    ("question1", "question2"),  # QQP
    ("premise", "hypothesis"),  # SuperGLUE RTE/CB; MNLI and RTE in TFDS/HF
    ("question", "passage"),  # BoolQ
    ("text_a", "text_b"),  # google-research/bert's InputExample
)
LABEL_COLUMNS = ("label", "gold_label", "Quality", "score", "is_duplicate")  # MNLI gold_label,
# MRPC Quality, STS-B score, QQP is_duplicate
ID_COLUMNS = ("id", "idx", "index", "guid")
TEXT_SETTING, LABEL_SETTING = "finetune.text_columns", "finetune.label_column"
_ENDING = re.compile(r"ending(\d+)")

Row = Mapping[str, Any]


def read_file(
    path: pathlib.Path,
    text: str,
    reading: Reading,
    *,
    text_columns: Sequence[str] | None,
    label_column: str | None,
    training: bool,
) -> list[TextExample] | list[ChoiceExample]:
    """Text or choice examples of a table file's rows (its text already read)."""
    del training  # every row is kept
    columns, rows = table_rows(path, text)
    if not rows:
        return []
    return examples_from_rows(str(path), columns, rows, reading, text_columns, label_column)


def from_tfds(
    where: str,
    rows: Sequence[Row],
    reading: Reading,
    *,
    text_columns: Sequence[str] | None,
    label_column: str | None,
    training: bool,
) -> list[TextExample] | list[ChoiceExample]:
    """Examples of decoded TFDS rows (their features are the columns); TFDS's -1 label of an
    unlabelled test example reads as None."""
    del training
    if not rows:
        return []
    return examples_from_rows(where, list(rows[0]), [(f"#{i}", r) for i, r in enumerate(rows)],
                              reading, text_columns, label_column, unlabelled_ok=True)


def examples_from_rows(
    where: str,
    columns: Sequence[str],
    rows: Sequence[tuple[int | str, Row]],
    reading: Reading,
    text_columns: Sequence[str] | None,
    label_column: str | None,
    unlabelled_ok: bool = False,
) -> list[TextExample] | list[ChoiceExample]:
    """Examples of (line, row) pairs whose columns are `columns`; errors name where:line.

    unlabelled_ok: a label None is kept as None (TFDS test splits) instead of refused.
    """
    id_column = next((c for c in ID_COLUMNS if c in columns), None)
    label = _label_column(where, columns, label_column)
    if reading.choices:
        layout = _choice_layout(where, columns, text_columns)
        return [_choice_example(where, line, row, layout, label, unlabelled_ok,
                                _id(row, id_column, i)) for i, (line, row) in enumerate(rows)]
    texts = _text_columns(where, columns, reading, text_columns)
    if label in texts:
        raise TaskDataError(f"{where}: column {label!r} is both a text and the label; fix "
                            f"{TEXT_SETTING} or {LABEL_SETTING}")
    examples = [
        TextExample(
            id=_id(row, id_column, i),
            texts=tuple(_text(where, line, row, c) for c in texts),
            label=None if label is None else _label(where, line, row, label, reading,
                                                    unlabelled_ok),
        )
        for i, (line, row) in enumerate(rows)
    ]
    _check_label_kinds(where, label, [(line, ex.label) for (line, _), ex in
                                      zip(rows, examples, strict=True)])
    return examples


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_label_kinds(where: str, column: str | None,
                       labels: Sequence[tuple[int | str, object]]) -> None:
    """Class labels are all numbers (SST-2's 0/1) or all names (AG News' "Sports"): a column
    mixing both is a shifted column or a stray row, and would train a head with a class per
    spelling, so it is refused, naming the first label of the rarer kind."""
    names = [(line, label) for line, label in labels if isinstance(label, str)]
    numbers = [(line, label) for line, label in names if _is_number(label)]
    words = [(line, label) for line, label in names if not _is_number(label)]
    if numbers and words:
        rare, common = (numbers, words) if len(numbers) <= len(words) else (words, numbers)
        line, label = rare[0]
        raise TaskDataError(
            f"{where}:{line}: label {label!r} in column {column!r}, whose other labels are "
            f"{'names' if common is words else 'numbers'} such as {common[0][1]!r}: a label "
            f"column holds class names or class numbers, not both; fix that line or "
            f"{LABEL_SETTING}")


# ---------------------------------------------------------------- rows


def table_format(path: pathlib.Path, text: str) -> str:
    """ "tsv", "csv" or "jsonl": by the file's extension, else by its first non-blank line."""
    suffix = path.suffix.lower()
    if suffix in (".tsv", ".csv"):
        return suffix[1:]
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    first = next((line.strip() for line in text.split("\n") if line.strip()), "")
    return "jsonl" if first.startswith("{") else "tsv" if "\t" in first else "csv"


def table_rows(path: pathlib.Path, text: str) -> tuple[list[str], list[tuple[int, Row]]]:
    """The header (column names) and the (line number, row) pairs of a table file."""
    fmt = table_format(path, text)
    if fmt == "jsonl":
        return _json_lines(path, text)
    quoting = csv.QUOTE_NONE if fmt == "tsv" else csv.QUOTE_MINIMAL
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t" if fmt == "tsv" else ",",
                        quoting=quoting)
    header: list[str] | None = None
    rows: list[tuple[int, Row]] = []
    try:
        for fields in reader:
            if not any(field.strip() for field in fields):
                continue  # a blank line
            if header is None:
                header = [field.strip() for field in fields]
            elif len(fields) != len(header):
                hint = " (GLUE TSVs are not quoted: a tab inside a text splits it)" * (
                    fmt == "tsv")
                raise TaskDataError(f"{path}:{reader.line_num}: {len(fields)} fields where the "
                                    f"header has {len(header)}; fix that line{hint}")
            else:
                rows.append((reader.line_num, dict(zip(header, fields, strict=True))))
    except csv.Error as e:
        if fmt == "tsv":  # not quoted: only a field over csv's size limit fails
            raise TaskDataError(f"{path}:{reader.line_num}: a field of more than "
                                f"{csv.field_size_limit():,} characters, not a sentence or "
                                "passage: remove or split that line") from None
        raise TaskDataError(f"{path}:{reader.line_num}: {e}; fix the quoting on that line (a "
                            "CSV field with commas or quotes is quoted, quotes doubled; an "
                            "unclosed quote runs on to the end of the file)") from None
    return header or [], rows


def _json_lines(path: pathlib.Path, text: str) -> tuple[list[str], list[tuple[int, Row]]]:
    rows: list[tuple[int, Row]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise TaskDataError(f"{path}:{number}: invalid JSON ({e.msg}, column {e.colno}); "
                                "fix that line (JSON lines: one object a line)") from None
        if not isinstance(record, dict):
            raise TaskDataError(f"{path}:{number}: a JSON {type(record).__name__}, not an "
                                "object; fix that line (JSON lines: one object a line)")
        rows.append((number, record))
    return (list(rows[0][1]) if rows else []), rows


# ---------------------------------------------------------------- columns


def _text_columns(
    where: str, columns: Sequence[str], reading: Reading, configured: Sequence[str] | None
) -> tuple[str, ...]:
    allowed, task_type = reading.text_counts, reading.task
    if configured:
        _require(where, columns, configured, TEXT_SETTING)
        if len(configured) not in allowed:
            raise TaskDataError(f"{where}: {TEXT_SETTING} names {len(configured)} columns but "
                                f"{task_type} takes {' or '.join(map(str, allowed))}; fix it or "
                                "the task type")
        return tuple(configured)
    pairs = [p for p in PAIR_TEXT_COLUMNS if set(p) <= set(columns)]
    singles = [(c,) for c in SINGLE_TEXT_COLUMNS if c in columns]
    if allowed == (1,) and singles and pairs:  # e.g. QNLI's question, sentence
        raise TaskDataError(f"{where}: the header has the text pair {pairs[0]} as well as "
                            f"{singles[0][0]!r}; use pair_classification, or choose with "
                            f"{TEXT_SETTING}")
    found = (pairs if 2 in allowed else []) or (singles if 1 in allowed else [])
    if len(found) == 1:
        return found[0]
    if found:
        raise TaskDataError(f"{where}: text columns {found} all fit {task_type}; choose with "
                            f"{TEXT_SETTING}")
    known = [*(PAIR_TEXT_COLUMNS if 2 in allowed else ()),
             *(SINGLE_TEXT_COLUMNS if 1 in allowed else ())]
    raise TaskDataError(f"{where}: no text column for {task_type} among the columns "
                        f"{list(columns)} (known: {known}); name them with {TEXT_SETTING}")


def label_feature(where: str, columns: Sequence[str], configured: str | None) -> str | None:
    """The column the labels are read from (None: unlabelled), as `examples_from_rows` picks
    it; the TFDS reader takes that feature's class names as the label order."""
    return _label_column(where, columns, configured)


def _label_column(where: str, columns: Sequence[str], configured: str | None) -> str | None:
    if configured == "":
        return None  # unlabelled data
    if configured is not None:
        _require(where, columns, [configured], LABEL_SETTING)
        return configured
    found = [c for c in LABEL_COLUMNS if c in columns]
    if len(found) == 1:
        return found[0]
    if found:
        raise TaskDataError(f"{where}: label columns {found} all fit; choose with "
                            f"{LABEL_SETTING}")
    raise TaskDataError(f"{where}: no label column among the columns {list(columns)} (known: "
                        f"{list(LABEL_COLUMNS)}); set {LABEL_SETTING} (\"\" reads it unlabelled)")


def _require(where: str, columns: Sequence[str], wanted: Sequence[str], setting: str) -> None:
    missing = [c for c in wanted if c not in columns]
    if missing:
        raise TaskDataError(f"{where}: no column {missing[0]!r} among the columns "
                            f"{list(columns)}; fix {setting}")


@dataclasses.dataclass(frozen=True)
class _ChoiceLayout:
    context: str
    prefix: str | None  # a column that starts every ending (SWAG's sent2)
    endings: tuple[str, ...]  # columns, or ("endings",) holding a list


def _choice_layout(
    where: str, columns: Sequence[str], configured: Sequence[str] | None
) -> _ChoiceLayout:
    if configured:
        _require(where, columns, configured, TEXT_SETTING)
        if len(configured) < 3:
            raise TaskDataError(f"{where}: {TEXT_SETTING} for multiple_choice names the context "
                                "column then two or more ending columns; fix it")
        return _ChoiceLayout(configured[0], None, tuple(configured[1:]))
    numbered = sorted((int(m[1]), c) for c in columns if (m := _ENDING.fullmatch(c)))
    if len(numbered) >= 2:
        endings = tuple(c for _, c in numbered)
    elif "endings" in columns:
        endings = ("endings",)  # one field holding the list (TFDS hellaswag)
    else:
        raise TaskDataError(f"{where}: no ending0, ending1, ... columns among the columns "
                            f"{list(columns)}; name (context, endings...) with {TEXT_SETTING}")
    if "sent1" in columns and "sent2" in columns:
        return _ChoiceLayout("sent1", "sent2", endings)
    context = next((c for c in ("startphrase", "context") if c in columns), None)
    if context is None:
        raise TaskDataError(f"{where}: no context column (sent1+sent2, startphrase or context) "
                            f"among the columns {list(columns)}; name it with {TEXT_SETTING}")
    return _ChoiceLayout(context, None, endings)


# ---------------------------------------------------------------- values


def _id(row: Row, column: str | None, index: int) -> str:
    return str(index) if column is None else str(row.get(column, index))


def _text(where: str, line: int | str, row: Row, column: str) -> str:
    if column not in row:
        raise TaskDataError(f"{where}:{line}: no {column!r} field; fix that line")
    value = row[column]
    if not isinstance(value, str):
        raise TaskDataError(f"{where}:{line}: field {column!r} is a {type(value).__name__}, not "
                            f"text; fix that line or {TEXT_SETTING}")
    return value


def _label(
    where: str, line: int | str, row: Row, column: str, reading: Reading, unlabelled_ok: bool
) -> str | float | None:
    value = row.get(column)
    if value is None and unlabelled_ok:
        return None
    if value is None or value == "":
        raise _no_label(where, line, column)
    if not reading.numeric_label:
        return value if isinstance(value, str) else json.dumps(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TaskDataError(f"{where}:{line}: label {value!r} in column {column!r} is not a "
                            f"number, as {reading.task} needs; fix that line or {LABEL_SETTING}"
                            ) from None


def _choice_example(
    where: str,
    line: int | str,
    row: Row,
    layout: _ChoiceLayout,
    label: str | None,
    unlabelled_ok: bool,
    id_: str,
) -> ChoiceExample:
    if layout.endings == ("endings",):
        endings = row.get("endings")
        if not isinstance(endings, list) or not all(isinstance(e, str) for e in endings):
            raise TaskDataError(f"{where}:{line}: 'endings' is not a list of texts; fix that line")
    else:
        endings = [_text(where, line, row, c) for c in layout.endings]
    if layout.prefix is not None:
        prefix = _text(where, line, row, layout.prefix)
        endings = [f"{prefix} {ending}".strip() for ending in endings]
    value = None if label is None else row.get(label)
    if label is not None and value in (None, "") and not unlabelled_ok:
        raise _no_label(where, line, label)
    try:
        index = None if value is None else int(value)
    except (TypeError, ValueError):
        index = -1
    if unlabelled_ok and index is not None and index < 0:
        index = None  # TFDS marks an unlabelled example -1
    if index is not None and not 0 <= index < len(endings):
        raise TaskDataError(f"{where}:{line}: label {value!r} is not an ending index 0..."
                            f"{len(endings) - 1}; fix that line or {LABEL_SETTING}")
    return ChoiceExample(id_, _text(where, line, row, layout.context), tuple(endings), index)


def _no_label(where: str, line: int | str, column: str) -> TaskDataError:
    return TaskDataError(f"{where}:{line}: no {column!r} label; fix that line, or set "
                         f"{LABEL_SETTING}=\"\" to read the file unlabelled")
