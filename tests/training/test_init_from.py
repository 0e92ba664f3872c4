"""Trainer.init_from: a fine-tuning run's first state, drawing only what the pretrained model
does not fill, is the state that initialising everything and then overwriting gives, bit for
bit, with the same shardings."""

import jax
import numpy as np
import pytest

from bertjax.finetune.heads.bert import bert_finetuning, with_pretrained_encoder
from bertjax.finetune.outputs import CLASSES
from bertjax.models.bert import bert_config
from bertjax.training.loop import build_trainer
from bertjax.training.mesh import make_mesh
from bertjax.training.optim import make_optimizer


@pytest.fixture(scope="module")
def trainer():
    config = bert_config("tiny", vocab_size=128, max_position_embeddings=64)
    tx = make_optimizer(learning_rate=1e-3, warmup_steps=2, total_steps=10)
    mesh = make_mesh(data=2, model=2, devices=jax.devices()[:4])
    return build_trainer(bert_finetuning(config, CLASSES, 3), tx, mesh, 8, 32, seed=3)


def pretrained_encoder(trainer, seed=0):
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: rng.standard_normal(s.shape).astype(np.float32),
                        trainer.abstract_state.params["bert"])


def initialised_then_overwritten(trainer, initial_params):
    state = trainer.init()
    params = jax.device_put(initial_params(state.params), trainer.state_shardings.params)
    return state.replace(params=params)


def assert_same_state(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.sharding == y.sharding
        np.testing.assert_array_equal(jax.device_get(x), jax.device_get(y))


def test_the_head_is_drawn_and_the_encoder_is_the_pretrained_one(trainer):
    encoder = pretrained_encoder(trainer)
    fill = lambda params: with_pretrained_encoder(params, encoder)  # noqa: E731
    state = trainer.init_from(fill)
    assert_same_state(state, initialised_then_overwritten(trainer, fill))
    kernel = state.params["bert"]["encoder"]["layer_0"]["mlp"]["wi"]["kernel"]
    np.testing.assert_array_equal(jax.device_get(kernel),
                                  encoder["encoder"]["layer_0"]["mlp"]["wi"]["kernel"])


def test_a_leaf_left_abstract_inside_the_encoder_is_drawn_too(trainer):
    """As ELMo's task model keeps its own one-row softmax: the leaf stays as given and is
    drawn with the same values a full initialisation gives it."""
    encoder = pretrained_encoder(trainer, seed=1)

    def fill(params):
        filled = with_pretrained_encoder(params, encoder)
        embeddings = dict(filled["bert"]["embeddings"])
        embeddings["word_embeddings"] = params["bert"]["embeddings"]["word_embeddings"]
        return {**filled, "bert": {**filled["bert"], "embeddings": embeddings}}

    assert_same_state(trainer.init_from(fill), initialised_then_overwritten(trainer, fill))


def test_a_model_filled_entirely_draws_nothing(trainer):
    everything = jax.tree.map(lambda s: np.full(s.shape, 0.5, s.dtype),
                              trainer.abstract_state.params)
    state = trainer.init_from(lambda params: everything)
    assert_same_state(state, initialised_then_overwritten(trainer, lambda params: everything))
