"""One point of the learning curve: a model (pretrained or its random twin) or a bag-of-words
baseline, trained on one draw of N labelled AG News items, scored on the whole test file.

- fine-tuned: `bertjax.finetune.run` once per learning rate of the family's grid, each on the
  draw's training rows for max(min_steps, min_epochs) steps, evaluated at its end on the
  draw's held-out tenth; the rate with the best held-out accuracy (ties: the lower rate) is
  the cell's, and only its model is scored on the test file. The other rates' checkpoints are
  deleted once the choice is made (their metrics stay).
- feature-based: every layer of the frozen model mean-pooled per text
  (`bertjax.analysis.features`) into `bertjax.analysis.probe`'s logistic regression, its L2
  weight chosen on the same held-out tenth. Features of the whole training and test files
  are computed once per model (per draw for a random twin, whose initialisation is the
  draw's) and cached under `<root>/features/`.
- bag-of-words: TF-IDF logistic regression and multinomial naive Bayes on word counts
  (scikit-learn's defaults), fitted on the draw's training rows.

Every arm fits on the same rows of a draw and makes its choices on the same held-out rows, so
pretrained and random differ only in their initialisation: the comparison is paired.
"""

from __future__ import annotations

import json
import math
import pathlib
import shutil
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from families_study import interrupts
from families_study.data import read_texts
from families_study.draws import Draw

TEST_BATCH = 128
# The probe's L2 weights: wider than bertjax.analysis.probe's default, whose strongest (1e-2)
# under-regularises a few hundred rows of a few hundred standardised features.
PROBE_L2 = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)


def _write_json(path: pathlib.Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(value, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    scratch.replace(path)


def read_json(path: pathlib.Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def examples(path: pathlib.Path) -> list[Any]:
    """A GLUE-style TSV's rows as fine-tuning examples, ids their row numbers."""
    from bertjax.finetune.examples import TextExample

    texts, labels = read_texts(path)
    return [TextExample(str(i), t, y) for i, (t, y) in enumerate(zip(texts, labels,
                                                                       strict=True))]


def fine_tuning_steps(rows: int, batch_size: int, min_steps: int, min_epochs: float) -> int:
    """Steps of a fine-tuning run on `rows` examples: at least `min_steps` and `min_epochs`."""
    return max(min_steps, math.ceil(min_epochs * rows / batch_size))


def _recipe(family: str, settings: dict[str, Any], learning_rate: float, rows: int,
            init: str, draw: int, min_steps: int, min_epochs: float,
            labels: Sequence[str]) -> Any:
    from bertjax.finetune.recipe import Recipe, paper_defaults

    batch = settings.get("batch_size") or paper_defaults(family, "classification")["batch_size"]
    steps = fine_tuning_steps(rows, batch, min_steps, min_epochs)
    return Recipe(family, "classification", **{
        **settings, "learning_rate": learning_rate, "epochs": steps * batch / rows,
        "pretrained": init == "pretrained", "seed": draw, "labels": tuple(labels),
        "eval_every": 10**9})  # evaluated once, at the end


def _lr_name(learning_rate: float) -> str:
    return f"lr={learning_rate:g}"


def fine_tuned(family: str, settings: dict[str, Any], grid: Sequence[float], init: str,
               pretrained_dir: pathlib.Path, draw: Draw, train_file: pathlib.Path,
               test_file: pathlib.Path, workdir: pathlib.Path, min_steps: int,
               min_epochs: float) -> dict[str, Any]:
    """Fine-tune at every rate of `grid`, keep the best on the held-out tenth, score it on the
    test file (module docstring); the cell's record."""
    from bertjax.finetune import run
    from bertjax.finetune.evaluate import scored_predictions
    from bertjax.training.checkpoint import restore_saved_params

    rows = examples(train_file)
    labels = sorted({r.label for r in rows})
    train = [rows[i] for i in draw.train]
    held = [rows[i] for i in draw.selection]
    trials, outcomes = {}, {}
    for lr in grid:
        start = time.perf_counter()
        recipe = _recipe(family, settings, lr, len(train), init, draw.draw, min_steps,
                         min_epochs, labels)
        outcome = run(recipe, str(pretrained_dir), train, held, workdir / _lr_name(lr))
        if outcome.result.stopped:  # a signal (the run watches them): saved, not finished
            raise interrupts.StudyInterrupted(outcome.result.stopped)
        if outcome.result.late_signal:  # finished: the study stops after this point
            interrupts.note(outcome.result.late_signal)
        final = outcome.results.get("final", {})
        trials[_lr_name(lr)] = {"learning_rate": lr, "heldout_accuracy": final["accuracy"],
                                "steps": outcome.result.step,
                                "seconds": round(time.perf_counter() - start, 1)}
        outcomes[lr] = outcome
    chosen = max(grid, key=lambda lr: (trials[_lr_name(lr)]["heldout_accuracy"], -lr))
    params, _, _ = restore_saved_params(workdir / _lr_name(chosen), best=False)
    scores, _ = scored_predictions(outcomes[chosen].setup, params, examples(test_file),
                                   TEST_BATCH)
    for lr in grid:
        if lr != chosen:  # keep the metrics, drop the weights
            shutil.rmtree(workdir / _lr_name(lr) / "checkpoints", ignore_errors=True)
    return {"accuracy": float(scores["accuracy"]), "learning_rate": chosen,
            "heldout_accuracy": trials[_lr_name(chosen)]["heldout_accuracy"],
            "trials": trials}


def _features_file(root: pathlib.Path, model: str, init: str, draw: int) -> pathlib.Path:
    name = "pretrained" if init == "pretrained" else f"random-{draw}"
    return root / "features" / model / f"{name}.npz"


def cached_features(root: pathlib.Path, model: str, family: str, init: str, draw: int,
                    pretrained_dir: pathlib.Path, train_file: pathlib.Path,
                    test_file: pathlib.Path, max_length: int) -> tuple[np.ndarray, np.ndarray]:
    """([train rows, D], [test rows, D]): every layer of the model, mean-pooled, flattened."""
    path = _features_file(root, model, init, draw)
    if path.is_file():
        with np.load(path) as saved:
            return saved["train"], saved["test"]
    from bertjax.analysis.features import layer_features, random_twin
    from bertjax.finetune.pretrained import load_pretrained

    pretrained = load_pretrained(str(pretrained_dir), family)
    if init == "random":
        pretrained = random_twin(pretrained, draw)
    out = {}
    for name, file in (("train", train_file), ("test", test_file)):
        texts = [t[0] for t in read_texts(file)[0]]
        layers = layer_features(pretrained, texts, max_length)
        out[name] = layers.reshape(len(layers), -1).astype(np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(".tmp.npz")
    np.savez(scratch, **out)
    scratch.replace(path)
    return out["train"], out["test"]


def probed(features: tuple[np.ndarray, np.ndarray], draw: Draw, train_file: pathlib.Path,
           test_file: pathlib.Path) -> dict[str, Any]:
    """The probe on a draw's rows of cached features, its L2 weight chosen on the held-out
    tenth; test accuracy."""
    from bertjax.analysis.probe import fit_probe

    train_x, test_x = features
    train_y, test_y = read_texts(train_file)[1], read_texts(test_file)[1]
    labels = sorted(set(train_y))
    index = list(draw.train) + list(draw.selection)
    held = np.zeros(len(index), bool)
    held[len(draw.train):] = True
    probe = fit_probe(train_x[index], [labels.index(train_y[i]) for i in index],
                      l2_grid=PROBE_L2, held_out=held, refit_all=False)
    gold = [labels.index(y) if y in labels else -1 for y in test_y]
    return {"accuracy": probe.accuracy(test_x, gold), "l2": probe.l2,
            "heldout_accuracy": probe.heldout_accuracy}


def bag_of_words(kind: str, draw: Draw, train_file: pathlib.Path,
                 test_file: pathlib.Path) -> dict[str, Any]:
    """A scikit-learn baseline ("tfidf_logreg" or "naive_bayes") fitted on the draw's
    training rows; test accuracy."""
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import MultinomialNB
    from sklearn.pipeline import make_pipeline

    (train_t, train_y), (test_t, test_y) = read_texts(train_file), read_texts(test_file)
    texts = [train_t[i][0] for i in draw.train]
    labels = [train_y[i] for i in draw.train]
    if kind == "tfidf_logreg":
        model = make_pipeline(TfidfVectorizer(), LogisticRegression(max_iter=1000))
    elif kind == "naive_bayes":
        model = make_pipeline(CountVectorizer(), MultinomialNB())
    else:
        raise ValueError(f"unknown baseline {kind!r}: tfidf_logreg or naive_bayes")
    model.fit(texts, labels)
    predicted = model.predict([t[0] for t in test_t])
    return {"accuracy": float(np.mean(np.asarray(predicted) == np.asarray(test_y)))}


def done(path: pathlib.Path) -> dict[str, Any] | None:
    """A finished cell's record, or None."""
    return read_json(path) if path.is_file() else None


def record(path: pathlib.Path, value: dict[str, Any], seconds: float) -> dict[str, Any]:
    """Write a cell's record (last, so its presence means the cell finished)."""
    value = {**value, "seconds": round(seconds, 1)}
    _write_json(path, value)
    return value
