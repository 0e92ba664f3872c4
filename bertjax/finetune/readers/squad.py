"""SQuAD JSON (v1.1 and v2.0) as extractive-QA examples.

Layout: {"data": [{"paragraphs": [{"context", "qas": [{"id", "question", "answers":
[{"text", "answer_start"}], "is_impossible" (v2.0 only)}]}]}]}. An answer whose answer_start
does not point at its text in the context would teach a wrong span, so it is no training
span; in training data a question left with no span (and not impossible) is skipped too. Its
text stays a reference that predictions are scored against, as the official evaluation
scripts compare texts and never read answer_start. One warning counts these answers.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from absl import logging

from bertjax.finetune.examples import QaExample, Reading, TaskDataError


def read_file(path: pathlib.Path, text: str, reading: Reading, *,
              text_columns: Sequence[str] | None, label_column: str | None,
              training: bool) -> list[QaExample]:
    """The questions of a SQuAD file (the columns settings do not apply)."""
    del reading, text_columns, label_column
    return read_squad(path, text, training)


def from_tfds(where: str, rows: Sequence[Mapping[str, Any]], reading: Reading, *,
              text_columns: Sequence[str] | None, label_column: str | None,
              training: bool) -> list[QaExample]:
    """The questions of decoded TFDS squad rows."""
    del reading, text_columns, label_column
    return qa_examples(where, tfds_questions(rows), training)


def read_squad(path: pathlib.Path, text: str, training: bool) -> list[QaExample]:
    """The questions of a SQuAD file's text, in file order."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise TaskDataError(f"{path}:{e.lineno}: invalid JSON ({e.msg}); fix the file, or "
                            "point the qa task at a SQuAD JSON file") from None
    articles = data.get("data") if isinstance(data, dict) else None
    if not isinstance(articles, list):
        raise TaskDataError(f"{path}: not SQuAD JSON (no top-level \"data\" list of "
                            "articles); point the qa task at a SQuAD v1.1/v2.0 file")
    try:
        questions = [
            (qa["id"], qa["question"], paragraph["context"],
             [(a["text"], a["answer_start"]) for a in qa.get("answers", [])],
             qa.get("is_impossible", False))
            for article in articles for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]
        ]
    except (KeyError, TypeError) as e:
        what = f"no {e} entry" if isinstance(e, KeyError) else "an entry of the wrong type"
        raise TaskDataError(f"{path}: not SQuAD JSON ({what}); point the qa task at a SQuAD "
                            "v1.1/v2.0 file") from None
    return qa_examples(str(path), questions, training)


Question = tuple[str, str, str, Sequence[tuple[str, int]], bool]


def qa_examples(where: str, questions: Iterable[Question], training: bool) -> list[QaExample]:
    """Examples of (id, question, context, answers, impossible): the answers that point at
    their text as spans, every answer's text as a reference.

    Shared by SQuAD files and TFDS, so both treat (and count) the same answers alike.
    """
    examples, bad_answers, dropped = [], 0, 0
    for id_, question, context, answers, impossible in questions:
        kept = tuple((text, start) for text, start in answers if _matches(context, text, start))
        references = tuple(text for text, _ in answers if isinstance(text, str))
        bad_answers += len(answers) - len(kept)
        if training and not kept and not impossible:
            dropped += 1
            continue
        examples.append(QaExample(str(id_), question, context, kept, bool(impossible),
                                  references))
    if bad_answers or dropped:
        also = f"; so were {dropped} training questions left with no answer" if dropped else ""
        logging.warning("%s: %d answers whose answer_start does not match their text were "
                        "skipped as spans (their texts still score predictions)%s", where,
                        bad_answers, also)
    return examples


def _matches(context: str, text: object, start: object) -> bool:
    return (isinstance(text, str) and isinstance(start, int) and not isinstance(start, bool)
            and 0 <= start and context[start : start + len(text)] == text and text != "")


def tfds_questions(examples: Iterable[Mapping[str, Any]]) -> Iterable[Question]:
    """(id, question, context, answers, impossible) of decoded TFDS squad examples."""
    for example in examples:
        answers = example.get("answers") or {}
        yield (example["id"], example["question"], example["context"],
               list(zip(answers.get("text", []), answers.get("answer_start", []), strict=True)),
               example.get("is_impossible", False))
