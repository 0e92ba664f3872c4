"""A new run stopped before its first step leaves no half-made workdir behind.

Ctrl-C or SIGTERM while a run prepares its data, restores or compiles its first step raises
`preemption.Interrupted` (there is nothing to save yet). By then a new run may have written
model.json, its tokenizer files, task.json, metrics.jsonl, TensorBoard events and an empty
checkpoints/: a workdir that looks like a run but holds none, which docs/faults.md promises
not to leave. `discard_if_interrupted(workdir)` removes what was created inside the block when
it ends so, in a run that had no checkpoint when the block began; a resumed run's files are its
own and are left alone, as is everything that was there before. The workdir itself goes with
its lease (training/lease.py), which removes a workdir it created once it is empty.
"""

import contextlib
import logging
import os
from collections.abc import Iterator

import jax

from bertjax.files import Path, absolute
from bertjax.training import preemption
from bertjax.training import workdir as workdir_lib


def _entries(workdir: Path) -> set[str]:
    return {p.name for p in workdir.iterdir()} if workdir.is_dir() else set()


@contextlib.contextmanager
def discard_if_interrupted(workdir: str | os.PathLike) -> Iterator[None]:
    """Within the block, a new run (no checkpoint yet) that is interrupted before training
    started leaves `workdir` as the block found it (process 0 removes what it wrote)."""
    path = absolute(workdir)
    if jax.process_index() != 0:
        yield
        return
    new_run = workdir_lib.latest_checkpoint(path) is None
    before = _entries(path)
    try:
        yield
    except preemption.Interrupted:
        if new_run:
            _remove_new(path, before)
        raise


def _remove_new(workdir: Path, before: set[str]) -> None:
    for name in sorted(_entries(workdir) - before):
        entry = workdir / name
        try:
            entry.rmtree() if entry.is_dir() else entry.unlink()
        except OSError as err:  # what cannot be removed stays; the run still ends
            logging.warning("%s: could not remove %s (%s)", workdir, entry, err)
