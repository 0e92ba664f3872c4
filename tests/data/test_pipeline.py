"""The seqio-backed BERT source: features, resume at an index, host shards, kept vocabulary."""

import itertools

import numpy as np
import pytest
import seqio

from bertjax.data.bert.source import (
    BertPretrainingSource,
    default_max_predictions,
    group_bounds,
    read_group,
)
from bertjax.data.source import DataError, load_documents


@pytest.fixture(scope="module")
def source(tmp_path_factory, bert_sample):
    source = BertPretrainingSource(corpus=str(bert_sample), vocab_size=600)
    source.prepare(tmp_path_factory.mktemp("work"))
    return source


def take(iterator, n):
    return list(itertools.islice(iterator, n))


def test_paper_prediction_caps():
    assert default_max_predictions(128, 0.15) == 20
    assert default_max_predictions(512, 0.15) == 80


def test_batches_have_the_pretraining_features(source):
    batch = next(source.batches(0, 64, 4))
    shapes = {k: (v.shape, v.dtype.name) for k, v in batch.items()}
    assert shapes == {
        "input_ids": ((4, 64), "int32"),
        "input_mask": ((4, 64), "int32"),
        "segment_ids": ((4, 64), "int32"),
        "masked_lm_positions": ((4, 12), "int32"),
        "masked_lm_ids": ((4, 12), "int32"),
        "masked_lm_weights": ((4, 12), "float32"),
        "next_sentence_label": ((4,), "int32"),
    }
    assert (batch["input_ids"][:, 0] == source.vocab.cls_id).all()
    assert "bertjax_pretrain_" in " ".join(seqio.TaskRegistry.names())


def test_tokenization_in_tf_data_matches_python_encode(source, bert_sample):
    first = bert_sample.read_text(encoding="utf-8").splitlines()[0]
    corpus = source.corpus
    start, stop = corpus.sentence_starts[:2]  # the first sentence of the first document
    ids = corpus.tokens[start:stop]
    assert list(ids) == source.vocab.encode(first)


def test_resume_at_an_example_index(source):
    full = take(source.batches(0, 64, 4), 5)
    resumed = take(source.batches(8, 64, 4), 3)
    for a, b in zip(full[2:], resumed, strict=True):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_host_shards_interleave_to_the_single_host_stream(source):
    task = source.task(64)
    single = take(task.get_dataset(split="train", shuffle=False).as_numpy_iterator(), 6)
    shards = [
        take(
            task.get_dataset(
                split="train", shuffle=False, shard_info=seqio.ShardInfo(i, 2)
            ).as_numpy_iterator(),
            3,
        )
        for i in range(2)
    ]
    interleaved = [shards[i % 2][i // 2] for i in range(6)]
    for a, b in zip(single, interleaved, strict=True):
        np.testing.assert_array_equal(a["input_ids"], b["input_ids"])


def test_learned_vocabulary_is_kept_in_the_workdir(tmp_path, bert_sample):
    first = BertPretrainingSource(corpus=str(bert_sample), vocab_size=600)
    first.prepare(tmp_path)
    assert not (tmp_path / "vocab.txt").exists()  # nothing is written before the run starts
    assert first.save(tmp_path) == {"kind": "wordpiece", "files": {"vocab": "vocab.txt"},
                                    "vocab_size": first.vocab_size, "lower_case": True}
    stored = (tmp_path / "vocab.txt").read_text()
    second = BertPretrainingSource(corpus=str(bert_sample), vocab_size=900)
    second.prepare(tmp_path)  # a resumed run keeps the ids it trained with
    assert (tmp_path / "vocab.txt").read_text() == stored
    assert second.vocab_size == first.vocab_size


def test_batches_are_the_examples_of_the_stream(source):
    """tf.data receives blocks and unbatches them: batches are the stream's examples in order."""
    batches = take(source.batches(3, 64, 4), 5)
    examples = take(source.examples(64, 4, 3, 0, 1), 20)
    for key in batches[0]:
        np.testing.assert_array_equal(np.concatenate([b[key] for b in batches]),
                                      np.stack([e[key] for e in examples]), err_msg=key)


def test_static_groups_are_contiguous_shares_of_the_documents(tmp_path):
    assert group_bounds(10, 3) == [0, 3, 6, 10]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"Document {d} starts here.\nIt has a second sentence.\n"
                                   f"And a third one, number {d}." for d in range(7)))
    documents = load_documents(str(corpus))
    groups = [read_group(str(corpus), "bert", "text", 3, g) for g in range(3)]
    assert sum(groups, []) == documents and [len(g) for g in groups] == [2, 2, 3]
    grouped = BertPretrainingSource(corpus=str(corpus), vocab_size=200, masking="static",
                                    static_groups=3, dupe_factor=2)
    grouped.prepare(tmp_path / "work")
    assert [np.diff(grouped.corpus.group(g))[0] for g in range(3)] == [2, 2, 3]
    assert next(grouped.batches(0, 16, 4))["input_ids"].shape == (4, 16)
    too_many = BertPretrainingSource(corpus=str(corpus), vocab_size=200, masking="static",
                                     static_groups=4)
    with pytest.raises(DataError, match="bert_pretraining_source: static group 0 has fewer"):
        too_many.prepare(tmp_path / "work")


def test_cache_dir_needs_static_masking_and_its_vocabulary(tmp_path):
    with pytest.raises(DataError, match="masking='static'"):
        BertPretrainingSource(cache_dir=str(tmp_path))
    cached = BertPretrainingSource(cache_dir=str(tmp_path), masking="static")
    with pytest.raises(DataError, match="set bert_pretraining_source.vocab to its vocab.txt"):
        cached.prepare(tmp_path / "work")
