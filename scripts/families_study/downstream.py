"""One downstream run of the study, in its own workdir, leaving the files bertjax-report reads:

- fine-tuned ("finetuned"): `bertjax.finetune.run` with the family's recipe (the study's
  settings on top of the paper's), from the pretraining workdir, or with
  `pretrained=False` for the random twin (its config and tokenizer only). Writes what every
  fine-tuning run writes (metrics.jsonl, eval_results.json, predictions.jsonl, task.json).
- feature-based ("features"): every layer of the frozen model (or its random twin) mean-pooled
  per text (bertjax.analysis.features), [u; v; |u - v|; u * v] for a pair, into the same
  logistic regression (bertjax.analysis.probe). Writes metrics.jsonl and eval_results.json in
  the fine-tuning runs' format, so both read back the same way.

A run that finished (its `study.json` written last) is not run again.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from typing import Any

import numpy as np

from families_study import interrupts
from families_study.config import Study
from families_study.data import StudyData, read_texts
from families_study.plan import Downstream

DONE = "study.json"
TASK_TYPES = {"agnews": "classification", "qnli5": "pair_classification"}


def task_files(task: str, data: StudyData) -> tuple[pathlib.Path, pathlib.Path]:
    """(train, eval) files of a task."""
    if task == "agnews":
        return data.agnews_train, data.agnews_test
    return data.qnli_train, data.qnli_dev


def _write_json(path: pathlib.Path, value: Any) -> None:
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(value, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    scratch.replace(path)


def _finetune(job: Downstream, study: Study, init: str, data: StudyData,
              workdir: pathlib.Path) -> dict[str, Any]:
    from bertjax.finetune import run
    from bertjax.finetune.recipe import Recipe

    settings = {**study.finetune.get(job.family, {}), **dict(job.settings),
                "pretrained": job.init == "pretrained", "seed": job.seed}
    settings.setdefault("eval_every", 1_000_000)  # evaluated once, at the end
    recipe = Recipe(job.family, TASK_TYPES[job.task], **settings)
    train, evaluation = task_files(job.task, data)
    outcome = run(recipe, init, str(train), str(evaluation), workdir)
    if outcome.result.stopped:  # a signal (the run watches them): saved, not finished
        raise interrupts.StudyInterrupted(outcome.result.stopped)
    if outcome.result.late_signal:  # finished: recorded, then the study stops
        interrupts.note(outcome.result.late_signal)
    return outcome.results.get("final", {})


def _texts_features(model: Any, texts: list[tuple[str, ...]], max_length: int) -> np.ndarray:
    """[N, D]: the texts' layers concatenated; a pair's two texts combined for the probe."""
    from bertjax.analysis.features import layer_features
    from bertjax.analysis.probe import pair_features

    columns = [layer_features(model, [t[i] for t in texts], max_length)
               for i in range(len(texts[0]))]
    flat = [c.reshape(len(c), -1) for c in columns]
    return flat[0] if len(flat) == 1 else pair_features(*flat)


def _features(job: Downstream, study: Study, init: str, data: StudyData,
              workdir: pathlib.Path) -> dict[str, Any]:
    from bertjax.analysis.features import random_twin
    from bertjax.analysis.probe import fit_probe
    from bertjax.finetune.pretrained import load_pretrained

    model = load_pretrained(init, job.family)
    if job.init == "random":
        model = random_twin(model, job.seed)
    train_file, eval_file = task_files(job.task, data)
    (train, train_labels), (dev, dev_labels) = read_texts(train_file), read_texts(eval_file)
    labels = sorted(set(train_labels))
    x_train = _texts_features(model, train, study.probe_max_length)
    x_dev = _texts_features(model, dev, study.probe_max_length)
    probe = fit_probe(x_train, [labels.index(y) for y in train_labels], seed=job.seed)
    gold = np.asarray([labels.index(y) if y in labels else -1 for y in dev_labels])
    accuracy = probe.accuracy(x_dev, gold)
    results = {"accuracy": accuracy}
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir / "metrics.jsonl", "w", encoding="utf-8") as f:
        row = {"step": len(train), "dev_accuracy": accuracy, "probe_l2": probe.l2,
               "probe_heldout_accuracy": probe.heldout_accuracy, "features": x_train.shape[1]}
        f.write(json.dumps(row) + "\n")
    _write_json(workdir / "eval_results.json", {"best": results, "final": results})
    return results


def run_downstream(job: Downstream, study: Study, root: pathlib.Path,
                   data: StudyData) -> dict[str, Any]:
    """Run `job` under `root` unless it finished before; its final dev metrics."""
    workdir = root / job.workdir
    done = workdir / DONE
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))["results"]
    init = str(root / job.pretraining.workdir)
    start = time.perf_counter()
    run = _finetune if job.approach == "finetuned" else _features
    results = run(job, study, init, data, workdir)
    if job.init == "pretrained":  # bertjax-report shows the pretraining run's metrics beside
        (workdir / "init.txt").write_text(init + "\n", encoding="utf-8")
    record = {"job": dataclasses.asdict(job), "results": results,
              "seconds": round(time.perf_counter() - start, 1)}
    _write_json(done, record)
    return results
