"""End-to-end training on real text: loss falls; save, restore and continue is exact."""

import json

import jax
import numpy as np
import pytest

from bertjax.data.pipeline import BertPretrainingSource
from bertjax.models.bert import bert_config
from bertjax.objectives.pretraining import bert_pretraining_task
from bertjax.training.checkpoint import Checkpointer
from bertjax.training.loop import build_trainer, phase_plan, run_training
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
    return bert_pretraining_task(config)


def train(workdir, source, num_steps, lr=2e-3, phases=((1.0, SEQ),)):
    return run_training(
        workdir,
        tiny_task(source),
        source,
        make_optimizer(learning_rate=lr, warmup_steps=5, total_steps=60),
        make_mesh(devices=jax.devices()[:2]),
        batch_size=16,
        num_steps=num_steps,
        seq_phases=phases,
        log_every=5,
        checkpoint_every=1000,
        show_progress=False,
    )


def test_tiny_bert_loss_falls_on_wikitext(wikitext_source, tmp_path):
    summary = train(tmp_path, wikitext_source, num_steps=50)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    losses = [json.loads(line)["loss"] for line in lines]
    assert len(losses) == 10
    assert np.mean(losses[-2:]) < losses[0] - 1.5, losses
    assert summary["step"] == 50
    assert (tmp_path / "tensorboard").is_dir()


def _params(workdir, source, step):
    task = tiny_task(source)
    tx = make_optimizer(learning_rate=2e-3, warmup_steps=5, total_steps=60)
    mesh = make_mesh(devices=jax.devices()[:2])
    trainer = build_trainer(task, tx, mesh, task.example_batch(16, SEQ))
    checkpointer = Checkpointer(workdir)
    state, data = checkpointer.restore(trainer.abstract_state, step)
    checkpointer.close()
    return jax.device_get(state), data


def test_resume_gives_exactly_the_uninterrupted_run(wikitext_source, tmp_path):
    train(tmp_path / "straight", wikitext_source, num_steps=12)
    train(tmp_path / "resumed", wikitext_source, num_steps=6)
    summary = train(tmp_path / "resumed", wikitext_source, num_steps=12)
    assert summary["start_step"] == 6
    straight, data_a = _params(tmp_path / "straight", wikitext_source, 12)
    resumed, data_b = _params(tmp_path / "resumed", wikitext_source, 12)
    assert data_a == data_b == {"phase": 0, "example_index": 12 * 16}
    for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed), strict=True):
        np.testing.assert_array_equal(a, b)


def test_sequence_length_phases(wikitext_source, tmp_path):
    assert phase_plan(10, ((0.9, 128), (0.1, 512))) == [(9, 128), (10, 512)]
    summary = train(tmp_path, wikitext_source, num_steps=4, phases=((0.5, 32), (0.5, SEQ)))
    assert summary["step"] == 4 and summary["seq_length"] == SEQ
    _, data = _params(tmp_path, wikitext_source, 4)
    assert data == {"phase": 1, "example_index": 2 * 16}
