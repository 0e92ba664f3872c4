"""Character ids, the char CNN (against torch's conv1d) and highway layers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.layers.char_cnn import CharCnnEncoder
from bertjax.layers.highway import Highway
from bertjax.tokenizers.elmo_vocab import (
    BOS,
    BOW_CHAR,
    EOS,
    EOW_CHAR,
    PAD_CHAR,
    sentence_char_ids,
    word_char_ids,
)

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

FILTERS = ((1, 4), (2, 4), (3, 8))


def test_word_char_ids_layout():
    ids = word_char_ids("ab", 8)
    np.testing.assert_array_equal(ids, [BOW_CHAR, ord("a") + 1, ord("b") + 1, EOW_CHAR] +
                                  [PAD_CHAR] * 4)
    assert word_char_ids("é", 8)[1:3].tolist() == [0xC3 + 1, 0xA9 + 1]  # UTF-8 bytes + 1
    np.testing.assert_array_equal(word_char_ids(BOS, 8)[:3], [BOW_CHAR, 257, EOW_CHAR])
    np.testing.assert_array_equal(word_char_ids(EOS, 8)[:3], [BOW_CHAR, 258, EOW_CHAR])


@pytest.mark.parametrize("word", ["x" * 49, "x" * 50, "y" * 500, "日本語" * 40, ""])
def test_long_or_odd_words_are_cut_never_crash(word):
    ids = word_char_ids(word, 50)
    assert ids.shape == (50,) and ids[0] == BOW_CHAR
    end = int(np.argmax(ids == EOW_CHAR))
    assert end == min(len(word.encode()), 48) + 1
    assert (ids[end + 1:] == PAD_CHAR).all()


def test_sentence_char_ids_adds_boundaries():
    ids = sentence_char_ids(["a", "b"], 6)
    assert ids.shape == (4, 6)
    np.testing.assert_array_equal(ids[0], word_char_ids(BOS, 6))
    np.testing.assert_array_equal(ids[-1], word_char_ids(EOS, 6))


def encoder_and_params(seed=0, **kw):
    enc = CharCnnEncoder(output_dim=16, filters=FILTERS, num_chars=262, char_embed_dim=5, **kw)
    chars = jnp.asarray(np.random.default_rng(seed).integers(1, 262, (2, 3, 10)))
    params = jax.tree.map(lambda x: getattr(x, "value", x),
                          enc.init(jax.random.key(seed), chars)["params"],
                          is_leaf=lambda x: hasattr(x, "value"))
    return enc, params, chars


def test_conv_max_pool_matches_torch_conv1d():
    torch = pytest.importorskip("torch")
    enc = CharCnnEncoder(output_dim=16, filters=FILTERS, num_highway=0, char_embed_dim=5)
    chars = jnp.asarray(np.random.default_rng(0).integers(1, 262, (2, 3, 10)))
    params = enc.init(jax.random.key(0), chars)["params"]
    params = jax.tree.map(lambda x: np.array(getattr(x, "value", x)), params,
                          is_leaf=lambda x: hasattr(x, "value"))
    got = np.asarray(enc.apply({"params": params}, chars))  # 16 filters: no projection
    x = torch.from_numpy(params["char_embed"]["embedding"][np.asarray(chars).reshape(6, 10)])
    x = x.transpose(1, 2)  # [N, E, C]
    pooled = []
    for i, _ in enumerate(FILTERS):
        w = torch.from_numpy(params[f"conv_{i}"]["kernel"]).permute(2, 1, 0)  # [F, E, width]
        y = torch.nn.functional.conv1d(x, w, torch.from_numpy(params[f"conv_{i}"]["bias"]))
        pooled.append(torch.relu(y.max(dim=2).values))
    want = torch.cat(pooled, 1).reshape(2, 3, 16).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_highway_formula():
    x = jnp.asarray(np.random.default_rng(1).normal(size=(3, 6)), jnp.float32)
    layer = Highway(num_layers=1)
    params = jax.tree.map(lambda v: getattr(v, "value", v), layer.init(jax.random.key(0), x)
                          ["params"], is_leaf=lambda v: hasattr(v, "value"))
    c, t = params["layer_0_carry"], params["layer_0_transform"]
    np.testing.assert_array_equal(c["bias"], -2.0)  # starts by mostly carrying x through
    g = jax.nn.sigmoid(x @ c["kernel"] + c["bias"])
    want = g * jax.nn.relu(x @ t["kernel"] + t["bias"]) + (1 - g) * x
    np.testing.assert_allclose(layer.apply({"params": params}, x), want, atol=1e-6)


def test_tokens_are_encoded_independently():
    enc, params, chars = encoder_and_params(num_highway=2)
    base = np.asarray(enc.apply({"params": params}, chars))
    assert base.shape == (2, 3, 16)
    changed = chars.at[0, 1].set(0)  # pad one token
    out = np.asarray(enc.apply({"params": params}, changed))
    mask = np.ones((2, 3), bool)
    mask[0, 1] = False
    np.testing.assert_array_equal(out[mask], base[mask])


def test_too_few_characters_for_the_widest_filter_is_one_line():
    enc = CharCnnEncoder(output_dim=8, filters=((7, 4),))
    with pytest.raises(ValueError, match="elmo_config.max_chars"):
        enc.init(jax.random.key(0), jnp.ones((1, 1, 5), jnp.int32))
