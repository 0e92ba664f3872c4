"""Weight decay on kernels and embeddings only: not biases, LayerNorm scales, ScalarMix weights."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.layers.scalar_mix import ScalarMix
from bertjax.models.bert import bert_config
from bertjax.models.elmo import elmo_config
from bertjax.models.gpt import gpt_config
from bertjax.objectives.bilm import elmo_pretraining
from bertjax.objectives.lm import gpt_pretraining
from bertjax.objectives.pretraining import bert_pretraining
from bertjax.training.optim import decay_mask, make_optimizer

TASKS = {
    "bert": lambda: bert_pretraining(bert_config("tiny")),
    "gpt": lambda: gpt_pretraining(gpt_config("gpt2_tiny")),
    "elmo": lambda: elmo_pretraining(elmo_config("tiny", vocab_size=64)),
}
LAYER_NORMS = ("layer_norm",)  # every LayerNorm in these trees is named *layer_norm


def names(path: tuple) -> tuple[str, ...]:
    return tuple(str(k.key) for k in path)


def expect_decay(path: tuple[str, ...]) -> bool:
    """The rule, stated independently of optim.py: a bias, a LayerNorm gain or a ScalarMix
    weight is not decayed; everything else in these trees is a kernel or an embedding table."""
    *parents, name = path
    in_layer_norm = bool(parents) and any(ln in parents[-1] for ln in LAYER_NORMS)
    if name.endswith("bias") or (name == "scale" and in_layer_norm):
        return False
    if parents and parents[-1].startswith("ScalarMix"):
        return False
    assert name in ("kernel", "embedding", "projection") or name.endswith("kernel"), path
    return True


def cfg_layers(flat: dict) -> int:
    """The number of attention layers in a flattened tree."""
    return sum(p[-2:] == ("attention", "query_kernel") for p in flat)


def boxed_params(task_name: str) -> dict:
    task = TASKS[task_name]()
    return jax.eval_shape(task.init_variables, jax.random.key(0), task.example_batch(1, 8))


@pytest.mark.parametrize("task_name", sorted(TASKS))
def test_decay_mask_follows_the_role_of_every_parameter(task_name):
    params = nn.unbox(boxed_params(task_name))["params"]
    mask = decay_mask(params)
    assert jax.tree.structure(mask) == jax.tree.structure(params)
    flat = {names(p): m for p, m in jax.tree_util.tree_leaves_with_path(mask)}
    for path, decayed in flat.items():
        assert decayed == expect_decay(path), (path, decayed)
    assert any(flat.values()) and not all(flat.values())
    if task_name != "elmo":
        assert cfg_layers(flat) > 0
        attention = [(p[-1], d) for p, d in flat.items() if p[-2:-1] == ("attention",)]
        for name in ("query_bias", "key_bias", "value_bias", "out_bias"):
            assert [d for n, d in attention if n == name] == [False] * cfg_layers(flat), name
        assert [d for n, d in attention if n == "query_kernel"] == [True] * cfg_layers(flat)
        scales = [p for p in flat if p[-1] == "scale"]
        assert scales and all(flat[p] is False for p in scales)


def test_decay_mask_keeps_logically_partitioned_boxes():
    boxed = boxed_params("bert")["params"]
    mask = decay_mask(boxed)
    is_box = lambda x: isinstance(x, nn.LogicallyPartitioned)  # noqa: E731
    assert jax.tree.structure(mask, is_leaf=is_box) == jax.tree.structure(boxed, is_leaf=is_box)
    boxes = jax.tree.leaves(boxed, is_leaf=is_box)
    flags = jax.tree.leaves(mask, is_leaf=is_box)
    assert all(is_box(f) and f.names == b.names for f, b in zip(flags, boxes, strict=True))
    unboxed = nn.unbox(mask)
    assert unboxed == decay_mask(nn.unbox(boxed))
    assert unboxed["mlm_bias"] is False and unboxed["mlm_transform"]["kernel"] is True


def test_scalar_mix_weights_are_not_decayed():
    layers_KxBxTxF = jnp.ones((3, 1, 2, 4))
    params = ScalarMix(3).init(jax.random.key(0), layers_KxBxTxF)["params"]
    assert decay_mask(params) == {"scalars": False, "gamma": False}


def test_adamw_update_shrinks_kernels_only():
    params = {
        "dense": {"kernel": jnp.ones((2, 3)), "bias": jnp.ones(3)},
        "attention": {"query_kernel": jnp.ones((2, 1, 3)), "query_bias": jnp.ones((1, 3))},
        "layer_norm": {"scale": jnp.ones(3), "bias": jnp.ones(3)},
        "embedding": {"embedding": jnp.ones((4, 2))},
        "mlm_bias": jnp.ones(4),
    }
    tx = make_optimizer(
        weight_decay=0.5, learning_rate=1.0, warmup_steps=0, total_steps=10, clip_norm=None
    )
    zeros = jax.tree.map(jnp.zeros_like, params)
    updates, _ = tx.update(zeros, tx.init(params), params)
    new = jax.tree.map(lambda p, u: p + u, params, updates)
    # lr 1.0 at step 0 (no warmup), decay 0.5: a decayed weight becomes 1 - 1.0 * 0.5 * 1.
    for path, value in jax.tree_util.tree_leaves_with_path(new):
        name = names(path)[-1]
        expected = 0.5 if name.endswith("kernel") or name == "embedding" else 1.0
        np.testing.assert_allclose(value, expected, err_msg=str(names(path)))


def test_frozen_subtrees_get_no_update_and_no_state():
    params = {"encoder": {"kernel": jnp.ones((3, 3))}, "head": {"kernel": jnp.ones((3, 2))}}
    tx = make_optimizer(learning_rate=0.1, warmup_steps=0, total_steps=10, clip_norm=1.0,
                        frozen=("encoder",))
    state = tx.init(params)
    grads = jax.tree.map(jnp.ones_like, params)
    updates, _ = tx.update(grads, state, params)
    assert float(jnp.abs(updates["encoder"]["kernel"]).max()) == 0.0
    assert float(jnp.abs(updates["head"]["kernel"]).min()) > 0.0
    sizes = [x.size for x in jax.tree.leaves(state) if hasattr(x, "size") and x.ndim]
    assert sum(sizes) == 2 * 3 * 2  # Adam's two moments of the head only
