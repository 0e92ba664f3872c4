"""Prepared TFDS datasets as task examples: the "tfds:NAME[:SPLIT]" specs of `readers.read`.

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
unlabelled test example, to None; the label feature's class names, in id order, go with them:
`Examples.label_order`) and then go through the same column detection (tables.py),
answer checks (squad.py), tag features (conll.py) and example types as files, so a dataset
read from TFDS and from its files gives the same examples. (GLUE's stsb test split keeps
TFDS's -1.0 placeholder scores.) Datasets are never downloaded here: prepare them first with
`tfds build` or a shared data_dir.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from bertjax.finetune.examples import Example, Examples, Reading, TaskDataError
from bertjax.finetune.readers.formats import reader


def parse_spec(spec: str) -> tuple[str, str | None]:
    """("glue/sst2", "validation") of "tfds:glue/sst2:validation"; the split may be absent."""
    name, _, split = spec.removeprefix("tfds:").partition(":")
    if not name:
        raise TaskDataError(f"{spec!r} names no TFDS dataset; write tfds:NAME[:SPLIT]")
    return name, split or None


def read_tfds(
    spec: str,
    reading: Reading,
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
        tfds.as_numpy(dataset), reading, class_names(info.features),
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
    reading: Reading,
    names: Mapping[str, Sequence[str]],
    *,
    where: str,
    text_columns: Sequence[str] | None = None,
    label_column: str | None = None,
    training: bool = False,
) -> list[Example]:
    """Task examples of TFDS numpy examples (as `tfds.as_numpy` yields them), read by the
    format reader of `reading`.

    names: class names of the ClassLabel features (`class_names(info.features)`).
    """
    rows = [decode_example(example, names) for example in examples]
    format_reader = reader(reading)
    found = format_reader.from_tfds(where, rows, reading, text_columns=text_columns,
                                    label_column=label_column, training=training)
    # the label order: the ClassLabel names of the feature the labels were read from, in
    # TFDS's id order (glue/mrpc: not_equivalent, equivalent), or None: no rows, or labels
    # that are not ClassLabel ids (a regression score, SQuAD's answers)
    find = getattr(format_reader, "label_feature", None)
    key = find(where, list(rows[0]), label_column) if find is not None and rows else None
    return Examples(found, tuple(names[key]) if key in names else None)
