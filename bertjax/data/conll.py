"""CoNLL column files (CoNLL-2003 NER and the like) as tagged sentences.

One token a line, its fields separated by spaces or tabs: the token first, the tag last (the
CoNLL-2003 layout is `token POS chunk NER`, so the tag is the NER tag); a blank line ends a
sentence and `-DOCSTART-` lines, which mark documents, are skipped. Every line has as many
fields as the file's first sentence: a line that does not is one error naming path:line, since
a shifted column would silently turn a POS or chunk tag into the NER label.
"""

from __future__ import annotations

import pathlib

from bertjax.data.labelled import TaggedSentence, TaskDataError


def read_conll(path: pathlib.Path, text: str) -> list[TaggedSentence]:
    """The sentences of a CoNLL file's text, ids their 0-based order."""
    sentences: list[TaggedSentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    width = None  # the number of fields in the file's first sentence

    def end_sentence() -> None:
        if tokens:
            sentences.append(TaggedSentence(str(len(sentences)), tuple(tokens), tuple(tags)))
            tokens.clear()
            tags.clear()

    for number, line in enumerate(text.split("\n"), start=1):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            end_sentence()
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
    return sentences
