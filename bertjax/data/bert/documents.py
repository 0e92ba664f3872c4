"""A BERT pretraining corpus as token ids: its documents read (whole, or one static group of
them), each sentence tokenized by WordPiece (in tf.data where TensorFlow is installed), and
the paper's cap on masked predictions. Shared by the on-the-fly source
(`bertjax.data.bert.source`) and the seqio cache of static examples (`bertjax.data.bert.cache`),
so both build the same corpus.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from bertjax.data import corpora
from bertjax.data.bert.nsp import Corpus
from bertjax.data.source import load_documents
from bertjax.tokenizers.wordpiece import WordPieceVocabulary

ID_FEATURES = ("input_ids", "masked_lm_ids")  # the features that hold WordPiece ids


def default_max_predictions(seq_length: int, masked_lm_prob: float) -> int:
    """The paper's caps: 20 predictions at length 128, 80 at 512 (rounded up to a multiple of 4)."""
    return 4 * math.ceil(seq_length * masked_lm_prob / 4)


def tokenize_documents(
    documents: Sequence[Sequence[str]],
    vocab: WordPieceVocabulary,
    batch_size: int = 1024,
    group_sizes: Sequence[int] | None = None,
) -> Corpus:
    """Token ids of every sentence (`encode_sentences`), as one flat Corpus."""
    tokens, lengths = encode_sentences(documents, vocab, batch_size)
    return Corpus.from_arrays(tokens, lengths, np.array([len(doc) for doc in documents], np.int64),
                              group_sizes)


def encode_sentences(documents: Sequence[Sequence[str]], vocab: WordPieceVocabulary,
                     batch_size: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """(every sentence's ids, flat int32; tokens per sentence, int64), empty sentences kept:
    what `tokenize_documents` builds its Corpus of, and what a token store's shard holds.
    Tokenized in a tf.data pipeline; where TensorFlow is not installed (an accelerator image),
    by the same WordPiece in Python, which gives the same ids more slowly."""
    sentences = [s for doc in documents for s in doc]
    try:
        import tensorflow as tf  # noqa: PLC0415 - optional: see above
    except ImportError:
        return _encode_in_python(sentences, vocab)

    @tf.autograph.experimental.do_not_convert  # plain TF ops: nothing to convert
    def encode(batch: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        ids = vocab.encode_tf(batch)  # [batch, (ids)]
        return ids.flat_values, ids.row_lengths()

    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(sentences, tf.string))
    dataset = dataset.batch(batch_size).map(encode, num_parallel_calls=tf.data.AUTOTUNE)
    tokens, lengths = [np.zeros(0, np.int32)], [np.zeros(0, np.int64)]
    for flat, row_lengths in dataset.as_numpy_iterator():
        tokens.append(flat.astype(np.int32))
        lengths.append(row_lengths.astype(np.int64))
    return np.concatenate(tokens), np.concatenate(lengths)


def _encode_in_python(sentences: list[str], vocab: WordPieceVocabulary
                      ) -> tuple[np.ndarray, np.ndarray]:
    ids = [vocab.encode(sentence) for sentence in sentences]
    lengths = np.fromiter(map(len, ids), np.int64, len(ids))
    flat = np.fromiter((i for row in ids for i in row), np.int32, int(lengths.sum()))
    return flat, lengths


def group_bounds(count: int, groups: int) -> list[int]:
    """Group g of `count` documents is [bounds[g], bounds[g + 1]): contiguous, even shares."""
    return [g * count // groups for g in range(groups + 1)]


def read_group(corpus: str, corpus_format: str, text_key: str, groups: int, group: int,
               data_dir: str | None = None) -> list[list[str]]:
    """The documents of group `group` of `groups` of a corpus setting, read alone if it can be.

    A TFDS corpus's group is a slice of its split's examples, read without the rest; other
    corpora are read whole and sliced (their text is small next to its tokens).
    """
    if not corpus.startswith("tfds:"):
        documents = load_documents(corpus, corpus_format, text_key)
        bounds = group_bounds(len(documents), groups)
        return documents[bounds[group]:bounds[group + 1]]
    import tensorflow_datasets as tfds  # heavy: only for TFDS corpora

    name, _, split = corpus[len("tfds:"):].partition(":")
    split = split or "train"
    if "[" in split:
        raise corpora.CorpusError(f"corpus {corpus!r}: a static group reads a slice of the split "
                                  "itself; name a whole split (e.g. 'train')")
    count = tfds.builder(name, data_dir=data_dir).info.splits[split].num_examples
    bounds = group_bounds(count, groups)
    return list(corpora.tfds_documents(name, f"{split}[{bounds[group]}:{bounds[group + 1]}]",
                                       text_key, data_dir))
