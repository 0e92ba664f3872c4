"""Contextual "bank" vectors: MiniLM separates the money and river senses, its static token
layer does not; a tiny ELMo's token layer is context-free; a tiny GPT's vector of a word sees
only the words before it; the verdict rule, the sense separation and the picture."""

import jax
import numpy as np
import pytest

from bertjax.analysis import polysemy
from bertjax.inference.elmo import ElmoEmbedder
from bertjax.models.elmo import ElmoBiLM, elmo_config


@pytest.fixture(scope="module")
def minilm_bank(minilm):
    config, params, vocab = minilm
    return polysemy.bert_word_vectors(config, params, vocab)


def test_minilm_layers_and_shapes(minilm_bank):
    assert minilm_bank.layer_names == ("token", "embeddings", *(f"layer {i}" for i in range(1, 7)))
    assert minilm_bank.vectors.shape == (8, 5, 384)


def test_minilm_top_layer_separates_money_from_river(minilm_bank):
    sims = minilm_bank.similarities()[-1]
    print("\nMiniLM top layer cosine similarities of 'bank':\n", np.round(sims, 3))
    money_pair = sims[0, 1]
    across = sims[np.ix_([0, 1], [2, 3])]  # each money bank against each river bank
    assert money_pair > across.max()
    assert sims[2, 3] > across.max()  # and the river banks are each other's nearest too


def test_static_token_layer_is_one_vector_but_embedding_output_is_not(minilm_bank):
    sims_KxNxN = minilm_bank.similarities()
    static = minilm_bank.vectors[0]
    np.testing.assert_array_equal(static, np.broadcast_to(static[:1], static.shape))
    np.testing.assert_allclose(sims_KxNxN[0], 1.0, atol=1e-6)
    # The encoder's input adds position embeddings: "bank" at different positions differs.
    assert sims_KxNxN[1].min() < 0.99
    assert polysemy.third_sense(sims_KxNxN[0]).verdict == "indistinct"


def test_word_pieces_are_averaged(minilm):
    config, params, vocab = minilm
    word = "riverbanks"
    ids, positions = polysemy._word_piece_positions(vocab, "Walk along the Riverbanks .", word)
    assert len(positions) > 1  # split into several pieces
    vectors = polysemy.bert_word_vectors(config, params, vocab, ["Walk along the Riverbanks ."],
                                         word)
    table = np.asarray(params["embeddings"]["word_embeddings"]["embedding"])
    expected = table[[ids[p] for p in positions]].mean(0)
    np.testing.assert_allclose(vectors.vectors[0, 0], expected, rtol=1e-6)
    with pytest.raises(ValueError, match="is not a word of the sentence"):
        polysemy.bert_word_vectors(config, params, vocab, ["No such word here ."], "bank")


def test_third_sense_rule():
    senses = ("a", "a", "b", "b", "p")

    def matrix(to_a, to_b, within_a=0.9, within_b=0.9):
        sims = np.eye(5)
        sims[0, 1] = sims[1, 0] = within_a
        sims[2, 3] = sims[3, 2] = within_b
        sims[4, :2] = sims[:2, 4] = to_a
        sims[4, 2:4] = sims[2:4, 4] = to_b
        return sims

    assert polysemy.third_sense(matrix(0.5, 0.6), senses, "p").verdict == "apart"
    assert polysemy.third_sense(matrix(0.95, 0.6), senses, "p").verdict == "a"
    verdict = polysemy.third_sense(matrix(0.6, 0.92), senses, "p")
    assert verdict.verdict == "b" and verdict.to_sense == {"a": 0.6, "b": 0.92}
    assert polysemy.third_sense(np.ones((5, 5)), senses, "p").verdict == "indistinct"
    with pytest.raises(ValueError, match="one sentence"):
        polysemy.third_sense(np.eye(3), ("a", "b", "p"), "p")


def test_tiny_elmo_token_layer_is_context_free():
    config = elmo_config("tiny", vocab_size=8, dropout_rate=0.0, cell_size=32, proj_size=16)
    ids = np.zeros((1, 4), np.int32), np.zeros((1, 4, config.max_chars), np.int32)
    params = ElmoBiLM(config).init(jax.random.key(0), *ids, np.array([4]))["params"]
    embedder = ElmoEmbedder(config, params, batch_size=8)
    vectors = polysemy.elmo_word_vectors(embedder)
    assert vectors.layer_names == ("token", "lstm 1", "lstm 2")
    assert vectors.vectors.shape == (3, 5, 2 * config.proj_size)
    static = vectors.vectors[0]
    np.testing.assert_allclose(static, np.broadcast_to(static[:1], static.shape), atol=1e-6)
    assert not np.allclose(vectors.vectors[2], vectors.vectors[2, :1], atol=1e-4)


def test_similarity_picture_is_written(minilm_bank, tmp_path):
    pytest.importorskip("matplotlib")
    path = polysemy.plot_similarities(minilm_bank, tmp_path / "bank.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_gpt_word_vectors_see_only_the_words_before():
    from bertjax.models.gpt import GptLM, gpt_config
    from bertjax.tokenizers.bpe import learn_bpe

    sentences = ["The river bank was muddy .", "The river bank was full of money .",
                 "My bank pays interest ."]
    bpe = learn_bpe(sentences * 4, 300)
    config = gpt_config("gpt2_tiny", vocab_size=bpe.vocab_size, max_position_embeddings=16,
                        num_layers=2, hidden_size=32, num_heads=2, mlp_dim=64)
    params = GptLM(config).init(jax.random.key(0), np.zeros((1, 2), np.int32))["params"]
    vectors = polysemy.gpt_word_vectors(config, params, bpe, sentences, "bank")
    assert vectors.layer_names == ("token", "layer 1", "layer 2")
    assert vectors.vectors.shape == (3, 3, 32)
    # the same words before "bank": the same vector at every layer, whatever follows
    np.testing.assert_allclose(vectors.vectors[:, 0], vectors.vectors[:, 1], atol=1e-5)
    assert not np.allclose(vectors.vectors[2, 0], vectors.vectors[2, 2], atol=1e-4)
    with pytest.raises(ValueError, match="not a word"):
        polysemy.gpt_word_vectors(config, params, bpe, ["No such word ."], "bank")


def test_sense_separation():
    static = np.ones((1, 4, 4))
    senses = ("a", "a", "b", "b")
    assert polysemy.sense_separation(static, senses) == pytest.approx([0.0])
    sims = np.eye(4)
    sims[0, 1] = sims[1, 0] = 0.9
    sims[2, 3] = sims[3, 2] = 0.7
    sims[:2, 2:] = sims[2:, :2] = 0.2  # within: (0.9 + 0.7) / 2, across: 0.2
    assert polysemy.sense_separation(sims[None], senses) == pytest.approx([0.6])
    with pytest.raises(ValueError, match="two or more"):
        polysemy.sense_separation(np.eye(2)[None], ("a", "b"))
