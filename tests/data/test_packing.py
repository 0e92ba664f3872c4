"""Packed BERT pretraining rows (bertjax/data/bert/packing.py): every instance exactly once,
each exactly as the unpacked stream builds and masks it, and far less padding on real text."""

import dataclasses
import itertools

import numpy as np
import pytest

from bertjax.data.bert.instances import (
    DynamicStream,
    PackedStream,
    PretrainingConfig,
    feature_spec,
    iterate_blocks,
    make_stream,
)
from bertjax.data.bert.masking import SpecialIds
from bertjax.data.bert.nsp import Corpus
from bertjax.data.packing import pack_lengths
from tests.data.test_pretraining import SPECIAL_IDS, synthetic_corpus

CONFIG = PretrainingConfig(max_seq_length=64, max_predictions_per_seq=10, packed_sequences=3)


def unpack_row(row, slot):
    """The instance in `slot` of a packed row, as an unpacked example's real tokens and
    targets (positions relative to its [CLS])."""
    where = np.flatnonzero(row["sequence_ids"] == slot + 1)
    start = row["cls_positions"][slot]
    targets = row["masked_lm_weights"] > 0
    in_slot = targets & (row["masked_lm_positions"] >= where[0]) & (
        row["masked_lm_positions"] <= where[-1])
    return {
        "input_ids": row["input_ids"][where],
        "segment_ids": row["segment_ids"][where],
        "positions": row["position_ids"][where],
        "start": (where[0], start),
        "masked_lm_positions": row["masked_lm_positions"][in_slot] - start,
        "masked_lm_ids": row["masked_lm_ids"][in_slot],
        "next_sentence_label": row["next_sentence_label"][slot],
    }


def real(example):
    n = int(example["input_mask"].sum())
    targets = example["masked_lm_weights"] > 0
    return {
        "input_ids": example["input_ids"][:n],
        "segment_ids": example["segment_ids"][:n],
        "positions": np.arange(n),
        "masked_lm_positions": example["masked_lm_positions"][targets],
        "masked_lm_ids": example["masked_lm_ids"][targets],
        "next_sentence_label": example["next_sentence_label"],
    }


def test_pack_lengths_places_every_item_once_within_the_limits():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 129, 5000)
    rows = pack_lengths(lengths, 128, 3, np.random.default_rng(1), window=1000)
    items = rows[rows >= 0]
    assert sorted(items.tolist()) == list(range(5000))
    assert ((rows >= 0).sum(1) <= 3).all() and ((rows >= 0).sum(1) >= 1).all()
    filled = np.where(rows >= 0, lengths[np.maximum(rows, 0)], 0).sum(1)
    assert filled.max() <= 128
    assert filled.sum() / (len(rows) * 128) > 0.9  # uniform lengths pack tightly
    again = pack_lengths(lengths, 128, 3, np.random.default_rng(1), window=1000)
    np.testing.assert_array_equal(rows, again)
    with pytest.raises(ValueError, match="do not fit rows of 128"):
        pack_lengths([129], 128, 3)


def test_a_packed_epoch_holds_the_unpacked_epoch_instance_by_instance():
    """Window 0 of the packed stream (here the whole first epoch) is window 0 of the unpacked
    stream, every instance with the same tokens, segments, masked targets and NSP label,
    placed whole in one row."""
    documents, special = synthetic_corpus()
    corpus = Corpus(documents)
    packed = make_stream(corpus, special, CONFIG, seed=0)
    unpacked = make_stream(corpus, special, dataclasses.replace(CONFIG, packed_sequences=0),
                           seed=0)
    assert isinstance(packed, PackedStream) and type(unpacked) is DynamicStream
    members = packed.rows(0)
    n_rows, n_instances = len(members), len(unpacked.window(0).doc)
    assert n_rows < n_instances and (members >= 0).sum() == n_instances
    rows = packed.examples(np.arange(n_rows))
    instances = unpacked.examples(np.arange(n_instances))
    spec = feature_spec(CONFIG)
    assert {k: (v.shape[1:], v.dtype) for k, v in rows.items()} == {
        k: (shape, np.dtype(dtype)) for k, (shape, dtype) in spec.items()}
    for r in range(n_rows):
        row = {k: v[r] for k, v in rows.items()}
        used = members[r][members[r] >= 0]
        np.testing.assert_array_equal(row["next_sentence_weights"], members[r] >= 0)
        assert (row["sequence_ids"][row["input_mask"] == 0] == 0).all()
        for slot, u in enumerate(used):
            got = unpack_row(row, slot)
            first, cls = got.pop("start")
            assert first == cls and row["input_ids"][cls] == special.cls
            want = real({k: v[u] for k, v in instances.items()})
            for key, value in want.items():
                np.testing.assert_array_equal(got[key], value, err_msg=f"row {r} {key}")


def test_packed_rows_are_a_function_of_their_index():
    """Resuming at any row, or reading one host's blocks, gives the stream's rows."""
    documents, special = synthetic_corpus()
    stream = make_stream(Corpus(documents), special, CONFIG, seed=0)
    first = stream.examples(np.arange(1200))  # past epoch 0's end
    assert stream.window_size(0) < 1200
    fresh = make_stream(Corpus(documents), special, CONFIG, seed=0)
    later = next(iterate_blocks(fresh, start_index=333, block_size=50))
    for key, value in later.items():
        np.testing.assert_array_equal(value, first[key][333:333 + len(value)])
    host1 = next(iterate_blocks(fresh, start_index=0, process_index=1, process_count=2,
                                block_size=8))
    for key, value in host1.items():
        np.testing.assert_array_equal(value[:8], first[key][8:16])


def test_packing_is_refused_where_it_does_not_apply():
    with pytest.raises(ValueError, match="packed rows need masking='dynamic'"):
        PretrainingConfig(packed_sequences=2, masking="static")
    with pytest.raises(ValueError, match="packed_sequences must be 0"):
        PretrainingConfig(packed_sequences=1)


@pytest.mark.parametrize("length,per_row,gain", [(128, 3, 1.3), (512, 8, 1.5)])
def test_packing_removes_most_padding_of_wikitext(wikitext_words, length, per_row, gain):
    """The share of padding on WikiText-2 valid (paragraphs of 84 words on average), unpacked
    and packed (printed; benchmarks/packing.py reports it): packed rows carry `gain` times the
    real tokens or more."""
    documents, vocab_size = wikitext_words
    corpus = Corpus(documents)
    special = SpecialIds(*SPECIAL_IDS, vocab_size=vocab_size)
    shares = {}
    for K in (0, per_row):
        config = PretrainingConfig(max_seq_length=length, max_predictions_per_seq=length // 6,
                                   packed_sequences=K)
        stream = make_stream(corpus, special, config, seed=0)
        mask = np.concatenate([b["input_mask"] for b in itertools.islice(
            iterate_blocks(stream, block_size=256), 8)])
        shares[K] = 1.0 - mask.mean()
    measured = (1 - shares[per_row]) / (1 - shares[0])
    print(f"length {length}: padding {shares[0]:.1%} unpacked, {shares[per_row]:.1%} packed "
          f"({per_row} per row): {measured:.2f}x real tokens per row")
    assert shares[per_row] < 0.1 < shares[0]
    assert measured > gain
