"""Masked-LM masking statistics over 20,000 packed WikiText-2 examples, masked as one block."""

import functools
import types

import numpy as np
import pytest

from bertjax.data.bert.masking import (
    SpecialIds,
    continuation_mask,
    counter_bits,
    mask_block,
    num_to_predict,
    random_token_ids,
)
from bertjax.data.bert.nsp import Corpus, Instances, pack, plan_instances

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

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
    corpus, passes, total = Corpus(documents), [], 0
    while total < NUM_EXAMPLES:
        rng = np.random.default_rng(len(passes))
        passes.append(plan_instances(corpus, rng, max_seq_length=MAX_SEQ_LENGTH))
        total += len(passes[-1].doc)
    inputs = pack(corpus, Instances.concatenate(passes), special, MAX_SEQ_LENGTH)[0]
    return inputs[:NUM_EXAMPLES], special, tokens


def mask(inputs, special, seed=1, keys=None, **options):
    keys = np.arange(len(inputs)) if keys is None else keys
    return mask_block(inputs, special, seed, 0, keys, **options)


@functools.cache
def _masked(path):
    inputs, special, _ = _packed(path)
    return inputs, special, mask(inputs, special)


@pytest.fixture
def masked(wikitext_valid):
    return _masked(wikitext_valid)


def _selected(positions, weights):
    """(example, position, slot) index triples of the real targets."""
    rows, slots = np.nonzero(weights)
    return rows, positions[rows, slots], slots


def test_selection_rate_is_15_percent(masked):
    inputs, special, (_, positions, _, weights) = masked
    structural = np.isin(inputs, [special.pad, special.cls, special.sep, special.mask])
    n = (~structural).sum(axis=1)
    uncapped = np.round(n * 0.15) < MAX_PREDICTIONS
    assert uncapped.mean() > 0.9
    rate = weights[uncapped].sum() / n[uncapped].sum()
    print(f"selection rate {rate:.4f} of {n[uncapped].sum()} non-special tokens")
    assert abs(rate - 0.15) <= 0.005
    np.testing.assert_array_equal(weights.sum(axis=1), num_to_predict(n, 0.15, MAX_PREDICTIONS))


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


def test_selected_positions_are_uniform_over_the_sequence(masked):
    """Among rows of full length, every non-special position is chosen equally often."""
    inputs, special, (_, positions, _, weights) = masked
    full = (inputs != special.pad).all(axis=1)
    rows, cols, _ = _selected(positions[full], weights[full])
    counts = np.bincount(cols, minlength=MAX_SEQ_LENGTH)
    seps = np.isin(inputs[full], [special.cls, special.sep]).sum(axis=0)
    open_positions = seps == 0  # never [CLS] or [SEP] in any of these rows
    observed = counts[open_positions]
    share = observed.sum() / open_positions.sum()
    chi2 = ((observed - share) ** 2 / share).sum()
    df = open_positions.sum() - 1
    assert full.sum() > 1000 and abs(chi2 - df) < 5 * np.sqrt(2 * df), (chi2, df)


def test_specials_never_masked_and_positions_unique(masked):
    inputs, special, (corrupted, positions, ids, weights) = masked
    structural = [special.pad, special.cls, special.sep, special.mask]
    rows, cols, _ = _selected(positions, weights)
    assert not np.isin(inputs[rows, cols], structural).any()
    real = np.where(weights > 0, positions, -1)
    assert (np.diff(real, axis=1)[(weights[:, 1:] > 0)] > 0).all()  # ascending, so unique
    # Weights are ones then zeros; padding targets are zero.
    assert (np.diff(weights, axis=1) <= 0).all()
    assert not positions[weights == 0].any() and not ids[weights == 0].any()
    # Only selected positions change, and never into a structural token.
    changed = corrupted != inputs
    selected = np.zeros_like(changed)
    selected[rows, cols] = True
    assert not (changed & ~selected).any()
    assert not np.isin(corrupted[changed & (corrupted != special.mask)], structural).any()


def test_a_row_depends_on_its_key_alone(masked):
    """Masking row i alone, or inside another block, gives the same arrays: the property
    that makes examples a pure function of (seed, index)."""
    inputs, special, whole = masked
    picks = np.array([7, 19_999, 3, 12_345])
    alone = mask(inputs[picks], special, keys=picks)
    for field, expected in zip(alone, whole, strict=True):
        np.testing.assert_array_equal(field, expected[picks])
    other_seed = mask(inputs[picks], special, seed=2, keys=picks)
    assert not np.array_equal(other_seed.masked_lm_positions, alone.masked_lm_positions)


def test_counter_bits_are_uniform_and_independent():
    bits = counter_bits(0, 0, np.arange(4096), 64)  # [4096, 64]
    u = (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    for axis in (0, 1):  # neighbouring keys and neighbouring columns are uncorrelated
        a, b = np.swapaxes(u, 0, axis)[:-1].ravel(), np.swapaxes(u, 0, axis)[1:].ravel()
        assert abs(np.corrcoef(a, b)[0, 1]) < 0.01
    ones = np.unpackbits(bits.view(np.uint8)).mean()
    assert abs(ones - 0.5) < 0.002
    assert not np.array_equal(counter_bits(0, 1, np.arange(8), 4), counter_bits(0, 0,
                                                                                np.arange(8), 4))


def test_cap_at_max_predictions(masked):
    inputs, special, _ = masked
    out = mask(inputs[:500], special, max_predictions_per_seq=5)
    assert out.masked_lm_positions.shape == (500, 5) and out.masked_lm_weights.sum(1).max() == 5


def test_num_to_predict():
    assert num_to_predict(0, 0.15, 20) == 0
    assert num_to_predict(2, 0.15, 20) == 1
    assert num_to_predict(100, 0.15, 20) == 15
    assert num_to_predict(1000, 0.15, 20) == 20
    np.testing.assert_array_equal(num_to_predict(np.array([10, 30, 50]), 0.15, 20), [2, 4, 8])


def test_random_tokens_skip_structural_ids_and_cover_the_rest():
    special = SpecialIds(pad=0, cls=101, sep=102, mask=103, vocab_size=200)
    draws = random_token_ids(counter_bits(0, 0, np.arange(1000), 100).ravel(), special)
    assert draws.dtype == np.int32
    assert set(np.unique(draws).tolist()) == set(range(1, 200)) - {101, 102, 103}
    counts = np.bincount(draws, minlength=200)[draws.min():]
    counts = counts[counts > 0]
    expected = draws.size / counts.size
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert abs(chi2 - (counts.size - 1)) < 5 * np.sqrt(2 * (counts.size - 1))


def test_whole_word_masking_selects_whole_words(wikitext_valid):
    inputs, special, tokens = _packed(wikitext_valid, piece_chars=4)
    inputs = inputs[:5000]
    is_continuation = continuation_mask(tokens)
    assert is_continuation.mean() > 0.1
    out = mask(inputs, special, seed=3, is_continuation=is_continuation)
    rows, cols, _ = _selected(out.masked_lm_positions, out.masked_lm_weights)
    chosen = np.zeros(inputs.shape, bool)
    chosen[rows, cols] = True
    # A word: a piece and the '##' pieces after it; a '##' piece cut loose by
    # truncation (right after [CLS] or [SEP]) is a word of its own.
    word_start = ~is_continuation[inputs]
    word_start[:, 0] = True
    word_start[:, 1:] |= inputs[:, :-1] <= 4
    word = np.cumsum(word_start.ravel()).reshape(inputs.shape)  # pieces of a word share an id
    partly = np.bincount(word[chosen], minlength=word.max() + 1)
    whole = np.bincount(word.ravel(), minlength=word.max() + 1)
    touched = partly > 0
    assert (partly[touched] == whole[touched]).all(), "a word was selected in part"
    budget = num_to_predict((inputs > 4).sum(axis=1), 0.15, MAX_PREDICTIONS)
    assert (chosen.sum(axis=1) <= budget).all()  # whole words never overflow the budget
    assert chosen.sum() / budget.sum() > 0.95  # and nearly fill it
    assert chosen.sum() / (inputs > 4).sum() == pytest.approx(0.15, abs=0.01)
    choice = out.input_ids[rows, cols]
    assert np.mean(choice == special.mask) == pytest.approx(0.8, abs=0.02)


def _reference_whole_words(row, special, is_continuation, bits, budget):
    """google-research/bert's greedy whole-word pick for one row, written as a loop, with the
    word order given by the high half of each word's first draw."""
    words = []
    for pos, token in enumerate(row.tolist()):
        if token in (special.pad, special.cls, special.sep, special.mask):
            continue
        if words and is_continuation[token] and words[-1][-1] == pos - 1:
            words[-1].append(pos)
        else:
            words.append([pos])
    chosen = []
    for word in sorted(words, key=lambda w: int(bits[w[0]] >> np.uint64(32))):
        if len(chosen) >= budget:
            break
        if len(chosen) + len(word) <= budget:
            chosen += word
    return sorted(chosen)


def test_whole_word_selection_matches_a_per_row_reference(wikitext_valid):
    inputs, special, tokens = _packed(wikitext_valid, piece_chars=3)
    inputs, keys = inputs[:300], np.arange(300) + 10_000
    is_continuation = continuation_mask(tokens)
    out = mask(inputs, special, keys=keys, is_continuation=is_continuation)
    bits = counter_bits(1, 0, keys, MAX_SEQ_LENGTH)
    budget = num_to_predict((inputs > 4).sum(axis=1), 0.15, MAX_PREDICTIONS)
    for row in range(len(inputs)):
        got = out.masked_lm_positions[row][out.masked_lm_weights[row] > 0].tolist()
        assert got == _reference_whole_words(inputs[row], special, is_continuation, bits[row],
                                             budget[row]), row


M64 = 2**64 - 1


def _py_mix(x):
    """SplitMix64's finalizer on a Python int (the definition, independent of numpy)."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def _reference_mask_row(row, special, bits, budget):
    """One row masked from the definition, in plain Python: the `budget` non-special positions
    with the smallest high halves of their draws are selected; a draw's low half u / 2**32
    below 0.8 gives [MASK], below 0.9 a random id (the k-th non-structural id, k from the high
    half of the rehashed draw), else the token stays."""
    row, bits = row.tolist(), [int(b) for b in bits]
    structural = {special.pad, special.cls, special.sep, special.mask}
    candidates = [pos for pos, token in enumerate(row) if token not in structural]
    chosen = sorted(sorted(candidates, key=lambda pos: bits[pos] >> 32)[:budget])
    allowed = [i for i in range(special.vocab_size) if i not in structural]
    out = list(row)
    for pos in chosen:
        u = (bits[pos] & 0xFFFFFFFF) / 2**32
        if u < 0.8:
            out[pos] = special.mask
        elif u < 0.9:
            rehash = _py_mix(bits[pos] ^ 0x9E3779B97F4A7C15)
            out[pos] = allowed[((rehash >> 32) * len(allowed)) >> 32]
    return out, chosen, [row[pos] for pos in chosen]


def test_masking_matches_a_per_row_reference(wikitext_valid):
    """mask_block over a block equals the definition applied row by row."""
    inputs, special, _ = _packed(wikitext_valid)
    inputs, keys = inputs[:400], np.arange(400) * 7 + 3
    out = mask(inputs, special, keys=keys)
    bits = counter_bits(1, 0, keys, MAX_SEQ_LENGTH)
    budget = num_to_predict((inputs > 4).sum(axis=1), 0.15, MAX_PREDICTIONS)
    randoms = 0
    for row in range(len(inputs)):
        corrupted, positions, ids = _reference_mask_row(inputs[row], special, bits[row],
                                                        int(budget[row]))
        real = out.masked_lm_weights[row] > 0
        assert out.input_ids[row].tolist() == corrupted, row
        assert out.masked_lm_positions[row][real].tolist() == positions, row
        assert out.masked_lm_ids[row][real].tolist() == ids, row
        assert real.sum() == len(positions) and not out.masked_lm_positions[row][~real].any()
        original = inputs[row].tolist()
        randoms += sum(c not in (special.mask, o) for c, o in zip(corrupted, original, strict=True))
    assert randoms > 100  # the random-token branch was exercised


def test_special_ids_from_vocabulary_and_validation():
    vocab = types.SimpleNamespace(pad_id=0, cls_id=101, sep_id=102, mask_id=103, vocab_size=30522)
    assert SpecialIds.from_vocabulary(vocab) == SpecialIds(0, 101, 102, 103, 30522)
    with pytest.raises(ValueError, match="distinct"):
        SpecialIds(0, 0, 1, 2, 10)
    with pytest.raises(ValueError, match="one bool per vocabulary id"):
        mask_block(np.arange(5, 10)[None], SpecialIds(0, 1, 2, 3, 10), 0, 0, np.arange(1),
                   is_continuation=np.zeros(3, bool))
