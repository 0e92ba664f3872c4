"""A token store opened for reading: every shard's ids read where they lie, boundaries from
the index, checked against the manifest before anything is read (one line per fault).

Opening costs a few small file reads per shard whatever the corpus's size (the index files'
headers and counts; their boundaries are read when a family first asks for them); the ids stay
on disk, read by positioned reads of what an example needs (local.py), and the page cache
serves repeats. A store on object storage (gs://) is read in place: opening it reads the
manifest, one listing of the store (every shard's size, checked) and the index files (each
host needs every document's boundaries: its examples draw from the whole corpus); the ids are
read by ranged requests of the blocks a host's examples touch (ranged.py says why ranged
reads rather than local copies of the shards), so a shard none of a host's examples touches
is never fetched by that host, and nothing is copied to local disk but the vocabulary files.
"""

from __future__ import annotations

import functools
import io
import json
import os
import pathlib
from collections.abc import Sequence

import numpy as np

from bertjax import files
from bertjax.data.store import ranged
from bertjax.data.store.format import (
    MANIFEST,
    PROGRESS,
    REBUILD,
    Manifest,
    StoreError,
    index_counts,
    index_name,
    local_index_counts,
    split_index,
    tokens_name,
    types_name,
    vocabulary_digest,
)
from bertjax.data.store.local import LocalShard

# One shard's ids as the reader holds them: empty shards as arrays, local ones read by
# positioned reads, remote ones by ranged requests.
Shard = np.ndarray | LocalShard | ranged.RangedShard


class TokenArray:
    """The shards' token ids as one flat array of int32: slices and integer-array indexing
    read only the ids asked for (across shard boundaries where need be)."""

    dtype = np.dtype(np.int32)
    ndim = 1

    def __init__(self, parts: Sequence[Shard]) -> None:
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
        touched = np.unique(part).tolist()
        ranged.prefetch([self.parts[p] for p in touched],
                        [positions[part == p] - self.starts[p] for p in touched])
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
        self.remote = files.is_remote(self.path)
        self.manifest = read_manifest(self.path)
        self.cache = ranged.BlockCache() if self.remote else None  # blocks of remote shards
        sizes = self._sizes()
        self.shard_tokens: list[Shard] = []
        self._indexes: list[tuple[np.ndarray, np.ndarray]] = []  # gs:// only: read at opening
        dtype = np.dtype(self.manifest.dtype)
        for number, shard in enumerate(self.manifest.shards):
            name = tokens_name(number)
            size = sizes.get(name)
            if size is None:
                raise StoreError(f"{self.path / name} is missing: {REBUILD}")
            if size != shard.tokens * dtype.itemsize:
                raise StoreError(f"{self.path / name} is truncated or damaged "
                                 f"({size} bytes, the manifest says "
                                 f"{shard.tokens * dtype.itemsize}): {REBUILD}")
            self.shard_tokens.append(self._tokens(name, dtype, shard.tokens))
            if index_name(number) not in sizes:
                raise StoreError(f"{self.path / index_name(number)} is missing: {REBUILD}")
            if self.remote:
                self._indexes.append(self._index(number))
                counts = index_counts(self._indexes[-1])
            else:
                counts = local_index_counts(pathlib.Path(self.path / index_name(number)))
            if counts != (shard.documents, shard.sentences, shard.tokens):
                raise StoreError(f"{self.path / index_name(number)} does not match "
                                 f"{self.path / MANIFEST}: {REBUILD}")

    def _sizes(self) -> dict[str, int]:
        """{file name: bytes} of the store's files: one listing on object storage."""
        if not self.remote:
            return {p.name: p.stat().st_size for p in pathlib.Path(self.path).iterdir()
                    if p.is_file()}
        with files.reaching(self.path):
            listing = files.filesystem(self.path).ls(os.fspath(self.path), detail=True,
                                                     refresh=True)
        return {entry["name"].rstrip("/").rsplit("/", 1)[-1]: int(entry.get("size") or 0)
                for entry in listing if entry.get("type") == "file"}

    def _tokens(self, name: str, dtype: np.dtype, count: int) -> Shard:
        """A shard's ids, read where they lie when asked for: by positioned reads (local,
        local.py says why not a memory map) or ranged requests (gs://)."""
        if not count:
            return np.zeros(0, dtype)
        if self.cache is not None:
            return ranged.RangedShard(self.path / name, dtype, count, self.cache)
        return LocalShard(pathlib.Path(self.path) / name, dtype, count)

    def _index(self, number: int) -> tuple[np.ndarray, np.ndarray]:
        """(doc_sentences, sentence_tokens) of shard `number`'s index, read whole; one line if
        it is damaged."""
        if number < len(self._indexes):
            return self._indexes[number]
        where = self.path / index_name(number)
        try:
            if self.remote:
                with files.reaching(where):
                    index = np.load(io.BytesIO(where.read_bytes()), allow_pickle=False)
            else:
                index = np.load(pathlib.Path(where), allow_pickle=False)
        except (ValueError, EOFError):
            raise StoreError(f"{where} is not a token-store index: {REBUILD}") from None
        except FileNotFoundError:
            raise StoreError(f"{where} is missing: {REBUILD}") from None
        return split_index(np.asarray(index), str(where))

    def _local(self, name: str) -> pathlib.Path:
        """A local file of the store (a small one: downloaded from object storage); one line
        if the file is missing."""
        path = self.path / name
        if not path.is_file():
            raise StoreError(f"{path} is missing: {REBUILD}")
        return files.local_copy(path)

    @property
    def num_documents(self) -> int:
        return self.manifest.counts()["documents"]

    @property
    def tokens(self) -> TokenArray:
        """Every id of the store, in order, as one int32 array (read lazily)."""
        return TokenArray(self.shard_tokens)

    @property
    def sentences_per_document(self) -> np.ndarray:
        """int64 [D]: every document's sentence count, over all shards (read from the index
        files when first asked for: a family that needs no boundaries, GPT, never reads them)."""
        return self.boundaries()[0]

    @property
    def tokens_per_sentence(self) -> np.ndarray:
        """int64 [S]: every sentence's token count, over all shards (see above)."""
        return self.boundaries()[1]

    def boundaries(self) -> tuple[np.ndarray, np.ndarray]:
        """(sentences_per_document, tokens_per_sentence), both from one pass over the index
        files (each read whole, holding both), made when first asked for and kept."""
        return self._boundaries

    @functools.cached_property
    def _boundaries(self) -> tuple[np.ndarray, np.ndarray]:
        counts = self.manifest.counts()
        documents = np.empty(counts["documents"], np.int64)
        sentences = np.empty(counts["sentences"], np.int64)
        at_document = at_sentence = 0
        for number in range(len(self.manifest.shards)):
            doc_sentences, sentence_tokens = self._index(number)
            per_document, per_sentence = np.diff(doc_sentences), np.diff(sentence_tokens)
            documents[at_document:at_document + per_document.size] = per_document
            sentences[at_sentence:at_sentence + per_sentence.size] = per_sentence
            at_document += per_document.size
            at_sentence += per_sentence.size
        return documents, sentences

    def sentences(self) -> list[np.ndarray]:
        """Every sentence's ids, each its own array (each shard read whole, once)."""
        out: list[np.ndarray] = []
        for number, shard in enumerate(self.shard_tokens):
            tokens, starts = np.asarray(shard), self._index(number)[1]
            out.extend(tokens[a:b] for a, b in zip(starts[:-1], starts[1:], strict=True))
        return out

    def types(self) -> list[str]:
        """The word types the ids of a types family (ELMo) stand for, in id order."""
        found: list[str] = []
        for number, shard in enumerate(self.manifest.shards):
            where = self.path / types_name(number)
            try:
                shard_types = json.loads(where.read_text("utf-8"))
            except FileNotFoundError:
                raise StoreError(f"{where} is missing: {REBUILD}") from None
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


def store_summary(path: str | os.PathLike, family: str, model_vocab_size: int | None) -> str:
    """One line on the store at `path` for a run of `family` whose model has
    `model_vocab_size` ids (bertjax-compile's report), from its manifest alone (a few KB, also
    on gs://); one line when the store is not one such a run can read."""
    where = files.as_path(path)
    manifest = read_manifest(where)
    if manifest.family != family:
        raise StoreError(f"{where} holds {manifest.family} ids, not {family}: point the run's "
                         f"corpus at a store built with bertjax-prepare --family={family}")
    if model_vocab_size is not None and manifest.vocab_size > model_vocab_size:
        raise StoreError(f"{where} holds ids of a vocabulary of {manifest.vocab_size}, more "
                         f"than the model's vocab_size {model_vocab_size}: set the model "
                         "config's vocab_size to at least that, or rebuild the store")
    counts = manifest.counts()
    options = ", ".join(f"{k}={v}" for k, v in sorted(manifest.options.items()))
    return (f"data: token store {where} ({manifest.family}{', ' + options if options else ''}):"
            f" {counts['documents']:,} documents, {counts['tokens']:,} tokens in "
            f"{len(manifest.shards)} shard(s), vocabulary of {manifest.vocab_size:,} from its "
            "manifest, read in place by every host")
