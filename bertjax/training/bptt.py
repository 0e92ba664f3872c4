"""Truncated back-propagation through time with LSTM state carried across steps (ELMo's stream
mode, as bilm-tf trained): the training loop for tasks with `stateful=True`.

Why a loop of its own: the shared loop's step is `(state, batch) -> (state, metrics)`, and its
checkpoints hold the train state and data position only. Here the step is
`(state, batch, carry) -> (state, metrics, carry)`: the carry (the LSTM state after row r's
window, [B, ...] sharded like the batch, donated and replaced in place) goes back in with row
r's next window, and each checkpoint also saves it (item "carry"), so a resumed run continues
from the state the interrupted one had. Everything else is shared: `build_trainer` makes the
sharded state and init, `train_step` the update (the task's loss takes the carry in the batch
as carry_c / carry_h and returns the new one in its metrics), plus the same checkpoints
(items "state" and "data" as the shared loop writes them), metrics, TensorBoard and progress.
A new sequence-length phase starts its stream, and its state, afresh. Gradient accumulation
would split rows across micro-steps, so it is refused.
"""

import logging
import pathlib
import time
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

import flax.linen as nn
import jax
import optax
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from bertjax.objectives.task import PretrainingTask
from bertjax.training import mesh as mesh_lib
from bertjax.training.checkpoint import CheckpointError, abstract_like
from bertjax.training.loop import Trainer, build_trainer, phase_plan
from bertjax.training.metrics import MetricWriter
from bertjax.training.progress import ProgressBar
from bertjax.training.state import TrainState
from bertjax.training.step import train_step

CARRY_KEYS = ("carry_c", "carry_h")


def bptt_step(state: TrainState, batch: dict, carry: dict, *, loss_fn: Any,
              tx: optax.GradientTransformation) -> tuple[TrainState, dict, dict]:
    """train_step with the carry fed in through the batch and taken out of the metrics."""
    state, metrics = train_step(state, {**batch, **carry}, loss_fn=loss_fn, tx=tx)
    new_carry = {k: metrics.pop(k) for k in CARRY_KEYS}
    return state, metrics, new_carry


class CarryCheckpointer:
    """Orbax checkpoints under WORKDIR/checkpoints with items state, data and carry."""

    def __init__(self, workdir: pathlib.Path, keep: int):
        self.directory = workdir.absolute() / "checkpoints"
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True)
        self.manager = ocp.CheckpointManager(self.directory, options=options,
                                             item_names=("state", "data", "carry"))

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: Any, position: dict, carry: Any, force: bool = False) -> None:
        args = ocp.args.Composite(state=ocp.args.StandardSave(state),
                                  data=ocp.args.JsonSave(position),
                                  carry=ocp.args.StandardSave(carry))
        self.manager.save(step, args=args, force=force)

    def restore(self, abstract_state: Any, abstract_carry: Any) -> tuple[Any, dict, Any]:
        step = self.latest_step()
        args = ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state),
                                  data=ocp.args.JsonRestore(),
                                  carry=ocp.args.StandardRestore(abstract_carry))
        try:
            restored = self.manager.restore(step, args=args)
        except (ValueError, KeyError, TypeError, FileNotFoundError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else repr(err)
            raise CheckpointError(
                f"checkpoint {self.directory}/{step} does not match the configured stream-mode "
                f"model ({first[:200]}): use the config it was written with, or a new --workdir"
            ) from err
        return restored.state, dict(restored.data), restored.carry

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()


def _zero_carry(task: PretrainingTask, local_batch: int, sharding: NamedSharding) -> dict:
    example = task.example_batch(local_batch, 1)
    return {k: jax.make_array_from_process_local_data(sharding, example[k]) for k in CARRY_KEYS}


def run_training(
    workdir: str | pathlib.Path,
    task: PretrainingTask,
    source: Any,
    tx: optax.GradientTransformation,
    mesh: Mesh,
    batch_size: int,
    num_steps: int,
    seq_phases: Sequence[tuple[float, int]] = ((1.0, 20),),
    accum_steps: int = 1,
    seed: int = 0,
    log_every: int = 10,
    checkpoint_every: int = 500,
    keep_checkpoints: int = 3,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Train a stateful task to `num_steps`, resuming (state, data and carry) from `workdir`."""
    mesh_lib.check_batch_size(batch_size, mesh)
    if accum_steps != 1:
        raise ValueError("stream-mode (truncated BPTT) training carries LSTM state per row, which "
                         "micro-batches would split: set train.accum_steps = 1")
    if getattr(source, "mode", "stream") != "stream":
        raise ValueError("elmo_pretraining_task.mode is 'stream' but elmo_source.mode is "
                         f"{source.mode!r}: set both to the same mode")
    workdir = pathlib.Path(workdir)
    local_batch = batch_size // jax.process_count()
    checkpointer = CarryCheckpointer(workdir, keep_checkpoints)
    writer = MetricWriter(workdir)
    state, start_step, summary = None, 0, {}
    position = {"phase": 0, "example_index": 0}
    try:
        for phase, (end_step, seq_length) in enumerate(phase_plan(num_steps, seq_phases)):
            trainer = build_trainer(task, tx, mesh, task.example_batch(local_batch, seq_length),
                                    seed)
            step_fn = _jit_step(task, tx, trainer)
            carry_sharding = mesh_lib.batch_sharding(mesh)
            carry = _zero_carry(task, local_batch, carry_sharding)
            if state is None:
                state, position, carry = _restore_or_init(trainer, checkpointer, carry)
                start_step = int(state.step)
                source.save(workdir)  # tokenizer files and record, once the run can start
            if int(state.step) >= end_step:
                continue
            if position["phase"] != phase:
                position, carry = {"phase": phase, "example_index": 0}, _zero_carry(
                    task, local_batch, carry_sharding)
            batches = source.batches(position["example_index"], seq_length, local_batch)
            state, carry, position, summary = _train_phase(
                trainer, step_fn, state, carry, batches, position, end_step, num_steps,
                seq_length, batch_size, checkpointer, writer, log_every, checkpoint_every,
                task, show_progress)
        if state is not None and int(state.step) > start_step:
            checkpointer.save(int(state.step), state, position, carry, force=True)
    finally:
        checkpointer.close()
        writer.close()
    return {**summary, "start_step": start_step, "step": int(state.step) if state else 0,
            "checkpoint_dir": str(checkpointer.directory)}


def _jit_step(task: PretrainingTask, tx: optax.GradientTransformation, trainer: Trainer) -> Any:
    batch_sharding = mesh_lib.batch_sharding(trainer.mesh)
    replicated = NamedSharding(trainer.mesh, PartitionSpec())
    jitted = jax.jit(
        partial(bptt_step, loss_fn=task.loss_fn, tx=tx),
        in_shardings=(trainer.state_shardings, batch_sharding, batch_sharding),
        out_shardings=(trainer.state_shardings, replicated, batch_sharding),
        donate_argnums=(0, 2),
    )

    def step(*args: Any) -> Any:
        with jax.set_mesh(trainer.mesh), nn.logical_axis_rules(trainer.rules):
            return jitted(*args)

    return step


def _restore_or_init(trainer: Trainer, checkpointer: CarryCheckpointer, carry: dict
                     ) -> tuple[TrainState, dict, dict]:
    if checkpointer.latest_step() is None:
        return trainer.init(), {"phase": 0, "example_index": 0}, carry
    logging.info("resuming from %s/%d", checkpointer.directory, checkpointer.latest_step())
    abstract_carry = abstract_like(carry, jax.tree.map(lambda x: x.sharding, carry))
    return checkpointer.restore(trainer.abstract_state, abstract_carry)


def _train_phase(trainer: Trainer, step_fn: Any, state: TrainState, carry: dict,
                 batches: Iterator[dict], position: dict, end_step: int, num_steps: int,
                 seq_length: int, batch_size: int, checkpointer: CarryCheckpointer,
                 writer: MetricWriter, log_every: int, checkpoint_every: int,
                 task: PretrainingTask, show_progress: bool) -> tuple:
    step = int(state.step)
    index = position["example_index"]
    progress = ProgressBar(num_steps, step, task.progress, enabled=show_progress)
    last_time, last_step, scalars = time.perf_counter(), step, {}
    while step < end_step:
        state, metrics, carry = step_fn(state, trainer.device_batch(next(batches)), carry)
        step, index = step + 1, index + batch_size
        position = {"phase": position["phase"], "example_index": index}
        if step % log_every == 0 or step == end_step:
            now = time.perf_counter()
            scalars = {k: float(v) for k, v in jax.device_get(metrics).items()}
            scalars["tokens_per_second"] = (
                batch_size * seq_length * (step - last_step) / (now - last_time))
            scalars["seq_length"] = seq_length
            writer.write(step, scalars)
            progress.update(step, scalars)
            last_time, last_step = now, step
        else:
            progress.update(step, None)
        if step % checkpoint_every == 0 and step < num_steps:
            checkpointer.save(step, state, position, carry)
    progress.close()
    return state, carry, position, scalars
