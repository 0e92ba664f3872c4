"""Attention weights: MiniLM's equal transformers' (output_attentions=True); scanned and
unrolled stacks give the same maps; GPT's are causal; the picture is written."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.analysis import attention
from bertjax.models.bert import BertModel
from bertjax.models.gpt import GptLM, gpt_config

TOL = 1e-4
TEXT = "It is safest to deposit your money in the bank ."


@pytest.mark.torch
def test_minilm_attention_matches_transformers(minilm, minilm_dir):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config, params, vocab = minilm
    maps = attention.bert_attention(config, params, vocab, TEXT, "The river bank .")
    # transformers 5 takes the file as `vocab=` (`vocab_file=` is ignored: 5 tokens).
    tokenizer = transformers.BertTokenizerFast(vocab=str(minilm_dir / "vocab.txt"))
    assert tokenizer.vocab_size == len(vocab.tokens)
    batch = tokenizer(TEXT, "The river bank .", return_tensors="pt")
    assert list(maps.tokens) == tokenizer.convert_ids_to_tokens(batch["input_ids"][0])
    model = transformers.BertModel.from_pretrained(
        minilm_dir, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        expected = model(**batch, output_attentions=True).attentions
    expected_NxHxTxT = np.stack([a[0].numpy() for a in expected])
    assert maps.weights.shape == expected_NxHxTxT.shape == (6, 12, len(maps.tokens),
                                                                      len(maps.tokens))
    diff = float(np.abs(maps.weights - expected_NxHxTxT).max())
    print(f"\nMiniLM attention max |diff| vs transformers: {diff:.2e}")
    assert diff <= TOL


def _stacked(params, num_layers):
    """Unrolled parameters (layer_i) in a scanned stack's layout (layers/block, stacked)."""
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs),
                           *[params["transformer"][f"layer_{i}"] for i in range(num_layers)])
    rest = {k: v for k, v in params["transformer"].items() if not k.startswith("layer_")}
    return {**params, "transformer": {**rest, "layers": {"block": stacked}}}


@pytest.mark.parametrize("remat", [False, True], ids=["plain", "remat"])
def test_gpt_attention_scanned_equals_unrolled_and_is_causal(remat):
    config = gpt_config("gpt2_tiny", vocab_size=64, max_position_embeddings=16, num_layers=3,
                        hidden_size=32, num_heads=4, mlp_dim=64)
    ids = list(np.random.default_rng(0).integers(0, 64, 9))
    params = nn.unbox(GptLM(config).init(jax.random.key(0), jnp.zeros((1, 9), jnp.int32))
                      ["params"])
    unrolled = attention.gpt_attention(config, params, ids)
    scanned_config = dataclasses.replace(config, transformer=dataclasses.replace(
        config.transformer, scan_layers=True, remat=remat))
    scanned = attention.gpt_attention(scanned_config, _stacked(params, 3), ids)
    assert unrolled.weights.shape == (3, 4, 9, 9)
    np.testing.assert_allclose(scanned.weights, unrolled.weights, atol=1e-6)
    w = unrolled.weights
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
    assert np.all(np.triu(w, k=1) == 0)  # no query attends to a later key
    assert unrolled.tokens == tuple(str(i) for i in ids)


def test_layers_are_ordered_by_number_not_name():
    tree = {f"layer_{i}": {"attention": {"attention_weights": (np.full((1, 1, 2, 2), i),)}}
            for i in range(12)}
    got = attention.collect_attention({"encoder": tree})
    assert got.shape == (12, 1, 1, 2, 2) and list(got[:, 0, 0, 0, 0]) == list(range(12))
    with pytest.raises(ValueError, match="mutable=\\['intermediates'\\]"):
        attention.collect_attention({})


def test_outputs_unchanged_and_nothing_sown_by_default(minilm):
    config, params, vocab = minilm
    ids = jnp.asarray([[vocab.cls_id, *vocab.encode(TEXT), vocab.sep_id]], jnp.int32)
    model = BertModel(config)
    plain = model.apply({"params": params}, ids)
    sown, state = model.apply({"params": params}, ids, mutable=["intermediates"])
    np.testing.assert_array_equal(plain["sequence_output"], sown["sequence_output"])
    assert set(state) == {"intermediates"}


def test_attention_picture_is_written(minilm, tmp_path):
    pytest.importorskip("matplotlib")
    config, params, vocab = minilm
    maps = attention.bert_attention(config, params, vocab, "The river bank .")
    path = attention.plot_attention(maps, tmp_path / "heads.png", layer=-1)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="out of range"):
        attention.plot_attention(maps, tmp_path / "x.png", layer=6)
