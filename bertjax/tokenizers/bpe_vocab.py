"""Byte-level BPE as a seqio.Vocabulary (the tokenizer itself is data/bpe.py).

The TF path (`encode_tf`) runs the python encoder inside `tf.numpy_function`: BPE by merge
rank has no efficient expression in TF ops. The LM pipeline tokenizes documents in python
before tf.data, so it never needs that path; seqio preprocessors such as `seqio.preprocessors
.tokenize` do, and get the same ids as `encode`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np
import seqio
import tensorflow as tf

from bertjax.tokenizers.bpe import ByteLevelBPE


class ByteLevelBPEVocabulary(seqio.Vocabulary):
    """A ByteLevelBPE as a seqio vocabulary: EOS is <|endoftext|>, and pads with it too
    (GPT-2 has no padding token; padded positions carry zero loss weight)."""

    def __init__(self, bpe: ByteLevelBPE) -> None:
        super().__init__(extra_ids=0)
        self.bpe = bpe

    @classmethod
    def from_files(cls, vocab_json: str | os.PathLike, merges_txt: str | os.PathLike
                   ) -> ByteLevelBPEVocabulary:
        return cls(ByteLevelBPE.from_files(vocab_json, merges_txt))

    @property
    def _base_vocab_size(self) -> int:
        return self.bpe.vocab_size

    @property
    def eos_id(self) -> int | None:
        return self.bpe.eos_id

    @property
    def pad_id(self) -> int:
        return self.bpe.eos_id if self.bpe.eos_id is not None else 0

    @property
    def unk_id(self) -> None:
        return None  # byte-level: nothing is unknown

    def _encode(self, s: str) -> list[int]:
        return self.bpe.encode(s)

    def _decode(self, ids: Iterable[int]) -> str:
        return self.bpe.decode(ids)

    def _encode_tf(self, s: tf.Tensor) -> tf.Tensor | tf.RaggedTensor:
        """Strings [] -> ids [n], or [N] -> ragged [N, (n)] (python BPE in numpy_function)."""
        s = tf.convert_to_tensor(s, tf.string)

        def encode_all(strings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            rows = [self.bpe.encode_bytes(bytes(x)) for x in strings.reshape(-1)]
            flat = np.fromiter((i for r in rows for i in r), np.int32)
            return flat, np.array([len(r) for r in rows], np.int64)

        flat, lengths = tf.numpy_function(encode_all, [tf.reshape(s, [-1])], (tf.int32, tf.int64))
        flat.set_shape([None])
        lengths.set_shape([None])
        ragged = tf.RaggedTensor.from_row_lengths(flat, lengths)
        return ragged[0] if s.shape.rank == 0 else ragged

    def _decode_tf(self, ids: tf.Tensor) -> tf.Tensor:
        """Ids [n] -> a string [] (python decoder in numpy_function)."""
        def decode(x: np.ndarray) -> bytes:
            return self.bpe.decode(x.tolist()).encode("utf-8")

        return tf.numpy_function(decode, [ids], tf.string, stateful=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ByteLevelBPEVocabulary):
            return NotImplemented
        return self.bpe.vocab == other.bpe.vocab and self.bpe.ranks == other.bpe.ranks

    def __hash__(self) -> int:
        return hash((self.bpe.vocab_size, len(self.bpe.ranks)))
