"""Packed fine-tuning rows (bertjax/finetune/packed.py): every example once per epoch, the same
per-example logits and gradients as unpacked, and a packed bertjax-finetune run that trains."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from bertjax.finetune.heads.bert import bert_finetuning
from bertjax.finetune.outputs import CLASSES, SCORE
from bertjax.finetune.packed import PackedArraySource
from bertjax.models.bert import bert_config

L, K = 32, 4


def encoded(n=64, seed=0, labels=4):
    """Classification arrays: rows of 3..20 real tokens, [CLS] first; every other row a
    sentence pair, [CLS] a [SEP] b [SEP] with segment id 1 on b [SEP] (as in MRPC or RTE)."""
    rng = np.random.default_rng(seed)
    ids, mask = np.zeros((n, L), np.int32), np.zeros((n, L), np.int32)
    segments = np.zeros_like(ids)
    for r, length in enumerate(rng.integers(3, 21, n)):
        ids[r, :length] = rng.integers(5, 300, length)
        ids[r, 0], ids[r, length - 1], mask[r, :length] = 2, 3, 1
        if r % 2 and length >= 5:  # a and b at least one token each
            second = rng.integers(3, length - 1)  # where b starts
            ids[r, second - 1], segments[r, second:length] = 3, 1
    return {"input_ids": ids, "segment_ids": segments, "input_mask": mask,
            "label": rng.integers(0, labels, n).astype(np.int32)}


def test_every_example_once_per_epoch_and_resumable_rows():
    arrays = encoded(200)
    source = PackedArraySource(arrays, K, seed=3)
    rows = source.epoch_rows(0)
    assert sorted(rows[rows >= 0].tolist()) == list(range(200))
    assert source.examples_per_row() > 2  # 11.5 tokens of 32 on average
    assert source.rows_per_step(32, 2) % 2 == 0
    batches = source.batches(0, L, 16)
    first = [next(batches) for _ in range(12)]  # past the first epoch's rows
    resumed = next(source.batches(16 * 7, L, 16))
    for key, value in resumed.items():
        np.testing.assert_array_equal(value, first[7][key])
    batch = first[0]
    for r in range(16):
        for k in np.flatnonzero(batch["sequence_weights"][r]):
            where = batch["sequence_ids"][r] == k + 1
            example = source.members(0, 16)[r, k]
            n = arrays["input_mask"][example].sum()
            for key in ("input_ids", "segment_ids"):
                np.testing.assert_array_equal(batch[key][r][where], arrays[key][example, :n])
            assert batch["label"][r, k] == arrays["label"][example]
            assert batch["cls_positions"][r, k] == np.flatnonzero(where)[0]


@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("output", [CLASSES, SCORE], ids=["classes", "score"])
def test_packed_rows_give_the_unpacked_logits_and_gradients(output, pooling):
    """Read at each example's [CLS], or (finetune.pooling = 'mean') averaged over each
    example's own tokens of the row."""
    arrays = encoded(24)
    if output is SCORE:
        arrays["label"] = np.linspace(0.0, 5.0, 24, dtype=np.float32)
    source = PackedArraySource(arrays, K, seed=0)
    members = source.members(0, 8)
    packed = source.batch(members)
    order = members[members >= 0]
    unpacked = {k: v[order] for k, v in arrays.items()}
    config = bert_config("tiny", vocab_size=300, max_position_embeddings=L, dropout_rate=0.0,
                         attention_dropout_rate=0.0)
    plain = bert_finetuning(config, output, num_labels=4, pooling=pooling)
    with_packing = bert_finetuning(config, output, num_labels=4, packed_sequences=K,
                                   pooling=pooling)
    params = nn.unbox(plain.init_variables(jax.random.key(0), unpacked)["params"])

    logits_u = jax.jit(plain.model.apply)({"params": params}, unpacked["input_ids"],
                                          unpacked["segment_ids"], unpacked["input_mask"])
    logits_p = jax.jit(with_packing.model.apply)(
        {"params": params}, packed["input_ids"], packed["segment_ids"], packed["input_mask"],
        packing={k: packed[k] for k in ("position_ids", "sequence_ids", "cls_positions")})
    np.testing.assert_allclose(np.asarray(logits_p)[packed["sequence_weights"] > 0],
                               logits_u, rtol=2e-5, atol=2e-6)

    grad = lambda objective: jax.jit(jax.value_and_grad(  # noqa: E731
        lambda p, b: objective.loss_fn(p, b, None), has_aux=True))
    (loss_u, _), grads_u = grad(plain)(params, unpacked)
    (loss_p, _), grads_p = grad(with_packing)(params, packed)
    np.testing.assert_allclose(loss_p, loss_u, rtol=1e-5)
    scale = max(float(np.abs(g).max()) for g in jax.tree.leaves(grads_u))
    for g_u, g_p in zip(jax.tree.leaves(grads_u), jax.tree.leaves(grads_p), strict=True):
        np.testing.assert_allclose(np.asarray(g_p) / scale, np.asarray(g_u) / scale, atol=2e-5)


def test_the_last_layer_of_a_packed_classifier_computes_only_the_cls_positions():
    """A [CLS] head on packed rows reads K positions of each row: the last layer computes those
    queries alone (their keys and values over the row), as an unpacked head computes [CLS]
    alone. Of BERT-tiny's two layers, the last then costs about a fifth of a full one."""
    from bertjax.models.bert import BertModel

    source = PackedArraySource(encoded(24), K, seed=0)
    packed = source.batch(source.members(0, 8))
    model = BertModel(bert_config("tiny", vocab_size=300, max_position_embeddings=L))
    inputs = [packed[k] for k in ("input_ids", "segment_ids", "input_mask", "position_ids")]
    layout = {k: packed[k] for k in ("sequence_ids", "cls_positions")}
    params = model.init(jax.random.key(0), *inputs, **layout)

    def flops(summary_only):
        pooled = lambda p: model.apply(p, *inputs, summary_only=summary_only,  # noqa: E731
                                       **layout)["pooled_output"]
        return jax.jit(pooled).lower(params).compile().cost_analysis()["flops"]

    assert flops(True) < 0.7 * flops(False)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_packed_prediction_gives_every_example_its_unpacked_outputs(pooling):
    """Evaluation of a packed run (evaluate.predict_packed) packs its rows too: every example
    gets the logits it gets alone in a padded row, back in the examples' order."""
    from bertjax.finetune.evaluate import predict_batched, predict_packed
    from bertjax.finetune.heads.bert import PACKING_FEATURES

    arrays = encoded(50, seed=1)
    inputs = {k: arrays[k] for k in ("input_ids", "segment_ids", "input_mask")}
    config = bert_config("tiny", vocab_size=300, max_position_embeddings=L)
    objective = bert_finetuning(config, CLASSES, num_labels=4, packed_sequences=K,
                                pooling=pooling)
    params = nn.unbox(objective.init_variables(jax.random.key(0), arrays)["params"])
    shapes = set()

    @jax.jit
    def predict(params, batch):
        shapes.add(batch["input_ids"].shape)
        packing = {k: batch[k] for k in PACKING_FEATURES} if "sequence_ids" in batch else None
        return objective.model.apply({"params": params}, batch["input_ids"],
                                     batch["segment_ids"], batch["input_mask"], packing=packing)

    alone = predict_batched(predict, params, inputs, 16)
    packed = predict_packed(predict, params, inputs, 16, K)
    assert packed.shape == alone.shape == (50, 4)
    np.testing.assert_allclose(packed, alone, rtol=2e-5, atol=2e-6)
    assert min(rows for rows, _ in shapes) < 16  # a packed batch: fewer rows, same examples
