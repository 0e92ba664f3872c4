"""The pretraining example stream on WikiText-2: statistics, determinism, resume, shards.

Also pins the stream itself (a digest of the first examples of each masking for a fixed seed
on a synthetic corpus): any change to the examples a seed gives must update the pins on
purpose, and say so in the commit.
"""

import dataclasses
import hashlib
import itertools
import time

import numpy as np
import pytest

import bertjax.data.bert.instances as instances_lib
from bertjax.data.bert.instances import (
    PretrainingConfig,
    StaticStream,
    StaticTable,
    feature_spec,
    iterate_blocks,
    iterate_examples,
    make_stream,
)
from bertjax.data.bert.masking import SpecialIds, continuation_mask
from bertjax.data.bert.nsp import Corpus

NUM_EXAMPLES = 20_000
SPECIAL_IDS = (0, 2, 3, 4)  # pad, cls, sep, mask; 1 is [UNK]


_CACHE: dict = {}  # built once per module; the fixtures stay function-scoped like
# `wikitext_valid`, which skips without the data


def take(stream, n):
    return list(itertools.islice(stream, n))


def stack(examples):
    return {k: np.stack([e[k] for e in examples]) for k in examples[0]}


@pytest.fixture
def corpus(wikitext_words):
    if "corpus" not in _CACHE:
        documents, vocab_size = wikitext_words
        _CACHE["corpus"] = Corpus(documents), SpecialIds(*SPECIAL_IDS, vocab_size=vocab_size)
    return _CACHE["corpus"]


@pytest.fixture
def run(corpus):
    """The first NUM_EXAMPLES examples of seed 0, stacked."""
    if "run" not in _CACHE:
        start = time.perf_counter()
        _CACHE["run"] = stack(take(iterate_examples(*corpus, seed=0), NUM_EXAMPLES))
        print(f"{NUM_EXAMPLES} dynamic examples in {time.perf_counter() - start:.2f} s")
    return _CACHE["run"]


def assert_equal_examples(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)


def check_layout(batch, nsp):
    """Segment ids, SEPs, padding and mask agree; sequences fit."""
    ids, mask, seg = batch["input_ids"], batch["input_mask"], batch["segment_ids"]
    length = mask.sum(axis=1)
    assert (length <= ids.shape[1]).all() and (
        mask == (np.arange(ids.shape[1]) < length[:, None])
    ).all()
    assert (ids[:, 0] == SPECIAL_IDS[1]).all()
    assert ((ids == SPECIAL_IDS[0]) == (mask == 0)).all()
    for row, n, s in zip(ids, length, seg, strict=True):
        seps = np.flatnonzero(row == SPECIAL_IDS[2])
        assert seps[-1] == n - 1
        if nsp:
            assert seps.size == 2 and 1 < seps[0] < n - 2
            expected = (np.arange(row.size) > seps[0]) & (np.arange(row.size) < n)
        else:
            assert seps.size == 1
            expected = np.zeros(row.size, bool)
        assert (s == expected).all()


def test_features_have_fixed_shapes_and_dtypes(corpus):
    config = PretrainingConfig(max_seq_length=64, max_predictions_per_seq=10)
    example = next(iterate_examples(*corpus, config))
    spec = feature_spec(config)
    assert example.keys() == spec.keys()
    for name, (shape, dtype) in spec.items():
        assert example[name].shape == shape and example[name].dtype == dtype, name


def test_stream_statistics(run):
    check_layout(run, nsp=True)
    is_next = np.mean(run["next_sentence_label"] == 0)
    real = run["input_mask"].sum(axis=1) - 3  # tokens besides [CLS] and 2 [SEP]
    selection = run["masked_lm_weights"].sum() / real.sum()
    print(f"IsNext {is_next:.4f}, selection rate {selection:.4f}")
    assert abs(is_next - 0.5) <= 0.01
    assert abs(selection - 0.15) <= 0.005
    rows, slots = np.nonzero(run["masked_lm_weights"])
    cols = run["masked_lm_positions"][rows, slots]
    assert not np.isin(run["masked_lm_ids"][rows, slots], SPECIAL_IDS).any()
    assert np.mean(run["input_ids"][rows, cols] == SPECIAL_IDS[3]) == pytest.approx(0.8, abs=0.01)


def test_same_seed_same_examples_other_seed_other_examples(corpus, run):
    again = take(iterate_examples(*corpus, seed=0), 200)
    assert_equal_examples(again, [{k: v[i] for k, v in run.items()} for i in range(200)])
    other = stack(take(iterate_examples(*corpus, seed=1), 200))
    assert not np.array_equal(other["input_ids"], run["input_ids"][:200])


@pytest.mark.parametrize("start", [1, 1234, NUM_EXAMPLES - 300])
def test_resume_at_index_equals_tail(corpus, run, start):
    tail = stack(take(iterate_examples(*corpus, seed=0, start_index=start), 300))
    for k in run:
        np.testing.assert_array_equal(tail[k], run[k][start : start + 300], err_msg=k)


def test_process_shards_are_disjoint_and_cover(corpus, run):
    count, start, n = 3, 5, 900
    for p in range(count):
        shard = stack(
            take(
                iterate_examples(
                    *corpus, seed=0, start_index=start, process_index=p, process_count=count
                ),
                n // count,
            )
        )
        first = start + (p - start) % count  # global indices first, first + 3, ...
        for k in run:
            np.testing.assert_array_equal(shard[k], run[k][first : first + n : count], err_msg=k)


@pytest.mark.parametrize("masking", ["dynamic", "static"])
def test_block_shards_rebuild_each_global_batch_in_order(corpus, masking):
    config = PretrainingConfig(masking=masking, dupe_factor=2, max_seq_length=64)
    hosts, block, start = 2, 4, 16  # global batch 8 = two per-host blocks of 4
    full = stack(take(iterate_examples(*corpus, config, seed=0, start_index=start), 24))
    shards = [
        stack(
            take(
                iterate_examples(
                    *corpus,
                    config,
                    seed=0,
                    start_index=start,
                    process_index=p,
                    process_count=hosts,
                    block_size=block,
                ),
                12,
            )
        )
        for p in range(hosts)
    ]
    for k in full:
        rebuilt = np.concatenate(
            [np.concatenate([s[k][b * block : (b + 1) * block] for s in shards]) for b in range(3)]
        )
        np.testing.assert_array_equal(rebuilt, full[k], err_msg=k)


def test_static_masking_repeats_fixed_masks_every_epoch(corpus):
    config = PretrainingConfig(masking="static", dupe_factor=2, max_seq_length=64)
    size = StaticStream(corpus[0], corpus[1], config, 0).order.total
    examples = take(iterate_examples(*corpus, config, seed=0), 2 * size)

    def keys(chunk):
        return [b"".join(v.tobytes() for v in e.values()) for e in chunk]

    epoch0, epoch1 = keys(examples[:size]), keys(examples[size:])
    assert epoch0 != epoch1  # reshuffled ...
    assert sorted(epoch0) == sorted(epoch1)  # ... but each instance keeps its mask
    assert len(set(epoch0)) > 0.99 * size  # the dupe passes differ in pairs and masks
    check_layout(stack(examples[:2000]), nsp=True)
    resumed = take(iterate_examples(*corpus, config, seed=0, start_index=size - 10), 20)
    assert_equal_examples(resumed, examples[size - 10 : size + 10])
    shard = take(iterate_examples(*corpus, config, seed=0, process_index=1, process_count=2), 20)
    assert_equal_examples(shard, examples[1:40:2])


def test_no_nsp_gives_single_segments(corpus):
    config = PretrainingConfig(nsp=False)
    batch = stack(take(iterate_examples(*corpus, config, seed=0), 2000))
    check_layout(batch, nsp=False)
    assert not batch["next_sentence_label"].any()
    assert batch["input_mask"].sum(axis=1).max() == config.max_seq_length


def test_whole_word_masking_needs_continuation_mask(corpus):
    config = PretrainingConfig(whole_word_masking=True)
    with pytest.raises(ValueError, match="is_continuation"):
        next(iterate_examples(*corpus, config))
    tokens = ["x"] * corpus[1].vocab_size
    tokens[7] = "##x"
    example = next(iterate_examples(*corpus, config, is_continuation=continuation_mask(tokens)))
    assert example["masked_lm_weights"].sum() > 0


def test_corpus_without_multi_sentence_documents(corpus):
    special = corpus[1]
    documents = [[np.array([5, 6, 7], np.int32)], [np.array([8, 9], np.int32)], []]
    with pytest.raises(ValueError, match="one sentence per line.*NSP=False"):
        next(iterate_examples(documents, special))
    example = next(iterate_examples(documents, special, PretrainingConfig(nsp=False)))
    assert example["input_mask"].sum() in (4, 5)


@pytest.mark.parametrize(
    "kwargs",
    [{"masking": "online"}, {"max_seq_length": 4}, {"masked_lm_prob": 0.0}, {"dupe_factor": 0}],
)
def test_config_validation(kwargs):
    with pytest.raises(ValueError, match="PretrainingConfig"):
        PretrainingConfig(**kwargs)


def test_process_index_validation(corpus):
    with pytest.raises(ValueError, match="process_index"):
        next(iterate_examples(*corpus, process_index=2, process_count=2))


# ---------------------------------------------------------------- purity, blocks, groups, pins


def synthetic_corpus(seed=12345, documents=300):
    """A corpus that needs no shared data: 1-12 sentences of 1-40 ids in [5, 1000) per doc."""
    rng = np.random.default_rng(seed)
    docs = [[rng.integers(5, 1000, rng.integers(1, 41)).astype(np.int32)
             for _ in range(rng.integers(1, 13))] for _ in range(documents)]
    return docs, SpecialIds(*SPECIAL_IDS, vocab_size=1000)


def concatenate(blocks):
    return {key: np.concatenate([b[key] for b in blocks]) for key in blocks[0]}


def digest(examples):
    """sha256 (16 hex digits) of the examples' arrays, features in a fixed order."""
    h = hashlib.sha256()
    for example in examples:
        for key in sorted(example):
            h.update(key.encode() + np.ascontiguousarray(example[key]).tobytes())
    return h.hexdigest()[:16]


# The first 256 examples for seed 0 on `synthetic_corpus()` at length 64. Changing them
# changes what every run trains on: update on purpose only (numpy's Generator streams are
# part of it, so a numpy release that changes them shows up here).
PINS = {
    "dynamic": "ad485ad1f2943ff9",
    "static": "00c064a67a34627e",
    "static_groups": "24848ce842928a95",
    "no_nsp": "7d5ae834de197842",
}
PIN_CONFIGS = {
    "dynamic": PretrainingConfig(max_seq_length=64, max_predictions_per_seq=10),
    "static": PretrainingConfig(max_seq_length=64, max_predictions_per_seq=10, masking="static",
                                dupe_factor=2),
    "static_groups": PretrainingConfig(max_seq_length=64, max_predictions_per_seq=10,
                                       masking="static", dupe_factor=2, static_groups=3),
    "no_nsp": PretrainingConfig(max_seq_length=64, max_predictions_per_seq=10, nsp=False),
}


def pin_corpus(config):
    documents, special = synthetic_corpus()
    sizes = np.diff([g * len(documents) // config.static_groups
                     for g in range(config.static_groups + 1)])
    return Corpus(documents, group_sizes=sizes), special


@pytest.mark.parametrize("name", sorted(PINS))
def test_the_stream_of_seed_0_is_pinned(name):
    config = PIN_CONFIGS[name]
    examples = take(iterate_examples(*pin_corpus(config), config, seed=0), 256)
    assert digest(examples) == PINS[name]
    if name != "no_nsp":
        labels = stack(examples)["next_sentence_label"]
        assert 0.35 < labels.mean() < 0.65


@pytest.mark.parametrize("masking", ["dynamic", "static"])
def test_examples_are_a_function_of_their_index_alone(masking):
    """Any set of indices, built in any blocks, gives the stream's examples at those indices."""
    config = dataclasses.replace(PIN_CONFIGS["static_groups"], masking=masking)
    corpus, special = pin_corpus(config)
    stream = make_stream(corpus, special, config, seed=0)

    def first(chunk, n=3000):
        blocks = iterate_blocks(make_stream(corpus, special, config, seed=0), block_size=8,
                                chunk=chunk)
        return {key: value[:n] for key, value in concatenate(take(blocks, n // chunk + 1)).items()}

    per_block = {chunk: first(chunk) for chunk in (8, 512)}
    for key in per_block[8]:
        np.testing.assert_array_equal(per_block[8][key], per_block[512][key], err_msg=key)
    picks = np.array([0, 1, 2999, 17, 1500, 2000, 2001])  # across epochs, any order of blocks
    for part in (picks[:3], picks[3:]):
        scattered = stream.examples(np.sort(part))
        for key, value in scattered.items():
            np.testing.assert_array_equal(value, per_block[8][key][np.sort(part)], err_msg=key)


def test_a_static_group_is_built_alone_as_in_the_whole_corpus():
    """What a Beam worker does: group g from its own documents equals group g of the corpus."""
    config = PIN_CONFIGS["static_groups"]
    documents, special = synthetic_corpus()
    corpus, _ = pin_corpus(config)
    whole = StaticTable(corpus, special, config, seed=0)
    bounds = [g * len(documents) // 3 for g in range(4)]
    for group in range(3):
        own = Corpus(documents[bounds[group]:bounds[group + 1]])
        alone = StaticTable(own, special, config, seed=0, numbers=[group])
        assert alone.size(0) == whole.size(group)
        np.testing.assert_array_equal(alone.pass_bounds(0), whole.pass_bounds(group))
        rows = np.arange(whole.size(group))
        a, b = alone.examples(0, rows), whole.examples(group, rows)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_static_epochs_visit_every_row_once_group_by_group():
    config = PIN_CONFIGS["static_groups"]
    stream = StaticStream(*pin_corpus(config), config, seed=0)
    order, total = stream.order, stream.order.total
    for epoch in range(3):
        groups, rows = order.locate(np.arange(epoch * total, (epoch + 1) * total))
        assert len(set(zip(groups.tolist(), rows.tolist(), strict=True))) == total
        changes = np.flatnonzero(np.diff(groups)) + 1
        assert len(changes) == len(order.sizes) - 1  # each group's rows are contiguous
        spans = [(int(g), first, stop) for g, first, stop in order.segments(epoch)]
        assert [g for g, _, _ in spans] == groups[np.r_[0, changes]].tolist()
    assert not np.array_equal(order.locate(np.arange(total))[1],
                              order.locate(np.arange(total, 2 * total))[1])


def test_static_groups_pair_within_their_group():
    config = PretrainingConfig(masking="static", dupe_factor=1, static_groups=4)
    documents, special = synthetic_corpus()
    sizes = np.diff([g * len(documents) // 4 for g in range(5)])
    table = StaticTable(Corpus(documents, group_sizes=sizes), special, config, seed=0)
    for group in range(4):
        instances = table.instances(group)
        lo, hi = table.corpus.group(group)
        assert ((instances.b_doc >= lo) & (instances.b_doc < hi)).all()
    with pytest.raises(ValueError, match="fewer static_groups"):
        StaticTable(Corpus(documents[:3], group_sizes=[1, 2]), special,
                    dataclasses.replace(config, static_groups=2), seed=0)


WINDOWED = {"dynamic": PIN_CONFIGS["dynamic"],
            "packed": dataclasses.replace(PIN_CONFIGS["no_nsp"], packed_sequences=3)}


def test_an_epoch_s_windows_partition_its_documents(monkeypatch):
    """With windows of 7 documents, epoch 0's windows hold every document once, each window's
    instances have their segment A in its own documents, and epoch 1 visits the documents in
    another order."""
    monkeypatch.setattr(instances_lib, "DOCUMENTS_PER_WINDOW", 7)
    config = PIN_CONFIGS["dynamic"]
    corpus, special = pin_corpus(config)
    stream = make_stream(corpus, special, config, seed=0)
    K = stream.windows_per_epoch
    assert K == -(-corpus.num_documents // 7) > 3
    documents = [stream.window_documents(w) for w in range(K)]
    np.testing.assert_array_equal(np.sort(np.concatenate(documents)),
                                  np.arange(corpus.num_documents))
    multi = set(np.flatnonzero(corpus.sentences_per_document() >= 2).tolist())
    for w, window_documents in enumerate(documents):
        assert set(stream.window(w).doc.tolist()) == set(window_documents.tolist()) & multi
    next_epoch = np.concatenate([stream.window_documents(K + w) for w in range(K)])
    assert not np.array_equal(np.concatenate(documents), next_epoch)


@pytest.mark.parametrize("name", sorted(WINDOWED))
def test_small_windows_give_the_stream_s_examples_at_any_index(monkeypatch, name):
    """Windows of 7 documents: blocks of any size, a resume and scattered indices across
    windows and epochs all give the same examples."""
    monkeypatch.setattr(instances_lib, "DOCUMENTS_PER_WINDOW", 7)
    config = WINDOWED[name]
    corpus, special = pin_corpus(config)
    whole = make_stream(corpus, special, config, seed=0).examples(np.arange(3000))
    picks = np.array([0, 1, 17, 1500, 2000, 2001, 2999])
    scattered = make_stream(corpus, special, config, seed=0).examples(picks)
    resumed = next(iterate_blocks(make_stream(corpus, special, config, seed=0),
                                  start_index=1234, block_size=64))
    resumed_rows = len(resumed["input_ids"])
    assert 64 <= resumed_rows <= len(whole["input_ids"]) - 1234
    for key, value in whole.items():
        np.testing.assert_array_equal(scattered[key], value[picks], err_msg=key)
        np.testing.assert_array_equal(resumed[key], value[1234:1234 + resumed_rows],
                                      err_msg=key)


def test_a_first_block_plans_one_window_and_the_next(monkeypatch):
    """Start-up plans the first window (and the next, ahead), not the epoch: what a start
    costs does not grow with the corpus."""
    monkeypatch.setattr(instances_lib, "DOCUMENTS_PER_WINDOW", 7)
    planned = []
    plan = instances_lib.plan_instances

    def counted(*args, **kwargs):
        planned.append(len(kwargs["sources"]))
        return plan(*args, **kwargs)

    monkeypatch.setattr(instances_lib, "plan_instances", counted)
    config = PIN_CONFIGS["dynamic"]
    stream = make_stream(*pin_corpus(config), config, seed=0)
    stream.examples(np.arange(8))
    for future in list(stream._windows.values()):
        future.result()
    assert stream.windows_per_epoch > 3 and len(planned) == 2 and max(planned) <= 7
