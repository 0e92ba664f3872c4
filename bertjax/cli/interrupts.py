"""Ctrl-C and SIGTERM honoured while a tool's main thread is inside a long C call.

Python runs a signal's handler only when the main thread comes back to the interpreter; XLA
compiling a paper-size model for a TPU topology (bertjax-compile) stays in C++ for minutes,
so Ctrl-C used to wait for the compile to end (35 to 47 s for BERT-base on a 2-core host). A
watcher thread reads the signals from Python's wakeup file descriptor, which the C-level
handler writes at once: if the process is still running `grace` seconds after one, the main
thread is stuck in C, and the watcher prints the tool's line and ends the process (exit 130).

Only for the tools that hold no workdir (everything but train, finetune and glue, which save
a checkpoint on SIGTERM and clean up a run stopped before its first step), and only in a
tool's own process (`bertjax.cli.tool_name`), never in code that imports bertjax.
"""

import os
import signal
import sys
import threading
import time

from bertjax import files

WATCHED = (signal.SIGINT, signal.SIGTERM)


def watch(program: str, grace: float = 3.0) -> None:
    """Start the watcher for `program` (from the main thread, once the tool's own Python
    handlers for SIGINT and SIGTERM are installed: the wakeup descriptor serves them)."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    try:
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except ValueError:  # not the main thread: no watcher
        os.close(read)
        os.close(write)
        return
    threading.Thread(target=_wait, args=(program, read, grace), name="bertjax-interrupts",
                     daemon=True).start()


def _wait(program: str, read: int, grace: float) -> None:
    while True:
        data = os.read(read, 64)
        if not data:
            return
        if any(byte in WATCHED for byte in data):
            time.sleep(grace)  # the main thread's own handling ends the process before this
            os.write(2, f"{program}: interrupted\n".encode())
            sys.stdout.flush()
            files.remove_downloads()
            os._exit(130)
