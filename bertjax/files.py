"""Files written whole or not at all: into a temporary file beside the target, then renamed
over it, so a crash or a full disk never leaves a half-written vocabulary, record or output."""

import contextlib
import os
import pathlib
import tempfile
from collections.abc import Iterator
from typing import IO


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """An open temporary file that replaces `path` when the block ends without an error."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    text = {} if "b" in mode else {"encoding": "utf-8", "newline": "\n"}
    try:
        with os.fdopen(fd, mode, **text) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8, \\n line ends) to `path` atomically."""
    with atomic_file(path) as f:
        f.write(text)
