"""Byte-level BPE (GPT-2, Radford et al. 2019): encode, decode, learn, and GPT-2's file format.

Text is split by GPT-2's pre-tokenization pattern, each piece's UTF-8 bytes are mapped to
printable characters (`bytes_to_unicode`) and merged by rank. Every byte has a token, so no
input is unknown and decode(encode(x)) == x for any text, or any bytes via `encode_bytes`.

Files are GPT-2's: vocab.json (token -> id) and merges.txt ("#version" line, then "a b" per
merge, in rank order). Learned vocabularies use GPT-2's layout: the 256 byte tokens, the
merged tokens in the order they were learned, then the special tokens (<|endoftext|>).

Pure python (no TensorFlow), so generation starts fast; the seqio vocabulary over it is
`bertjax.data.vocabularies.BpeSeqio`.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import pathlib
from collections.abc import Iterable, Sequence

import regex

from bertjax.files import as_path, write_text
from bertjax.tokenizers.merges import apply_merges, learned_merges

END_OF_TEXT = "<|endoftext|>"
# GPT-2's pre-tokenizer (openai/gpt-2 encoder.py; the `tokenizers` ByteLevel default).
PRETOKENIZE = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)
_CACHE_SIZE = 1 << 20  # words memoized by the encoder before the cache resets


class BpeError(ValueError):
    """Tokenizer files that cannot be used; the message names the file and the fix."""


@functools.cache
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (printable Latin-1 kept, the rest shifted)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    table, shift = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shift)
            shift += 1
    return {b: table[b] for b in [*printable, *(b for b in range(256) if b not in printable)]}


@functools.cache
def _unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


def pretokenize(text: str) -> list[str]:
    """GPT-2's split of text into words (leading space kept with the word)."""
    return PRETOKENIZE.findall(text)


def _symbols(piece: str) -> str:
    """A piece as byte characters; lone surrogates (from undecodable bytes) map back to bytes."""
    table = bytes_to_unicode()
    return "".join(table[b] for b in piece.encode("utf-8", "surrogateescape"))


class ByteLevelBPE:
    """A byte-level BPE tokenizer from a vocabulary (token -> id) and ranked merges."""

    def __init__(self, vocab: dict[str, int], merges: Sequence[tuple[str, str]],
                 special_tokens: Sequence[str] = (END_OF_TEXT,), source: str = "vocabulary"):
        self.vocab = dict(vocab)
        self.source = source
        self.tokens = _inverse(self.vocab, source)
        missing = [b for b in bytes_to_unicode().values() if b not in self.vocab]
        if missing:
            raise BpeError(f"{source}: lacks byte token {missing[0]!r}; a byte-level vocab.json "
                           "has all 256 byte tokens: pass GPT-2-format files")
        self.ranks: dict[tuple[str, str], int] = {}
        for rank, (a, b) in enumerate(merges):
            if a + b not in self.vocab:
                raise BpeError(f"{source}: merge {rank + 1} ({a} {b}) makes {a + b!r}, which the "
                               "vocabulary lacks: pass the vocab.json and merges.txt of one "
                               "tokenizer")
            self.ranks.setdefault((a, b), rank)
        self.special_tokens = tuple(t for t in special_tokens if t in self.vocab)
        self._cache: dict[str, tuple[int, ...]] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    @property
    def eos_id(self) -> int | None:
        return self.vocab.get(END_OF_TEXT)

    @property
    def unk_id(self) -> None:
        return None  # byte-level: nothing is unknown

    def merges(self) -> list[tuple[str, str]]:
        return sorted(self.ranks, key=self.ranks.__getitem__)

    # ---- encoding
    def _bpe(self, word: str) -> tuple[int, ...]:
        return tuple(self.vocab[p] for p in apply_merges(list(word), self.ranks))

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        ids = self._cache.get(piece)
        if ids is None:
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            ids = self._cache[piece] = self._bpe(_symbols(piece))
        return ids

    def encode(self, text: str) -> list[int]:
        """Token ids of text. Special-token strings in the text are encoded as plain text."""
        return [i for piece in pretokenize(text) for i in self._encode_piece(piece)]

    def encode_bytes(self, data: bytes) -> list[int]:
        """Token ids of any bytes (valid UTF-8 gives the same ids as `encode`)."""
        return self.encode(data.decode("utf-8", "surrogateescape"))

    # ---- decoding
    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes of ids (special tokens as their text)."""
        table = _unicode_to_bytes()
        out = bytearray()
        for i in ids:
            token = self.tokens[int(i)]
            if token in self.special_tokens:
                out += token.encode("utf-8")
            else:
                out += bytes(table[c] for c in token)
        return bytes(out)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ids; bytes that are not valid UTF-8 become U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    # ---- equality (a resumed run's vocabulary must be the one it trained with)
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ByteLevelBPE):
            return NotImplemented
        return self.vocab == other.vocab and self.ranks == other.ranks

    def __hash__(self) -> int:
        return hash((self.vocab_size, len(self.ranks)))

    # ---- files
    @classmethod
    def from_files(cls, vocab_json: str | os.PathLike, merges_txt: str | os.PathLike
                   ) -> ByteLevelBPE:
        """GPT-2's vocab.json + merges.txt."""
        vocab_path, merges_path = pathlib.Path(vocab_json), pathlib.Path(merges_txt)
        for path, what in ((vocab_path, "vocab.json"), (merges_path, "merges.txt")):
            if not path.is_file():
                raise BpeError(f"{path}: no such file: pass the tokenizer's {what}")
        try:
            vocab = json.loads(vocab_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise BpeError(f"{vocab_path}: not a JSON vocabulary ({e}): pass GPT-2's vocab.json"
                           ) from None
        if not isinstance(vocab, dict):
            raise BpeError(f"{vocab_path}: not a token -> id mapping: pass GPT-2's vocab.json")
        return cls(vocab, read_merges(merges_path), source=f"{vocab_path} + {merges_path}")

    def save(self, directory: str | os.PathLike) -> tuple[pathlib.Path, pathlib.Path]:
        """Write vocab.json and merges.txt into `directory` (atomically; local or gs://)."""
        directory = as_path(directory)
        vocab_path, merges_path = directory / "vocab.json", directory / "merges.txt"
        write_text(vocab_path, json.dumps(self.vocab, ensure_ascii=False))
        lines = ["#version: 0.2", *(f"{a} {b}" for a, b in self.merges())]
        write_text(merges_path, "\n".join(lines) + "\n")
        return vocab_path, merges_path


def _inverse(vocab: dict[str, int], source: str) -> list[str]:
    ids = sorted(vocab.values())
    if ids != list(range(len(ids))):
        raise BpeError(f"{source}: ids are not 0..{len(ids) - 1} without gaps or repeats: "
                       "fix vocab.json")
    tokens = [""] * len(ids)
    for token, i in vocab.items():
        tokens[i] = token
    return tokens


def read_merges(path: str | os.PathLike) -> list[tuple[str, str]]:
    """Merges of a merges.txt (the "#version" header and blank lines skipped)."""
    merges = []
    text = pathlib.Path(path).read_text(encoding="utf-8")
    for n, line in enumerate(text.split("\n"), 1):
        if not line or (n == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise BpeError(f"{path}: line {n} is not 'a b': pass GPT-2's merges.txt")
        merges.append((parts[0], parts[1]))
    return merges


# ---------------------------------------------------------------- learning


def learn_bpe(texts: Iterable[str], vocab_size: int,
              special_tokens: Sequence[str] = (END_OF_TEXT,)) -> ByteLevelBPE:
    """Learn a byte-level BPE of `vocab_size` tokens (256 bytes + merges + special tokens).

    Repeatedly merges the most frequent adjacent pair within pre-tokenized words; ties break
    by the pair's strings, so the result is deterministic. Stops early when no pair occurs
    twice.
    """
    budget = vocab_size - 256 - len(special_tokens)
    if budget < 0:
        raise BpeError(f"vocab_size={vocab_size} is below the {256 + len(special_tokens)} byte "
                       "and special tokens: raise the vocab_size setting")
    counts: collections.Counter[str] = collections.Counter()
    for text in texts:
        counts.update(pretokenize(text))
    words: collections.Counter[str] = collections.Counter()
    for piece, count in counts.items():
        words[_symbols(piece)] += count
    merges = _learn_merges(words, budget)
    merged = list(dict.fromkeys(a + b for a, b in merges))  # a string made twice is one token
    tokens = [*bytes_to_unicode().values(), *merged, *special_tokens]
    return ByteLevelBPE({t: i for i, t in enumerate(tokens)}, merges, special_tokens,
                        source="learned vocabulary")


def _learn_merges(word_counts: dict[str, int], budget: int) -> list[tuple[str, str]]:
    """Merges in learning order, until `budget` new token strings exist."""
    words = sorted(word_counts)
    merges: list[tuple[str, str]] = []
    known: set[str] = set(bytes_to_unicode().values())
    new_tokens = 0
    for a, b, merged in learned_merges([list(w) for w in words],
                                       [word_counts[w] for w in words]):
        if new_tokens >= budget:
            break
        if merged not in known:  # else the same string by another split: no new token
            known.add(merged)
            new_tokens += 1
        merges.append((a, b))
    return merges
