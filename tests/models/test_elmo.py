"""The ELMo biLM: padding and batch invariance, truncated BPTT state, and a short training on
real text (WikiText-2 validation) that lowers both perplexities and separates word senses."""

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.data.elmo.source import ElmoSource
from bertjax.inference.elmo import ElmoEmbedder
from bertjax.models.elmo import ElmoBiLM, elmo_config, zero_carry
from bertjax.objectives.bilm import elmo_pretraining
from bertjax.tokenizers.elmo_vocab import sentence_char_ids
from bertjax.training import Job, run
from bertjax.training.experiment import Experiment
from bertjax.training.loop import build_trainer
from bertjax.training.mesh import make_mesh
from bertjax.training.optim import make_optimizer

SMALL = dict(vocab_size=64, cell_size=32, proj_size=8, char_filters=((1, 4), (2, 4), (3, 8)),
             max_chars=10)


def random_embedder(**overrides):
    config = elmo_config("tiny", **{**SMALL, **overrides})
    chars = jnp.ones((1, 3, config.max_chars), jnp.int32)
    init = jax.jit(lambda key: ElmoBiLM(config).init(key, None, chars, jnp.array([3])))
    params = init(jax.random.key(0))["params"]
    params = jax.tree.map(lambda x: getattr(x, "value", x), params,
                          is_leaf=lambda x: hasattr(x, "value"))
    return ElmoEmbedder(config, params, batch_size=4)


def test_same_vectors_alone_in_any_batch_and_on_every_call():
    embedder = random_embedder()
    sentences = ["The bank of the river .", "A", "Money in the bank today .", "one two three"]
    together = embedder.embed(sentences)
    for i, sentence in enumerate(sentences):
        alone = embedder.embed([sentence])[0]
        assert alone.shape == (3, len(sentence.split()), 16)
        np.testing.assert_allclose(alone, together[i], atol=1e-5, rtol=0)
    again = embedder.embed(list(reversed(sentences)))[::-1]
    for a, b in zip(together, again, strict=True):
        np.testing.assert_array_equal(a, b)
    # h_0 is the token vector twice; a padded batch leaks nothing into any layer or direction
    np.testing.assert_array_equal(together[0][0, :, :8], together[0][0, :, 8:])


def test_padding_never_reaches_either_direction():
    config = elmo_config("tiny", **SMALL)
    model = ElmoBiLM(config)
    words = ["The", "bank", "of", "the", "river"]
    chars = np.zeros((2, 9, config.max_chars), np.int32)
    chars[0, :7] = sentence_char_ids(words, config.max_chars)
    chars[1, :7] = chars[0, :7]
    chars[1, 7:] = np.random.default_rng(0).integers(1, 262, (2, config.max_chars))  # junk
    lengths = jnp.array([7, 7])
    params = jax.jit(model.init)(jax.random.key(1), None, jnp.asarray(chars), lengths)
    out = jax.jit(model.apply)(params, None, jnp.asarray(chars), lengths)
    for direction in ("forward", "backward"):
        for layer in out[direction]:
            np.testing.assert_allclose(layer[0, :7], layer[1, :7], atol=1e-6)


def test_stream_carry_equals_one_long_window():
    """Truncated BPTT's forward pass: window 2 from window 1's state == the joined window."""
    config = elmo_config("tiny", **SMALL, token_encoder="word", dropout_rate=0.0)
    model = ElmoBiLM(config)
    rng = np.random.default_rng(0)
    ids, rev = (jnp.asarray(rng.integers(0, 64, (2, 12))) for _ in range(2))
    carry = jax.tree.map(jnp.asarray, zero_carry(config, 2))
    params = model.init(jax.random.key(0), ids, None, jnp.array([12, 12]))
    joined = model.apply(params, (ids, None), (rev, None), carry, method=ElmoBiLM.stream)
    first = model.apply(params, (ids[:, :5], None), (rev[:, :5], None), carry,
                        method=ElmoBiLM.stream)
    second = model.apply(params, (ids[:, 5:], None), (rev[:, 5:], None), first["carry"],
                         method=ElmoBiLM.stream)
    for direction in ("forward", "backward"):
        for k in range(config.num_layers):
            np.testing.assert_allclose(second[direction][k], joined[direction][k][:, 5:],
                                       atol=1e-6)
    np.testing.assert_allclose(second["carry"]["c"], joined["carry"]["c"], atol=1e-6)


@pytest.mark.slow
def test_sharded_train_step_matches_one_device():
    """Data- and model-parallel (cells split over 'model'): same loss and update as 1 device."""
    config = elmo_config("tiny", **SMALL, dropout_rate=0.0)
    task = elmo_pretraining(config)
    rng = np.random.default_rng(0)
    batch = {"token_ids": rng.integers(0, 64, (4, 6)).astype(np.int32),
             "lengths": np.array([6, 3, 5, 2], np.int32),
             "char_ids": rng.integers(1, 262, (4, 6, 10)).astype(np.int32)}
    tx = make_optimizer(learning_rate=1e-2, warmup_steps=1, total_steps=10, weight_decay=0.0)
    results = []
    for mesh in (make_mesh(devices=jax.devices()[:1]), make_mesh(data=2, model=2,
                                                                devices=jax.devices()[:4])):
        trainer = build_trainer(task, tx, mesh, 4, 6)
        state, metrics = trainer.step(trainer.init(), trainer.device_batch(batch))
        results.append((float(metrics["loss"]), jax.device_get(state.params)))
    assert abs(results[0][0] - results[1][0]) < 1e-5
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), results[0][1],
                 results[1][1])
    kernel = state.params["lstms_0"]["recurrent_kernel"]
    assert kernel.sharding.spec[3] == "model"  # the cells of each gate are split


# ---------------------------------------------------------------- short training on real text

STEPS, BATCH, LENGTH = 120, 16, 32
# The sense is cued by nearby words on both sides, which a briefly trained tiny biLM picks up.
RIVER = ["The river bank was flooded after the heavy rain .",
         "They walked along the river bank in the evening .",
         "Trees grew on the river bank near the water ."]
MONEY = ["The bank loan was paid with money from the company .",
         "She opened a bank account with her money .",
         "The central bank raised the interest rate ."]
_RUN: dict = {}


def split_corpus(path: pathlib.Path, directory: pathlib.Path) -> tuple[str, str]:
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    cut = int(len(lines) * 0.95)
    train, held_out = directory / "train.txt", directory / "held_out.txt"
    train.write_text("\n\n".join(lines[:cut]) + "\n", encoding="utf-8")
    held_out.write_text("\n\n".join(lines[cut:]) + "\n", encoding="utf-8")
    return str(train), str(held_out)


def held_out_perplexities(task, params, source):
    batch = next(iter(source.batches(0, LENGTH, 64)))
    _, metrics = jax.jit(task.loss_fn)(params, batch, None)
    return float(metrics["forward_ppl"]), float(metrics["backward_ppl"])


@pytest.fixture
def trained(wikitext_valid, tmp_path_factory):
    """A tiny char-CNN biLM trained on 95% of WikiText-2 valid (shared by the tests below)."""
    if "run" in _RUN:
        return _RUN["run"]
    directory = tmp_path_factory.mktemp("elmo_wikitext")
    train, held_out = split_corpus(wikitext_valid, directory)
    config = elmo_config("tiny", vocab_size=2048, dropout_rate=0.0)
    source = ElmoSource(corpus=train, corpus_format="plain", tokenizer="whitespace",
                        vocab_size=config.vocab_size, max_chars=config.max_chars)
    workdir = directory / "run"
    source.prepare(workdir)
    task = elmo_pretraining(config)
    tx = make_optimizer(learning_rate=3e-3, warmup_steps=10, total_steps=STEPS, weight_decay=0.0)
    exp = Experiment(task, source, tx, BATCH, STEPS, ((1.0, LENGTH),), log_every=STEPS // 3,
                     checkpoint_every=10 * STEPS)
    mesh = make_mesh(devices=jax.devices()[:1])
    init_state = build_trainer(task, tx, mesh, BATCH, LENGTH).init()
    init = jax.device_get(init_state.params)
    run(Job(exp), workdir, mesh=mesh)
    eval_source = ElmoSource(corpus=held_out, corpus_format="plain", tokenizer="whitespace",
                             vocab=str(workdir / "elmo_vocab.txt"), max_chars=config.max_chars)
    eval_source.prepare(directory / "eval")
    before = held_out_perplexities(task, init, eval_source)
    embedder = ElmoEmbedder.from_workdir(workdir)
    after = held_out_perplexities(task, embedder.params, eval_source)
    random = ElmoEmbedder(config, init, embedder.vocab, embedder.tokenizer)
    _RUN["run"] = {"before": before, "after": after, "embedder": embedder, "workdir": workdir,
                   "random": random}
    return _RUN["run"]


@pytest.mark.e2e
def test_both_perplexities_fall_on_held_out_text(trained):
    (fwd0, bwd0), (fwd1, bwd1) = trained["before"], trained["after"]
    print(f"held-out perplexity forward {fwd0:.0f} -> {fwd1:.0f}, "
          f"backward {bwd0:.0f} -> {bwd1:.0f}")
    assert fwd1 < 0.25 * fwd0 and bwd1 < 0.25 * bwd0
    metrics = [json.loads(line) for line in
               (trained["workdir"] / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["forward_ppl"] < metrics[0]["forward_ppl"]
    assert metrics[-1]["backward_ppl"] < metrics[0]["backward_ppl"]


def bank_vectors(embedder, sentences, layer):
    vectors = []
    for sentence, layers in zip(sentences, embedder.embed(sentences), strict=True):
        vectors.append(layers[layer, sentence.split().index("bank")])
    return np.stack(vectors)


def sense_distances(embedder, layer):
    """Mean Euclidean distance between 'bank' vectors of the same sense and of other senses.

    (Cosines are all near 1: every vector carries a large shared offset, which distances
    ignore.)"""
    river, money = bank_vectors(embedder, RIVER, layer), bank_vectors(embedder, MONEY, layer)
    dist = lambda a, b: np.linalg.norm(a[:, None] - b[None], axis=-1)  # noqa: E731
    off_diagonal = ~np.eye(len(RIVER), dtype=bool)
    same = np.concatenate([dist(river, river)[off_diagonal], dist(money, money)[off_diagonal]])
    return float(same.mean()), float(dist(river, money).mean())


@pytest.mark.e2e
def test_polysemy_contextual_vectors_separate_senses_static_ones_do_not(trained):
    embedder = trained["embedder"]
    static = np.concatenate([bank_vectors(embedder, RIVER, 0), bank_vectors(embedder, MONEY, 0)])
    np.testing.assert_allclose(static, np.broadcast_to(static[0], static.shape), atol=1e-6)
    top = embedder.config.num_layers
    contextual = np.concatenate([bank_vectors(embedder, RIVER, top),
                                 bank_vectors(embedder, MONEY, top)])
    assert np.abs(contextual - contextual[0]).max() > 1e-2  # context changes the vectors
    for name, model in (("random init", trained["random"]), ("trained", embedder)):
        for layer in range(1, top + 1):
            same, other = sense_distances(model, layer)
            print(f"'bank' layer {layer} {name}: same-sense distance {same:.3f}, other-sense "
                  f"{other:.3f} (ratio {other / same:.3f})")
    same, other = sense_distances(embedder, top)
    assert same < other


def test_polysemy_notebook_is_a_runnable_notebook():
    path = pathlib.Path(__file__).resolve().parents[2] / "notebooks" / "elmo_polysemy.ipynb"
    notebook = json.loads(path.read_text(encoding="utf-8"))
    assert notebook["nbformat"] == 4
    sources = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
    assert len(sources) >= 4 and "ElmoEmbedder" in "".join(sources)
    for source in sources:
        compile(source, str(path), "exec")  # runs as written (executed when it was saved)
