"""The training loop of every family, pretraining and fine-tuning; it jits the train steps.

    train(experiment, workdir, mesh, signals)      (bertjax.training.run calls it, guards held)
      per sequence-length phase: build_trainer -> restore or init -> steps -> checkpoints
    check_run(experiment, mesh, workdir)           what can be refused before anything is written

A step is `(state, batch) -> (state, metrics)`, jitted once per phase with in/out shardings
and the state donated. State an objective carries from step to step (ELMo's LSTM state in
stream mode) lives in the train state, so it is sharded like the batch, saved in every
checkpoint, and part of the very step `bertjax-compile` lowers.
"""

import dataclasses
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, TypeVar

import flax.linen as nn
import jax
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from bertjax import files
from bertjax.files import Path
from bertjax.layers.partitioning import DEFAULT_RULES
from bertjax.objectives.objective import Objective
from bertjax.training import mesh as mesh_lib
from bertjax.training import preemption
from bertjax.training import workdir as workdir_lib
from bertjax.training.checkpoint import Checkpointer, abstract_like
from bertjax.training.evaluation import BestKeeper, Evaluator
from bertjax.training.experiment import Experiment
from bertjax.training.metrics import MetricWriter
from bertjax.training.progress import ProgressBar
from bertjax.training.state import TrainState, create_state
from bertjax.training.step import StepOptions, eval_step, train_step
from bertjax.typing import Params

Batch = dict[str, np.ndarray]
DeviceBatch = dict[str, jax.Array]  # a global batch, sharded over data and fsdp
R = TypeVar("R")


class RunError(ValueError):
    """An experiment that cannot run as configured; the message names the setting to fix."""


@dataclasses.dataclass
class RunResult:
    """How a run ended: its last logged metrics, the steps it covered, its final state."""

    metrics: dict[str, float]
    start_step: int
    step: int
    checkpoint_dir: str
    state: TrainState | None
    stopped: str | None = None  # why the run stopped early ("SIGTERM", ...), saved at `step`
    late_signal: str | None = None  # a stop signal that came after the last step


@dataclasses.dataclass
class Trainer:
    """Jitted, sharded init / step / eval functions for one objective, mesh and batch size."""

    mesh: Mesh
    rules: Sequence
    state_shardings: TrainState  # of NamedShardings
    abstract_state: TrainState  # of ShapeDtypeStructs with their shardings
    init: Callable[[], TrainState]
    step: Callable[[TrainState, DeviceBatch], tuple[TrainState, dict]]
    evaluate: Callable[[TrainState, DeviceBatch], dict]
    reset_carry: Callable[[TrainState], TrainState]
    init_from: Callable[[Callable[[Params], Params]], TrainState]
    param_norm: Callable[[TrainState], jax.Array]

    def device_batch(self, batch: Batch) -> DeviceBatch:
        """Assemble the global batch from this process's rows, split over data and fsdp."""
        sharding = mesh_lib.batch_sharding(self.mesh)
        return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, x), batch)


def _shard_like_params(tree: optax.OptState, params: Params, param_shardings: Params,
                       replicated: NamedSharding) -> optax.OptState:
    """Shardings for an optimizer state (shaped like it, of NamedShardings): params-shaped
    subtrees follow the params' (`param_shardings`, of NamedShardings), the rest replicate."""
    params_def = jax.tree.structure(params)
    is_params = lambda x: jax.tree.structure(x) == params_def  # noqa: E731
    return jax.tree.map(
        lambda x: param_shardings if is_params(x) else replicated, tree, is_leaf=is_params
    )


def _in_context(fn: Callable[..., R], mesh: Mesh, rules: Sequence) -> Callable[..., R]:
    def wrapped(*args: Any) -> R:
        with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
            return fn(*args)

    wrapped.jitted = fn  # for lowering / ahead-of-time compilation
    return wrapped


def build_trainer(
    objective: Objective,
    tx: optax.GradientTransformation,
    mesh: Mesh,
    batch_size: int,
    seq_length: int,
    seed: int = 0,
    accum_steps: int = 1,
    rules: Sequence = DEFAULT_RULES,
    options: StepOptions | None = None,
) -> Trainer:
    """Shardings from logical axis names, then one jit each for init, step, eval, the carry
    reset and the parameter norm. `batch_size` is global (it shapes the carried state, if
    any); `options` how the step is built (training/step.py)."""
    options = options or StepOptions()
    replicated = NamedSharding(mesh, PartitionSpec())
    batch_sharding = mesh_lib.batch_sharding(mesh)
    init_batch = objective.example_batch(1, seq_length)

    def init_boxed_params(rng: jax.Array) -> Params:
        return objective.init_variables(rng, init_batch)["params"]

    def zero_carry() -> dict[str, jax.Array]:
        return objective.carry.zeros(batch_size) if objective.carry else {}

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
        carry={key: batch_sharding for key in zero_carry()},
    )

    def init_state() -> TrainState:
        params = nn.unbox(init_boxed_params(jax.random.key(seed)))
        return create_state(params, tx, seed, zero_carry())

    abstract_state = abstract_like(jax.eval_shape(init_state), state_shardings)
    step_fn = jax.jit(
        partial(train_step, loss_fn=objective.loss_fn, tx=tx, accum_steps=accum_steps,
                options=options),
        in_shardings=(state_shardings, batch_sharding),
        out_shardings=(state_shardings, replicated),
        donate_argnums=0,
    )
    eval_fn = jax.jit(
        partial(eval_step, loss_fn=objective.loss_fn),
        in_shardings=(state_shardings, batch_sharding),
        out_shardings=replicated,
    )
    reset_fn = jax.jit(
        lambda state: state.replace(carry=zero_carry()),
        in_shardings=(state_shardings,), out_shardings=state_shardings, donate_argnums=0,
    )
    init_fn = jax.jit(init_state, out_shardings=state_shardings)
    norm_fn = jax.jit(lambda state: optax.tree.norm(state.params),
                      in_shardings=(state_shardings,), out_shardings=replicated)
    wrap = partial(_in_context, mesh=mesh, rules=rules)
    state_from = wrap(jax.jit(lambda params: create_state(params, tx, seed, zero_carry()),
                              in_shardings=(state_shardings.params,),
                              out_shardings=state_shardings))
    param_shardings = jax.tree.leaves(state_shardings.params)

    def init_from(initial_params: Callable[[Params], Params]) -> TrainState:
        """A fresh state whose parameters `initial_params` fills (e.g. from a pretrained
        model): it is given abstract parameters (ShapeDtypeStructs with their shardings), and
        only the leaves it leaves abstract are drawn. The jitted draw returns just those
        leaves, so XLA drops the random initialisation of everything that was filled: a
        fine-tuning run compiles a head's initialiser, not the whole model's. It runs outside
        the mesh context, as `initial_params` always has (it may compute on arrays of one
        device, e.g. GPT's new token rows)."""
        leaves, treedef = jax.tree.flatten(initial_params(abstract_state.params))
        fresh = [isinstance(leaf, jax.ShapeDtypeStruct) for leaf in leaves]

        def draw() -> list:
            drawn = jax.tree.leaves(nn.unbox(init_boxed_params(jax.random.key(seed))))
            return [leaf for leaf, is_fresh in zip(drawn, fresh, strict=True) if is_fresh]

        drawn = iter(())
        if any(fresh):
            fresh_shardings = [s for s, f in zip(param_shardings, fresh, strict=True) if f]
            drawn = iter(wrap(jax.jit(draw, out_shardings=fresh_shardings))())
        params = [next(drawn) if is_fresh else jax.device_put(leaf, sharding)
                  for leaf, is_fresh, sharding in zip(leaves, fresh, param_shardings,
                                                      strict=True)]
        return state_from(treedef.unflatten(params))

    return Trainer(mesh, rules, state_shardings, abstract_state, wrap(init_fn), wrap(step_fn),
                   wrap(eval_fn), wrap(reset_fn), init_from, wrap(norm_fn))


def phase_plan(num_steps: int, seq_phases: Sequence[tuple[float, int]]) -> list[tuple[int, int]]:
    """[(end_step, seq_length)] from fractions of the run, e.g. ((0.9, 128), (0.1, 512))."""
    plan, end = [], 0
    for i, (fraction, length) in enumerate(seq_phases):
        end = num_steps if i == len(seq_phases) - 1 else end + round(fraction * num_steps)
        plan.append((end, int(length)))
    return plan


# ---------------------------------------------------------------- checks before anything runs


def _check_features(exp: Experiment, seq_length: int) -> None:
    """The data gives every feature the objective reads, with its dtype and rank (the source
    first: it refuses settings its rows cannot hold before the objective's batch is built)."""
    given = exp.source.feature_spec(seq_length, exp.batch_size)
    wanted = exp.objective.example_batch(1, seq_length)
    setting = exp.source.setting
    for name, array in wanted.items():
        if name not in given:
            raise RunError(
                f"{exp.objective.name} reads feature {name!r} but {setting} gives "
                f"{', '.join(sorted(given))}: configure the source and the objective for the same "
                "data (e.g. the same mode)"
            )
        shape, dtype = given[name]
        if np.dtype(dtype) != array.dtype or len(shape) != array.ndim - 1:
            raise RunError(
                f"feature {name!r}: {setting} gives {np.dtype(dtype).name} of shape {tuple(shape)}"
                f" but {exp.objective.name} reads {array.dtype.name} of rank {array.ndim - 1}: "
                "configure the source and the objective for the same data"
            )


def run_facts(exp: Experiment) -> dict[str, Any]:
    """What model.json records of the data a run trains on (a resume announces changes): the
    batch size, the corpus and, for a source that packs rows (BERT pretraining), how many
    sequences a row holds (0: unpacked)."""
    corpus = exp.source.corpus_name
    return {"batch_size": exp.batch_size, **({"corpus": corpus} if corpus else {}),
            **exp.source.row_facts()}


def check_run(exp: Experiment, mesh: Mesh, workdir: Path) -> None:
    """Everything that can be refused before the workdir changes, one line each."""
    mesh_lib.check_batch(exp.batch_size, exp.accum_steps, mesh)
    record = workdir_lib.check_resume(workdir, run_facts(exp))
    family = record["family"] if record else None
    if family not in (None, exp.objective.family):
        raise RunError(f"{workdir} holds a {family.upper()} run, not {exp.objective.family.upper()}"
                       ": use a new --workdir")
    model_vocab = getattr(exp.objective.config, "vocab_size", None)
    if model_vocab is not None and exp.source.vocab_size > model_vocab:
        raise RunError(
            f"the vocabulary has {exp.source.vocab_size} tokens but the model's vocab_size is "
            f"{model_vocab}: set {exp.objective.config_name}.vocab_size >= "
            f"{exp.source.vocab_size}"
        )
    for _, seq_length in phase_plan(exp.num_steps, exp.seq_phases):
        _check_features(exp, seq_length)


# ---------------------------------------------------------------- the run


@dataclasses.dataclass(frozen=True)
class _Schedule:
    """What the steps of a phase read of the experiment: when to log, checkpoint and stop,
    the global batch, the progress bar's labels and the data's padded length. The objective,
    optimizer and source stay with `_train_phases`, which builds the trainer and batches."""

    num_steps: int
    batch_size: int  # global
    log_every: int
    checkpoint_every: int
    labels: tuple  # the objective's progress labels (ProgressBar)
    padded_length: Callable[[Batch, int], int]  # the source's: slots a batch fills per row

    @classmethod
    def of(cls, exp: Experiment) -> "_Schedule":
        return cls(exp.num_steps, exp.batch_size, exp.log_every, exp.checkpoint_every,
                   exp.objective.progress, exp.source.padded_length)


@dataclasses.dataclass
class _RunContext:
    """What every phase of one run shares: its schedule, where it writes, what ends it,
    and where the data stands (`position`, saved in every checkpoint; the phase's
    `batches`, released when the phase or the run ends)."""

    schedule: _Schedule
    workdir: Path
    checkpointer: Checkpointer
    writer: MetricWriter
    guards: "_Guards"
    evaluation: "_Evaluation | None"
    show_progress: bool
    position: dict = dataclasses.field(default_factory=lambda: {"phase": 0, "example_index": 0})
    batches: Iterator[Batch] | None = None


@dataclasses.dataclass
class _Phase:
    """One sequence-length phase: its trainer, length, last step and batches."""

    trainer: Trainer
    seq_length: int
    end_step: int
    batches: Iterator[Batch]


def train(exp: Experiment, workdir: Path, mesh: Mesh, signals: preemption.StopSignals, *,
          show_progress: bool = True, initial_params: Callable[[Params], Params] | None = None,
          evaluator: Evaluator | None = None) -> RunResult:
    """Train `exp` to its num_steps in `workdir`, resuming from its newest checkpoint.

    The caller holds the run's guards (bertjax.training.run: the lease, the `signals` watch),
    has prepared the source and has checked the run (`check_run`, and the workdir's record).
    `initial_params(params) -> params` fills the parameters of a fresh run before its first
    step (a pretrained encoder for fine-tuning): it receives abstract parameters
    (ShapeDtypeStructs carrying their shardings), and the leaves it returns still abstract
    are drawn at random (Trainer.init_from); a resumed run takes its own. An `evaluator` runs
    every `evaluator.every` steps and at the end, and the best evaluation's parameters and
    predictions are kept (see training/evaluation.py).
    """
    # the run holds the workdir's lease: only it sets unreadable checkpoints aside
    checkpointer = Checkpointer(workdir, keep=exp.keep_checkpoints, quarantine=True)
    writer = MetricWriter(workdir)
    guards = _Guards(exp.nonfinite, exp.max_nonfinite, signals, checkpointer)
    run = _RunContext(_Schedule.of(exp), workdir, checkpointer, writer, guards,
                      _Evaluation(evaluator, workdir, writer) if evaluator else None,
                      show_progress)
    summary: dict[str, float]
    state, start_step, summary, stopped = None, 0, {}, None
    try:
        state, start_step, summary, stopped = _train_phases(exp, run, mesh, initial_params)
        if state is not None and int(state.step) > start_step and not stopped:
            checkpointer.save(int(state.step), state, run.position, force=True)
    except OSError as err:  # metrics, events or records on a full disk: path and size
        if not files.is_no_space(err):
            raise
        size = checkpointer.checkpoint_bytes(state) / 2**20
        need = f"a checkpoint of this run takes about {size:.0f} MiB" if size >= 0.5 else ""
        raise RunError(files.no_space_message(
            files.on_full_directory(err, workdir), need,
            f"pass a --workdir on a larger disk; {checkpointer.kept()}")) from None
    finally:
        _release(run.batches)
        _close(checkpointer, writer, failing=sys.exc_info()[0] is not None)
    if run.evaluation is not None and run.evaluation.keeper.results:
        summary = {**summary, **{f"dev_{k}": v for k, v in
                                 run.evaluation.keeper.results.get("final", {}).items()}}
    step = int(state.step) if state is not None else 0
    late = signals.received if not stopped else None  # came after the last step
    return RunResult(summary, start_step, step, str(checkpointer.directory), state, stopped,
                     late)


def _train_phases(exp: Experiment, run: _RunContext, mesh: Mesh,
                  initial_params: Callable[[Params], Params] | None
                  ) -> tuple[TrainState | None, int, dict, str | None]:
    """Every sequence-length phase of `exp` in turn, restoring or initialising the state at
    the first: (state, the step the run started at, the last metrics, why it stopped)."""
    signals = run.guards.signals
    summary: dict[str, float]
    state, start_step, summary, stopped = None, 0, {}, None
    for index, (end_step, length) in enumerate(phase_plan(exp.num_steps, exp.seq_phases)):
        trainer = build_trainer(exp.objective, exp.optimizer, mesh, exp.batch_size, length,
                                exp.seed, exp.accum_steps,
                                options=StepOptions(dropout_rng=exp.dropout_rng))
        signals.check()
        if state is None:
            state, run.position = _restore_or_init(trainer, run.checkpointer, initial_params)
            start_step = int(state.step)
            run.writer.resume_from(start_step)
            run.writer.open()  # before the first step: an unwritable metrics file fails now
            signals.check()
            if start_step == 0 or start_step < exp.num_steps:  # a finished run trains no
                _record(exp, run.workdir)  # step on this data: its record stays as it was
        if int(state.step) >= end_step:
            continue
        if run.position["phase"] != index:  # a new phase starts its stream (and carry) anew
            run.position = {"phase": index, "example_index": 0}
            state = trainer.reset_carry(state)
        _release(run.batches)  # the previous phase's pipeline
        local_batch = exp.batch_size // jax.process_count()
        run.batches = exp.source.batches(run.position["example_index"], length, local_batch)
        state, summary, stopped = _train_phase(run, _Phase(trainer, length, end_step,
                                                           run.batches), state)
        if stopped:
            break
    return state, start_step, summary, stopped


def _close(checkpointer: Checkpointer, writer: MetricWriter, failing: bool) -> None:
    """Finish pending saves and close the metrics. On a run that is `failing`, both are
    tried and their own errors dropped: the error that ended the run (a full disk, say) is
    the one to report, not the same disk refusing the last flush."""
    for close in (checkpointer.close, writer.close):
        try:
            close()
        except Exception:
            if not failing:
                raise


def _release(batches: Iterator[Batch] | None) -> None:
    """Close a phase's batches (a generator, like the sources' `numpy_batches`): its data
    pipeline is released now, even while a failed run's traceback still holds the iterator."""
    close = getattr(batches, "close", None)
    if close is not None:
        close()


class _Guards:
    """What ends a phase early: a stop signal or preemption notice (the run saves and stops),
    or non-finite steps (skipped by the step; too many in a row, or any with
    train.nonfinite = 'stop', fail the run with one line)."""

    def __init__(self, nonfinite: str, max_nonfinite: int, signals: preemption.StopSignals,
                 checkpointer: Checkpointer):
        # train.nonfinite ("skip" or "stop") and train.max_nonfinite (skips in a row)
        self.nonfinite, self.max_nonfinite = nonfinite, max_nonfinite
        self.signals, self.checkpointer = signals, checkpointer
        self.pending: list[tuple[int, Any]] = []  # (step, its nonfinite flag, on device)
        self.in_a_row = self.skipped = 0
        self.failure: str | None = None

    def stop_reason(self, step: int, metrics: dict, agree: bool) -> str | None:
        """Why to stop after `step`; several hosts agree on signals only where `agree`."""
        self.pending.append((step, metrics["nonfinite"]))
        return self.signals.should_stop(step, self.checkpointer.manager, agree=agree)

    def take_flags(self) -> list[tuple[int, Any]]:
        """The nonfinite flags (step, on device) since the last log step, for `count`."""
        flags, self.pending = self.pending, []
        return flags

    def count(self, steps: Sequence[int], bad: Sequence[Any]) -> int:
        """Count the fetched flags of `steps` (at log steps: no host sync per step); the
        skipped count. A step that must end the run is remembered for `raise_failure`, after
        it is logged."""
        for step, flag in zip(steps, bad, strict=True):
            self.in_a_row = self.in_a_row + 1 if flag else 0
            self.skipped += int(flag)
            if flag and (self.nonfinite == "stop" or self.in_a_row >= self.max_nonfinite):
                self.failure = self.failure or (
                    f"the loss or its gradients are not finite at step {step} ({self.in_a_row} "
                    "step(s) in a row, updates skipped): lower make_optimizer.learning_rate or "
                    "check the data; train.nonfinite and train.max_nonfinite set how many to skip")
        return self.skipped

    def raise_failure(self) -> None:
        if self.failure:
            raise RunError(self.failure)


@dataclasses.dataclass
class _LogStep:
    """A log step whose values are still on the device (`metrics`, `param_norm`, the nonfinite
    `flags` of the steps since the previous log step) beside what the host measured at it."""

    step: int
    metrics: dict[str, jax.Array]
    param_norm: jax.Array
    flags: list[tuple[int, Any]]
    host: dict[str, float]  # tokens_per_second, real_tokens_per_second, seq_length


class _OneStepBehind:
    """Writes a log step's metrics once the next step is queued (nanodo's one step behind):
    fetching them right after their own step made the host wait for that step to finish
    before it could queue the next, so the device idled while the host logged, drew the next
    batch and dispatched. `hold` keeps a log step; `write` fetches and writes the one held
    (the loop calls it after dispatching the next step, and before anything that must see
    the metrics: an evaluation, a checkpoint, the end of a phase or a stop). The numbers
    logged are those of the log step itself: its parameter norm is dispatched at that step,
    before the next step takes over (donates) the state."""

    def __init__(self, writer: MetricWriter, guards: _Guards, progress: ProgressBar):
        self.writer, self.guards, self.progress = writer, guards, progress
        self.held: _LogStep | None = None
        self.last: dict[str, float] = {}  # the metrics written last

    def hold(self, entry: _LogStep) -> None:
        self.write()
        self.held = entry

    def write(self) -> dict[str, float]:
        """Fetch and write the held log step (if any); the metrics written last."""
        entry, self.held = self.held, None
        if entry is None:
            return self.last
        metrics, norm, bad = jax.device_get(
            (entry.metrics, entry.param_norm, [flag for _, flag in entry.flags]))
        scalars = {k: float(v) for k, v in metrics.items()}
        scalars.setdefault("param_norm", float(norm))
        scalars.update(entry.host)
        scalars["skipped_steps"] = self.guards.count([step for step, _ in entry.flags], bad)
        self.writer.write(entry.step, scalars)
        self.progress.note(scalars)
        self.last = scalars
        self.guards.raise_failure()
        return scalars


def _restore_or_init(trainer: Trainer, checkpointer: Checkpointer,
                     initial_params: Callable[[Params], Params] | None) -> tuple[TrainState, dict]:
    if checkpointer.latest_step() is not None:  # the newest readable one (see Checkpointer)
        return checkpointer.restore(trainer.abstract_state)
    state = trainer.init() if initial_params is None else trainer.init_from(initial_params)
    return state, {"phase": 0, "example_index": 0}


def _record(exp: Experiment, workdir: Path) -> None:
    """The tokenizer files and model.json, once the run is sure to start (process 0)."""
    tokenizer, facts = exp.source.save(workdir) or {}, run_facts(exp)
    if jax.process_index() == 0:
        workdir_lib.write_record(workdir, exp.objective.family, exp.objective.name,
                                 exp.objective.config, tokenizer, facts)


def _train_phase(run: _RunContext, phase: _Phase, state: TrainState
                 ) -> tuple[TrainState, dict, str | None]:
    """Steps of one phase up to its end (or a stop): (state, the last logged metrics, why it
    stopped); `run.position` follows the data. A log step's metrics are written once the
    step after it is queued (_OneStepBehind), and before an evaluation, a checkpoint and the
    phase's end."""
    plan, guards, trainer, evaluation = run.schedule, run.guards, phase.trainer, run.evaluation
    step, index = int(state.step), run.position["example_index"]
    labels = plan.labels + (evaluation.labels if evaluation else ())
    progress = ProgressBar(plan.num_steps, step, labels, enabled=run.show_progress)
    log = _OneStepBehind(run.writer, guards, progress)
    last_time, stopped = time.perf_counter(), None
    tokens = real_tokens = 0  # token slots (padding included) and real tokens since the last log
    try:
        while step < phase.end_step and not stopped:
            batch = next(phase.batches)
            slots = plan.batch_size * plan.padded_length(batch, phase.seq_length)
            tokens, real_tokens = tokens + slots, real_tokens + _real_tokens(batch, slots)
            state, metrics = trainer.step(state, trainer.device_batch(batch))
            if not guards.signals.training:  # compiled and dispatched: a signal now saves and stops
                guards.signals.started()
            step, index = step + 1, index + plan.batch_size
            run.position = {"phase": run.position["phase"], "example_index": index}
            log.write()  # the previous log step's, now that this step is queued behind it
            log_step = step % plan.log_every == 0 or step == phase.end_step
            checkpoint_step = step % plan.checkpoint_every == 0 and step < plan.num_steps
            stopped = guards.stop_reason(step, metrics, agree=log_step or checkpoint_step)
            progress.update(step, None)
            if log_step or stopped:
                now = time.perf_counter()
                log.hold(_LogStep(step, metrics, trainer.param_norm(state), guards.take_flags(), {
                    "tokens_per_second": tokens / (now - last_time),
                    "real_tokens_per_second": real_tokens / (now - last_time),
                    "seq_length": phase.seq_length}))
                last_time, tokens, real_tokens = now, 0, 0
            if evaluation and (step % evaluation.every == 0 or step == plan.num_steps):
                log.write()
                progress.note(evaluation(step, state))
            if stopped or checkpoint_step:
                log.write()  # metrics.jsonl reaches this step before its checkpoint is saved
                run.checkpointer.save(step, state, run.position, force=bool(stopped))
                run.writer.flush()
        scalars = log.write()  # the phase's last log step
    finally:  # a failing run's one line comes after the bar's, not glued to it
        progress.close()
    return state, scalars, stopped


def _real_tokens(batch: Batch, slots: int) -> int:
    """Real (not padding) tokens of a global batch: its input mask's sum over all hosts (each
    host sees its own rows; hosts' batches are alike in expectation), else every slot."""
    mask = batch.get("input_mask")
    if mask is None:
        return slots
    return int(np.asarray(mask).astype(bool).sum()) * jax.process_count()


class _Evaluation:
    """An Evaluator bound to a run: evaluates, logs dev metrics, keeps the best."""

    def __init__(self, evaluator: Evaluator, workdir: Path, writer: MetricWriter):
        self.evaluator, self.writer = evaluator, writer
        self.keeper = BestKeeper(workdir, evaluator.main_metric)
        self.every = evaluator.every
        self.labels = ((f"dev_{evaluator.main_metric}", f"dev_{evaluator.main_metric[:6]}"),)

    def __call__(self, step: int, state: TrainState) -> dict[str, float]:
        result = self.evaluator.evaluate(state)
        self.keeper.record(step, result, state.params)
        scalars = {f"dev_{k}": v for k, v in result.metrics.items()}
        self.writer.write(step, scalars)
        return scalars
