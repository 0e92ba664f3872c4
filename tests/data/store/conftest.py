"""Shared pieces of the token-store tests: a slice of real text and vocabularies learned from it
(once per session), and a store built from them."""

import pathlib

import pytest

from bertjax.data.bert.source import BertPretrainingSource
from bertjax.data.elmo.source import ElmoSource
from bertjax.data.gpt.source import LmPretrainingSource

# family: (source class, learned vocabulary size, its settings)
FAMILIES = {
    "bert": (BertPretrainingSource, 500, {}),
    "gpt": (LmPretrainingSource, 400, {}),
    "elmo": (ElmoSource, 2000, {}),
}


@pytest.fixture(scope="session")
def wiki_slice(wikitext_valid, tmp_path_factory) -> pathlib.Path:
    """The first 600 lines of WikiText-2 valid (about 60 KB; 189 paragraphs)."""
    lines = wikitext_valid.read_text(encoding="utf-8").split("\n")[:600]
    path = tmp_path_factory.mktemp("corpus") / "wiki.txt"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


_VOCABS: dict = {}


@pytest.fixture(scope="session")
def learned_vocab(wiki_slice, tmp_path_factory):
    """vocab(family) -> a directory holding a vocabulary learned from `wiki_slice`."""

    def vocab(family: str) -> pathlib.Path:
        if family not in _VOCABS:
            cls, size, settings = FAMILIES[family]
            directory = tmp_path_factory.mktemp(f"{family}-vocab")
            source = cls(corpus=str(wiki_slice), vocab_size=size, **settings)
            source.prepare(directory)
            source.save(directory)
            _VOCABS[family] = directory
        return _VOCABS[family]

    return vocab
