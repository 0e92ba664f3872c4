"""What a finished run left in its workdir, read back for reports: its metric history, its
final metrics, its gin settings and, for a fine-tuning run, the pretraining run it started from.

    WORKDIR/metrics.jsonl      {"step": N, scalar: value, ...} per logged step (dev_* at evals)
    WORKDIR/eval_results.json  fine-tuning: {"best": {...}, "final": {...}}
    WORKDIR/config.gin         the operative gin config
    WORKDIR/model.json         the model's config (for settings the gin file leaves unbound)
    WORKDIR/init.txt           fine-tuning: the --init it started from (bertjax-finetune)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from typing import Any

from bertjax import files
from bertjax.training.metrics import MetricsError, read_metrics

METRICS, RESULTS, CONFIG, INIT = "metrics.jsonl", "eval_results.json", "config.gin", "init.txt"
RECORD = "model.json"
PRETRAIN = "pretrain_"  # a fine-tuning run's columns of the pretraining run it started from
# Bookkeeping scalars a results table leaves out (they are in metrics.jsonl for whoever wants).
NOT_RESULTS = ("step", "grad_norm", "param_norm", "nonfinite", "skipped_steps", "seq_length",
               "tokens_per_second", "real_tokens_per_second", "learning_rate")
_BINDING = re.compile(r"^([\w.]+)=(.*)$")


class RunError(ValueError):
    """A directory that is not a finished bertjax run; the message names the fix."""


@dataclasses.dataclass
class Run:
    """One workdir: its name, history (one dict per logged line), gin settings, and the
    pretraining run it was fine-tuned from (if that is a bertjax workdir)."""

    path: files.Path
    history: list[dict[str, float]]
    results: dict
    gin: dict[str, str]
    init: Run | None = None
    model_config: dict[str, Any] = dataclasses.field(default_factory=dict)  # model.json's

    @property
    def name(self) -> str:
        return self.path.name

    def final(self, last: int = 5) -> dict[str, float]:
        """Training scalars averaged over the last `last` logged steps (one batch is noisy),
        dev_* from the last evaluation, eval_results.json's best as best_*, and
        mlm_perplexity = exp(mlm_loss); a pretraining `init` adds its own as pretrain_*."""
        train = [row for row in self.history if not any(k.startswith("dev_") for k in row)]
        out: dict[str, float] = {"steps": self.history[-1].get("step", len(self.history))}
        for key in sorted({k for row in train[-last:] for k in row} - set(NOT_RESULTS)):
            values = [row[key] for row in train[-last:] if isinstance(row.get(key), int | float)]
            if values and not key.endswith("_weight"):
                out[key] = sum(values) / len(values)
        for row in self.history:
            out.update({k: v for k, v in row.items() if k.startswith("dev_")})
        out.update({f"dev_{k}": v for k, v in self.results.get("final", {}).items()
                    if isinstance(v, int | float)})
        out.update({f"best_{k}": v for k, v in self.results.get("best", {}).items()
                    if isinstance(v, int | float) and k != "step"})
        if "mlm_loss" in out:
            out["mlm_perplexity"] = math.exp(out["mlm_loss"])
        if self.init is not None:
            out.update({f"{PRETRAIN}{k}": v for k, v in self.init.final(last).items()})
        return out

    def settings(self) -> dict[str, str]:
        """The gin bindings (macros resolved), and the pretraining run's as pretrain_NAME."""
        own = _resolved(self.gin)
        if self.init is None:
            return own
        return {**{PRETRAIN + k: v for k, v in self.init.settings().items()}, **own}

    def unbound(self, key: str) -> str | None:
        """What the run used for a setting (`settings`' name) its config.gin does not bind:
        a model config's field left at its size's value (`bert_config.hidden_size`, an
        override only other runs set), read from model.json; None when unknown."""
        if key.startswith(PRETRAIN):
            return self.init.unbound(key[len(PRETRAIN):]) if self.init else None
        name, _, field = key.rpartition(".")
        if not name.endswith("_config"):
            return None
        nested = [v for v in self.model_config.values() if isinstance(v, dict)]
        for fields in (self.model_config, *nested):  # BERT's and GPT's Transformer fields
            if field in fields:
                return gin_value(fields[field])
        return None

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """(steps, values) of one scalar over the run."""
        rows = [row for row in self.history if isinstance(row.get(key), int | float)]
        return [int(row.get("step", i)) for i, row in enumerate(rows)], [row[key] for row in rows]


def read_history(path: files.Path) -> list[dict[str, float]]:
    """metrics.jsonl's rows (a torn last line dropped with a warning); one line naming the
    file for a missing, empty or garbled one."""
    file = path / METRICS
    if not file.is_file():
        raise RunError(f"{path}: no {METRICS}: pass the --workdir of a bertjax-train or "
                       "bertjax-finetune run that has logged at least one step")
    try:
        rows = read_metrics(file)
    except MetricsError as err:
        raise RunError(f"{err} (is this a bertjax metrics file?)") from None
    if not rows:
        raise RunError(f"{file} is empty: the run logged no step yet")
    return rows


def read_gin(path: files.Path) -> dict[str, str]:
    """`name = value` bindings of an operative config.gin (values joined onto one line)."""
    file = path / CONFIG
    if not file.is_file():
        return {}
    bindings: dict[str, str] = {}
    name = None
    for line in file.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            name = None
        elif line[0].isspace() and name:  # a value continued over several lines
            bindings[name] = f"{bindings[name]} {line.strip()}"
        elif " = " in line:
            name, value = (part.strip() for part in line.split(" = ", 1))
            bindings[name] = value
    return {k: " ".join(v.replace("\\", " ").split()).replace("( ", "(").replace("[ ", "[")
            for k, v in bindings.items()}


def load_run(path: str | os.PathLike, follow_init: bool = True) -> Run:
    """The run in `path` (local or gs://), with the pretraining workdir named in its init.txt,
    if any."""
    path = files.as_path(path)
    if not path.is_dir():
        raise RunError(f"{path} is not a directory: pass run workdirs")
    results_file = path / RESULTS
    results = json.loads(results_file.read_text(encoding="utf-8")) if results_file.is_file() else {}
    init = None
    init_file = path / INIT
    if follow_init and init_file.is_file():
        source = files.as_path(init_file.read_text(encoding="utf-8").strip())
        if (source / METRICS).is_file():
            init = load_run(source, follow_init=False)
    return Run(path, read_history(path), results, read_gin(path), init, _model_config(path))


def _model_config(path: files.Path) -> dict[str, Any]:
    """The model config model.json records ({} without a readable one: it only fills in
    settings a run left unbound)."""
    try:
        config = json.loads((path / RECORD).read_text(encoding="utf-8")).get("config")
    except (OSError, ValueError, AttributeError):
        return {}
    return config if isinstance(config, dict) else {}


def gin_value(value: Any) -> str:
    """`value` as config.gin writes it (JSON's lists were the config's tuples)."""
    if isinstance(value, list | tuple):
        inner = ", ".join(gin_value(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return repr(value)


def name_bindings(name: str) -> dict[str, str] | None:
    """{"NSP": "False", ...} from a sweep.py workdir name `NSP=False,masking='none'`; None
    for a name of another form."""
    parts = re.split(r",(?=[\w.]+=)", name)
    matches = [_BINDING.match(part) for part in parts]
    if not all(matches):
        return None
    return {m.group(1): m.group(2) for m in matches}


def _resolved(gin: dict[str, str]) -> dict[str, str]:
    """Bindings with `%MACRO` values replaced by the macro's value."""
    return {k: gin.get(v[1:], v) if v.startswith("%") else v for k, v in gin.items()}


def swept_bindings(runs: list[Run]) -> list[dict[str, str]]:
    """Per run, the settings that tell it apart: its workdir name's NAME=VALUE pairs when every
    run is named so, else the gin bindings whose values differ between the runs, its
    pretraining run's as pretrain_NAME. A setting a run leaves unbound takes the value it used
    (`Run.unbound`: a model config's field from model.json), so one bound in a single run
    shows; one whose value is not known there shows "-", and counts only where bound (a
    binding only some runs have, always with the same value, is left out). A repeat of an
    earlier column is left out; names are shortened to their last part where unambiguous."""
    named = [name_bindings(run.name) for run in runs]
    if all(named):
        return named
    merged = [run.settings() for run in runs]
    keys = sorted({k for gin in merged for k in gin})
    filled = [{k: gin[k] if k in gin else run.unbound(k) for k in keys}
              for run, gin in zip(runs, merged, strict=True)]
    varying, seen = [], set()
    for key in keys:
        column = tuple(values[key] or "-" for values in filled)
        if len({values[key] for values in filled} - {None}) > 1 and column not in seen:
            varying.append(key)  # a column equal to an earlier one (NSP, use_nsp) shows once
            seen.add(column)
    short = {k: _short(k) for k in varying}
    names = list(short.values())
    return [{short[k] if names.count(short[k]) == 1 else k: values[k] or "-" for k in varying}
            for values in filled]


def _short(key: str) -> str:
    """A setting's column name: its last part (pretrain_ kept)."""
    prefix = PRETRAIN if key.startswith(PRETRAIN) else ""
    return prefix + key[len(prefix):].rsplit(".", 1)[-1]
