"""The left-to-right BERT (Table 5's "LTR & No NSP"): next-token loss, causality, it learns, and
its checkpoint fine-tunes through BERT's heads with the same mask."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from bertjax.data.bert.instances import PretrainingConfig, iterate_examples
from bertjax.data.bert.masking import SpecialIds
from bertjax.data.bert.nsp import Corpus
from bertjax.finetune.heads.bert import BertHead
from bertjax.finetune.outputs import CLASSES
from bertjax.models.bert import BertModel, bert_config
from bertjax.objectives.pretraining import bert_ltr_pretraining, next_token_positions

VOCAB, B, L = 512, 4, 16


def _objective(**overrides):
    config = bert_config("tiny", vocab_size=VOCAB, max_position_embeddings=L, hidden_size=64,
                         num_heads=2, mlp_dim=128, **overrides)
    return bert_ltr_pretraining(config)


def _batch(seed=0, real=L - 3):
    ids = np.random.default_rng(seed).integers(5, VOCAB, (B, L)).astype(np.int32)
    mask = np.zeros((B, L), np.int32)
    mask[:, :real] = 1
    return {"input_ids": ids * mask, "input_mask": mask, "segment_ids": np.zeros_like(ids)}


def test_config_is_causal_and_loss_at_init_is_uniform():
    objective = _objective()
    assert objective.config.causal and objective.name == "bert_ltr_pretraining"
    batch = _batch()
    params = objective.init_variables(jax.random.key(0), batch)["params"]
    loss, metrics = objective.loss_fn(params, batch, None)
    assert abs(float(loss) - np.log(VOCAB)) < 0.3
    assert metrics["lm_weight"] == B * (L - 4)  # targets 1 .. real-1: real tokens only


def test_prediction_at_i_ignores_tokens_after_i():
    objective = _objective()
    batch = _batch(real=L)
    params = objective.init_variables(jax.random.key(0), batch)["params"]

    def logits(ids):
        return objective.model.apply({"params": params}, ids, batch["segment_ids"],
                                     batch["input_mask"], next_token_positions(ids))["mlm_logits"]

    base = logits(batch["input_ids"])
    i = 6
    changed = batch["input_ids"].copy()
    changed[:, i + 1:] = np.random.default_rng(1).integers(5, VOCAB, (B, L - i - 1))
    after = logits(changed)
    np.testing.assert_allclose(after[:, :i + 1], base[:, :i + 1], atol=1e-5)
    assert not np.allclose(after[:, i + 1:], base[:, i + 1:], atol=1e-3)


def test_causal_bert_pools_the_last_real_token():
    config = _objective().config
    batch = _batch()
    model = BertModel(config)
    params = model.init(jax.random.key(0), batch["input_ids"])["params"]
    out = model.apply({"params": params}, batch["input_ids"], batch["segment_ids"],
                      batch["input_mask"])
    changed = batch["input_ids"].copy()
    changed[:, 1] += 1  # an early token reaches the pooled output through the causal mask
    out2 = model.apply({"params": params}, changed, batch["segment_ids"], batch["input_mask"])
    assert not np.allclose(out["pooled_output"], out2["pooled_output"])
    head = BertHead(config, CLASSES, 4, bilstm=16)  # Table 5's "+ BiLSTM" on top
    hp = head.init(jax.random.key(1), batch["input_ids"], batch["segment_ids"],
                   batch["input_mask"])["params"]
    assert head.apply({"params": hp}, batch["input_ids"], batch["segment_ids"],
                      batch["input_mask"]).shape == (B, 4)


def test_a_tiny_run_learns():
    objective = _objective(dropout_rate=0.0, attention_dropout_rate=0.0)
    batch = _batch()
    params = objective.init_variables(jax.random.key(0), batch)["params"]
    tx = optax.adam(3e-3)
    opt = tx.init(params)

    @jax.jit
    def step(params, opt):
        (loss, _), grads = jax.value_and_grad(objective.loss_fn, has_aux=True)(
            params, batch, jax.random.key(1))
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), opt, loss

    losses = []
    for _ in range(30):
        params, opt, loss = step(params, opt)
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0], losses


def test_unmasked_examples_for_the_ltr_source():
    docs = [[np.arange(5 + d, 15 + d, dtype=np.int32)] * 3 for d in range(4)]
    special = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=64)
    config = PretrainingConfig(max_seq_length=24, max_predictions_per_seq=1, nsp=False,
                               masking="none")
    example = next(iterate_examples(Corpus(docs), special, config))
    ids = example["input_ids"][example["input_mask"] > 0]
    assert ids[0] == 2 and ids[-1] == 3 and 4 not in ids  # [CLS] ... [SEP], nothing masked
    assert example["masked_lm_weights"].sum() == 0
    assert jnp.all(example["segment_ids"] == 0)
