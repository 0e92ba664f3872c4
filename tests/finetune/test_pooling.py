"""finetune.pooling = 'mean' (bertjax/finetune/heads/bert.py): a sentence head reads the mean of
the final hidden states over each example's real tokens, computed here with numpy; packed rows
give every example the logits it gets alone; task.json records the setting, a resume or a
--predict run keeps it and bertjax-export refuses it; bad values and heads that cannot take it
are one line each. (Packed rows are also checked for both poolings in test_packed.py.)"""

import json

import flax.linen as nn
import jax
import numpy as np
import pytest

import bertjax.finetune
from bertjax.finetune.examples import TaggedSentence, TextExample
from bertjax.finetune.heads.bert import bert_finetuning
from bertjax.finetune.outputs import CHOICE, CLASSES, SCORE, SPANS, WORD_CLASSES
from bertjax.finetune.pretrained import Pretrained
from bertjax.finetune.recipe import Recipe
from bertjax.models.bert import BertModel, bert_config
from bertjax.tokenizers.wordpiece import WordPieceVocabulary
from bertjax.training.checkpoint import restore_saved_params
from bertjax.training.mesh import make_mesh

L = 16
CONFIG = bert_config("tiny", vocab_size=64, max_position_embeddings=L, dropout_rate=0.0,
                     attention_dropout_rate=0.0)


def random_inputs(shape, seed=0):
    """Token ids, segments and a real-tokens-first mask of 3 .. L tokens per row."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, CONFIG.vocab_size, shape).astype(np.int32)
    lengths = rng.integers(3, L + 1, shape[:-1])
    mask = (np.arange(L) < lengths[..., None]).astype(np.int32)
    segments = ((np.arange(L) >= lengths[..., None] // 2) & (mask > 0)).astype(np.int32)
    return ids * mask, segments, mask


@pytest.mark.parametrize("output, shape", [(CLASSES, (6, L)), (SCORE, (6, L)),
                                           (CHOICE, (3, 2, L))], ids=["classes", "score", "choice"])
def test_mean_pooling_is_the_mean_of_the_real_tokens_through_the_classifier(output, shape):
    ids, segments, mask = random_inputs(shape)
    head = bert_finetuning(CONFIG, output, num_labels=3, pooling="mean")
    batch = {"input_ids": ids, "segment_ids": segments, "input_mask": mask}
    params = nn.unbox(head.init_variables(jax.random.key(0), batch)["params"])
    logits = np.asarray(head.model.apply({"params": params}, ids, segments, mask))

    flat = lambda x: x.reshape(-1, L)  # noqa: E731
    hidden = np.asarray(BertModel(CONFIG).apply({"params": params["bert"]}, flat(ids),
                                                flat(segments), flat(mask))["sequence_output"])
    real = flat(mask)[..., None].astype(np.float64)
    mean = (hidden * real).sum(1) / real.sum(1)  # [rows, E]
    kernel, bias = (np.asarray(params["classifier"][k]) for k in ("kernel", "bias"))
    expected = (mean @ kernel + bias).reshape(logits.shape)
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)

    cls = bert_finetuning(CONFIG, output, num_labels=3)  # the same parameters, read at [CLS]
    assert not np.allclose(np.asarray(cls.model.apply({"params": params}, ids, segments, mask)),
                           logits, atol=1e-3)


def test_bad_values_and_heads_that_read_every_token_are_one_line():
    with pytest.raises(ValueError, match=r"^finetune\.pooling is 'max': choose one of cls, "
                                         r"mean$"):
        Recipe("bert", "classification", pooling="max")
    with pytest.raises(ValueError, match=r"finetune\.pooling is a BERT setting"):
        Recipe("gpt", "classification", pooling="mean")
    for output, head in ((WORD_CLASSES, "tag"), (SPANS, "span")):
        with pytest.raises(ValueError) as refused:
            bert_finetuning(CONFIG, output, pooling="mean")
        assert "\n" not in str(refused.value)
        assert f"the {head} head reads every token: set finetune.pooling = 'cls'" in str(
            refused.value)
    with pytest.raises(ValueError, match="with finetune.bilstm the head reads the BiLSTM's "
                                         "max-pool"):
        bert_finetuning(CONFIG, CLASSES, bilstm=8, pooling="mean")


WORDS = ("good", "bad", "film", "plot", "long", "short", "the", "a", "was", "very")


def vocabulary(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    return WordPieceVocabulary(path, lower_case=True)


def scored_texts(n, seed):
    """Regression examples: 3 .. 10 random words, scored by how many say "good"."""
    rng = np.random.default_rng(seed)
    examples = []
    for i in range(n):
        words = rng.choice(WORDS, rng.integers(3, 11))
        examples.append(TextExample(str(i), (" ".join(words),), float((words == "good").sum())))
    return examples


def test_the_recorded_pooling_is_kept_by_a_resume_and_a_predict_run(tmp_path):
    """A 'mean' run (on packed rows) records its pooling in task.json; resuming it with 'cls'
    is refused in one line before anything changes; re-running it with --predict writes the
    mean-pooled head's scores, not the [CLS] head's."""
    vocab = vocabulary(tmp_path)
    encoder = nn.unbox(BertModel(CONFIG).init(jax.random.key(1), np.ones((1, L), np.int32))
                       ["params"])
    model = Pretrained("bert", CONFIG, encoder, vocab, "synthetic")
    train, dev = scored_texts(48, 0), scored_texts(16, 1)
    test_file = tmp_path / "test.tsv"
    test_file.write_text("index\tsentence\n" + "".join(f"{ex.id}\t{ex.texts[0]}\n"
                                                       for ex in dev))
    settings = dict(batch_size=8, epochs=1.0, max_seq_length=L, learning_rate=1e-3,
                    eval_every=1000, packed_sequences=2)
    mesh = make_mesh(devices=jax.devices()[:1])
    workdir = tmp_path / "run"

    def run(pooling, **kwargs):
        recipe = Recipe("bert", "regression", pooling=pooling, **settings)
        return bertjax.finetune.run(recipe, model, train, dev, workdir, mesh=mesh, **kwargs)

    run("mean")
    assert json.loads((workdir / "task.json").read_text())["head"] == {"pooling": "mean"}
    before = sorted(p.name for p in workdir.iterdir())
    with pytest.raises(ValueError) as refused:
        run("cls", predict=[str(test_file)])
    message = str(refused.value)
    assert "\n" not in message and "finetune.pooling = 'mean'" in message
    assert "this run sets 'cls'" in message
    assert sorted(p.name for p in workdir.iterdir()) == before

    outcome = run("mean", predict=[str(test_file)])
    rows = outcome.submissions[0].read_text().splitlines()[1:]
    written = np.array([float(r.split("\t")[1]) for r in rows])
    params, _, _ = restore_saved_params(workdir)
    ids, segments, mask = (outcome.setup.adapter.encode_inputs(dev, None)[0][k]
                           for k in ("input_ids", "segment_ids", "input_mask"))
    heads = {pooling: bert_finetuning(CONFIG, SCORE, pooling=pooling).model
             for pooling in ("cls", "mean")}
    scores = {pooling: np.asarray(head.apply({"params": params}, ids, segments, mask))[:, 0]
              for pooling, head in heads.items()}
    np.testing.assert_allclose(written, scores["mean"], atol=6e-4)
    assert np.abs(written - scores["cls"]).max() > 1e-2


def test_the_feature_based_tagger_refuses_mean_pooling():
    from bertjax.finetune.families.bert_features import BertFeatures
    from bertjax.finetune.setup import resolve

    recipe = Recipe("bert", "tagging", approach="features", pooling="mean", max_seq_length=L)
    task = resolve(recipe).task
    sentence = TaggedSentence("0", ("a",), ("O",))
    with pytest.raises(ValueError, match="the tag head reads every token"):
        BertFeatures(recipe, Pretrained("bert", CONFIG, {}, None, "synthetic"), task, 2,
                     [sentence])
