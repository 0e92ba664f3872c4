"""XLA settings of the test processes and of the tools the tests start as processes.

LLVM runs at -O1 instead of XLA's default -O2: XLA:CPU compiles the suite's many programs
about 30% faster (MiniLM's fine-tuning step: 13.4 s -> 9.5 s) and runs them as fast. The
results do not change: XLA gives LLVM no fast-math licence to reorder floating point, and the
TPU compiler of the ahead-of-time tests ignores the setting (same memory and FLOPs).
"""

import os

QUICK_COMPILE = "--xla_backend_optimization_level=1"


def xla_flags(devices: int = 1) -> str:
    """XLA_FLAGS for `devices` CPU devices with quick compiles."""
    fake = f"--xla_force_host_platform_device_count={devices} " if devices > 1 else ""
    return fake + QUICK_COMPILE


def with_quick_compile(flags: str) -> str:
    """`flags` plus the quick compile, unless they already choose an optimization level."""
    if "xla_backend_optimization_level" in flags:
        return flags
    return f"{flags} {QUICK_COMPILE}".strip()


def process_env(devices: int = 1) -> dict[str, str]:
    """The environment of a tool started in its own process: this one's, `devices` CPU
    devices (one unless asked: the quickest compile)."""
    return {**os.environ, "XLA_FLAGS": xla_flags(devices)}
