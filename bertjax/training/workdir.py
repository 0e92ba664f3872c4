"""A run's workdir record, WORKDIR/model.json: the model family, its config and its tokenizer.

Written by the training loop once a run starts (after its checks and restore), for every
family, so the tools that load a checkpoint (bertjax-generate, bertjax-embed, fine-tuning,
export) know what the workdir holds while the run is still going:

    {"format": 1, "family": "gpt", "objective": "gpt_pretraining",
     "config_class": "bertjax.models.gpt.GptConfig", "config": {...},
     "tokenizer": {"kind": "bpe", "files": {"vocab": "vocab.json", ...}, "vocab_size": 4096,
                   "sha256": {"vocab": "...", ...}},
     "data": {"corpus": "stdlib", "batch_size": 256}}

The record is a file format (docs/design.md, "The run record"): its version is FORMAT (a
record without one is version 1, as bertjax wrote them before it said so), the families are
FAMILIES and an objective's name says what its run trains (`role`, from the family's names in
RECORD_NAMES), in the names below, which never change meaning. `read_record` is the one
reader; it refuses, in one line, a record of a newer format, an unknown family or an objective
no family has.

Tokenizer files are named relative to the workdir, so a workdir can be copied elsewhere. Their
digests let a resume refuse, before any compute, to go on with a tokenizer file that is missing
or changed: the checkpoint's embedding rows mean the token ids it was trained with. A changed
corpus or batch size is legitimate and announced in one line.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import logging
import os
import pathlib
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from bertjax.files import as_path, is_remote, local_copy, write_text

if TYPE_CHECKING:  # the record stays readable without importing flax
    from bertjax.models.sizes import FamilyConfig

RECORD = "model.json"
TASK_RECORD = "task.json"  # a fine-tuning run's task, labels, tokenizer (task_record.py)
FORMAT = 1
# A fine-tuned head's name in an objective ("bert_classify", "elmo_pair_regress", ...):
# classes, a score, a choice among endings, a class per word, an answer span.
HEADS = ("classify", "regress", "choice", "tag", "span")
GPT_TRANSFORMATIONS = ("classification", "entailment", "similarity", "multiple_choice")


@dataclasses.dataclass(frozen=True)
class RecordNames:
    """The objective names a family's runs record, after "<family>_", by what they train:
    `pretraining` (each read as the Role of that kind: "pretraining", "ltr_pretraining"; every
    name ends in "pretraining"), fine-tuned `heads` (and `pair_heads`, "pair_<head>": ELMo's
    two-sentence task model), "features_<layers>" when `features` (BERT's feature-based
    tagger) and GPT's input `transformations`."""

    pretraining: tuple[str, ...] = ("pretraining",)
    heads: tuple[str, ...] = ()
    pair_heads: tuple[str, ...] = ()
    features: bool = False
    transformations: tuple[str, ...] = ()


# Every family's record names: a file format (a new family or objective adds names here,
# never reuses one); bertjax.training.families registers each family's pieces against them.
RECORD_NAMES = {
    "bert": RecordNames(pretraining=("pretraining", "ltr_pretraining"), heads=HEADS,
                        features=True),
    "gpt": RecordNames(transformations=GPT_TRANSFORMATIONS),
    "elmo": RecordNames(heads=("classify", "regress", "tag"), pair_heads=("classify", "regress")),
}
FAMILIES = tuple(RECORD_NAMES)


class RecordError(ValueError):
    """A workdir whose model cannot be identified or is of the wrong family."""


@dataclasses.dataclass(frozen=True)
class Role:
    """What a run trains, as its objective's name records it.

    kind: "pretraining" (every family) or another of a family's pretraining objectives
    ("ltr_pretraining", BERT's left-to-right ablation), "head" (a fine-tuned head, `name` one
    of HEADS; `pair`: ELMo's two-sentence task model), "features" (BERT's feature-based
    tagger, `name` its layer combination) or "transformation" (GPT fine-tuning, `name` one of
    GPT_TRANSFORMATIONS)."""

    kind: str
    name: str = ""
    pair: bool = False

    @property
    def pretrains(self) -> bool:
        """True for a pretraining run (of any pretraining objective), False for a fine-tuned
        one."""
        return self.kind.endswith("pretraining")


def role(family: str, objective: str) -> Role:
    """The Role an objective name records (read from the family's RECORD_NAMES); one line
    naming both when no family has it."""
    names = RECORD_NAMES.get(family)
    rest = objective.removeprefix(f"{family}_") if objective.startswith(f"{family}_") else None
    if names is not None and rest is not None:
        if rest in names.pretraining:
            return Role(rest)
        if names.features and rest.startswith("features_"):
            return Role("features", rest.removeprefix("features_"))
        if rest in names.transformations:
            return Role("transformation", rest)
        if rest in names.heads:
            return Role("head", rest)
        if rest.startswith("pair_") and rest.removeprefix("pair_") in names.pair_heads:
            return Role("head", rest.removeprefix("pair_"), True)
    raise RecordError(f"objective {objective!r} of a {family} run is not one this bertjax "
                      "knows: export or load it with the bertjax version that trained it")


def file_digest(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes (hex)."""
    return hashlib.sha256(as_path(path).read_bytes()).hexdigest()


def write_record(workdir: str | os.PathLike, family: str, objective: str, config: FamilyConfig,
                 tokenizer: dict[str, Any], data: dict[str, Any] | None = None) -> None:
    """Write WORKDIR/model.json (atomically) for `config`, a family config dataclass, with the
    digest of each tokenizer file in the workdir and the `data` a run trains on."""
    cls = type(config)
    workdir = as_path(workdir)
    files = tokenizer.get("files", {})
    digests = {role: file_digest(workdir / name) for role, name in files.items()
               if (workdir / name).is_file()}
    if digests:
        tokenizer = {**tokenizer, "sha256": digests}
    payload = {"format": FORMAT, "family": family, "objective": objective,
               "config_class": f"{cls.__module__}.{cls.__qualname__}",
               "config": dataclasses.asdict(config), "tokenizer": tokenizer}
    if data:
        payload["data"] = data
    text = json.dumps(payload, indent=2, sort_keys=True) + "\n"
    write_text(workdir / RECORD, text)


def is_workdir(directory: str | os.PathLike) -> bool:
    """True for a bertjax run's directory: it holds model.json, a lease or checkpoints/."""
    directory = as_path(directory)
    return ((directory / RECORD).is_file() or (directory / "lease.json").exists()
            or (directory / "checkpoints").is_dir())


def lists_workdir(names: Collection[str], folders: Collection[str]) -> bool:
    """`is_workdir` of a directory from its listing (its file and folder names), as a walk
    gives it: no request per directory on object storage."""
    return (RECORD in names or "lease.json" in names or "lease.json" in folders
            or "checkpoints" in folders)


def latest_checkpoint(workdir: str | os.PathLike) -> int | None:
    """The newest checkpoint step under WORKDIR/checkpoints (by name), or None."""
    directory = as_path(workdir) / "checkpoints"
    if not directory.is_dir():
        return None
    steps = [int(p.name) for p in directory.iterdir() if p.name.isdigit()]
    return max(steps) if steps else None


def check_resume(workdir: str | os.PathLike, data: dict[str, Any] | None = None
                 ) -> dict[str, Any] | None:
    """Before a run resumes: every tokenizer file the checkpoint was trained with is there,
    unchanged (one line naming it otherwise); a changed corpus or batch size is announced.
    The workdir's record, read once for every check of the run (None: it has none yet)."""
    workdir = as_path(workdir)
    if not (workdir / RECORD).is_file():
        return None
    record = read_record(workdir)
    step = latest_checkpoint(workdir)
    if step is None:
        return record
    tokenizer = record.get("tokenizer", {})
    digests = tokenizer.get("sha256", {})
    for role, name in tokenizer.get("files", {}).items():
        path = workdir / name
        if not path.is_file() or (role in digests and file_digest(path) != digests[role]):
            raise RecordError(f"{path}, which checkpoint {step} was trained with, is missing or "
                              "changed: restore it or use a new --workdir")
    before = record.get("data", {})
    changed = [f"{key} {value!r} (checkpoint {step} was trained with {before[key]!r})"
               for key, value in (data or {}).items()
               if key in before and before[key] != value]
    if changed:
        logging.warning("%s: resuming with %s", workdir, "; ".join(changed))
    return record


def read_record(workdir: str | os.PathLike) -> dict[str, Any]:
    """The record of `workdir`; one line when there is none or it is not bertjax's."""
    path = as_path(workdir) / RECORD
    if not path.is_file():
        raise RecordError(f"{workdir} has no {RECORD}: pass the --workdir of a bertjax-train run "
                          "that has started")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise RecordError(f"{path}: not valid JSON ({e}): restore it or retrain") from None
    if not isinstance(record, dict) or "family" not in record or "config" not in record:
        raise RecordError(f"{path}: has no 'family' and 'config': it was not written by bertjax")
    version = record.get("format", 1)
    if not isinstance(version, int) or version > FORMAT:
        raise RecordError(f"{path} is of record format {version!r}, newer than this bertjax's "
                          f"({FORMAT}): upgrade bertjax to read it")
    if record["family"] not in FAMILIES:
        raise RecordError(f"{path} records family {record['family']!r}, which this bertjax "
                          f"does not have ({', '.join(FAMILIES)}): use the bertjax version "
                          "that trained it")
    if record.get("objective"):  # one line for an objective no family has
        role(record["family"], record["objective"])
    return record


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


def model_config(record: dict[str, Any], **overrides: Any) -> FamilyConfig:
    """The recorded model config, rebuilt by its class (with `overrides`, e.g. remat=False)."""
    module, _, name = record.get("config_class", "").rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        raise RecordError(f"{RECORD}: unknown config class {record.get('config_class')!r}: "
                          "the workdir was written by another version of bertjax") from None
    return cls.from_dict({**record["config"], **overrides})


def tokenizer_file(workdir: str | os.PathLike, record: dict[str, Any], role: str
                   ) -> pathlib.Path:
    """A local path holding the tokenizer file of `role` ("vocab", "merges") the run recorded
    (the file itself, or a downloaded copy of a workdir on object storage)."""
    files = record.get("tokenizer", {}).get("files", {})
    if role not in files:
        raise RecordError(f"{as_path(workdir) / RECORD} names no tokenizer {role} file: "
                          "retrain with this version of bertjax")
    path = as_path(workdir) / files[role]
    if not is_remote(path):
        return pathlib.Path(path)  # the caller says what a missing one means for it
    if not path.is_file():
        raise RecordError(f"{path}, which {as_path(workdir) / RECORD} names, is missing: "
                          "restore it")
    return local_copy(path)


def read_task_record(workdir: str | os.PathLike) -> dict[str, Any] | None:
    """The task record of `workdir`, or None when the workdir has none (not a fine-tuning
    run, or one written before runs recorded their task)."""
    path = as_path(workdir) / TASK_RECORD
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise RecordError(f"{path}: not valid JSON ({e}): rerun bertjax-finetune with the same "
                         "flags to write it again") from None


# task.json's "head": settings that change what a head computes from the same parameters
# (finetune/task_record.py writes them), with the value a record from before the setting
# existed was trained with
HEAD_SETTINGS: dict[str, Any] = {"pooling": "cls"}


def recorded_head(task: dict[str, Any] | None) -> dict[str, Any]:
    """The head settings a task record says its run trained with (HEAD_SETTINGS' values for
    a record from before they were recorded)."""
    return {**HEAD_SETTINGS, **((task or {}).get("head") or {})}
