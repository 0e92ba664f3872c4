"""A store built for object storage (`--out=gs://...`): built on local disk, then uploaded.

A memory map needs local files and a resumable build needs renames, which object stores do not
have; so the store is built in a local staging directory named after the destination (a
rerun on the same host resumes it), then each file is uploaded whole (an object is written
whole or not at all), manifest.json last: a destination without one is not a store yet, and a
rerun uploads what is missing. The staging directory is removed once the upload is complete.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import tempfile

from bertjax import files
from bertjax.data.store.format import MANIFEST, Manifest, StoreError


def staging_dir(out: str) -> pathlib.Path:
    """The local directory a store for `out` is built in: the same for every rerun on this
    host (BERTJAX_STORE_STAGING, else the temporary directory)."""
    root = os.environ.get("BERTJAX_STORE_STAGING") or tempfile.gettempdir()
    name = hashlib.sha256(out.rstrip("/").encode()).hexdigest()[:16]
    return pathlib.Path(root) / f"bertjax-store-{name}"


def finished_remote(out: files.Path, identity: Manifest) -> Manifest | None:
    """The destination's manifest if it is a finished store of `identity`; None if it has
    none; one line if it holds a store of other settings."""
    where = out / MANIFEST
    if not where.is_file():
        return None
    finished = Manifest.from_json(where.read_text(), str(where))
    if finished.identity != identity.identity:
        raise StoreError(f"{out} holds a finished store of other settings: use another --out, "
                         f"or delete {out}")
    return finished


def upload(staged: pathlib.Path, out: files.Path) -> None:
    """Copy the finished store in `staged` to `out`, manifest.json last (files already there
    with the same size are kept), then remove `staged`."""
    names = sorted(str(p.relative_to(staged)) for p in staged.rglob("*")
                   if p.is_file() and not p.name.startswith("."))
    if MANIFEST not in names:
        raise StoreError(f"{staged} holds no finished store to upload")
    for name in [n for n in names if n != MANIFEST] + [MANIFEST]:
        target = out / name
        if name != MANIFEST and target.is_file() and (
                target.stat().length == (staged / name).stat().st_size):
            continue
        with files.reaching(target):
            files.copy(staged / name, target)
    shutil.rmtree(staged, ignore_errors=True)
