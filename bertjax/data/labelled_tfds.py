"""Prepared TFDS datasets as task examples: the "tfds:NAME[:SPLIT]" specs of `read_task`.

The feature names of the builders mapped here (tensorflow_datasets 4.9: its catalog pages and
the builders' FeaturesDict):

    glue/sst2, glue/cola           sentence, label (ClassLabel), idx
    glue/mrpc, rte, stsb, wnli     sentence1, sentence2, label (stsb: float32), idx
    glue/mnli / qnli / qqp         premise+hypothesis / question+sentence / question1+question2
    squad/v1.1, squad/v2.0         id, title, context, question, answers {text, answer_start};
                                   v2.0 adds is_impossible and plausible_answers
    conll2003                      tokens, ner, pos, chunks (sequences of ClassLabel)
    hellaswag                      context, endings, label (int32), activity_label, source_id

TFDS has no SWAG builder; hellaswag, SWAG's successor, is the multiple-choice one. Examples are
decoded to python (bytes to str, ClassLabel ints to their names, -1, TFDS's mark of an
unlabelled test example, to None) and then go through the same column detection (tables.py),
answer checks (squad.py) and example types as files, so a dataset read from TFDS and from its
files gives the same examples. (GLUE's stsb test split keeps TFDS's -1.0 placeholder scores.)
Datasets are never downloaded here: prepare them first with `tfds build` or a shared data_dir.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from bertjax.data import squad, tables
from bertjax.data.labelled import Example, TaggedSentence, TaskDataError

TOKEN_FEATURES = ("tokens", "words")
TAG_FEATURES = ("ner", "ner_tags", "tags")


def parse_spec(spec: str) -> tuple[str, str | None]:
    """("glue/sst2", "validation") of "tfds:glue/sst2:validation"; the split may be absent."""
    name, _, split = spec.removeprefix("tfds:").partition(":")
    if not name:
        raise TaskDataError(f"{spec!r} names no TFDS dataset; write tfds:NAME[:SPLIT]")
    return name, split or None


def read_tfds(
    spec: str,
    task_type: str,
    *,
    text_columns: Sequence[str] | None = None,
    label_column: str | None = None,
    split_hint: str = "train",
    data_dir: str | None = None,
) -> list[Example]:
    """Examples of a prepared TFDS split (the spec's split, else split_hint)."""
    name, split = parse_spec(spec)
    import tensorflow_datasets as tfds  # heavy: imported only when a TFDS spec is read

    split = split or split_hint
    try:
        with _quiet_tfds():
            dataset, info = tfds.load(name, split=split, data_dir=data_dir, download=False,
                                      with_info=True, shuffle_files=False)
    except (ValueError, AssertionError, OSError) as e:  # not found / not prepared / bad split
        reason = " ".join(str(e).split("\n")[0].split(". ")[0].split())[:200]
        raise TaskDataError(f"{spec}: TFDS dataset {name!r} split {split!r} cannot be read "
                            f"({reason}); fix the spec, or prepare it with `tfds build {name}`"
                            ) from None
    examples = examples_from_tfds(
        tfds.as_numpy(dataset), task_type, class_names(info.features),
        where=f"tfds:{name}:{split}", text_columns=text_columns, label_column=label_column,
        training=split.startswith("train"),
    )
    if not examples:
        raise TaskDataError(f"{spec}: split {split!r} has no examples; fix the spec's split")
    return examples


@contextlib.contextmanager
def _quiet_tfds() -> Iterator[None]:
    """Silences TFDS's own warnings (absl) while loading, so a missing dataset is one line."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def class_names(features: Mapping[str, Any]) -> dict[str, list[str]]:
    """{feature: class names} of a FeaturesDict's ClassLabel (and Sequence(ClassLabel))."""
    names = {}
    for key, feature in features.items():
        inner = getattr(feature, "feature", feature)  # Sequence(ClassLabel) -> ClassLabel
        if isinstance(getattr(inner, "names", None), list):
            names[key] = list(inner.names)
    return names


def decode_example(
    example: Mapping[str, Any], names: Mapping[str, Sequence[str]]
) -> dict[str, Any]:
    """A TFDS numpy example as python: str for bytes, lists for arrays, names for class ids."""
    return {key: _decode(value, names.get(key)) for key, value in example.items()}


def _decode(value: Any, names: Sequence[str] | None) -> Any:
    if isinstance(value, Mapping):
        return {key: _decode(v, None) for key, v in value.items()}
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        value = value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, list):
        return [_decode(v, names) for v in value]
    if names is not None and isinstance(value, int) and not isinstance(value, bool):
        return None if value < 0 else names[value]
    return value


def examples_from_tfds(
    examples: Iterable[Mapping[str, Any]],
    task_type: str,
    names: Mapping[str, Sequence[str]],
    *,
    where: str,
    text_columns: Sequence[str] | None = None,
    label_column: str | None = None,
    training: bool = False,
) -> list[Example]:
    """Task examples of TFDS numpy examples (as `tfds.as_numpy` yields them).

    names: class names of the ClassLabel features (`class_names(info.features)`).
    """
    rows = [decode_example(example, names) for example in examples]
    if task_type == "qa":
        return squad.qa_examples(where, squad.tfds_questions(rows), training)
    if task_type == "tagging":
        return _tagged_sentences(where, rows, text_columns, label_column)
    if not rows:
        return []
    return tables.examples_from_rows(where, list(rows[0]), [(f"#{i}", r) for i, r in
                                                            enumerate(rows)],
                                     task_type, text_columns, label_column, unlabelled_ok=True)


def _tagged_sentences(
    where: str,
    rows: Sequence[Mapping[str, Any]],
    text_columns: Sequence[str] | None,
    label_column: str | None,
) -> list[TaggedSentence]:
    if not rows:
        return []
    features = list(rows[0])
    token_key = _feature(where, features, text_columns[0] if text_columns else None,
                         TOKEN_FEATURES, tables.TEXT_SETTING)
    tag_key = _feature(where, features, label_column, TAG_FEATURES, tables.LABEL_SETTING)
    sentences = []
    for i, row in enumerate(rows):
        tokens, tags = row[token_key], row[tag_key]
        if len(tokens) != len(tags):
            raise TaskDataError(f"{where}:#{i}: {len(tokens)} tokens but {len(tags)} "
                                f"{tag_key!r} tags; fix {tables.LABEL_SETTING}")
        sentences.append(TaggedSentence(str(i), tuple(tokens), tuple(tags)))
    return sentences


def _feature(
    where: str, features: Sequence[str], configured: str | None, known: Sequence[str],
    setting: str,
) -> str:
    candidates = [configured] if configured else list(known)
    found = [f for f in candidates if f in features]
    if len(found) == 1:
        return found[0]
    raise TaskDataError(f"{where}: not one feature of {candidates} among the features "
                        f"{list(features)}; set {setting}")
