"""A source's batches without TensorFlow: its example blocks cut into batches in Python and
built ahead by a thread, for hosts where JAX is the only framework (accelerator images).

The batches are those of the seqio path (`bertjax.data.seqio_tasks`), element for element:
both read the same `example_blocks(start_index, shard_index, shard_count)` generator, and both
drop a final partial batch. A background thread keeps `depth` batches ready, as tf.data's
prefetch does, so building the next batch overlaps the step; the thread stops when the
consumer closes the generator (a run closes its batches when it ends, failed or not) and an
error raised while building a batch reaches the consumer at that batch.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import numpy as np

Batch = dict[str, np.ndarray]
_END = object()  # the blocks ran out


def rebatch(blocks: Iterator[Batch], batch_size: int) -> Iterator[Batch]:
    """Blocks of examples (every feature with a leading example axis, any block size) as
    batches of exactly `batch_size`; a final partial batch is dropped."""
    pending: list[Batch] = []
    held = 0
    for block in blocks:
        size = len(next(iter(block.values())))
        if not pending and size == batch_size:  # the common case: a block is a batch
            yield block
            continue
        pending.append(block)
        held += size
        while held >= batch_size:
            joined = {k: np.concatenate([b[k] for b in pending]) for k in pending[0]}
            yield {k: v[:batch_size] for k, v in joined.items()}
            rest = {k: v[batch_size:] for k, v in joined.items()}
            held -= batch_size
            pending = [rest] if held else []


def prefetched(batches: Iterator[Batch], depth: int = 2) -> Iterator[Batch]:
    """`batches`, built `depth` ahead by a daemon thread; see the module docstring."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        """Hand `item` over, waiting while the queue is full; False once the consumer left."""
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def fill() -> None:
        try:
            for batch in batches:
                if not put(batch):
                    return
            put(_END)
        except BaseException as err:  # noqa: BLE001 - handed to the consumer, raised there
            put(err)
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=fill, name="bertjax-batches", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join(timeout=5.0)
