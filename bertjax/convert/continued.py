"""`bertjax-train --init`: continue BERT pretraining from released weights.

`--init` names a google-research/bert model directory (bert_config.json, vocab.txt,
bert_model.ckpt.*) or a Hugging Face BERT directory (config.json, model.safetensors or
pytorch_model.bin, vocab.txt). Before anything trains, the configured model and data are
checked against it, each mismatch one line naming the setting to change:

- the model's sizes (bert_config.*) must be the checkpoint's;
- the data source must tokenize with the checkpoint's vocab.txt and its case
  (bert_pretraining_source.vocab / .lower_case), or the embeddings would read other ids.

A fresh run then starts from the checkpoint's encoder and pretraining heads (heads a
checkpoint lacks, e.g. a bare BertModel's, keep their initialisation, as the log says); a
resumed run continues from its own checkpoints as always.
"""

from __future__ import annotations

import json
import logging
import pathlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax

from bertjax.convert import google_bert, hf_bert, scan
from bertjax.models.bert import BertConfig
from bertjax.objectives.objective import Objective
from bertjax.tokenizers.wordpiece import WordPieceVocabulary
from bertjax.typing import Params

if TYPE_CHECKING:  # the data sources import seqio and TensorFlow
    from bertjax.data.bert.source import BertPretrainingSource

_SIZES = ("vocab_size", "max_position_embeddings", "type_vocab_size", "hidden_size",
          "num_layers", "num_heads", "mlp_dim")


def _source_of(path: pathlib.Path, lower_case: bool | None
               ) -> tuple[BertConfig, dict[str, Any], bool]:
    """(config, transformers-named tensors, do_lower_case) of a Google or HF BERT directory."""
    if (path / "config.json").is_file():
        config = hf_bert.load_hf_config(path)
        settings = path / "tokenizer_config.json"
        found = (json.loads(settings.read_text()).get("do_lower_case")
                 if settings.is_file() else None)
        lower = found if lower_case is None else lower_case
        if lower is None:
            raise ValueError(f"--init={path}: tokenizer_config.json does not say do_lower_case: "
                             "pass --do_lower_case=true or false")
        return config, hf_bert.load_hf_state_dict(path), bool(lower)
    if google_bert.is_google_checkpoint(path):
        config = google_bert.load_google_config(path)
        lower = google_bert.lower_case_of(path, lower_case)
        prefix = google_bert.checkpoint_prefix(path)
        variables = google_bert.read_variables(prefix)
        heads = any(name.startswith("cls/") for name in variables)
        google_bert.google_to_bertjax(variables, config, heads, str(prefix))  # checks it all
        return config, google_bert.to_hf_state_dict(variables), lower
    raise ValueError(f"--init={path} is not a Google BERT directory (bert_config.json + "
                     "bert_model.ckpt) or a Hugging Face BERT directory (config.json): pass one")


def _check_sizes(found: BertConfig, configured: BertConfig, init: str) -> None:
    for field in _SIZES:
        want = getattr(found, field, None) or getattr(found.transformer, field)
        have = getattr(configured, field, None) or getattr(configured.transformer, field)
        if want != have:
            raise ValueError(f"--init={init} has {field} {want} but the configured model "
                             f"{have}: set bert_config.{field}={want} (or include its size's "
                             "configs/models/bert_*.gin)")
    if configured.causal:
        raise ValueError(f"--init={init} is a bidirectional BERT: continue it with "
                         "bert_pretraining, not the left-to-right objective")


def _check_vocabulary(path: pathlib.Path, vocab: WordPieceVocabulary, lower_case: bool,
                      setting: str) -> None:
    released = (path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    if list(getattr(vocab, "tokens", [])) != released:
        raise ValueError(f"the data source's vocabulary is not {path / 'vocab.txt'}: set "
                         f"{setting}.vocab='{path}' so the checkpoint's embeddings read "
                         "its own ids")
    if bool(vocab.lower_case) != lower_case:
        raise ValueError(f"--init={path} is {'un' if lower_case else ''}cased but the data "
                         f"source has lower_case={vocab.lower_case}: set "
                         f"{setting}.lower_case={lower_case}")


def initial_params(init: str, objective: Objective, source: BertPretrainingSource,
                   lower_case: bool | None = None) -> Callable[[Params], Params]:
    """The loop's `initial_params` for continuing `objective` (BERT pretraining) from `init`,
    checked against the configured model and the prepared data `source` now, so a mismatch
    fails before anything is written."""
    if objective.family != "bert" or objective.name != "bert_pretraining":
        raise ValueError(f"--init continues BERT pretraining (objective bert_pretraining); this "
                         f"run's objective is {objective.name}: drop --init (bertjax-finetune "
                         "--init starts a fine-tuning run)")
    path = pathlib.Path(init)
    if not path.is_dir():
        raise ValueError(f"--init={init} is not a directory: pass a Google or Hugging Face BERT "
                         "model directory")
    config, tensors, lower = _source_of(path, lower_case)
    _check_sizes(config, objective.config, init)
    if (path / "vocab.txt").is_file():
        _check_vocabulary(path, source.vocab, lower, getattr(source, "setting", "source"))

    def initial(params: Params) -> Params:
        plain = jax.device_get(params)
        scanned = scan.is_scanned(plain)
        unscanned = scan.unstack_layers(plain) if scanned else plain
        filled, report = hf_bert.fill_pretrained(tensors, unscanned)
        complete = not (report.missing or report.unexpected)
        (logging.info if complete else logging.warning)("--init=%s: %s", init, report)
        return scan.stack_layers(filled, plain) if scanned else filled

    return initial
