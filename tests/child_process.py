"""Run one memory-hungry call in a child process and hand its result back.

Compiling BERT-large's train step for 128 TPU cores takes about 8 GB of host memory, and a
process keeps what its allocator once held: done in a test worker, that memory stays taken
for the rest of the run, beside the notebooks and full-size fine-tunes that follow. In a
child (started fresh, with this process's environment), it goes back to the system when the
call returns.
"""

import concurrent.futures
import multiprocessing
from collections.abc import Callable
from typing import Any


def call_in_child(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) in a fresh Python process; its return value (or exception) comes back here.
    `fn` must be importable by name and its result picklable."""
    context = multiprocessing.get_context("spawn")  # no copy of this process's heap
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(fn, *args).result()
