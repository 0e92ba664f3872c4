"""OpenAI GPT's (GPT-1, Radford et al. 2018) BPE: character-level merges with an end-of-word
mark, as transformers' OpenAIGPTTokenizer reads the `openai-gpt` checkpoint's files.

Unlike GPT-2's byte-level BPE (bpe.py) it is not byte-level: text is lower-cased and split into
words by BERT's basic tokenizer (transformers' BertNormalizer(lowercase=True) and
BertPreTokenizer, bertjax.tokenizers.wordpiece.basic_tokenize), each word is a sequence of
characters whose last carries "</w>", and the ranked merges join them. A symbol outside the
vocabulary reads as "<unk>". (The original release cleaned text with ftfy and split it with
spaCy; transformers, and so this module, use BERT's basic tokenizer instead.)

Files: vocab.json (token -> id) and merges.txt ("#version" line, then "a b" per merge), as the
openai-gpt checkpoint ships them, or tokenizer.json, the one file transformers 5 saves.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Iterable, Sequence

from bertjax.files import write_text
from bertjax.tokenizers.bpe import BpeError, read_merges
from bertjax.tokenizers.merges import apply_merges
from bertjax.tokenizers.wordpiece import basic_tokenize

END_OF_WORD, UNKNOWN = "</w>", "<unk>"


class OpenAIGptBPE:
    """GPT-1's tokenizer from its vocabulary (token -> id) and ranked merges."""

    def __init__(self, vocab: dict[str, int], merges: Sequence[tuple[str, str]],
                 unk_token: str = UNKNOWN, source: str = "vocabulary") -> None:
        self.vocab, self.source, self.unk_token = dict(vocab), source, unk_token
        if sorted(self.vocab.values()) != list(range(len(self.vocab))):
            raise BpeError(f"{source}: ids are not 0..{len(self.vocab) - 1} without gaps or "
                           "repeats: fix vocab.json")
        self.tokens = sorted(self.vocab, key=self.vocab.__getitem__)
        self.ranks = {pair: rank for rank, pair in reversed(list(enumerate(merges)))}
        self._cache: dict[str, tuple[int, ...]] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    @property
    def eos_id(self) -> None:
        return None  # GPT-1 has no end-of-text token

    @property
    def unk_id(self) -> int | None:
        return self.vocab.get(self.unk_token)

    def _bpe(self, word: str) -> tuple[int, ...]:
        parts = apply_merges([*word[:-1], word[-1] + END_OF_WORD], self.ranks)
        ids = [self.vocab.get(p, self.unk_id) for p in parts]
        return tuple(i for i in ids if i is not None)

    def encode(self, text: str) -> list[int]:
        """Token ids of text: lower-cased BERT words, each merged by rank."""
        ids: list[int] = []
        for word in basic_tokenize(text, lower_case=True):
            if word not in self._cache:
                self._cache[word] = self._bpe(word)
            ids.extend(self._cache[word])
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ids: tokens joined, "</w>" read as the end of a word."""
        text = "".join(self.tokens[int(i)] for i in ids)
        return text.replace(END_OF_WORD, " ").strip()

    @classmethod
    def from_directory(cls, directory: str | os.PathLike) -> OpenAIGptBPE:
        """An openai-gpt directory's tokenizer: vocab.json + merges.txt, else tokenizer.json."""
        directory = pathlib.Path(directory)
        vocab_path, merges_path = directory / "vocab.json", directory / "merges.txt"
        if vocab_path.is_file() and merges_path.is_file():
            vocab = _json(vocab_path)
            return cls(vocab, read_merges(merges_path), source=f"{vocab_path} + {merges_path}")
        path = directory / "tokenizer.json"
        if not path.is_file():
            raise BpeError(f"{directory}: no vocab.json + merges.txt or tokenizer.json: pass the "
                           "directory of an OpenAI GPT model with its tokenizer")
        model = _json(path).get("model", {})
        if model.get("type") != "BPE" or model.get("end_of_word_suffix") != END_OF_WORD:
            raise BpeError(f"{path}: not OpenAI GPT's BPE (a BPE model with the end-of-word "
                           f"suffix {END_OF_WORD}): pass an openai-gpt tokenizer")
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
                  for m in model.get("merges", [])]
        return cls(model["vocab"], merges, model.get("unk_token") or UNKNOWN, source=str(path))

    def save(self, directory: str | os.PathLike) -> tuple[pathlib.Path, pathlib.Path]:
        """Write vocab.json and merges.txt (the openai-gpt layout) into `directory`."""
        directory = pathlib.Path(directory)
        vocab_path, merges_path = directory / "vocab.json", directory / "merges.txt"
        write_text(vocab_path, json.dumps(self.vocab, ensure_ascii=False))
        merges = sorted(self.ranks, key=self.ranks.__getitem__)
        write_text(merges_path, "\n".join(["#version: 0.2", *(f"{a} {b}" for a, b in merges)])
                   + "\n")
        return vocab_path, merges_path


def _json(path: pathlib.Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BpeError(f"{path}: not JSON ({e}): pass the tokenizer's own file") from None
    if not isinstance(value, dict):
        raise BpeError(f"{path}: not a JSON object: pass the tokenizer's own file")
    return value
