"""Test setup: 8 fake CPU devices (set before jax is imported) and shared data paths."""

import os
import pathlib

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


def shared_file(relative: str) -> pathlib.Path:
    """Path of a file under ../shared/data; skips the test with a clear message if absent."""
    path = SHARED_DATA / relative
    if not path.exists():
        pytest.skip(f"{path} is absent: tests that need the shared corpora run beside ../shared")
    return path


@pytest.fixture(scope="session")
def wikitext_valid() -> pathlib.Path:
    return shared_file("wikitext-2/valid.txt")


@pytest.fixture(scope="session")
def bert_sample() -> pathlib.Path:
    return shared_file("bert-sample/sample_text.txt")
