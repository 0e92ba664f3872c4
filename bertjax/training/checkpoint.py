"""Orbax checkpoints: train state (sharded arrays) + the data iterator's position (JSON).

Saves are asynchronous and atomic (orbax writes to a temporary directory and renames it), so a
run that dies mid-save never leaves a half-written "latest" checkpoint. Restores take the target
shardings from the current mesh, so a checkpoint written on N devices restores on M.
"""

import pathlib
from typing import Any

import jax
import orbax.checkpoint as ocp


class CheckpointError(ValueError):
    """A checkpoint that does not fit the configured model."""


class Checkpointer:
    """Keeps the last `keep` checkpoints of a run under `<workdir>/checkpoints`."""

    def __init__(self, workdir: str | pathlib.Path, keep: int = 3, async_save: bool = True):
        self.directory = pathlib.Path(workdir).absolute() / "checkpoints"
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, create=True, enable_async_checkpointing=async_save
        )
        self.manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=("state", "data")
        )

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
            first_line = str(err).strip().splitlines()[0] if str(err).strip() else repr(err)
            raise CheckpointError(
                f"checkpoint {self.directory}/{step} does not match the configured model "
                f"({first_line[:200]}): use the model config it was written with, or a new "
                "--workdir"
            ) from err
        return restored.state, dict(restored.data)

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
