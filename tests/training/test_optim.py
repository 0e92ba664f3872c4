"""Weight decay on kernels and embeddings only: not biases, LayerNorm scales, ScalarMix weights."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
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


# ----------------------------------------------------------------------------- BERT's optimizer


def bert_reference(params, grads_per_step, lr, warmup, total, weight_decay=0.01, eps=1e-6,
                   b1=0.9, b2=0.999, clip=1.0):
    """google-research/bert's optimization.py in numpy, written from its text: create_optimizer
    (polynomial_decay of lr from global_step 0 to 0 at num_train_steps, power 1; below
    num_warmup_steps the rate is init_lr * global_step / num_warmup_steps; clip_by_global_norm
    1.0) and AdamWeightDecayOptimizer.apply_gradients (no bias correction; update = m /
    (sqrt(v) + eps), plus weight_decay_rate * param unless the name matches LayerNorm,
    layer_norm or bias; param -= lr * update). `params`: {TF-style name: array}."""
    import re

    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(x) for k, x in params.items()}
    params = {k: x.astype(np.float64) for k, x in params.items()}
    for global_step, grads in enumerate(grads_per_step):
        decayed = lr * (1.0 - min(global_step, total) / total)
        rate = lr * global_step / warmup if global_step < warmup else decayed
        norm = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads.values()))
        grads = {k: g * clip / max(norm, clip) for k, g in grads.items()}
        for name, g in grads.items():
            m[name] = b1 * m[name] + (1 - b1) * g
            v[name] = b2 * v[name] + (1 - b2) * g * g
            update = m[name] / (np.sqrt(v[name]) + eps)
            if not re.search("LayerNorm|layer_norm|bias", name):
                update = update + weight_decay * params[name]
            params[name] = params[name] - rate * update
    return params


def test_bert_adam_is_google_research_berts_update():
    """Four steps (two of warmup, then decay from step 0's line) of make_optimizer("bert_adam")
    equal the numpy reference of BERT's own optimizer; optax's AdamW (bias-corrected, decay
    after warmup) differs from it, which is why the setting exists."""
    rng = np.random.default_rng(0)
    shapes = {"dense/kernel": (3, 4), "dense/bias": (4,), "LayerNorm/gamma": (4,),
              "LayerNorm/beta": (4,)}
    flax_names = {"dense/kernel": ("dense", "kernel"), "dense/bias": ("dense", "bias"),
                  "LayerNorm/gamma": ("layer_norm", "scale"),
                  "LayerNorm/beta": ("layer_norm", "bias")}
    start = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    grads = [{k: (2.0 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}
             for _ in range(4)]

    def tree(flat):
        out = {}
        for name, value in flat.items():
            outer, inner = flax_names[name]
            out.setdefault(outer, {})[inner] = jnp.asarray(value)
        return out

    def run(tx):
        params = tree(start)
        state = tx.init(params)
        for g in grads:
            updates, state = tx.update(tree(g), state, params)
            params = optax.apply_updates(params, updates)
        return {name: np.asarray(params[o][i]) for name, (o, i) in flax_names.items()}

    expected = bert_reference(start, grads, lr=0.1, warmup=2, total=6)
    ours = run(make_optimizer("bert_adam", 0.1, 2, 6, eps=1e-6, weight_decay=0.01))
    for name in shapes:
        np.testing.assert_allclose(ours[name], expected[name], rtol=1e-5, atol=1e-6)
    adamw = run(make_optimizer("adamw", 0.1, 2, 6, eps=1e-6, weight_decay=0.01))
    assert np.abs(adamw["dense/kernel"] - expected["dense/kernel"]).max() > 1e-3


def test_bert_schedule_decays_from_step_zero_under_its_warmup():
    from bertjax.training.optim import bert_schedule, warmup_linear_decay

    schedule, total, warmup, peak = bert_schedule(2e-5, 10, 100), 100, 10, 2e-5
    expected = [peak * t / warmup if t < warmup else peak * (1 - min(t, total) / total)
                for t in range(total + 2)]
    np.testing.assert_allclose([float(schedule(t)) for t in range(total + 2)], expected,
                               rtol=1e-6, atol=1e-12)
    assert float(warmup_linear_decay(peak, warmup, total)(warmup)) == pytest.approx(peak)
    assert float(schedule(warmup)) == pytest.approx(peak * 0.9)


def test_warmup_share_is_a_one_cycle_over_the_budget():
    from bertjax.training.optim import warmup_linear_decay, warmup_steps_of

    steps = warmup_steps_of(0.1, 1000)
    schedule = warmup_linear_decay(2e-3, steps, 1000)
    assert steps == 100
    np.testing.assert_allclose([schedule(0), schedule(50), schedule(100), schedule(550),
                                schedule(1000)], [0.0, 1e-3, 2e-3, 1e-3, 0.0], atol=1e-9)
    assert warmup_steps_of(0.5, 300) == 150


def test_make_optimizer_warmup_share_replaces_warmup_steps():
    params = {"kernel": jnp.ones((3,)), "bias": jnp.ones((3,))}
    grads = {"kernel": jnp.asarray([0.1, -0.2, 0.3]), "bias": jnp.asarray([0.5, 0.5, -0.5])}

    def updates(**settings):
        tx = make_optimizer(learning_rate=1e-2, total_steps=40, **settings)
        state, out = tx.init(params), []
        for _ in range(12):
            update, state = tx.update(grads, state, params)
            out.append(update)
        return out

    shared = updates(warmup_steps=1000, warmup_share=0.25)  # the share wins: 10 steps
    for a, b in zip(jax.tree.leaves(shared), jax.tree.leaves(updates(warmup_steps=10)),
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    with pytest.raises(ValueError, match="warmup_share is 1.5"):
        make_optimizer(warmup_share=1.5)
