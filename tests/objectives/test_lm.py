"""Next-token loss against a numpy reference, and a tiny GPT whose held-out perplexity falls."""

import itertools

import jax
import numpy as np
import pytest

from bertjax.data.gpt.source import LmPretrainingSource
from bertjax.models.gpt import gpt_config
from bertjax.objectives.lm import gpt_pretraining, lm_loss
from bertjax.objectives.objective import metric_values
from bertjax.training.loop import build_trainer
from bertjax.training.mesh import make_mesh
from bertjax.training.optim import make_optimizer

pytestmark = pytest.mark.unit  # the unit tier: make test-unit


def test_weighted_loss_matches_numpy_and_perplexity_is_its_exp():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 5, 7)).astype(np.float32)
    targets = rng.integers(0, 7, (2, 5))
    weights = (rng.random((2, 5)) < 0.6).astype(np.float32)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp, targets[..., None], -1)[..., 0]
    expected = (nll * weights).sum() / weights.sum()
    metrics = metric_values(lm_loss(logits, targets, weights))
    loss = metrics["lm_loss"]
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert float(metrics["perplexity"]) == pytest.approx(np.exp(expected), rel=1e-5)
    assert float(metrics["lm_weight"]) == weights.sum()


@pytest.mark.e2e
def test_tiny_gpt_validation_perplexity_falls_on_wikitext(wikitext_valid, tmp_path):
    lines = [line for line in wikitext_valid.read_text(encoding="utf-8").split("\n")
             if line.strip()]
    train_file, valid_file = tmp_path / "train.txt", tmp_path / "valid.txt"
    train_file.write_text("\n\n".join(lines[:-200]), encoding="utf-8")
    valid_file.write_text("\n\n".join(lines[-200:]), encoding="utf-8")
    config = gpt_config("gpt2_tiny", vocab_size=512, max_position_embeddings=32, num_layers=2,
                        hidden_size=64, num_heads=2, mlp_dim=256, dropout_rate=0.0,
                        attention_dropout_rate=0.0)
    train = LmPretrainingSource(str(train_file), vocab="learn", vocab_size=512)
    train.prepare(tmp_path / "run")
    train.save(tmp_path / "run")
    valid = LmPretrainingSource(str(valid_file), vocab=str(tmp_path / "run"), shuffle=False)
    valid.prepare(tmp_path / "run")  # the run's vocabulary, on held-out text

    steps, batch, length = 150, 32, 32
    task = gpt_pretraining(config)
    tx = make_optimizer(learning_rate=3e-3, warmup_steps=20, total_steps=steps)
    trainer = build_trainer(task, tx, make_mesh(), batch, length)
    held_out = list(itertools.islice(valid.batches(0, length, batch), 4))

    def perplexity(state):
        losses = [float(trainer.evaluate(state, trainer.device_batch(b))["loss"])
                  for b in held_out]
        return float(np.exp(np.mean(losses)))

    state = trainer.init()
    before = perplexity(state)
    for b in itertools.islice(train.batches(0, length, batch), steps):
        state, _ = trainer.step(state, trainer.device_batch(b))
    after = perplexity(jax.block_until_ready(state))
    print(f"\nheld-out perplexity {before:.1f} -> {after:.1f}")
    assert before > 300  # about the vocabulary size at initialisation
    assert after < 0.4 * before
