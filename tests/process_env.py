"""XLA settings of the test processes and of the tools the tests start as processes.

LLVM runs at -O1 instead of XLA's default -O2: XLA:CPU compiles the suite's many programs
about 30% faster (MiniLM's fine-tuning step: 13.4 s -> 9.5 s) and runs them as fast. The
results do not change: XLA gives LLVM no fast-math licence to reorder floating point, and the
TPU compiler of the ahead-of-time tests ignores the setting (same memory and FLOPs).

XLA:CPU ends the process ("Fatal Python error: Aborted") when the devices of a collective do
not all reach it within its timeouts (40 s by default). The tests run 8 fake devices on a
host whose cores a second test worker, and at times a TPU compile in a child process, keep
busy: a train step on an 8-device mesh in the end-to-end tier was aborted, most likely so
(pytest's capture kept XLA's own last line). The tests give collectives 10 minutes.
"""

import os

QUICK_COMPILE = "--xla_backend_optimization_level=1"
PATIENT_COLLECTIVES = ("--xla_cpu_collective_timeout_seconds=600 "
                       "--xla_cpu_collective_call_terminate_timeout_seconds=600")


def xla_flags(devices: int = 1) -> str:
    """XLA_FLAGS for `devices` CPU devices with quick compiles and patient collectives."""
    return with_test_flags(f"--xla_force_host_platform_device_count={devices}"
                           if devices > 1 else "")


def with_test_flags(flags: str) -> str:
    """`flags` plus the quick compile (unless they choose an optimization level) and the
    patient collectives (unless they set a collective timeout)."""
    if "xla_backend_optimization_level" not in flags:
        flags = f"{flags} {QUICK_COMPILE}"
    if "xla_cpu_collective" not in flags:
        flags = f"{flags} {PATIENT_COLLECTIVES}"
    return flags.strip()


def process_env(devices: int = 1) -> dict[str, str]:
    """The environment of a tool started in its own process: this one's, `devices` CPU
    devices (one unless asked: the quickest compile)."""
    return {**os.environ, "XLA_FLAGS": xla_flags(devices)}
