"""BERT WordPiece vocabulary: tokenization in python and in tf.data, and vocabulary learning.

Tokenization follows BERT (Devlin et al. 2018) as implemented by Hugging Face's
`BertTokenizerFast`, so ids match checkpoints trained with either:

1. clean: drop NUL, U+FFFD and control/format/private-use characters, map whitespace to
   spaces, put spaces around CJK ideographs;
2. uncased only: NFD, drop combining marks (accents), lower-case character by character;
3. split on spaces and punctuation (ASCII punctuation and Unicode category P*);
4. greedy longest-match-first WordPiece with `##` continuations; a word longer than
   100 characters (BertTokenizerFast's max_input_chars_per_word), or one that cannot be
   covered by pieces, becomes [UNK].

Google's own checkpoints were trained with google-research/bert's tokenization.py, which
differs in two rules (`rules="google"`, what `--init` of a Google directory uses): its
_clean_text drops only control (Cc) and format (Cf) characters, so a private-use character
(Co, such as U+E000) stays and the word holding it becomes [UNK]; and it lower-cases each
whitespace-separated token with str.lower before NFD, so a word-final capital sigma becomes
'ς', not 'σ'. And its words may be up to 200 characters long, not 100.

`basic_tokenize` (python) and `wordpiece_tf.basic_tokenize_tf` (TensorFlow ops, usable in
`dataset.map`) implement steps 1-3 identically. tensorflow_text's own `BertTokenizer`
is not used for them because its lower-casing applies NFKC (e.g. '″' becomes '′′') and
ICU's context-dependent final sigma, and its whitespace class is ASCII-only, all of which
change ids relative to BERT. Two known departures from `BertTokenizerFast`, both on rare
characters: its CJK table starts the block at U+2B920 where BERT's starts at U+2B820 (we
follow BERT), and characters assigned or re-categorized after Unicode 3.2 may differ
because python, RE2/ICU and the Rust tokenizer each ship a different Unicode version.
"""

from __future__ import annotations

import collections
import os
import pathlib
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from bertjax.files import write_text
from bertjax.tokenizers.merges import learned_merges
from bertjax.tokenizers.wordpiece_rules import (
    CJK_RANGES,
    CLS,
    MASK,
    MAX_CHARS_PER_WORD,
    PAD,
    PAD_ID,
    RESERVED_TOKENS,
    SEP,
    SUFFIX,
    UNK,
)

if TYPE_CHECKING:
    import tensorflow as tf

_WORD_CACHE_SIZE = 1 << 20  # words memoized by the python encoder before the cache resets
_REMOVED_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs"})
_GOOGLE_REMOVED_CATEGORIES = frozenset({"Cc", "Cf"})  # tokenization.py's _is_control
RULES = ("transformers", "google")  # whose tokenizer a vocabulary follows (module docstring)



def load_vocab(path: str | os.PathLike) -> list[str]:
    """Reads a vocab.txt (one token per line, id = line number)."""
    text = pathlib.Path(path).read_text(encoding="utf-8")
    tokens = text.replace("\r\n", "\n").split("\n")  # not splitlines: tokens may hold U+2028
    if tokens and tokens[-1] == "":
        tokens.pop()  # the final newline
    return tokens


def write_vocab(tokens: Sequence[str], path: str | os.PathLike) -> None:
    """Writes tokens one per line (atomically: a temp file renamed into place)."""
    bad = [t for t in tokens if not t or "\n" in t or "\r" in t]
    if bad:
        raise ValueError(f"write_vocab({path}): token {bad[0]!r} is empty or holds a newline")
    write_text(path, "".join(t + "\n" for t in tokens))


# ---------------------------------------------------------------- python basic tokenizer


class _CharTable(dict):
    """A str.translate table filled lazily by a per-character rule (memoized)."""

    def __init__(self, rule: Callable[[str], str]) -> None:
        super().__init__()
        self._rule = rule

    def __missing__(self, codepoint: int) -> str:
        value = self[codepoint] = self._rule(chr(codepoint))
        return value


def _is_cjk(char: str) -> bool:
    cp = ord(char)
    return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


def _is_punct(char: str) -> bool:
    cp = ord(char)
    ascii_punct = 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126
    return ascii_punct or unicodedata.category(char).startswith("P")


def _clean_rule(char: str) -> str:
    if char in "\t\n\r" or char in "\u2028\u2029" or unicodedata.category(char) == "Zs":
        return " "
    if char in "\x00\ufffd" or unicodedata.category(char) in _REMOVED_CATEGORIES:
        return ""
    return f" {char} " if _is_cjk(char) else char


def _uncase_rule(char: str) -> str:
    return "" if unicodedata.category(char) == "Mn" else char.lower()


def _google_clean_rule(char: str) -> str:
    """tokenization.py's _clean_text and _tokenize_chinese_chars: as `_clean_rule`, but its
    _is_control drops Cc and Cf only (private-use and surrogate characters stay)."""
    if char in "\t\n\r" or char in "\u2028\u2029" or unicodedata.category(char) == "Zs":
        return " "  # tokenization.py's whitespace; U+2028/9 split in its str.split()
    if char in "\x00\ufffd" or unicodedata.category(char) in _GOOGLE_REMOVED_CATEGORIES:
        return ""
    return f" {char} " if _is_cjk(char) else char


_CLEAN = _CharTable(_clean_rule)
_GOOGLE_CLEAN = _CharTable(_google_clean_rule)
_UNCASE = _CharTable(_uncase_rule)
_NO_MARKS = _CharTable(lambda c: "" if unicodedata.category(c) == "Mn" else c)
_PUNCT = _CharTable(lambda c: f" {c} " if _is_punct(c) else c)


def _google_uncase(token: str) -> str:
    """tokenization.py's token.lower() and _run_strip_accents on one whitespace token: the
    token lower-cased as a whole (a word-final 'Σ' becomes 'ς'), then NFD without marks."""
    return unicodedata.normalize("NFD", token.lower()).translate(_NO_MARKS)


def basic_tokenize(text: str, lower_case: bool, rules: str = "transformers") -> list[str]:
    """BERT's basic tokenization of one string into words and punctuation marks, by
    BertTokenizerFast's rules or (`rules="google"`) google-research/bert's."""
    if rules == "google":
        text = text.translate(_GOOGLE_CLEAN)
        if lower_case:
            text = " ".join(_google_uncase(token) for token in text.split(" "))
    else:
        text = text.translate(_CLEAN)
        if lower_case:
            text = unicodedata.normalize("NFD", text).translate(_UNCASE)
    return [w for w in text.translate(_PUNCT).split(" ") if w]


# ---------------------------------------------------------------- character alignment

_CLEAN_NFD = _CharTable(lambda c: unicodedata.normalize("NFD", _clean_rule(c)))


def _canonical_order(chars: list[str], origin: list[int]) -> None:
    """NFD's canonical reordering, in place: each run of combining marks sorted (stably) by
    combining class, every mark keeping its origin. Decomposing character by character and
    then reordering is exactly NFD of the whole string."""
    i = 0
    while i < len(chars):
        j = i
        while j < len(chars) and unicodedata.combining(chars[j]):
            j += 1
        if j - i > 1:
            order = sorted(range(i, j), key=lambda t: unicodedata.combining(chars[t]))
            chars[i:j], origin[i:j] = [chars[t] for t in order], [origin[t] for t in order]
        i = j + 1


def _google_aligned(text: str, lower_case: bool) -> tuple[list[str], list[int]]:
    """`basic_tokenize(text, lower_case, "google")`'s normalized characters with their
    sources: each whitespace token lower-cased whole (str.lower maps character by character
    but for the final sigma, so lengths and sources line up), then NFD, marks dropped."""
    chars: list[str] = []
    origin: list[int] = []
    for k, char in enumerate(text):
        for out in _GOOGLE_CLEAN[ord(char)]:
            chars.append(out)
            origin.append(k)
    if not lower_case:
        return chars, origin
    lowered: list[str] = []
    lowered_origin: list[int] = []
    start = 0
    for end in [*(i for i, c in enumerate(chars) if c == " "), len(chars)]:
        lowered += "".join(chars[start:end]).lower()
        lowered_origin += [k for c, k in zip(chars[start:end], origin[start:end], strict=True)
                           for _ in c.lower()]
        if end < len(chars):
            lowered.append(" ")
            lowered_origin.append(origin[end])
        start = end + 1
    decomposed: list[str] = []
    decomposed_origin: list[int] = []
    for char, k in zip(lowered, lowered_origin, strict=True):
        for out in unicodedata.normalize("NFD", char):
            decomposed.append(out)
            decomposed_origin.append(k)
    _canonical_order(decomposed, decomposed_origin)
    kept = [(c, k) for c, k in zip(decomposed, decomposed_origin, strict=True)
            if unicodedata.category(c) != "Mn"]
    return [c for c, _ in kept], [k for _, k in kept]


def _normalize_aligned(text: str, lower_case: bool, rules: str = "transformers"
                       ) -> tuple[list[str], list[int]]:
    """`basic_tokenize`'s normalized characters, each with the index of its source in `text`."""
    if rules == "google":
        return _google_aligned(text, lower_case)
    table = _CLEAN_NFD if lower_case else _CLEAN
    chars: list[str] = []
    origin: list[int] = []
    for k, char in enumerate(text):
        for out in table[ord(char)]:
            chars.append(out)
            origin.append(k)
    if not lower_case:
        return chars, origin
    if not text.isascii():
        _canonical_order(chars, origin)
    uncased: list[str] = []
    uncased_origin: list[int] = []
    for char, k in zip(chars, origin, strict=True):
        for out in _UNCASE[ord(char)]:  # "" for an accent; 'İ' lower-cases to two characters
            uncased.append(out)
            uncased_origin.append(k)
    return uncased, uncased_origin


def _aligned_words(text: str, lower_case: bool, rules: str = "transformers"
                   ) -> list[tuple[str, list[int]]]:
    """`basic_tokenize(text, lower_case, rules)`, each word with the `text` index of each
    character."""
    words: list[tuple[str, list[int]]] = []
    start = 0
    chars, origin = _normalize_aligned(text, lower_case, rules)
    for i, char in enumerate(chars):
        punct = _PUNCT[ord(char)] != char
        if char == " " or punct:
            if i > start:
                words.append(("".join(chars[start:i]), origin[start:i]))
            if punct:
                words.append((char, origin[i : i + 1]))
            start = i + 1
    if len(chars) > start:
        words.append(("".join(chars[start:]), origin[start:]))
    return words


# ---------------------------------------------------------------- vocabulary


class WordPieceVocabulary:
    """A BERT vocab.txt; cased or uncased (lower-cased, accents stripped).

    `encode` (python) and `encode_tf` (TF ops, for `dataset.map`) give identical ids.
    No EOS/BOS: BERT marks sequences with [CLS]/[SEP], added by the task preprocessors.
    This module imports neither seqio nor TensorFlow (the TF path is `wordpiece_tf.py`,
    imported when first used), so tools that tokenize only in python start without them; the
    seqio vocabulary over it is `bertjax.data.vocabularies.WordPieceSeqio`.
    """

    def __init__(self, vocab_path: str | os.PathLike, lower_case: bool,
                 rules: str = "transformers") -> None:
        self._path = str(vocab_path)
        self._lower_case = bool(lower_case)
        if rules not in RULES:
            raise ValueError(f"WordPiece rules {rules!r}: choose one of {', '.join(RULES)}")
        self._rules = rules
        self._max_word_chars = MAX_CHARS_PER_WORD[rules]
        if not pathlib.Path(self._path).is_file():
            raise ValueError(f"{self._path}: vocabulary file not found; fix the vocab path setting")
        self._tokens = load_vocab(self._path)
        self._index = self._build_index()
        self._max_piece_chars = max(
            len(t) - len(SUFFIX) if t.startswith(SUFFIX) else len(t) for t in self._tokens
        )
        self._word_cache: dict[str, tuple[int, ...]] = {}

    def _build_index(self) -> dict[str, int]:
        index: dict[str, int] = {}
        for i, token in enumerate(self._tokens):
            if not token or token in index:
                what = "an empty token" if not token else f"a repeat of {token!r}"
                raise ValueError(f"{self._path}: line {i + 1} is {what}; fix the vocabulary file")
            index[token] = i
        for token in RESERVED_TOKENS:
            if token not in index:
                raise ValueError(f"{self._path}: missing {token}; add it to the vocabulary file")
        if index[PAD] != PAD_ID:
            raise ValueError(f"{self._path}: {PAD} must be on line 1 (id 0, seqio pads with 0)")
        return index

    # ---- ids and metadata
    @property
    def vocab_path(self) -> str:
        return self._path

    @property
    def lower_case(self) -> bool:
        return self._lower_case

    @property
    def rules(self) -> str:
        """"transformers" (BertTokenizerFast's) or "google" (tokenization.py's): see the module
        docstring for where they differ."""
        return self._rules

    @property
    def tokens(self) -> list[str]:
        return list(self._tokens)

    @property
    def vocab_size(self) -> int:
        return len(self._tokens)

    @property
    def extra_ids(self) -> int:
        return 0

    @property
    def pad_id(self) -> int:
        return self._index[PAD]

    @property
    def unk_id(self) -> int:
        return self._index[UNK]

    @property
    def cls_id(self) -> int:
        return self._index[CLS]

    @property
    def sep_id(self) -> int:
        return self._index[SEP]

    @property
    def mask_id(self) -> int:
        return self._index[MASK]

    @property
    def eos_id(self) -> None:
        return None

    @property
    def bos_id(self) -> None:
        return None

    def token_to_id(self, token: str) -> int:
        """The id of a token, or unk_id if it is not in the vocabulary."""
        return self._index.get(token, self.unk_id)

    # ---- python path
    def _wordpiece(self, word: str) -> tuple[int, ...]:
        if len(word) > self._max_word_chars:
            return (self.unk_id,)
        ids, start = [], 0
        while start < len(word):
            for end in range(min(len(word), start + self._max_piece_chars), start, -1):
                piece = word[start:end] if start == 0 else SUFFIX + word[start:end]
                if piece in self._index:
                    ids.append(self._index[piece])
                    start = end
                    break
            else:
                return (self.unk_id,)
        return tuple(ids)

    def encode(self, s: str) -> list[int]:
        """The WordPiece ids of a string (no [CLS]/[SEP])."""
        ids: list[int] = []
        for word in basic_tokenize(s, self._lower_case, self._rules):
            pieces = self._word_cache.get(word)
            if pieces is None:
                if len(self._word_cache) >= _WORD_CACHE_SIZE:
                    self._word_cache.clear()
                pieces = self._word_cache[word] = self._wordpiece(word)
            ids.extend(pieces)
        return ids

    def _cached_wordpiece(self, word: str) -> tuple[int, ...]:
        pieces = self._word_cache.get(word)
        if pieces is None:
            if len(self._word_cache) >= _WORD_CACHE_SIZE:
                self._word_cache.clear()
            pieces = self._word_cache[word] = self._wordpiece(word)
        return pieces

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """`encode(text)` and, per WordPiece, its [start, end) character span in `text` itself.

        For extractive QA, where a span of predicted tokens must map back to the original,
        un-normalized substring. Every normalized character remembers the character of `text`
        it came from (cleaning, NFD, accent stripping and lower-casing each act on one
        character), so a piece spans from the source of its first character to the source of
        its last; a `##` piece covers its own characters inside the word, a word that becomes
        [UNK] the whole word. Dropped characters (accents, control characters) inside a word
        fall inside its span, at its edges outside. These are BertTokenizerFast's offsets.
        """
        ids: list[int] = []
        offsets: list[tuple[int, int]] = []
        for word, origin in _aligned_words(text, self._lower_case, self._rules):
            pieces = self._cached_wordpiece(word)
            if pieces == (self.unk_id,):
                lengths = [len(word)]
            else:  # each piece is a substring of the word; "##" marks all but the first
                lengths = [len(self._tokens[t]) for t in pieces]
                lengths[1:] = [n - len(SUFFIX) for n in lengths[1:]]
            start = 0
            for n in lengths:
                offsets.append((origin[start], origin[start + n - 1] + 1))
                start += n
            ids.extend(pieces)
        return ids, offsets

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text: ids past the vocabulary read as [UNK], [PAD] dropped, ## joined."""
        tokens = [self._tokens[i] if i < len(self._tokens) else UNK
                  for i in map(int, ids) if i != self.pad_id]
        return " ".join(tokens).replace(" " + SUFFIX, "")

    # ---- TensorFlow path (wordpiece_tf.py, imported when first used)
    def encode_tf(self, s: tf.Tensor) -> tf.Tensor | tf.RaggedTensor:
        """Strings of shape [...] -> int32 ids [..., (ids)]; a scalar gives a dense vector."""
        from bertjax.tokenizers import wordpiece_tf

        if self._rules != "transformers":
            raise ValueError(f"{self._path}: the TensorFlow tokenizer follows transformers' "
                             f"rules, not {self._rules!r}: tokenize this vocabulary in python "
                             "(encode)")

        return wordpiece_tf.encode(s, self._tokens, self._lower_case)

    def decode_tf(self, ids: tf.Tensor) -> tf.Tensor:
        """Ids [..., L] -> strings [...] ([PAD] dropped, ## pieces joined)."""
        from bertjax.tokenizers import wordpiece_tf

        return wordpiece_tf.decode(ids, self._tokens, self.unk_id, self.pad_id)

    # ---- equality and pickling (a resumed run compares vocabularies; seqio pickles them)
    def __getstate__(self) -> dict:
        return {**self.__dict__, "_word_cache": {}}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WordPieceVocabulary):
            return NotImplemented
        return (self._lower_case, self._rules, self._tokens) == (
            other._lower_case, other._rules, other._tokens)

    def __hash__(self) -> int:
        return hash((self._lower_case, len(self._tokens), tuple(self._tokens[:8])))

    def __str__(self) -> str:
        case = "uncased" if self._lower_case else "cased"
        return (f"WordPieceVocabulary({self._path}, {case}, {self._rules} rules, "
                f"{len(self._tokens)} tokens)")


# ---------------------------------------------------------------- vocabulary learning


def learn_vocabulary(
    sentences: Iterable[str], vocab_size: int, lower_case: bool = True
) -> list[str]:
    """Learns a WordPiece vocabulary of at most `vocab_size` tokens from raw sentences.

    Layout: the reserved tokens [PAD] [UNK] [CLS] [SEP] [MASK], every character seen and its
    `##` form (so any word of seen characters tokenizes without [UNK]), then subwords in the
    order they were learned. Learning is frequency-based pair merging over basic-tokenized
    words, with `##` marking non-initial pieces (the recipe of Hugging Face's WordPiece
    trainer); ties break by token string, so the result is deterministic.
    """
    counts: collections.Counter[str] = collections.Counter()
    for sentence in sentences:
        counts.update(basic_tokenize(sentence, lower_case))
    longest = max(MAX_CHARS_PER_WORD.values())  # a word either rule set splits into pieces
    words = {w: c for w, c in counts.items() if len(w) <= longest}
    if not words:
        raise ValueError("learn_vocabulary: the corpus has no words; check the corpus setting")
    chars = sorted({ch for w in words for ch in w})
    base = [*RESERVED_TOKENS, *chars, *(SUFFIX + ch for ch in chars)]
    if vocab_size < len(base):
        raise ValueError(
            f"learn_vocabulary: vocab_size={vocab_size} is below the {len(base)} tokens needed "
            f"for the reserved tokens and the corpus's {len(chars)} characters (with ## forms); "
            "raise vocab_size"
        )
    return base + _merge_pieces(words, set(base), vocab_size - len(base))


def _merge_pieces(word_counts: dict[str, int], known: set[str], budget: int) -> list[str]:
    """Up to `budget` new pieces by repeatedly merging the most frequent adjacent pair."""
    words = sorted(word_counts)
    pieces = [[w[0], *(SUFFIX + ch for ch in w[1:])] for w in words]
    learned: list[str] = []
    for _, _, merged in learned_merges(pieces, [word_counts[w] for w in words],
                                       lambda a, b: a + b[len(SUFFIX):]):
        if len(learned) >= budget:
            break
        if merged not in known:
            known.add(merged)
            learned.append(merged)
    return learned
