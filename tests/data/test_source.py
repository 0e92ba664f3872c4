"""The data-source base, through each family's source: save, given vocabularies, errors."""

import numpy as np
import pytest

from bertjax.data import source as source_lib
from bertjax.data.bert.source import BertPretrainingSource
from bertjax.data.corpora import CorpusError
from bertjax.data.elmo.source import ElmoSource
from bertjax.data.gpt.source import LmPretrainingSource
from bertjax.data.source import DataError

# (class, a small and a larger learned vocabulary size)
FAMILIES = {
    "bert": (BertPretrainingSource, 400, 600),
    "gpt": (LmPretrainingSource, 300, 400),
    "elmo": (ElmoSource, 30, 60),
}


@pytest.fixture(params=sorted(FAMILIES))
def family(request):
    return FAMILIES[request.param]


def test_prepare_writes_nothing_save_copies_the_files(family, bert_sample, tmp_path):
    cls, size, _ = family
    source = cls(corpus=str(bert_sample), vocab_size=size)
    source.prepare(tmp_path / "run")
    assert not (tmp_path / "run").exists()
    record = source.save(tmp_path / "run")
    assert record["kind"] == source.vocab_kind and record["vocab_size"] == source.vocab_size
    assert source.vocab_size <= size
    for name in record["files"].values():
        assert (tmp_path / "run" / name).is_file()
    batch = next(source.batches(0, 16, 2))
    spec = source.feature_spec(16, 2)
    assert {k: (v.shape, v.dtype) for k, v in batch.items()} == {
        k: ((2, *shape), np.dtype(dtype)) for k, (shape, dtype) in spec.items()}


def test_a_given_vocabulary_is_copied_and_must_match_the_workdir(family, bert_sample, tmp_path):
    cls, small, large = family
    for name, size in (("small", small), ("large", large)):
        learned = cls(corpus=str(bert_sample), vocab_size=size)
        learned.prepare(tmp_path / name)
        learned.save(tmp_path / name)
    given = cls(corpus=str(bert_sample), vocab=str(tmp_path / "small"))
    given.prepare(tmp_path / "run")
    assert not (tmp_path / "run").exists()
    record = given.save(tmp_path / "run")  # the workdir is self-contained
    for name in record["files"].values():
        assert (tmp_path / "run" / name).read_bytes() == (tmp_path / "small" / name).read_bytes()
    paths = ",".join(str(tmp_path / "large" / name) for name in record["files"].values())
    other = cls(corpus=str(bert_sample), vocab=paths)
    with pytest.raises(DataError, match=f"another vocabulary.*{cls.setting}.vocab"):
        other.prepare(tmp_path / "run")


def test_errors_name_the_setting(family, tmp_path, monkeypatch):
    cls = family[0]
    with pytest.raises(DataError, match=f"set {cls.setting}.vocab to 'learn'") as err:
        cls(corpus="stdlib", vocab=str(tmp_path / "absent")).prepare(tmp_path / "w")
    assert "\n" not in str(err.value)
    with pytest.raises(CorpusError, match=f"{cls.setting}.corpus: .*no such file"):
        cls(corpus=str(tmp_path / "absent.txt")).prepare(tmp_path / "w")
    binary = tmp_path / "corpus.txt"
    binary.write_bytes(b"\x7fELF\x00\x01 text\n")
    with pytest.raises(CorpusError, match=f"{cls.setting}.corpus: .*binary file"):
        cls(corpus=str(binary)).prepare(tmp_path / "w")
    # Every host reads all of a file corpus and learns the same vocabulary; a TFDS corpus is
    # split per host, so learning from it would give each host another one.
    monkeypatch.setattr(source_lib.jax, "process_count", lambda: 2)
    monkeypatch.setattr(source_lib, "load_documents",
                        lambda *args: [["One sentence here.", "Another one there."]] * 4)
    with pytest.raises(DataError, match=f"multi-host run cannot learn.*{cls.setting}.vocab"):
        cls(corpus="tfds:wikipedia/20230601.en").prepare(tmp_path / "w")
    assert not (tmp_path / "w").exists()
