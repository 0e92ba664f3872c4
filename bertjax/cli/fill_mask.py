"""bertjax-fill-mask: what a pretrained BERT has learned, in words: it fills in masked words of
held-out sentences (top-k per blank, next to the true word) and reports masked-LM accuracy on
held-out text beside the unigram baseline of the same blanks (always guessing the training
text's most frequent token); or fills in the [MASK]s of sentences you give.

    bertjax-fill-mask --checkpoint=workdir/bert_tiny_demo                 # held-out stdlib text
    bertjax-fill-mask --checkpoint=WORKDIR --sentence="The [MASK] module handles regular ..."

`make demo` ends with it. Held-out text is text the run never trained on: the stdlib corpus's
held-out documents ("stdlib:held_out") by default, or any corpus setting with --held_out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from absl import flags

from bertjax.cli import runner
from bertjax.tokenizers.wordpiece_rules import MASK

if TYPE_CHECKING:
    from bertjax.inference.fill_mask import MaskFiller

PROGRAM = "bertjax-fill-mask"
FLAGS = flags.FLAGS


def define_flags() -> None:
    """This tool's flags (defined when it runs: other tools define some of the same names)."""
    runner.define_once(flags.DEFINE_string, "checkpoint", None, "A BERT pretraining workdir.")
    runner.define_once(flags.DEFINE_multi_string, "sentence", [],
                       f"A sentence with {MASK} where words are to be filled (repeatable).")
    runner.define_once(flags.DEFINE_string, "held_out", "stdlib:held_out",
                       "Held-out text (a corpus setting) for the examples and the accuracy.")
    runner.define_once(flags.DEFINE_integer, "examples", 5, "Held-out sentences to fill in.")
    runner.define_once(flags.DEFINE_integer, "top_k", 3, "Predictions shown per blank.")
    runner.define_once(flags.DEFINE_string, "train_corpus", None,
                       "The corpus setting the run trained on, for the unigram baseline "
                       "(default: the one the workdir records).")


def blanked(filler: MaskFiller, sentence: str, rng: np.random.Generator) -> tuple[str, list]:
    """`sentence` with two of its whole-token words (3+ letters) masked, and those words."""
    words = sentence.split()
    known = [i for i, w in enumerate(words) if len(w) >= 3 and w.isalpha()
             and len(filler.vocab.encode(w)) == 1]
    chosen = sorted(rng.choice(known, size=min(2, len(known)), replace=False))
    truth = [words[i] for i in chosen]
    for i in chosen:
        words[i] = MASK
    return " ".join(words), truth


def show(filler: MaskFiller, text: str, truth: list[str] | None, top_k: int) -> None:
    print(text.replace(MASK, "___"))
    for n, guesses in enumerate(filler.fill(text, top_k), 1):
        true = f"true: {truth[n - 1]:<14}" if truth else ""
        shown = ", ".join(f"{token} ({p:.2f})" for token, p in guesses)
        print(f"   blank {n}: {true}model: {shown}")


def main() -> None:
    # Imported here, not above: they load TensorFlow (seconds), which --help does not need.
    from bertjax.data.source import load_documents
    from bertjax.inference.fill_mask import MaskFiller

    if not FLAGS.checkpoint:
        raise ValueError("--checkpoint is required: pass the --workdir of a BERT pretraining run")
    runner.announce_backend(PROGRAM)
    filler = MaskFiller.from_workdir(FLAGS.checkpoint)
    for sentence in FLAGS.sentence:
        show(filler, sentence, None, FLAGS.top_k)
    if FLAGS.sentence:
        return
    rng = np.random.default_rng(0)
    sentences = [s for doc in load_documents(FLAGS.held_out) for s in doc
                 if 8 <= len(s.split()) <= 25 and filler.fits(s)]
    print(f"Held-out sentences ({FLAGS.held_out}: never trained on), the model's top "
          f"{FLAGS.top_k} for each blank:")
    for index in rng.choice(len(sentences), size=min(FLAGS.examples, len(sentences)),
                            replace=False):
        show(filler, *blanked(filler, sentences[index], rng), FLAGS.top_k)
    baseline = filler.unigram_baseline(FLAGS.train_corpus)
    score = filler.held_out_score(FLAGS.held_out, baseline.token_id)
    print(f"masked-LM accuracy on held-out text: {score.accuracy:.3f} ({score.count:,} masked "
          "tokens, 15% of each sequence, 80/10/10 as in pretraining)")
    print(f"unigram baseline on the same blanks: {score.baseline:.3f} (always "
          f"{baseline.token!r}, the most frequent of {baseline.counted:,} training tokens of "
          f"{baseline.corpus})")
    print(f"at the {score.mask_count:,} blanks shown as {MASK}: model {score.mask_accuracy:.3f}, "
          f"unigram baseline {score.mask_baseline:.3f}")


def run() -> None:
    """Console-script entry point."""
    define_flags()
    runner.run(PROGRAM, __doc__, main, [__name__])


if __name__ == "__main__":
    run()
