"""Host memory for steps that run on the CPU: keep what XLA:CPU frees inside the process.

XLA:CPU allocates a step's temporaries afresh at every execution (GPT-2 tiny at 32 x 128
tokens: about 180 MB) and frees them at its end. glibc's malloc serves a block that large with
a mapping of its own (a thread's arena falls back to one even when the main arena may not),
and unmaps it when freed, so every step faults its temporaries in again, a page at a time:
about 45,000 page faults and 100 ms of kernel time a step on 2 cores, a quarter of the CPU the
step takes. One arena that never maps blocks of its own and never trims its heap hands the same
pages back almost every step (the odd step still faults while the heap settles;
benchmarks/results.md, "host memory").

The setting must be made before JAX starts its backend: XLA's threads take an arena when
they first allocate and keep it, so a process that set it later keeps faulting. It is made
only on hosts without an accelerator (where the steps are the CPU's) unless asked for:
`BERTJAX_HOST_MALLOC=keep` sets it anywhere, `BERTJAX_HOST_MALLOC=default` leaves malloc as
it is. It never returns memory to the system before the process ends: the price is a
resident size that stays at its peak.
"""

import ctypes
import ctypes.util
import glob
import os
import platform
import sys

SETTING = "BERTJAX_HOST_MALLOC"
CHOICES = ("auto", "keep", "default")
# mallopt(3) parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
NEVER_TRIM = 2**31 - 1  # mallopt takes an int: the largest trim threshold it accepts
ACCELERATOR_NODES = ("/dev/nvidia[0-9]*", "/dev/accel[0-9]*", "/dev/vfio/[0-9]*")


def accelerator_attached() -> bool:
    """Whether this host has a GPU or TPU device node, or JAX_PLATFORMS names something
    other than the CPU (looked up without starting JAX's backend)."""
    platforms = os.environ.get("JAX_PLATFORMS", "")
    if platforms:
        return any(p.strip() not in ("", "cpu") for p in platforms.split(","))
    return any(glob.glob(pattern) for pattern in ACCELERATOR_NODES)


def wanted() -> bool:
    """Whether this process should keep freed memory: BERTJAX_HOST_MALLOC, else whether the
    steps run on the CPU."""
    choice = os.environ.get(SETTING, "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise ValueError(f"{SETTING}={choice!r}: set it to one of {', '.join(CHOICES)}")
    if choice == "auto":
        return not accelerator_attached()
    return choice == "keep"


def keep_freed_memory() -> bool:
    """Make glibc's malloc keep freed memory (one arena, no blocks mapped on their own, no
    trimming) when `wanted()` and JAX's backend has not started; True when it was set."""
    if platform.system() != "Linux" or not wanted() or _backend_started():
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:  # another C library (musl): nothing to set
        return False
    settings = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, NEVER_TRIM))
    return all(mallopt(parameter, value) == 1 for parameter, value in settings)


def _backend_started() -> bool:
    """Whether JAX has started a backend in this process (a tool run inside a test process,
    a notebook): XLA's threads have their arenas then, and the setting would change nothing
    but the memory the rest of the process gives back."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    started = getattr(bridge, "backends_are_initialized", None)
    return bool(started and started())
