"""Building a token store: byte-identical for any worker count and after a resume, finished
shards never rewritten, one build per directory at a time, an empty corpus refused."""

import os
import subprocess
import sys

import numpy as np
import pytest

from bertjax import files
from bertjax.data.store import build as build_lib
from bertjax.data.store.format import (
    LOCK,
    MANIFEST,
    PROGRESS,
    StoreError,
    tokens_name,
    vocabulary_digest,
)
from bertjax.data.store.local import LocalShard
from bertjax.data.store.reader import open_store

SHARD_CHARS = 15_000  # a 60 KB corpus makes several shards


def contents(directory):
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_a_store_holds_the_ids_in_shards_with_a_manifest(wiki_slice, learned_vocab, tmp_path):
    manifest = build_lib.build("bert", str(wiki_slice), str(learned_vocab("bert")),
                               tmp_path / "store", shard_chars=SHARD_CHARS)
    assert len(manifest.shards) >= 3 and manifest.dtype == "uint16"
    names = set(contents(tmp_path / "store"))
    assert {MANIFEST, "tokenizer/vocab.txt", tokens_name(0), "index-00000.npy"} <= names
    assert PROGRESS not in names and LOCK not in names
    store = open_store(tmp_path / "store")
    counts = manifest.counts()
    assert store.tokens.size == counts["tokens"] == sum(s.tokens for s in manifest.shards)
    assert store.num_documents == counts["documents"]
    assert store.tokens_per_sentence.sum() == counts["tokens"]
    assert store.sentences_per_document.sum() == counts["sentences"]
    documents, sentences = open_store(tmp_path / "store").boundaries()  # one pass, both
    np.testing.assert_array_equal(documents, store.sentences_per_document)
    np.testing.assert_array_equal(sentences, store.tokens_per_sentence)
    assert isinstance(store.shard_tokens[0], LocalShard)
    assert manifest.tokenizer_digest == vocabulary_digest(
        {"vocab": learned_vocab("bert") / "vocab.txt"})


@pytest.mark.slow
def test_the_same_bytes_for_any_worker_count(wiki_slice, learned_vocab, tmp_path):
    vocab = str(learned_vocab("elmo"))  # ELMo's word types are merged across workers' shards
    build_lib.build("elmo", str(wiki_slice), vocab, tmp_path / "one", shard_chars=SHARD_CHARS)
    build_lib.build("elmo", str(wiki_slice), vocab, tmp_path / "two", workers=2,
                    shard_chars=SHARD_CHARS)
    one = contents(tmp_path / "one")
    assert len([n for n in one if n.startswith("tokens-")]) >= 3
    assert one == contents(tmp_path / "two")


def test_a_killed_build_resumes_without_rewriting_finished_shards(wiki_slice, learned_vocab,
                                                                   tmp_path, monkeypatch):
    vocab, out = str(learned_vocab("elmo")), tmp_path / "store"
    build_lib.build("elmo", str(wiki_slice), vocab, tmp_path / "whole", shard_chars=SHARD_CHARS)
    write = build_lib._Writer.write

    def killed_after_two(self, chunk, digest):
        if len(self.done) == 2:
            raise KeyboardInterrupt  # as a kill between shards
        write(self, chunk, digest)

    monkeypatch.setattr(build_lib._Writer, "write", killed_after_two)
    with pytest.raises(KeyboardInterrupt):
        build_lib.build("elmo", str(wiki_slice), vocab, out, shard_chars=SHARD_CHARS)
    assert not (out / MANIFEST).exists() and (out / PROGRESS).exists()
    with pytest.raises(StoreError, match="did not finish.*again to resume"):
        open_store(out)
    finished = {n: os.stat(out / n).st_mtime_ns for n in (tokens_name(0), tokens_name(1))}
    monkeypatch.setattr(build_lib._Writer, "write", write)
    written, write_bytes = [], files.write_bytes
    monkeypatch.setattr(build_lib.files, "write_bytes",
                        lambda path, data: (written.append(path.name), write_bytes(path, data)))
    build_lib.build("elmo", str(wiki_slice), vocab, out, shard_chars=SHARD_CHARS)
    assert tokens_name(0) not in written and tokens_name(1) not in written
    assert tokens_name(2) in written
    assert {n: os.stat(out / n).st_mtime_ns for n in finished} == finished
    assert contents(out) == contents(tmp_path / "whole")


def test_a_second_build_into_the_same_directory_is_refused(wiki_slice, learned_vocab, tmp_path):
    out = tmp_path / "store"
    out.mkdir()
    builder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = files.process_start(builder.pid)
        (out / LOCK).write_text(f"{builder.pid}-{start}")
        with pytest.raises(StoreError, match=f"being built by another.*{builder.pid}.*another "
                                             "--out"):
            build_lib.build("bert", str(wiki_slice), str(learned_vocab("bert")), out)
    finally:
        builder.kill()
        builder.wait()
    # the lock of a build that was killed is taken over
    build_lib.build("bert", str(wiki_slice), str(learned_vocab("bert")), out)
    assert (out / MANIFEST).is_file() and not (out / LOCK).exists()


def test_a_finished_store_is_kept_and_other_settings_refused(wiki_slice, learned_vocab,
                                                             tmp_path):
    out = tmp_path / "store"
    first = build_lib.build("bert", str(wiki_slice), str(learned_vocab("bert")), out)
    assert build_lib.build("bert", str(wiki_slice), str(learned_vocab("bert")), out) == first
    with pytest.raises(StoreError, match="finished store of other settings.*another --out"):
        build_lib.build("bert", str(wiki_slice), str(learned_vocab("bert")), out,
                        lower_case=False)


def test_bad_inputs_are_refused_in_one_line(wiki_slice, learned_vocab, tmp_path):
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n  \n")
    vocab = str(learned_vocab("bert"))
    cases = [
        (dict(family="bert", corpus=str(blank), vocab=vocab), "corpus is empty"),
        (dict(family="bert", corpus=str(wiki_slice), vocab="learn"), "existing vocabulary"),
        (dict(family="bert", corpus=str(wiki_slice), vocab=str(tmp_path)), "vocab.txt not found"),
        (dict(family="t5", corpus=str(wiki_slice), vocab=vocab), "unknown family"),
        (dict(family="bert", corpus=str(wiki_slice), vocab=vocab, workers=0), "workers=0"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message) as err:
            build_lib.build(out=tmp_path / "out", **kwargs)
        assert "\n" not in str(err.value)
    assert not (tmp_path / "out" / PROGRESS).exists()


def test_a_resume_over_a_changed_corpus_is_refused(wiki_slice, learned_vocab, tmp_path,
                                                   monkeypatch):
    corpus, out = tmp_path / "wiki.txt", tmp_path / "store"
    corpus.write_text(wiki_slice.read_text())
    write = build_lib._Writer.write

    def killed_after_one(self, chunk, digest):
        if len(self.done) == 1:
            raise KeyboardInterrupt
        write(self, chunk, digest)

    monkeypatch.setattr(build_lib._Writer, "write", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        build_lib.build("gpt", str(corpus), str(learned_vocab("gpt")), out,
                        shard_chars=SHARD_CHARS)
    monkeypatch.setattr(build_lib._Writer, "write", write)
    corpus.write_text(corpus.read_text().replace("the", "a", 1))
    with pytest.raises(StoreError, match=f"{tokens_name(0)} was built from other text.*another "
                                         "--out"):
        build_lib.build("gpt", str(corpus), str(learned_vocab("gpt")), out,
                        shard_chars=SHARD_CHARS)


def test_the_corpus_is_streamed_a_shard_at_a_time(wiki_slice, learned_vocab, tmp_path,
                                                  monkeypatch):
    from bertjax.data import source as source_lib

    read, seen = [0], []
    stream = source_lib.stream_documents

    def counted(*args):
        for document in stream(*args):
            read[0] += 1
            yield document

    write = build_lib._Writer.write

    def noted(self, chunk, digest):
        seen.append((read[0], sum(s.documents for s in self.done) + len(
            chunk.sentences_per_document)))
        write(self, chunk, digest)

    monkeypatch.setattr(source_lib, "stream_documents", counted)
    monkeypatch.setattr(build_lib._Writer, "write", noted)
    build_lib.build("gpt", str(wiki_slice), str(learned_vocab("gpt")), tmp_path / "store",
                    shard_chars=SHARD_CHARS)
    assert len(seen) >= 3
    for documents_read, documents_written in seen[:-1]:  # no more than the next shard's first
        assert documents_read <= documents_written + 1


def test_an_out_holding_other_files_is_refused(wiki_slice, learned_vocab, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(StoreError, match="holds other files.*notes.txt.*new or empty"):
        build_lib.build("gpt", str(wiki_slice), str(learned_vocab("gpt")), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
