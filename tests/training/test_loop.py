"""End-to-end training on real text: loss falls; save, restore and continue is exact."""

import json

import jax
import numpy as np
import pytest

from bertjax.data.bert.source import BertPretrainingSource
from bertjax.models.bert import bert_config
from bertjax.objectives.pretraining import bert_pretraining
from bertjax.training import Job, run
from bertjax.training.checkpoint import Checkpointer
from bertjax.training.experiment import Experiment
from bertjax.training.loop import build_trainer, phase_plan
from bertjax.training.mesh import make_mesh
from bertjax.training.optim import make_optimizer

SEQ = 64


@pytest.fixture(scope="module")
def wikitext_source(tmp_path_factory, wikitext_valid):
    source = BertPretrainingSource(
        corpus=str(wikitext_valid), corpus_format="plain", vocab_size=4000
    )
    source.prepare(tmp_path_factory.mktemp("vocab"))
    return source


def tiny_task(source):
    config = bert_config("tiny", vocab_size=source.vocab_size, max_position_embeddings=SEQ)
    return bert_pretraining(config)


def train(workdir, source, num_steps, lr=2e-3, phases=((1.0, SEQ),), devices=2):
    exp = Experiment(
        tiny_task(source),
        source,
        make_optimizer(learning_rate=lr, warmup_steps=5, total_steps=60),
        batch_size=16,
        num_steps=num_steps,
        seq_phases=phases,
        log_every=5,
        checkpoint_every=1000,
    )
    return run(Job(exp), workdir, mesh=make_mesh(devices=jax.devices()[:devices]))


@pytest.mark.e2e  # whether it learns; the fast tier's runs check the loop's mechanics
def test_tiny_bert_loss_falls_on_wikitext(wikitext_source, tmp_path):
    result = train(tmp_path, wikitext_source, num_steps=50, devices=1)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    losses = [json.loads(line)["loss"] for line in lines]
    assert len(losses) == 10
    assert np.mean(losses[-2:]) < losses[0] - 1.5, losses
    assert result.step == 50
    assert (tmp_path / "tensorboard").is_dir()


def _params(workdir, source, step):
    task = tiny_task(source)
    tx = make_optimizer(learning_rate=2e-3, warmup_steps=5, total_steps=60)
    mesh = make_mesh(devices=jax.devices()[:2])
    trainer = build_trainer(task, tx, mesh, 16, SEQ)
    checkpointer = Checkpointer(workdir)
    state, data = checkpointer.restore(trainer.abstract_state, step)
    checkpointer.close()
    return jax.device_get(state), data


@pytest.mark.e2e  # the fast tier's kill -9 test resumes bit for bit through the CLI
def test_resume_gives_exactly_the_uninterrupted_run(wikitext_source, tmp_path):
    train(tmp_path / "straight", wikitext_source, num_steps=12)
    train(tmp_path / "resumed", wikitext_source, num_steps=6)
    result = train(tmp_path / "resumed", wikitext_source, num_steps=12)
    assert result.start_step == 6
    straight, data_a = _params(tmp_path / "straight", wikitext_source, 12)
    resumed, data_b = _params(tmp_path / "resumed", wikitext_source, 12)
    assert data_a == data_b == {"phase": 0, "example_index": 12 * 16}
    for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed), strict=True):
        np.testing.assert_array_equal(a, b)


def test_sequence_length_phases(wikitext_source, tmp_path):
    assert phase_plan(10, ((0.9, 128), (0.1, 512))) == [(9, 128), (10, 512)]
    result = train(tmp_path, wikitext_source, num_steps=4, phases=((0.5, 32), (0.5, SEQ)),
                   devices=1)
    assert result.step == 4 and result.metrics["seq_length"] == SEQ
    _, data = _params(tmp_path, wikitext_source, 4)
    assert data == {"phase": 1, "example_index": 2 * 16}


def test_a_failed_run_releases_its_data_pipeline_at_once(wikitext_source, tmp_path,
                                                        monkeypatch):
    """A run failing at its first batch has closed its batches when the error leaves `run`,
    though the error's traceback still holds the loop's frames: the generator feeding tf.data
    is finalized then, and not at interpreter exit, where TensorFlow logs an error under a
    tool's one-line message."""
    finalized = []
    blocks = wikitext_source.example_blocks

    def watched(*args):
        try:
            yield from blocks(*args)
        finally:
            finalized.append(True)

    def unusable(*args):
        raise ValueError("a batch the run cannot use")

    monkeypatch.setattr(wikitext_source, "example_blocks", watched)
    monkeypatch.setattr(wikitext_source, "padded_length", unusable)
    with pytest.raises(ValueError, match="cannot use") as failure:
        train(tmp_path, wikitext_source, num_steps=2, devices=1)
    assert failure.traceback and finalized == [True]


@pytest.fixture(scope="module")
def straight_on_8(wikitext_source, tmp_path_factory):
    """The uninterrupted 10-step run on 8 devices: (workdir, result), shared by both meshes."""
    workdir = tmp_path_factory.mktemp("straight_on_8")
    return workdir, train(workdir, wikitext_source, num_steps=10, devices=8)


# 8 -> 4 in the end-to-end tier: the fast tier reshards 8 -> 4 in tests/training/test_bptt.py
@pytest.mark.parametrize("devices", [1, pytest.param(4, marks=pytest.mark.e2e)])
def test_checkpoint_of_8_devices_continues_on_fewer(wikitext_source, straight_on_8, tmp_path,
                                                    devices):
    """Saved on 8 devices, resumed on `devices`: the run continues where it stopped, on the
    same examples, and its losses equal the uninterrupted 8-device run's (up to the order of
    reductions, which differs between meshes)."""
    straight_dir, straight = straight_on_8
    train(tmp_path / "moved", wikitext_source, num_steps=5, devices=8)
    moved = train(tmp_path / "moved", wikitext_source, num_steps=10, devices=devices)
    assert (moved.start_step, moved.step) == (5, 10)
    assert abs(moved.metrics["loss"] - straight.metrics["loss"]) < 1e-4
    a, data_a = _params(straight_dir, wikitext_source, 10)
    b, data_b = _params(tmp_path / "moved", wikitext_source, 10)
    assert data_a == data_b == {"phase": 0, "example_index": 160}
    diff = jax.tree.map(lambda x, y: float(np.abs(x - y).max()), a.params, b.params)
    assert max(jax.tree.leaves(diff)) < 1e-2
