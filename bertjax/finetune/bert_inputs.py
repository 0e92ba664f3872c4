"""BERT's inputs for downstream tasks (Devlin et al. 2018, figure 4), from WordPiece ids.

    single sentence   [CLS] a [SEP]                         segments 0 ... 0
    sentence pair     [CLS] a [SEP] b [SEP]                 segments 0 ... 0 1 ... 1
    multiple choice   [CLS] context [SEP] ending_k [SEP]    one sequence per ending, [N, K, L]
    token tagging     [CLS] w1 w2 ... [SEP]                 the first piece of each word carries
                                                            its tag; the other pieces weigh 0

Pairs are cut longest-first until they fit (as google-research/bert does). Arrays are
right-padded with 0 to `max_length`.
"""

from collections.abc import Sequence

import numpy as np

from bertjax.tokenizers.wordpiece import WordPieceVocabulary


def _fit(a: list[int], b: list[int] | None, budget: int) -> tuple[list[int], list[int] | None]:
    """Cut the longer of the two id lists from its end until both fit `budget` tokens."""
    a, b = list(a), None if b is None else list(b)
    while len(a) + (len(b) if b is not None else 0) > budget:
        if b is not None and len(b) > len(a):
            b.pop()
        else:
            a.pop()
    return a, b


def pack(vocab: WordPieceVocabulary, a: list[int], b: list[int] | None, max_length: int
         ) -> tuple[list[int], list[int]]:
    """(ids, segment ids) of `[CLS] a [SEP] (b [SEP])`, cut to `max_length`."""
    a, b = _fit(a, b, max_length - (3 if b is not None else 2))
    ids = [vocab.cls_id, *a, vocab.sep_id]
    segments = [0] * len(ids)
    if b is not None:
        ids += [*b, vocab.sep_id]
        segments += [1] * (len(b) + 1)
    return ids, segments


def _padded(rows: Sequence[tuple[list[int], list[int]]], max_length: int) -> dict[str, np.ndarray]:
    shape = (len(rows), max_length)
    ids, segments, mask = (np.zeros(shape, np.int32) for _ in range(3))
    for r, (row_ids, row_segments) in enumerate(rows):
        n = len(row_ids)
        ids[r, :n], segments[r, :n], mask[r, :n] = row_ids, row_segments, 1
    return {"input_ids": ids, "segment_ids": segments, "input_mask": mask}


def encode_texts(vocab: WordPieceVocabulary, texts: Sequence[Sequence[str]], max_length: int
                 ) -> dict[str, np.ndarray]:
    """Inputs [N, L] of one- or two-text examples."""
    rows = []
    for fields in texts:
        pieces = [vocab.encode(text) for text in fields]
        rows.append(pack(vocab, pieces[0], pieces[1] if len(pieces) > 1 else None, max_length))
    return _padded(rows, max_length)


def encode_choices(vocab: WordPieceVocabulary, contexts: Sequence[str],
                   endings: Sequence[Sequence[str]], max_length: int) -> dict[str, np.ndarray]:
    """Inputs [N, K, L]: one `[CLS] context [SEP] ending [SEP]` sequence per ending."""
    counts = {len(e) for e in endings}
    if len(counts) != 1:
        raise ValueError(f"examples have {sorted(counts)} endings: give every multiple-choice "
                         "example the same number")
    num_endings = counts.pop()
    flat = [(c, e) for c, ends in zip(contexts, endings, strict=True) for e in ends]
    arrays = encode_texts(vocab, flat, max_length)
    return {k: v.reshape(len(contexts), num_endings, max_length) for k, v in arrays.items()}


def encode_tagged(vocab: WordPieceVocabulary, sentences: Sequence[Sequence[str]],
                  tags: Sequence[Sequence[int]] | None, max_length: int
                  ) -> tuple[dict[str, np.ndarray], list[list[int]]]:
    """Inputs, `labels` and `label_weights` [N, L] of tagged sentences, and for each sentence
    the position of each word's first piece (-1 for words cut off by `max_length`)."""
    rows, label_rows, firsts = [], [], []
    for s, words in enumerate(sentences):
        ids, labels, first = [vocab.cls_id], [0], []
        for w, word in enumerate(words):
            pieces = vocab.encode(word) or [vocab.unk_id]
            if len(ids) + len(pieces) > max_length - 1:
                first += [-1] * (len(words) - w)
                break
            first.append(len(ids))
            labels += [tags[s][w] if tags is not None else 0] + [0] * (len(pieces) - 1)
            ids += pieces
        rows.append((ids + [vocab.sep_id], [0] * (len(ids) + 1)))
        label_rows.append(labels)
        firsts.append(first)
    arrays = _padded(rows, max_length)
    arrays["labels"] = np.zeros_like(arrays["input_ids"])
    arrays["label_weights"] = np.zeros(arrays["input_ids"].shape, np.float32)
    for r, (labels, first) in enumerate(zip(label_rows, firsts, strict=True)):
        arrays["labels"][r, :len(labels)] = labels
        kept = [p for p in first if p >= 0]
        arrays["label_weights"][r, kept] = 1.0
    return arrays, firsts
