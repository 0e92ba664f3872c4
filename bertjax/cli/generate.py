"""bertjax-generate: continue prompts with a GPT trained by bertjax-train (or imported).

    bertjax-generate --checkpoint=workdir/gpt_tiny_cpu --prompt="The module" --prompt="A"
    bertjax-generate --checkpoint=WORKDIR/checkpoints/300 --prompt="..." --temperature=0.8 \
        --top_k=40 --top_p=0.95 --seed=1 --max_new_tokens=100 --stop=$'\n'
    bertjax-generate --checkpoint=WORKDIR --task=tldr --prompt="$(cat article.txt)"
    bertjax-generate --checkpoint=WORKDIR --task=translate --greedy --prompt="Where is it?"

--temperature=0 (or --greedy) decodes greedily. Prompts of different lengths are batched with
left padding. Prompt k (counting --prompt flags, then --prompt_file lines, from 0) samples
with its own key from (--seed, k), so its continuation does not depend on the other prompts
or their lengths; a greedy continuation is what the prompt alone would give. Errors are one
line and exit with status 2.
"""

import json
import logging
import sys

from absl import flags

from bertjax.cli import runner
from bertjax.generation import prompts as zero_shot
from bertjax.generation.generator import Generator
from bertjax.generation.sampling import GenerationError, Sampling
from bertjax.tokenizers.bpe import END_OF_TEXT

PROGRAM = "bertjax-generate"
FLAGS = flags.FLAGS


def define_flags() -> None:
    """This tool's flags (defined when it runs: other tools define some of the same names)."""
    string, multi = flags.DEFINE_string, flags.DEFINE_multi_string
    integer, real, boolean = flags.DEFINE_integer, flags.DEFINE_float, flags.DEFINE_bool
    for define, name, default, help_text in (
        (string, "checkpoint", None, "A GPT workdir, its checkpoints/ or checkpoints/STEP."),
        (multi, "prompt", [], "Prompt text; repeat for a batch."),
        (string, "prompt_file", None, "A file with one prompt per line (added to --prompt)."),
        (integer, "max_new_tokens", 64, "Tokens to generate per prompt."),
        (real, "temperature", 1.0, "Softmax temperature; 0 decodes greedily."),
        (boolean, "greedy", False, "Greedy decoding (same as --temperature=0)."),
        (integer, "top_k", None, "Sample among the k most likely tokens (k >= 1)."),
        (real, "top_p", None, "Nucleus sampling: the smallest set of mass >= p, p in (0, 1]."),
        (integer, "seed", 0, "Sampling seed; prompt k draws with its own key from (seed, k)."),
        (multi, "stop", [END_OF_TEXT], "Stop strings (the text is cut before them)."),
        (string, "vocab", None, "vocab.json to use instead of the run's (with --merges)."),
        (string, "merges", None, "merges.txt to use instead of the run's (with --vocab)."),
        (string, "question", None, "The question for --task=qa."),
        (string, "translation_examples", None, "For --task=translate: a file of example "
                                               "lines 'english sentence = french sentence'."),
        (boolean, "json", False, "Print one JSON object per prompt."),
    ):
        runner.define_once(define, name, default, help_text)
    runner.define_once(flags.DEFINE_enum, "task", "continue",
                       ["continue", "tldr", "qa", "translate"],
                       "continue: plain continuation; tldr: GPT-2's 'TL;DR:' summary prompt; "
                       "qa: GPT-2's 'Q: ... A:' prompt, with --prompt=document and --question; "
                       "translate: GPT-2's 'english = french' prompt, --prompt=english sentence.")


def _prompts() -> list[str]:
    texts = list(FLAGS.prompt)
    if FLAGS.prompt_file:
        try:
            with open(FLAGS.prompt_file, encoding="utf-8") as f:
                texts += [line.rstrip("\n") for line in f if line.strip()]
        except OSError as e:
            raise GenerationError(f"{FLAGS.prompt_file}: cannot read ({e.strerror}): fix "
                                  "--prompt_file") from None
    if not texts:
        raise GenerationError('no prompt: pass --prompt="..." (repeatable) or --prompt_file')
    if FLAGS.task == "tldr":
        texts = [zero_shot.tldr_prompt(t) for t in texts]
    elif FLAGS.task == "qa":
        if not FLAGS.question:
            raise GenerationError("--task=qa needs --question=... (the document is --prompt)")
        texts = [zero_shot.qa_prompt(t, FLAGS.question) for t in texts]
    elif FLAGS.task == "translate":
        examples = _translation_examples(FLAGS.translation_examples)
        texts = [zero_shot.translation_prompt(t, examples) for t in texts]
    return texts


def _translation_examples(path: str | None) -> tuple[tuple[str, str], ...]:
    """The example pairs of --translation_examples (one 'english = french' per line), or the
    built-in ones."""
    if path is None:
        return zero_shot.TRANSLATION_EXAMPLES
    try:
        with open(path, encoding="utf-8") as f:
            lines = [(n, line.strip()) for n, line in enumerate(f, 1) if line.strip()]
    except OSError as e:
        raise GenerationError(f"{path}: cannot read ({e.strerror}): fix "
                              "--translation_examples") from None
    pairs = []
    for number, line in lines:
        source, sep, target = line.partition(" = ")
        if not (sep and source.strip() and target.strip()):
            raise GenerationError(f"{path}:{number}: not 'english sentence = french sentence': "
                                  "fix the line or --translation_examples")
        pairs.append((source, target))
    if not pairs:
        raise GenerationError(f"{path}: no example pairs: add 'english = french' lines")
    return tuple(pairs)


def generate() -> list[tuple[str, str]]:
    """(prompt, continuation) pairs for the flags' prompts and settings."""
    if not FLAGS.checkpoint:
        raise GenerationError("--checkpoint is required: pass --checkpoint=WORKDIR of a GPT run")
    temperature = 0.0 if FLAGS.greedy else FLAGS.temperature
    Sampling(temperature, FLAGS.top_k, FLAGS.top_p)  # check the settings before loading
    texts = _prompts()
    line_task = FLAGS.task in ("qa", "translate")  # the answer is the rest of the line
    stop = list(FLAGS.stop) + (["\n"] if line_task else [])
    generator = Generator.from_checkpoint(FLAGS.checkpoint, FLAGS.vocab, FLAGS.merges)
    outputs = generator.generate(texts, FLAGS.max_new_tokens, temperature, FLAGS.top_k,
                                 FLAGS.top_p, FLAGS.seed, stop)
    if FLAGS.task == "tldr":
        outputs = [zero_shot.first_sentences(o) for o in outputs]
    elif FLAGS.task == "translate":
        outputs = [o.strip() for o in outputs]
    return list(zip(texts, outputs, strict=True))


def main() -> None:
    logging.getLogger("absl").setLevel(logging.WARNING)
    runner.announce_backend(PROGRAM)
    for prompt, output in generate():
        if FLAGS.json:
            print(json.dumps({"prompt": prompt, "continuation": output}, ensure_ascii=False))
        else:
            print(f"{prompt}\033[1m{output}\033[0m" if sys.stdout.isatty() else prompt + output)
            print("-" * 40)


def run() -> None:
    """Console-script entry point."""
    define_flags()
    runner.run(PROGRAM, __doc__, main, [__name__])


if __name__ == "__main__":
    run()
