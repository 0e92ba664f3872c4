"""A token store opened for reading: every shard's ids by memory map, boundaries from the
index, checked against the manifest before anything is read (one line per fault).

Opening costs a few file reads whatever the corpus's size; the ids stay on disk and the page
cache serves them. A store on object storage (gs://) is copied to local disk once
(`bertjax.files.local_copy`), since a memory map needs a local file.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Sequence

import numpy as np

from bertjax import files
from bertjax.data.store.format import (
    MANIFEST,
    PROGRESS,
    REBUILD,
    Manifest,
    StoreError,
    index_name,
    split_index,
    tokens_name,
    types_name,
    vocabulary_digest,
)


class TokenArray:
    """The shards' token ids as one flat array of int32: slices and integer-array indexing
    read only the ids asked for (across shard boundaries where need be)."""

    dtype = np.dtype(np.int32)
    ndim = 1

    def __init__(self, parts: Sequence[np.ndarray]) -> None:
        self.parts = [p for p in parts if p.size] or [np.zeros(0, np.int32)]
        self.starts = np.concatenate([[0], np.cumsum([p.size for p in self.parts])])

    @property
    def size(self) -> int:
        return int(self.starts[-1])

    @property
    def shape(self) -> tuple[int]:
        return (self.size,)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: slice | int | np.ndarray) -> np.ndarray:
        if isinstance(key, slice):
            start, stop, step = key.indices(self.size)
            if step != 1:
                return self[np.arange(start, stop, step)]
            return self._range(start, max(stop, start))
        if isinstance(key, int | np.integer):
            return self[np.array([key])][0]
        positions = np.asarray(key)
        positions = np.where(positions < 0, positions + self.size, positions)  # numpy's rule
        if len(self.parts) == 1:
            return self.parts[0][positions].astype(np.int32)
        out = np.empty(positions.shape, np.int32)
        part = np.searchsorted(self.starts, positions, side="right") - 1
        for p in np.unique(part):
            where = part == p
            out[where] = self.parts[p][positions[where] - self.starts[p]]
        return out

    def _range(self, start: int, stop: int) -> np.ndarray:
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        pieces, position = [], start
        for p in range(max(first, 0), len(self.parts)):
            if position >= stop:
                break
            lo, hi = position - self.starts[p], min(stop, self.starts[p + 1]) - self.starts[p]
            pieces.append(self.parts[p][lo:hi])
            position = self.starts[p] + hi
        if not pieces:
            return np.zeros(0, np.int32)
        return np.concatenate(pieces).astype(np.int32)


class TokenStore:
    """An opened store: `manifest`, per shard its memory-mapped ids and index, and over all
    shards the document and sentence boundaries and (ELMo) the word types."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = files.as_path(path)
        self.manifest = read_manifest(self.path)
        self.shard_tokens: list[np.ndarray] = []
        doc_sentences, sentence_tokens = [], []
        dtype = np.dtype(self.manifest.dtype)
        for number, shard in enumerate(self.manifest.shards):
            tokens_file = self._local(tokens_name(number))
            size = tokens_file.stat().st_size
            if size != shard.tokens * dtype.itemsize:
                raise StoreError(f"{self.path / tokens_name(number)} is truncated or damaged "
                                 f"({size} bytes, the manifest says "
                                 f"{shard.tokens * dtype.itemsize}): {REBUILD}")
            self.shard_tokens.append(
                np.memmap(tokens_file, dtype, "r", shape=(shard.tokens,)) if shard.tokens
                else np.zeros(0, dtype))
            where = self.path / index_name(number)
            local = self._local(index_name(number))
            try:
                index = np.load(local, mmap_mode="r", allow_pickle=False)
            except ValueError:
                raise StoreError(f"{where} is not a token-store index: {REBUILD}") from None
            docs, sentences = split_index(np.asarray(index), str(where))
            if (len(docs) - 1, len(sentences) - 1, int(sentences[-1])) != (
                    shard.documents, shard.sentences, shard.tokens):
                raise StoreError(f"{where} does not match {self.path / MANIFEST}: {REBUILD}")
            doc_sentences.append(np.diff(docs))
            sentence_tokens.append(np.diff(sentences))
        self.sentences_per_document = np.concatenate([np.zeros(0, np.int64), *doc_sentences])
        self.tokens_per_sentence = np.concatenate([np.zeros(0, np.int64), *sentence_tokens])

    def _local(self, name: str) -> pathlib.Path:
        """A local file of the store (downloaded once from object storage); one line if the
        file is missing."""
        path = self.path / name
        if not path.is_file():
            raise StoreError(f"{path} is missing: {REBUILD}")
        return files.local_copy(path)

    @property
    def num_documents(self) -> int:
        return len(self.sentences_per_document)

    @property
    def tokens(self) -> TokenArray:
        """Every id of the store, in order, as one int32 array (read lazily)."""
        return TokenArray(self.shard_tokens)

    def sentences(self) -> list[np.ndarray]:
        """Every sentence's ids, as views of the memory maps (no copy)."""
        out = []
        for number, shard in enumerate(self.shard_tokens):
            tokens = np.asarray(shard)  # a plain view: its slices carry no memmap attributes
            index = np.load(self._local(index_name(number)), allow_pickle=False)
            _, starts = split_index(index, str(self.path / index_name(number)))
            out.extend(tokens[a:b] for a, b in zip(starts[:-1], starts[1:], strict=True))
        return out

    def types(self) -> list[str]:
        """The word types the ids of a types family (ELMo) stand for, in id order."""
        found: list[str] = []
        for number, shard in enumerate(self.manifest.shards):
            where = self.path / types_name(number)
            try:
                shard_types = json.loads(self._local(types_name(number)).read_text("utf-8"))
            except ValueError:
                raise StoreError(f"{where} is not a JSON list of word types: {REBUILD}") from None
            if not isinstance(shard_types, list) or len(shard_types) != shard.types:
                raise StoreError(f"{where} does not match {self.path / MANIFEST}: {REBUILD}")
            found.extend(shard_types)
        return found

    def tokenizer_files(self) -> dict[str, pathlib.Path]:
        """{role: local path} of the vocabulary files the ids belong to; one line when they
        are not the files the store was built with (the manifest's digest)."""
        found = {role: self._local(name)
                 for role, name in self.manifest.tokenizer_files.items()}
        if vocabulary_digest(found) != self.manifest.tokenizer_digest:
            names = ", ".join(str(self.path / n) for n in self.manifest.tokenizer_files.values())
            raise StoreError(f"{names}: not the vocabulary the store was built with (its "
                             f"digest differs from {self.path / MANIFEST}'s): {REBUILD}")
        return found


def read_manifest(path: files.Path) -> Manifest:
    """The manifest of the store at `path`; one line when there is none or it is damaged."""
    where = path / MANIFEST
    if not where.is_file():
        if (path / PROGRESS).is_file():
            raise StoreError(f"{path} is a token store whose build did not finish (no "
                             f"{MANIFEST}): run the same bertjax-prepare command again to "
                             "resume it")
        raise StoreError(f"{where} not found: {path} is not a token store; build one with "
                         "bertjax-prepare --out=" + str(path))
    return Manifest.from_json(where.read_text(), str(where))


def open_store(path: str | os.PathLike) -> TokenStore:
    """The store at `path` (local or gs://), checked; see `TokenStore`."""
    return TokenStore(path)
