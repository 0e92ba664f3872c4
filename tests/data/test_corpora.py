"""Corpus reading: bert/plain formats, paths, bad bytes, the stdlib corpus and TFDS."""

import logging
import os
import subprocess
import sys

import pytest

from bertjax.data import corpora
from bertjax.data.corpora import CorpusError


def write(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_bert_format(tmp_path):
    path = write(tmp_path / "c.txt", "One.\n  Two, padded.  \n\n\n\nThree.\n \t \nFour.\nFive.")
    assert corpora.read_documents(path) == [
        ["One.", "Two, padded."],
        ["Three."],
        ["Four.", "Five."],
    ]


def test_plain_format(tmp_path):
    text = (
        "First sentence. Second one! A line\nwrapped here? Yes.\n\n"
        'Mr. Smith, e.g. this one, stays whole. "Quoted." Then (aside.) more\n'
        "\n   \n"
        "no terminal punctuation\r\n"
    )
    path = write(tmp_path / "p.txt", text)
    assert corpora.read_documents(path, fmt="plain") == [
        ["First sentence.", "Second one!", "A line wrapped here?", "Yes."],
        ["Mr. Smith, e.g. this one, stays whole.", '"Quoted."', "Then (aside.) more"],
        ["no terminal punctuation"],
    ]


def test_split_sentences():
    assert corpora.split_sentences("It rose 3.5 metres. J. R. Smith saw it... Wow?! ok. Done") == [
        "It rose 3.5 metres.",
        "J. R. Smith saw it...",
        "Wow?! ok.",
        "Done",
    ]
    assert corpora.split_sentences("   ") == []


def test_bert_sample(bert_sample):
    documents = corpora.read_documents(bert_sample)
    assert [len(d) for d in documents] == [3, 13, 15]
    assert documents[0][1].startswith("Text should be one-sentence-per-line")
    assert documents[1][-1] == "Like most of his fellow gold-seekers, Cass was superstitious."
    assert "\u5c71" in documents[0][0] or any(ord(c) > 0x2E80 for c in documents[0][0])


def test_invalid_utf8_is_replaced_with_one_warning(tmp_path, caplog):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"good line\nbad \xff\xfe line\n\nanother \xc3 bad\nfine \xc3\xa9\n")
    with caplog.at_level(logging.WARNING):
        documents = corpora.read_documents(path)
    assert documents == [["good line", "bad \ufffd\ufffd line"], ["another \ufffd bad", "fine é"]]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert str(path) in warnings[0].getMessage() and "2 line(s)" in warnings[0].getMessage()


def test_missing_path(tmp_path):
    absent = tmp_path / "nowhere" / "corpus.txt"
    with pytest.raises(CorpusError, match="no such file.*fix the corpus setting") as info:
        corpora.read_documents(absent)
    assert str(absent) in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(CorpusError, match="no such file"):
        corpora.read_documents(str(tmp_path / "*.txt"))  # a glob matching nothing


def test_empty_corpus_and_bad_format(tmp_path):
    path = write(tmp_path / "empty.txt", "\n  \n\t\n")
    with pytest.raises(CorpusError, match="corpus is empty.*empty.txt"):
        corpora.read_documents(path)
    with pytest.raises(CorpusError, match="corpus format 'jsonl' is not one of"):
        corpora.read_documents(path, fmt="jsonl")
    (tmp_path / "d").mkdir()
    with pytest.raises(CorpusError, match="directory has no"):
        corpora.read_documents(tmp_path / "d")
    with pytest.raises(CorpusError, match="no corpus paths given"):
        corpora.read_documents([])


def test_directory_glob_and_lists(tmp_path):
    write(tmp_path / "dir" / "b.txt", "B1.\n\nB2.\n")
    write(tmp_path / "dir" / "a.txt", "A1.\nA1b.\n")
    write(tmp_path / "dir" / "notes.md", "Not read.\n")
    write(tmp_path / "dir" / "sub" / "c.txt", "C1.\n")
    expected = [["A1.", "A1b."], ["B1."], ["B2."]]
    assert corpora.read_documents(tmp_path / "dir") == expected
    assert corpora.read_documents(str(tmp_path / "dir" / "*.txt")) == expected
    assert corpora.read_documents(str(tmp_path / "dir" / "**" / "c.txt")) == [["C1."]]
    files = [tmp_path / "dir" / "b.txt", str(tmp_path / "dir" / "*.txt")]  # repeats dropped
    assert corpora.read_documents(files) == [["B1."], ["B2."], ["A1.", "A1b."]]


def test_write_bert_format_round_trip(tmp_path):
    documents = [["One sentence.", "Two\nlines  inside."], ["", " "], ["Last."]]
    path = tmp_path / "out" / "corpus.txt"
    corpora.write_bert_format(documents, path)
    assert path.read_text(encoding="utf-8") == "One sentence.\nTwo lines inside.\n\nLast.\n\n"
    assert corpora.read_documents(path) == [["One sentence.", "Two lines inside."], ["Last."]]
    assert os.listdir(path.parent) == ["corpus.txt"]


def test_stdlib_documents():
    documents = corpora.stdlib_documents()
    size = sum(len(s) + 1 for d in documents for s in d)
    assert 800_000 < size < 3_500_000, size
    assert len(documents) > 150 and all(len(d) >= 2 for d in documents)
    sentences = [s for d in documents for s in d]
    assert not any("\n" in s or s.startswith(">>>") or not s.strip() for s in sentences)
    assert any("context manager" in s for s in sentences)
    assert corpora.documents_digest(corpora.stdlib_documents()) == corpora.documents_digest(
        documents
    )


def test_stdlib_documents_same_in_a_fresh_process():
    code = (
        "from bertjax.data import corpora;"
        "print(corpora.documents_digest(corpora.stdlib_documents()))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == corpora.documents_digest(corpora.stdlib_documents())


def test_tfds_documents_with_mock_data():
    tfds = pytest.importorskip("tensorflow_datasets")
    import tensorflow as tf

    texts = ["Alpha one. Alpha two!\nAlpha three", "", "Beta. \n\n Gamma?"]

    def as_dataset(self, *args, **kwargs):
        return tf.data.Dataset.from_tensor_slices({"title": ["a", "b", "c"], "text": texts})

    with tfds.testing.mock_data(as_dataset_fn=as_dataset):
        documents = list(corpora.tfds_documents("wikipedia/20230601.en", "train"))
    assert documents == [["Alpha one.", "Alpha two!", "Alpha three"], ["Beta.", "Gamma?"]]

    with tfds.testing.mock_data(num_examples=4):
        documents = list(corpora.tfds_documents("wikipedia/20230601.en", "train"))
        assert 1 <= len(documents) <= 4 and all(isinstance(s, str) for d in documents for s in d)
        with pytest.raises(CorpusError, match="no feature 'body'.*fix text_key"):
            list(corpora.tfds_documents("wikipedia/20230601.en", "train", text_key="body"))


def test_tfds_unknown_dataset():
    pytest.importorskip("tensorflow_datasets")
    with pytest.raises(CorpusError, match="no_such_corpus_xyz.*fix the corpus name"):
        list(corpora.tfds_documents("no_such_corpus_xyz", "train"))
