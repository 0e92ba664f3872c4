"""Orbax checkpoints: the train state (sharded arrays, the carry included) and the data
iterator's position (JSON), under WORKDIR/checkpoints/STEP. The one way to write and read them,
for training, fine-tuning, generation and embedding.

Saves are asynchronous and atomic (orbax writes to a temporary directory and renames it), so a
run that dies mid-save never leaves a half-written "latest" checkpoint. Restores take the target
shardings from the current mesh, so a checkpoint written on N devices restores on M.
"""

import dataclasses
import os
import pathlib
from collections.abc import Callable
from typing import Any

import jax
import orbax.checkpoint as ocp

from bertjax.training import workdir as workdir_lib

ITEMS = ("state", "data")


class CheckpointError(ValueError):
    """A checkpoint that is missing or does not fit the configured model."""


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__


class Checkpointer:
    """Keeps the last `keep` checkpoints of a run under `<workdir>/checkpoints`."""

    def __init__(self, workdir: str | os.PathLike, keep: int = 3, async_save: bool = True,
                 create: bool = True):
        self.directory = pathlib.Path(workdir).absolute() / "checkpoints"
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, create=create, enable_async_checkpointing=async_save
        )
        self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=ITEMS)

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: Any, data_position: dict, force: bool = False) -> bool:
        """Start saving `state` and the iterator position at `step` (returns at once)."""
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_position)
        )
        return self.manager.save(step, args=args, force=force)

    def restore(self, abstract_state: Any, step: int | None = None) -> tuple[Any, dict]:
        """The state (placed by `abstract_state`'s shardings) and data position at `step`."""
        step = self.latest_step() if step is None else step
        args = ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state), data=ocp.args.JsonRestore()
        )
        try:
            restored = self.manager.restore(step, args=args)
        except (ValueError, KeyError, TypeError) as err:
            raise CheckpointError(
                f"checkpoint {self.directory}/{step} does not match the configured model "
                f"({_first_line(err)}): use the model config it was written with, or a new "
                "--workdir"
            ) from err
        return restored.state, dict(restored.data)

    def restore_params(self, abstract_params: Any, step: int) -> Any:
        """Only the `params` of the state saved at `step` (no optimizer state is read)."""
        tree = {"params": abstract_params}
        args = ocp.args.PyTreeRestore(
            item=tree, restore_args=ocp.checkpoint_utils.construct_restore_args(tree),
            partial_restore=True,
        )
        try:
            restored = self.manager.restore(step, args=ocp.args.Composite(state=args))
        except (ValueError, KeyError, TypeError, FileNotFoundError) as err:
            raise CheckpointError(
                f"checkpoint {self.directory}/{step} does not hold the parameters of the model "
                f"its workdir records ({_first_line(err)}): pass the workdir it was written in"
            ) from err
        return restored.state["params"]

    def wait(self) -> None:
        """Block until pending asynchronous saves are complete."""
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()


def abstract_like(tree: Any, shardings: Any) -> Any:
    """ShapeDtypeStructs carrying the target shardings (what restore needs)."""
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings
    )


def resolve(path: str | os.PathLike) -> tuple[pathlib.Path, int | None]:
    """(workdir, step or None for the newest) of WORKDIR, WORKDIR/checkpoints or .../STEP."""
    path = pathlib.Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such workdir or checkpoint: pass the --workdir of a "
                              "bertjax run, or one of its checkpoints/STEP directories")
    if path.name.isdigit() and path.parent.name == "checkpoints":
        return path.parent.parent, int(path.name)
    if path.name == "checkpoints":
        return path.parent, None
    return path, None


def restore_params(path: str | os.PathLike, abstract_params: Any
                   ) -> tuple[Any, pathlib.Path, int]:
    """(params, workdir, step) of the newest (or the named) checkpoint under `path`.

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
        step = max(steps) if step is None else step
        if step not in steps:
            raise CheckpointError(f"{checkpointer.directory}/{step} is not a checkpoint: pass "
                                  f"one of {', '.join(map(str, sorted(steps)))}")
        return checkpointer.restore_params(abstract_params, step), workdir, step
    finally:
        checkpointer.close()


@dataclasses.dataclass(frozen=True)
class TrainedModel:
    """A trained model read back for use: where from, its record and config, its params."""

    workdir: pathlib.Path
    step: int
    record: dict[str, Any]
    config: Any
    params: Any


def load_trained(path: str | os.PathLike, family: str, tool: str,
                 abstract_params: Callable[[Any], Any], **config_overrides: Any) -> TrainedModel:
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
