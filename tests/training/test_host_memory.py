"""Host memory for CPU steps (training/host_memory.py): a fresh process that keeps freed memory
runs a step with a large temporary without faulting its pages in again each time; one that
leaves glibc's malloc as it is faults them in at every step. The choice follows
BERTJAX_HOST_MALLOC and the host's accelerators, and a bad value is one clear error."""

import json
import subprocess
import sys

import pytest

from bertjax.training import host_memory
from tests.process_env import process_env

# A step whose three 16 MiB products are temporaries larger than any block glibc serves from
# its heap by default; the median faults of 15 steps after 2 warm-ups (a kept heap still
# faults at the odd step while it settles).
STEPS = """
import json, resource, statistics
from bertjax.training import host_memory
kept = host_memory.keep_freed_memory()
import jax, jax.numpy as jnp
def step(x):
    a = jnp.tanh(x @ x)
    b = jnp.tanh(a @ x)
    return (b @ a)[0]
step = jax.jit(step)
x = jnp.ones((2048, 2048), jnp.float32) / 2048
for _ in range(2):
    step(x).block_until_ready()
faults = []
for _ in range(15):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    step(x).block_until_ready()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"kept": kept, "faults_per_step": statistics.median(faults)}))
"""
TEMPORARY_PAGES = 3 * 2048 * 2048 * 4 // 4096


def _steps(choice: str) -> dict:
    env = {**process_env(), host_memory.SETTING: choice, "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, "-c", STEPS], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's malloc settings")
def test_kept_memory_is_not_faulted_in_again_each_step():
    kept, default = _steps("keep"), _steps("default")
    assert kept["kept"] and not default["kept"]
    assert default["faults_per_step"] > TEMPORARY_PAGES / 2  # the temporary, every step
    assert kept["faults_per_step"] < TEMPORARY_PAGES / 20


def test_auto_keeps_memory_only_where_the_steps_run_on_the_cpu(monkeypatch):
    monkeypatch.delenv(host_memory.SETTING, raising=False)
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert host_memory.wanted()
    monkeypatch.setenv("JAX_PLATFORMS", "tpu,cpu")
    assert not host_memory.wanted()
    monkeypatch.setenv(host_memory.SETTING, "keep")
    assert host_memory.wanted()
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv(host_memory.SETTING, "default")
    assert not host_memory.wanted()


def test_accelerator_nodes_count_without_jax_platforms(monkeypatch):
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    monkeypatch.setattr(host_memory.glob, "glob",
                        lambda pattern: ["/dev/accel0"] if "accel" in pattern else [])
    assert host_memory.accelerator_attached()
    monkeypatch.setattr(host_memory.glob, "glob", lambda pattern: [])
    assert not host_memory.accelerator_attached()


def test_a_bad_setting_names_the_choices(monkeypatch):
    monkeypatch.setenv(host_memory.SETTING, "jemalloc")
    with pytest.raises(ValueError, match="BERTJAX_HOST_MALLOC='jemalloc': set it to one of "
                                         "auto, keep, default"):
        host_memory.wanted()


def test_a_process_whose_backend_started_is_left_as_it_is(monkeypatch):
    import jax

    jax.devices()  # this test process's backend is running
    monkeypatch.setenv(host_memory.SETTING, "keep")
    assert not host_memory.keep_freed_memory()
