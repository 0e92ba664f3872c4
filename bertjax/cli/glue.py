"""bertjax-glue: fine-tune one pretrained model on the GLUE tasks over seeds (and the BERT
paper's learning-rate grid), and write one table: mean and standard deviation over seeds per
task, and the paper's GLUE average (bertjax/finetune/glue.py).

    bertjax-glue --init=MODEL --glue_dir=glue_data --tasks=all --seeds=3 --lr_grid \
        --workdir=/tmp/glue [--family=bert] [--gin.finetune.epochs=2]

--glue_dir is GLUE's directory (glue_data/CoLA/train.tsv, ...) or `tfds` for the prepared TFDS
datasets glue/*. Each task runs its family's recipe from configs/finetune/ (BERT: bert_
classification, bert_pair_classification, bert_regression; GPT: gpt_classification,
gpt_entailment, gpt_paraphrase for MRPC and QQP, gpt_similarity for STS-B), with the
--gin.finetune.NAME=VALUE bindings on top. Runs live in WORKDIR/TASK/lr_RATE/seed_SEED and
re-running resumes; the table goes to stdout, WORKDIR/glue_results.md and glue_results.json.
Its scores are dev-set scores (the BERT paper's GLUE average is of test-server scores); with
--lr_grid the rate is chosen on the same dev sets unless --lr_select=heldout chooses it on a
held-out part of train (--heldout_fraction).
"""

import sys

import gin
from absl import flags

from bertjax import files
from bertjax.cli import gin_utils, runner
from bertjax.cli.train import check_workdir
from bertjax.finetune import glue
from bertjax.finetune.pretrained import load_pretrained
from bertjax.finetune.recipe import Recipe

PROGRAM = "bertjax-glue"
FLAGS = flags.FLAGS
# family: {task type: recipe}, and the GLUE tasks whose recipe differs from their type's
RECIPES = {
    "bert": ({"classification": "bert_classification",
              "pair_classification": "bert_pair_classification",
              "regression": "bert_regression"}, {}),
    "gpt": ({"classification": "gpt_classification", "pair_classification": "gpt_entailment",
             "regression": "gpt_similarity"},
            {"MRPC": "gpt_paraphrase", "QQP": "gpt_paraphrase"}),  # the paper's similarity tasks
}


def define_flags() -> None:
    """This tool's flags (defined when it runs: other tools define some of the same names)."""
    runner.define_gin_flags()
    string = flags.DEFINE_string
    for name, help_text in (
        ("init", "The pretrained model (as bertjax-finetune --init)."),
        ("workdir", "Root of the runs: WORKDIR/TASK/lr_RATE/seed_SEED; results beside them."),
        ("glue_dir", "GLUE's directory (glue_data, holding CoLA/, SST-2/, ...), or 'tfds' for "
                     "the prepared TFDS datasets glue/*."),
    ):
        runner.define_once(string, name, None, help_text)
    runner.define_once(string, "tasks", "all", "'all' or a comma-separated list of GLUE tasks "
                       "(cola,sst2,mrpc,qqp,stsb,mnli,qnli,rte,wnli).")
    runner.define_once(string, "family", "bert", "The recipes' family: bert or gpt.")
    runner.define_once(flags.DEFINE_integer, "seeds", 1, "Runs per task and learning rate "
                       "(seeds 0 .. N-1).")
    runner.define_once(flags.DEFINE_bool, "lr_grid", False, "Run the BERT paper's learning "
                       "rates (5e-5, 4e-5, 3e-5, 2e-5) and keep each task's best on dev.")
    runner.define_once(string, "lr_select", "dev", "Where --lr_grid chooses each task's rate: "
                       "'dev' (as the BERT paper: the reported dev scores are then those of a "
                       "rate chosen on them) or 'heldout' (a held-out part of train that no "
                       "run trains on, which also keeps each run's best checkpoint).")
    runner.define_once(flags.DEFINE_float, "heldout_fraction", 0.1, "With --lr_select=heldout: "
                       "the share of each task's training set held out.")
    runner.define_once(flags.DEFINE_bool, "progress", True, "Show the progress bar.")
    runner.define_once(flags.DEFINE_bool, "do_lower_case", None, "Whether a Google BERT "
                       "--init is uncased; needed when its directory name says neither.")


def recipe_for(family: str, bindings: list[str]):  # noqa: ANN201
    """task -> its family's recipe with the user's bindings."""
    by_type, by_task = RECIPES[family]

    def recipe(task: glue.GlueTask) -> Recipe:
        name = by_task.get(task.name, by_type[task.task_type])
        gin.clear_config()
        gin_utils.parse([f"configs/finetune/{name}.gin"], bindings)
        return gin_utils.configured("finetune")

    return recipe


def main() -> None:
    workdir = check_workdir(FLAGS.workdir)
    for name in ("init", "glue_dir"):
        if not FLAGS[name].value:
            raise gin_utils.ConfigError(
                f"--{name} is required: {PROGRAM} --init=MODEL --glue_dir=glue_data|tfds "
                "--workdir=DIR")
    if FLAGS.gin_file:
        raise gin_utils.ConfigError("--gin_file: each task runs its family's recipe; change "
                                    "settings with --gin.finetune.NAME=VALUE")
    if FLAGS.family not in RECIPES:
        raise gin_utils.ConfigError(f"--family={FLAGS.family}: choose one of "
                                    f"{', '.join(RECIPES)}")
    if FLAGS.lr_grid and FLAGS.family != "bert":
        raise gin_utils.ConfigError("--lr_grid is the BERT paper's grid; GPT's paper uses one "
                                    "rate (6.25e-5): drop --lr_grid")
    if FLAGS.lr_select not in glue.SELECTIONS:
        raise gin_utils.ConfigError(f"--lr_select={FLAGS.lr_select}: choose one of "
                                    f"{', '.join(glue.SELECTIONS)}")
    if FLAGS.lr_select == "heldout" and not 0 < FLAGS.heldout_fraction < 1:
        raise gin_utils.ConfigError(f"--heldout_fraction={FLAGS.heldout_fraction}: choose a "
                                    "fraction in (0, 1)")
    if FLAGS.seeds < 1:
        raise gin_utils.ConfigError(f"--seeds={FLAGS.seeds}: run at least 1")
    glue_dir = None if FLAGS.glue_dir == "tfds" else files.as_path(FLAGS.glue_dir)
    if glue_dir is not None and not glue_dir.is_dir():
        raise gin_utils.ConfigError(f"--glue_dir={FLAGS.glue_dir} is not a directory: pass "
                                    "GLUE's glue_data directory or 'tfds'")
    tasks = glue.select_tasks(FLAGS.tasks)
    glue.check_data(glue.GlueData(glue_dir), tasks)  # all of them, before any task trains
    recipes = recipe_for(FLAGS.family, FLAGS.gin_bindings)
    recipes(tasks[0])  # a bad binding fails now, in one line
    mesh = gin.get_configurable("bertjax.make_mesh")()  # --gin.make_mesh.* as bertjax-finetune
    runner.announce_backend(PROGRAM)
    model = load_pretrained(FLAGS.init, FLAGS.family, lower_case=FLAGS.do_lower_case)
    report = glue.run_glue(
        model, glue.GlueData(glue_dir), tasks, recipes, workdir,
        seeds=range(FLAGS.seeds), learning_rates=glue.BERT_LEARNING_RATES if FLAGS.lr_grid
        else None, mesh=mesh, show_progress=FLAGS.progress,
        log=lambda line: print(f"{PROGRAM}: {line}", file=sys.stderr, flush=True),
        select_on=FLAGS.lr_select, heldout_fraction=FLAGS.heldout_fraction)
    if report is None:  # stopped by a signal: the run said where
        return
    print(report.table(), end="")
    print(f"results: {workdir / glue.RESULTS_TABLE}   {workdir / glue.RESULTS_JSON}")


def run() -> None:
    """Console-script entry point."""
    define_flags()
    runner.run(PROGRAM, __doc__, main, [__name__, runner.__name__])


if __name__ == "__main__":
    run()
