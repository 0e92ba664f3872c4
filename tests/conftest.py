"""Test setup: 8 fake CPU devices and quick LLVM compiles (tests/process_env.py; set before jax
is imported), one JAX compilation cache for the run, and shared data paths."""

import os
import pathlib
import shutil
import subprocess
import tempfile

from tests.process_env import with_test_flags, xla_flags  # plain os: jax is not imported yet

# 8 fake devices unless XLA_FLAGS is set (make test sets them); the test flags either way.
os.environ["XLA_FLAGS"] = with_test_flags(os.environ.get("XLA_FLAGS", xla_flags(8)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


def pytest_configure(config: pytest.Config) -> None:
    """One persistent JAX compilation cache per test run, shared by both xdist workers and every
    CLI subprocess (they inherit the environment): the suite compiles the same tiny models in
    dozens of processes. Each run starts empty, so it measures what a fresh clone pays. The size
    limit turns on JAX's file lock, so no process reads an entry another is still writing."""
    if hasattr(config, "workerinput") or "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return  # a worker inherits the controller's cache; a user's own cache is kept
    config.jax_cache_dir = tempfile.mkdtemp(prefix="bertjax-test-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = config.jax_cache_dir
    os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(8 * 2**30)
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.5"


ACCELERATORS = {"gpu": "cuda", "tpu": "tpu"}  # marker: the JAX_PLATFORMS value that selects it


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked gpu or tpu skips, naming the setting, unless JAX has that backend (the
    tests run on the CPU unless JAX_PLATFORMS says otherwise)."""
    for marker, platform in ACCELERATORS.items():
        if item.get_closest_marker(marker) is None:
            continue
        import jax

        try:
            found = bool(jax.devices(marker))
        except RuntimeError:  # no such backend in this process
            found = False
        if not found:
            pytest.skip(f"needs a {marker.upper()}: run on a host with one, with "
                        f"JAX_PLATFORMS={platform} (docs/testing.md)")


def pytest_unconfigure(config: pytest.Config) -> None:
    if getattr(config, "jax_cache_dir", None):
        shutil.rmtree(config.jax_cache_dir, ignore_errors=True)


def shared_file(relative: str) -> pathlib.Path:
    """Path of a file under ../shared/data; skips the test with a clear message if absent."""
    path = SHARED_DATA / relative
    if not path.exists():
        pytest.skip(f"{path} is absent: tests that need the shared corpora run beside ../shared")
    return path


@pytest.fixture
def tmpfs(tmp_path):
    """`tmpfs(size)`: a new directory holding a tmpfs of that size ("64k", "9m"), for the
    full-disk tests; unmounted at the end. Mounting needs root: the test skips without it."""
    mounts = []

    def mount(size: str) -> pathlib.Path:
        path = tmp_path / f"disk{len(mounts) or ''}"
        path.mkdir()
        if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}",
                                                "tmpfs", str(path)],
                                               capture_output=True).returncode:
            pytest.skip("mounting a small tmpfs needs root")
        mounts.append(path)
        return path

    yield mount
    for path in mounts:
        subprocess.run(["umount", "--lazy", str(path)], check=False)  # busy: still goes


@pytest.fixture(scope="session")
def wikitext_valid() -> pathlib.Path:
    return shared_file("wikitext-2/valid.txt")


@pytest.fixture(scope="session")
def bert_sample() -> pathlib.Path:
    return shared_file("bert-sample/sample_text.txt")


@pytest.fixture(scope="session")
def squad_dev() -> pathlib.Path:
    """Five SQuAD 2.0 dev articles (1,407 questions, 702 unanswerable), official JSON."""
    return shared_file("squad-v2-dev-5/dev.json")


@pytest.fixture(scope="session")
def agnews_dir() -> pathlib.Path:
    """AG News: train.tsv (4,000) and test.tsv (1,000), header sentence<TAB>label."""
    return shared_file("agnews")


def word_id_documents(path: pathlib.Path) -> tuple[list, int]:
    """(documents, vocab size): word-level ids (>= 5) per sentence; paragraphs are documents."""
    vocab: dict[str, int] = {}
    documents = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            documents.append([
                np.array([vocab.setdefault(w, len(vocab) + 5) for w in s.split()], np.int32)
                for s in line.split(" . ")
            ])
    return documents, len(vocab) + 5


_WORDS: dict = {}


@pytest.fixture
def wikitext_words(wikitext_valid):
    """WikiText-2 valid as word-id documents and the vocabulary size (read once)."""
    if "words" not in _WORDS:
        _WORDS["words"] = word_id_documents(wikitext_valid)
    return _WORDS["words"]
