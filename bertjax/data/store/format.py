"""The token store's on-disk layout, and the checks that refuse a damaged or foreign store.

    DIR/manifest.json          written last: the format version, the family and its options,
                               the corpus (setting, digest), the tokenizer files (copied into
                               DIR/tokenizer/) and their digest, the shards and the counts
    DIR/tokens-NNNNN.bin       shard NNNNN's token ids, flat (uint16 when every id fits, else
                               uint32), read by positioned reads (local.py)
    DIR/index-NNNNN.npy        its boundaries, int64: [D, S, doc_sentences (D + 1),
                               sentence_tokens (S + 1)] (offsets from the shard's start)
    DIR/types-NNNNN.json       only for families whose ids are the corpus's own word types
                               (ELMo): the types the shard is the first to use, in order
    DIR/tokenizer/             the vocabulary files the ids belong to

A document is a run of sentences; a sentence is a run of tokens (a family with no sentences,
GPT, keeps one "sentence" per document). Every document the corpus reader yields is kept, empty
or not, so a reader sees the document count the in-memory source saw.

Every fault of a store is one `StoreError` line naming the file and the fix: rebuild it with
bertjax-prepare.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

FORMAT = "bertjax-token-store"
VERSION = 1
MANIFEST = "manifest.json"
PROGRESS = "build.json"  # a build under way: its identity and the shards it has finished
LOCK = ".build.lock"
TOKENIZER_DIR = "tokenizer"
REBUILD = "rebuild it with bertjax-prepare (see docs/pretraining.md, Corpora at scale)"


class StoreError(ValueError):
    """A token store that cannot be read or built as asked; the message names the fix."""


def tokens_name(shard: int) -> str:
    return f"tokens-{shard:05d}.bin"


def index_name(shard: int) -> str:
    return f"index-{shard:05d}.npy"


def types_name(shard: int) -> str:
    return f"types-{shard:05d}.json"


def token_dtype(id_bound: int | None) -> np.dtype:
    """uint16 when every id is below 65536 (`id_bound`: the vocabulary size), else uint32;
    None (ids without a known bound, such as corpus word types) takes uint32."""
    return np.dtype(np.uint16 if id_bound is not None and id_bound <= 2**16 else np.uint32)


def vocabulary_digest(paths: Mapping[str, str | os.PathLike]) -> str:
    """sha256 of vocabulary files ({role: path}): each role's name and bytes, roles sorted, so
    the digest names the files whatever order a mapping lists them in."""
    digest = hashlib.sha256()
    for role in sorted(paths):
        data = open(paths[role], "rb").read()  # noqa: SIM115 - vocabulary files are small
        digest.update(role.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


def make_index(sentences_per_document: np.ndarray, tokens_per_sentence: np.ndarray
               ) -> np.ndarray:
    """The index array of one shard (see the module docstring)."""
    docs = np.concatenate([[0], np.cumsum(sentences_per_document, dtype=np.int64)])
    sentences = np.concatenate([[0], np.cumsum(tokens_per_sentence, dtype=np.int64)])
    head = [len(sentences_per_document), len(tokens_per_sentence)]
    return np.concatenate([head, docs, sentences]).astype(np.int64)


def split_index(index: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(doc_sentences [D + 1], sentence_tokens [S + 1]) of an index array; one line if it is
    not one."""
    if index.ndim != 1 or index.dtype != np.int64 or index.size < 4:
        raise StoreError(f"{where} is not a token-store index: {REBUILD}")
    documents, sentences = int(index[0]), int(index[1])
    if index.size != 2 + documents + 1 + sentences + 1 or documents < 0 or sentences < 0:
        raise StoreError(f"{where} is not a token-store index: {REBUILD}")
    doc_sentences = index[2:3 + documents]
    sentence_tokens = index[3 + documents:]
    if doc_sentences[-1] != sentences:
        raise StoreError(f"{where} is not a token-store index: {REBUILD}")
    return doc_sentences, sentence_tokens


def index_counts(index: tuple[np.ndarray, np.ndarray]) -> tuple[int, int, int]:
    """(documents, sentences, tokens) of a split index."""
    docs, sentences = index
    return len(docs) - 1, len(sentences) - 1, int(sentences[-1])


def local_index_counts(path: pathlib.Path) -> tuple[int, int, int]:
    """(documents, sentences, tokens) of the index file at `path`, from its header and three
    of its values (a few small reads, whatever the shard's size); one line if it is not an
    index."""
    damaged = StoreError(f"{path} is not a token-store index: {REBUILD}")
    try:
        with path.open("rb") as f:
            version = np.lib.format.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise damaged
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, _, dtype = read_header(f)
            start = f.tell()

            def value(i: int) -> int:
                f.seek(start + 8 * i)
                data = f.read(8)
                if len(data) != 8:
                    raise damaged
                return int(np.frombuffer(data, "<i8")[0])

            if len(shape) != 1 or dtype != np.dtype("<i8") or shape[0] < 4:
                raise damaged
            documents, sentences = value(0), value(1)
            if (shape[0] != 2 + documents + 1 + sentences + 1 or documents < 0
                    or sentences < 0 or value(2 + documents) != sentences
                    or path.stat().st_size != start + 8 * shape[0]):
                raise damaged
            return documents, sentences, value(shape[0] - 1)
    except FileNotFoundError:
        raise StoreError(f"{path} is missing: {REBUILD}") from None
    except ValueError:  # numpy: not an .npy header
        raise damaged from None


@dataclasses.dataclass(frozen=True)
class Shard:
    """What the manifest says of one shard."""

    documents: int
    sentences: int
    tokens: int
    types: int = 0  # word types first used here (ELMo), else 0
    text_digest: str = ""  # sha256 of its documents' text: a resumed build checks it


@dataclasses.dataclass(frozen=True)
class Manifest:
    """The manifest (see the module docstring). `identity` is everything that decides the ids:
    a resumed build must match it, and a run checks its own settings against it."""

    family: str
    options: Mapping[str, Any]  # the family's settings that change the ids
    corpus: str  # the corpus setting the store was built from
    corpus_format: str
    text_key: str
    tokenizer_kind: str
    tokenizer_files: Mapping[str, str]  # {role: path under DIR}
    tokenizer_digest: str
    vocab_size: int
    dtype: str
    shard_chars: int  # a shard closes once its documents hold this many characters
    shards: tuple[Shard, ...] = ()
    corpus_digest: str = ""  # sha256 of every document's text, known once the build ends

    @property
    def identity(self) -> dict[str, Any]:
        fields = dataclasses.asdict(self)
        return {k: v for k, v in fields.items() if k not in ("shards", "corpus_digest")}

    def counts(self) -> dict[str, int]:
        return {name: sum(getattr(s, name) for s in self.shards)
                for name in ("documents", "sentences", "tokens", "types")}

    def to_json(self) -> str:
        record = {"format": FORMAT, "version": VERSION, **self.identity,
                  "corpus_digest": self.corpus_digest, "counts": self.counts(),
                  "shards": [dataclasses.asdict(s) for s in self.shards]}
        return json.dumps(record, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> Manifest:
        """The manifest of `text` (read from `where`); one line if it is not one of this
        version."""
        try:
            record = json.loads(text)
        except ValueError:
            raise StoreError(f"{where} is not JSON: {REBUILD}") from None
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            raise StoreError(f"{where} is not a token-store manifest: {REBUILD}")
        if record.get("version") != VERSION:
            raise StoreError(f"{where} has format version {record.get('version')}, this bertjax "
                             f"reads version {VERSION}: {REBUILD}")
        known = {f.name for f in dataclasses.fields(cls)}
        try:
            shards = tuple(Shard(**s) for s in record.get("shards", []))
            fields = {k: v for k, v in record.items() if k in known and k != "shards"}
            return cls(**fields, shards=shards)
        except TypeError:
            raise StoreError(f"{where} lacks fields of a token-store manifest: {REBUILD}"
                             ) from None


class Chunk(NamedTuple):
    """The ids of a run of documents, as a family's source encodes them for a shard."""

    tokens: np.ndarray  # [T] every sentence's ids, in order
    tokens_per_sentence: np.ndarray  # [S]
    sentences_per_document: np.ndarray  # [D]
    types: list[str] | None = None  # word-type families (ELMo): local id k + 2 is types[k]
