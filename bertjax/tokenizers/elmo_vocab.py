"""ELMo's inputs: word ids from a frequency-ordered vocabulary, and character ids per token.

Vocabulary files use bilm-tf's layout: one token per line, `</S>`, `<S>`, `<UNK>` first, then
words by decreasing frequency (the sampled softmax's log-uniform sampler assumes that order).
ELMo is cased: words are kept as written.

Character ids use bilm-tf's inference numbering (what its released weights expect):
    0          padded token (every character of a padding position)
    1..256     UTF-8 byte b as b + 1
    257 / 258  begin / end of sentence (the whole "word" of <S> / </S>)
    259 / 260  begin / end of word
    261        padding after the end of a word
A word is [259, bytes..., 260, 261, ...], cut to `max_chars` (bytes beyond max_chars - 2 are
dropped, so any word fits).
"""

from __future__ import annotations

import collections
import os
import pathlib
import re
from collections.abc import Iterable, Sequence

import numpy as np

from bertjax.files import write_text

EOS, BOS, UNK = "</S>", "<S>", "<UNK>"
SPECIAL_TOKENS = (EOS, BOS, UNK)  # bilm-tf's first three lines
PADDED_TOKEN, BOS_CHAR, EOS_CHAR, BOW_CHAR, EOW_CHAR, PAD_CHAR = 0, 257, 258, 259, 260, 261
NUM_CHAR_IDS = 262
MAX_CHARS = 50
TOKENIZERS = ("whitespace", "simple")
_SIMPLE = re.compile(r"\w+(?:['’\-.]\w+)*|[^\w\s]", re.UNICODE)


class VocabularyError(ValueError):
    """A vocabulary file that cannot be used; the message names the file and the fix."""


def tokenize(sentence: str, tokenizer: str = "whitespace") -> list[str]:
    """Tokens of a sentence: split at whitespace (pre-tokenized text such as WikiText or lm1b),
    or "simple": words (with inner apostrophes, hyphens, dots) and punctuation marks apart."""
    if tokenizer == "whitespace":
        return sentence.split()
    if tokenizer == "simple":
        return _SIMPLE.findall(sentence)
    raise ValueError(f"unknown tokenizer {tokenizer!r}: choose one of {', '.join(TOKENIZERS)}")


def word_char_ids(word: str, max_chars: int = MAX_CHARS) -> np.ndarray:
    """Character ids [max_chars] of one word (see the module docstring)."""
    ids = np.full((max_chars,), PAD_CHAR, np.int32)
    if word == BOS or word == EOS:
        ids[:3] = (BOW_CHAR, BOS_CHAR if word == BOS else EOS_CHAR, EOW_CHAR)
        return ids
    data = word.encode("utf-8", "ignore")[: max_chars - 2]
    ids[0] = BOW_CHAR
    ids[1 : len(data) + 1] = np.frombuffer(data, np.uint8).astype(np.int32) + 1
    ids[len(data) + 1] = EOW_CHAR
    return ids


def sentence_char_ids(tokens: Sequence[str], max_chars: int = MAX_CHARS) -> np.ndarray:
    """[n + 2, max_chars] character ids of <S> tokens </S>."""
    words = [BOS, *tokens, EOS]
    return np.stack([word_char_ids(w, max_chars) for w in words])


def learn_vocabulary(
    sentences: Iterable[Sequence[str]], max_size: int, min_count: int = 1
) -> list[str]:
    """The specials, then the max_size - 3 most frequent words seen >= min_count times (ties
    broken alphabetically, so the result is deterministic)."""
    counts = collections.Counter(t for tokens in sentences for t in tokens)
    for special in SPECIAL_TOKENS:
        counts.pop(special, None)
    words = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    return [*SPECIAL_TOKENS, *words[: max(max_size - len(SPECIAL_TOKENS), 0)]]


def write_vocab(tokens: Sequence[str], path: str | os.PathLike) -> None:
    """One token per line, written atomically."""
    write_text(path, "\n".join(tokens) + "\n")


def read_vocab(path: str | os.PathLike) -> list[str]:
    """Tokens of a vocabulary file; a one-line VocabularyError if it is missing or malformed."""
    path = pathlib.Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise VocabularyError(f"{path}: cannot read the vocabulary ({err.strerror}): pass an "
                              "ELMo vocabulary file (one token per line)") from err
    except UnicodeDecodeError as err:
        raise VocabularyError(f"{path}: not UTF-8 text: pass an ELMo vocabulary file (one token "
                              "per line)") from err
    tokens = [line.strip() for line in text.split("\n")]
    tokens = [t for t in tokens if t and t != "!!!MAXTERMID"]  # bilm-tf skips this marker
    missing = [s for s in SPECIAL_TOKENS if s not in tokens]
    if missing:
        raise VocabularyError(f"{path}: missing {' '.join(missing)}: an ELMo vocabulary lists "
                              "</S>, <S> and <UNK> (bilm-tf layout)")
    return tokens


class ElmoVocabulary:
    """A word vocabulary in bilm-tf's layout: ids of tokens (unknown words -> <UNK>).

    Plain python, so embedding needs no TensorFlow; `bertjax.data.vocabularies.WordsSeqio`
    wraps it as a seqio vocabulary for the pipeline. Encoding adds no <S> / </S>: callers add
    them around each sentence.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = str(path)
        self.tokens = read_vocab(path)
        self._index = {t: i for i, t in enumerate(self.tokens)}
        if len(self._index) != len(self.tokens):
            raise VocabularyError(f"{path}: repeated tokens: keep one line per token")

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    @property
    def eos_id(self) -> int:
        return self._index[EOS]

    @property
    def bos_id(self) -> int:
        return self._index[BOS]

    @property
    def unk_id(self) -> int:
        return self._index[UNK]

    def token_ids(self, tokens: Sequence[str]) -> np.ndarray:
        """Ids of tokens (unknown words -> <UNK>)."""
        unk = self.unk_id
        return np.array([self._index.get(t, unk) for t in tokens], np.int32)

    def encode(self, text: str) -> list[int]:
        """Ids of the whitespace-separated tokens of `text`."""
        return self.token_ids(text.split()).tolist()

    def decode(self, ids: Iterable[int]) -> str:
        return " ".join(self.tokens[int(i)] for i in ids)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ElmoVocabulary):
            return NotImplemented
        return self.tokens == other.tokens

    def __hash__(self) -> int:
        return hash((len(self.tokens), tuple(self.tokens[:8])))

    def __repr__(self) -> str:
        return f"ElmoVocabulary({self.path}, {len(self.tokens)} tokens)"
