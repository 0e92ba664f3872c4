"""The seqio vocabularies over the three families' tokenizers (bertjax/data/vocabularies.py):
one pattern (a seqio.Vocabulary holding the tokenizer), the tokenizer's ids in python and TF,
and equality by the tokenizer's contents (a resumed run compares vocabularies)."""

import pickle

import pytest

seqio = pytest.importorskip("seqio")
tf = pytest.importorskip("tensorflow")

from bertjax.data.vocabularies import (  # noqa: E402
    BpeSeqio,
    TokenizerVocabulary,
    WordPieceSeqio,
    WordsSeqio,
)
from bertjax.tokenizers import bpe, elmo_vocab, wordpiece  # noqa: E402

TEXTS = ["the cat sat on the mat", "a dog ran", "the cat ran on the dog mat"]


def tokenizers(directory):
    directory.mkdir(exist_ok=True)
    words = directory / "words.txt"
    elmo_vocab.write_vocab(elmo_vocab.learn_vocabulary([t.split() for t in TEXTS], 50), words)
    pieces = directory / "vocab.txt"
    wordpiece.write_vocab(wordpiece.learn_vocabulary(TEXTS, 60), pieces)
    return {WordPieceSeqio: wordpiece.WordPieceVocabulary(pieces, lower_case=True),
            BpeSeqio: bpe.learn_bpe(TEXTS * 4, 280),
            WordsSeqio: elmo_vocab.ElmoVocabulary(words)}


def test_each_family_is_a_seqio_vocabulary_over_its_tokenizer(tmp_path):
    for cls, tokenizer in tokenizers(tmp_path).items():
        vocab = cls(tokenizer)
        assert isinstance(vocab, seqio.Vocabulary) and isinstance(vocab, TokenizerVocabulary)
        assert vocab.tokenizer is tokenizer and vocab.vocab_size == tokenizer.vocab_size
        for text in TEXTS:
            ids = tokenizer.encode(text)
            assert vocab.encode(text) == ids, cls
            assert vocab.encode_tf(tf.constant(text)).numpy().tolist() == ids, cls
            assert vocab.decode(ids) == tokenizer.decode(ids), cls


def test_ids_a_family_fixes(tmp_path):
    found = tokenizers(tmp_path)
    pieces = WordPieceSeqio(found[WordPieceSeqio])
    assert (pieces.pad_id, pieces.eos_id) == (0, None)
    assert pieces.unk_id == found[WordPieceSeqio].unk_id
    gpt = BpeSeqio(found[BpeSeqio])
    assert gpt.pad_id == gpt.eos_id == found[BpeSeqio].eos_id and gpt.unk_id is None
    words = WordsSeqio(found[WordsSeqio])
    assert (words.eos_id, words.unk_id) == (found[WordsSeqio].eos_id, found[WordsSeqio].unk_id)


def test_equal_by_contents_and_family_and_picklable(tmp_path):
    first, second = tokenizers(tmp_path / "first"), tokenizers(tmp_path / "second")
    for cls in first:
        assert cls(first[cls]) == cls(second[cls]) and first[cls] == second[cls]
        assert hash(cls(first[cls])) == hash(cls(second[cls]))
        assert pickle.loads(pickle.dumps(cls(first[cls]))) == cls(first[cls])
    other = bpe.learn_bpe(TEXTS * 4, 270)
    assert BpeSeqio(first[BpeSeqio]) != BpeSeqio(other)
    assert WordPieceSeqio(first[WordPieceSeqio]) != WordsSeqio(first[WordsSeqio])
