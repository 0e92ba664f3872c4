"""bertjax-finetune: fine-tune (or train a feature-based task model on) a pretrained BERT, GPT
or ELMo for a downstream task; evaluate on a dev set; re-running resumes.

    bertjax-finetune --gin_file=configs/finetune/bert_classification.gin \
        --init=<bertjax workdir | Hugging Face model dir | Google BERT dir | \
                OPTIONS.json,WEIGHTS.hdf5> \
        --train=train.tsv --eval=dev.tsv --workdir=/tmp/sst2 [--gin.finetune.epochs=2] \
        [--predict=glue_data/SST-2/test.tsv]

The recipe (configs/finetune/) names the family, the task type and the hyper-parameters.
--train / --eval are files (GLUE TSV, CSV, JSON lines, CoNLL columns, SQuAD JSON, SWAG CSV) or
tfds:NAME[:SPLIT]. The run is evaluated every finetune.eval_every steps and at its end; the
best checkpoint by the task's main metric is kept in WORKDIR/best, with WORKDIR/eval_results.json
and WORKDIR/predictions.jsonl (one line per dev example: id, prediction, gold); SQuAD runs
also write predictions.json (and null_odds.json for 2.0) for the official evaluation scripts.
WORKDIR/init.txt records --init, so bertjax-report can show the pretraining run beside the
fine-tuning; WORKDIR/task.json records the labels and tokenizer, for bertjax-export.
--predict=FILE (repeatable; classification, pair classification, regression) predicts an
unlabelled file (a GLUE test split) with the best checkpoint into WORKDIR/submission/NAME.tsv
in the format the GLUE server reads (bertjax/finetune/official.py).
"""

import json
import os
import sys
import time

import gin
from absl import flags

import bertjax.finetune
from bertjax import files
from bertjax.cli import gin_utils, runner
from bertjax.cli.train import check_workdir
from bertjax.finetune.runner import RunOutcome
from bertjax.training import lease, loop
from bertjax.training.evaluation import RESULTS

PROGRAM = "bertjax-finetune"
FLAGS = flags.FLAGS


def define_flags() -> None:
    """This tool's flags (defined when it runs: other tools define some of the same names)."""
    runner.define_gin_flags()
    string = flags.DEFINE_string
    for name, help_text in (
        ("init", "The pretrained model: a bertjax workdir, a Hugging Face model directory, a "
                 "Google BERT directory (bert_config.json, vocab.txt, bert_model.ckpt.*), or "
                 "bilm-tf OPTIONS.json,WEIGHTS.hdf5."),
        ("train", "Training examples: a file or tfds:NAME[:SPLIT]."),
        ("eval", "Evaluation (dev) examples: a file or tfds:NAME[:SPLIT]."),
        ("workdir", "Run directory: checkpoints, best/, eval_results.json, predictions.jsonl; "
                    "re-running with the same directory resumes."),
    ):
        runner.define_once(string, name, None, help_text)
    runner.define_once(flags.DEFINE_bool, "progress", True, "Show the progress bar.")
    runner.define_once(flags.DEFINE_multi_string, "predict", [], "Unlabelled examples (a GLUE "
                       "test file or tfds:NAME:SPLIT; repeatable) to predict with the best "
                       "checkpoint into WORKDIR/submission/NAME.tsv.")
    runner.define_once(flags.DEFINE_bool, "do_lower_case", None, "Whether a Google BERT "
                       "--init is uncased; needed when its directory name says neither "
                       "uncased_ nor cased_.")

    runner.define_lease_flag()


def finetune(workdir: os.PathLike, init: str, train_spec: str, eval_spec: str,
             show_progress: bool = True, predict: tuple[str, ...] = (),
             lower_case: bool | None = None,
             lease_timeout: float = lease.DEFAULT_TIMEOUT) -> RunOutcome:
    """Run the recipe gin has parsed (bertjax.finetune.run); `predict`: unlabelled files to
    predict with the best checkpoint (GLUE submissions)."""
    recipe = gin_utils.configured("finetune")
    mesh = gin.get_configurable("bertjax.make_mesh")()
    gin_utils.check_all_read(ignore=("aot_compile",))
    outcome = bertjax.finetune.run(recipe, init, train_spec, eval_spec, workdir,
                                   predict=predict, lower_case=lower_case, mesh=mesh,
                                   show_progress=show_progress, lease_timeout=lease_timeout)
    for path in outcome.submissions:
        print(f"{PROGRAM}: wrote {path}", file=sys.stderr, flush=True)
    return outcome


def summarize(result: loop.RunResult, results: dict, workdir: files.Path,
              seconds: float) -> str:
    """The lines a person reads at the end: the dev metrics of the best and last evaluation."""
    def scores(d: dict) -> str:
        return json.dumps({k: round(v, 4) for k, v in d.items() if isinstance(v, float)})

    best = dict(results.get("best", {}))
    lines = [f"steps {result.start_step} -> {result.step} in {seconds:.1f}s"]
    if best:
        lines.append(f"best (step {best.pop('step', '?')}): {scores(best)}")
        lines.append(f"final: {scores(results.get('final', {}))}")
    lines.append(f"results: {workdir / RESULTS}   predictions: {workdir / 'predictions.jsonl'}")
    return "\n".join(lines)


def main() -> None:
    workdir = check_workdir(FLAGS.workdir)
    for name in ("gin_file", "init", "train", "eval"):
        if not FLAGS[name].value:
            raise gin_utils.ConfigError(
                f"--{name} is required: {PROGRAM} --gin_file=configs/finetune/RECIPE.gin "
                "--init=MODEL --train=FILE --eval=FILE --workdir=DIR")
    runner.announce_backend(PROGRAM)
    gin_utils.parse(FLAGS.gin_file, FLAGS.gin_bindings)
    start = time.perf_counter()
    outcome = finetune(workdir, FLAGS.init, FLAGS.train, FLAGS.eval, FLAGS.progress,
                       tuple(FLAGS.predict), FLAGS.do_lower_case, FLAGS.lease_timeout)
    result, results = outcome.result, outcome.results
    runner.finish_run(PROGRAM, result, workdir, lambda: summarize(
        result, results, workdir, time.perf_counter() - start))


def run() -> None:
    """Console-script entry point."""
    define_flags()
    runner.run(PROGRAM, __doc__, main, [__name__, runner.__name__])


if __name__ == "__main__":
    run()
