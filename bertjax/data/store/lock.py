"""One build at a time per store directory: DIR/.build.lock holds the builder's PID and start
time (`bertjax.files.writer_tag`); the lock of a builder that has ended is taken over."""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import Iterator

from bertjax import files
from bertjax.data.store.format import LOCK, StoreError


@contextlib.contextmanager
def build_lock(out: pathlib.Path) -> Iterator[None]:
    """Hold DIR/.build.lock for the block; one line if a live process holds it."""
    lock = out / LOCK
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            break
        except FileExistsError:
            holder = lock.read_text().strip() if lock.exists() else ""
            if holder and not files.orphaned(holder):
                raise StoreError(f"{out} is being built by another bertjax-prepare (process "
                                 f"{holder.split('-')[0]}, {lock}): wait for it to finish, or "
                                 "use another --out") from None
            lock.unlink(missing_ok=True)  # its builder has ended
    else:
        raise StoreError(f"cannot take the build lock {lock}: remove it if no build runs")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(files.writer_tag())
        yield
    finally:
        lock.unlink(missing_ok=True)
