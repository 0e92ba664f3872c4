"""Each family's `layer_states`, the one numbering of layers the analyses and the feature-based
heads read: layer 0 the static token vectors, BERT's embedding output layer 1, the
Transformer's layers after it (GPT's last one its final hidden state)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bertjax.models.bert import BertModel, bert_config
from bertjax.models.gpt import GptLM, gpt_config

IDS = jnp.asarray([[2, 7, 9, 4, 3, 0], [2, 5, 3, 0, 0, 0]], jnp.int32)
MASK = (IDS > 0).astype(jnp.int32)


def test_bert_layer_states_are_the_static_rows_then_every_hidden_state():
    config = bert_config("tiny", vocab_size=16, num_layers=3, hidden_size=32, num_heads=2,
                         mlp_dim=64)
    model = BertModel(config)
    params = nn.unbox(model.init(jax.random.key(0), IDS)["params"])
    states = model.apply({"params": params}, IDS, None, MASK, method=BertModel.layer_states)
    hidden = model.apply({"params": params}, IDS, None, MASK)["hidden_states"]
    assert len(states) == config.transformer.num_layers + 2
    table = params["embeddings"]["word_embeddings"]["embedding"]
    np.testing.assert_array_equal(states[0], table[IDS])
    for state, hidden_state in zip(states[1:], hidden, strict=True):
        np.testing.assert_array_equal(state, hidden_state)


def test_gpt_layer_states_are_the_static_rows_then_each_layer_ending_with_the_final_state():
    config = gpt_config("gpt2_tiny", vocab_size=16, num_layers=3, hidden_size=32, num_heads=2,
                        mlp_dim=64)
    lm = GptLM(config)
    params = nn.unbox(lm.init(jax.random.key(0), IDS)["params"])
    states = lm.apply({"params": params}, IDS, MASK, method=GptLM.layer_states)
    final, hidden = lm.apply({"params": params}, IDS, MASK, method=GptLM.hidden)
    assert len(states) == config.transformer.num_layers + 1
    np.testing.assert_array_equal(states[0], params["token_embeddings"]["embedding"][IDS])
    for state, hidden_state in zip(states[1:-1], hidden[1:-1], strict=True):
        np.testing.assert_array_equal(state, hidden_state)
    np.testing.assert_array_equal(states[-1], final)  # after GPT-2's final LayerNorm
    assert not np.array_equal(states[-1], hidden[-1])
