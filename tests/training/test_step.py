"""Sharded train step: same numbers on a (data=4, model=2) mesh as on one device."""

import jax
import numpy as np
import pytest

from bertjax.models.bert import bert_config
from bertjax.objectives.pretraining import bert_pretraining
from bertjax.training.loop import build_trainer
from bertjax.training.mesh import MeshError, check_batch_size, make_mesh
from bertjax.training.optim import make_optimizer


def random_batch(*, vocab_size, batch=8, length=32, predictions=5, seed=0):
    """A BERT pretraining batch whose ids and targets lie in [5, vocab_size): an id outside the
    model's vocabulary looks up a NaN row, and NaN compares equal to NaN in assert_allclose."""
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, length), np.int32)
    mask[::2, length // 2 :] = 0  # half the rows padded
    return {
        "input_ids": rng.integers(5, vocab_size, (batch, length)).astype(np.int32) * mask,
        "segment_ids": (np.arange(length) >= length // 4).astype(np.int32)[None].repeat(batch, 0),
        "input_mask": mask,
        "masked_lm_positions": rng.integers(1, length // 2, (batch, predictions)).astype(np.int32),
        "masked_lm_ids": rng.integers(5, vocab_size, (batch, predictions)).astype(np.int32),
        "masked_lm_weights": (rng.random((batch, predictions)) < 0.8).astype(np.float32),
        "next_sentence_label": rng.integers(0, 2, (batch,)).astype(np.int32),
    }


def run_steps(mesh, steps=3, accum_steps=1, batch=None):
    batch = random_batch(vocab_size=128) if batch is None else batch
    task = bert_pretraining(bert_config("tiny", vocab_size=128, max_position_embeddings=64))
    tx = make_optimizer(learning_rate=1e-3, warmup_steps=2, total_steps=10)
    trainer = build_trainer(task, tx, mesh, *batch["input_ids"].shape, seed=0,
                            accum_steps=accum_steps)
    state = trainer.init()
    for _ in range(steps):
        state, metrics = trainer.step(state, trainer.device_batch(batch))
    return float(metrics["loss"]), jax.device_get(state.params), state


def max_abs_diff(a, b):
    return max(jax.tree.leaves(jax.tree.map(lambda x, y: float(np.abs(x - y).max()), a, b)))


def test_sharded_step_matches_single_device():
    assert len(jax.devices()) == 8, "tests run on 8 fake CPU devices (see tests/conftest.py)"
    loss_1, params_1, _ = run_steps(make_mesh(devices=jax.devices()[:1]))
    loss_8, params_8, state_8 = run_steps(make_mesh(data=4, model=2))
    assert abs(loss_1 - loss_8) < 1e-5
    assert max_abs_diff(params_1, params_8) < 1e-5
    kernel = state_8.params["bert"]["encoder"]["layer_0"]["mlp"]["wi"]["kernel"]
    assert kernel.sharding.spec == jax.sharding.PartitionSpec("fsdp", "model")
    assert len({s.data.shape for s in kernel.addressable_shards}) == 1
    assert kernel.addressable_shards[0].data.shape == (128, 256)  # mlp 512 split over model=2


def test_fsdp_mesh_matches_single_device():
    loss_1, params_1, _ = run_steps(make_mesh(devices=jax.devices()[:1]), steps=2)
    loss_f, params_f, _ = run_steps(make_mesh(data=2, fsdp=4), steps=2)
    assert abs(loss_1 - loss_f) < 1e-5
    assert max_abs_diff(params_1, params_f) < 1e-5


def test_gradient_accumulation_matches_full_batch_without_dropout():
    # With dropout off, 4 micro-batches of 2 give the step of the batch of 8 although their
    # MLM weights differ (each row predicts 2 to 5 of its 5 slots): the micro-batches divide
    # their sums by the whole batch's weight (tests/training/test_accumulation.py: every family).
    batch = random_batch(vocab_size=128)
    assert len(set(batch["masked_lm_weights"].reshape(2, 4, -1).sum((0, 2)))) > 1  # rows i, i+4
    mesh = make_mesh(data=2, devices=jax.devices()[:2])
    task = bert_pretraining(
        bert_config(
            "tiny",
            vocab_size=128,
            dropout_rate=0.0,
            attention_dropout_rate=0.0,
            max_position_embeddings=64,
        )
    )
    tx = make_optimizer(learning_rate=1e-3, warmup_steps=1, total_steps=10)
    results = []
    for accum in (1, 4):
        trainer = build_trainer(task, tx, mesh, *batch["input_ids"].shape, accum_steps=accum)
        state, metrics = trainer.step(trainer.init(), trainer.device_batch(batch))
        results.append((float(metrics["loss"]), jax.device_get(state.params)))
    assert abs(results[0][0] - results[1][0]) < 1e-5
    assert max_abs_diff(results[0][1], results[1][1]) < 1e-5


def test_batch_not_divisible_by_data_parallel_devices():
    with pytest.raises(MeshError, match="not divisible by the 8 data-parallel devices"):
        check_batch_size(12, make_mesh())


def test_num_devices_keeps_the_first_devices():
    mesh = make_mesh(num_devices=2)
    assert list(mesh.devices.flat) == jax.devices()[:2] and mesh.shape["data"] == 2
    for bad in (0, -2, 9):
        with pytest.raises(MeshError, match=f"make_mesh.num_devices={bad}, but 8 devices"):
            make_mesh(num_devices=bad)


def test_mesh_shape_errors():
    with pytest.raises(MeshError, match="needs 6 devices"):
        make_mesh(data=3, model=2)
    with pytest.raises(MeshError, match="only one of"):
        make_mesh(data=-1, model=-1)
