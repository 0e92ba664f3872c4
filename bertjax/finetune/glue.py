"""The GLUE benchmark (Wang et al. 2018) as the BERT paper runs it (section 4.1, Table 1):
each task fine-tuned from one pretrained model, over seeds and optionally the paper's
learning-rate grid, scored on dev, and one table of the mean and standard deviation over
seeds per task with the paper's GLUE average.

    task   type                 dev sets                          reported (BERT Table 1 first)
    CoLA   classification       dev                               MCC
    SST-2  classification       dev                               accuracy
    MRPC   pair classification  dev                               F1, accuracy
    QQP    pair classification  dev                               F1, accuracy
    STS-B  regression           dev                               Spearman, Pearson
    MNLI   pair classification  dev_matched, dev_mismatched       accuracy (m, mm)
    QNLI   pair classification  dev                               accuracy
    RTE    pair classification  dev                               accuracy
    WNLI   pair classification  dev                               accuracy (not averaged)

The GLUE average is the BERT paper's: the mean of the nine numbers of Table 1 (MNLI-m,
MNLI-mm, QQP F1, QNLI, SST-2, CoLA MCC, STS-B Spearman, MRPC F1, RTE), WNLI left out; it
reproduces the paper's averages (79.6 for BERT-base, 82.1 for BERT-large), which are GLUE
test-server scores: this table's are dev-set scores. With a learning-rate grid, each task
keeps the rate whose mean first number over seeds is best on dev, as the paper selects it (so
the dev scores are those of a rate chosen on them), or with `select_on="heldout"` best on a
held-out part of the training set that no run trains on. Numbers are percentages of each
run's final parameters; each run's dev predictions are kept beside it
(dev_predictions_COLUMN.jsonl).

Each task's definition holds its classes in GLUE's numbering (MRPC: 0, 1 where 1 is
equivalent) and the metric that ranks it (CoLA: MCC, MRPC and QQP: F1, STS-B: Spearman): runs
keep their best checkpoint by that metric, and the F1 of MRPC and QQP is that of class 1
whether the labels are spelled 0 / 1 (GLUE's files) or equivalent / duplicate (TFDS, whose
class order is GLUE's).

Data: a GLUE directory as GLUE's download script writes it (glue_data/CoLA/train.tsv, ...;
CoLA's files have no header row) or TFDS (glue/cola, ... prepared with `tfds build`).
Runs live in WORKDIR/TASK/lr_RATE/seed_SEED; re-running resumes and skips finished runs.
"""

import dataclasses
import json
import math
import os
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from bertjax import files
from bertjax.files import write_text
from bertjax.finetune import readers
from bertjax.finetune.evaluate import scored_predictions
from bertjax.finetune.examples import Example, Examples, TaskDataError, TextExample
from bertjax.finetune.glue_tasks import BY_NAME, GLUE_TASKS, NLI, GlueTask  # noqa: F401
from bertjax.finetune.pretrained import Pretrained
from bertjax.finetune.recipe import Recipe
from bertjax.finetune.runner import RunOutcome, run
from bertjax.finetune.tasks import get_task
from bertjax.typing import Params

BERT_LEARNING_RATES = (5e-5, 4e-5, 3e-5, 2e-5)  # section 4.1, chosen on dev
RESULTS_JSON, RESULTS_TABLE = "glue_results.json", "glue_results.md"


SELECTIONS = ("dev", "heldout")  # where --lr_grid picks each task's learning rate


def dev_column(task: GlueTask, index: int) -> str:
    """The table's name of dev set `index`: MNLI-m / MNLI-mm, else the task's name."""
    if len(task.dev) == 1:
        return task.name
    return f"{task.name}-{'mm' if 'mismatched' in task.dev[index] else 'm'}"


def select_tasks(spec: str) -> list[GlueTask]:
    """The tasks of "all" or a comma-separated list of names (any case, hyphens optional)."""
    if spec.strip().lower() == "all":
        return list(GLUE_TASKS)
    chosen = []
    for name in (n.strip() for n in spec.split(",") if n.strip()):
        key = name.lower().replace("-", "")
        if key not in BY_NAME:
            raise TaskDataError(f"--tasks: {name!r} is not a GLUE task: choose from all, "
                                f"{', '.join(t.name for t in GLUE_TASKS)}")
        chosen.append(BY_NAME[key])
    if not chosen:
        raise TaskDataError("--tasks names no task: give all or a list such as cola,sst2")
    return chosen


@dataclasses.dataclass(frozen=True)
class GlueData:
    """Where the GLUE data is: a GLUE directory (local or gs://), or TFDS (glue_dir None)."""

    glue_dir: files.Path | None = None

    def __post_init__(self) -> None:
        if self.glue_dir is not None:  # a str or local path given: the one path type
            object.__setattr__(self, "glue_dir", files.as_path(self.glue_dir))

    def examples(self, task: GlueTask, split: str) -> list[Example]:
        """The examples of "train" or one of the task's dev sets (a file stem / TFDS split)."""
        glue_task = get_task(task.task_type)
        if self.glue_dir is None:
            return glue_task.read(f"tfds:glue/{task.tfds}:{split}", split_hint=split)
        path = self.glue_dir / task.name / f"{split}.tsv"
        if task.headerless:
            return read_headerless_cola(path)
        return glue_task.read(path, split_hint="train" if split == "train" else "validation")

    def splits(self, task: GlueTask) -> tuple[str, ...]:
        return task.dev if self.glue_dir is not None else task.tfds_dev

    def recipe(self, task: GlueTask, recipe: Recipe) -> Recipe:
        """`recipe` with the task's definition: the metric that keeps the best checkpoint and,
        for GLUE's files, the classes in GLUE's numbering (TFDS's data numbers its own)."""
        labels = task.labels if self.glue_dir is not None else None
        return dataclasses.replace(recipe, main_metric=task.main_metric, labels=labels)


def check_data(data: GlueData, tasks: Sequence[GlueTask]) -> None:
    """Every selected task's files are there before the first run: a missing one used to end
    the benchmark in one line only when its task came, after every task before it trained."""
    if data.glue_dir is None:
        return  # TFDS: each dataset is read (and prepared, if need be) when its task comes
    for task in tasks:
        for split in ("train", *data.splits(task)):
            path = data.glue_dir / task.name / f"{split}.tsv"
            if not path.is_file():
                raise TaskDataError(f"{path} is missing: {task.name} needs train.tsv and "
                                    f"{', '.join(s + '.tsv' for s in data.splits(task))} in "
                                    f"{data.glue_dir / task.name}; put GLUE's files there or "
                                    f"leave {task.name} out of --tasks")


def read_headerless_cola(path: files.Path) -> list[TextExample]:
    """CoLA's train.tsv / dev.tsv: no header; source, label (0/1), original label, sentence."""
    examples = []
    for number, line in enumerate(readers.read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 4 or fields[1] not in ("0", "1"):
            raise TaskDataError(f"{path}:{number}: not CoLA's layout (source, label 0/1, "
                                "original label, sentence, tab-separated, no header); fix that "
                                "line or point --glue_dir at GLUE's own files")
        examples.append(TextExample(str(len(examples)), (fields[3],), fields[1]))
    if not examples:
        raise TaskDataError(f"{path}: no examples in the file; point --glue_dir at GLUE's files")
    return examples


@dataclasses.dataclass
class GlueReport:
    """Per task: the chosen learning rate and, per dev column and metric, the score of every
    seed (percent); the GLUE average over the paper's columns that were run; where the
    learning rates were chosen ("dev", or "heldout": a held-out part of train)."""

    scores: dict[str, dict[str, dict[str, list[float]]]]  # task -> column -> metric -> [seeds]
    learning_rates: dict[str, float]
    tasks: list[GlueTask]
    selected_on: str = "dev"
    grid: bool = False  # several learning rates were run and one chosen per task

    def mean_std(self, task: str, column: str, metric: str) -> tuple[float, float]:
        values = self.scores[task][column][metric]
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        return statistics.fmean(values), std

    def average_columns(self) -> list[tuple[GlueTask, str]]:
        """The (task, dev column) pairs of the paper's average that this report holds."""
        return [(t, column) for t in self.tasks if t.averaged
                for column in self.scores[t.name]]

    def average(self) -> float | None:
        """The BERT paper's GLUE average of the mean scores (None: no averaged task ran)."""
        columns = self.average_columns()
        if not columns:
            return None
        return statistics.fmean(self.mean_std(t.name, c, t.metrics[0])[0] for t, c in columns)

    def caveat(self) -> str:
        """What the numbers are, said beside the average: dev-set scores, the learning rate
        chosen on the same dev sets (or on held-out training data), and not the paper's
        test-server numbers."""
        chosen = ("learning rate chosen on these dev sets" if self.grid and
                  self.selected_on == "dev" else "learning rate chosen on held-out training "
                  "data" if self.grid else "one learning rate")
        return (f"Dev-set scores ({chosen}); BERT's 79.6 / 82.1 are GLUE test-server scores, "
                "not comparable with a dev average.")

    def table(self) -> str:
        """The markdown table: mean and standard deviation over seeds per task and metric."""
        lines = ["| task | metric | mean | std | seeds | learning rate |",
                 "|---|---|---:|---:|---:|---:|"]
        for task in self.tasks:
            for column, metrics in self.scores[task.name].items():
                for metric in task.metrics:
                    mean, std = self.mean_std(task.name, column, metric)
                    lines.append(f"| {column} | {metric} | {mean:.1f} | {std:.1f} | "
                                 f"{len(metrics[metric])} | {self.learning_rates[task.name]:g} |")
        average = self.average()
        if average is not None:
            held, of = len(self.average_columns()), sum(len(t.dev) for t in GLUE_TASKS
                                                        if t.averaged)
            lines.append(f"| GLUE average (dev) | BERT Table 1's ({held} of {of} columns; "
                         f"WNLI excluded) | {average:.1f} | | | |")
        return "\n".join([*lines, "", self.caveat()]) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {"scores": self.scores, "learning_rates": self.learning_rates,
                "average": self.average(),
                "average_columns": [c for _, c in self.average_columns()],
                "selected_on": self.selected_on, "note": self.caveat()}


def _percent(metrics: dict[str, float], task: GlueTask) -> dict[str, float]:
    return {m: 100.0 * metrics[m] for m in task.metrics}


def split_heldout(train: Sequence[Example], fraction: float
                  ) -> tuple[list[Example], list[Example]]:
    """(the rest, the held-out part) of the training examples: a fixed random `fraction`
    (at least one example), the same for every learning rate and seed, so choosing a rate on
    it never looks at the dev sets. The label order of TFDS data goes with both parts."""
    if not 0 < fraction < 1:
        raise TaskDataError(f"--heldout_fraction={fraction}: choose a fraction in (0, 1)")
    count = max(1, math.ceil(fraction * len(train)))
    if count >= len(train):
        raise TaskDataError(f"--heldout_fraction={fraction} leaves no training example of "
                            f"{len(train)}: lower it")
    held = set(np.random.default_rng(0).permutation(len(train))[:count].tolist())
    order = getattr(train, "label_order", None)
    return (Examples((ex for i, ex in enumerate(train) if i not in held), order),
            Examples((ex for i, ex in enumerate(train) if i in held), order))


def _mean_or_worst(values: list[float]) -> float:
    """The mean over seeds; -inf where a score is undefined (NaN), so it is never chosen."""
    mean = statistics.fmean(values)
    return -math.inf if math.isnan(mean) else mean


def score_dev(outcome: RunOutcome, params: Params, dev: Sequence[Example], batch: int,
              where: files.Path, column: str) -> dict[str, float]:
    """The run's metrics on one dev set, with its predictions written beside the run
    (WHERE/dev_predictions_COLUMN.jsonl: id, prediction, gold), so the table can be checked."""
    metrics, rows = scored_predictions(outcome.setup, params, dev, batch)
    if jax.process_index() == 0:
        write_text(where / f"dev_predictions_{column}.jsonl",
                   "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    return metrics


def run_glue(init: Pretrained, data: GlueData, tasks: Sequence[GlueTask],
             recipe_for: Callable[[GlueTask], Recipe], workdir: str | os.PathLike,
             seeds: Sequence[int] = (0,), learning_rates: Sequence[float] | None = None,
             mesh: jax.sharding.Mesh | None = None, show_progress: bool = False,
             log: Callable[[str], None] = lambda line: None, select_on: str = "dev",
             heldout_fraction: float = 0.1) -> GlueReport | None:
    """Fine-tune `init` on each task (recipe_for(task), its seed and learning rate replaced)
    for every seed and learning rate (None: the recipe's own), score each run's final
    parameters on the task's dev sets, and write WORKDIR/glue_results.json and
    glue_results.md. `select_on="heldout"`: every run trains on all but a `heldout_fraction`
    of train and keeps its best checkpoint and chooses the learning rate by that part, not by
    dev. None when a run was stopped by a signal or preemption notice (it saved its
    checkpoint: rerun to resume)."""
    if select_on not in SELECTIONS:
        raise TaskDataError(f"--lr_select={select_on}: choose one of {', '.join(SELECTIONS)}")
    check_data(data, tasks)
    root = files.as_path(workdir)  # local or gs://: every run's workdir lies under it
    scores, chosen = {}, {}
    for task in tasks:
        recipe = data.recipe(task, recipe_for(task))
        train = data.examples(task, "train")
        devs = [data.examples(task, split) for split in data.splits(task)]
        heldout = None
        if select_on == "heldout":
            train, heldout = split_heldout(train, heldout_fraction)
        by_rate: dict[float, dict[str, dict[str, list[float]]]] = {}
        picks: dict[float, list[float]] = {}  # rate -> the selecting score of each seed
        for rate in learning_rates or (recipe.learning_rate,):
            columns: dict[str, dict[str, list[float]]] = {}
            for seed in seeds:
                run_recipe = dataclasses.replace(recipe, learning_rate=rate, seed=seed)
                where = root / task.name / f"lr_{rate:g}" / f"seed_{seed}"
                outcome = run(run_recipe, init, train, heldout or devs[0], where, mesh=mesh,
                              show_progress=show_progress)
                if outcome.result.stopped:
                    log(f"{where} stopped at step {outcome.result.step} "
                        f"({outcome.result.stopped}): rerun the same command to resume")
                    return None
                params = outcome.result.state.params
                batch = run_recipe.eval_batch_size or run_recipe.batch_size
                for index, dev in enumerate(devs):
                    column = dev_column(task, index)
                    metrics = score_dev(outcome, params, dev, batch, where, column)
                    for metric, value in _percent(metrics, task).items():
                        columns.setdefault(column, {}).setdefault(metric, []).append(value)
                picks.setdefault(rate, []).append(
                    100.0 * outcome.results["final"][task.main_metric] if heldout else
                    columns[dev_column(task, 0)][task.main_metric][-1])
                log(f"{task.name} lr {rate:g} seed {seed}: " + ", ".join(
                    f"{column} {metric} {values[-1]:.1f}" for column, by_metric in
                    columns.items() for metric, values in by_metric.items()))
            by_rate[rate] = columns
        chosen[task.name] = max(by_rate, key=lambda r: (_mean_or_worst(picks[r]), -r))
        scores[task.name] = by_rate[chosen[task.name]]
    report = GlueReport(scores, chosen, list(tasks), select_on,
                        grid=len(learning_rates or ()) > 1)
    if jax.process_index() == 0:
        write_text(root / RESULTS_JSON, json.dumps(report.to_json(), indent=2) + "\n")
        write_text(root / RESULTS_TABLE, report.table())
    return report


def paper_average(table: dict[str, float]) -> float:
    """The GLUE average of BERT Table 1 from its nine numbers (keys as dev columns)."""
    columns = [dev_column(t, i) for t in GLUE_TASKS if t.averaged for i in range(len(t.dev))]
    missing = sorted(set(columns) - set(table))
    if missing:
        raise ValueError(f"the GLUE average needs {', '.join(missing)}")
    return math.fsum(table[c] for c in columns) / len(columns)
