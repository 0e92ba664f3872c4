"""The family sources that tokenize a store's shards, and the worker processes they run in.

    family_source("bert", corpus=..., vocab=...)   the family's pretraining source
    start_pool(workers, "bert", settings)          spawned workers, each with its own source
    encode_in_worker(documents)                    (in a worker) a shard's Chunk of ids
    stop_workers(pool)                             end them now, mid-shard

Workers are spawned, not forked: TensorFlow (BERT's tokenizer) is not safe across a fork. A
worker that dies (out of memory) makes the pool report it rather than wait forever.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib
import inspect
import multiprocessing
import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from bertjax.data.store.format import Chunk, StoreError

if TYPE_CHECKING:
    from bertjax.data.source import Source

# The family's pretraining source, which brings the tokenizer and the encode path.
FAMILIES = {
    "bert": "bertjax.data.bert.source:BertPretrainingSource",
    "gpt": "bertjax.data.gpt.source:LmPretrainingSource",
    "elmo": "bertjax.data.elmo.source:ElmoSource",
}


def family_source(family: str, **settings: Any) -> Source:
    """The family's pretraining source with `settings` (its gin settings); one line for an
    unknown family or a setting it does not take."""
    if family not in FAMILIES:
        raise StoreError(f"unknown family {family!r}: choose one of {', '.join(FAMILIES)}")
    module, _, name = FAMILIES[family].partition(":")
    cls = getattr(importlib.import_module(module), name)
    unknown = sorted(set(settings) - set(inspect.signature(cls).parameters))
    if unknown:
        raise StoreError(f"{', '.join(unknown)}: not a setting of {cls.setting} ({family}); "
                         "leave it out")
    return cls(**settings)


_WORKER: Any = None  # a pool worker's source, its vocabulary loaded


def _start_worker(family: str, settings: dict[str, Any]) -> None:
    """A pool worker's start. It prints nothing (TensorFlow's start-up lines included: its
    errors reach the builder, which reports them), leaves Ctrl-C to the builder, which stops
    the workers, and ends when the builder does (kill -9 included): an orphan would hold the
    builder's terminal or pipes open and tokenize for nobody."""
    global _WORKER
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    os.close(quiet)
    builder = os.getppid()

    def end_with_the_builder() -> None:
        while os.getppid() == builder:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=end_with_the_builder, name="builder-watch", daemon=True).start()
    _WORKER = family_source(family, **settings)
    _WORKER.use_given_vocab()


def encode_in_worker(documents: list[list[str]]) -> Chunk:
    """(In a worker) the ids of a shard's documents, by the family's own encode path."""
    return _WORKER.encode_documents(documents)


def start_pool(workers: int, family: str, settings: dict[str, Any]
               ) -> concurrent.futures.ProcessPoolExecutor:
    """`workers` spawned processes, each with the family's source for `settings`."""
    return concurrent.futures.ProcessPoolExecutor(
        workers, multiprocessing.get_context("spawn"), _start_worker, (family, settings))


def stop_workers(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """End the pool's worker processes at once: shutting the pool down would wait for the
    shards they are tokenizing (Python 3.14 has `terminate_workers` for this)."""
    for process in list(getattr(pool, "_processes", {}).values()):
        with contextlib.suppress(OSError, ValueError):
            process.terminate()
