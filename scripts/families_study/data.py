"""The study's derived data, written under `<root>/data/` from the shared data (never into the
repository), the same bytes on every run:

- `pretrain.txt`, `heldout.txt`: AG News's unlabelled news (`agnews/unlabelled.txt`, one news
  item a line: a title and a description), in google-research/bert's format with each item a
  document (its sentences one a line, a blank line between items), so BERT's next-sentence
  pairs are a title and its description rather than two unrelated items, and GPT's documents
  end where an item ends. Every 20th item is held out (`heldout.txt`, about 500 items) for
  the held-out language-model scores; every family pretrains on the rest.
- AG News's own `train.tsv` (4,000 labelled items) and `test_all.tsv` (7,600) are read in
  place. Their text is not in the held-out split's place: `unlabelled.txt` holds the
  training items but none of the test file's.
"""

from __future__ import annotations

import csv
import dataclasses
import pathlib

from bertjax.data.corpora import split_sentences

HELD_OUT_EVERY = 20


class DataError(ValueError):
    """Shared data missing or malformed; the message names the file and the fix."""


@dataclasses.dataclass(frozen=True)
class StudyData:
    """Paths of every file the study reads."""

    pretrain: pathlib.Path
    heldout: pathlib.Path
    agnews_train: pathlib.Path
    agnews_test: pathlib.Path


def _need(path: pathlib.Path, what: str) -> pathlib.Path:
    if not path.is_file():
        raise DataError(f"{path} is missing ({what}): pass --data=DIR holding agnews/ (the "
                        "project's ../shared/data)")
    return path


def _write(path: pathlib.Path, text: str) -> None:
    """Write atomically, and only when the content changes (reruns keep the file)."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(path.suffix + ".tmp")
    scratch.write_text(text, encoding="utf-8")
    scratch.replace(path)


def split_corpus(lines: list[str]) -> tuple[str, str]:
    """(pretraining text, held-out text): items as documents, every HELD_OUT_EVERY-th held out."""
    kept, held = [], []
    for i, line in enumerate(line.strip() for line in lines):
        if not line:
            continue
        document = "\n".join(split_sentences(line)) + "\n"
        (held if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else kept).append(document)
    return "\n".join(kept), "\n".join(held)


def _first_rows(path: pathlib.Path, rows: int | None, out: pathlib.Path) -> pathlib.Path:
    """`path` itself, or its header and first `rows` rows written to `out` (a quick study)."""
    if rows is None:
        return path
    lines = path.read_text(encoding="utf-8").splitlines()
    _write(out, "\n".join(lines[:rows + 1]) + "\n")
    return out


def prepare(shared: pathlib.Path, root: pathlib.Path, train_rows: int | None = None,
            eval_rows: int | None = None) -> StudyData:
    """Write the derived files under root/data (unchanged files are left alone); with
    `train_rows` / `eval_rows`, AG News's first rows only (the quick study)."""
    agnews = shared / "agnews"
    unlabelled = _need(agnews / "unlabelled.txt", "AG News's unlabelled news")
    train = _need(agnews / "train.tsv", "AG News training items")
    test = _need(agnews / "test_all.tsv", "AG News's whole test file")
    pretrain, heldout = split_corpus(unlabelled.read_text(encoding="utf-8").splitlines())
    out = root / "data"
    _write(out / "pretrain.txt", pretrain)
    _write(out / "heldout.txt", heldout)
    return StudyData(out / "pretrain.txt", out / "heldout.txt",
                     _first_rows(train, train_rows, out / "agnews" / "train.tsv"),
                     _first_rows(test, eval_rows, out / "agnews" / "test.tsv"))


def read_texts(path: pathlib.Path) -> tuple[list[tuple[str, ...]], list[str]]:
    """(texts per row: one or two, labels) of a GLUE-style TSV with a header (AG News's
    sentence/label, QNLI's question/sentence/label)."""
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows or "label" not in rows[0]:
        raise DataError(f"{path} has no rows or no label column: pass a GLUE-style TSV")
    columns = ("question", "sentence") if "question" in rows[0] else ("sentence",)
    return [tuple(r[c] for c in columns) for r in rows], [r["label"] for r in rows]
