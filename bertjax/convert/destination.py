"""Where `bertjax-export` may write, and how its files get there (local or gs://).

An export never damages a run, nor anything else it did not write:

* `--out` may not be, contain or lie inside a bertjax workdir (a directory holding
  model.json, lease.json or checkpoints/), nor the checkpoint being read: replacing a run's
  files with exported ones, or a parent directory with an export, used to delete runs.
* `--overwrite` replaces export's own files (the names it writes) and leaves every other
  file in `--out` as it was.
* Exports that place their files at the same moment take turns (a lock on the local
  directory that holds --out) and each checks --out again first: the second of two exports
  to one new --out, without --overwrite, is refused rather than replacing the first one's
  files.
* The files are written whole into a staging directory first, then moved into place, so an
  export that fails (bad checkpoint, full disk, Ctrl-C) leaves `--out` as it was. Locally the
  staging directory lies beside `--out` (a rename, not a copy) and is named after the
  exporting process, so one left by an export killed with kill -9 is removed by the next
  export to the same place. On gs:// the files are staged in a local temporary directory and
  uploaded through the project's path layer (bertjax/files.py), each object whole.
"""

import contextlib
import errno
import fcntl
import os
import pathlib
import shutil
import tempfile
from collections.abc import Iterator, Sequence

from bertjax import files
from bertjax.training import workdir as workdir_lib

STAGING_SUFFIX = ".export-tmp"
_NO_SPACE = ("No space left", "Disk quota exceeded", "StorageFull")


class DestinationError(ValueError):
    """An --out export may not write to; the message names the fix."""


def check(out: files.Path, overwrite: bool, workdir: files.Path) -> None:
    """One line unless `out` is new, empty, or may be overwritten, and is no run's: neither
    the run `workdir` being read (nor in it, nor around it) nor any other."""
    workdir = files.absolute(workdir)
    if out.exists() and not out.is_dir():
        raise DestinationError(f"--out={out} is a file: pass a directory")
    if _within(out, workdir) or _within(workdir, out):
        where = ("is" if _parts(out) == _parts(workdir) else
                 "lies inside" if _within(out, workdir) else "holds")
        raise DestinationError(f"--out={out} {where} the run {workdir} that --checkpoint "
                               f"reads: export into a directory outside it, e.g. "
                               f"--out={workdir}-hf")
    run = next((d for d in _self_and_parents(out) if workdir_lib.is_workdir(d)), None)
    if run is not None:
        where = "is" if run == out else "lies inside"
        raise DestinationError(f"--out={out} {where} the bertjax run {run}: export never "
                               "writes into a run; pass a directory outside it")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not overwrite:
        raise DestinationError(f"--out={out} is not empty: pass a new directory, or "
                               "--overwrite to replace the files export writes there")
    run = find_workdir(out)
    if run is not None:
        raise DestinationError(f"--out={out} holds the bertjax run {run}: pass a directory "
                               "that holds no run")


def _within(path: files.Path, root: files.Path) -> bool:
    """True when `path` is `root` or lies under it."""
    parts, root_parts = _parts(path), _parts(root)
    return parts[:len(root_parts)] == root_parts


def _parts(path: files.Path) -> tuple[str, ...]:
    text = os.fspath(files.absolute(path)).rstrip("/")
    return tuple(p for p in text.split("/") if p)


def _self_and_parents(path: files.Path) -> Iterator[files.Path]:
    path = files.absolute(path)
    yield path
    for parent in path.parents:
        if files.is_remote(parent) and "/" not in os.fspath(parent).split("://", 1)[1]:
            return  # gs://bucket: no run is a bucket
        yield parent


def find_workdir(root: files.Path) -> files.Path | None:
    """A bertjax workdir at or under `root` (the first found), else None: one listing per
    directory, local or on object storage (files.walk), hidden folders skipped."""
    for directory, folders, names in files.walk(root):
        if workdir_lib.lists_workdir(names, folders):
            return directory
        folders[:] = [d for d in folders if not d.startswith(".")]
    return None


@contextlib.contextmanager
def staging(out: files.Path) -> Iterator[pathlib.Path]:
    """A private local directory to write the export into; removed at the end."""
    if files.is_remote(out):
        directory = pathlib.Path(tempfile.mkdtemp(prefix="bertjax-export-"))
    else:
        parent = pathlib.Path(files.absolute(out)).parent
        parent.mkdir(parents=True, exist_ok=True)
        remove_orphans(parent, out.name)
        directory = pathlib.Path(tempfile.mkdtemp(prefix=f".{out.name}.{files.writer_tag()}.",
                                                  suffix=STAGING_SUFFIX, dir=parent))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def remove_orphans(parent: pathlib.Path, name: str) -> None:
    """Remove staging directories of `name` left by exports that were killed: their names
    carry the exporting process (files.writer_tag)."""
    for orphan in parent.glob(f".{files.glob_escape(name)}.*{STAGING_SUFFIX}"):
        if files.orphaned(orphan.name[len(name) + 2:].split(".", 1)[0]):
            shutil.rmtree(orphan, ignore_errors=True)


@contextlib.contextmanager
def _placing(out: files.Path) -> Iterator[None]:
    """One export at a time places its files beside `out`: an exclusive lock on the local
    directory that holds it, held while the export checks `out` again and moves its files.
    Object stores have no locks; there the check is repeated just before the uploads."""
    if files.is_remote(out):
        yield
        return
    parent = pathlib.Path(files.absolute(out)).parent
    fd = os.open(parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def place(staged: pathlib.Path, out: files.Path, names: Sequence[str], overwrite: bool,
          workdir: files.Path) -> None:
    """Move the files `names` from `staged` into `out`, each replacing only its namesake,
    with the permissions new files get (the staging directory is private). `out` is checked
    again first (`check`), under a lock: another export may have filled a new `out` since
    this one checked it, and without --overwrite it must not be replaced."""
    with _placing(out):
        check(out, overwrite, workdir)
        _move(staged, out, names)


def _move(staged: pathlib.Path, out: files.Path, names: Sequence[str]) -> None:
    umask = os.umask(0)
    os.umask(umask)
    for name in names:
        (staged / name).chmod(0o666 & ~umask)
    if files.is_remote(out):
        for name in names:
            files.copy(staged / name, out / name)
        return
    target = pathlib.Path(files.absolute(out))
    if not target.exists():  # a new directory: all files at once, by one rename
        staged.chmod(0o777 & ~umask)
        staged.rename(target)
        return
    for name in names:
        os.replace(staged / name, target / name)
    files.fsync_directory(target)


def is_no_space(err: BaseException) -> bool:
    """True for a write that failed on a full disk or quota (OSError, or a library's error
    that only says so in its message, as safetensors' does)."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return any(sign in str(err) for sign in _NO_SPACE)
