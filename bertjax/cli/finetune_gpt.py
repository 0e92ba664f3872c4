"""Fine-tune a pretrained GPT on a labelled JSON-lines task (Radford et al. 2018, section 3.2).

    python -m bertjax.cli.finetune_gpt --checkpoint=WORKDIR --task=entailment \
        --train=train.jsonl --eval=dev.jsonl --num_classes=3 --output=/tmp/ft [--lm_coef=0]

One JSON object per line, by task:
    classification   {"text": ..., "label": 1}
    entailment       {"premise": ..., "hypothesis": ..., "label": 2}
    similarity       {"text_a": ..., "text_b": ..., "label": 0}       (num_classes=1: regression)
    multiple_choice  {"context": ..., "choices": [..., ...], "label": 1}
Prints the eval accuracy (or mean squared error) and writes the fine-tuned parameters (orbax)
and finetune.json to --output. Errors are one line and exit with status 2.
"""

import dataclasses
import json
import pathlib

import numpy as np
import orbax.checkpoint as ocp
from absl import flags

from bertjax.cli import runner
from bertjax.data.bpe import ByteLevelBPE
from bertjax.finetune import gpt as ft_gpt
from bertjax.finetune.gpt_inputs import FIELDS, KINDS, encode
from bertjax.generation.checkpoint import load_gpt

PROGRAM = "finetune_gpt"
FLAGS = flags.FLAGS


def define_flags() -> None:
    """This tool's flags (defined when it runs: other tools define some of the same names)."""
    string, integer, real = flags.DEFINE_string, flags.DEFINE_integer, flags.DEFINE_float
    for define, name, default, help_text in (
        (string, "checkpoint", None, "The pretrained GPT's workdir (or checkpoints/STEP)."),
        (string, "train", None, "Training examples (JSON lines)."),
        (string, "eval", None, "Evaluation examples (JSON lines), optional."),
        (integer, "num_classes", 2, "Classes (1: regression); ignored for multiple_choice."),
        (real, "lm_coef", 0.5, "lambda of the auxiliary LM loss (0: off)."),
        (integer, "epochs", 3, "Epochs."),
        (integer, "batch_size", 32, "Global batch size."),
        (real, "learning_rate", 6.25e-5, "Peak learning rate."),
        (integer, "max_length", None, "Tokens per sequence (default: the model's context)."),
        (string, "output", None, "Where to write the fine-tuned parameters."),
        (integer, "seed", 0, "Seed."),
    ):
        runner.define_once(define, name, default, help_text)
    runner.define_once(flags.DEFINE_enum, "task", "classification", KINDS,
                       "The input transformation.")

def read_examples(path: str, kind: str, tokenizer: ByteLevelBPE) -> tuple[list, list]:
    """Tokenized fields and labels of a JSON-lines file."""
    examples, labels = [], []
    try:
        lines = pathlib.Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ValueError(f"{path}: cannot read ({e.strerror}): fix --train / --eval") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            fields = [row[name] for name in FIELDS[kind]]
            labels.append(float(row["label"]))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}:{n}: not a valid {kind} example ({type(e).__name__}: "
                             f"{e}): give fields {', '.join(FIELDS[kind])} and label") from None
        if kind == "multiple_choice":
            examples.append((tokenizer.encode(fields[0]), [tokenizer.encode(c) for c in fields[1]]))
        else:
            examples.append(tuple(tokenizer.encode(f) for f in fields))
    if not examples:
        raise ValueError(f"{path} holds no examples: one JSON object per line")
    return examples, labels


def run_finetuning() -> dict:
    if not FLAGS.checkpoint or not FLAGS.train:
        raise ValueError("--checkpoint (a GPT workdir) and --train (JSON lines) are required")
    ckpt = load_gpt(FLAGS.checkpoint, tool="finetune_gpt")
    info = ckpt.record.get("tokenizer", {})
    tokenizer = ByteLevelBPE.from_files(ckpt.workdir / info.get("vocab", "vocab.json"),
                                        ckpt.workdir / info.get("merges", "merges.txt"))
    max_length = FLAGS.max_length or ckpt.config.max_position_embeddings
    ft = ft_gpt.FinetuneConfig(FLAGS.task, FLAGS.num_classes, FLAGS.lm_coef, FLAGS.learning_rate,
                               FLAGS.batch_size, FLAGS.epochs, max_length=max_length,
                               seed=FLAGS.seed)
    special = ft_gpt.special_tokens(ckpt.config)
    train = encode(FLAGS.task, *read_examples(FLAGS.train, FLAGS.task, tokenizer), special,
                   max_length)
    params, history = ft_gpt.finetune(ckpt.config, ckpt.params, train, ft)
    summary = {"steps": len(history), "train_loss": history[-1]["loss"] if history else None}
    if FLAGS.eval:
        data = encode(FLAGS.task, *read_examples(FLAGS.eval, FLAGS.task, tokenizer), special,
                      max_length)
        logits = ft_gpt.predict(ckpt.config, params, data, ft)
        if ft.num_classes == 1 and FLAGS.task != "multiple_choice":
            summary["eval_mse"] = float(np.mean((logits[:, 0] - data["label"]) ** 2))
        else:
            summary["eval_accuracy"] = float((logits.argmax(-1) == data["label"]).mean())
    if FLAGS.output:
        out = pathlib.Path(FLAGS.output).absolute()
        with ocp.StandardCheckpointer() as checkpointer:
            checkpointer.save(out / "params", params, force=True)
        (out / "finetune.json").write_text(json.dumps({
            "finetune": dataclasses.asdict(ft), "config": dataclasses.asdict(ckpt.config),
            "pretrained": str(ckpt.workdir), "step": ckpt.step, **summary}, indent=2))
    return summary


def main() -> None:
    runner.announce_backend(PROGRAM)
    print(json.dumps(run_finetuning()))


if __name__ == "__main__":
    define_flags()
    runner.run(PROGRAM, __doc__, main, [__name__])
