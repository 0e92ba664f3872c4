"""The path layer every workdir file goes through: modes others can read, writes that a crash
never leaves half done, temporary files of killed writers removed, unknown schemes refused."""

import os
import signal
import stat
import subprocess
import sys

import pytest

from bertjax import files
from bertjax.cli import runner

pytestmark = pytest.mark.unit  # the unit tier: make test-unit


@pytest.fixture
def umask_022():
    before = os.umask(0o022)
    yield
    os.umask(before)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_atomic_writes_take_the_umask_and_keep_a_replaced_files_mode(tmp_path, umask_022):
    path = tmp_path / "model.json"
    files.write_text(path, "{}\n")
    assert mode(path) == 0o644  # others (a team, TensorBoard run as another user) can read
    os.chmod(path, 0o640)
    files.write_text(path, '{"a": 1}\n')
    assert mode(path) == 0o640 and path.read_text() == '{"a": 1}\n'
    appended = tmp_path / "metrics.jsonl"
    log = files.AppendFile(appended)
    log.write(b'{"step": 1}\n')
    log.close()
    assert mode(appended) == 0o644


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    path = tmp_path / "vocab.txt"
    files.write_text(path, "old\n")
    with pytest.raises(RuntimeError), files.atomic_file(path) as f:
        f.write("half")
        raise RuntimeError("disk full")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vocab.txt"]


def test_temporary_files_of_a_killed_writer_are_removed_by_the_next_write(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    orphan = tmp_path / f".out.npz.{dead}.abc123.tmp"  # what kill -9 mid-write leaves
    orphan.write_bytes(b"partial")
    live = tmp_path / f".out.npz.{os.getpid()}.def456.tmp"  # a write going on in this process
    live.write_bytes(b"partial")
    files.write_bytes(tmp_path / "out.npz", b"whole")
    assert not orphan.exists() and live.exists()
    assert (tmp_path / "out.npz").read_bytes() == b"whole"


def test_a_temporary_file_of_a_reused_pid_is_an_orphan(tmp_path):
    """A temporary file's name carries its writer's PID and start time: a PID the kernel has
    given to another process since (here: the parent's PID with another start) does not
    keep the dead writer's file alive; the living writer's file stays."""
    parent = os.getppid()
    started = files.process_start(parent)
    reused = tmp_path / f".out.npz.{parent}-{int(started) + 1}.abc.tmp"
    living = tmp_path / f".out.npz.{parent}-{started}.def.tmp"
    for path in (reused, living):
        path.write_bytes(b"partial")
    files.write_bytes(tmp_path / "out.npz", b"whole")
    assert not reused.exists() and living.exists()
    assert files.writer_tag() == f"{os.getpid()}-{files.process_start(os.getpid())}"


def test_sigterm_in_a_tool_cleans_up_its_half_written_output(tmp_path):
    """A tool that does not train (bertjax-embed, generate) ends on SIGTERM as on Ctrl-C, so
    its atomic output's temporary file is removed rather than left behind."""
    path = tmp_path / "embeddings.npz"
    with pytest.raises(KeyboardInterrupt), runner._terminate_as_interrupt():
        with files.atomic_file(path, "wb") as f:
            f.write(b"half")
            os.kill(os.getpid(), signal.SIGTERM)
    assert list(tmp_path.iterdir()) == []


def test_unsupported_schemes_are_one_line_and_gs_paths_are_not_local():
    with pytest.raises(files.StorageError, match=r"s3:// paths are not supported: use a local "
                                                 r"path or gs://BUCKET/PATH"):
        files.as_path("s3://bucket/run")
    path = files.as_path("gs://bucket/run") / "model.json"
    assert str(path) == "gs://bucket/run/model.json" and files.is_remote(path)
    assert not files.is_remote(files.as_path("gs:/bucket"))  # one slash: a local name


def test_gcsfs_tracebacks_are_not_logged_its_other_records_are(caplog):
    """gcsfs logged about 50 lines of retry traceback before bertjax's own one line for an
    unreachable gs:// workdir (the error itself still reaches the tool)."""
    import logging

    files.as_path("gs://bucket/run")  # the first gs:// path installs the filter

    gcsfs_log = logging.getLogger("gcsfs")
    with caplog.at_level(logging.DEBUG, logger="gcsfs"):
        try:
            raise ConnectionRefusedError("Connect call failed ('127.0.0.1', 9)")
        except ConnectionRefusedError as err:
            gcsfs_log.exception(f"_request out of retries on exception: {err}")
        gcsfs_log.warning("Could not determine bucket type for bucket name b: no credentials")
        gcsfs_log.warning("a warning of its own")
    assert "out of retries" not in caplog.text and "bucket type" not in caplog.text
    assert "a warning of its own" in caplog.text


GS_BACKEND = """
import os
from etils.epath import backend
from bertjax import files
files.as_path("gs://bucket/a")  # a gs:// path made, no operation on it yet
os.environ.pop("EPATH_USE_TF")  # as a test's environment fixture restores it
path = files.as_path("gs://bucket/b")
print(path._backend is backend.fsspec_backend, os.environ.get("EPATH_USE_TF"))
"""


def test_gs_paths_go_through_gcsfs_whenever_their_first_operation_comes():
    """etils picks TensorFlow's gfile or gcsfs once, at the first gs:// operation, from
    EPATH_USE_TF: a path made after the variable went away (an emulator fixture restoring the
    environment) chose gfile, which ignores the emulator, and every later gs:// test of the
    worker failed. Importing bertjax sets nothing; a gs:// path sets it."""
    env = {k: v for k, v in os.environ.items() if k != "EPATH_USE_TF"}
    out = subprocess.run([sys.executable, "-c", GS_BACKEND], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "false"]


GS_AFTER_A_PROBE = """
import os
from etils.epath import backend, gpath
assert gpath._is_tf_installed()  # another library's gs:// operation, the variable unset
os.environ["EPATH_USE_TF"] = "false"  # as an emulator fixture sets it
from bertjax import files
print(files.as_path("gs://bucket/b")._backend is backend.fsspec_backend)
"""


def test_gs_paths_go_through_gcsfs_after_another_library_chose_gfile():
    """TFDS probing its bucket before bertjax's first gs:// path fixed etils on gfile for the
    whole process (every gs:// test of a worker failed against the emulator)."""
    env = {k: v for k, v in os.environ.items() if k != "EPATH_USE_TF"}
    out = subprocess.run([sys.executable, "-c", GS_AFTER_A_PROBE], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True"]
