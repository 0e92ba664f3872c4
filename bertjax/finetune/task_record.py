"""WORKDIR/task.json: what a fine-tuning run's head predicts and how its inputs are tokenized,
for the tools that use the fine-tuned model outside the run (bertjax-export):

    {"family": "bert", "task": "classification", "approach": "fine_tune",
     "labels": ["Business", "Sports"],            # the head's outputs in order (or null)
     "max_seq_length": 128, "init": "/path/of/--init",
     "tokenizer": {"kind": "wordpiece", "files": {"vocab": "vocab.txt"}, "lower_case": true,
                   "rules": "transformers"},     # "google" for a Google BERT --init
     "head": {"pooling": "cls"}}                  # BERT: what its sentence head reads
    (kinds: wordpiece; bpe, GPT-2's byte-level; openai_bpe, GPT-1's character-level)

model.json (training/workdir.py) records the model config; this file adds what only the
fine-tuning recipe knows. The tokenizer's files are copied into the workdir (as a pretraining
run copies its own), so the workdir stands alone; init.txt records the --init the run started
from. All are written before the first step, and a resume with an --init of another
vocabulary is refused (`check_same_tokenizer`), as pretraining refuses a changed tokenizer.

"head" holds the recipe's HEAD_SETTINGS: settings that change what a head computes from the
same parameters (BERT's finetune.pooling), so that a resumed run, its --predict files and
bertjax-export use the head that was trained: a resume that sets another value is refused in
one line (`check_same_head`), and bertjax-export refuses a head transformers cannot rebuild.
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile
from typing import TYPE_CHECKING, Any

from bertjax.files import Path, as_path, is_remote, write_bytes, write_text
from bertjax.training.workdir import (
    HEAD_SETTINGS,
    TASK_RECORD,
    read_task_record,
    recorded_head,
)

if TYPE_CHECKING:  # reading a record (bertjax-export) needs neither TensorFlow nor the models
    from bertjax.finetune.pretrained import Pretrained, Tokenizer
    from bertjax.finetune.recipe import Recipe

INIT_RECORD = "init.txt"  # the --init a run started from (bertjax.analysis.runs reads it)


def head_settings(recipe: Recipe) -> dict[str, Any]:
    """The HEAD_SETTINGS `recipe` has (its family's), as task.json records them."""
    return {name: getattr(recipe, name) for name in HEAD_SETTINGS if hasattr(recipe, name)}


def _save_tokenizer(workdir: Path, tokenizer: Tokenizer | None) -> dict[str, Any] | None:
    """Copy the tokenizer's files into `workdir`; the record's tokenizer part (None for a
    tokenizer that has no files, e.g. the character input of bilm-tf weights)."""
    from bertjax.tokenizers.bpe import ByteLevelBPE
    from bertjax.tokenizers.openai_bpe import OpenAIGptBPE
    from bertjax.tokenizers.wordpiece import WordPieceVocabulary

    if isinstance(tokenizer, WordPieceVocabulary):
        data = as_path(tokenizer.vocab_path).read_bytes()
        target = workdir / "vocab.txt"
        if not (target.is_file() and target.read_bytes() == data):
            write_bytes(target, data)
        return {"kind": "wordpiece", "files": {"vocab": target.name},
                "lower_case": tokenizer.lower_case, "rules": tokenizer.rules,
                "vocab_size": tokenizer.vocab_size}
    if isinstance(tokenizer, ByteLevelBPE | OpenAIGptBPE):
        vocab, merges = tokenizer.save(workdir)
        kind = "bpe" if isinstance(tokenizer, ByteLevelBPE) else "openai_bpe"
        return {"kind": kind, "files": {"vocab": vocab.name, "merges": merges.name},
                "vocab_size": tokenizer.vocab_size}
    return None


def _tokenizer_files(tokenizer: Tokenizer | None) -> tuple[dict[str, bytes], dict[str, Any]]:
    """({file name: bytes}, record) of the tokenizer as a run would copy it into its workdir
    (written to a temporary directory by the same code, whatever the tokenizer's kind)."""
    with tempfile.TemporaryDirectory() as directory:
        record = _save_tokenizer(as_path(directory), tokenizer) or {}
        return ({name: (as_path(directory) / name).read_bytes()
                 for name in record.get("files", {}).values()}, record)


def init_text(init: str) -> str:
    """--init as init.txt records it: a local directory resolved, anything else as given."""
    local = "," not in init and not is_remote(init)
    return str(pathlib.Path(init).resolve()) if local else init


def write_task_record(workdir: str | os.PathLike, recipe: Recipe, model: Pretrained,
                      labels: list[str] | None, init: str | None = None) -> dict[str, Any]:
    """Write WORKDIR/task.json (atomically), the tokenizer files it names and, unless the run
    recorded one already, init.txt (`init`: the --init it starts from); the tokenizer record
    (model.json keeps it with the files' digests). Fine-tuning writes them before its first
    step, so a run killed at any step can be exported and resumed."""
    workdir = as_path(workdir)
    tokenizer = _save_tokenizer(workdir, model.tokenizer)
    record = {"family": recipe.family, "task": recipe.task, "approach": recipe.approach,
              "labels": labels, "max_seq_length": recipe.max_seq_length, "init": model.source,
              "tokenizer": tokenizer, "head": head_settings(recipe)}
    write_text(workdir / TASK_RECORD, json.dumps(record, indent=2, sort_keys=True) + "\n")
    if init is not None and not (workdir / INIT_RECORD).is_file():
        write_text(workdir / INIT_RECORD, init_text(init) + "\n")
    return tokenizer or {}


def check_same_head(workdir: str | os.PathLike, recipe: Recipe) -> None:
    """Before a fine-tuning run resumes: the recipe's head settings are those its checkpoints
    were trained with (task.json), or one line names the setting and the recorded value. The
    parameters fit either value, so a changed setting would go on silently with another
    head."""
    from bertjax.training.workdir import latest_checkpoint

    workdir = as_path(workdir)
    step = latest_checkpoint(workdir)
    record = read_task_record(workdir) if step is not None else None
    if record is None:
        return  # a new run, or one from before runs recorded their task
    recorded = recorded_head(record)
    for name, value in head_settings(recipe).items():
        if value != recorded[name]:
            raise ValueError(f"checkpoint {step} of {workdir} was trained with finetune.{name} "
                             f"= {recorded[name]!r} ({workdir / TASK_RECORD}) but this run sets "
                             f"{value!r}: set finetune.{name} = {recorded[name]!r}, or use a "
                             "new --workdir")


def check_same_tokenizer(workdir: str | os.PathLike, model: Pretrained, init: str) -> None:
    """Before a fine-tuning run resumes: the --init given has the vocabulary (and case) its
    checkpoints were trained with, or one line says which file differs. Token ids mean the
    rows of the embedding they were trained with; another vocabulary of the same size would
    go on silently, with task.json and vocab.txt replaced under the checkpoints."""
    from bertjax.training.workdir import latest_checkpoint

    workdir = as_path(workdir)
    step = latest_checkpoint(workdir)
    record = read_task_record(workdir) if step is not None else None
    recorded = (record or {}).get("tokenizer") or {}
    if not recorded.get("files"):
        return  # a new run, or one from before runs recorded their task
    given, settings = _tokenizer_files(model.tokenizer)
    started = (workdir / INIT_RECORD).read_text().strip() if (
        workdir / INIT_RECORD).is_file() else record.get("init")
    fix = f"pass the --init it started from ({started}) or use a new --workdir"
    for name in recorded["files"].values():
        path = workdir / name
        if not path.is_file() or given.get(name) != path.read_bytes():
            raise ValueError(f"{path}, which checkpoint {step} was trained with, differs from "
                             f"the vocabulary of --init={init}: {fix}")
    for key, value in recorded.items():  # the kind, lower_case, ...: how text becomes ids
        if key not in ("files", "vocab_size", "sha256") and settings.get(key) != value:
            raise ValueError(f"--init={init} tokenizes with {key}={settings.get(key)!r} but "
                             f"checkpoint {step} of {workdir} was trained with {value!r}: {fix}")


