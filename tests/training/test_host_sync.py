"""Where the training loop makes the host wait for the device, and that it waits nowhere else:
a log step's metrics are fetched once the next step is queued (they were fetched right after
their own step, so the host could not queue the next one before it ended), with the very
numbers a replay of the steps gives; and the hosts of a multi-host run agree on stop signals
only at log and checkpoint steps (an allgather after every step used to hold every host until
the step before it ended everywhere), so a signal's checkpoint comes at most
K = min(log_every, checkpoint_every) steps after it. Several hosts are played by one process
whose stop-signal module sees two processes and a fake allgather."""

import dataclasses
import json
import os
import signal
import types

import jax
import numpy as np
import pytest

from bertjax.data.bert.source import BertPretrainingSource
from bertjax.models.bert import bert_config
from bertjax.objectives.pretraining import bert_pretraining
from bertjax.training import Job, loop, preemption, run
from bertjax.training.experiment import Experiment
from bertjax.training.mesh import make_mesh
from bertjax.training.optim import make_optimizer
from bertjax.training.step import StepOptions

SEQ, BATCH = 32, 8
TIMING = ("tokens_per_second", "real_tokens_per_second")  # measured by the host: not replayed


@pytest.fixture(scope="module")
def source(tmp_path_factory, bert_sample):
    source = BertPretrainingSource(corpus=str(bert_sample), vocab_size=512)
    source.prepare(tmp_path_factory.mktemp("vocab"))
    return source


def experiment(source, num_steps, log_every, checkpoint_every=100):
    config = bert_config("tiny", vocab_size=512, max_position_embeddings=SEQ)
    return Experiment(bert_pretraining(config), source,
                      make_optimizer(learning_rate=1e-3, warmup_steps=2, total_steps=20),
                      batch_size=BATCH, num_steps=num_steps, seq_phases=((1.0, SEQ),),
                      log_every=log_every, checkpoint_every=checkpoint_every)


def mesh():
    return make_mesh(devices=jax.devices()[:1])


class Watched:
    """The loop's trainers, their steps recorded in `events` ("step", n) as they are queued;
    `on_step(n)` runs after step n is queued (a test's signal)."""

    def __init__(self, monkeypatch, on_step=lambda n: None):
        self.events, self.metrics, self.on_step = [], {}, on_step
        build = loop.build_trainer

        def build_watched(*args, **kwargs):
            trainer = build(*args, **kwargs)
            return dataclasses.replace(trainer, step=self.step_of(trainer.step))

        monkeypatch.setattr(loop, "build_trainer", build_watched)

    def step_of(self, step):
        def watched(state, batch):
            state, metrics = step(state, batch)
            number = len(self.metrics) + 1
            self.metrics[number] = metrics  # kept alive: fetches are recognised by identity
            self.events.append(("step", number))
            self.on_step(number)
            return state, metrics

        return watched

    @property
    def steps(self):
        return len(self.metrics)

    def watch_fetches(self, monkeypatch):
        """Record ("fetch", n) when step n's metrics are fetched (jax.device_get)."""
        device_get = jax.device_get

        def recording(tree):
            leaves = {id(leaf) for leaf in jax.tree.leaves(tree)}
            for number, metrics in self.metrics.items():
                if id(metrics["loss"]) in leaves:
                    self.events.append(("fetch", number))
            return device_get(tree)

        monkeypatch.setattr(jax, "device_get", recording)


def logged(workdir):
    return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]


def replay(exp, steps, log_every):
    """The metrics of each log step of `exp` from its steps run by hand, fetched at once."""
    trainer = loop.build_trainer(exp.objective, exp.optimizer, mesh(), exp.batch_size, SEQ,
                                 exp.seed, options=StepOptions(dropout_rng=exp.dropout_rng))
    state, rows = trainer.init(), {}
    batches = exp.source.batches(0, SEQ, exp.batch_size)
    for step in range(1, steps + 1):
        state, metrics = trainer.step(state, trainer.device_batch(next(batches)))
        if step % log_every == 0 or step == steps:
            values = {k: float(v) for k, v in jax.device_get(metrics).items()}
            rows[step] = {**values, "param_norm": float(trainer.param_norm(state))}
    return rows


def test_a_log_steps_metrics_are_fetched_after_the_next_step_is_queued(source, tmp_path,
                                                                       monkeypatch):
    """...and the numbers written are those of the log step itself: its loss, its parameter
    norm (taken before the next step took over the state) and its skipped count."""
    watched = Watched(monkeypatch)
    watched.watch_fetches(monkeypatch)
    result = run(Job(experiment(source, num_steps=5, log_every=2)), tmp_path, mesh=mesh())
    assert result.step == 5 and not result.stopped
    for step in (2, 4):
        assert watched.events.index(("fetch", step)) > watched.events.index(("step", step + 1))
    assert watched.events[-1] == ("fetch", 5)  # the run's last log step, at its end
    monkeypatch.undo()

    rows = logged(tmp_path)
    assert [row["step"] for row in rows] == [2, 4, 5]
    want = replay(experiment(source, num_steps=5, log_every=2), 5, 2)
    for row in rows:
        got = {k: v for k, v in row.items() if k not in TIMING}
        assert got == {"step": row["step"], **want[row["step"]], "seq_length": SEQ,
                       "skipped_steps": 0}
        assert all(row[k] > 0 for k in TIMING)
    assert result.metrics == {k: v for k, v in rows[-1].items() if k != "step"}


def test_a_stop_writes_the_stop_steps_metrics_before_its_checkpoint(source, tmp_path,
                                                                   monkeypatch):
    watched = Watched(monkeypatch, on_step=lambda n: n == 3 and os.kill(os.getpid(),
                                                                         signal.SIGTERM))
    result = run(Job(experiment(source, num_steps=50, log_every=2)), tmp_path, mesh=mesh())
    assert result.stopped == "SIGTERM" and result.step == 3 and watched.steps == 3
    assert [row["step"] for row in logged(tmp_path)] == [2, 3]
    assert (tmp_path / "checkpoints" / "3").is_dir()


class TwoHosts:
    """preemption.py as it runs on host 0 of two: `signal_during` is the step during which
    host 1 gets a stop signal (None: never); `agreed` the steps at which they agreed."""

    def __init__(self, monkeypatch, watched, signal_during=None):
        self.agreed = []

        def allgather(mine):
            other = signal_during is not None and watched.steps >= signal_during
            self.agreed.append(watched.steps)
            return np.array([int(mine), int(other)], np.int32)

        monkeypatch.setattr(preemption, "jax", types.SimpleNamespace(process_count=lambda: 2))
        monkeypatch.setattr(preemption, "multihost_utils",
                            types.SimpleNamespace(process_allgather=allgather))


def test_hosts_agree_on_signals_only_at_log_and_checkpoint_steps(source, tmp_path, monkeypatch):
    watched = Watched(monkeypatch)
    hosts = TwoHosts(monkeypatch, watched)
    exp = experiment(source, num_steps=12, log_every=4, checkpoint_every=6)
    result = run(Job(exp), tmp_path, mesh=mesh())
    assert result.step == 12 and not result.stopped
    assert hosts.agreed == [4, 6, 8, 12]  # log steps, checkpoint steps and the last


def test_a_signal_to_another_host_stops_every_host_within_k_steps(source, tmp_path, monkeypatch):
    """K = min(log_every, checkpoint_every) = 4: a signal during step 5 is agreed at step 8,
    where the run saves and stops, its metrics written up to there."""
    watched = Watched(monkeypatch)
    hosts = TwoHosts(monkeypatch, watched, signal_during=5)
    exp = experiment(source, num_steps=50, log_every=4, checkpoint_every=100)
    result = run(Job(exp), tmp_path, mesh=mesh())
    assert result.stopped == "a signal to another host" and result.step == 8
    assert hosts.agreed == [4, 8] and 8 - 5 < min(exp.log_every, exp.checkpoint_every)
    assert (tmp_path / "checkpoints" / "8").is_dir()
    assert [row["step"] for row in logged(tmp_path)] == [4, 8]
