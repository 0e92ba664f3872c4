"""bertjax-embed: ELMo vectors for every token of every line of a text file, into an .npz.

    bertjax-embed --checkpoint=workdir/elmo_tiny_cpu --input=sentences.txt \
        --output=embeddings.npz [--layers=all|average|top|token] [--mix_weights=0.2,0.3,0.5]
    bertjax-embed --checkpoint=elmo_weights.hdf5 --options=elmo_options.json ...   # bilm-tf files

One sentence per line, tokenized as the model was trained (as bertjax's exported options.json
says; whitespace for bilm-tf's own files).
The .npz has one array per embedded line, keyed by its 0-based line number: [K, n, 2P] for
--layers=all, [n, 2P] for a mix, [n, P] for the static token vectors. Empty lines are skipped
and reported, and the exit status is then 1 (the other lines are still written).
"""

import logging
import pathlib
import sys

import numpy as np
from absl import flags

from bertjax import files
from bertjax.cli import runner
from bertjax.data.corpora import is_binary
from bertjax.files import atomic_file
from bertjax.inference.elmo import ElmoEmbedder, EmbedError

FLAGS = flags.FLAGS
PROGRAM = "bertjax-embed"
LAYERS = ("all", "average", "top", "token")


def define_flags() -> None:
    """Define the flags when the CLI runs, not on import (other CLIs that tests import in the
    same process define flags such as --checkpoint too)."""
    defs = (
        (flags.DEFINE_string, "checkpoint", None,
         "ELMo workdir, checkpoint step dir, or weights .hdf5."),
        (flags.DEFINE_string, "options", None, "bilm-tf options JSON (with an .hdf5 checkpoint)."),
        (flags.DEFINE_string, "input", None, "Text file, one sentence per line."),
        (flags.DEFINE_string, "output", None, "Where to write the .npz."),
        (flags.DEFINE_string, "vocab", None, "Vocabulary file (default: the run's)."),
        (flags.DEFINE_string, "layers", "all", "all K layers, average, top, or token (static)."),
        (flags.DEFINE_list, "mix_weights", None, "K layer weights for a scalar mix."),
        (flags.DEFINE_integer, "batch_size", 32, "At most this many sentences per batch."),
        (flags.DEFINE_integer, "max_tokens", 4096, "At most this many (padded) tokens per "
                                                   "batch: memory stays bounded."),
        (flags.DEFINE_integer, "window", 256, "Longer sentences stream through the biLM in "
                                              "windows of this many tokens."),
    )
    for define, name, default, help_text in defs:
        runner.define_once(define, name, default, help_text)




def read_lines(path: str) -> list[str]:
    """Lines of a UTF-8 text file; one-line EmbedErrors for a missing or non-text file."""
    file = pathlib.Path(path)
    if not file.is_file():
        raise EmbedError(f"--input={path} does not exist: pass a text file with one sentence "
                         "per line")
    data = file.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise EmbedError(f"--input={path} is not UTF-8 text (byte {err.start}): pass a text file "
                         "with one sentence per line") from err
    if is_binary(data):
        raise EmbedError(f"--input={path} is binary, not text: pass a text file with one "
                         "sentence per line")
    return [line.strip() for line in text.splitlines()]


def load_embedder(checkpoint: str, options: str | None, vocab: str | None, **sizes: int
                  ) -> ElmoEmbedder:
    """From a workdir / step directory, or bilm-tf files (.hdf5 + options JSON); `sizes`:
    batch_size, max_tokens, window."""
    if checkpoint.endswith((".hdf5", ".h5")):
        if not options:
            raise EmbedError("an .hdf5 --checkpoint needs --options=OPTIONS.json (bilm-tf's)")
        return ElmoEmbedder.from_hdf5(options, checkpoint, vocab, **sizes)
    return ElmoEmbedder.from_workdir(checkpoint, vocab, **sizes)


def embed_lines(embedder: ElmoEmbedder, sentences: list[str], layers: str,
                mix_weights: list[str] | None) -> list[np.ndarray]:
    """The requested representation of every sentence."""
    K = embedder.config.num_representations
    if mix_weights:
        try:
            weights = [float(w) for w in mix_weights]
        except ValueError as err:
            raise EmbedError(f"--mix_weights={','.join(mix_weights)}: give {K} numbers "
                             "separated by commas") from err
        return embedder.embed_mixed(sentences, weights)
    if layers not in LAYERS:
        raise EmbedError(f"--layers={layers}: choose one of {', '.join(LAYERS)}")
    if layers == "token":
        return embedder.token_vectors(sentences)
    if layers == "average":
        return embedder.embed_mixed(sentences)
    vectors = embedder.embed(sentences)
    return [x[-1] for x in vectors] if layers == "top" else vectors


def write_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """np.savez to a temporary file, then rename: no half-written output."""
    with atomic_file(path, "wb") as f:
        np.savez(f, **arrays)


def embed_file(checkpoint: str | None, input_path: str | None, output: str | None,
               options: str | None = None, vocab: str | None = None, layers: str = "all",
               mix_weights: list[str] | None = None, batch_size: int = 32,
               max_tokens: int = 4096, window: int = 256) -> int:
    """Embed every non-empty line of `input_path` into `output`; the exit status.

    0: done; 1: done, but empty lines were skipped; 2: nothing written (one-line error).
    """
    try:
        for name, value in (("checkpoint", checkpoint), ("input", input_path), ("output", output)):
            if not value:
                raise EmbedError(f"--{name} is required: e.g. --checkpoint=WORKDIR "
                                 "--input=sentences.txt --output=embeddings.npz")
        lines = read_lines(input_path)
        keep = [i for i, line in enumerate(lines) if line]
        if not keep:
            raise EmbedError(f"--input={input_path} has no sentences: write one sentence per line")
        embedder = load_embedder(checkpoint, options, vocab, batch_size=batch_size,
                                 max_tokens=max_tokens, window=window)
        vectors = embed_lines(embedder, [lines[i] for i in keep], layers, mix_weights)
        write_npz(output, {str(i): v for i, v in zip(keep, vectors, strict=True)})
    except (ValueError, OSError) as err:
        message = files.no_space_message(err) if files.is_no_space(err) else runner.one_line(err)
        print(f"{PROGRAM}: error: {message}", file=sys.stderr)
        return 2
    empty = [i + 1 for i, line in enumerate(lines) if not line]
    if empty:
        shown = ", ".join(map(str, empty[:10])) + (", ..." if len(empty) > 10 else "")
        print(f"{PROGRAM}: warning: {input_path} line(s) {shown} empty, skipped ({len(keep)} "
              f"sentences written to {output}): remove empty lines", file=sys.stderr)
        return 1
    print(f"{len(keep)} sentences -> {output}")
    return 0


def main() -> None:
    logging.getLogger("absl").setLevel(logging.WARNING)
    runner.announce_backend(PROGRAM)
    sys.exit(embed_file(FLAGS.checkpoint, FLAGS.input, FLAGS.output, FLAGS.options, FLAGS.vocab,
                        FLAGS.layers, FLAGS.mix_weights, FLAGS.batch_size, FLAGS.max_tokens,
                        FLAGS.window))


def run() -> None:
    """Console-script entry point."""
    define_flags()
    runner.run(PROGRAM, __doc__, main, [__name__])


if __name__ == "__main__":
    run()
