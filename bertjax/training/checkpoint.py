"""Orbax checkpoints: the train state (sharded arrays, the carry included) and the data
iterator's position (JSON), under WORKDIR/checkpoints/STEP. The one way to write and read them,
for training, fine-tuning, generation and embedding.

Saves are asynchronous and atomic (orbax writes to a temporary directory and renames it), so a
run that dies mid-save never leaves a half-written "latest" checkpoint. Restores take the target
shardings from the current mesh, so a checkpoint written on N devices restores on M.
"""

import contextlib
import dataclasses
import errno
import logging
import os
import pathlib
import sys
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, TypeVar

import jax
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from bertjax.files import Path, absolute, as_path, is_remote
from bertjax.models.sizes import FamilyConfig
from bertjax.training import workdir as workdir_lib
from bertjax.training.state import TrainState
from bertjax.typing import Params, PyTree

ITEMS = ("state", "data")
_FULL = ("RESOURCE_EXHAUSTED", "No space left", "Disk quota exceeded")
R = TypeVar("R")


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable or does not fit the configured model."""


class NoReadableCheckpointError(CheckpointError):
    """Every checkpoint under `directory` is unreadable (`detail` says which): the run that
    holds the workdir starts again in a new one; a reader's tool names the path it was given
    as the fault."""

    def __init__(self, directory: Path, detail: str, fix: str) -> None:
        super().__init__(f"no readable checkpoint in {directory} ({detail}): {fix}")
        self.directory, self.detail = directory, detail


class CorruptCheckpointError(Exception):
    """A checkpoint that cannot be read (truncated files, garbled metadata, an empty step)."""


def _first_line(err: BaseException) -> str:
    text = str(err).strip().split(". See full TensorStore details")[0]
    return text.splitlines()[0][:200] if text else type(err).__name__


def _remove_partial(partial: Path, patience_s: float = 30.0) -> None:
    """Delete an unfinished save's directory. When a save fails on a full disk, orbax's other
    writers (TensorStore's array files, the metadata) can still be creating files in it for a
    moment, so a removal that finds the directory refilled is tried again."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            partial.rmtree(missing_ok=True)
            return
        except OSError as err:
            if err.errno != errno.ENOTEMPTY or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class _QuietOrbax(logging.Filter):
    """Orbax logs a save or restore that fails with tracebacks, from background threads too,
    and asyncio logs its failed tasks ('Task exception was never retrieved'), naming only
    tensorstore's error, sometimes long after the restore, when the task is collected; the
    Checkpointer turns the failure into one line, so those records are dropped (bertjax reads
    and writes tensorstore only through orbax)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        message = record.getMessage()
        tb = record.exc_info[2] if isinstance(record.exc_info, tuple) else None
        return not ("orbax" in record.pathname or "orbax" in message
                    or "tensorstore" in message.lower() or _through_orbax(tb))


def _through_orbax(tb: TracebackType | None) -> bool:
    """Whether a traceback passes through orbax's code (asyncio's 'exception was never
    retrieved' names only the future, whose message is tensorstore's, not orbax's)."""
    while tb is not None:
        if "orbax" in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return False


class _QuietOrbaxReports:
    """An unraisable-exception hook: after a failed read or write, orbax's pending tensorstore
    operations fail later, from tensorstore threads and at garbage collection ('Exception
    ignored in <coroutine>', 'Event loop is closed'); the Checkpointer reports the failure in
    one line, so those reports are dropped and all others go to the hook it wraps."""

    def __init__(self, wrapped: Callable[["sys.UnraisableHookArgs"], object]) -> None:
        self.wrapped = wrapped

    def __call__(self, report: "sys.UnraisableHookArgs") -> None:
        if not ("Event loop is closed" in str(report.exc_value)
                or _through_orbax(report.exc_traceback)):
            self.wrapped(report)

    @classmethod
    def install(cls) -> None:
        """Wrap the current hook once (a hook set by the user or pytest keeps working)."""
        if not isinstance(sys.unraisablehook, cls):
            sys.unraisablehook = cls(sys.unraisablehook)


def quiet_orbax_failures() -> None:
    """Drop orbax's own reports of a failed save or restore (_QuietOrbax, _QuietOrbaxReports),
    which a tool turns into one line: for a bertjax tool's process only (bertjax/cli/runner.py
    calls it before the tool's main, and it stays for the process's life, since late reports
    come when orbax's tasks are collected, at exit too). The library never calls it: a
    notebook that imports bertjax and saves or restores with its Checkpointer keeps every
    record of its own orbax and asyncio loggers and its unraisable-exception hook. Idempotent."""
    for name in ("absl", "asyncio"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _QuietOrbax) for f in logger.filters):
            logger.addFilter(_QuietOrbax())
    _QuietOrbaxReports.install()


def _shapes(tree: PyTree) -> dict[str, tuple]:
    """{"params/bert/...": shape} of a tree of arrays, shape structs or orbax array metadata."""
    leaves = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: hasattr(x, "shape"))[0]
    name = lambda k: str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))))  # noqa
    return {"/".join(map(name, path)): tuple(leaf.shape) for path, leaf in leaves}


class Checkpointer:
    """Keeps the last `keep` checkpoints of a run under `<workdir>/checkpoints`.

    Restores verify a checkpoint before reading it; one that does not fit the model is an
    error that leaves it in place. One that cannot be read is skipped with one warning and
    the next newest is used: with `quarantine` (only the run that holds the workdir's lease)
    it is moved aside to checkpoints/corrupt-STEP (never deleted); a reader (generation,
    embedding, fine-tuning's --init, export) leaves it where it is, since the run writing
    the workdir may be deleting it that very moment. A checkpoint that vanishes while it is
    read (the run keeps only its last `keep`) is no fault: the newest one is read instead.
    A save that finds no space left is one CheckpointError naming the directory and the
    space a checkpoint takes.
    """

    def __init__(self, workdir: str | os.PathLike, keep: int = 3, async_save: bool = True,
                 create: bool = True, quarantine: bool = False):
        self.directory = absolute(workdir) / "checkpoints"  # local or gs:// (files.py)
        self.quarantine = quarantine
        self.state_bytes = 0  # what the last state saved takes (checkpoint_bytes)
        self.options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, create=create, enable_async_checkpointing=async_save,
            cleanup_tmp_directories=quarantine,  # a killed run's partial save: only its own
        )
        self.manager = self._manager()

    def _manager(self) -> ocp.CheckpointManager:
        return ocp.CheckpointManager(self.directory, options=self.options, item_names=ITEMS)

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: TrainState, data_position: dict, force: bool = False) -> bool:
        """Start saving `state` and the iterator position at `step` (returns at once)."""
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_position)
        )
        self.state_bytes = sum(x.nbytes for x in jax.tree.leaves(state))
        with self._space_errors(step, state):
            return self.manager.save(step, args=args, force=force)

    @contextlib.contextmanager
    def _space_errors(self, step: int, state: TrainState | None = None) -> Iterator[None]:
        """A full disk during a save (found now or by a later call) as one CheckpointError."""
        try:
            yield
        except (OSError, ValueError) as err:
            if not (isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)
                    or any(sign in str(err) for sign in _FULL)):
                raise
            for partial in self.directory.glob("*.orbax-checkpoint-tmp*"):
                _remove_partial(partial)
            raise CheckpointError(
                f"no space left on the device to save a checkpoint in {self.directory} (one "
                f"takes about {self.checkpoint_bytes(state) / 2**20:.0f} MiB): free that much "
                f"or pass a --workdir on a larger disk; {self.kept()}") from None

    def _finished_steps(self) -> list[int]:
        """The steps whose save finished (orbax renames a finished one to its step), read
        from the directory: the manager re-raises a failed background save when asked."""
        if not self.directory.is_dir():
            return []
        return sorted(int(p.name) for p in self.directory.iterdir() if p.name.isdigit())

    def kept(self) -> str:
        """What a rerun resumes from, in words (for the line of a run that failed)."""
        latest = max(self._finished_steps(), default=None)
        return (f"checkpoint {latest} is intact and rerunning resumes from it"
                if latest is not None else "no checkpoint was written")

    def checkpoint_bytes(self, state: TrainState | None) -> int:
        """About what one checkpoint of `state` takes (the newest one's size, if local; else
        the state's, or that of the last state saved: a save that fails in the background is
        reported by a later call that has no state at hand)."""
        latest = max(self._finished_steps(), default=None)
        if latest is not None and not is_remote(self.directory):
            files = pathlib.Path(self.directory / str(latest)).rglob("*")
            return sum(f.stat().st_size for f in files if f.is_file())
        if state is not None:
            return sum(x.nbytes for x in jax.tree.leaves(state))
        return self.state_bytes

    def _set_aside(self, step: int, why: str) -> None:
        """Move an unreadable checkpoint out of the way (process 0), warn, and forget it."""
        target = self.directory / f"corrupt-{step}"
        if jax.process_index() == 0:
            n = 1
            while target.exists():
                n, target = n + 1, self.directory / f"corrupt-{step}-{n}"
            (self.directory / str(step)).rename(target)
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices(f"bertjax checkpoint {step} set aside")
        logging.warning("checkpoint %s/%d cannot be read (%s): moved to %s; using the one "
                        "before it", self.directory, step, why, target.name)
        self.manager.close()
        self.manager = self._manager()

    def _verify(self, step: int, abstract: dict[str, Params]) -> None:
        """CorruptCheckpointError if the state's metadata cannot be read; CheckpointError if
        its parameters do not have the shapes of `abstract`'s ({"params": ...})."""
        try:
            saved = ocp.PyTreeCheckpointHandler().metadata(self.directory / str(step) / "state")
        except Exception as err:  # noqa: BLE001 - any failure to read it means unreadable
            raise CorruptCheckpointError(_first_line(err)) from err
        saved_shapes, wanted = _shapes(getattr(saved, "tree", saved)), _shapes(abstract)
        differ = [p for p, shape in wanted.items() if saved_shapes.get(p) != shape]
        if differ:
            path = differ[0]
            raise CheckpointError(
                f"checkpoint {self.directory}/{step} does not match the configured model "
                f"({path} is {saved_shapes.get(path, 'absent')} there, {wanted[path]} here): "
                "use the model config it was written with, or a new --workdir")

    def _read(self, abstract: dict[str, Params], read: Callable[[int], R], step: int | None
              ) -> tuple[int, R]:
        """(step, read(step)) of the newest readable checkpoint (or of `step`), skipping (or,
        with `quarantine`, setting aside) the unreadable ones; one CheckpointError when none
        is left."""
        unreadable: dict[int, str] = {}
        while True:
            steps = [s for s in self.manager.all_steps() if s not in unreadable]
            chosen = max(steps, default=None) if step is None else step
            if chosen is None:
                raise self._none_readable(unreadable)
            try:
                self._verify(chosen, abstract)
                return chosen, read(chosen)
            except CheckpointError:
                raise
            except Exception as err:  # noqa: BLE001 - a verified checkpoint that fails to read
                if self._vanished(chosen):
                    if step is not None:
                        raise CheckpointError(
                            f"checkpoint {self.directory}/{step} was deleted while it was read "
                            "(its run keeps only its newest checkpoints): pass the workdir "
                            "itself to read the newest") from None
                    continue  # the run deleted it: read the newest one there is now
                if step is not None:
                    raise CheckpointError(f"checkpoint {self.directory}/{step} cannot be read "
                                          f"({_first_line(err)})") from err
                if self.quarantine:
                    self._set_aside(chosen, _first_line(err))
                else:
                    unreadable[chosen] = _first_line(err)
                    logging.warning("checkpoint %s/%d cannot be read (%s): left in place; "
                                    "using the one before it", self.directory, chosen,
                                    unreadable[chosen])

    def _none_readable(self, unreadable: dict[int, str]) -> CheckpointError:
        """The run's own workdir (quarantine) can only start again elsewhere; a reader was
        given a run it cannot read, and says so (its tool names the flag)."""
        steps = ", ".join(map(str, sorted(unreadable)))
        if not self.quarantine:
            return NoReadableCheckpointError(self.directory, f"unreadable, left in place: "
                                             f"{steps or 'none'}", "pass another run")
        corrupt = sorted(p.name for p in self.directory.glob("corrupt-*"))
        return NoReadableCheckpointError(
            self.directory, f"set aside: {', '.join(corrupt) or 'none'}"
            + (f"; unreadable: {steps}" if steps else ""), "start again in a new --workdir")

    def _vanished(self, step: int, wait: float = 1.0) -> bool:
        """True when checkpoint `step` is gone, or goes within `wait` seconds (a deletion under
        way); the manager then forgets it and lists the checkpoints afresh."""
        deadline = time.monotonic() + wait
        while (self.directory / str(step)).exists():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        self.manager.close()
        self.manager = self._manager()
        return True

    def restore(self, abstract_state: TrainState, step: int | None = None
                ) -> tuple[TrainState, dict]:
        """The state (placed by `abstract_state`'s shardings) and data position of the newest
        readable checkpoint (or of `step`)."""
        args = ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state), data=ocp.args.JsonRestore()
        )
        restore = lambda s: self.manager.restore(s, args=args)  # noqa: E731
        _, restored = self._read({"params": abstract_state.params}, restore, step)
        return restored.state, dict(restored.data)

    def restore_params(self, abstract_params: Params, step: int | None = None
                       ) -> tuple[int, Params]:
        """(step, the `params` of the state saved there): no optimizer state is read."""
        tree = {"params": abstract_params}
        args = ocp.args.Composite(state=ocp.args.PyTreeRestore(
            item=tree, restore_args=ocp.checkpoint_utils.construct_restore_args(tree),
            partial_restore=True))
        chosen, restored = self._read(tree, lambda s: self.manager.restore(s, args=args), step)
        return chosen, restored.state["params"]

    def wait(self) -> None:
        """Block until pending asynchronous saves are complete."""
        with self._space_errors(self.latest_step() or 0):
            self.manager.wait_until_finished()

    def close(self) -> None:
        """Finish pending saves, then release the manager. A save that failed is reported
        once, by `wait`: closing the manager raises the same failure again, unnamed (the
        full disk's bare "[Errno 28]"), and that repeat is dropped."""
        try:
            self.wait()
        except BaseException:
            with contextlib.suppress(Exception):
                self.manager.close()
            raise
        self.manager.close()


def abstract_like(tree: PyTree, shardings: PyTree) -> PyTree:
    """ShapeDtypeStructs carrying the target shardings (what restore needs)."""
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings
    )


def resolve(path: str | os.PathLike) -> tuple[Path, int | None]:
    """(workdir, step or None for the newest) of WORKDIR, WORKDIR/checkpoints or .../STEP."""
    path = as_path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such workdir or checkpoint: pass the --workdir of a "
                              "bertjax run, or one of its checkpoints/STEP directories")
    if path.name.isdigit() and path.parent.name == "checkpoints":
        return path.parent.parent, int(path.name)
    if path.name == "checkpoints":
        return path.parent, None
    return path, None


def restore_params(path: str | os.PathLike, abstract_params: Params
                   ) -> tuple[Params, Path, int]:
    """(params, workdir, step) of the newest readable (or the named) checkpoint under `path`.

    `abstract_params` gives the parameter tree to read and where to place it (its shardings);
    the rest of the train state is not read. The restore path of every tool that uses a
    trained model: generation, embedding and fine-tuning.
    """
    workdir, step = resolve(path)
    checkpointer = Checkpointer(workdir, async_save=False, create=False)
    try:
        steps = checkpointer.manager.all_steps()
        if not steps:
            raise CheckpointError(f"{checkpointer.directory} holds no finished checkpoint: train "
                                  "for at least train.checkpoint_every steps, or to the end")
        if step is not None and step not in steps:
            raise CheckpointError(f"{checkpointer.directory}/{step} is not a checkpoint: pass "
                                  f"one of {', '.join(map(str, sorted(steps)))}")
        step, params = checkpointer.restore_params(abstract_params, step)
        return params, workdir, step
    finally:
        checkpointer.close()


@dataclasses.dataclass(frozen=True)
class TrainedModel:
    """A trained model read back for use: where from, its record and config, its params."""

    workdir: Path
    step: int
    record: dict[str, Any]
    config: FamilyConfig
    params: Params


def load_trained(path: str | os.PathLike, family: str, tool: str,
                 abstract_params: Callable[[FamilyConfig], Params], **config_overrides: Any
                 ) -> TrainedModel:
    """The newest (or the named) checkpoint of a `family` workdir, parameters on one device.

    `abstract_params(config)` gives the parameter tree to read (shapes only), e.g. the whole
    GPT or only BERT's "bert" encoder subtree; `config_overrides` change the recorded config
    (remat=False, another compute dtype). One line when the workdir holds another family.
    """
    workdir, _ = resolve(path)
    record = workdir_lib.expect_family(workdir, family, tool)
    config = workdir_lib.model_config(record, **config_overrides)
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device),
                          abstract_params(config))
    params, workdir, step = restore_params(path, shapes)
    return TrainedModel(workdir, step, record, config, params)


# ----------------------------------------------------------------------------- saved as it is

BEST_PARAMS = ("best", "params")  # where a run with evaluation keeps its best parameters


def saved_shapes(item: pathlib.Path, key: str | None = None) -> PyTree:
    """The tree an orbax pytree item holds (or its subtree `key`), as ShapeDtypeStructs on
    this host's first device, read from its metadata: what to restore it into without
    building the model."""
    try:
        saved = ocp.PyTreeCheckpointHandler().metadata(item)
    except Exception as err:  # noqa: BLE001 - any failure to read it means unreadable
        raise CheckpointError(f"{item} cannot be read ({_first_line(err)}): pass another "
                              "checkpoint of the run") from err
    tree = getattr(saved, "tree", saved)
    if key is not None:
        if not isinstance(tree, dict) or key not in tree:
            raise CheckpointError(f"{item} holds no {key}: it was not written by bertjax")
        tree = tree[key]
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device),
                        tree, is_leaf=lambda x: hasattr(x, "shape"))


def restore_saved_params(path: str | os.PathLike, best: bool = True
                         ) -> tuple[Params, pathlib.Path, str]:
    """(params on one device, workdir, which) of a run as it saved them: with `best`, the best
    evaluation's parameters (WORKDIR/best/params) when the run kept one and `path` names no
    step; else the newest readable (or the named) checkpoint's. The tree comes from the
    checkpoint's own metadata, so no model is built; `which` says what was read ("best",
    "step N"). Nothing in the workdir is moved: its run may be writing it meanwhile."""
    workdir, step = resolve(path)
    best_item = absolute(workdir).joinpath(*BEST_PARAMS)  # gs:// stays gs:// (files.absolute)
    if best and step is None and best_item.is_dir():
        return _read_best(best_item, workdir), workdir, "best"
    directory = absolute(workdir) / "checkpoints"
    unreadable: set[int] = set()
    while True:
        steps = [s for s in _saved_steps(directory) if s not in unreadable]
        if step is None and not steps:
            raise CheckpointError(
                f"{workdir} holds no checkpoint: train for at least train.checkpoint_every "
                "steps, or to the end, first" if not unreadable else
                f"no readable checkpoint in {directory} (unreadable: "
                f"{', '.join(map(str, sorted(unreadable)))}): pass another run")
        chosen = steps[-1] if step is None else step
        if chosen not in steps:
            raise CheckpointError(f"{directory}/{chosen} is not a checkpoint: " + (
                f"pass one of {', '.join(map(str, steps))}" if steps else
                f"{directory} holds none; train for at least train.checkpoint_every steps"))
        try:
            abstract = saved_shapes(directory / str(chosen) / "state", "params")
            params, workdir, chosen = restore_params(directory / str(chosen), abstract)
            return params, workdir, f"step {chosen}"
        except CheckpointError as err:
            if step is not None:
                raise
            if (directory / str(chosen)).exists():  # else deleted by its run: list again
                unreadable.add(chosen)
                logging.warning("%s: left in place; using the checkpoint before it", err)


def _saved_steps(directory: Path) -> list[int]:
    """The steps under WORKDIR/checkpoints that hold a state, in order."""
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.glob("*") if p.name.isdigit() and
                  (p / "state").is_dir())


def _read_best(best_item: Path, workdir: Path, attempts: int = 3) -> Params:
    """WORKDIR/best/params; a read that fails is tried again (`attempts` in all), since the
    run may be swapping in a new best (evaluation.BestKeeper) that very moment."""
    for attempt in range(attempts):
        try:
            with ocp.StandardCheckpointer() as checkpointer:
                return checkpointer.restore(best_item, saved_shapes(best_item))
        except Exception as err:  # noqa: BLE001 - any failure to read it
            if attempt + 1 == attempts:
                raise CheckpointError(f"{best_item} cannot be read ({_first_line(err)}): pass "
                                      f"one of {workdir}/checkpoints/STEP") from err
            time.sleep(0.5)
    raise AssertionError("unreachable")
