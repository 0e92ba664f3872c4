"""bertjax-prepare: tokenize a pretraining corpus once into a token store that runs read.

    bertjax-prepare --family=bert --corpus='wiki/*.txt' --vocab=workdir/bert --out=store/wiki
    bertjax-train --gin_file=configs/experiments/bert_tiny_cpu.gin \\
        --gin.bert_pretraining_source.corpus="'store:store/wiki'" --workdir=workdir/bert-wiki

The store (docs/pretraining.md, "Corpora at scale") holds the corpus's token ids in
memory-mapped shards, their document and sentence boundaries and a manifest naming the corpus,
the vocabulary files (copied in) and their digest. A run whose corpus is store:DIR opens it in
moments and never reads or tokenizes the text; its examples are the same as from the text.
--vocab is an existing vocabulary (a directory holding it, e.g. a run's workdir, or the
comma-separated files): vocab.txt for BERT, vocab.json,merges.txt for GPT, elmo_vocab.txt for
ELMo. --workers processes tokenize shards at once; the store's bytes do not depend on their
number. A killed build resumes when the same command runs again; finished shards are kept.
--lower_case (BERT) and --tokenizer (ELMo) are the family source's settings of the same name,
and a run must use the store's.

--runner=beam builds the same store (byte for byte) as an Apache Beam pipeline
(bertjax.data.store.beam; pip install 'bertjax[beam]'); Beam's own options follow `--`, the
DirectRunner when they name no runner:

    bertjax-prepare --runner=beam --family=bert --corpus='gs://B/wiki/*.txt' \\
        --vocab=gs://B/vocab --out=gs://B/stores/wiki -- --runner=DataflowRunner \\
        --project=P --region=us-central1 --temp_location=gs://B/tmp --setup_file=./setup.py
"""

import os
import sys

from absl import flags

from bertjax.cli import runner
from bertjax.data.store import build as build_lib
from bertjax.data.store.workers import FAMILIES

PROGRAM = "bertjax-prepare"
FLAGS = flags.FLAGS
REQUIRED = ("family", "corpus", "vocab", "out")
SOURCE_SETTINGS = ("lower_case", "tokenizer")  # passed to the family's source when given


def define_flags() -> None:
    """This tool's flags (defined when it runs: other tools define some of the same names)."""
    string, integer, boolean = flags.DEFINE_string, flags.DEFINE_integer, flags.DEFINE_bool
    for define, name, default, help_text in (
        (string, "family", None, f"Whose ids: {' | '.join(FAMILIES)}."),
        (string, "corpus", None, "Text files, directories (*.txt) or globs, comma-separated "
                                 "(local or gs://), 'stdlib', or tfds:NAME[:SPLIT]."),
        (string, "corpus_format", "bert", "bert (a sentence a line, blank lines between "
                                          "documents) or plain (paragraphs)."),
        (string, "text_key", "text", "The text feature of a TFDS corpus."),
        (string, "vocab", None, "An existing vocabulary: a directory holding its files (a "
                                "run's workdir) or their comma-separated paths."),
        (string, "out", None, "Directory of the store, local or gs:// (new or empty, or a "
                              "build to resume); the local runner builds gs:// on local disk, "
                              "then uploads it; Beam writes it in place."),
        (integer, "workers", min(os.cpu_count() or 1, 8),
         "Processes that tokenize shards at once (each imports TensorFlow: about 1 GB)."),
        (flags.DEFINE_float, "shard_mb", build_lib.SHARD_CHARS / 10**6,
         "Text per shard, in millions of characters."),
        (boolean, "lower_case", True, "BERT: lower-case and strip accents (as the run's "
                                      "bert_pretraining_source.lower_case)."),
        (string, "tokenizer", "simple", "ELMo: the word tokenizer, simple or whitespace (as the "
                                        "run's elmo_source.tokenizer)."),
    ):
        runner.define_once(define, name, default, help_text)
    runner.define_once(flags.DEFINE_enum, "runner", "local", ["local", "beam"],
                       "local (--workers processes on this machine) or beam (Apache Beam: "
                       "DirectRunner, or Dataflow with Beam's options after --; Beam chooses "
                       "its own worker count).")


def main(beam_args: list[str]) -> None:
    for name in REQUIRED:
        if not FLAGS[name].present or not FLAGS[name].value:
            raise ValueError(f"--{name} is required: {PROGRAM} --family=bert|gpt|elmo "
                             "--corpus=FILES --vocab=DIR --out=DIR [--workers=N]")
    if FLAGS.workers < 1 or FLAGS.shard_mb <= 0:
        raise ValueError(f"--workers={FLAGS.workers} must be >= 1 and --shard_mb="
                         f"{FLAGS.shard_mb} above 0")
    if beam_args and FLAGS.runner != "beam":
        raise ValueError(f"unexpected argument {beam_args[0]!r}: Beam's options (after --) go "
                         "with --runner=beam; flags are --name=value")
    settings = {name: FLAGS[name].value for name in SOURCE_SETTINGS if FLAGS[name].present}
    common = dict(corpus_format=FLAGS.corpus_format, text_key=FLAGS.text_key,
                  shard_chars=max(1, round(FLAGS.shard_mb * 10**6)), **settings)
    if FLAGS.runner == "beam":
        from bertjax.data.store import beam

        manifest = beam.build_on_beam(FLAGS.family, FLAGS.corpus, FLAGS.vocab, FLAGS.out,
                                      pipeline_args=beam_args, **common)
    else:
        manifest = build_lib.build(FLAGS.family, FLAGS.corpus, FLAGS.vocab, FLAGS.out,
                                   workers=FLAGS.workers, **common)
    counts = manifest.counts()
    print(f"{PROGRAM}: {counts['documents']} documents, {counts['sentences']} sentences, "
          f"{counts['tokens']} tokens in {len(manifest.shards)} shard(s) of {manifest.dtype} "
          f"-> {FLAGS.out}; train on it with corpus 'store:{FLAGS.out}'",
          file=sys.stderr, flush=True)
    print(FLAGS.out)


def run() -> None:
    """Console-script entry point."""
    define_flags()
    runner.run(PROGRAM, __doc__, main, [__name__, runner.__name__], positional=True,
               runs_steps=False)


if __name__ == "__main__":
    run()
