"""Where bertjax reads and writes run files: local paths and `gs://` objects through one path
type, `etils.epath.Path` (orbax takes it too), and writes that are whole or absent.

    as_path("gs://bucket/run") / "model.json"    a path; unknown schemes are one line
    write_text(path, text)                        replaced whole, readable as the umask says
    AppendFile(path)                              metrics.jsonl, TensorBoard events
    local_copy(path)                              a local file to hand to code that needs one

Local writes go into a temporary file beside the target, which takes the umask's mode (or the
mode of the file it replaces) and is flushed to disk before it is renamed over the target, so a
crash, a full disk or a power cut never leaves a half-written vocabulary, record or output, and
a shared workdir stays readable by its group. An object store writes an object whole when its
upload completes, so there the object is written directly, once its bytes are all known.

`gs://` goes through gcsfs (fsspec), never through TensorFlow: the core of bertjax does not
import it, and gcsfs and tensorstore honour the documented emulator endpoints
(STORAGE_EMULATOR_HOST, TENSORSTORE_GCS_HTTP_URL), which `tf.io.gfile` does not.
"""

import atexit
import contextlib
import errno
import functools
import io
import logging
import os
import pathlib
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import IO

from etils import epath
from etils.epath import gpath


class _NoLibraryTracebacks(logging.Filter):
    """gcsfs logs a request that ran out of retries with its whole traceback (about 50 lines
    on the terminal) and then raises it, and warns that it cannot probe a bucket's type
    whenever the bucket cannot be reached; bertjax reports the error that follows in one
    line, so those records are dropped. Its other records (debug, warnings) pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.levelno >= logging.ERROR:
            return False
        return not record.getMessage().startswith("Could not determine bucket type")


FALSE = ("false", "no", "f", "0")  # the EPATH_USE_TF values etils reads as false


def _prepare_object_store() -> None:
    """Settings for the object-store libraries, made whenever a gs:// path is made (code that
    never touches gs:// gets none of them; an explicit environment variable always wins):

    * etils reads gs:// through fsspec's gcsfs, not TensorFlow's gfile, which ignores the
      documented emulator endpoints (EPATH_USE_TF=false). etils decides once per process, at
      the first gs:// operation of any library, and keeps its decision: TFDS probing its own
      bucket before bertjax's first gs:// path, with the variable not yet set, fixed gfile for
      every later path. A decision for gfile that the variable now refuses is dropped, so the
      next operation decides again.
    * Under an emulator (STORAGE_EMULATOR_HOST) gcsfs does not probe each bucket's layout over
      gRPC, which emulators do not serve (a minute of retries per bucket; read when gcsfs is
      imported, on first gs:// use).
    * gcsfs's tracebacks are dropped (_NoLibraryTracebacks)."""
    os.environ.setdefault("EPATH_USE_TF", "false")
    decided = getattr(gpath, "_is_tf_installed", None)  # etils' private cache, if it has one
    if (hasattr(decided, "cache_clear") and os.environ["EPATH_USE_TF"].lower() in FALSE
            and decided()):
        decided.cache_clear()
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    gcsfs_logger = logging.getLogger("gcsfs")
    if not any(isinstance(f, _NoLibraryTracebacks) for f in gcsfs_logger.filters):
        gcsfs_logger.addFilter(_NoLibraryTracebacks())


Path = epath.Path
OBJECT_STORES = ("gs",)  # the URI schemes bertjax reads and writes
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


class StorageError(ValueError):
    """A path bertjax cannot use (an unsupported scheme); the message names the fix."""


def scheme(path: str | os.PathLike) -> str | None:
    """"gs" for gs://..., None for a local path."""
    match = _SCHEME.match(os.fspath(path))
    return match.group(1).lower() if match else None


def as_path(path: str | os.PathLike) -> Path:
    """`path` as a local or object-store path; one line for a scheme bertjax cannot write."""
    if isinstance(path, Path):
        return path
    text = os.fspath(path)
    found = scheme(text)
    if found is not None and found not in OBJECT_STORES:
        raise StorageError(f"{text}: {found}:// paths are not supported: use a local path or "
                           f"{', '.join(f'{s}://BUCKET/PATH' for s in OBJECT_STORES)}")
    if found is not None:
        _prepare_object_store()
    return Path(text)


def is_remote(path: str | os.PathLike) -> bool:
    """True for an object-store path (gs://)."""
    return scheme(os.fspath(path)) is not None


def absolute(path: str | os.PathLike) -> Path:
    """An absolute local path, or the object-store path as it is."""
    path = as_path(path)
    return path if is_remote(path) else Path(os.path.abspath(path))


def walk(root: str | os.PathLike) -> Iterator[tuple[Path, list[str], list[str]]]:
    """(directory, its folders, its files) for `root` and every directory under it, top down,
    local or on object storage, one listing per directory; prune the walk by editing the
    folder list in place (as os.walk). etils' own walk yields object-store directories
    without their scheme (bucket/dir, a local path); these keep it."""
    root = as_path(root)
    if not is_remote(root):
        for directory, folders, names in os.walk(root):
            yield Path(directory), folders, names
        return
    top = os.fspath(root).split("://", 1)[1].rstrip("/")
    for directory, folders, names in root.walk():
        below = os.fspath(directory)[len(top):].strip("/")
        yield (root / below if below else root), folders, names


def filesystem(path: str | os.PathLike):  # noqa: ANN201 - an fsspec filesystem
    """The fsspec filesystem behind an object-store path, the very instance epath uses (for
    what paths do not offer: create-only writes, dropping cached listings)."""
    from etils.epath import backend

    return backend.fsspec_backend.fs(os.fspath(path))


def _umask() -> int:
    """The process's umask (read without changing it where /proc allows)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode(path: str | os.PathLike) -> int:
    """The mode a file written at `path` gets: the mode of the file it replaces, else what
    open() would give a new file (0666 less the umask)."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        return 0o666 & ~_umask()


def fsync_directory(directory: str | os.PathLike) -> None:
    """Make a rename in `directory` survive a power cut (where the platform allows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """An open file whose contents replace `path` when the block ends without an error.

    Local: a temporary file beside `path` (mode of the umask or of the replaced file), flushed
    to disk, then renamed over it. Object store: the bytes are kept and uploaded at the end.
    """
    path = as_path(path)
    text = {} if "b" in mode else {"encoding": "utf-8", "newline": "\n"}
    if is_remote(path):
        buffer = io.BytesIO()
        handle = buffer if "b" in mode else io.TextIOWrapper(buffer, **text)
        yield handle
        handle.flush()
        with reaching(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(buffer.getvalue())
        return
    target = pathlib.Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_orphans(target)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.{writer_tag()}.",
                               suffix=".tmp")
    try:
        os.fchmod(fd, new_file_mode(target))
        with naming(target), os.fdopen(fd, mode, **text) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        fsync_directory(target.parent)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def _remove_orphans(target: pathlib.Path) -> None:
    """Delete temporary files of `target` left by processes that were killed (kill -9)
    before they could clean up: their names carry the writer (`writer_tag`)."""
    for orphan in target.parent.glob(f".{glob_escape(target.name)}.*.tmp"):
        if orphaned(orphan.name[len(target.name) + 2:].split(".", 1)[0]):
            orphan.unlink(missing_ok=True)


def glob_escape(name: str) -> str:
    """`name` with glob's special characters made literal."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def process_start(pid: int) -> str | None:
    """When process `pid` started (clock ticks after boot, from /proc), None if it is gone:
    a PID the kernel gave to another process since tells apart by it."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]  # a zombie has ended


def process_alive(pid: int, started: str | None = None) -> bool:
    """True when process `pid` of this host runs and, given when it `started`, is that one
    (not a later process with the same PID)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    now = process_start(pid)
    if now is None:
        return not os.path.isdir("/proc")  # no /proc (not Linux): alive as far as we know
    return started is None or now == started


def writer_tag() -> str:
    """This process as a temporary file's or folder's name carries it: PID-START."""
    return f"{os.getpid()}-{process_start(os.getpid()) or 0}"


def orphaned(tag: str) -> bool:
    """True when the writer a `writer_tag` names (or a bare PID, as older names carry) has
    ended: what it left behind is an orphan."""
    pid, _, started = tag.partition("-")
    if not pid.isdigit() or int(pid) == os.getpid():
        return False
    return not process_alive(int(pid), started if started not in ("", "0") else None)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8, \\n line ends) to `path` atomically."""
    with atomic_file(path) as f:
        f.write(text)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    with atomic_file(path, "wb") as f:
        f.write(data)


def copy(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Copy a file between any two places (local or object store), atomically at `target`."""
    write_bytes(target, as_path(source).read_bytes())


@contextlib.contextmanager
def reaching(path: str | os.PathLike) -> Iterator[None]:
    """Network errors of an object-store write in the block as one OSError naming `path`
    (gcsfs raises the client's own, which names only the host)."""
    try:
        yield
    except OSError as err:
        if isinstance(err, FileNotFoundError | PermissionError) or err.filename is not None:
            raise
        raise unreachable(path, err) from None


def unreachable(path: str | os.PathLike, err: BaseException) -> OSError:
    """`path` on object storage could not be reached, in one line naming it."""
    detail = " ".join(str(err).split())[:200] or type(err).__name__
    return OSError(f"{path} cannot be reached ({detail}): check the network, the bucket name "
                   "and the credentials")


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def is_no_space(err: BaseException) -> bool:
    """True for an OSError of a full disk or an exhausted quota."""
    return isinstance(err, OSError) and err.errno in NO_SPACE


@contextlib.contextmanager
def naming(path: str | os.PathLike) -> Iterator[None]:
    """OSErrors raised in the block name `path` when they name no file themselves (a write or
    fsync on an open file reports only '[Errno 28] No space left on device')."""
    try:
        yield
    except OSError as err:
        if err.filename is not None or err.errno is None:
            raise
        raise OSError(err.errno, err.strerror, os.fspath(path)) from None


def on_full_directory(err: OSError, directory: str | os.PathLike) -> OSError:
    """A full-disk error that names no file (a write from a library, a buffered file closed
    late), named after `directory` (shown as `directory/`) when that directory's own disk is
    the full one (under 1 MiB free); otherwise as it was, rather than blame the wrong disk."""
    if err.filename is not None or not is_no_space(err) or is_remote(directory):
        return err
    with contextlib.suppress(OSError):
        if shutil.disk_usage(directory).free < 2**20:
            return OSError(err.errno, err.strerror, os.path.join(os.fspath(directory), ""))
    return err


def no_space_message(err: OSError, need: str = "", fix: str = "use a larger disk") -> str:
    """One line for a full disk: the file, the space left there, what is needed (`need`,
    e.g. "a checkpoint takes about 6 MiB") and `fix`."""
    where = err.filename or "a file"
    free = ""
    if err.filename and not is_remote(err.filename):
        directory = pathlib.Path(os.path.abspath(err.filename))
        while not directory.exists() and directory != directory.parent:
            directory = directory.parent
        with contextlib.suppress(OSError):
            free = f"{shutil.disk_usage(directory).free / 2**20:.1f} MiB free there"
    detail = "; ".join(part for part in (free, need) if part)
    return (f"no space left on the device to write {where}" + (f" ({detail})" if detail else "")
            + f": free space there or {fix}")


class AppendFile:
    """A file that grows by appends: metrics.jsonl and TensorBoard event files.

    Local: appended and flushed to disk at each `flush`. Object stores cannot append, so the
    whole object is rewritten at a flush, at most once per `remote_interval` seconds unless
    forced (a checkpoint, the end of the run): what a crash loses after the last checkpoint is
    what a resumed run drops anyway.
    """

    def __init__(self, path: str | os.PathLike, remote_interval: float = 30.0):
        self.path = as_path(path)
        self.remote = is_remote(self.path)
        self.remote_interval = remote_interval
        if self.remote:
            self.data = bytearray(self.path.read_bytes() if self.path.exists() else b"")
            self.dirty, self.flushed_at = False, 0.0
        else:
            local = pathlib.Path(self.path)
            mode = new_file_mode(local)
            fd = os.open(local, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
            self.file = os.fdopen(fd, "ab")

    def write(self, data: bytes) -> None:
        if self.remote:
            self.data += data
            self.dirty = True
        else:
            with naming(self.path):
                self.file.write(data)

    def flush(self, force: bool = False) -> None:
        """Make what was written durable (on object stores: at most every remote_interval s)."""
        if not self.remote:
            with naming(self.path):
                self.file.flush()
                os.fsync(self.file.fileno())
        elif self.dirty and (force or time.monotonic() - self.flushed_at >= self.remote_interval):
            self.path.write_bytes(bytes(self.data))
            self.dirty, self.flushed_at = False, time.monotonic()

    def close(self) -> None:
        try:
            self.flush(force=True)
        finally:
            if not self.remote:
                with contextlib.suppress(OSError):  # what a failed flush left is dropped
                    self.file.close()


@functools.cache
def _download_root() -> pathlib.Path:
    root = tempfile.mkdtemp(prefix="bertjax-files-")
    atexit.register(remove_downloads)
    return pathlib.Path(root)


def remove_downloads() -> None:
    """Remove the local copies `local_copy` made (at exit; also called by a tool that ends at
    once, without running the exit handlers)."""
    if _download_root.cache_info().currsize:
        shutil.rmtree(_download_root(), ignore_errors=True)


def local_copy(path: str | os.PathLike) -> pathlib.Path:
    """A local path holding `path`'s bytes: `path` itself when local, else a downloaded copy
    (for readers that need a file name: tokenizers, Hugging Face loaders)."""
    path = as_path(path)
    if not is_remote(path):
        return pathlib.Path(path)
    target = _download_root() / str(path).split("://", 1)[1]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(path.read_bytes())
    return target
