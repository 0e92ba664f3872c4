"""Causal-LM pipeline: packing, determinism, resume at an example index, host sharding."""

import numpy as np
import pytest

from bertjax.data.gpt.source import (
    LmPretrainingSource,
    iterate_lm_examples,
    num_chunks,
    pack_documents,
)
from bertjax.data.source import DataError

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

DOCS = ["First document. It has two sentences.", "Second one\nhas a line break.",
        "Third: the end."] * 30


def test_packing_joins_documents_with_eos_and_shifts_targets():
    stream = pack_documents([[1, 2, 3], [4], [5, 6]], eos_id=0)
    np.testing.assert_array_equal(stream, [1, 2, 3, 0, 4, 0, 5, 6, 0])
    examples = list(iterate_lm_examples(stream, 4, shuffle=False, num_examples=2))
    np.testing.assert_array_equal(examples[0]["input_ids"], [1, 2, 3, 0])
    np.testing.assert_array_equal(examples[0]["target_ids"], [2, 3, 0, 4])
    np.testing.assert_array_equal(examples[1]["input_ids"], [4, 0, 5, 6])
    np.testing.assert_array_equal(examples[1]["target_ids"], [0, 5, 6, 0])
    assert examples[0]["loss_weights"].tolist() == [1, 1, 1, 1]  # packed: no padding


def test_each_epoch_is_a_permutation_of_all_chunks():
    stream = np.arange(101, dtype=np.int32)
    chunks = num_chunks(len(stream), 10)
    starts = [int(e["input_ids"][0]) for e in iterate_lm_examples(stream, 10, seed=3,
                                                                  num_examples=3 * chunks)]
    for epoch in range(3):
        assert sorted(starts[epoch * chunks:(epoch + 1) * chunks]) == list(range(0, 100, 10))
    assert starts[:chunks] != starts[chunks:2 * chunks]  # reshuffled each epoch
    again = [int(e["input_ids"][0]) for e in iterate_lm_examples(stream, 10, seed=3,
                                                                 num_examples=chunks)]
    assert again == starts[:chunks]


def test_resume_and_host_shards_give_the_same_global_examples():
    stream = np.arange(1000, dtype=np.int32)
    whole = [e["input_ids"][0] for e in iterate_lm_examples(stream, 8, seed=1, num_examples=60)]
    resumed = [e["input_ids"][0] for e in iterate_lm_examples(stream, 8, seed=1, start_index=37,
                                                              num_examples=23)]
    assert resumed == whole[37:]
    hosts = [[e["input_ids"][0] for e in iterate_lm_examples(
        stream, 8, seed=1, start_index=20, process_index=p, process_count=4, num_examples=10)]
        for p in range(4)]
    interleaved = [hosts[g % 4][(g - 20) // 4] for g in range(20, 60)]
    assert interleaved == whole[20:60]


def test_too_short_corpus_fails_with_one_line():
    with pytest.raises(DataError, match="shorter"):
        next(iterate_lm_examples(np.arange(5, dtype=np.int32), 8))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "docs.txt"
    path.write_text("\n\n".join(DOCS) + "\n", encoding="utf-8")
    return path


def test_source_learns_keeps_and_records_its_vocabulary(corpus, tmp_path):
    source = LmPretrainingSource(str(corpus), vocab="learn", vocab_size=300, seed=0)
    source.prepare(tmp_path)
    assert not list(tmp_path.iterdir())  # nothing is written before the run starts
    assert source.vocab_size <= 300
    assert source.save(tmp_path) == {"kind": "bpe", "vocab_size": source.vocab_size,
                                     "files": {"vocab": "vocab.json", "merges": "merges.txt"}}
    assert (tmp_path / "vocab.json").is_file() and (tmp_path / "merges.txt").is_file()

    batches = source.batches(0, 16, 4)
    first, second = next(batches), next(batches)
    assert first["input_ids"].shape == (4, 16) and first["loss_weights"].dtype == np.float32
    np.testing.assert_array_equal(first["input_ids"][:, 1:], first["target_ids"][:, :-1])
    resumed = next(_prepared(corpus, tmp_path).batches(4, 16, 4))  # at example 4
    np.testing.assert_array_equal(resumed["input_ids"], second["input_ids"])


def _prepared(corpus, workdir):
    source = LmPretrainingSource(str(corpus), vocab="learn", seed=0)
    source.prepare(workdir)  # reuses the workdir's vocabulary
    return source
