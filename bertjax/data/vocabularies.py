"""The families' tokenizers as seqio vocabularies, for the id features of the seqio tasks.

    TokenizerVocabulary(tokenizer)     the pattern: a seqio.Vocabulary that holds a tokenizer of
                                       bertjax.tokenizers (`.tokenizer`) and hands it the
                                       python path, its size, ids, equality and hash
      WordPieceSeqio                   BERT's WordPiece: the TF path is the tokenizer's own
      BpeSeqio                         GPT's byte-level BPE: python BPE in tf.numpy_function
      WordsSeqio                       ELMo's words: a lookup table over the word list

Data is the layer that owns seqio: the tokenizers import none of it, and a source holds its
plain tokenizer (`Source.vocab`), wrapped here only where a seqio task is registered
(`Source.task`, the BERT cache's task). Every id a source yields is already encoded in python,
so seqio reads these vocabularies for their sizes and ids; `encode_tf` serves seqio
preprocessors such as `seqio.preprocessors.tokenize`, and gives the same ids as `encode`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import numpy as np
import seqio
import tensorflow as tf

from bertjax.tokenizers.bpe import ByteLevelBPE
from bertjax.tokenizers.elmo_vocab import ElmoVocabulary
from bertjax.tokenizers.wordpiece import WordPieceVocabulary


class Tokenizer(Protocol):
    """What every family's tokenizer gives (WordPieceVocabulary, ByteLevelBPE,
    ElmoVocabulary): a source's `vocab`, and what TokenizerVocabulary hands to seqio."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def eos_id(self) -> int | None: ...

    @property
    def unk_id(self) -> int | None: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Iterable[int]) -> str: ...


class TokenizerVocabulary(seqio.Vocabulary):
    """A tokenizer as a seqio vocabulary without extra ids; subclasses bring the TF path."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        super().__init__(extra_ids=0)
        self.tokenizer = tokenizer

    @property
    def _base_vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def eos_id(self) -> int | None:
        return self.tokenizer.eos_id

    @property
    def unk_id(self) -> int | None:
        return self.tokenizer.unk_id

    def _encode(self, s: str) -> list[int]:
        return self.tokenizer.encode(s)

    def _decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode(ids)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TokenizerVocabulary):
            return NotImplemented
        return type(self) is type(other) and self.tokenizer == other.tokenizer

    def __hash__(self) -> int:
        return hash(self.tokenizer)

    def __str__(self) -> str:
        return f"{type(self).__name__}({self.tokenizer})"


class WordPieceSeqio(TokenizerVocabulary):
    """BERT's WordPiece: no EOS ([CLS]/[SEP] are added by the examples), pads with [PAD] (id
    0), and the TF path is the tokenizer's own (bertjax.tokenizers.wordpiece_tf)."""

    tokenizer: WordPieceVocabulary

    def __init__(self, tokenizer: WordPieceVocabulary) -> None:
        super().__init__(tokenizer)

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_id

    def _encode_tf(self, s: tf.Tensor) -> tf.Tensor | tf.RaggedTensor:
        return self.tokenizer.encode_tf(s)

    def _decode_tf(self, ids: tf.Tensor) -> tf.Tensor:
        return self.tokenizer.decode_tf(ids)


class BpeSeqio(TokenizerVocabulary):
    """GPT-2's byte-level BPE: EOS is <|endoftext|>, and pads with it too (GPT-2 has no
    padding token; padded positions carry zero loss weight); nothing is unknown (no unk_id).

    The TF path runs the python encoder inside `tf.numpy_function`: BPE by merge rank has no
    efficient expression in TF ops."""

    tokenizer: ByteLevelBPE

    def __init__(self, tokenizer: ByteLevelBPE) -> None:
        super().__init__(tokenizer)

    @property
    def pad_id(self) -> int:
        return self.tokenizer.eos_id if self.tokenizer.eos_id is not None else 0

    def _encode_tf(self, s: tf.Tensor) -> tf.Tensor | tf.RaggedTensor:
        """Strings [] -> ids [n], or [N] -> ragged [N, (n)] (python BPE in numpy_function)."""
        s = tf.convert_to_tensor(s, tf.string)
        bpe = self.tokenizer

        def encode_all(strings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            rows = [bpe.encode_bytes(bytes(x)) for x in strings.reshape(-1)]
            flat = np.fromiter((i for r in rows for i in r), np.int32)
            return flat, np.array([len(r) for r in rows], np.int64)

        flat, lengths = tf.numpy_function(encode_all, [tf.reshape(s, [-1])], (tf.int32, tf.int64))
        flat.set_shape([None])
        lengths.set_shape([None])
        ragged = tf.RaggedTensor.from_row_lengths(flat, lengths)
        return ragged[0] if s.shape.rank == 0 else ragged

    def _decode_tf(self, ids: tf.Tensor) -> tf.Tensor:
        """Ids [n] -> a string [] (python decoder in numpy_function)."""
        bpe = self.tokenizer

        def decode(x: np.ndarray) -> bytes:
            return bpe.decode(x.tolist()).encode("utf-8")

        return tf.numpy_function(decode, [ids], tf.string, stateful=False)


class WordsSeqio(TokenizerVocabulary):
    """ELMo's word list: a string splits on spaces, each word looked up (unknown -> <UNK>)."""

    tokenizer: ElmoVocabulary

    def __init__(self, tokenizer: ElmoVocabulary) -> None:
        super().__init__(tokenizer)

    def _encode_tf(self, s: tf.Tensor) -> tf.Tensor | tf.RaggedTensor:
        words = self.tokenizer
        init = tf.lookup.KeyValueTensorInitializer(
            tf.constant(words.tokens), tf.range(words.vocab_size, dtype=tf.int32))
        table = tf.lookup.StaticHashTable(init, default_value=words.unk_id)
        return table.lookup(tf.strings.split(s))

    def _decode_tf(self, ids: tf.Tensor) -> tf.Tensor:
        words = tf.gather(tf.constant(self.tokenizer.tokens), ids)
        return tf.strings.reduce_join(words, axis=-1, separator=" ")
