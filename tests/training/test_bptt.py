"""Stream-mode (truncated BPTT) training in the shared loop: the LSTM state is carried from
step to step in the train state, sharded like the batch, checkpointed with it, and restored,
so an interrupted run continues exactly, on the same or on other device counts."""

import shutil

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from bertjax.data.elmo.source import ElmoSource
from bertjax.models.elmo import elmo_config
from bertjax.objectives.bilm import elmo_pretraining
from bertjax.training import Job, run
from bertjax.training.experiment import Experiment
from bertjax.training.mesh import make_mesh
from bertjax.training.optim import make_optimizer

CONFIG = elmo_config("tiny", vocab_size=64, cell_size=16, proj_size=8, token_encoder="word",
                     dropout_rate=0.0)
WORDS = "the a river bank money loan water boat city house tree old new big small".split()


def corpus_file(directory):
    rng = np.random.default_rng(0)
    path = directory / "corpus.txt"
    path.write_text("\n".join(" ".join(rng.choice(WORDS, rng.integers(3, 9)))
                              for _ in range(300)) + "\n")
    return str(path)


def train(workdir, corpus, steps, checkpoint_every=100, devices=2, batch_size=4):
    source = ElmoSource(corpus=corpus, mode="stream", tokenizer="whitespace",
                        vocab_size=CONFIG.vocab_size, max_chars=CONFIG.max_chars, chars=False)
    source.prepare(workdir)
    objective = elmo_pretraining(CONFIG, mode="stream")
    assert objective.carry is not None
    tx = make_optimizer(learning_rate=1e-2, warmup_steps=1, total_steps=10, weight_decay=0.0)
    exp = Experiment(objective, source, tx, batch_size=batch_size, num_steps=steps,
                     seq_phases=((1.0, 6),), log_every=1, checkpoint_every=checkpoint_every)
    return run(Job(exp), workdir, mesh=make_mesh(devices=jax.devices()[:devices]))


def final(workdir):
    manager = ocp.CheckpointManager(workdir / "checkpoints", item_names=("state",))
    step = manager.latest_step()
    restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
    return step, restored.state["params"], restored.state["carry"]


def test_interrupted_stream_run_resumes_with_its_lstm_state(tmp_path):
    corpus = corpus_file(tmp_path)
    straight = train(tmp_path / "straight", corpus, 4, checkpoint_every=2)
    # the run as if it had stopped after step 2: only that checkpoint (state with its carry)
    (tmp_path / "resumed" / "checkpoints").mkdir(parents=True)
    shutil.copytree(tmp_path / "straight" / "checkpoints" / "2",
                    tmp_path / "resumed" / "checkpoints" / "2")
    second = train(tmp_path / "resumed", corpus, 4)
    assert (second.start_step, second.step) == (2, 4)
    assert abs(second.metrics["loss"] - straight.metrics["loss"]) < 1e-5
    step_a, params_a, carry_a = final(tmp_path / "straight")
    step_b, params_b, carry_b = final(tmp_path / "resumed")
    assert step_a == step_b == 4
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), params_a, params_b)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), carry_a, carry_b)
    assert carry_a["carry_h"].shape == (4, 2, 2, 8)  # [batch, layers, directions, projection]
    assert np.abs(carry_a["carry_c"]).max() > 0  # state really is carried


@pytest.fixture(scope="module")
def stream_straight_on_8(tmp_path_factory):
    """(corpus, workdir, result) of the uninterrupted 4-step stream run on 8 devices."""
    directory = tmp_path_factory.mktemp("stream_straight_on_8")
    corpus = corpus_file(directory)
    return corpus, directory / "straight", train(directory / "straight", corpus, 4, devices=8,
                                                 batch_size=8)


@pytest.mark.parametrize("devices", [1, 4])
def test_stream_checkpoint_of_8_devices_continues_on_fewer(stream_straight_on_8, tmp_path,
                                                           devices):
    corpus, straight_dir, straight = stream_straight_on_8
    train(tmp_path / "moved", corpus, 2, devices=8, batch_size=8)
    moved = train(tmp_path / "moved", corpus, 4, devices=devices, batch_size=8)
    assert (moved.start_step, moved.step) == (2, 4)
    assert abs(moved.metrics["loss"] - straight.metrics["loss"]) < 1e-4
    _, _, carry_a = final(straight_dir)
    _, _, carry_b = final(tmp_path / "moved")
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-4), carry_a, carry_b)


def test_stream_mode_refuses_gradient_accumulation():
    objective = elmo_pretraining(CONFIG, mode="stream")
    with pytest.raises(ValueError, match="train.accum_steps = 1"):
        Experiment(objective, None, make_optimizer(), 4, 2, ((1.0, 6),), accum_steps=2)
