"""The file-format readers by name. Each reads a file's text (`read_file`) and decoded TFDS
rows (`from_tfds`) into examples, with the same checks for both."""

from types import ModuleType

from bertjax.finetune.examples import Reading, TaskDataError
from bertjax.finetune.readers import conll, squad, tables

FORMATS: dict[str, ModuleType] = {"table": tables, "conll": conll, "squad": squad}


def reader(reading: Reading) -> ModuleType:
    """The reader module of `reading.format`."""
    if reading.format not in FORMATS:
        raise TaskDataError(f"task type {reading.task!r} reads format {reading.format!r}, which "
                            f"has no reader: use one of {', '.join(FORMATS)}")
    return FORMATS[reading.format]
