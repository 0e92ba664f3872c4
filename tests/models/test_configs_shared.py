"""Family configs share one TransformerConfig: flat settings routed to it, unknown names
rejected in one line, JSON records rebuilt, and GPT's scanned stack equal to its unrolled one."""

import dataclasses
import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.convert import hf_gpt
from bertjax.layers.transformer import TransformerConfig
from bertjax.models.bert import BertConfig, bert_config
from bertjax.models.elmo import elmo_config
from bertjax.models.gpt import GptConfig, GptLM, gpt_config, init_cache

BUILDERS = {"bert_config": bert_config, "gpt_config": gpt_config, "elmo_config": elmo_config}


@pytest.mark.parametrize("builder, size, bad, good", [
    ("bert_config", "tiny", "hiden_size", "hidden_size"),
    ("bert_config", "tiny", "vocab_sise", "vocab_size"),
    ("gpt_config", "gpt2_tiny", "scan_layer", "scan_layers"),
    ("gpt_config", "gpt1", "max_positions_embeddings", "max_position_embeddings"),
    ("elmo_config", "tiny", "cel_size", "cell_size"),
])
def test_every_builder_rejects_an_unknown_setting_in_one_line(builder, size, bad, good):
    with pytest.raises(ValueError) as exc_info:
        BUILDERS[builder](size, **{bad: 1})
    message = str(exc_info.value)
    assert "\n" not in message
    assert f"unknown setting {bad!r} for {builder}: did you mean {good}?" in message


def test_elmo_takes_no_transformer_setting():
    with pytest.raises(ValueError, match="unknown setting 'num_heads' for elmo_config"):
        elmo_config("tiny", num_heads=2)


def test_flat_overrides_reach_the_field_that_holds_them():
    config = bert_config("tiny", hidden_size=64, vocab_size=512, dtype="bfloat16")
    assert (config.vocab_size, config.transformer.hidden_size) == (512, 64)
    assert config.transformer.num_layers == 2  # the size's, untouched
    assert config.transformer.compute_dtype == jnp.bfloat16
    assert config.transformer.weight_dtype == jnp.float32
    gpt = gpt_config("gpt1", remat=True, scan_layers=True, vocab_size=100)
    assert (gpt.vocab_size, gpt.transformer.remat, gpt.transformer.scan_layers) == (100, True, True)
    assert not gpt.transformer.pre_layer_norm  # GPT-1's family default survives overrides
    replaced = gpt.replace(num_layers=1, max_position_embeddings=16)
    assert (replaced.transformer.num_layers, replaced.max_position_embeddings) == (1, 16)
    assert replaced.transformer.remat and replaced.vocab_size == 100


def test_family_configs_hold_no_transformer_field_of_their_own():
    names = {cls: {f.name for f in dataclasses.fields(cls)} for cls in (BertConfig, GptConfig)}
    assert names[BertConfig] == {"vocab_size", "max_position_embeddings", "type_vocab_size",
                                 "causal", "transformer"}
    assert names[GptConfig] == {"vocab_size", "max_position_embeddings", "transformer"}


@pytest.mark.parametrize("config", [
    *(bert_config(s) for s in ("tiny", "base", "large")),
    bert_config("mini", dtype="bfloat16", scan_layers=True, vocab_size=1000),
    *(gpt_config(s) for s in ("gpt1", "gpt2_tiny", "gpt2_xl")),
    gpt_config("gpt2_small", remat=True, dropout_rate=0.0),
    *(elmo_config(s) for s in ("tiny", "original")),
    elmo_config("small", token_encoder="word", cell_clip=None, vocab_size=50),
], ids=lambda c: type(c).__name__)
def test_from_dict_of_asdict_through_json_is_the_same_config(config):
    record = json.loads(json.dumps(dataclasses.asdict(config)))  # what model.json holds
    assert type(config).from_dict(record) == config
    assert type(config).from_dict(dataclasses.asdict(config)) == config


def test_old_flat_gpt_record_still_loads():
    config = gpt_config("gpt1", num_layers=2, vocab_size=300, dtype="bfloat16")
    nested = dataclasses.asdict(config)
    flat = {**{k: v for k, v in nested.items() if k != "transformer"}, **nested["transformer"]}
    assert GptConfig.from_dict(flat) == config
    # generation's load_gpt adds flat settings to a nested record: the flat ones win
    assert not GptConfig.from_dict({**nested, "remat": False}).transformer.remat
    assert GptConfig.from_dict({**nested, "dtype": "float32"}).transformer.dtype == "float32"


def test_dtypes_are_names_and_bad_ones_fail_in_one_line():
    config = TransformerConfig(1, 8, 2, 16, dtype=jnp.bfloat16, param_dtype=np.float32)
    assert (config.dtype, config.param_dtype) == ("bfloat16", "float32")
    with pytest.raises(ValueError, match="unknown dtype 'bfloat61': set dtype to one of"):
        bert_config("tiny", dtype="bfloat61")
    with pytest.raises(ValueError, match="not divisible by num_heads 3"):
        gpt_config("gpt2_tiny", num_heads=3)


@pytest.mark.parametrize("build", [bert_config, gpt_config, elmo_config],
                         ids=lambda b: b.__name__)
@pytest.mark.parametrize("setting", ["dtype", "param_dtype"])
def test_float16_is_refused_in_one_line_naming_bfloat16(build, setting):
    """float16 without loss scaling trains on gradients that underflow to zero; every family
    refuses it where its config is built, so every tool and gin file does."""
    size = {"bert_config": "tiny", "gpt_config": "gpt2_tiny", "elmo_config": "tiny"}
    for value in ("float16", jnp.float16, np.float16):
        with pytest.raises(ValueError, match=f"^{setting} float16 trains with gradients that "
                           f"underflow to zero .*: set {setting} = 'bfloat16'"):
            build(size[build.__name__], **{setting: value})
    build(size[build.__name__], **{setting: "bfloat16"})  # the dtype the message names


TINY = dict(vocab_size=50, max_position_embeddings=16, num_layers=3, hidden_size=32,
            num_heads=4, mlp_dim=64, dropout_rate=0.0, attention_dropout_rate=0.0)


def _stacked(params, num_layers):
    """Unrolled GptLM params in the scanned layout: layer_i -> layers/block, stacked."""
    stack = dict(params["transformer"])
    layers = [stack.pop(f"layer_{i}") for i in range(num_layers)]
    stack["layers"] = {"block": jax.tree.map(lambda *xs: jnp.stack(xs), *layers)}
    return {**params, "transformer": stack}


@pytest.mark.parametrize("size", ["gpt2_tiny", "gpt1"], ids=["pre-ln", "post-ln"])
def test_scanned_gpt_gives_the_unrolled_logits(size):
    config = gpt_config(size, **TINY)
    ids_BxL = jax.random.randint(jax.random.key(0), (2, 7), 0, 50)
    mask_BxL = jnp.array([[1] * 7, [0, 0] + [1] * 5])
    unrolled = GptLM(config)
    params = nn.unbox(unrolled.init(jax.random.key(1), ids_BxL)["params"])
    scanned = GptLM(config.replace(scan_layers=True))
    scanned_params = _stacked(params, 3)
    shapes = nn.unbox(scanned.init(jax.random.key(1), ids_BxL)["params"])
    assert jax.tree.map(jnp.shape, shapes) == jax.tree.map(jnp.shape, scanned_params)
    expected = unrolled.apply({"params": params}, ids_BxL, mask_BxL)
    got = scanned.apply({"params": scanned_params}, ids_BxL, mask_BxL)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def _decode_logits(model, params, ids_BxL, steps):
    """Logits of a prefill of ids_BxL then `steps` greedy tokens, from the key/value cache."""
    B, L = ids_BxL.shape
    cache = init_cache(model, B, L + steps)
    mask_BxT = jnp.ones((B, L + steps), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(L), (B, L))
    out = []
    for i in range(steps + 1):
        logits, mutated = model.apply({"params": params, "cache": cache}, ids_BxL, mask_BxT,
                                      positions, decode=True, mutable=["cache"])
        cache = mutated["cache"]
        out.append(logits[:, -1])
        ids_BxL = logits[:, -1:].argmax(-1)
        positions = jnp.full((B, 1), L + i)
    return jnp.stack(out, 1)


def test_scanned_gpt_decodes_from_its_cache_like_the_unrolled_one():
    config = gpt_config("gpt2_tiny", **TINY)
    ids_BxL = jax.random.randint(jax.random.key(2), (2, 5), 0, 50)
    unrolled = GptLM(config)
    params = nn.unbox(unrolled.init(jax.random.key(3), ids_BxL)["params"])
    expected = _decode_logits(unrolled, params, ids_BxL, 4)
    scanned = GptLM(config.replace(scan_layers=True))
    got = _decode_logits(scanned, _stacked(params, 3), ids_BxL, 4)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    full = unrolled.apply({"params": params}, ids_BxL)  # no cache: the prefill's logits
    np.testing.assert_allclose(got[:, 0], full[:, -1], atol=1e-5)


def test_hf_import_asks_for_unscanned_layers():
    with pytest.raises(ValueError, match="convert with scan_layers=False"):
        hf_gpt.hf_to_bertjax({}, gpt_config("gpt2_tiny", scan_layers=True))
