"""A Google Cloud Storage emulator on loopback for tests of gs:// workdirs and corpora.

`gcs_bucket` (a session fixture) starts `gcp-storage-emulator` (the JSON API, in memory) on a
free port, points this process and the tools it starts at it by the clients' documented
settings (gcsfs: STORAGE_EMULATOR_HOST; tensorstore, orbax's storage:
TENSORSTORE_GCS_HTTP_URL and GOOGLE_AUTH_TOKEN_FOR_TESTING), and stops it at the end.
The emulator does not enforce upload preconditions (ifGenerationMatch), so create-only
semantics are tested on local workdirs, where the lease uses a lock. Its downloads lack the
x-goog-generation header GCS sends with every object, which tensorstore's OCDBT (orbax's
checkpoint format) reads to version its manifest; the server started here adds it.
"""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

BUCKET = "bertjax-test"
SERVER = """
import sys
from gcp_storage_emulator.handlers import objects

plain_download = objects.download


def download(request, response, storage, *args, **kwargs):
    plain_download(request, response, storage, *args, **kwargs)
    try:
        meta = storage.get_file_obj(request.params["bucket_name"], request.params["object_id"])
    except Exception:  # not found: the plain handler answered 404
        return
    response["x-goog-generation"] = str(meta["generation"])
    response["x-goog-metageneration"] = str(meta.get("metageneration", 1))


objects.download = download
from gcp_storage_emulator.__main__ import main  # noqa: E402 - after the patch

main(sys.argv[1:])
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def gcs_bucket() -> Iterator[str]:
    """gs://BUCKET on a running emulator; this process's environment points at it."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, "start", "--host=127.0.0.1",
         f"--port={port}", f"--default-bucket={BUCKET}", "--in-memory"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if server.poll() is not None or time.time() > deadline:
                server.kill()
                pytest.fail("the GCS emulator did not start: pip install -e '.[test]'")
            time.sleep(0.1)
    url = f"http://127.0.0.1:{port}"
    settings = {"STORAGE_EMULATOR_HOST": url, "TENSORSTORE_GCS_HTTP_URL": url,
                "GOOGLE_AUTH_TOKEN_FOR_TESTING": "test",
                "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "EPATH_USE_TF": "false"}
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    try:
        yield f"gs://{BUCKET}"
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.terminate()
        server.wait(timeout=30)
