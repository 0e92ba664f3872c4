"""Stream-mode (truncated BPTT) training: LSTM state carried across steps, sharded like the
batch, checkpointed, and restored so that an interrupted run continues exactly."""

import shutil

import jax
import numpy as np
import orbax.checkpoint as ocp

from bertjax.data.elmo_pipeline import ElmoSource
from bertjax.models.elmo import elmo_config
from bertjax.objectives.bilm import elmo_pretraining_task
from bertjax.training.loop import run_training
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


def train(workdir, corpus, steps, checkpoint_every=100):
    source = ElmoSource(corpus=corpus, mode="stream", tokenizer="whitespace",
                        vocab_size=CONFIG.vocab_size, chars=False)  # a word-encoder model
    source.prepare(workdir)
    task = elmo_pretraining_task(CONFIG, mode="stream")
    assert task.stateful
    tx = make_optimizer(learning_rate=1e-2, warmup_steps=1, total_steps=10, weight_decay=0.0)
    mesh = make_mesh(data=2, devices=jax.devices()[:2])
    return run_training(workdir, task, source, tx, mesh, batch_size=4, num_steps=steps,
                        seq_phases=((1.0, 6),), log_every=1,
                        checkpoint_every=checkpoint_every, show_progress=False)


def final(workdir):
    manager = ocp.CheckpointManager(workdir / "checkpoints", item_names=("state", "carry"))
    step = manager.latest_step()
    restored = manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(), carry=ocp.args.StandardRestore()))
    return step, restored.state["params"], restored.carry


def test_interrupted_stream_run_resumes_with_its_lstm_state(tmp_path):
    corpus = corpus_file(tmp_path)
    straight = train(tmp_path / "straight", corpus, 4, checkpoint_every=2)
    # the run as if it had stopped after step 2: only that checkpoint (state, data, carry)
    (tmp_path / "resumed" / "checkpoints").mkdir(parents=True)
    shutil.copytree(tmp_path / "straight" / "checkpoints" / "2",
                    tmp_path / "resumed" / "checkpoints" / "2")
    second = train(tmp_path / "resumed", corpus, 4)
    assert (second["start_step"], second["step"]) == (2, 4)
    assert abs(second["loss"] - straight["loss"]) < 1e-5
    step_a, params_a, carry_a = final(tmp_path / "straight")
    step_b, params_b, carry_b = final(tmp_path / "resumed")
    assert step_a == step_b == 4
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), params_a, params_b)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), carry_a, carry_b)
    assert carry_a["carry_h"].shape == (4, 2, 2, 8)  # [batch, layers, directions, projection]
    assert np.abs(carry_a["carry_c"]).max() > 0  # state really is carried


def test_stream_mode_refuses_gradient_accumulation(tmp_path):
    source = ElmoSource(corpus=corpus_file(tmp_path), mode="stream", tokenizer="whitespace",
                        vocab_size=CONFIG.vocab_size, chars=False)
    task = elmo_pretraining_task(CONFIG, mode="stream")
    mesh = make_mesh(devices=jax.devices()[:1])
    try:
        run_training(tmp_path / "w", task, source, make_optimizer(), mesh, 4, 2, ((1.0, 6),),
                     accum_steps=2)
    except ValueError as err:
        assert "train.accum_steps = 1" in str(err)
    else:
        raise AssertionError("accum_steps=2 was accepted in stream mode")
