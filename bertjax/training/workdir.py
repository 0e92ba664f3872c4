"""A run's workdir record, WORKDIR/model.json: the model family, its config and its tokenizer.

Written by the training loop once a run starts (after its checks and restore), for every
family, so the tools that load a checkpoint (bertjax-generate, bertjax-embed, fine-tuning)
know what the workdir holds while the run is still going:

    {"family": "gpt", "objective": "gpt_pretraining",
     "config_class": "bertjax.models.gpt.GptConfig", "config": {...},
     "tokenizer": {"kind": "bpe", "files": {"vocab": "vocab.json", ...}, "vocab_size": 4096}}

Tokenizer files are named relative to the workdir, so a workdir can be copied elsewhere.
"""

import dataclasses
import importlib
import json
import os
import pathlib
from typing import Any

from bertjax.files import write_text

RECORD = "model.json"


class RecordError(ValueError):
    """A workdir whose model cannot be identified or is of the wrong family."""


def write_record(workdir: str | os.PathLike, family: str, objective: str, config: Any,
                 tokenizer: dict[str, Any]) -> None:
    """Write WORKDIR/model.json (atomically) for `config`, a family config dataclass."""
    cls = type(config)
    payload = {"family": family, "objective": objective,
               "config_class": f"{cls.__module__}.{cls.__qualname__}",
               "config": dataclasses.asdict(config), "tokenizer": tokenizer}
    text = json.dumps(payload, indent=2, sort_keys=True) + "\n"
    write_text(pathlib.Path(workdir) / RECORD, text)


def read_record(workdir: str | os.PathLike) -> dict[str, Any]:
    """The record of `workdir`; one line when there is none or it is not bertjax's."""
    path = pathlib.Path(workdir) / RECORD
    if not path.is_file():
        raise RecordError(f"{workdir} has no {RECORD}: pass the --workdir of a bertjax-train run "
                          "that has started")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise RecordError(f"{path}: not valid JSON ({e}): restore it or retrain") from None
    if not isinstance(record, dict) or "family" not in record or "config" not in record:
        raise RecordError(f"{path}: has no 'family' and 'config': it was not written by bertjax")
    return record


def recorded_family(workdir: str | os.PathLike) -> str | None:
    """The family of the run in `workdir`, or None for a workdir no run has started in."""
    return read_record(workdir)["family"] if (pathlib.Path(workdir) / RECORD).is_file() else None


def expect_family(workdir: str | os.PathLike, family: str, tool: str) -> dict[str, Any]:
    """The record of `workdir`, or one line saying it holds another family's model."""
    record = read_record(workdir)
    if record["family"] != family:
        raise RecordError(
            f"{workdir} holds a {record['family'].upper()} model, but {tool} needs a "
            f"{family.upper()} checkpoint: pass the workdir of a {family.upper()} run "
            f"(bertjax-train --gin_file=configs/experiments/{family}_*.gin)"
        )
    return record


def model_config(record: dict[str, Any], **overrides: Any) -> Any:
    """The recorded model config, rebuilt by its class (with `overrides`, e.g. remat=False)."""
    module, _, name = record.get("config_class", "").rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        raise RecordError(f"{RECORD}: unknown config class {record.get('config_class')!r}: "
                          "the workdir was written by another version of bertjax") from None
    return cls.from_dict({**record["config"], **overrides})


def tokenizer_file(workdir: str | os.PathLike, record: dict[str, Any], role: str) -> pathlib.Path:
    """The path of the tokenizer file of `role` ("vocab", "merges") the run recorded."""
    files = record.get("tokenizer", {}).get("files", {})
    if role not in files:
        raise RecordError(f"{pathlib.Path(workdir) / RECORD} names no tokenizer {role} file: "
                          "retrain with this version of bertjax")
    return pathlib.Path(workdir) / files[role]
