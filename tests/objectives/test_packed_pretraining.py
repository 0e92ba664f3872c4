"""A packed batch trains on exactly what the same instances unpacked give: the same MLM logits
at every target, the same NSP logits per instance and the same gradients (float32, no
dropout), through every attention implementation that runs on the CPU."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bertjax.data.bert.instances import PretrainingConfig, make_stream
from bertjax.data.bert.nsp import Corpus
from bertjax.models.bert import bert_config
from bertjax.objectives.pretraining import bert_pretraining
from tests.data.test_pretraining import synthetic_corpus

LENGTH, K = 64, 3


def batches():
    """8 packed rows (6 of 2+ instances), and their instances unpacked."""
    documents, special = synthetic_corpus(documents=60)
    config = PretrainingConfig(max_seq_length=LENGTH, max_predictions_per_seq=10,
                               packed_sequences=K)
    packed_stream = make_stream(Corpus(documents), special, config, seed=0)
    unpacked_stream = make_stream(Corpus(documents), special,
                                  dataclasses.replace(config, packed_sequences=0), seed=0)
    counts = (packed_stream.rows(0) >= 0).sum(1)
    rows = np.sort(np.concatenate([np.flatnonzero(counts > 1)[:6],
                                   np.flatnonzero(counts == 1)[:2]]))
    members = packed_stream.rows(0)[rows]
    packed = packed_stream.examples(rows)
    order = members[members >= 0]  # instances in row-major slot order
    unpacked = unpacked_stream.examples(np.sort(order))
    unpacked = {k: v[np.searchsorted(np.sort(order), order)] for k, v in unpacked.items()}
    return packed, unpacked, special.vocab_size


def per_instance(objective, params, batch):
    """(per-target MLM cross-entropies in order, NSP logits per instance)."""
    packing = ({k: batch[k] for k in ("position_ids", "sequence_ids", "cls_positions")}
               if "sequence_ids" in batch else None)
    out = jax.jit(objective.model.apply)(
        {"params": params}, batch["input_ids"], batch["segment_ids"], batch["input_mask"],
        batch["masked_lm_positions"], packing=packing)
    weights = batch["masked_lm_weights"] > 0
    xent = optax.softmax_cross_entropy_with_integer_labels(out["mlm_logits"],
                                                           batch["masked_lm_ids"])
    nsp = out["nsp_logits"]
    if "sequence_ids" in batch:
        nsp = nsp[batch["next_sentence_weights"] > 0]
    return xent[weights], nsp


@pytest.mark.parametrize("impl", ["xla", "dot_product"])
def test_packed_rows_give_the_unpacked_losses_and_gradients(impl):
    packed, unpacked, vocab_size = batches()
    assert (packed["next_sentence_weights"].sum(1) > 1).any()  # some rows hold 2+ instances
    config = bert_config("tiny", vocab_size=vocab_size, max_position_embeddings=LENGTH,
                         dropout_rate=0.0, attention_dropout_rate=0.0, attention_impl=impl)
    plain, with_packing = bert_pretraining(config), bert_pretraining(config, packed_sequences=K)
    params = nn.unbox(plain.init_variables(jax.random.key(0), unpacked)["params"])

    xent_u, nsp_u = per_instance(plain, params, unpacked)
    xent_p, nsp_p = per_instance(with_packing, params, packed)
    np.testing.assert_allclose(xent_p, xent_u, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(nsp_p, nsp_u, rtol=2e-5, atol=2e-6)

    grad = lambda objective: jax.jit(jax.value_and_grad(  # noqa: E731
        lambda p, b: objective.loss_fn(p, b, None), has_aux=True))
    (loss_u, metrics_u), grads_u = grad(plain)(params, unpacked)
    (loss_p, metrics_p), grads_p = grad(with_packing)(params, packed)
    np.testing.assert_allclose(loss_p, loss_u, rtol=1e-6)
    assert metrics_p["mlm_weight"] == metrics_u["mlm_weight"]
    # One scale for all: the key bias's gradient is zero up to rounding (softmax ignores a
    # constant per query), so a per-leaf scale would compare noise with noise.
    scale = max(float(jnp.abs(g).max()) for g in jax.tree.leaves(grads_u))
    for (path, g_u), g_p in zip(jax.tree_util.tree_leaves_with_path(grads_u),
                                jax.tree.leaves(grads_p), strict=True):
        np.testing.assert_allclose(np.asarray(g_p) / scale, np.asarray(g_u) / scale,
                                   atol=2e-5, err_msg=jax.tree_util.keystr(path))


def test_a_packed_row_attends_within_its_instances_only():
    """Changing one instance of a row leaves the other instances' outputs untouched."""
    packed, _, vocab_size = batches()
    config = bert_config("tiny", vocab_size=vocab_size, max_position_embeddings=LENGTH,
                         dropout_rate=0.0, attention_dropout_rate=0.0)
    objective = bert_pretraining(config, packed_sequences=K)
    params = nn.unbox(objective.init_variables(jax.random.key(0), packed)["params"])
    row = int(np.argmax(packed["next_sentence_weights"].sum(1)))
    changed = {k: v.copy() for k, v in packed.items()}
    first = packed["sequence_ids"][row] == 1
    changed["input_ids"][row, first] = 7  # rewrite instance 1 of that row
    apply = lambda b: objective.model.apply(  # noqa: E731
        {"params": params}, b["input_ids"], b["segment_ids"], b["input_mask"],
        b["masked_lm_positions"], packing={k: b[k] for k in
                                           ("position_ids", "sequence_ids", "cls_positions")})
    before, after = apply(packed), apply(changed)
    others = packed["next_sentence_weights"][row].copy()
    others[0] = 0
    np.testing.assert_allclose(after["nsp_logits"][row][others > 0],
                               before["nsp_logits"][row][others > 0], rtol=1e-6)
    assert not np.allclose(after["nsp_logits"][row][0], before["nsp_logits"][row][0])
