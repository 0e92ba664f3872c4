"""What ELMo's task model reads (Peters et al. 2018; AllenNLP's Elmo module, which the paper's
task models use): the biLM's layers at the words only, its <S> and </S> stripped
(remove_sentence_boundaries), and a task word embedding whose unknown-word row is trained."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.finetune.heads.elmo import (
    FROZEN,
    UNKNOWN_WORD,
    ElmoTaskSettings,
    elmo_task_objective,
)
from bertjax.finetune.outputs import CLASSES, WORD_CLASSES
from bertjax.models.elmo import elmo_config
from bertjax.training.loop import build_trainer
from bertjax.training.mesh import make_mesh
from bertjax.training.optim import make_optimizer

BOS_ID, EOS_ID, VOCAB = 1, 2, 50  # the word biLM's ids of <S> and </S>
WORDS = [5, 2, 3, 6]  # words per sentence


def sentences(objective, seed=0, length=8):
    """A batch of <S> w_1 .. w_n </S> rows: word ids never <S> or </S>, lengths n + 2."""
    rng = np.random.default_rng(seed)
    batch = objective.example_batch(len(WORDS), length)
    batch["token_ids"] = np.zeros((len(WORDS), length), np.int32)
    for row, n in enumerate(WORDS):
        batch["token_ids"][row, :n + 2] = [BOS_ID, *rng.integers(3, VOCAB, n), EOS_ID]
    batch["lengths"] = np.asarray([n + 2 for n in WORDS], np.int32)
    if "word_ids" in batch:
        batch["word_ids"] = np.zeros((len(WORDS), length), np.int32)
        for row, n in enumerate(WORDS):
            batch["word_ids"][row, :n] = rng.integers(2, 20, n)
    return batch


@pytest.mark.parametrize("task", ["classes", "word_classes"])
def test_the_task_model_reads_the_words_not_the_bilms_sentence_boundaries(task):
    """With the mix on the biLM's context-free layer 0, the biLM's vectors of <S> and </S>
    reach the task model only if it reads those positions: AllenNLP strips them, so changing
    them must change no output (tagging: no word's logits, word k at position k)."""
    config = elmo_config("tiny", vocab_size=VOCAB, token_encoder="word")
    objective = elmo_task_objective(config, CLASSES if task == "classes" else WORD_CLASSES, 3)
    batch = sentences(objective)
    params = nn.unbox(objective.init_variables(jax.random.key(0), batch))["params"]
    params["input_mix"]["scalars"] = jnp.asarray([40.0, -40.0, -40.0])  # layer 0 only
    table = params["bilm"]["token_encoder"]["embedding"]
    other = {**params, "bilm": {**params["bilm"], "token_encoder": {"embedding": table.at[
        jnp.asarray([BOS_ID, EOS_ID])].set(jax.random.normal(jax.random.key(1), (2, 64)))}}}
    out = np.asarray(objective.model.apply({"params": params}, batch))
    changed = np.asarray(objective.model.apply({"params": other}, batch))
    if task == "word_classes":
        words = np.arange(out.shape[1])[None, :] < np.asarray(WORDS)[:, None]
        out, changed = out[words], changed[words]
    np.testing.assert_allclose(changed, out, rtol=1e-5, atol=1e-6)


def test_the_unknown_words_vector_is_trained():
    """Every training word is in the task vocabulary, so without word dropout no training
    batch holds the unknown id and its row keeps its random initial value, the vector of
    every dev word training never saw. Word dropout reads known words as unknown: the row
    learns, and padding (id 0) is never dropped in."""
    config = elmo_config("tiny", vocab_size=VOCAB, token_encoder="word")
    rows = {}
    for rate in (0.0, 0.3):
        settings = ElmoTaskSettings(word_embed_dim=8, word_vocab_size=20, word_dropout=rate)
        objective = elmo_task_objective(config, CLASSES, 2, settings)
        tx = make_optimizer(learning_rate=1e-2, warmup_steps=0, total_steps=6, weight_decay=0.0,
                            frozen=FROZEN)
        trainer = build_trainer(objective, tx, make_mesh(devices=jax.devices()[:1]), 4, 8)
        state = trainer.init()
        before = np.asarray(jax.device_get(state.params["word_embed"]["embedding"]))
        for seed in range(4):
            batch = sentences(objective, seed)
            batch["label"] = np.asarray([0, 1, 0, 1], np.int32)
            state, _ = trainer.step(state, trainer.device_batch(batch))
        after = np.asarray(jax.device_get(state.params["word_embed"]["embedding"]))
        rows[rate] = (before, after)
    before, after = rows[0.0]
    np.testing.assert_array_equal(after[UNKNOWN_WORD], before[UNKNOWN_WORD])  # why it exists
    before, after = rows[0.3]
    assert np.abs(after[UNKNOWN_WORD] - before[UNKNOWN_WORD]).max() > 1e-4
    np.testing.assert_array_equal(after[0], before[0])  # padding: never read as a word
