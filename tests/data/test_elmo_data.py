"""ELMo data: vocabulary, sentence examples, stream windows for truncated BPTT, the source."""

import dataclasses
import itertools

import numpy as np
import pytest

from bertjax.data.elmo.examples import (
    DataError,
    EpochStream,
    encode_corpus,
    iterate_sentences,
    iterate_stream,
    sentence_pieces,
)
from bertjax.data.elmo.source import ElmoSource
from bertjax.tokenizers.elmo_vocab import (
    BOS,
    EOS,
    ElmoVocabulary,
    VocabularyError,
    learn_vocabulary,
    tokenize,
    word_char_ids,
    write_vocab,
)

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

SENTENCES = [s.split() for s in [
    "the cat sat on the mat", "a dog ran", "the bank of the river", "money in the bank",
    "one two three four five six seven eight nine ten eleven twelve", "yes",
]]


@pytest.fixture
def vocab(tmp_path):
    path = tmp_path / "vocab.txt"
    write_vocab(learn_vocabulary(SENTENCES, 12), path)
    return ElmoVocabulary(path)


def test_vocabulary_is_specials_then_words_by_frequency(vocab):
    assert vocab.tokens[:5] == ["</S>", "<S>", "<UNK>", "the", "bank"]  # ties alphabetical
    assert len(vocab.tokens) == 12
    assert vocab.token_ids(["the", "zebra"]).tolist() == [3, vocab.unk_id]
    assert (vocab.bos_id, vocab.eos_id) == (1, 0)
    assert vocab.decode(vocab.encode("the bank")) == "the bank"


def test_bad_vocabulary_files_are_one_line(tmp_path):
    missing = tmp_path / "v.txt"
    missing.write_text("the\ncat\n")
    with pytest.raises(VocabularyError, match=r"missing </S> <S> <UNK>") as err:
        ElmoVocabulary(missing)
    assert "\n" not in str(err.value)
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(VocabularyError, match="not UTF-8"):
        ElmoVocabulary(binary)
    with pytest.raises(VocabularyError, match="cannot read"):
        ElmoVocabulary(tmp_path / "absent.txt")


def test_tokenizers():
    assert tokenize("Don't stop, e.g. now!", "simple") == ["Don't", "stop", ",", "e.g", ".",
                                                           "now", "!"]
    assert tokenize(" a  b ", "whitespace") == ["a", "b"]


def test_sentence_examples(vocab):
    corpus = encode_corpus(SENTENCES, vocab, 10)
    T = 8
    pieces = sentence_pieces(corpus, T)
    assert len(pieces) == 7  # the 12-word sentence becomes two pieces of <= 6 words
    first = list(itertools.islice(iterate_sentences(corpus, T, seed=1, start_index=0), 20))
    again = list(itertools.islice(iterate_sentences(corpus, T, seed=1, start_index=0), 20))
    resumed = list(itertools.islice(iterate_sentences(corpus, T, seed=1, start_index=9), 11))
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a["token_ids"], b["token_ids"])
    for a, b in zip(first[9:], resumed, strict=True):
        np.testing.assert_array_equal(a["char_ids"], b["char_ids"])
    for ex in first:
        n = int(ex["lengths"])
        assert ex["token_ids"][0] == vocab.bos_id and ex["token_ids"][n - 1] == vocab.eos_id
        assert (ex["char_ids"][n:] == 0).all() and (ex["char_ids"][:n] > 0).all()
    np.testing.assert_array_equal(first[0]["char_ids"][0], word_char_ids(BOS, 10))
    # every piece once per epoch
    lengths = pieces.locate(np.arange(len(pieces)))[1]
    assert sorted(int(e["lengths"]) for e in first[:7]) == sorted((lengths + 2).tolist())
    # and the next epoch again, in another order
    assert sorted(int(e["lengths"]) for e in first[7:14]) == sorted((lengths + 2).tolist())
    # two hosts: disjoint, interleaved shares of the same global order
    host1 = list(itertools.islice(iterate_sentences(corpus, T, 1, 0, 1, 2), 5))
    for k, ex in enumerate(host1):
        np.testing.assert_array_equal(ex["token_ids"], first[2 * k + 1]["token_ids"])


def test_pieces_cut_each_sentence_a_few_words_at_a_time(vocab):
    corpus = encode_corpus(SENTENCES * 3, vocab, 10)
    pieces = sentence_pieces(corpus, 5)
    starts, lengths = pieces.locate(np.arange(len(pieces)))
    # each piece is 3 words at a time of a sentence between its <S> and </S>
    words = [corpus.tokens[a:a + n].tolist() for a, n in zip(starts, lengths, strict=True)]
    expected = []
    for a, b in itertools.pairwise(corpus.sentence_starts.tolist()):
        body = corpus.tokens[a + 1:b - 1].tolist()
        expected += [body[k:k + 3] for k in range(0, len(body), 3)]
    assert words == expected


def test_stream_windows_continue_row_by_row(vocab):
    corpus = encode_corpus(SENTENCES * 3, vocab, 10)
    G, T = 4, 5
    ex = list(itertools.islice(iterate_stream(corpus, T, G, 0, 0), 3 * G))
    for r in range(G):
        w0, w1 = ex[r], ex[G + r]
        np.testing.assert_array_equal(w0["next_token_ids"][:-1], w0["token_ids"][1:])
        assert w0["next_token_ids"][-1] == w1["token_ids"][0]  # the row goes on
        assert w0["reverse_next_token_ids"][-1] == w1["reverse_token_ids"][0]
    # host 1 of 2 gets rows 2 and 3 of every window; resuming at window 1 matches
    host1 = list(itertools.islice(iterate_stream(corpus, T, G, 0, G, 1, 2), 4))
    for k, e in enumerate(host1):
        np.testing.assert_array_equal(e["token_ids"], ex[G * (1 + k // 2) + 2 + k % 2]["token_ids"])
    with pytest.raises(DataError, match="multiple of the global batch"):
        next(iterate_stream(corpus, T, G, 0, 3))
    with pytest.raises(DataError, match="lower train.batch_size"):
        next(iterate_stream(corpus, 50, 64, 0, 0))


def test_reverse_stream_is_the_row_backwards(vocab):
    corpus = encode_corpus(SENTENCES, vocab, 10)
    T = 4
    windows = list(itertools.islice(iterate_stream(corpus, T, 1, 0, 0), 3))
    forward = np.concatenate([w["token_ids"] for w in windows])
    backward = np.concatenate([w["reverse_token_ids"] for w in windows])
    row = EpochStream(corpus, 0, 0).read(0, corpus.num_tokens)  # one row: the whole stream
    np.testing.assert_array_equal(forward, corpus.type_word_ids[row[:3 * T]])
    np.testing.assert_array_equal(backward, corpus.type_word_ids[row[::-1][:3 * T]])
    # the stream is the sentences, each inside <S> ... </S>, in a seeded order
    words = vocab.token_ids([BOS, *itertools.chain.from_iterable(
        [*s, EOS, BOS] for s in SENTENCES)])[:-1]
    assert sorted(corpus.type_word_ids[row].tolist()) == sorted(words.tolist())


class CountedIds:
    """Flat ids that count the ids read and refuse to be converted whole."""

    def __init__(self, ids):
        self.ids, self.read = ids, 0

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, key):
        assert isinstance(key, slice), "read by slices"
        out = self.ids[key]
        self.read += len(out)
        return out

    def __array__(self, *args, **kwargs):
        raise AssertionError("the corpus's ids were converted whole")


@pytest.mark.parametrize("mode", ["sentence", "stream"])
def test_examples_read_only_their_own_ids(vocab, mode):
    """An example reads its own ids (a slice per sentence it touches), never the corpus: the
    ids of a token store stay on disk, and start-up does not grow with the corpus."""
    corpus = encode_corpus(SENTENCES * 50, vocab, 10)
    counted = dataclasses.replace(corpus, tokens=CountedIds(corpus.tokens))
    G, T, n = 4, 5, 12
    if mode == "sentence":
        examples = [iterate_sentences(c, T, 1, 40) for c in (corpus, counted)]
        bound = n * (T - 2)
    else:
        examples = [iterate_stream(c, T, G, 1, G) for c in (corpus, counted)]
        bound = n * 2 * (T + 1)
    for a, b in itertools.islice(zip(*examples, strict=True), n):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    assert 0 < counted.tokens.read <= bound < corpus.num_tokens


def write_corpus(tmp_path, lines):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_source_prepares_records_and_batches(tmp_path):
    corpus = write_corpus(tmp_path, [" ".join(s) for s in SENTENCES * 4])
    for mode in ("sentence", "stream"):
        workdir = tmp_path / mode
        source = ElmoSource(corpus=corpus, mode=mode, tokenizer="whitespace", vocab_size=50,
                            max_chars=12)
        source.prepare(workdir)
        assert not workdir.exists()  # nothing is written before the run starts
        record = source.save(workdir)
        assert record == {"kind": "words", "files": {"vocab": "elmo_vocab.txt"},
                          "vocab_size": source.vocab_size, "word_tokenizer": "whitespace"}
        assert (workdir / "elmo_vocab.txt").is_file() and source.vocab_size <= 50
        batch = next(iter(source.batches(0, 6, 4)))
        assert batch["token_ids"].shape == (4, 6) and batch["char_ids"].shape == (4, 6, 12)
        if mode == "stream":
            assert batch["reverse_char_ids"].shape == (4, 6, 12)
    words = ElmoSource(corpus=corpus, tokenizer="whitespace", vocab_size=50, chars=False)
    words.prepare(tmp_path / "words")
    assert "char_ids" not in next(iter(words.batches(0, 6, 4)))  # a word-encoder model's data


def test_source_errors_are_one_line(tmp_path):
    corpus = write_corpus(tmp_path, [" ".join(s) for s in SENTENCES])
    with pytest.raises(ValueError, match="elmo_source.mode"):
        ElmoSource(mode="windows")
    with pytest.raises(ValueError, match="elmo_source.tokenizer"):
        ElmoSource(tokenizer="spacy")
    with pytest.raises(ValueError, match="elmo_source.vocab to 'learn'") as err:
        ElmoSource(corpus=corpus, vocab=str(tmp_path / "absent.txt")).prepare(tmp_path / "w")
    assert "\n" not in str(err.value)


def test_source_reads_the_tfds_feature_text_key_names():
    """ELMo's source takes text_key as BERT's and GPT's do (TFDS's ag_news_subset keeps its
    text in 'description'), so the three families can read one TFDS corpus."""
    tfds = pytest.importorskip("tensorflow_datasets")
    import tensorflow as tf

    def as_dataset(self, *args, **kwargs):
        return tf.data.Dataset.from_tensor_slices(
            {"title": ["a", "b"], "description": ["Stocks rose. Bonds fell.", "Rain came."]})

    source = ElmoSource(corpus="tfds:ag_news_subset:train", text_key="description")
    with tfds.testing.mock_data(as_dataset_fn=as_dataset):
        assert source.read_documents() == [["Stocks rose.", "Bonds fell."], ["Rain came."]]
