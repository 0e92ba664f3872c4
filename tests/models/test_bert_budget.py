"""The small-budget BERT settings: bias-free Dense layers and attention projections
(`use_bias=False`), pre-LN blocks with the final LayerNorm they need, and both refused by the
Hugging Face export, which has no such BERT."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from bertjax.convert.hf_bert import hf_config
from bertjax.models.bert import PARAM_COUNTS, BertModel, bert_config
from bertjax.objectives.pretraining import bert_pretraining
from tests.training.test_step import random_batch


def param_paths(config):
    batch = random_batch(vocab_size=config.vocab_size)
    params = nn.unbox(bert_pretraining(config).init_variables(jax.random.key(0), batch)["params"])
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    return {"/".join(str(k.key) for k in path): leaf.size for path, leaf in flat}


def test_default_keeps_every_bias_and_the_published_parameter_count():
    paths = param_paths(bert_config("tiny"))
    assert sum(paths.values()) == PARAM_COUNTS["tiny"]
    assert "bert/encoder/layer_0/attention/query_bias" in paths
    assert "bert/encoder/layer_0/mlp/wi/bias" in paths


def test_bias_free_tree_drops_the_dense_and_attention_biases_only():
    with_bias = param_paths(bert_config("tiny"))
    without = param_paths(bert_config("tiny", use_bias=False))
    dropped = set(with_bias) - set(without)
    assert set(without) <= set(with_bias)
    # what stays: LayerNorm biases (no Dense) and the MLM output bias over the vocabulary
    kept = {p for p in without if p.endswith("bias")}
    assert kept and all("layer_norm" in p or p == "mlm_bias" for p in kept), kept
    expected = {f"bert/encoder/layer_{i}/attention/{n}_bias"
                for i in range(2) for n in ("query", "key", "value", "out")}
    expected |= {f"bert/encoder/layer_{i}/mlp/{n}/bias" for i in range(2) for n in ("wi", "wo")}
    expected |= {"bert/pooler/bias", "mlm_transform/bias", "nsp/bias"}
    assert dropped == expected


@pytest.mark.parametrize("fused_qkv", [True, False])
def test_bias_free_model_trains_on_finite_gradients(fused_qkv):
    config = bert_config("tiny", vocab_size=97, use_bias=False, fused_qkv=fused_qkv)
    objective = bert_pretraining(config)
    batch = random_batch(vocab_size=config.vocab_size)
    params = nn.unbox(objective.init_variables(jax.random.key(0), batch)["params"])
    loss, grads = jax.value_and_grad(
        lambda p: objective.loss_fn(p, batch, jax.random.key(1))[0])(params)
    assert np.isfinite(loss) and all(np.isfinite(g).all() for g in jax.tree.leaves(grads))


def test_pre_ln_bert_ends_with_a_final_layer_norm():
    config = bert_config("tiny", vocab_size=97, pre_layer_norm=True)
    batch = random_batch(vocab_size=config.vocab_size)
    model = BertModel(config)
    variables = model.init(jax.random.key(0), batch["input_ids"], batch["segment_ids"],
                           batch["input_mask"])
    params = variables["params"]
    final = params["encoder"]["final_layer_norm"]
    assert set(final) == {"scale", "bias"}
    # a scale and bias the output can only show if the final LayerNorm is applied
    params = {**params, "encoder": {**params["encoder"], "final_layer_norm": {
        "scale": final["scale"].replace_boxed(np.full((128,), 3.0, np.float32)),
        "bias": final["bias"].replace_boxed(np.full((128,), 0.5, np.float32))}}}
    out = model.apply({"params": params}, batch["input_ids"], batch["segment_ids"],
                      batch["input_mask"])
    last_BxLxE = np.asarray(out["hidden_states"][-1], np.float64)
    normed_BxLxE = (last_BxLxE - last_BxLxE.mean(-1, keepdims=True)) / np.sqrt(
        last_BxLxE.var(-1, keepdims=True) + 1e-12)
    np.testing.assert_allclose(out["sequence_output"], 3.0 * normed_BxLxE + 0.5, atol=1e-4)


@pytest.mark.parametrize("setting", [{"pre_layer_norm": True}, {"use_bias": False}])
def test_hf_export_refuses_a_bert_transformers_has_not(setting):
    name = next(iter(setting))
    with pytest.raises(ValueError, match=f"{name}=.*no transformers BERT"):
        hf_config(bert_config("tiny", **setting), "BertModel")
