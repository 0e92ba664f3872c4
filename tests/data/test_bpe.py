"""Byte-level BPE: round trips, agreement with transformers' GPT-2 tokenizer, learning, files."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertjax.tokenizers.bpe import END_OF_TEXT, BpeError, ByteLevelBPE, bytes_to_unicode, learn_bpe

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

TEXTS = [
    "The quick brown fox jumps over the lazy dog. It's 2024, isn't it?",
    "Byte-level BPE never meets an unknown token: naïve café, 東京, emoji 🙂 and tabs\tand\n",
    "   leading spaces, trailing spaces   ",
] * 20


@pytest.fixture(scope="module")
def bpe():
    return learn_bpe(TEXTS, 300)


def test_learned_layout_is_gpt2s(bpe):
    assert bpe.vocab_size == 300
    assert bpe.tokens[:256] == list(bytes_to_unicode().values())
    assert bpe.tokens[-1] == END_OF_TEXT and bpe.eos_id == 299
    assert learn_bpe(TEXTS, 300).vocab == bpe.vocab  # deterministic
    assert len(bpe.encode(TEXTS[0])) < 0.8 * len(TEXTS[0].encode())  # merges compress


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_any_text_round_trips(bpe, text):
    assert bpe.decode(bpe.encode(text)) == text


@settings(max_examples=200, deadline=None)
@given(st.binary())
def test_any_bytes_round_trip(bpe, data):
    assert bpe.decode_bytes(bpe.encode_bytes(data)) == data


def test_files_round_trip_and_special_tokens_are_plain_text(bpe, tmp_path):
    bpe.save(tmp_path)
    loaded = ByteLevelBPE.from_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
    assert loaded.vocab == bpe.vocab and loaded.merges() == bpe.merges()
    assert loaded.encode(TEXTS[1]) == bpe.encode(TEXTS[1])
    assert END_OF_TEXT not in [bpe.tokens[i] for i in bpe.encode(f"a{END_OF_TEXT}b")]
    assert bpe.decode([bpe.eos_id]) == END_OF_TEXT


def test_mismatched_files_fail_with_one_line(bpe, tmp_path):
    vocab_path, merges_path = bpe.save(tmp_path)
    vocab = json.loads(vocab_path.read_text())
    merged = bpe.tokens[280]
    del vocab[merged]
    vocab = {t: i for i, t in enumerate(sorted(vocab, key=vocab.get))}
    vocab_path.write_text(json.dumps(vocab))
    with pytest.raises(BpeError, match="same tokenizer|one tokenizer") as err:
        ByteLevelBPE.from_files(vocab_path, merges_path)
    assert "\n" not in str(err.value)
    with pytest.raises(BpeError, match="no such file"):
        ByteLevelBPE.from_files(tmp_path / "missing.json", merges_path)


def test_seqio_vocabulary_tf_path_matches_python(bpe):
    tf = pytest.importorskip("tensorflow")
    from bertjax.data.vocabularies import BpeSeqio

    vocab = BpeSeqio(bpe)
    assert vocab.vocab_size == 300 and vocab.eos_id == bpe.eos_id
    got = vocab.encode_tf(tf.constant(TEXTS[:3])).to_list()
    assert got == [bpe.encode(t) for t in TEXTS[:3]]
    assert vocab.encode_tf(tf.constant(TEXTS[1])).numpy().tolist() == bpe.encode(TEXTS[1])
    assert vocab.decode_tf(tf.constant(bpe.encode(TEXTS[1]))).numpy().decode() == TEXTS[1]


@pytest.mark.torch
def test_matches_transformers_gpt2_tokenizer_on_wikitext(wikitext_valid, tmp_path):
    """Same vocab.json + merges.txt (trained by the `tokenizers` library) -> same ids, for
    every line of WikiText-2's validation split."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    lines = wikitext_valid.read_text(encoding="utf-8").split("\n")
    trainer = tokenizers.ByteLevelBPETokenizer()
    trainer.train_from_iterator(lines, vocab_size=2000, min_frequency=2,
                                special_tokens=[END_OF_TEXT], show_progress=False)
    trainer.save_model(str(tmp_path))
    reference = transformers.GPT2Tokenizer.from_pretrained(str(tmp_path))
    ours = ByteLevelBPE.from_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
    expected = reference(lines, add_special_tokens=False)["input_ids"]
    mismatches = [i for i, line in enumerate(lines) if ours.encode(line) != expected[i]]
    assert sum(map(len, expected)) > 100_000
    assert not mismatches, f"{len(mismatches)} lines differ, first: {lines[mismatches[0]]!r}"
