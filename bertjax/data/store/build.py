"""Build a token store from a corpus and an existing vocabulary, in worker processes.

    build("bert", corpus="wiki/*.txt", vocab="vocab/", out="store/", workers=8)

The corpus is streamed (never held whole): documents are cut into shards of about
`shard_chars` characters of text, in corpus order, so the shards depend on the corpus alone
and the store is byte-identical for any worker count. Workers (a process pool) tokenize whole
shards with the family's own encode path (`Source.encode_documents`), so the ids are those
the in-memory source computes; this process writes each shard in order, to a temporary name
renamed into place, and lists it in DIR/build.json. A killed build resumes where it stopped:
listed shards are checked against the corpus's text and never rewritten. manifest.json is
written last; its presence marks a finished store. A lock file (DIR/.build.lock) refuses a
second build into the same directory while the first one runs (lock.py). The family's source
and the worker processes it runs in: workers.py; a store for gs://: upload.py.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import io
import itertools
import json
import logging
import os
import pathlib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from bertjax import files
from bertjax.data.store import upload
from bertjax.data.store import workers as workers_lib
from bertjax.data.store.format import (
    MANIFEST,
    PROGRESS,
    TOKENIZER_DIR,
    Chunk,
    Manifest,
    Shard,
    StoreError,
    index_name,
    make_index,
    token_dtype,
    tokens_name,
    types_name,
    vocabulary_digest,
)
from bertjax.data.store.lock import build_lock

if TYPE_CHECKING:
    from bertjax.data.source import Source

SHARD_CHARS = 32_000_000  # characters of text per shard: about 8M ids, 16 MB as uint16
_STORE_FILE = re.compile(r"^(?:(?:tokens|index|types)-\d{5}\.(?:bin|npy|json)|manifest\.json|"
                         r"build\.json|\.build\.lock|tokenizer|\..*\.tmp)$")


def cut_shards(documents: Iterator[list[str]], shard_chars: int, corpus_digest: Any
            ) -> Iterator[tuple[list[list[str]], str]]:
    """(documents, digest of their text) of each shard in corpus order; every document's
    text also goes into `corpus_digest`."""
    shard: list[list[str]] = []
    chars, digest = 0, hashlib.sha256()
    for document in documents:
        text = ("\n".join(document) + "\n\n").encode("utf-8")
        digest.update(text)
        corpus_digest.update(text)
        shard.append(document)
        chars += sum(len(s) for s in document)
        if chars >= shard_chars:
            yield shard, digest.hexdigest()
            shard, chars, digest = [], 0, hashlib.sha256()
    if shard:
        yield shard, digest.hexdigest()


def assign_types(types: dict[str, int], chunk_types: list[str]) -> tuple[np.ndarray, list[str]]:
    """(local type id -> the store's, the types first used here) for a shard of a word-type
    family (ELMo), whose local id k + 2 is `chunk_types[k]`; `types` (the store's, in order of
    first use over the shards before this one) gains the new ones. Shards are taken in order,
    so the store's ids do not depend on which process tokenized which shard."""
    mapping = np.zeros(len(chunk_types) + 2, np.int64)
    mapping[1] = 1
    new_types: list[str] = []
    for k, word in enumerate(chunk_types):
        if word not in types:
            types[word] = len(types)
            new_types.append(word)
        mapping[k + 2] = types[word]
    return mapping, new_types


def shard_files(number: int, chunk: Chunk, dtype: np.dtype, mapping: np.ndarray | None,
                new_types: list[str]) -> dict[str, bytes]:
    """{file name: bytes} of shard `number` (the index last, as it is written last), its ids
    mapped by `mapping` (word-type families, see `assign_types`); one line for an id too large
    for the store's dtype."""
    tokens = np.asarray(chunk.tokens)
    if mapping is not None and tokens.size:
        tokens = mapping[tokens]
    if tokens.size and int(tokens.max()) > np.iinfo(dtype).max:
        raise StoreError(f"an id of {int(tokens.max())} does not fit {dtype.name}")
    out = {tokens_name(number): tokens.astype(dtype).tobytes()}
    if mapping is not None:
        out[types_name(number)] = (json.dumps(new_types) + "\n").encode("utf-8")
    index = io.BytesIO()
    np.save(index, make_index(chunk.sentences_per_document, chunk.tokens_per_sentence))
    out[index_name(number)] = index.getvalue()
    return out


def shard_record(chunk: Chunk, new_types: int, text_digest: str) -> Shard:
    """What the manifest says of a shard holding `chunk`."""
    return Shard(documents=len(chunk.sentences_per_document),
                 sentences=len(chunk.tokens_per_sentence), tokens=len(chunk.tokens),
                 types=new_types, text_digest=text_digest)


class _Writer:
    """Writes shards in order into `out` and keeps the build's record (DIR/build.json)."""

    def __init__(self, out: pathlib.Path, identity: Manifest, done: list[Shard],
                 types: dict[str, int]) -> None:
        self.out, self.identity, self.done, self.types = out, identity, done, types
        self.dtype = np.dtype(identity.dtype)

    def write(self, chunk: Chunk, text_digest: str) -> None:
        number = len(self.done)
        mapping, new_types = (assign_types(self.types, chunk.types) if chunk.types is not None
                              else (None, []))
        for name, data in shard_files(number, chunk, self.dtype, mapping, new_types).items():
            files.write_bytes(self.out / name, data)  # the index last: the shard is complete
        self.done.append(shard_record(chunk, len(new_types), text_digest))
        self.record()
        logging.info("%s: shard %d written (%d tokens)", self.out, number, len(chunk.tokens))

    def record(self) -> None:
        manifest = dataclasses.replace(self.identity, shards=tuple(self.done))
        files.write_text(self.out / PROGRESS, manifest.to_json())


def _resumed(out: pathlib.Path, identity: Manifest) -> list[Shard]:
    """The shards a killed build of the same identity listed (each one checked on disk); one
    line when DIR holds another build."""
    progress = out / PROGRESS
    if not progress.is_file():
        return []
    before = Manifest.from_json(progress.read_text(), str(progress))
    if before.identity != identity.identity:
        changed = sorted(k for k, v in identity.identity.items() if before.identity.get(k) != v)
        raise StoreError(f"{out} holds an unfinished build with other settings "
                         f"({', '.join(changed)}): use another --out, or delete {out}")
    dtype = np.dtype(identity.dtype)
    for number, shard in enumerate(before.shards):
        tokens = out / tokens_name(number)
        if (not tokens.is_file() or tokens.stat().st_size != shard.tokens * dtype.itemsize
                or not (out / index_name(number)).is_file()):
            return list(before.shards[:number])  # damaged from here on: rebuilt
    return list(before.shards)


class Plan(NamedTuple):
    """What a build needs before it reads the corpus: the family's source (its vocabulary
    loaded), the vocabulary files, the source's settings and the store's identity."""

    encoder: Source
    vocab_files: dict[str, pathlib.Path]
    settings: dict[str, Any]
    identity: Manifest


def plan(family: str, corpus: str, vocab: str, corpus_format: str = "bert",
         text_key: str = "text", shard_chars: int = SHARD_CHARS, **settings: Any) -> Plan:
    """The plan of a build (see `build`); one line for a vocabulary that cannot be read."""
    if shard_chars < 1:
        raise StoreError(f"shard_chars={shard_chars} must be >= 1")
    if vocab in ("", "learn"):
        raise StoreError("a token store is built with an existing vocabulary: pass --vocab as "
                         "the directory or files a run learned (e.g. WORKDIR/vocab.txt)")
    settings = dict(settings, corpus=corpus, corpus_format=corpus_format, vocab=vocab,
                    text_key=text_key)
    encoder = workers_lib.family_source(family, **settings)
    try:
        vocab_files = encoder.use_given_vocab()
    except (ValueError, OSError):
        names = ",".join(encoder.vocab_files.values())
        raise StoreError(f"--vocab={vocab}: {names} not found or not readable: pass a directory "
                         f"holding {names} (a {family} run's workdir) or their comma-separated "
                         "paths") from None
    roles = encoder.vocab_files
    identity = Manifest(
        family=family, options=encoder.store_options(), corpus=corpus,
        corpus_format=corpus_format, text_key=text_key, tokenizer_kind=encoder.vocab_kind,
        tokenizer_files={role: f"{TOKENIZER_DIR}/{name}" for role, name in roles.items()},
        tokenizer_digest=vocabulary_digest(vocab_files),
        vocab_size=int(encoder.vocab_size), dtype=token_dtype(encoder.store_id_bound()).name,
        shard_chars=shard_chars)
    return Plan(encoder, vocab_files, settings, identity)


def build(family: str, corpus: str, vocab: str, out: str | os.PathLike, workers: int = 1,
          corpus_format: str = "bert", text_key: str = "text",
          shard_chars: int = SHARD_CHARS, **settings: Any) -> Manifest:
    """Build (or resume, or find finished) the token store of `corpus` tokenized by the
    family's source with the vocabulary files `vocab` (a directory holding them, or their
    comma-separated paths) into the directory `out` (local, or on object storage through a
    local staging directory: upload.py); `settings` are the family source's own (lower_case,
    tokenizer). Returns the manifest. The same store on Apache Beam: beam.py."""
    if workers < 1:
        raise StoreError(f"workers={workers} must be >= 1")
    encoder, vocab_files, settings, identity = plan(family, corpus, vocab, corpus_format,
                                                     text_key, shard_chars, **settings)
    remote = files.as_path(out) if files.is_remote(out) else None
    out = upload.staging_dir(os.fspath(out)) if remote else pathlib.Path(out)
    if remote is not None:
        finished = upload.finished_remote(remote, identity)
        if finished is not None:
            return finished
        manifest = _build_here(encoder, vocab_files, family, settings, out, identity, workers)
        upload.upload(out, remote)
        return manifest
    return _build_here(encoder, vocab_files, family, settings, out, identity, workers)


def check_local_out(out: pathlib.Path) -> None:
    """One line when the local directory `out` cannot take a store (a file, or other files)."""
    if out.exists() and not out.is_dir():
        raise StoreError(f"--out={out} is a file: give a directory for the store")
    foreign = sorted(p.name for p in out.iterdir() if not _STORE_FILE.match(p.name)
                     ) if out.is_dir() else []
    if foreign:
        raise StoreError(f"--out={out} holds other files than a token store's ({foreign[0]}"
                         f"{', ...' if len(foreign) > 1 else ''}): use a new or empty directory")


def finished_local(out: pathlib.Path, identity: Manifest) -> Manifest | None:
    """The manifest of a finished store of `identity` in `out`, None if there is none; one
    line for a finished store of other settings."""
    if not (out / MANIFEST).is_file():
        return None
    finished = Manifest.from_json((out / MANIFEST).read_text(), str(out / MANIFEST))
    if finished.identity != identity.identity:
        raise StoreError(f"{out} holds a finished store of other settings: use another "
                         f"--out, or delete {out}")
    logging.info("%s: already built", out)
    return finished


def _build_here(encoder: Source, vocab_files: dict[str, pathlib.Path], family: str,
                settings: dict[str, Any], out: pathlib.Path, identity: Manifest, workers: int
                ) -> Manifest:
    """`build` into the local directory `out`, under its lock."""
    check_local_out(out)
    out.mkdir(parents=True, exist_ok=True)
    with build_lock(out):
        finished = finished_local(out, identity)
        if finished is not None:
            return finished
        return _build(encoder, vocab_files, family, settings, out, identity, workers)


def _build(encoder: Source, vocab_files: dict[str, pathlib.Path], family: str,
           settings: dict[str, Any], out: pathlib.Path, identity: Manifest, workers: int
           ) -> Manifest:
    from bertjax.data.source import stream_documents
    from bertjax.tokenizers.elmo_vocab import BOS, EOS

    corpus_digest = hashlib.sha256()
    documents = stream_documents(settings["corpus"], settings["corpus_format"],
                                 settings["text_key"])
    shards = cut_shards(documents, identity.shard_chars, corpus_digest)
    first = next(shards, None)  # an empty corpus is refused before anything is written
    if first is None:
        raise StoreError(f"corpus {settings['corpus']!r} is empty: point --corpus at text")
    done = _resumed(out, identity)
    writer = _Writer(out, identity, [], {BOS: 0, EOS: 1})
    if not done:  # a fresh build: its record says what is being built
        for role, name in identity.tokenizer_files.items():
            files.copy(vocab_files[role], out / name)
        writer.record()
    pool = workers_lib.start_pool(workers, family, settings) if workers > 1 else None
    pending: collections.deque = collections.deque()
    try:
        for number, (shard, digest) in enumerate(itertools.chain([first], shards)):
            if number < len(done):
                _keep(out, done[number], number, digest, writer)
                continue
            if pool is None:
                writer.write(encoder.encode_documents(shard), digest)
                continue
            pending.append((pool.submit(workers_lib.encode_in_worker, shard), digest))
            while len(pending) > workers:
                result, text_digest = pending.popleft()
                writer.write(result.result(), text_digest)
        while pending:
            result, text_digest = pending.popleft()
            writer.write(result.result(), text_digest)
    except concurrent.futures.BrokenExecutor:  # BrokenProcessPool
        raise StoreError(f"a worker process of the build of {out} ended unexpectedly (out of "
                         "memory?): rerun with fewer --workers or a smaller --shard_mb; the "
                         "finished shards are kept") from None
    except BaseException:  # Ctrl-C, SIGTERM, an error: the workers stop now, mid-shard
        if pool is not None:
            workers_lib.stop_workers(pool)
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    if len(writer.done) < len(done):
        raise StoreError(f"{out}: the corpus has fewer shards than the build began with: it "
                         f"changed since; use another --out, or delete {out}")
    manifest = dataclasses.replace(identity, shards=tuple(writer.done),
                                   corpus_digest=corpus_digest.hexdigest())
    files.write_text(out / MANIFEST, manifest.to_json())
    (out / PROGRESS).unlink(missing_ok=True)
    return manifest


def _keep(out: pathlib.Path, shard: Shard, number: int, digest: str, writer: _Writer) -> None:
    """Keep shard `number` of a resumed build, as it is, if the corpus still gives its text."""
    if shard.text_digest != digest:
        raise StoreError(f"{out / tokens_name(number)} was built from other text than the "
                         f"corpus now gives: it changed since the build began; use another "
                         f"--out, or delete {out}")
    if shard.types:
        for word in json.loads((out / types_name(number)).read_text("utf-8")):
            writer.types.setdefault(word, len(writer.types))
    writer.done.append(shard)
