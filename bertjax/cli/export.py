"""bertjax-export: write a trained or fine-tuned model in a format other software reads.

    bertjax-export --checkpoint=/tmp/run --out=/tmp/run-hf          # transformers directory
    bertjax-export --checkpoint=/tmp/sst2 --out=/tmp/sst2-hf        # the best checkpoint
    bertjax-export --checkpoint=/tmp/run/checkpoints/2000 --out=DIR  # one step
    bertjax-export --checkpoint=/tmp/elmo --format=bilm --out=DIR    # bilm-tf ELMo files

--format=hf writes config.json, model.safetensors and the tokenizer files, which
transformers' AutoModel*/AutoTokenizer.from_pretrained(DIR) load: BERT pretraining as
BertForPreTraining, its fine-tuned heads as BertForSequenceClassification (with id2label),
BertForTokenClassification, BertForQuestionAnswering or BertForMultipleChoice, GPT-2 as
GPT2LMHeadModel, GPT as OpenAIGPTLMHeadModel. --format=bilm writes an ELMo biLM as
options.json + weights.hdf5 in bilm-tf's layout (AllenNLP's too). --encoder_only writes the
pretrained encoder alone, also for heads with no transformers counterpart. Weights are written
in float32 unless --dtype says otherwise; scanned layers are un-stacked.
"""

import sys

from absl import flags

from bertjax.cli import runner
from bertjax.convert import export as export_lib

PROGRAM = "bertjax-export"
FLAGS = flags.FLAGS


def define_flags() -> None:
    """This tool's flags (defined when it runs: other tools define some of the same names)."""
    string, boolean = flags.DEFINE_string, flags.DEFINE_bool
    for define, name, default, help_text in (
        (string, "checkpoint", None, "The run: a bertjax-train or bertjax-finetune --workdir "
                                     "(a fine-tuning run's best checkpoint), or "
                                     "WORKDIR/checkpoints/STEP."),
        (string, "out", None, "Directory to write; must be new or empty unless --overwrite."),
        (string, "format", "hf", "hf (transformers: BERT, GPT-2, GPT) or bilm (bilm-tf ELMo)."),
        (string, "dtype", "float32", "Weight dtype written: float32, bfloat16 or float16."),
        (boolean, "encoder_only", False, "Export the pretrained encoder alone (BertModel, "
                                         "GPT2Model, an ELMo task model's biLM)."),
        (boolean, "overwrite", False, "Replace what --out holds."),
        (boolean, "best", True, "A fine-tuning run's best checkpoint (WORKDIR/best); "
                                "--nobest reads its newest."),
    ):
        runner.define_once(define, name, default, help_text)


def main() -> None:
    for name in ("checkpoint", "out"):
        if not FLAGS[name].value:
            raise export_lib.ExportError(f"--{name} is required: {PROGRAM} --checkpoint=WORKDIR "
                                         "--out=DIR [--format=hf|bilm]")
    done = export_lib.export(FLAGS.checkpoint, FLAGS.out, FLAGS.format, FLAGS.dtype,
                             FLAGS.encoder_only, FLAGS.overwrite, FLAGS.best)
    print(f"{PROGRAM}: {done.model} from {done.source} -> {done.out} "
          f"({', '.join(done.files)})", file=sys.stderr, flush=True)
    print(done.out)


def run() -> None:
    """Console-script entry point."""
    define_flags()
    runner.run(PROGRAM, __doc__, main, [__name__, runner.__name__], runs_steps=False)


if __name__ == "__main__":
    run()
