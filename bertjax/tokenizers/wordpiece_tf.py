"""WordPiece tokenization in TensorFlow ops, for `tf.data` pipelines (`dataset.map`).

The TF twin of `wordpiece.py`'s python path, behind `WordPieceVocabulary.encode_tf` and
`decode_tf`: `basic_tokenize_tf` applies BERT's basic tokenization with RE2 rules equal to
the python ones, then tensorflow_text's FastWordpieceTokenizer splits the words. A module of
its own, imported when first used, so that the python tokenizer imports neither TensorFlow
nor seqio: tools that tokenize only in python (fine-tuning, analysis, `--help`) start
seconds sooner. It takes the vocabulary's tokens and case as arguments; both modules share
wordpiece_rules.py.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bertjax.tokenizers.wordpiece_rules import CJK_RANGES, MAX_CHARS_PER_WORD, SUFFIX, UNK

_MAX_CHARS = MAX_CHARS_PER_WORD["transformers"]  # the rules this path follows
# RE2 twins of wordpiece.py's python rules (_clean_rule, _is_cjk, _is_punct).
_RE_REMOVED = r"[\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F\p{Cf}\p{Co}\x{FFFD}]"
_RE_WHITESPACE = r"[\t\n\r\p{Zs}\x{2028}\x{2029}]"
_RE_CJK = "[" + "".join(rf"\x{{{lo:X}}}-\x{{{hi:X}}}" for lo, hi in CJK_RANGES) + "]"
_RE_PUNCT = r"[!-/:-@\[-`{-~\p{P}]"


def basic_tokenize_tf(text: tf.Tensor, lower_case: bool) -> tf.RaggedTensor:
    """`basic_tokenize` in TF ops: strings of shape [...] -> words of shape [..., (words)]."""
    text = tf.strings.regex_replace(text, _RE_REMOVED, "")
    text = tf.strings.regex_replace(text, _RE_WHITESPACE, " ")
    text = tf.strings.regex_replace(text, _RE_CJK, r" \0 ")
    if lower_case:
        text = tf_text.normalize_utf8(text, "NFD")
        text = tf.strings.regex_replace(text, r"\p{Mn}", "")
        # ICU lower-cases a word-final sigma to 'ς'; BERT maps characters one by one.
        text = tf.strings.regex_replace(text, "Σ", "σ")
        text = tf.strings.lower(text, encoding="utf-8")
    return tf_text.regex_split(text, r" +|" + _RE_PUNCT, _RE_PUNCT)


@functools.lru_cache(maxsize=8)
def _fast_wordpiece_model(tokens: tuple[str, ...]) -> bytes:
    """The serialized FastWordpieceTokenizer model of a vocabulary (~0.1 s for 30k tokens)."""
    return tf_text.build_fast_wordpiece_model(
        list(tokens), 4 * _MAX_CHARS, SUFFIX, UNK, True, False
    )  # vocab, max bytes/word, suffix, unknown, no_pretokenization, detokenization


# Plain TF ops (shapes are static python): autograph has nothing to convert in encode and
# decode, and converting them in every `dataset.map` costs seconds per pipeline.
@tf.autograph.experimental.do_not_convert
def encode(s: tf.Tensor, tokens: Sequence[str], lower_case: bool) -> tf.Tensor | tf.RaggedTensor:
    """Strings of shape [...] -> int32 ids [..., (ids)]; a scalar gives a dense vector. Words
    longer than BertTokenizerFast's 100 characters, or not covered by pieces, become [UNK]."""
    s = tf.convert_to_tensor(s, tf.string)
    if s.shape.rank is None:
        raise ValueError("WordPieceVocabulary.encode_tf: give strings of known rank")
    words = basic_tokenize_tf(tf.reshape(s, [-1]), lower_case)  # [N, (words)]
    too_long = tf.strings.length(words, unit="UTF8_CHAR") > _MAX_CHARS
    words = tf.ragged.map_flat_values(tf.where, too_long, UNK, words)
    model = _fast_wordpiece_model(tuple(tokens))
    op = tf_text.FastWordpieceTokenizer(model_buffer=tf.constant(np.frombuffer(model, np.uint8)),
                                        token_out_type=tf.int32)  # its model lives in this graph
    ids = op.tokenize(words).merge_dims(-2, -1)  # [N, (ids)]
    if s.shape.rank == 0:
        return ids[0]
    for axis in reversed(range(1, s.shape.rank)):  # [N, (ids)] -> [..., (ids)]
        ids = tf.RaggedTensor.from_uniform_row_length(ids, tf.shape(s, tf.int64)[axis])
    return ids


@tf.autograph.experimental.do_not_convert
def decode(ids: tf.Tensor, tokens: Sequence[str], unk_id: int, pad_id: int) -> tf.Tensor:
    """Ids [..., L] -> strings [...]: ids past the vocabulary read as [UNK], [PAD] dropped,
    ## pieces joined (seqio's `decode_tf` contract; there is no EOS to cut at)."""
    if ids.shape == (0,):
        return tf.constant(b"", dtype=tf.string)
    ids = tf.where(tf.less(ids, len(tokens)), ids, unk_id)
    pieces = tf.gather(tf.constant(list(tokens)), ids)
    pieces = tf.ragged.boolean_mask(pieces, tf.not_equal(ids, pad_id))
    text = tf.strings.reduce_join(pieces, axis=-1, separator=" ")
    return tf.strings.regex_replace(text, " " + SUFFIX, "")
