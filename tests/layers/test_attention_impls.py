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
from bertjax.layers.attention import AttentionMask, MultiHeadAttention, resolve_impl
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
    return layer.apply(params, x, mask, True, num_queries=num_queries)


MASKS = {
    "none": AttentionMask(),
    "padding": AttentionMask(lengths_mask([12, 7, 1], 12), real_tokens_first=True),
    "causal": AttentionMask(causal=True),
    "causal+padding": AttentionMask(lengths_mask([12, 5, 9], 12), causal=True,
                                    real_tokens_first=True),
    "left padding": AttentionMask(1 - lengths_mask([0, 4, 11], 12), causal=True),
}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("mask_name", list(MASKS))
def test_dot_product_equals_xla(mask_name, dtype):
    mask = MASKS[mask_name]
    want = apply_attention("xla", dtype, mask)
    got = apply_attention("dot_product", dtype, mask)
    real = np.ones(want.shape[:2], bool)
    if mask_name == "left padding":  # a query on a padded position sees nothing it may see
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


def test_fused_attention_with_attention_dropout_is_one_line():
    with pytest.raises(ValueError, match="attention_impl='dot_product'.*attention_dropout_rate"
                                         "=0.1: set attention_dropout_rate=0 or "
                                         "attention_impl='xla'"):
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


def test_auto_picks_the_fused_kernel_on_gpus_only_without_dropout(monkeypatch):
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert resolve_impl("auto", 0.0, deterministic=False) == "dot_product"
    assert resolve_impl("auto", 0.1, deterministic=True) == "dot_product"  # inference
    assert resolve_impl("auto", 0.1, deterministic=False) == "xla"  # dropout is trained


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
