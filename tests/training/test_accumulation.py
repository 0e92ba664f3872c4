"""Gradient accumulation is the full-batch step, for every family's loss: the micro-batches
divide their weighted sums by the whole batch's weights, so accum_steps=4 gives the loss,
the gradients and the metrics of accum_steps=1 to float32 rounding however unevenly the
weights fall (masked positions per row, packed slots, padding, sentence lengths, words).
Averaging the micro-batches' means, as the step did, weighs a micro-batch of few targets as
much as one of many."""

import flax.linen as nn
import jax
import numpy as np
import optax
import pytest

from bertjax.finetune.heads.bert import bert_finetuning
from bertjax.finetune.heads.elmo import ElmoTaskSettings, elmo_task_objective
from bertjax.finetune.heads.gpt import gpt_finetuning
from bertjax.finetune.outputs import CLASSES, SPANS, WORD_CLASSES
from bertjax.finetune.packed import PackedArraySource
from bertjax.models.bert import bert_config
from bertjax.models.elmo import elmo_config
from bertjax.models.gpt import gpt_config
from bertjax.objectives.bilm import elmo_pretraining
from bertjax.objectives.lm import gpt_pretraining
from bertjax.objectives.pretraining import bert_ltr_pretraining, bert_pretraining
from bertjax.training.state import create_state
from bertjax.training.step import train_step
from tests.finetune import test_packed as packed_classes
from tests.objectives import test_packed_pretraining as packed_pretraining

B, L, V = 8, 16, 60
NO_DROPOUT = dict(dropout_rate=0.0, attention_dropout_rate=0.0)
SMALL = dict(num_layers=1, hidden_size=32, num_heads=2, mlp_dim=64)


def bert(**overrides):
    return bert_config("tiny", vocab_size=V, max_position_embeddings=L, **SMALL, **NO_DROPOUT,
                       **overrides)


LENGTHS = np.array([L, 3, L - 1, 4, L // 2, L, 3, L - 3], np.int32)  # uneven micro-batches


def padded_ids(rng):
    mask = (np.arange(L) < LENGTHS[:, None]).astype(np.int32)
    return rng.integers(5, V, (B, L)).astype(np.int32) * mask, mask


def bert_packed_pretraining(rng):
    packed, _, vocab_size = packed_pretraining.batches()
    assert len(packed["input_ids"]) == B
    config = bert_config("tiny", vocab_size=vocab_size, **SMALL, **NO_DROPOUT,
                         max_position_embeddings=packed_pretraining.LENGTH)
    return bert_pretraining(config, packed_sequences=packed_pretraining.K), packed


def bert_ltr(rng):
    ids, mask = padded_ids(rng)
    return bert_ltr_pretraining(bert()), {"input_ids": ids, "input_mask": mask,
                                          "segment_ids": np.zeros_like(ids)}


def gpt_lm(rng):
    config = gpt_config("gpt2_tiny", vocab_size=V, max_position_embeddings=L, **SMALL,
                        **NO_DROPOUT)
    ids, mask = padded_ids(rng)
    return gpt_pretraining(config), {"input_ids": ids, "target_ids": np.roll(ids, -1, 1),
                                     "loss_weights": mask.astype(np.float32)}


def elmo_sentences(rng):
    config = elmo_config("tiny", vocab_size=V, cell_size=32, proj_size=8, token_encoder="word",
                         dropout_rate=0.0)
    ids, _ = padded_ids(rng)
    return elmo_pretraining(config), {"token_ids": ids, "lengths": LENGTHS}


def bert_packed_classes(rng):
    source = PackedArraySource(packed_classes.encoded(40, labels=3), packed_classes.K, seed=0)
    batch = source.batch(source.members(0, B))
    assert len(set(batch["sequence_weights"].sum(1))) > 1  # rows of 1, 2, 3 ... examples
    config = bert_config("tiny", vocab_size=300, max_position_embeddings=32, **SMALL,
                         **NO_DROPOUT)
    return bert_finetuning(config, CLASSES, num_labels=3,
                           packed_sequences=packed_classes.K), batch


def bert_words(rng):
    ids, mask = padded_ids(rng)
    words = mask * (rng.random((B, L)) < 0.6)
    return bert_finetuning(bert(), WORD_CLASSES, num_labels=5), {
        "input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids),
        "labels": rng.integers(0, 5, (B, L)).astype(np.int32),
        "label_weights": words.astype(np.float32)}


def bert_spans(rng):
    ids, mask = padded_ids(rng)
    ends = mask.sum(1) - 1
    return bert_finetuning(bert(), SPANS), {
        "input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids),
        "start_position": (ends // 2).astype(np.int32), "end_position": ends.astype(np.int32)}


def gpt_classes_with_lm(rng):
    config = gpt_config("gpt2_tiny", vocab_size=V, max_position_embeddings=L, **SMALL,
                        **NO_DROPOUT)
    ids, mask = padded_ids(rng)
    objective = gpt_finetuning(config, "classification", CLASSES, 3, lm_coef=0.5,
                               classifier_dropout=0.0)
    return objective, {"input_ids": ids[:, None], "input_mask": mask[:, None],
                       "label": rng.integers(0, 3, B).astype(np.int32)}


def elmo_classes_with_penalty(rng):
    config = elmo_config("tiny", vocab_size=V, cell_size=32, proj_size=8, token_encoder="word",
                         dropout_rate=0.0)
    settings = ElmoTaskSettings(l2_coef=1.0, elmo_dropout=0.0, dropout_rate=0.0,
                                hidden_size=16)
    ids, _ = padded_ids(rng)
    return elmo_task_objective(config, CLASSES, 3, settings), {
        "token_ids": ids, "lengths": LENGTHS,
        "label": rng.integers(0, 3, B).astype(np.int32)}


# The fast tier takes one of each kind of term; the end-to-end tier the rest.
FAMILIES = [bert_packed_pretraining, elmo_sentences, bert_packed_classes, gpt_classes_with_lm,
            elmo_classes_with_penalty,
            *(pytest.param(f, marks=pytest.mark.e2e) for f in (bert_ltr, gpt_lm, bert_words,
                                                               bert_spans))]


def sgd_steps(objective, batch):
    """(metrics, gradients) of one step on the whole batch and of one in 4 micro-batches,
    compiled together: with SGD at rate 1 the update is the gradient."""
    params = nn.unbox(jax.jit(objective.init_variables)(jax.random.key(0), batch)["params"])
    tx = optax.sgd(1.0)
    state = create_state(params, tx, seed=0)

    @jax.jit
    def steps(state, batch):
        return [train_step(state, batch, loss_fn=objective.loss_fn, tx=tx, accum_steps=accum)
                for accum in (1, 4)]

    results = []
    for new, metrics in jax.device_get(steps(state, batch)):
        grads = jax.tree.map(lambda a, b: a - b, params, new.params)
        results.append(({k: float(v) for k, v in metrics.items()}, grads))
    return results


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.__name__)
def test_accumulated_step_is_the_full_batch_step(family):
    objective, batch = family(np.random.default_rng(0))
    (full, grads_full), (accumulated, grads_accum) = sgd_steps(objective, batch)
    assert np.isfinite(full["loss"]) and full["loss"] > 0 and full["grad_norm"] > 0
    assert set(objective.loss_fn.weights(batch)) == set(objective.loss_fn.terms)
    assert accumulated.keys() == full.keys()
    for name, value in full.items():
        if name != "grad_norm":
            assert accumulated[name] == pytest.approx(value, rel=2e-5, abs=1e-6), name
    scale = max(float(np.abs(g).max()) for g in jax.tree.leaves(grads_full))
    for a, b in zip(jax.tree.leaves(grads_accum), jax.tree.leaves(grads_full), strict=True):
        np.testing.assert_allclose(np.asarray(a) / scale, np.asarray(b) / scale, atol=2e-5)

