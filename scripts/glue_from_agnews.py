"""A small GLUE-format directory built from AG News sentences, for trying bertjax-glue where
GLUE itself is not at hand (the tests use it; docs/finetuning.md, "GLUE").

The nine tasks have GLUE's directory layout, file names and headers (CoLA's train and dev
files without a header, MNLI's dev_matched and dev_mismatched, the many columns of STS-B and
MNLI), but their labels are derived from AG News's topics and texts, not GLUE's:

    CoLA, SST-2      one sentence: is it about Sports (1) or another topic (0)?
    MRPC, QQP, WNLI  a sentence and a shortened copy of it (1), or another sentence (0)
    QNLI, RTE        the same, labelled entailment / not_entailment
    MNLI             a shortened copy (entailment), a sentence of the same topic (neutral) or
                     of another topic (contradiction)
    STS-B            a sentence and a copy keeping a share of its words: 5 x that share

    python scripts/glue_from_agnews.py --agnews=../shared/data/agnews --out=/tmp/glue_data
"""

import argparse
import csv
import pathlib
import random

HEADERS = {
    "SST-2": ("sentence", "label"),
    "MRPC": ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
    "QQP": ("id", "qid1", "qid2", "question1", "question2", "is_duplicate"),
    "STS-B": ("index", "genre", "filename", "year", "old_index", "source1", "source2",
              "sentence1", "sentence2", "score"),
    "MNLI": ("index", "promptID", "pairID", "genre", "sentence1_binary_parse",
             "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
             "sentence2", "label1", "gold_label"),
    "QNLI": ("index", "question", "sentence", "label"),
    "RTE": ("index", "sentence1", "sentence2", "label"),
    "WNLI": ("index", "sentence1", "sentence2", "label"),
}


def read_agnews(path: pathlib.Path) -> list[tuple[str, str]]:
    with open(path, encoding="utf-8", newline="") as f:
        rows = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        return [(" ".join(r["sentence"].split()[:30]), r["label"]) for r in rows]


def shortened(text: str, rng: random.Random) -> tuple[str, float]:
    words = text.split()
    kept = [w for w in words if rng.random() < 0.7] or words[:1]
    return " ".join(kept), len(kept) / len(words)


def pairs(rows: list[tuple[str, str]], n: int, rng: random.Random) -> list[tuple]:
    """(a, b, kind, share): kind "copy" (b a shortened a), "topic" (same topic) or "other"."""
    out = []
    for i in range(n):
        a, topic = rows[rng.randrange(len(rows))]
        if i % 3 == 0:
            b, share = shortened(a, rng)
            out.append((a, b, "copy", share))
        else:
            same = i % 3 == 1
            b = rng.choice([t for t, y in rows if (y == topic) == same and t != a])
            out.append((a, b, "topic" if same else "other", 0.0))
    return out


def task_rows(task: str, rows: list[tuple[str, str]], n: int, rng: random.Random) -> list:
    if task in ("CoLA", "SST-2"):
        picked = [rows[rng.randrange(len(rows))] for _ in range(n)]
        if task == "CoLA":
            return [("agnews", int(y == "Sports"), "" if y == "Sports" else "*", t)
                    for t, y in picked]
        return [(t, int(y == "Sports")) for t, y in picked]
    made = pairs(rows, n, rng)
    if task == "MRPC":
        return [(int(k == "copy"), 2 * i, 2 * i + 1, a, b) for i, (a, b, k, _) in enumerate(made)]
    if task == "QQP":
        return [(i, 2 * i, 2 * i + 1, a, b, int(k == "copy")) for i, (a, b, k, _) in
                enumerate(made)]
    if task == "STS-B":
        return [(i, "news", "agnews", "2004", i, "agnews", "agnews", a, b, f"{5 * s:.3f}")
                for i, (a, b, _, s) in enumerate(made)]
    if task == "MNLI":
        gold = {"copy": "entailment", "topic": "neutral", "other": "contradiction"}
        return [(i, i, f"{i}e", "news", a, b, a, b, a, b, gold[k], gold[k])
                for i, (a, b, k, _) in enumerate(made)]
    if task == "WNLI":
        return [(i, a, b, int(k == "copy")) for i, (a, b, k, _) in enumerate(made)]
    return [(i, a, b, "entailment" if k == "copy" else "not_entailment")
            for i, (a, b, k, _) in enumerate(made)]


def write_glue_dir(agnews: pathlib.Path, out: pathlib.Path, train_rows: int = 64,
                   dev_rows: int = 32, seed: int = 0) -> pathlib.Path:
    """Write out/TASK/train.tsv and dev.tsv (MNLI: dev_matched, dev_mismatched) for the nine
    tasks; training rows from AG News's train.tsv, dev rows from its test.tsv."""
    rng = random.Random(seed)
    train, test = read_agnews(agnews / "train.tsv"), read_agnews(agnews / "test.tsv")
    for task in ("CoLA", *HEADERS):
        folder = out / task
        folder.mkdir(parents=True, exist_ok=True)
        devs = ("dev_matched", "dev_mismatched") if task == "MNLI" else ("dev",)
        for name, rows, n in (("train", train, train_rows),
                              *((dev, test, dev_rows) for dev in devs)):
            lines = [] if task == "CoLA" else ["\t".join(HEADERS[task])]
            lines += ["\t".join(map(str, row)) for row in task_rows(task, rows, n, rng)]
            (folder / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agnews", type=pathlib.Path, required=True)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--train_rows", type=int, default=64)
    parser.add_argument("--dev_rows", type=int, default=32)
    args = parser.parse_args()
    print(write_glue_dir(args.agnews, args.out, args.train_rows, args.dev_rows))


if __name__ == "__main__":
    main()
