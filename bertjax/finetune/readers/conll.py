"""CoNLL column files (CoNLL-2003 NER and the like) as tagged sentences.

One token a line, its fields separated by spaces or tabs: the token first, the tag last (the
CoNLL-2003 layout is `token POS chunk NER`, so the tag is the NER tag); a blank line ends a
sentence and `-DOCSTART-` lines start a new document (each sentence records its document's
number, for models that read a sentence in its document's context; a file without any
-DOCSTART- line marks no documents, and its sentences' document is None). Every line has as many
fields as the file's first sentence: a line that does not is one error naming path:line, since
a shifted column would silently turn a POS or chunk tag into the NER label.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from bertjax.finetune.examples import Reading, TaggedSentence, TaskDataError

TOKEN_FEATURES = ("tokens", "words")  # TFDS conll2003 and the like
TAG_FEATURES = ("ner", "ner_tags", "tags")
TEXT_SETTING, LABEL_SETTING = "finetune.text_columns", "finetune.label_column"


def read_file(path: pathlib.Path, text: str, reading: Reading, *,
              text_columns: Sequence[str] | None, label_column: str | None,
              training: bool) -> list[TaggedSentence]:
    """The sentences of a CoNLL file's text (the columns settings do not apply)."""
    del reading, text_columns, label_column, training
    return read_conll(path, text)


def read_conll(path: pathlib.Path, text: str) -> list[TaggedSentence]:
    """The sentences of a CoNLL file's text, ids their 0-based order."""
    sentences: list[TaggedSentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    width = None  # the number of fields in the file's first sentence
    document, marked = 0, False  # marked: the file has -DOCSTART- lines

    def end_sentence() -> None:
        if tokens:
            sentences.append(TaggedSentence(str(len(sentences)), tuple(tokens), tuple(tags),
                                            document))
            tokens.clear()
            tags.clear()

    for number, line in enumerate(text.split("\n"), start=1):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            end_sentence()
            marked = marked or bool(fields)
            if fields and sentences:
                document += 1
            continue
        if width is None:
            width = len(fields)
            if width < 2:
                raise TaskDataError(f"{path}:{number}: one field where CoNLL has the token "
                                    "first and the tag last; point the tagging task at a "
                                    "CoNLL file")
        elif len(fields) != width:
            raise TaskDataError(f"{path}:{number}: {len(fields)} fields where the file's first "
                                f"sentence has {width} (token first, tag last); fix that line")
        tokens.append(fields[0])
        tags.append(fields[-1])
    end_sentence()
    if not marked:  # no -DOCSTART- line: the file says nothing of documents
        return [dataclasses.replace(sentence, document=None) for sentence in sentences]
    return sentences


def from_tfds(where: str, rows: Sequence[Mapping[str, Any]], reading: Reading, *,
              text_columns: Sequence[str] | None, label_column: str | None,
              training: bool) -> list[TaggedSentence]:
    """Tagged sentences of decoded TFDS rows: a token feature and a tag feature (found by
    name, or named by text_columns[0] / label_column). TFDS keeps no document boundaries."""
    del reading, training
    if not rows:
        return []
    features = list(rows[0])
    token_key = _feature(where, features, text_columns[0] if text_columns else None,
                         TOKEN_FEATURES, TEXT_SETTING)
    tag_key = _feature(where, features, label_column, TAG_FEATURES, LABEL_SETTING)
    sentences = []
    for i, row in enumerate(rows):
        tokens, tags = row[token_key], row[tag_key]
        if len(tokens) != len(tags):
            raise TaskDataError(f"{where}:#{i}: {len(tokens)} tokens but {len(tags)} "
                                f"{tag_key!r} tags; fix {LABEL_SETTING}")
        sentences.append(TaggedSentence(str(i), tuple(tokens), tuple(tags)))
    return sentences


def label_feature(where: str, features: Sequence[str], configured: str | None) -> str:
    """The tag feature of TFDS rows, as `from_tfds` picks it (its class names are the label
    order: conll2003's ner is O, B-PER, I-PER, ...)."""
    return _feature(where, features, configured, TAG_FEATURES, LABEL_SETTING)


def _feature(where: str, features: Sequence[str], configured: str | None,
             known: Sequence[str], setting: str) -> str:
    candidates = [configured] if configured else list(known)
    found = [f for f in candidates if f in features]
    if len(found) == 1:
        return found[0]
    raise TaskDataError(f"{where}: not one feature of {candidates} among the features "
                        f"{list(features)}; set {setting}")
