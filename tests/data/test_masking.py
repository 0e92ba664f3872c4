"""Masked-LM masking statistics over 20,000 packed WikiText-2 examples."""

import functools
import types

import numpy as np
import pytest

from bertjax.data.masking import (
    SpecialIds,
    continuation_mask,
    mask_tokens,
    num_to_predict,
    random_token_ids,
)
from bertjax.data.nsp import Corpus, iterate_instances, pack

MAX_SEQ_LENGTH = 128
MAX_PREDICTIONS = 20
NUM_EXAMPLES = 20_000


def load_documents(path, piece_chars=None):
    """Token ids per sentence and the vocab (ids 0..4 special); paragraphs are documents.

    With `piece_chars`, words are split WordPiece-style into chunks of that many characters,
    the later ones spelled '##chunk', to exercise whole-word masking.
    """
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])}

    def pieces(word):
        if piece_chars is None:
            return [word]
        chunks = [word[k : k + piece_chars] for k in range(0, len(word), piece_chars)]
        return chunks[:1] + ["##" + c for c in chunks[1:]]

    documents = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            documents.append(
                [
                    np.array(
                        [vocab.setdefault(p, len(vocab)) for w in s.split() for p in pieces(w)],
                        np.int32,
                    )
                    for s in line.split(" . ")
                ]
            )
    return documents, list(vocab)


@functools.cache
def _packed(path, piece_chars=None):
    """[N, L] packed inputs, the special ids and the vocab tokens."""
    documents, tokens = load_documents(path, piece_chars)
    special = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=len(tokens))
    corpus, rng, inputs = Corpus(documents), np.random.default_rng(0), []
    while len(inputs) < NUM_EXAMPLES:
        order = rng.permutation(corpus.num_documents)
        for inst in iterate_instances(corpus, order, rng, max_seq_length=MAX_SEQ_LENGTH):
            inputs.append(pack(corpus, inst, special, MAX_SEQ_LENGTH)[0])
    return np.stack(inputs[:NUM_EXAMPLES]), special, tokens


@functools.cache
def _masked(path):
    inputs, special, _ = _packed(path)
    rng = np.random.default_rng(1)
    masked = [mask_tokens(x, special, rng) for x in inputs]
    return inputs, special, [np.stack(field) for field in zip(*masked, strict=True)]


@pytest.fixture
def masked(wikitext_valid):
    return _masked(wikitext_valid)


def _selected(positions, weights):
    """(example, position) index pairs of the real targets."""
    rows, cols = np.nonzero(weights)
    return rows, positions[rows, cols], cols


def test_selection_rate_is_15_percent(masked):
    inputs, special, (_, positions, _, weights) = masked
    candidates = np.isin(inputs, [special.pad, special.cls, special.sep, special.mask])
    n = (~candidates).sum(axis=1)
    uncapped = np.round(n * 0.15) < MAX_PREDICTIONS
    assert uncapped.mean() > 0.9
    rate = weights[uncapped].sum() / n[uncapped].sum()
    print(f"selection rate {rate:.4f} of {n[uncapped].sum()} non-special tokens")
    assert abs(rate - 0.15) <= 0.005


def test_replacement_split_is_80_10_10(masked):
    inputs, special, (corrupted, positions, ids, weights) = masked
    rows, cols, slots = _selected(positions, weights)
    new, old = corrupted[rows, cols], inputs[rows, cols]
    assert (ids[rows, slots] == old).all()  # targets are the original ids
    as_mask = np.mean(new == special.mask)
    as_random = np.mean((new != special.mask) & (new != old))
    kept = np.mean(new == old)
    print(f"split mask {as_mask:.4f} random {as_random:.4f} kept {kept:.4f} of {rows.size}")
    assert abs(as_mask - 0.8) <= 0.01
    assert abs(as_random - 0.1) <= 0.01
    assert abs(kept - 0.1) <= 0.01


def test_specials_never_masked_and_positions_unique(masked):
    inputs, special, (corrupted, positions, ids, weights) = masked
    structural = [special.pad, special.cls, special.sep, special.mask]
    rows, cols, _ = _selected(positions, weights)
    assert not np.isin(inputs[rows, cols], structural).any()
    for p, w in zip(positions, weights, strict=True):
        real = p[w > 0]
        assert np.unique(real).size == real.size
    # Weights are ones then zeros; padding targets are zero.
    assert (np.diff(weights, axis=1) <= 0).all()
    assert not positions[weights == 0].any() and not ids[weights == 0].any()
    # Only selected positions change, and never into a structural token.
    changed = corrupted != inputs
    selected = np.zeros_like(changed)
    selected[rows, cols] = True
    assert not (changed & ~selected).any()
    assert not np.isin(corrupted[changed & (corrupted != special.mask)], structural).any()


def test_cap_at_max_predictions(masked):
    inputs, special, _ = masked
    rng = np.random.default_rng(2)
    counts = [
        mask_tokens(x, special, rng, max_predictions_per_seq=5).masked_lm_weights.sum()
        for x in inputs[:500]
    ]
    assert (
        max(counts) == 5
        and len(mask_tokens(inputs[0], special, rng, max_predictions_per_seq=5).masked_lm_positions)
        == 5
    )


def test_num_to_predict():
    assert num_to_predict(0, 0.15, 20) == 0
    assert num_to_predict(2, 0.15, 20) == 1
    assert num_to_predict(100, 0.15, 20) == 15
    assert num_to_predict(1000, 0.15, 20) == 20


def test_random_tokens_skip_structural_ids_and_cover_the_rest():
    special = SpecialIds(pad=0, cls=101, sep=102, mask=103, vocab_size=200)
    draws = random_token_ids(np.random.default_rng(0), special, 100_000)
    assert draws.dtype == np.int32
    assert set(np.unique(draws).tolist()) == set(range(1, 200)) - {101, 102, 103}


def test_whole_word_masking_selects_whole_words(wikitext_valid):
    inputs, special, tokens = _packed(wikitext_valid, piece_chars=4)
    is_continuation = continuation_mask(tokens)
    assert is_continuation.mean() > 0.1
    rng = np.random.default_rng(3)
    total = selected = 0
    for x in inputs[:5000]:
        out = mask_tokens(x, special, rng, is_continuation=is_continuation)
        chosen = np.zeros(x.size, bool)
        chosen[out.masked_lm_positions[out.masked_lm_weights > 0]] = True
        # A word: a piece and the '##' pieces after it; a '##' piece cut loose by
        # truncation (right after [CLS] or [SEP]) is a word of its own.
        word_start = ~is_continuation[x] | (np.arange(x.size) == 0)
        word_start[1:] |= x[:-1] <= 4
        word_id = np.cumsum(word_start)  # pieces of one word share an id
        for w in np.unique(word_id[chosen]):
            assert chosen[word_id == w].all(), "a word was selected in part"
        budget = num_to_predict(int((x > 4).sum()), 0.15, MAX_PREDICTIONS)
        assert chosen.sum() <= budget  # whole words never overflow the budget
        total += budget
        selected += int(chosen.sum())
    assert selected / total > 0.95  # and nearly fill it


def test_special_ids_from_vocabulary_and_validation():
    vocab = types.SimpleNamespace(pad_id=0, cls_id=101, sep_id=102, mask_id=103, vocab_size=30522)
    assert SpecialIds.from_vocabulary(vocab) == SpecialIds(0, 101, 102, 103, 30522)
    with pytest.raises(ValueError, match="distinct"):
        SpecialIds(0, 0, 1, 2, 10)
    with pytest.raises(ValueError, match="one bool per vocabulary id"):
        mask_tokens(
            np.arange(5, 10),
            SpecialIds(0, 1, 2, 3, 10),
            np.random.default_rng(0),
            is_continuation=np.zeros(3, bool),
        )
