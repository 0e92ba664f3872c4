"""WORKDIR/task.json: what a fine-tuning run's head predicts and how its inputs are tokenized,
for the tools that use the fine-tuned model outside the run (bertjax-export):

    {"family": "bert", "task": "classification", "approach": "fine_tune",
     "labels": ["Business", "Sports"],            # the head's outputs in order (or null)
     "max_seq_length": 128, "init": "/path/of/--init",
     "tokenizer": {"kind": "wordpiece", "files": {"vocab": "vocab.txt"}, "lower_case": true,
                   "rules": "transformers"}}     # "google" for a Google BERT --init
    (kinds: wordpiece; bpe, GPT-2's byte-level; openai_bpe, GPT-1's character-level)

model.json (training/workdir.py) records the model config; this file adds what only the
fine-tuning recipe knows. The tokenizer's files are copied into the workdir (as a pretraining
run copies its own), so the workdir stands alone.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import TYPE_CHECKING, Any

from bertjax.files import atomic_file, write_text

if TYPE_CHECKING:  # reading a record (bertjax-export) needs neither TensorFlow nor the models
    from bertjax.finetune.pretrained import Pretrained
    from bertjax.finetune.recipe import Recipe

TASK_RECORD = "task.json"


def _save_tokenizer(workdir: pathlib.Path, tokenizer: Any) -> dict[str, Any] | None:
    """Copy the tokenizer's files into `workdir`; the record's tokenizer part (None for a
    tokenizer that has no files, e.g. the character input of bilm-tf weights)."""
    from bertjax.tokenizers.bpe import ByteLevelBPE
    from bertjax.tokenizers.openai_bpe import OpenAIGptBPE
    from bertjax.tokenizers.wordpiece import WordPieceVocabulary

    if isinstance(tokenizer, WordPieceVocabulary):
        target = workdir / "vocab.txt"
        if not (target.exists() and target.samefile(tokenizer.vocab_path)):
            with atomic_file(target, "wb") as f:
                f.write(pathlib.Path(tokenizer.vocab_path).read_bytes())
        return {"kind": "wordpiece", "files": {"vocab": target.name},
                "lower_case": tokenizer.lower_case, "rules": tokenizer.rules,
                "vocab_size": tokenizer.vocab_size}
    if isinstance(tokenizer, ByteLevelBPE | OpenAIGptBPE):
        vocab, merges = tokenizer.save(workdir)
        kind = "bpe" if isinstance(tokenizer, ByteLevelBPE) else "openai_bpe"
        return {"kind": kind, "files": {"vocab": vocab.name, "merges": merges.name},
                "vocab_size": tokenizer.vocab_size}
    return None


def write_task_record(workdir: str | os.PathLike, recipe: Recipe, model: Pretrained,
                      labels: list[str] | None) -> None:
    """Write WORKDIR/task.json (atomically) and the tokenizer files it names."""
    workdir = pathlib.Path(workdir)
    record = {"family": recipe.family, "task": recipe.task, "approach": recipe.approach,
              "labels": labels, "max_seq_length": recipe.max_seq_length, "init": model.source,
              "tokenizer": _save_tokenizer(workdir, model.tokenizer)}
    write_text(workdir / TASK_RECORD, json.dumps(record, indent=2, sort_keys=True) + "\n")


def read_task_record(workdir: str | os.PathLike) -> dict[str, Any] | None:
    """The task record of `workdir`, or None when the workdir has none (not a fine-tuning
    run, or one written before runs recorded their task)."""
    path = pathlib.Path(workdir) / TASK_RECORD
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e}): rerun bertjax-finetune with the same "
                         "flags to write it again") from None
