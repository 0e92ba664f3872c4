"""Static BERT pretraining examples cached once by seqio's Beam pipeline, read back by training.

Importing this module registers one seqio Task per settings entry (see `Settings`), so that

    python -m seqio.scripts.cache_tasks_main --module_import=bertjax.data.bert.cache \\
        --tasks=NAME --output_cache_dir=DIR \\
        --pipeline_options=--runner=DirectRunner,--bertjax_cache_settings=settings.json

writes the examples of static masking (`dupe_factor` passes, as google-research/bert) for that
corpus, vocabulary and length; DataflowRunner options run the same on Dataflow. Training reads
them with `bert_pretraining_source.cache_dir=DIR` (and the same settings) through seqio's
`use_cached=True`, and never reads or tokenizes the corpus.

Settings: a JSON object (or a list of them), given as the text or a path (local or gs://), in
the Beam pipeline option --bertjax_cache_settings (which Dataflow hands to its workers), else in
the environment variable BERTJAX_CACHE_SETTINGS. The Task name, `bertjax_static_<corpus>_<length>
_<hash>`, hashes every setting that changes the examples, the vocabulary's content included.

Layout: each of the corpus's `static_groups` document groups is a seqio split ("group00000",
...) whose shards are the dupe passes, so Beam builds (group, pass) pieces in parallel and a
worker tokenizes only its group. seqio's pipeline shuffles examples across files, so each
cached example carries `example_index`, its row in the group. `CachedStaticStream` loads one
group at a time (the next one in the background), sorts it by row and serves the order of
`pretraining.StaticOrder`: exactly the examples of the on-the-fly static path, in its order.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import functools
import hashlib
import json
import logging
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence

import numpy as np
import seqio
import tensorflow as tf

from bertjax.data.bert import documents
from bertjax.data.bert.instances import (
    Example,
    PretrainingConfig,
    StaticOrder,
    StaticTable,
    assemble,
    feature_spec,
)
from bertjax.data.bert.masking import SpecialIds, continuation_mask
from bertjax.data.source import DataError
from bertjax.data.vocabularies import WordPieceSeqio
from bertjax.tokenizers.wordpiece import WordPieceVocabulary

SETTINGS_OPTION = "bertjax_cache_settings"  # the Beam pipeline option
SETTINGS_ENV = "BERTJAX_CACHE_SETTINGS"
INDEX = "example_index"  # the row of a cached example in its group
FORMAT = 1  # bump when the static procedure changes: old caches then stop matching
_WRITE_BLOCK = 1024  # examples built per numpy call while caching
_READ_BATCH = 4096  # cached examples parsed per tf.data batch while loading a group


@dataclasses.dataclass(frozen=True)
class Settings:
    """One cache: BertPretrainingSource's options for static masking, at one length."""

    corpus: str = "stdlib"
    vocab: str = ""  # path of vocab.txt (local or gs://)
    seq_length: int = 128
    dupe_factor: int = 10
    static_groups: int = 1
    seed: int = 0
    corpus_format: str = "bert"
    text_key: str = "text"
    lower_case: bool = True
    nsp: bool = True
    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int | None = None
    short_seq_prob: float = 0.1
    whole_word_masking: bool = False
    tfds_data_dir: str | None = None  # where workers find a TFDS corpus; not in the name

    def config(self) -> PretrainingConfig:
        predictions = self.max_predictions_per_seq or documents.default_max_predictions(
            self.seq_length, self.masked_lm_prob)
        return PretrainingConfig(
            max_seq_length=self.seq_length, max_predictions_per_seq=predictions,
            masked_lm_prob=self.masked_lm_prob, short_seq_prob=self.short_seq_prob,
            nsp=self.nsp, whole_word_masking=self.whole_word_masking,
            dupe_factor=self.dupe_factor, masking="static", static_groups=self.static_groups)


def parse_settings(text: str) -> list[Settings]:
    """Settings from JSON text or the path of a JSON file: an object or a list of objects."""
    where = "settings"
    if not text.lstrip().startswith(("{", "[")):
        where = text
        if not tf.io.gfile.exists(text):
            raise DataError(f"cache settings file {text} not found: fix --{SETTINGS_OPTION} "
                            f"or {SETTINGS_ENV}")
        with tf.io.gfile.GFile(text) as f:
            text = f.read()
    entries = json.loads(text)
    entries = entries if isinstance(entries, list) else [entries]
    known = {field.name for field in dataclasses.fields(Settings)}
    for entry in entries:
        unknown = sorted(set(entry) - known)
        if unknown or not entry.get("vocab"):
            raise DataError(f"{where}: unknown keys {unknown} or no 'vocab' (the path of "
                            f"vocab.txt); the keys are {sorted(known)}")
    return [Settings(**entry) for entry in entries]


def _file_digest(path: str) -> str:
    with tf.io.gfile.GFile(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def task_name(settings: Settings) -> str:
    """bertjax_static_<corpus>_<length>_<hash of everything that changes the examples>."""
    config = dataclasses.asdict(settings.config())
    identity = dict(config, corpus=settings.corpus, corpus_format=settings.corpus_format,
                    text_key=settings.text_key, lower_case=settings.lower_case,
                    seed=settings.seed, vocab=_file_digest(settings.vocab), format=FORMAT)
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:10]
    slug = re.sub(r"[^a-z0-9]+", "_", settings.corpus.lower()).strip("_")[-30:]
    return f"bertjax_static_{slug}_{settings.seq_length}_{digest}"


def group_split(group: int) -> str:
    return f"group{group:05d}"


@functools.cache
def _local_vocab(path: str, lower_case: bool) -> WordPieceVocabulary:
    """The vocabulary of a local or gs:// vocab.txt."""
    if not os.path.isfile(path):  # e.g. gs://: copy it next to this process
        local = os.path.join(tempfile.mkdtemp(prefix="bertjax-vocab-"), "vocab.txt")
        tf.io.gfile.copy(path, local)
        path = local
    return WordPieceVocabulary(path, lower_case=lower_case)


# ---------------------------------------------------------------- writing (Beam workers)


class _GroupWriter:
    """Builds the examples of one group of a cache: its documents alone, tokenized here."""

    def __init__(self, settings: Settings, group: int) -> None:
        self.settings, self.group = settings, group
        vocab = _local_vocab(settings.vocab, settings.lower_case)
        texts = documents.read_group(settings.corpus, settings.corpus_format,
                                     settings.text_key, settings.static_groups, group,
                                     settings.tfds_data_dir)
        config = settings.config()
        corpus = documents.tokenize_documents(texts, vocab)
        continuation = continuation_mask(vocab.tokens) if config.whole_word_masking else None
        self.table = StaticTable(corpus, SpecialIds.from_vocabulary(vocab), config,
                                 settings.seed, continuation, numbers=[group])

    def examples(self, dupe: int | None) -> Iterator[Example]:
        """Blocks of the rows of pass `dupe` (all passes if None), each with its row."""
        bounds = self.table.pass_bounds(0)
        first, stop = (bounds[0], bounds[-1]) if dupe is None else bounds[dupe:dupe + 2]
        for start in range(int(first), int(stop), _WRITE_BLOCK):
            rows = np.arange(start, min(start + _WRITE_BLOCK, stop))
            yield dict(self.table.examples(0, rows), **{INDEX: rows})


@functools.lru_cache(maxsize=2)
def _writer(settings: Settings, group: int) -> _GroupWriter:
    return _GroupWriter(settings, group)


class StaticGroupsSource(seqio.DataSource):
    """The cache's data source: split "groupNNNNN" holds group NNNNN, a shard per dupe pass."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(splits=[group_split(g) for g in range(settings.static_groups)],
                         caching_permitted=True)
        self.settings = settings
        spec = feature_spec(settings.config())
        spec[INDEX] = ((), np.int64)
        self.signature = {key: tf.TensorSpec((None, *shape), tf.as_dtype(dtype))
                          for key, (shape, dtype) in spec.items()}

    @property
    def supports_arbitrary_sharding(self) -> bool:
        return False

    def list_shards(self, split: str) -> list[str]:
        return [f"{split}-pass{p}" for p in range(self.settings.dupe_factor)]

    def get_dataset(self, split: str = "group00000", shuffle: bool = True,
                    seed: int | None = None, shard_info: seqio.ShardInfo | None = None, *,
                    sequence_length: object = None, use_cached: bool = False,
                    num_epochs: int | None = 1) -> tf.data.Dataset:
        del shuffle, seed, sequence_length, use_cached, num_epochs  # examples are fixed
        group = int(split.removeprefix("group"))
        if shard_info is not None and shard_info.num_shards != self.settings.dupe_factor:
            raise ValueError(f"{split}: shards are the {self.settings.dupe_factor} dupe passes, "
                             f"not {shard_info.num_shards}")
        dupe = shard_info.index if shard_info is not None else None
        blocks = tf.data.Dataset.from_generator(
            lambda: _writer(self.settings, group).examples(dupe), output_signature=self.signature)
        return blocks.unbatch()


def register(settings: Settings) -> seqio.Task:
    """Register (or replace) the cache Task of `settings`."""
    name = task_name(settings)
    tokenizer = _local_vocab(settings.vocab, settings.lower_case)
    vocab = WordPieceSeqio(tokenizer)
    features = {
        key: seqio.Feature(vocab if key in documents.ID_FEATURES
                           else seqio.PassThroughVocabulary(1), add_eos=False,
                           dtype=tf.as_dtype(dtype), rank=len(shape))
        for key, (shape, dtype) in feature_spec(settings.config()).items()
    }
    if name in seqio.TaskRegistry.names():
        seqio.TaskRegistry.remove(name)
    return seqio.TaskRegistry.add(name, source=StaticGroupsSource(settings),
                                  output_features=features,
                                  preprocessors=[seqio.CacheDatasetPlaceholder(required=False)])


# ---------------------------------------------------------------- reading (training)


def cached_task(settings: Settings, cache_dir: str, setting: str) -> seqio.Task:
    """The registered Task of `settings`, found cached in `cache_dir`; else a one-line error."""
    task = register(settings)
    seqio.add_global_cache_dirs([cache_dir])  # once; seqio keeps the list
    if not task.cache_dir:
        raise DataError(
            f"{setting}.cache_dir {cache_dir} has no cache {task.name} for these settings: "
            f"build it with python -m seqio.scripts.cache_tasks_main --module_import={__name__} "
            f"--tasks={task.name} --output_cache_dir={cache_dir} (see docs/pretraining.md)")
    return task


class CachedStaticStream:
    """The static stream read from a seqio cache: `examples(indices)` as `StaticStream`'s.

    Holds the group being served and loads the next one in a background thread. With
    `owner` = (process_index, process_count, block_size) a host keeps only its own rows.
    """

    def __init__(self, task: seqio.Task, seed: int, groups: int,
                 owner: tuple[int, int, int] = (0, 1, 1)) -> None:
        self.task, self.owner = task, owner
        sizes = [task.get_cached_stats(group_split(g))["examples"] for g in range(groups)]
        self.order = StaticOrder(seed, sizes)
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="cache-read")
        self._loads: dict[tuple[int, int], tuple[int, np.ndarray, concurrent.futures.Future]] = {}

    def _owned_rows(self, group: int, first: int, stop: int) -> np.ndarray:
        """Rows of `group` that this host serves in the global indices [first, stop)."""
        index, count, block = self.owner
        indices = np.arange(first, stop)
        indices = indices[(indices // block) % count == index]
        groups, rows = self.order.locate(indices)
        return np.sort(rows)

    def _load(self, group: int, rows: np.ndarray) -> tuple[np.ndarray, Example]:
        """(rows, their examples) of `group` read from the cache, sorted by row."""
        if not rows.size:
            return rows, {}
        keep = np.zeros(self.order.sizes[group], bool)
        keep[rows] = True
        dataset = self.task.get_dataset(split=group_split(group), use_cached=True,
                                        shuffle=False, num_epochs=1, trim_output_features=False,
                                        try_in_mem_cache=False)
        parts, start = [], time.perf_counter()
        for batch in dataset.batch(_READ_BATCH).prefetch(2).as_numpy_iterator():
            wanted = keep[batch[INDEX]]
            parts.append({key: value[wanted] for key, value in batch.items()})
        block = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
        order = np.argsort(block[INDEX])
        found = block.pop(INDEX)[order]
        if not np.array_equal(found, rows):
            raise DataError(f"cache {self.task.cache_dir} split {group_split(group)} lacks "
                            f"{len(rows) - len(found)} of its rows: rebuild the cache")
        seconds = time.perf_counter() - start
        logging.info("%s %s: read %d examples in %.1f s (%.0f/s), kept %d", self.task.name,
                     group_split(group), len(keep), seconds, len(keep) / seconds, len(found))
        return found, {key: value[order] for key, value in block.items()}

    def _schedule(self, epoch: int, position: int) -> concurrent.futures.Future:
        """The load of the group segment `position` of epoch `epoch` (started if need be)."""
        key = (epoch, position)
        if key not in self._loads:
            group, first, stop = self.order.segments(epoch)[position]
            rows = self._owned_rows(group, first, stop)
            held = (f for g, r, f in self._loads.values() if g == group and np.array_equal(r, rows))
            future = next(held, None)  # e.g. one host, one group: every epoch reads all of it
            if future is None:
                future = self._pool.submit(self._load, group, rows)
            self._loads[key] = (group, rows, future)
        return self._loads[key][2]

    def _segment(self, index: int) -> tuple[int, int]:
        epoch = index // self.order.total
        stops = [stop for _, _, stop in self.order.segments(epoch)]
        return epoch, int(np.searchsorted(stops, index, side="right"))

    def examples(self, indices: np.ndarray) -> Example:
        indices = np.asarray(indices, np.int64)
        epoch, position = self._segment(int(indices[0]))
        segments = self.order.segments(epoch)
        parts = []
        while True:  # the block's indices may run over several group segments
            group, first, stop = segments[position]
            where = np.flatnonzero((indices >= first) & (indices < stop))
            if where.size:
                rows, examples = self._schedule(epoch, position).result()
                _, wanted = self.order.locate(indices[where])
                parts.append((where, {key: value[np.searchsorted(rows, wanted)]
                                      for key, value in examples.items()}))
            if indices[-1] < stop:
                break
            epoch, position = self._segment(stop)
            segments = self.order.segments(epoch)
        current = (epoch, position)
        following = (epoch, position + 1) if position + 1 < len(segments) else (epoch + 1, 0)
        for key in list(self._loads):
            if key not in (current, following) and key < current:
                del self._loads[key]
        self._schedule(*following)
        return assemble(parts, len(indices))


# ---------------------------------------------------------------- registration at import


def _settings_text() -> str | None:
    """--bertjax_cache_settings of the Beam pipeline (worker or launcher), else the env var."""
    value_provider = sys.modules.get("apache_beam.options.value_provider")
    if value_provider is not None:  # a Beam worker: the job's pipeline options
        options = value_provider.RuntimeValueProvider.runtime_options or {}
        if options.get(SETTINGS_OPTION):
            return options[SETTINGS_OPTION]
    from absl import flags

    if "pipeline_options" in flags.FLAGS and flags.FLAGS.is_parsed():  # cache_tasks_main
        for option in flags.FLAGS.pipeline_options or []:
            if option.startswith(f"--{SETTINGS_OPTION}="):
                return option.split("=", 1)[1]
    return os.environ.get(SETTINGS_ENV)


def _pipeline_options_class() -> type | None:
    """A Beam options class knowing --bertjax_cache_settings, so Dataflow passes it to workers.

    Defined only where Beam is already imported (cache_tasks_main, its workers); Beam finds
    it among PipelineOptions' subclasses.
    """
    options = sys.modules.get("apache_beam.options.pipeline_options")
    if options is None or hasattr(options, "_bertjax_cache_options"):
        return None

    class BertjaxCacheOptions(options.PipelineOptions):
        @classmethod
        def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
            parser.add_argument(f"--{SETTINGS_OPTION}", default=None,
                                help="bertjax.data.bert.cache settings (JSON or path)")

    options._bertjax_cache_options = BertjaxCacheOptions  # a strong reference: kept alive
    return BertjaxCacheOptions


def register_from_settings(text: str | None = None) -> list[seqio.Task]:
    """Register the Tasks of the settings found (see the module docstring)."""
    text = text if text is not None else _settings_text()
    if not text:
        logging.info("%s: no --%s or %s: no cache tasks registered", __name__,
                     SETTINGS_OPTION, SETTINGS_ENV)
        return []
    tasks = [register(settings) for settings in parse_settings(text)]
    logging.info("%s: registered %s", __name__, ", ".join(t.name for t in tasks))
    return tasks


_pipeline_options_class()
REGISTERED: Sequence[seqio.Task] = register_from_settings()
