"""GPT-2 / OpenAI GPT import: logits equal transformers' in torch on the same (random) weights."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.convert import hf_gpt
from bertjax.models.gpt import GptLM

TOL = 1e-4
TINY = dict(vocab_size=99, n_positions=32, n_embd=32, n_layer=2, n_head=4)
SMALL = dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12)
GPT1 = dict(vocab_size=40478, n_positions=512, n_embd=768, n_layer=12, n_head=12)


def _hf_model(family, seed=0, **kwargs):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    if family == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**kwargs))
    else:
        model = transformers.OpenAIGPTLMHeadModel(transformers.OpenAIGPTConfig(**kwargs))
    with torch.no_grad():  # move LayerNorms and biases off their 1 / 0 initial values
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def _padded_batch(vocab, length=12, seed=0):
    ids = np.random.default_rng(seed).integers(0, vocab, (3, length))
    mask = np.ones((3, length), np.int64)
    mask[1, :5] = 0  # left padding (generation)
    mask[2, 7:] = 0  # right padding (scoring)
    return ids, mask


def _max_logit_diff(family, **kwargs):
    torch = pytest.importorskip("torch")
    model = _hf_model(family, **kwargs)
    config = hf_gpt.config_from_hf(model.config.to_dict())
    params = hf_gpt.hf_to_bertjax(model.state_dict(), config)
    ids, mask = _padded_batch(config.vocab_size)
    positions = np.maximum(mask.cumsum(-1) - 1, 0)
    with torch.no_grad():
        expected = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                         position_ids=torch.from_numpy(positions)).logits.numpy()
    got = np.asarray(GptLM(config).apply({"params": params}, jnp.asarray(ids, jnp.int32),
                                         jnp.asarray(mask, jnp.int32)))
    real = mask.astype(bool)
    return float(np.abs(got[real] - expected[real]).max())


@pytest.mark.torch
@pytest.mark.parametrize("family", ["gpt2", "openai-gpt"])
def test_tiny_logits_match_transformers(family):
    diff = _max_logit_diff(family, **TINY)
    print(f"\n{family} tiny: max |logits diff| {diff:.2e}")
    assert diff <= TOL


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("family,size", [("gpt2", SMALL), ("openai-gpt", GPT1)])
def test_full_size_logits_match_transformers(family, size):
    diff = _max_logit_diff(family, **size)
    print(f"\n{family} {size['n_layer']}x{size['n_embd']}: max |logits diff| {diff:.2e}")
    assert diff <= TOL


@pytest.mark.torch
def test_load_hf_gpt_reads_a_saved_model_directory(tmp_path):
    model = _hf_model("gpt2", **TINY)
    model.save_pretrained(tmp_path)
    config, params = hf_gpt.load_hf_gpt(tmp_path)
    tcfg = config.transformer
    assert (tcfg.num_layers, tcfg.hidden_size, tcfg.activation) == (2, 32, "gelu_tanh")
    direct = hf_gpt.hf_to_bertjax(model.state_dict(), config)
    np.testing.assert_array_equal(params["transformer"]["layer_1"]["attention"]["key_kernel"],
                                  direct["transformer"]["layer_1"]["attention"]["key_kernel"])


def _tiny_state(family="gpt2"):
    model = _hf_model(family, **TINY)
    return hf_gpt.config_from_hf(model.config.to_dict()), {
        k: v.numpy() for k, v in model.state_dict().items()}


@pytest.mark.torch
def test_bad_checkpoints_fail_with_one_actionable_line():
    config, state = _tiny_state()
    missing = {k: v for k, v in state.items() if "h.1.mlp.c_fc.weight" not in k}
    with pytest.raises(ValueError, match="lacks h.1.mlp.c_fc.weight") as err:
        hf_gpt.hf_to_bertjax(missing, config)
    assert "\n" not in str(err.value)
    untied = {**state, "lm_head.weight": state["lm_head.weight"] + 1}
    with pytest.raises(ValueError, match="ties them"):
        hf_gpt.hf_to_bertjax(untied, config)
    extra = {**state, "transformer.h.2.ln_1.weight": np.ones(32, np.float32)}
    with pytest.raises(ValueError, match="does not use"):
        hf_gpt.hf_to_bertjax(extra, config)
    _, gpt1_state = _tiny_state("openai-gpt")
    with pytest.raises(ValueError, match="lacks"):
        hf_gpt.hf_to_bertjax(gpt1_state, config)  # OpenAI GPT weights, GPT-2 config


def test_unsupported_configs_are_refused():
    with pytest.raises(ValueError, match="model_type"):
        hf_gpt.config_from_hf({"model_type": "bert"})
    base = {"model_type": "gpt2", "vocab_size": 10, "n_positions": 8, "n_embd": 8, "n_layer": 1,
            "n_head": 2}
    with pytest.raises(ValueError, match="activation_function"):
        hf_gpt.config_from_hf({**base, "activation_function": "silu"})
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        hf_gpt.config_from_hf({**base, "scale_attn_by_inverse_layer_idx": True})
    assert hf_gpt.config_from_hf(json.loads(json.dumps(base))).transformer.mlp_dim == 32


def test_a_gpt_without_biases_is_refused_in_one_line():
    from bertjax.models.gpt import gpt_config
    with pytest.raises(ValueError, match="use_bias=False has no transformers gpt2"):
        hf_gpt.hf_config(gpt_config("gpt2_tiny", use_bias=False))


@pytest.mark.torch
def test_tiny_gradients_match_transformers():
    """Every parameter's gradient of the next-token loss equals transformers' (torch autograd
    through GPT2LMHeadModel, whose output layer is the token table, tied as in bertjax): the
    tied projection's own backward pass (layers/embeddings.py) included."""
    import jax
    import torch

    from bertjax.objectives.xent import weighted_cross_entropy

    model = _hf_model("gpt2", **TINY).train()
    for module in model.modules():  # dropout off, gradients on
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    config = hf_gpt.config_from_hf(model.config.to_dict())
    ids = np.random.default_rng(1).integers(0, config.vocab_size, (3, 12))
    model(input_ids=torch.from_numpy(ids), labels=torch.from_numpy(ids)).loss.backward()
    expected = hf_gpt.hf_to_bertjax(
        {name: p.grad for name, p in model.named_parameters()}, config)

    def loss(params):
        logits = GptLM(config).apply({"params": params}, jnp.asarray(ids[:, :-1], jnp.int32))
        xent, _ = weighted_cross_entropy(logits, jnp.asarray(ids[:, 1:]),
                                         jnp.ones(ids[:, 1:].shape, jnp.float32))
        return xent.total / xent.weight

    params = hf_gpt.hf_to_bertjax(model.state_dict(), config)
    got = jax.grad(loss)(params)
    diffs = jax.tree.map(lambda a, b: float(np.abs(np.asarray(a) - np.asarray(b)).max()),
                         got, expected)
    scale = float(np.abs(np.asarray(expected["token_embeddings"]["embedding"])).max())
    print(f"\nmax |gradient diff| {max(jax.tree.leaves(diffs)):.2e} (token table's largest "
          f"gradient {scale:.2e})")
    assert max(jax.tree.leaves(diffs)) <= 1e-6
    assert scale > 1e-3  # the table's gradient is not zero: the comparison can fail
