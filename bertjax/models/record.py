"""A run's model record, WORKDIR/model.json: the family, its config and its tokenizer files.

Written when the data is prepared (before the first step), so tools that load a checkpoint
(bertjax-generate, fine-tuning) know what the workdir holds even while the run is going on.
Workdirs without a record are identified from their config.gin where possible.
"""

import dataclasses
import json
import os
import pathlib
import re
from typing import Any

RECORD = "model.json"
_GIN_FAMILIES = (("gpt", r"\bgpt_config\b"), ("bert", r"\bbert_config\b"),
                 ("elmo", r"\belmo_config\b"))


class RecordError(ValueError):
    """A workdir whose model cannot be identified or is of the wrong family."""


def write_record(workdir: str | os.PathLike, family: str, config: Any, **extra: Any) -> None:
    """Write WORKDIR/model.json for `config` (a dataclass) of `family`."""
    path = pathlib.Path(workdir) / RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)
    payload = {"family": family, "config": fields, **extra}
    tmp = path.with_name(f".{RECORD}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_record(workdir: str | os.PathLike) -> dict[str, Any]:
    """The record of `workdir`; a record-less workdir gets {"family": ...} from config.gin."""
    workdir = pathlib.Path(workdir)
    path = workdir / RECORD
    if path.is_file():
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise RecordError(f"{path}: not valid JSON ({e}): restore it or retrain") from None
        if not isinstance(record, dict) or "family" not in record:
            raise RecordError(f"{path}: has no 'family': it was not written by bertjax")
        return record
    gin_file = workdir / "config.gin"
    if gin_file.is_file():
        text = gin_file.read_text(encoding="utf-8")
        for family, pattern in _GIN_FAMILIES:
            if re.search(pattern, text):
                return {"family": family}
    raise RecordError(
        f"{workdir} has no {RECORD} or config.gin: pass a workdir written by bertjax-train"
    )


def expect_family(workdir: str | os.PathLike, family: str, tool: str) -> dict[str, Any]:
    """The record of `workdir`, or one line saying it holds another family's model."""
    record = read_record(workdir)
    if record["family"] != family:
        raise RecordError(
            f"{workdir} holds a {record['family'].upper()} model, but {tool} needs a "
            f"{family.upper()} checkpoint: pass the workdir of a {family.upper()} run "
            f"(bertjax-train --gin_file=configs/experiments/{family}_*.gin)"
        )
    if "config" not in record:
        raise RecordError(f"{workdir}/{RECORD} lacks the model config: retrain with this version")
    return record
