"""Downstream work: fine-tuning (and feature-based task models) of pretrained BERT, GPT and
ELMo. `run(recipe, init, train, eval, workdir)` runs one recipe end to end (runner.py); a task
type is a `Task` (task.py, one module per type in tasks/), a family brings an `Adapter`
(adapter.py, one module per family in families/), readers/ reads task data by file format."""

from typing import Any


def __getattr__(name: str) -> Any:
    """`run` and `RunOutcome`, imported on first use: importing one module of this package
    (the task record, the readers) does not load the training loop and the converters."""
    if name in ("run", "RunOutcome"):
        from bertjax.finetune import runner

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
