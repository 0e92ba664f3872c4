"""Frozen features of every family from tiny random models: one vector per layer, static layer
first, BERT's embedding output a layer (as in the word vectors), a text's features the same in
any batch, special tokens not pooled; random twins."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.analysis import polysemy
from bertjax.analysis.features import layer_features, random_twin
from bertjax.finetune.pretrained import Pretrained
from bertjax.models.bert import BertModel, bert_config
from bertjax.models.elmo import elmo_config
from bertjax.models.gpt import gpt_config
from bertjax.tokenizers.bpe import learn_bpe
from bertjax.tokenizers.wordpiece import WordPieceVocabulary, write_vocab

TEXTS = ["Stocks rallied on Wall Street.", "The team won the cup final at home.",
         "A new chip doubles battery life.", "Rain."]
WORDS = sorted({w.strip(".").lower() for t in TEXTS for w in t.split()} | {"."})


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    vocab_file = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    write_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS], vocab_file)
    vocab = WordPieceVocabulary(vocab_file, lower_case=True)
    bert = bert_config("tiny", vocab_size=vocab.vocab_size, max_position_embeddings=32,
                       num_layers=2, hidden_size=32, num_heads=2, mlp_dim=64)
    bpe = learn_bpe(TEXTS * 3, 300)
    gpt = gpt_config("gpt2_tiny", vocab_size=bpe.vocab_size, max_position_embeddings=32,
                     num_layers=3, hidden_size=32, num_heads=2, mlp_dim=64)
    elmo = elmo_config("tiny", vocab_size=8, cell_size=32, proj_size=16)
    shells = [Pretrained("bert", bert, None, vocab, "test"),
              Pretrained("gpt", gpt, None, bpe, "test"),
              Pretrained("elmo", elmo, None, None, "test", word_tokenizer="simple")]
    return {m.family: random_twin(m, seed=0) for m in shells}


@pytest.mark.parametrize("family, layers, width", [("bert", 4, 32), ("gpt", 4, 32),
                                                    ("elmo", 3, 32)])
def test_one_vector_per_layer_and_batch_independent(models, family, layers, width):
    model = models[family]
    features = layer_features(model, TEXTS, max_length=16)
    assert features.shape == (len(TEXTS), layers, width) and np.isfinite(features).all()
    alone = layer_features(model, TEXTS[1:2], max_length=16)
    np.testing.assert_allclose(alone[0], features[1], atol=1e-5)
    assert not np.allclose(features[0, -1], features[2, -1])


def test_static_layer_is_the_mean_of_the_texts_own_embedding_rows(models):
    model = models["bert"]
    features = layer_features(model, TEXTS[:1])
    ids = model.tokenizer.encode(TEXTS[0])  # [CLS] and [SEP] are not pooled
    table = np.asarray(model.params["embeddings"]["word_embeddings"]["embedding"])
    np.testing.assert_allclose(features[0, 0], table[ids].mean(0), atol=1e-6)


def test_bert_embedding_output_is_layer_1_as_in_the_word_vectors(models):
    """The BERT paper's Table 7 counts the embedding output as a layer: the features and
    `polysemy`'s word vectors number BERT's layers alike (token, embeddings, layer 1 ..)."""
    model = models["bert"]
    features = layer_features(model, TEXTS[:1])
    ids = model.tokenizer.encode(TEXTS[0])
    row = jnp.asarray([[model.tokenizer.cls_id, *ids, model.tokenizer.sep_id]])
    hidden = BertModel(model.config).apply({"params": model.params}, row)["hidden_states"]
    np.testing.assert_allclose(features[0, 1], np.asarray(hidden[0])[0, 1:-1].mean(0),
                               atol=1e-5)
    vectors = polysemy.bert_word_vectors(model.config, model.params, model.tokenizer,
                                         ["Rain."], "rain")
    assert features.shape[1] == len(vectors.layer_names) == vectors.vectors.shape[0]


def test_random_twins_differ_by_seed_and_repeat(models):
    model = models["gpt"]
    a, b = random_twin(model, 1), random_twin(model, 1)
    c = random_twin(model, 2)
    leaves = lambda m: jax.tree.leaves(m.params)  # noqa: E731
    assert all(np.array_equal(x, y) for x, y in zip(leaves(a), leaves(b), strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(leaves(a), leaves(c), strict=True))
    assert a.tokenizer is model.tokenizer and a.config == model.config


def test_bad_input_is_one_line(models):
    with pytest.raises(ValueError, match="no texts"):
        layer_features(models["bert"], [])
