"""The token store's build as an Apache Beam pipeline: the same store, byte for byte, as the
local build (build.py) of the same corpus, vocabulary and shard size, on the DirectRunner or
on Dataflow for corpora one machine would take too long to tokenize.

    build_on_beam("bert", corpus="gs://b/wiki/*.txt", vocab="gs://b/vocab", out="gs://b/st",
                  pipeline_args=["--runner=DataflowRunner", "--project=P", "--region=R",
                                 "--temp_location=gs://b/tmp", "--setup_file=./setup.py"])

The pipeline:

    split      one worker streams the corpus in order and cuts it into shards exactly as the
               local build does (`build._shards`: the cut points depend on every document
               before them), with each shard's text digest and the corpus digest
    reshuffle  spreads the shards over the workers (Beam would otherwise fuse them onto the
               splitting worker)
    encode     each worker tokenizes whole shards with the family's own encode path
    types      (ELMo) one step assigns the store's word-type ids over the shards in order,
               as the local build's writer does
    write      each shard's files, written whole into the store (tokens, types, index last)
    manifest   one step writes manifest.json last, once every shard is written

Reading and hashing text runs at hundreds of MB/s, tokenizing at about 1 MB/s a core, so the
one splitting worker keeps on the order of a hundred encoding workers busy. The launcher
copies the vocabulary files in before the pipeline starts. A local `out` takes the build lock
(lock.py) while the pipeline runs. A failed pipeline leaves no manifest.json, so nothing
half-written is read; the rerun rebuilds every shard (Beam retries a failed bundle itself,
and shard files are written whole, so a retried write replaces the same bytes).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from bertjax import files
from bertjax.data.store import build as build_lib
from bertjax.data.store import upload
from bertjax.data.store import workers as workers_lib
from bertjax.data.store.format import MANIFEST, Chunk, Manifest, Shard, StoreError
from bertjax.data.store.lock import build_lock


def _split(_: Any, settings: dict[str, Any], shard_chars: int) -> Iterator[Any]:
    """(number, documents, text digest) of each shard in corpus order, then the corpus's
    digest on the "digest" output."""
    import apache_beam as beam

    from bertjax.data.source import stream_documents

    corpus_digest = hashlib.sha256()
    documents = stream_documents(settings["corpus"], settings["corpus_format"],
                                 settings["text_key"])
    for number, (shard, digest) in enumerate(build_lib.cut_shards(documents, shard_chars,
                                                               corpus_digest)):
        yield number, shard, digest
    yield beam.pvalue.TaggedOutput("digest", corpus_digest.hexdigest())


class _Encode:
    """(number, documents, digest) -> (number, Chunk, digest), by the family's source, made
    once per worker (its vocabulary loaded)."""

    def __init__(self, family: str, settings: dict[str, Any]) -> None:
        self.family, self.settings, self.source = family, settings, None

    def __call__(self, element: tuple[int, list[list[str]], str]) -> tuple[int, Chunk, str]:
        if self.source is None:
            self.source = workers_lib.family_source(self.family, **self.settings)
            self.source.use_given_vocab()
        number, documents, digest = element
        return number, self.source.encode_documents(documents), digest


def _type_maps(shard_types: Sequence[tuple[int, list[str] | None]]
               ) -> dict[int, tuple[np.ndarray, list[str]]]:
    """{shard: (local -> store type ids, its new types)} of a word-type family, the shards
    taken in order (`build.assign_types`); {} for other families."""
    from bertjax.tokenizers.elmo_vocab import BOS, EOS

    types: dict[str, int] = {BOS: 0, EOS: 1}
    return {number: build_lib.assign_types(types, chunk_types)
            for number, chunk_types in sorted(shard_types, key=lambda e: e[0])
            if chunk_types is not None}


def _write(element: tuple[int, Chunk, str], out: str, dtype: str,
           type_maps: dict[int, tuple[np.ndarray, list[str]]]) -> tuple[int, Shard]:
    """Write one shard's files whole into the store; (number, its manifest record)."""
    number, chunk, digest = element
    mapping, new_types = type_maps.get(number, (None, []))
    for name, data in build_lib.shard_files(number, chunk, np.dtype(dtype), mapping,
                                            new_types).items():
        target = files.as_path(out) / name
        with files.reaching(target):
            files.write_bytes(target, data)
    return number, build_lib.shard_record(chunk, len(new_types), digest)


def _write_manifest(shards: Sequence[tuple[int, Shard]], out: str, identity: str,
                    corpus_digest: str) -> None:
    """manifest.json, last: the store is finished."""
    import dataclasses

    manifest = Manifest.from_json(identity, "the build's identity")
    numbers = sorted(number for number, _ in shards)
    if numbers != list(range(len(numbers))):
        raise StoreError(f"{out}: the pipeline wrote shards {numbers}, not 0..{len(numbers) - 1}")
    manifest = dataclasses.replace(manifest, shards=tuple(s for _, s in sorted(shards)),
                                   corpus_digest=corpus_digest)
    files.write_text(files.as_path(out) / MANIFEST, manifest.to_json())


def pipeline(root: Any, family: str, settings: dict[str, Any], out: str, identity: Manifest
             ) -> None:
    """The build's transforms, applied to the pipeline `root` (see the module docstring)."""
    import apache_beam as beam

    split = (root | "Start" >> beam.Create([None])
             | "Split" >> beam.FlatMap(_split, settings, identity.shard_chars
                                       ).with_outputs("digest", main="shards"))
    chunks = (split.shards | "Reshuffle" >> beam.Reshuffle()
              | "Encode" >> beam.Map(_Encode(family, settings)))
    type_maps = (chunks | "Types" >> beam.Map(lambda e: (e[0], e[1].types))
                 | "AllTypes" >> beam.combiners.ToList()
                 | "TypeIds" >> beam.Map(_type_maps))
    written = chunks | "Write" >> beam.Map(_write, out, identity.dtype,
                                           beam.pvalue.AsSingleton(type_maps))
    _ = (written | "AllShards" >> beam.combiners.ToList()
         | "Manifest" >> beam.Map(_write_manifest, out, identity.to_json(),
                                  beam.pvalue.AsSingleton(split.digest)))


def build_on_beam(family: str, corpus: str, vocab: str, out: str | os.PathLike,
                  pipeline_args: Sequence[str] = (), corpus_format: str = "bert",
                  text_key: str = "text", shard_chars: int = build_lib.SHARD_CHARS,
                  **settings: Any) -> Manifest:
    """Build the token store of `build.build`'s arguments on Beam with `pipeline_args` (Beam's
    own options: --runner, Dataflow's --project, --region, --temp_location, ...; the
    DirectRunner when none is named), or find it finished. Returns the manifest."""
    try:
        import apache_beam as beam
        from apache_beam.options.pipeline_options import PipelineOptions
    except ImportError:
        raise StoreError("--runner=beam needs Apache Beam: pip install 'bertjax[beam]'") from None
    from bertjax.data.source import stream_documents

    encoder, vocab_files, settings, identity = build_lib.plan(
        family, corpus, vocab, corpus_format, text_key, shard_chars, **settings)
    remote = files.is_remote(out)
    where = files.as_path(out) if remote else pathlib.Path(out)
    if remote:
        finished = upload.finished_remote(where, identity)
        guard: Any = contextlib.nullcontext()
    else:
        build_lib.check_local_out(where)
        where.mkdir(parents=True, exist_ok=True)
        guard = build_lock(where)
    with guard:
        if not remote:
            finished = build_lib.finished_local(where, identity)
        if finished is not None:
            return finished
        if next(iter(stream_documents(corpus, corpus_format, text_key)), None) is None:
            raise StoreError(f"corpus {corpus!r} is empty: point --corpus at text")
        for role, name in identity.tokenizer_files.items():
            files.copy(vocab_files[role], where / name)
        options = PipelineOptions(list(pipeline_args))
        with beam.Pipeline(options=options) as root:
            pipeline(root, family, settings, os.fspath(where), identity)
        return Manifest.from_json((where / MANIFEST).read_text(), str(where / MANIFEST))
