"""The training loop: the one place that jits. Builds sharded state, restores, trains, saves."""

import dataclasses
import logging
import pathlib
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, Protocol

import flax.linen as nn
import jax
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from bertjax.layers.partitioning import DEFAULT_RULES
from bertjax.objectives.task import PretrainingTask
from bertjax.training import mesh as mesh_lib
from bertjax.training.checkpoint import Checkpointer, abstract_like
from bertjax.training.metrics import MetricWriter
from bertjax.training.progress import ProgressBar
from bertjax.training.state import TrainState, create_state
from bertjax.training.step import eval_step, train_step

Batch = dict[str, np.ndarray]


class BatchSource(Protocol):
    """Yields this process's share of global batches, resumable at an example index."""

    def batches(self, start_index: int, seq_length: int, batch_size: int) -> Iterator[Batch]: ...

    def save(self, workdir: str | pathlib.Path) -> None: ...


@dataclasses.dataclass
class Trainer:
    """Jitted, sharded init/step/eval functions for one task on one mesh."""

    mesh: Mesh
    rules: Sequence
    state_shardings: Any
    abstract_state: Any
    init: Callable[[], TrainState]
    step: Callable[[TrainState, Any], tuple[TrainState, dict]]
    evaluate: Callable[[TrainState, Any], dict]

    def device_batch(self, batch: Batch) -> Any:
        """Assemble the global batch from this process's rows, split over data and fsdp."""
        sharding = mesh_lib.batch_sharding(self.mesh)
        return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, x), batch)


def _shard_like_params(tree: Any, params: Any, param_shardings: Any, replicated: Any) -> Any:
    """Shardings for an optimizer state: params-shaped subtrees follow the params."""
    params_def = jax.tree.structure(params)
    is_params = lambda x: jax.tree.structure(x) == params_def  # noqa: E731
    return jax.tree.map(
        lambda x: param_shardings if is_params(x) else replicated, tree, is_leaf=is_params
    )


def build_trainer(
    task: PretrainingTask,
    tx: optax.GradientTransformation,
    mesh: Mesh,
    example_batch: Batch,
    seed: int = 0,
    accum_steps: int = 1,
    rules: Sequence = DEFAULT_RULES,
) -> Trainer:
    """Shardings from logical axis names, then one jit each for init, train step and eval."""
    replicated = NamedSharding(mesh, PartitionSpec())
    batch_sharding = mesh_lib.batch_sharding(mesh)
    init_batch = {k: v[:1] for k, v in example_batch.items()}

    def init_boxed_params(rng: jax.Array) -> Any:
        return task.init_variables(rng, init_batch)["params"]

    # Shapes and logical names come from an abstract init outside any mesh context.
    boxed = jax.eval_shape(init_boxed_params, jax.random.key(seed))
    param_shardings = mesh_lib.logical_shardings(boxed, mesh, rules)
    abstract_params = nn.unbox(boxed)
    abstract_opt = jax.eval_shape(tx.init, abstract_params)
    state_shardings = TrainState(
        step=replicated,
        params=param_shardings,
        opt_state=_shard_like_params(abstract_opt, abstract_params, param_shardings, replicated),
        rng=replicated,
    )

    def init_state() -> TrainState:
        params = nn.unbox(init_boxed_params(jax.random.key(seed)))
        return create_state(params, tx, seed)

    abstract_state = abstract_like(jax.eval_shape(init_state), state_shardings)
    step_fn = jax.jit(
        partial(train_step, loss_fn=task.loss_fn, tx=tx, accum_steps=accum_steps),
        in_shardings=(state_shardings, batch_sharding),
        out_shardings=(state_shardings, replicated),
        donate_argnums=0,
    )
    eval_fn = jax.jit(
        partial(eval_step, loss_fn=task.loss_fn),
        in_shardings=(state_shardings, batch_sharding),
        out_shardings=replicated,
    )
    init_fn = jax.jit(init_state, out_shardings=state_shardings)

    def in_context(fn: Callable) -> Callable:
        def wrapped(*args: Any) -> Any:
            with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
                return fn(*args)

        wrapped.jitted = fn  # for lowering / ahead-of-time compilation
        return wrapped

    return Trainer(
        mesh,
        rules,
        state_shardings,
        abstract_state,
        in_context(init_fn),
        in_context(step_fn),
        in_context(eval_fn),
    )


def phase_plan(num_steps: int, seq_phases: Sequence[tuple[float, int]]) -> list[tuple[int, int]]:
    """[(end_step, seq_length)] from fractions of the run, e.g. ((0.9, 128), (0.1, 512))."""
    plan, end = [], 0
    for i, (fraction, length) in enumerate(seq_phases):
        end = num_steps if i == len(seq_phases) - 1 else end + round(fraction * num_steps)
        plan.append((end, int(length)))
    return plan


def run_training(
    workdir: str | pathlib.Path,
    task: PretrainingTask,
    source: BatchSource,
    tx: optax.GradientTransformation,
    mesh: Mesh,
    batch_size: int,
    num_steps: int,
    seq_phases: Sequence[tuple[float, int]] = ((1.0, 128),),
    accum_steps: int = 1,
    seed: int = 0,
    log_every: int = 10,
    checkpoint_every: int = 500,
    keep_checkpoints: int = 3,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Train `task` to `num_steps`, resuming from the newest checkpoint in `workdir`."""
    if getattr(task, "stateful", False):  # LSTM state carried across steps: see training/bptt
        from bertjax.training import bptt

        return bptt.run_training(
            workdir,
            task,
            source,
            tx,
            mesh,
            batch_size,
            num_steps,
            seq_phases,
            accum_steps,
            seed,
            log_every,
            checkpoint_every,
            keep_checkpoints,
            show_progress,
        )
    mesh_lib.check_batch(batch_size, accum_steps, mesh)
    workdir = pathlib.Path(workdir)
    local_batch = batch_size // jax.process_count()
    plan = phase_plan(num_steps, seq_phases)

    checkpointer = Checkpointer(workdir, keep=keep_checkpoints)
    writer = MetricWriter(workdir)
    start_step, position, trainer, state = 0, {"phase": 0, "example_index": 0}, None, None
    summary: dict[str, Any] = {}
    try:
        for phase, (end_step, seq_length) in enumerate(plan):
            batches = None
            example = task.example_batch(local_batch, seq_length)
            trainer = build_trainer(task, tx, mesh, example, seed, accum_steps)
            if state is None:
                state, position = _restore_or_init(trainer, checkpointer)
                start_step = int(state.step)
                source.save(workdir)  # tokenizer files and record, once the run can start
            if int(state.step) >= end_step:
                continue
            index = position["example_index"] if position["phase"] == phase else 0
            batches = source.batches(index, seq_length, local_batch)
            state, index, summary = _train_phase(
                trainer,
                state,
                batches,
                end_step,
                num_steps,
                seq_length,
                batch_size,
                index,
                phase,
                checkpointer,
                writer,
                log_every,
                checkpoint_every,
                task,
                show_progress,
            )
            position = {"phase": phase, "example_index": index}
        if state is not None and int(state.step) > start_step:
            checkpointer.save(int(state.step), state, position, force=True)
    finally:
        checkpointer.close()
        writer.close()
    return {
        **summary,
        "start_step": start_step,
        "step": int(state.step) if state else 0,
        "checkpoint_dir": str(checkpointer.directory),
    }


def _restore_or_init(trainer: Trainer, checkpointer: Checkpointer) -> tuple[TrainState, dict]:
    latest = checkpointer.latest_step()
    if latest is None:
        return trainer.init(), {"phase": 0, "example_index": 0}
    logging.info("resuming from %s/%d", checkpointer.directory, latest)
    return checkpointer.restore(trainer.abstract_state, latest)


def _train_phase(
    trainer: Trainer,
    state: TrainState,
    batches: Iterator[Batch],
    end_step: int,
    num_steps: int,
    seq_length: int,
    batch_size: int,
    index: int,
    phase: int,
    checkpointer: Checkpointer,
    writer: MetricWriter,
    log_every: int,
    checkpoint_every: int,
    task: PretrainingTask,
    show_progress: bool,
) -> tuple[TrainState, int, dict]:
    step = int(state.step)
    progress = ProgressBar(num_steps, step, task.progress, enabled=show_progress)
    tokens_per_step = batch_size * seq_length
    last_time, last_step, scalars = time.perf_counter(), step, {}
    while step < end_step:
        state, metrics = trainer.step(state, trainer.device_batch(next(batches)))
        step += 1
        index += batch_size
        if step % log_every == 0 or step == end_step:
            now = time.perf_counter()
            scalars = {k: float(v) for k, v in jax.device_get(metrics).items()}
            scalars["tokens_per_second"] = tokens_per_step * (step - last_step) / (now - last_time)
            scalars["seq_length"] = seq_length
            writer.write(step, scalars)
            progress.update(step, scalars)
            last_time, last_step = now, step
        else:
            progress.update(step, None)
        if step % checkpoint_every == 0 and step < num_steps:
            checkpointer.save(step, state, {"phase": phase, "example_index": index})
    progress.close()
    return state, index, scalars
