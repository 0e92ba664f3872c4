"""The task types, one module each: every module in this package is imported, and its
`@register`ed `Task` subclasses become recipe task types (`finetune.task`). A new task type is
one new module here (and a gin recipe in configs/finetune/); see bertjax.finetune.task."""

import importlib
import os
import pkgutil
from collections.abc import Sequence

from bertjax.finetune.examples import Example, TaskDataError
from bertjax.finetune.task import TASKS, Task

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def get_task(name: str) -> Task:
    """The registered task type `name`; one line naming the known ones otherwise."""
    if name not in TASKS:
        raise TaskDataError(f"task type {name!r} is not one of {', '.join(sorted(TASKS))}: fix "
                            "finetune.task")
    return TASKS[name]


def read_task(spec: str | os.PathLike, name: str, *, text_columns: Sequence[str] | None = None,
              label_column: str | None = None, split_hint: str = "train") -> list[Example]:
    """The examples of task type `name` in a file or "tfds:NAME[:SPLIT]"."""
    return get_task(name).read(spec, text_columns=text_columns, label_column=label_column,
                               split_hint=split_hint)
