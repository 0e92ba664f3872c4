"""One run per workdir: an exclusive lease, WORKDIR/lease.json, held while a run trains.

Two runs writing one workdir corrupt it silently (each replaces the other's metrics and
checkpoints), so the first takes the lease and a second ends before touching anything:

    WORKDIR is in use by PID N on HOST since T: wait for that run to end or use another --workdir

The file says who holds it: {"host", "pid", "started", "renewed", "token"}.

* Local workdirs (a team filesystem too): the holder keeps an exclusive `flock` on the file,
  which the kernel drops when the process ends however it ends (kill -9 included), so a lease
  left by a dead run is taken over at once, with one warning.
* Object storage has no locks: the lease object is created only if absent (a GCS
  `ifGenerationMatch=0` precondition) and renewed every `timeout / 4` seconds; a lease not
  renewed for `timeout` seconds, or whose process on this same host is gone, is taken over with
  one warning.

A multi-host run takes it once, on process 0 (which writes what is written once), and every
process ends with the same line when it is refused.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator

from bertjax.files import (
    as_path,
    filesystem,
    is_remote,
    naming,
    process_alive,
    process_start,
    unreachable,
)

LEASE = "lease.json"
DEFAULT_TIMEOUT = 600.0  # seconds an object-storage lease lives without renewal


class WorkdirInUseError(ValueError):
    """Another run holds the workdir's lease."""


class Lease:
    """The lease on `workdir`; `acquire()` raises WorkdirInUseError when another run holds it."""

    def __init__(self, workdir: str | os.PathLike, timeout: float = DEFAULT_TIMEOUT):
        self.workdir = as_path(workdir)
        self.path = self.workdir / LEASE
        self.remote = is_remote(self.workdir)
        self.timeout = timeout
        now = time.time()
        self.record = {
            "host": socket.gethostname(), "pid": os.getpid(),
            "process_start": process_start(os.getpid()),
            "started": datetime.datetime.fromtimestamp(now).isoformat(timespec="seconds"),
            "renewed": now, "token": uuid.uuid4().hex}
        self.created_workdir = False
        self.created_root = self.workdir
        self._fd: int | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    # ---------------------------------------------------------------- shared

    def _in_use(self, holder: dict | None) -> WorkdirInUseError:
        if not holder:
            return WorkdirInUseError(
                f"{self.workdir} is in use by another run (its {LEASE} is being written): wait "
                "for that run to end or use another --workdir")
        return WorkdirInUseError(
            f"{self.workdir} is in use by PID {holder.get('pid')} on {holder.get('host')} since "
            f"{holder.get('started')}: wait for that run to end or use another --workdir")

    def _warn_takeover(self, holder: dict, why: str) -> None:
        logging.warning("%s: taking over the lease of PID %s on %s (since %s): %s",
                        self.workdir, holder.get("pid"), holder.get("host"),
                        holder.get("started"), why)

    def _payload(self) -> bytes:
        return (json.dumps(self.record, indent=1) + "\n").encode("utf-8")

    def acquire(self) -> None:
        try:
            if not self.workdir.exists():
                self.created_root = self._first_missing()
                self.workdir.mkdir(parents=True, exist_ok=True)
                self.created_workdir = True
        except OSError as err:
            if not self.remote:
                raise
            raise unreachable(self.workdir, err) from None
        try:
            self._acquire_remote() if self.remote else self._acquire_local()
        except OSError as err:
            self._remove_created_workdir()
            if not self.remote or isinstance(err, FileNotFoundError | PermissionError):
                raise
            raise unreachable(self.workdir, err) from None
        except BaseException:
            self._remove_created_workdir()
            raise

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if self.remote:
            with contextlib.suppress(OSError):
                if (self._read_remote() or {}).get("token") == self.record["token"]:
                    self.path.unlink()
        elif self._fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # while still locked: no one holds a lease on it
            os.close(self._fd)
            self._fd = None
        self._remove_created_workdir()

    def _first_missing(self) -> object:
        """The outermost directory of the workdir's path that does not exist yet."""
        first = self.workdir
        while not first.parent.exists() and first.parent != first:
            first = first.parent
        return first

    def _remove_created_workdir(self) -> None:
        """A run refused (or stopped) before it wrote anything leaves no workdir behind, nor
        the parents it created (bertjax-glue's TASK/lr_RATE/ of a seed_N run)."""
        if not self.created_workdir:
            return
        directory = self.workdir
        with contextlib.suppress(OSError):
            while not any(directory.iterdir()):
                directory.rmdir()
                if directory == self.created_root or self.remote:
                    break
                directory = directory.parent

    # ---------------------------------------------------------------- local: flock

    def _acquire_local(self) -> None:
        for _ in range(10):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._read_local(fd)
                os.close(fd)
                raise self._in_use(holder) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # released (unlinked) between our open and our lock: open anew
                os.close(fd)
                continue
            holder = self._read_local(fd)
            if holder and holder.get("token"):
                self._warn_takeover(holder, "that process has ended")
            try:
                with naming(self.path):
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, self._payload(), 0)
                    os.fsync(fd)
            except OSError:  # a full disk: no empty lease left behind
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
                os.close(fd)
                raise
            self._fd = fd
            return
        raise self._in_use(None)

    @staticmethod
    def _read_local(fd: int) -> dict | None:
        try:
            return json.loads(os.pread(fd, 1 << 16, 0).decode("utf-8"))
        except (OSError, ValueError):
            return None

    # ---------------------------------------------------------------- object storage

    def _read_remote(self) -> dict | None:
        filesystem(self.path).invalidate_cache()
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise
        except (OSError, ValueError):
            return {}

    def _create_remote(self) -> bool:
        try:
            filesystem(self.path).pipe_file(str(self.path), self._payload(), mode="create")
        except FileExistsError:
            return False
        return True

    def _stale_why(self, holder: dict) -> str | None:
        """Why the holder's lease may be taken over, or None while it is live."""
        if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
            if not process_alive(holder["pid"], holder.get("process_start")):
                return "that process has ended"
        age = time.time() - float(holder.get("renewed", 0))
        if age > self.timeout:
            return f"it was not renewed for {age:.0f} s (lease timeout {self.timeout:.0f} s)"
        return None

    def _acquire_remote(self) -> None:
        """Read first (a live lease refuses at once), then create only if absent, then read
        back: the token check also catches a store that ignores the precondition."""
        for _ in range(10):
            try:
                holder = self._read_remote()
            except FileNotFoundError:
                holder = None
            if holder is not None:
                why = self._stale_why(holder) if holder else "it cannot be read"
                if why is None:
                    raise self._in_use(holder)
                self._warn_takeover(holder, why)
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
            if self._create_remote():
                with contextlib.suppress(FileNotFoundError):
                    if (self._read_remote() or {}).get("token") == self.record["token"]:
                        break
        else:
            raise self._in_use(None)
        self._renewer = threading.Thread(target=self._renew, name="bertjax-lease", daemon=True)
        self._renewer.start()

    def _renew(self) -> None:
        """Rewrite the lease every timeout / 4 seconds (at least 1 s) while it is ours."""
        while not self._stop.wait(max(self.timeout / 4, 1.0)):
            try:
                if (self._read_remote() or {}).get("token") != self.record["token"]:
                    logging.error("%s: the lease was taken over by another run: stop this one; "
                                  "two runs on one workdir overwrite each other", self.workdir)
                    return
                self.record["renewed"] = time.time()
                self.path.write_bytes(self._payload())
            except OSError as err:  # a network error: try again at the next renewal
                logging.warning("%s: could not renew the lease (%s)", self.workdir, err)


def _agree(refusal: str | None) -> str | None:
    """Process 0's refusal (or None) on every process of a multi-host run."""
    import jax

    if jax.process_count() == 1:
        return refusal
    import numpy as np
    from jax.experimental import multihost_utils

    data = np.zeros(1024, np.uint8)
    if refusal:
        encoded = refusal.encode("utf-8")[:1023]
        data[: len(encoded)] = np.frombuffer(encoded, np.uint8)
    agreed = bytes(multihost_utils.broadcast_one_to_all(data)).rstrip(b"\0")
    return agreed.decode("utf-8", errors="replace") or None


@contextlib.contextmanager
def hold(workdir: str | os.PathLike, timeout: float = DEFAULT_TIMEOUT) -> Iterator[None]:
    """Hold the lease on `workdir` within the block (process 0 holds it for the run)."""
    import jax

    lease, refusal = None, None
    if jax.process_index() == 0:
        lease = Lease(workdir, timeout)
        try:
            lease.acquire()
        except WorkdirInUseError as err:
            refusal, lease = str(err), None
    refusal = _agree(refusal)
    if refusal:
        if lease is not None:  # another process of the run was refused (cannot happen today)
            lease.release()
        raise WorkdirInUseError(refusal)
    try:
        yield
    finally:
        if lease is not None:
            lease.release()
