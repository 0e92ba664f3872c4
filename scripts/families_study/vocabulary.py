"""How a vocabulary size cuts the study's inputs: for BERT's WordPiece and GPT's byte-level
BPE, each learned from the study's pretraining text as its source learns it, the pieces per
word of AG News's test items and the share of items longer than the fine-tuning length, which
a run cuts. A choice by truncation, not by masked-LM
accuracy across vocabularies (which are not comparable: a larger vocabulary predicts rarer,
harder pieces).

    python scripts/families_study/vocabulary.py --root=workdir/families --sizes=1024,4096,8192
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from families_study import data as data_lib  # noqa: E402
from families_study.config import REPO  # noqa: E402


def pretraining_sentences(path: pathlib.Path) -> list[list[str]]:
    """The study's pretraining documents (google-research/bert's format)."""
    text = path.read_text(encoding="utf-8")
    return [block.splitlines() for block in text.split("\n\n") if block.strip()]


def wordpiece_lengths(documents: list[list[str]], size: int, texts: list[str]) -> list[int]:
    from bertjax.tokenizers.wordpiece import WordPieceVocabulary, learn_vocabulary, write_vocab

    with tempfile.TemporaryDirectory() as scratch:
        path = pathlib.Path(scratch) / "vocab.txt"
        write_vocab(learn_vocabulary((s for d in documents for s in d), size, True), path)
        vocab = WordPieceVocabulary(str(path), lower_case=True)
        return [len(vocab.encode(t)) + 2 for t in texts]  # [CLS] text [SEP]


def bpe_lengths(documents: list[list[str]], size: int, texts: list[str]) -> list[int]:
    from bertjax.tokenizers.bpe import learn_bpe

    bpe = learn_bpe(("\n".join(d) for d in documents), size)
    return [len(bpe.encode(t)) + 2 for t in texts]  # GPT's start and extract tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="a study root (its data/ is written)")
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--sizes", default="1024,4096,8192")
    parser.add_argument("--max_length", type=int, default=64)
    args = parser.parse_args(argv)
    data = data_lib.prepare(pathlib.Path(args.data), pathlib.Path(args.root))
    documents = pretraining_sentences(data.pretrain)
    texts = [t[0] for t in data_lib.read_texts(data.agnews_test)[0]]
    words = sum(len(t.split()) for t in texts)
    print(f"| tokenizer | vocabulary | pieces per word | median length | cut at "
          f"{args.max_length} |")
    print("|---|---|---|---|---|")
    for name, lengths_of in (("WordPiece", wordpiece_lengths), ("byte-level BPE", bpe_lengths)):
        for size in (int(s) for s in args.sizes.split(",")):
            lengths = lengths_of(documents, size, texts)
            pieces = (sum(lengths) - 2 * len(lengths)) / words
            cut = sum(n > args.max_length for n in lengths) / len(lengths)
            print(f"| {name} | {size:,} | {pieces:.2f} | {statistics.median(lengths):.0f} | "
                  f"{cut:.1%} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
