"""Every attention implementation computes what the XLA path computes: padding, causal masks,
the [CLS]-only last layer and KV-cache decoding, in float32 (tightly) and bfloat16 (as
bfloat16 allows). On the CPU, "dot_product" runs `jax.nn.dot_product_attention`'s XLA
implementation; the cuDNN kernel it selects on GPUs is measured by
benchmarks/accelerator_step.py."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.generation.decode import generate_ids
from bertjax.generation.sampling import Sampling
from bertjax.layers.attention import AttentionMask, MultiHeadAttention
from bertjax.layers.cudnn_attention import cudnn_runs
from bertjax.layers.fused_attention import resolve_impl
from bertjax.layers.transformer import TransformerConfig
from bertjax.models.bert import BertModel, bert_config
from bertjax.models.gpt import GptLM, gpt_config

TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2}  # relative L2 error of the outputs


def relative_error(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def lengths_mask(lengths, total):
    return (jnp.arange(total)[None, :] < jnp.asarray(lengths)[:, None]).astype(jnp.int32)


def apply_attention(impl, dtype, mask, num_queries=None, seed=0):
    layer = MultiHeadAttention(num_heads=4, head_dim=16, implementation=impl, dtype=dtype)
    x = jax.random.normal(jax.random.key(seed), (3, 12, 64))
    params = layer.init(jax.random.key(1), x, mask, True)
    return layer.apply(params, x, mask, True, queries=num_queries)


MASKS = {
    "none": AttentionMask(),
    "padding": AttentionMask(lengths_mask([12, 7, 1], 12), real_tokens_first=True),
    "causal": AttentionMask(causal=True),
    "causal+padding": AttentionMask(lengths_mask([12, 5, 9], 12), causal=True,
                                    real_tokens_first=True),
    "left padding": AttentionMask(1 - lengths_mask([0, 4, 11], 12), causal=True),
    "packed": AttentionMask(lengths_mask([12, 9, 5], 12), real_tokens_first=True,
                            sequence_ids=jnp.array([[1] * 5 + [2] * 4 + [3] * 3,
                                                    [1] * 9 + [0] * 3,
                                                    [1, 1, 2, 2, 2] + [0] * 7]),
                            max_sequences=3),
}


def test_packed_mask_is_block_diagonal_and_laid_out_for_cudnn():
    mask = MASKS["packed"]
    dense = np.asarray(mask.dense(12, 12))[:, 0]
    ids = np.asarray(mask.sequence_ids)
    want = (ids[:, :, None] == ids[:, None, :]) & (ids[:, None, :] > 0)
    np.testing.assert_array_equal(dense, want)
    offsets, lengths = (np.asarray(x) for x in mask.sequence_layout())
    np.testing.assert_array_equal(offsets, [[0, 5, 9, -1], [0, -1, -1, -1], [0, 2, -1, -1]])
    np.testing.assert_array_equal(lengths, [[5, 4, 3], [9, -1, -1], [2, 3, -1]])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("mask_name", list(MASKS))
def test_dot_product_equals_xla(mask_name, dtype):
    mask = MASKS[mask_name]
    want = apply_attention("xla", dtype, mask)
    got = apply_attention("dot_product", dtype, mask)
    real = np.ones(want.shape[:2], bool)
    if mask_name in ("left padding", "packed"):  # a padded query sees nothing it may see
        real = np.asarray(mask.key_mask, bool)
    assert got.dtype == want.dtype == jnp.dtype(dtype)
    assert relative_error(np.asarray(got)[real], np.asarray(want)[real]) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_first_queries_only(dtype):
    """The [CLS]-only last layer: one query over every key, under padding."""
    mask = MASKS["padding"]
    want = apply_attention("xla", dtype, mask)[:, :1]
    got = apply_attention("dot_product", dtype, mask, num_queries=1)
    assert got.shape == (3, 1, 64)
    assert relative_error(got, want) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bert_model_with_padding_and_cls_only(dtype):
    config = bert_config("tiny", vocab_size=300, dtype=dtype, attention_dropout_rate=0.0)
    fused = dataclasses.replace(
        config, transformer=dataclasses.replace(config.transformer, attention_impl="dot_product"))
    ids = jax.random.randint(jax.random.key(0), (4, 16), 5, 300)
    mask = lengths_mask([16, 9, 3, 12], 16)
    params = BertModel(config).init(jax.random.key(1), ids, None, mask)
    for summary_only in (False, True):
        want = BertModel(config).apply(params, ids, None, mask, summary_only=summary_only)
        got = BertModel(fused).apply(params, ids, None, mask, summary_only=summary_only)
        real = np.asarray(mask, bool) if not summary_only else np.ones((4, 1), bool)
        seq_want, seq_got = (np.asarray(o["sequence_output"], np.float32) for o in (want, got))
        assert relative_error(seq_got[real], seq_want[real]) < TOLERANCE[dtype]
        assert relative_error(got["pooled_output"], want["pooled_output"]) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpt_training_forward_and_kv_cache_decode(dtype):
    config = gpt_config("gpt2_tiny", vocab_size=300, dtype=dtype, attention_dropout_rate=0.0)
    fused = dataclasses.replace(
        config, transformer=dataclasses.replace(config.transformer, attention_impl="dot_product"))
    ids = jax.random.randint(jax.random.key(0), (2, 10), 0, 300)
    params = nn.unbox(GptLM(config).init(jax.random.key(1), ids)["params"])
    want = GptLM(config).apply({"params": params}, ids)
    got = GptLM(fused).apply({"params": params}, ids)
    assert relative_error(got, want) < TOLERANCE[dtype]
    prompt_mask = 1 - lengths_mask([3, 0], 10)  # left-padded prompts, as generation pads them
    tokens = {
        name: generate_ids(params, ids, prompt_mask, jax.random.key(0), model=GptLM(cfg),
                           max_new_tokens=6, sampling=Sampling(temperature=0.0))
        for name, cfg in (("xla", config), ("dot_product", fused))
    }
    np.testing.assert_array_equal(tokens["dot_product"], tokens["xla"])


def test_splash_with_attention_dropout_is_one_line():
    """Splash has no dropout; cuDNN's fused attention has (dot_product takes it)."""
    with pytest.raises(ValueError, match="attention_impl='splash'.*attention_dropout_rate"
                                         "=0.1: set attention_dropout_rate=0 or "
                                         "attention_impl='xla'"):
        TransformerConfig(num_layers=1, hidden_size=8, num_heads=2, mlp_dim=16,
                          attention_impl="splash")
    TransformerConfig(num_layers=1, hidden_size=8, num_heads=2, mlp_dim=16,
                      attention_impl="dot_product")
    with pytest.raises(ValueError, match="unknown attention_impl 'flash'"):
        TransformerConfig(num_layers=1, hidden_size=8, num_heads=2, mlp_dim=16,
                          attention_impl="flash")


def test_auto_keeps_attention_dropout_and_is_xla_on_cpu():
    assert jax.default_backend() == "cpu"
    assert resolve_impl("auto", 0.0, deterministic=True) == "xla"
    assert resolve_impl("auto", 0.1, deterministic=False) == "xla"
    assert resolve_impl("dot_product", 0.0, deterministic=False) == "dot_product"
    # without cuDNN only the XLA path can drop out attention probabilities
    assert resolve_impl("dot_product", 0.1, deterministic=False) == "xla"
    assert resolve_impl("dot_product", 0.1, deterministic=True) == "dot_product"


def test_auto_picks_the_fused_kernel_on_gpus(monkeypatch):
    """Attention dropout goes to cuDNN where cuDNN runs the call, to XLA where it does not
    (float32 compute, unsupported head sizes)."""
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert resolve_impl("auto", 0.0, deterministic=False) == "dot_product"
    assert resolve_impl("auto", 0.1, deterministic=True) == "dot_product"  # inference
    assert resolve_impl("auto", 0.1, deterministic=False, cudnn=True) == "dot_product"
    assert resolve_impl("auto", 0.1, deterministic=False, cudnn=False) == "xla"
    assert cudnn_runs(jnp.bfloat16, 64) and cudnn_runs(jnp.float16, 128)
    assert not cudnn_runs(jnp.float32, 64) and not cudnn_runs(jnp.bfloat16, 160)


class FakeBinding:
    """Stands in for JAX's cuDNN binding on the CPU: records the call, computes the exact
    attention with the mask the call describes (no dropout)."""

    MaskType = __import__("jax._src.cudnn.fused_attention_stablehlo",
                          fromlist=["MaskType"]).MaskType

    def __init__(self):
        self.calls = []  # each call's arguments, as traced
        self.launches = []  # the seed of each kernel that ran, in the order they ran

    def dot_product_attention(self, q, k, v, **kwargs):
        import inspect

        from jax._src.cudnn import fused_attention_stablehlo as real
        inspect.signature(real.dot_product_attention).bind(q, k, v, **kwargs)
        self.calls.append(kwargs)
        jax.debug.callback(lambda: self.launches.append(kwargs["seed"]), ordered=True)
        return jnp.full(q.shape, 7.0, q.dtype)


def test_cudnn_calls_carry_dropout_packed_layout_and_a_seed_per_layer(monkeypatch):
    """What bertjax asks of cuDNN (checked against the binding's signature): the dropout rate,
    a static seed per attention layer, the packed rows' offsets and lengths, and zeros at the
    padding of packed rows."""
    import bertjax.layers.fused_attention as dispatch
    from bertjax.layers import cudnn_attention as module

    config = bert_config("tiny", vocab_size=300, dtype="bfloat16", attention_dropout_rate=0.1)
    mask = MASKS["packed"]
    ids = jnp.ones((3, 12), jnp.int32)
    model = BertModel(config)
    params = model.init(jax.random.key(1), ids, None, mask.key_mask)
    fake = FakeBinding()
    monkeypatch.setattr(module, "_binding", lambda: fake)
    monkeypatch.setattr(dispatch, "cudnn_runs", lambda dtype, head_dim: True)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    out = model.apply(params, ids, None, mask.key_mask, jnp.zeros((3, 12), jnp.int32),
                      deterministic=False, sequence_ids=mask.sequence_ids,
                      cls_positions=jnp.zeros((3, 3), jnp.int32),
                      rngs={"dropout": jax.random.key(2)})
    assert len(fake.calls) == 2  # both layers
    seeds = {call["seed"] for call in fake.calls}
    assert len(seeds) == 2
    for call in fake.calls:
        assert call["dropout_rate"] == 0.1 and call["qkv_layout"] == "BTNH"
        assert call["mask_type"] == FakeBinding.MaskType.PADDING
        np.testing.assert_array_equal(call["q_offsets"], mask.sequence_layout()[0])
        np.testing.assert_array_equal(call["q_seqlen"], mask.sequence_layout()[1])
    assert out["sequence_output"].shape == (3, 12, 128)


@pytest.mark.parametrize("scan_layers", [False, True], ids=["unrolled", "scanned"])
def test_every_layer_launches_cudnn_with_its_own_dropout_seed(monkeypatch, scan_layers):
    """cuDNN's dropout mask comes from a static seed and the launches of its kernel: each layer
    must run a kernel of its own seed (layers/cudnn_attention.py). A scanned stack's layers
    share one module path, so the seed folds in the layer index and each layer switches to
    its own kernel: the kernels that run, layer by layer, have four different seeds."""
    import bertjax.layers.fused_attention as dispatch
    from bertjax.layers import cudnn_attention as module

    config = bert_config("tiny", vocab_size=300, dtype="bfloat16", attention_dropout_rate=0.1,
                         num_layers=4, scan_layers=scan_layers)
    ids = jnp.ones((2, 8), jnp.int32)
    model = BertModel(config)
    params = model.init(jax.random.key(1), ids)
    fake = FakeBinding()
    monkeypatch.setattr(module, "_binding", lambda: fake)
    monkeypatch.setattr(dispatch, "cudnn_runs", lambda dtype, head_dim: True)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    jax.block_until_ready(model.apply(params, ids, deterministic=False,
                                      rngs={"dropout": jax.random.key(2)}))
    jax.effects_barrier()
    paths = [("encoder", "layers", "block", "attention") if scan_layers else
             ("encoder", f"layer_{i}", "attention") for i in range(4)]
    assert len(fake.launches) == 4 and len(set(fake.launches)) == 4, fake.launches
    assert fake.launches == [module.layer_seed(path, i) for i, path in enumerate(paths)]


def test_attention_maps_come_from_the_xla_path_whatever_the_implementation():
    """bertjax.analysis asks for the probabilities; a fused kernel has none, so the layer
    computes them the XLA way (same outputs)."""
    layer = MultiHeadAttention(num_heads=2, head_dim=8, implementation="dot_product")
    x = jax.random.normal(jax.random.key(0), (1, 5, 16))
    params = layer.init(jax.random.key(1), x, None, True)
    out, state = layer.apply(params, x, None, True, mutable=["intermediates"])
    probs = state["intermediates"]["attention_weights"][0]
    assert probs.shape == (1, 2, 5, 5)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(out, layer.apply(params, x, None, True), atol=1e-5)
