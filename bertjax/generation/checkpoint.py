"""Load a GPT's parameters (only) from a bertjax-train workdir or one of its checkpoints.

A checkpoint holds the whole TrainState (step, params, opt_state, rng); generation restores
the `params` subtree alone, so it needs neither the optimizer settings nor their memory. The
model config and tokenizer come from WORKDIR/model.json (see models/record.py).
"""

import dataclasses
import os
import pathlib
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

from bertjax.models.gpt import FAMILY, GptConfig, GptLM
from bertjax.models.record import RecordError, expect_family


@dataclasses.dataclass(frozen=True)
class GptCheckpoint:
    """Where the parameters came from, the model config, its record and the parameters."""

    workdir: pathlib.Path
    step: int
    config: GptConfig
    record: dict[str, Any]
    params: Any


def resolve(path: str | os.PathLike) -> tuple[pathlib.Path, int | None]:
    """(workdir, step or None for the latest) of WORKDIR, WORKDIR/checkpoints or .../STEP."""
    path = pathlib.Path(path)
    if not path.exists():
        raise RecordError(f"{path}: no such workdir or checkpoint: pass --checkpoint=WORKDIR")
    if path.name.isdigit() and path.parent.name == "checkpoints":
        return path.parent.parent, int(path.name)
    if path.name == "checkpoints":
        return path.parent, None
    return path, None


def _latest_step(directory: pathlib.Path) -> int:
    steps = sorted(int(p.name) for p in directory.glob("[0-9]*") if (p / "state").is_dir())
    if not steps:
        raise RecordError(f"{directory} holds no finished checkpoint: train for at least "
                          "train.checkpoint_every steps, or until the end of the run")
    return steps[-1]


def load_gpt(path: str | os.PathLike, tool: str = "bertjax-generate",
             dtype: str | None = None) -> GptCheckpoint:
    """Parameters of the newest (or the named) checkpoint of a GPT workdir, on one device."""
    workdir, step = resolve(path)
    record = expect_family(workdir, FAMILY, tool)
    fields = {**record["config"], "remat": False}
    if dtype is not None:
        fields["dtype"] = dtype
    config = GptConfig.from_dict(fields)
    directory = workdir / "checkpoints"
    step = _latest_step(directory) if step is None else step
    if not (directory / str(step) / "state").is_dir():
        raise RecordError(f"{directory}/{step} is not a checkpoint: pass one of "
                          f"{', '.join(sorted(p.name for p in directory.glob('[0-9]*')))}")
    params = restore_params(directory / str(step) / "state", config)
    return GptCheckpoint(workdir, step, config, record, params)


def restore_params(state_dir: pathlib.Path, config: GptConfig) -> Any:
    """The `params` subtree of a saved TrainState, shaped as `config`'s GptLM."""
    ids = jnp.zeros((1, 1), jnp.int32)
    boxed = jax.eval_shape(lambda: GptLM(config).init(jax.random.key(0), ids))["params"]
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device),
                            nn.unbox(boxed))
    restore_args = ocp.checkpoint_utils.construct_restore_args(abstract)
    args = ocp.args.PyTreeRestore(item={"params": abstract},
                                  restore_args={"params": restore_args}, partial_restore=True)
    try:
        with ocp.PyTreeCheckpointer() as checkpointer:
            restored = checkpointer.restore(state_dir, args=args)
    except (ValueError, KeyError, TypeError) as err:
        first = (str(err).strip().splitlines() or [repr(err)])[0][:200]
        raise RecordError(f"{state_dir} does not match the model in model.json ({first}): "
                          "pass the workdir this checkpoint was written in") from err
    return restored["params"]
