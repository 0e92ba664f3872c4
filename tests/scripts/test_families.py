"""The families study's wiring (scripts/families.py): the plan has every point of the
learning curve, paired across inits and baselines; the draws are stratified and disjoint from
their held-out tenth; the paired interval is Student's t; the tables are recomputed from the
runs' own files; a killed study resumes; bad input is one line. The end-to-end tier runs the
quick study whole and compiles the larger BERT for its TPU target. No test asserts a research
result."""

import collections
import json
import math
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from families_study import data as data_lib  # noqa: E402
from families_study import tables  # noqa: E402
from families_study.config import load_study  # noqa: E402
from families_study.draws import make_draw  # noqa: E402
from families_study.execute import compile_command, train_command  # noqa: E402
from families_study.flops import training_flops  # noqa: E402
from families_study.plan import make_plan  # noqa: E402
from families_study.stats import paired  # noqa: E402

from tests.process_env import process_env  # noqa: E402

CPU = "configs/studies/families_cpu.gin"


def script(*args, timeout=600):
    return subprocess.run([sys.executable, "scripts/families.py", *args], cwd=REPO,
                          env=process_env(), capture_output=True, text=True, timeout=timeout)


def test_plan_pairs_every_point_and_baseline():
    study = load_study(CPU)
    plan = make_plan(study)
    assert [p.model for p in plan.pretraining] == ["bert", "bert_ltr", "gpt", "elmo"]
    assert plan.labels == (100, 400, 1600, 4000) and plan.draws == 3
    arms = collections.Counter((p.model, p.approach, p.labels, p.draw) for p in plan.points)
    assert set(arms.values()) == {2}  # every point has its twin: pretrained and random
    assert {(p.model, p.init) for p in plan.points} >= {("elmo", "random"), ("gpt", "random")}
    for model in ("bert", "bert_ltr", "gpt", "elmo"):  # probed at every size
        assert {p.labels for p in plan.points if p.model == model
                and p.approach == "features"} == set(plan.labels)
    assert {p.labels for p in plan.points if p.model == "elmo"
            and p.approach == "finetuned"} == {400}  # its task model at 400 only
    assert len({p.workdir for p in plan.points}) == len(plan.points)
    assert {(b.kind, b.labels, b.draw) for b in plan.baselines} == {
        (k, n, d) for k in ("tfidf_logreg", "naive_bayes") for n in plan.labels
        for d in range(3)}
    commands = {p.model: train_command(p, pathlib.Path("/r"), data_lib.StudyData(
        *(pathlib.Path(f"/d/{i}") for i in range(4)))) for p in plan.pretraining}
    assert "--gin.NUM_STEPS=1600" in commands["bert"] and "--gin.CORPUS='/d/0'" in commands["gpt"]
    assert all("--gin.SEED=0" in c for c in commands.values())


def test_draws_are_stratified_paired_and_hold_out_a_tenth():
    labels = [c for c in "ABCD" for _ in range(1000)]
    for size in (100, 400, 1600):
        draws = [make_draw(labels, size, d) for d in range(3)]
        for draw in draws:
            rows = draw.rows
            assert len(rows) == len(set(rows)) == size
            assert collections.Counter(labels[i] for i in rows) == {c: size // 4 for c in "ABCD"}
            assert not set(draw.train) & set(draw.selection)
            assert len(draw.selection) == size // 10
            assert set(labels[i] for i in draw.selection) == set("ABCD")
        assert len({d.rows for d in draws}) == 3  # draws differ
        assert make_draw(labels, size, 1) == draws[1]  # and are reproducible
    whole = make_draw(labels, 4000, 0)
    assert whole.rows == tuple(range(4000))
    with pytest.raises(ValueError, match="at most the training rows"):
        make_draw(labels, 4001, 0)


def test_paired_interval_is_students_t():
    result = paired([0.70, 0.74, 0.66], [0.50, 0.52, 0.51])
    diffs = np.array([0.20, 0.22, 0.15])
    half = 4.302652729911275 * diffs.std(ddof=1) / math.sqrt(3)  # t(0.975, 2)
    assert result.mean == pytest.approx(diffs.mean())
    assert (result.low, result.high) == pytest.approx((diffs.mean() - half, diffs.mean() + half))
    assert result.verdict == "better"
    assert paired([0.5, 0.6], [0.6, 0.5]).verdict == "not shown"
    assert paired([0.5, 0.5, 0.5], [0.6, 0.61, 0.62]).verdict == "worse"
    assert paired([0.7], [0.5]).verdict == "one draw"


def test_dry_run_and_bad_input_are_one_line(tmp_path):
    result = script("--dry_run")
    assert result.returncode == 0 and result.stdout.startswith("4 pretraining runs, ")
    assert "at 100 labels" in result.stdout and "tfidf_logreg" in result.stdout
    for args, message in [(("--study=nope.gin",), "does not exist"),
                          (("--dry_run", "--gin=families_study.draws = 0"), "draw at least"),
                          (("--dry_run", "--gin=families_study.labels = (5,)"), "outside"),
                          (("--dry_run", "--gin=families_study.probed = ['x']"),
                           "not in families_study.models")]:
        result = script(f"--root={tmp_path}", *args)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and message in result.stderr
    result = script(f"--root={tmp_path}", "--data=/nonexistent")
    assert result.returncode == 2 and "missing" in result.stderr and "--data" in result.stderr
    assert not (tmp_path / "pretrain").exists()


def test_a_family_finetune_setting_reaches_its_recipe_and_a_bad_one_is_one_line():
    """finetune.pooling (or any Recipe setting) passes through families_study.finetune to
    every fine-tuning run of the family; a bad value fails when the study loads."""
    from families_study.config import StudyError
    from families_study.curve import _recipe

    bert = "'bert': {'optimizer': 'adamw', 'max_seq_length': 64, 'pooling': '%s'}"
    study = load_study(CPU, ["families_study.finetune = {%s}" % (bert % "mean")])
    recipe = _recipe("bert", study.finetune["bert"], 1e-4, 400, "pretrained", 0,
                     study.min_steps, study.min_epochs, ["a", "b"])
    assert recipe.pooling == "mean" and recipe.max_seq_length == 64
    assert load_study(CPU).finetune["bert"].get("pooling") is None  # the default: [CLS]
    with pytest.raises(StudyError) as refused:
        load_study(CPU, ["families_study.finetune = {%s}" % (bert % "max")])
    assert "\n" not in str(refused.value)
    assert "families_study.finetune['bert']: finetune.pooling is 'max': choose one of cls, " \
           "mean" in str(refused.value)


def test_a_root_that_is_a_file_or_holds_no_runs_is_one_line_and_writes_nothing(tmp_path,
                                                                              capsys):
    """--root=FILE was a raw NotADirectoryError; --report_only on a root without runs a raw
    RunError, after it had written data/ and report/ there. (The script's main, in this
    process: test_dry_run_and_bad_input_are_one_line runs it as a process.)"""
    import importlib.util

    spec = importlib.util.spec_from_file_location("families_script",
                                                  REPO / "scripts" / "families.py")
    families = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(families)
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    empty = tmp_path / "empty"
    empty.mkdir()
    for args, message in [((f"--root={notes}",), f"--root={notes} is a file: "),
                          ((f"--root={notes}/study",), f"lies under the file {notes}: "),
                          ((f"--root={empty}", "--report_only", "--quick"),
                           f"--report_only: {empty} holds none of the study's ")]:
        capsys.readouterr()
        assert families.main(list(args)) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("families.py: error: "), err
        assert message in err, err
    assert notes.read_text() == "mine" and list(empty.iterdir()) == []


def test_corpus_split_holds_out_every_20th_item():
    lines = [f"Title {i}. Body {i} here." for i in range(40)]
    kept, held = data_lib.split_corpus(lines)
    assert held == "Title 19.\nBody 19 here.\n\nTitle 39.\nBody 39 here.\n"  # bert format
    assert len(kept.split("\n\n")) == 38 and "Title 19." not in kept


def test_flops_count():
    from types import SimpleNamespace

    bert = SimpleNamespace(vocab_size=1024, transformer=SimpleNamespace(
        hidden_size=128, mlp_dim=512, num_layers=2))
    per_step = training_flops("bert", bert, 64, 64, 1)
    macs = 2 * (4 * 128**2 + 2 * 128 * 512 + 2 * 64 * 128) + 0.15 * (128 * 1024 + 128**2)
    assert per_step == pytest.approx(6 * macs * 64 * 64) and 10.9e9 < per_step < 11.1e9
    assert training_flops("gpt", bert, 64, 64, 1) > per_step


def fake_study(root: pathlib.Path, draws: int = 3):
    """The CPU study's plan with files written as its runs would, accuracies chosen here."""
    study = load_study(CPU, [f"families_study.draws = {draws}"])
    plan = make_plan(study)
    transformer = {"hidden_size": 32, "mlp_dim": 64, "num_layers": 2, "num_heads": 2}
    elmo = {"char_filters": [[1, 4]], "max_chars": 50, "char_embed_dim": 4, "num_highway": 1,
            "proj_size": 8, "cell_size": 16, "num_layers": 2, "vocab_size": 50}
    for p in plan.pretraining:
        w = root / p.workdir
        w.mkdir(parents=True)
        config = elmo if p.family == "elmo" else {"vocab_size": 64, "transformer": transformer}
        (w / "model.json").write_text(json.dumps({
            "config": config, "data": {"batch_size": 8}, "objective": "x",
            "tokenizer": {"vocab_size": 64}}))
        (w / "metrics.jsonl").write_text("".join(json.dumps(
            {"step": s, "loss": 5.0 - s / 10, "mlm_loss": 5.0, "seq_length": 16}) + "\n"
            for s in (1, 2)))
        (w / "heldout.json").write_text(json.dumps(
            {"target": "t", "accuracy": 0.1, "loss": 4.0, "unigram_accuracy": 0.05,
             "unigram_loss": 5.0, "unigram_token": "the"}))
        (w / "study.json").write_text(json.dumps({"seconds": 10.0}))
    rng = np.random.default_rng(0)
    accuracy = {}
    for point in [*plan.points, *plan.baselines]:
        accuracy[point.workdir] = float(rng.uniform(0.25, 0.9))
        record = {"accuracy": accuracy[point.workdir], "seconds": 1.0,
                  "learning_rate": 3e-4, "heldout_accuracy": 0.5}
        (root / point.workdir).mkdir(parents=True)
        (root / point.workdir / "study.json").write_text(json.dumps(record))
    for family in ("bert", "gpt", "elmo"):
        for init in ("pretrained", "random"):
            w = root / "senses" / f"{family}-{init}"
            w.mkdir(parents=True)
            (w / "senses.json").write_text(json.dumps(
                {"layers": ["token", "layer 1"], "separation": [0.0, 0.1],
                 "separation_cue_before": [0.0, 0.2]}))
    return plan, accuracy


def read_csv(path):
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def point_dir(row: dict) -> str:
    """The plan's name of a CSV row's approach, as in its points' directories."""
    return {"fine-tuned": "finetuned", "feature-based": "features"}[row["approach"]]


def test_tables_are_recomputed_from_the_runs_files(tmp_path):
    plan, accuracy = fake_study(tmp_path)
    tables.write_report(plan, tmp_path)
    rows = read_csv(tmp_path / "report" / "learning_curve.csv")
    assert list(rows[0]) == tables.CURVE_CSV
    assert len(rows) == len(plan.rows()) == 4 * 4 + 2 * 4 + 2  # probes; BERT, GPT; LTR, ELMo
    for row in rows:
        n = int(row["labels"])
        assert row["approach"] in ("fine-tuned", "feature-based")  # the CSV's words
        arms = {init: [accuracy[f"curve/{row['family']}-{point_dir(row)}/{init}/n={n}/"
                                f"draw={d}"] for d in range(3)] for init in ("pretrained",
                                                                            "random")}
        diffs = np.subtract(arms["pretrained"], arms["random"])
        half = 4.302652729911275 * diffs.std(ddof=1) / math.sqrt(3)
        assert float(row["pretrained_mean"]) == pytest.approx(np.mean(arms["pretrained"]))
        assert float(row["random_mean"]) == pytest.approx(np.mean(arms["random"]))
        assert float(row["diff_mean"]) == pytest.approx(diffs.mean())
        assert float(row["diff_ci_low"]) == pytest.approx(diffs.mean() - half)
        assert float(row["diff_ci_high"]) == pytest.approx(diffs.mean() + half)
        bow = np.mean([accuracy[f"curve/bow-tfidf_logreg/n={n}/draw={d}"] for d in range(3)])
        assert float(row["bow_logreg"]) == pytest.approx(bow) and row["draws"] == "3"
    comparisons = read_csv(tmp_path / "report" / "comparisons.csv")
    assert list(comparisons[0]) == tables.COMPARISONS_CSV
    objectives = [c for c in comparisons if c["b"] == "bert_ltr"]
    assert [(c["approach"], c["labels"]) for c in objectives] == [
        ("feature-based", n) for n in ("100", "400", "1600", "4000")] + [("fine-tuned", "400")]
    for c in comparisons:  # each a paired difference of the two sides' draws
        n, approach = int(c["labels"]), point_dir(c)
        a = [accuracy[f"curve/{c['a']}-{approach}/pretrained/n={n}/draw={d}"] for d in range(3)]
        b = ([accuracy[f"curve/{c['b']}-{approach}/pretrained/n={n}/draw={d}"]
              for d in range(3)] if c["b"] == "bert_ltr" else
             [accuracy[f"curve/bow-tfidf_logreg/n={n}/draw={d}"] for d in range(3)])
        diffs = np.subtract(a, b)
        half = 4.302652729911275 * diffs.std(ddof=1) / math.sqrt(3)
        assert float(c["diff_mean"]) == pytest.approx(diffs.mean())
        assert float(c["diff_ci_low"]) == pytest.approx(diffs.mean() - half)
    assert sum(c["b"] == "tfidf_logreg" for c in comparisons) == 4 + 4 + 1 + 1
    # change one point's file: the table follows it
    point = "curve/gpt-features/random/n=100/draw=0"
    (tmp_path / point / "study.json").write_text(json.dumps({"accuracy": 0.0}))
    tables.write_report(plan, tmp_path)
    row = next(r for r in read_csv(tmp_path / "report" / "learning_curve.csv")
               if (r["family"], r["approach"], r["labels"]) == ("gpt", "feature-based", "100"))
    expected = np.mean([0.0] + [accuracy[point.replace("draw=0", f"draw={d}")]
                                for d in (1, 2)])
    assert float(row["random_mean"]) == pytest.approx(expected)
    for name in ("learning_curve.md", "comparisons.md", "selection.md", "pretraining.md",
                 "polysemy.md"):
        assert (tmp_path / "report" / name).is_file()
    pre = read_csv(tmp_path / "report" / "pretraining.csv")
    assert math.isclose(float(pre[0]["tflops"]) * 1e12, training_flops(
        "bert", tables._config(json.loads((tmp_path / plan.pretraining[0].workdir /
                                           "model.json").read_text())), 8, 16, 1600))
    # a row with an unfinished draw is left out, not computed from fewer draws
    (tmp_path / point / "study.json").unlink()
    tables.write_report(plan, tmp_path)
    assert len(read_csv(tmp_path / "report" / "learning_curve.csv")) == len(rows) - 1


def test_a_killed_study_resumes_where_it_stopped(tmp_path, monkeypatch):
    """Re-running skips every point whose study.json (written last) is there and runs the
    rest, a point whose workdir exists without that record (killed mid-run) included."""
    from families_study import curve, execute, senses

    plan, _ = fake_study(tmp_path, draws=1)
    everything = [*plan.baselines, *plan.points]
    finished = set()
    for n, point in enumerate(everything):
        if n % 3:  # every third point was killed after writing other files
            (tmp_path / point.workdir / "study.json").unlink()
        else:
            finished.add(point.workdir)
    calls = []

    def fake(kind):
        def run(*args, **kwargs):
            calls.append(kind)
            return {"accuracy": 0.5}
        return run

    monkeypatch.setattr(curve, "fine_tuned", fake("finetuned"))
    monkeypatch.setattr(curve, "cached_features", fake("features"))
    monkeypatch.setattr(curve, "probed", fake("probe"))
    monkeypatch.setattr(curve, "bag_of_words", fake("bow"))
    monkeypatch.setattr(execute, "_draw", lambda *args: None)
    monkeypatch.setattr(senses, "run_senses", lambda *args: calls.append("senses"))
    monkeypatch.setattr(execute, "use_compilation_cache", lambda root: None)
    study = load_study(CPU, ["families_study.draws = 1"])
    data = data_lib.StudyData(*(tmp_path / f"d{i}" for i in range(4)))
    logged = []
    execute.execute(plan, study, tmp_path, data, logged.append)
    todo = [p for p in everything if p.workdir not in finished]
    kinds = collections.Counter("bow" if not hasattr(p, "approach") else p.approach
                                for p in todo)
    assert collections.Counter(c for c in calls if c != "senses") == {
        "bow": kinds["bow"], "finetuned": kinds["finetuned"], "features": kinds["features"],
        "probe": kinds["features"]}
    assert all((tmp_path / p.workdir / "study.json").is_file() for p in everything)
    calls.clear()
    execute.execute(plan, study, tmp_path, data, logged.append)
    assert [c for c in calls if c != "senses"] == []


def study_process(root, patch, *args, env=None):
    """scripts/families.py --root=ROOT --quick ARGS as a user starts it (its `__main__`), in a
    session of its own (a terminal's foreground group), with `patch` (Python, run first on
    families_study.execute) standing in for what would take minutes."""
    source = "\n".join(["import runpy, sys", "sys.path.insert(0, 'scripts')",
                        "from families_study import execute", patch,
                        "sys.argv = ['scripts/families.py', *sys.argv[1:]]",
                        "runpy.run_path('scripts/families.py', run_name='__main__')"])
    return subprocess.Popen([sys.executable, "-c", source, f"--root={root}", "--quick", *args],
                            cwd=REPO, env=env or process_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


# A pretraining run that stops as bertjax-train does on a signal: it saves (a second while
# it saves would end it unsaved), says where it stopped and exits 0. It notes what it got.
FAKE_TRAIN = """
import pathlib, signal, sys, time
workdir, log = sys.argv[1], pathlib.Path(sys.argv[2])
got = []
for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, lambda s, frame: got.append(signal.Signals(s).name))
with log.open("a") as f:
    f.write(f"start {workdir}\\n")
deadline = time.time() + 120
while not got and time.time() < deadline:
    time.sleep(0.05)
time.sleep(1.0)
with log.open("a") as f:
    f.write(f"stopped {workdir} {','.join(got)}\\n")
print(f"bertjax-train: stopped at step 1 ({got[0]}): the checkpoint is saved", file=sys.stderr)
"""


def test_ctrl_c_stops_the_study_at_once_and_the_run_under_way_saves(tmp_path, agnews_dir):
    """Ctrl-C went on to pretrain the five models after the interrupted one (2 min 53 s), then
    blamed that run with exit status 2."""
    import os
    import signal
    import time

    root, log = tmp_path / "study", tmp_path / "runs.log"
    study = study_process(root, f"execute.train_command = lambda run, root, data: [sys.executable"
                                f", '-c', {FAKE_TRAIN!r}, str(root / run.workdir), {str(log)!r}]")
    try:
        deadline = time.time() + 300
        while not (log.exists() and log.read_text().startswith("start")):
            assert study.poll() is None and time.time() < deadline, study.communicate()
            time.sleep(0.05)
        os.killpg(study.pid, signal.SIGINT)  # a terminal's Ctrl-C: its whole foreground group
        _, err = study.communicate(timeout=60)
    finally:
        if study.poll() is None:
            os.killpg(study.pid, signal.SIGKILL)
    first = root / "pretrain" / "bert"
    # one run started, and it got the signal once: it saved, and no other started
    assert log.read_text().splitlines() == [f"start {first}", f"stopped {first} SIGINT"]
    assert study.returncode == 130, err[-3000:]
    assert err.strip().splitlines() == [
        "families.py: interrupted (SIGINT): the runs under way saved where they stopped; "
        "rerun the same command to resume"]
    assert not (first / "study.json").exists()  # not recorded as finished: the rerun resumes it


def test_the_study_process_is_as_quiet_as_a_tool(tmp_path, agnews_dir):
    """TensorFlow's, CUDA's and libtpu's start-up lines when the study's own process first used
    them, and Python's "WARNING:root:" form for the runs' warnings."""
    import re

    in_process = ("def runs(*args, **kwargs):\n    import logging, jax, tensorflow\n"
                  "    from families_study import tables\n    jax.devices()\n"
                  "    logging.warning('a warning from a run')\n"
                  "    tables.write_report = lambda *args: []\n"
                  "execute.execute = runs")
    env = {k: v for k, v in process_env().items()  # a user's shell sets neither
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "JAX_PLATFORMS")}
    study = study_process(tmp_path / "study", in_process, env=env)
    _, err = study.communicate(timeout=600)
    assert study.returncode == 0, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(r"W\d{4} [\d:.]+ +\d+ \S+:\d+\] a warning from a run",
                                            lines[0]), err[-3000:]


@pytest.mark.e2e
def test_quick_study_end_to_end(tmp_path):
    """Every point runs and writes its record; the learning-curve table holds the points' own
    accuracies; a second run of the same command reruns nothing and recomputes the report
    identically from the files."""
    root = tmp_path / "study"
    result = script(f"--root={root}", "--quick", "--jobs=2", timeout=1500)
    assert result.returncode == 0, result.stderr[-3000:]
    plan = make_plan(load_study("configs/studies/families_quick.gin"))
    for point in [*plan.points, *plan.baselines]:
        record = json.loads((root / point.workdir / "study.json").read_text())
        assert 0.0 <= record["accuracy"] <= 1.0, point.workdir
    for point in plan.points:
        if point.approach == "finetuned":  # one run per rate; only the chosen keeps weights
            record = json.loads((root / point.workdir / "study.json").read_text())
            kept = [t for t in record["trials"]
                    if (root / point.workdir / t / "checkpoints").is_dir()]
            assert kept == [f"lr={record['learning_rate']:g}"], point.workdir
    report = root / "report"
    names = sorted(path.name for path in report.iterdir())
    assert {"learning_curve.md", "learning_curve.csv", "learning_curve.png", "pretraining.csv",
            "selection.md", "curves.png", "polysemy.csv", "polysemy.png"} <= set(names)
    for row in read_csv(report / "learning_curve.csv"):  # the table reads the points' files
        for init in ("pretrained", "random"):
            values = [json.loads((root / f"curve/{row['family']}-{point_dir(row)}/{init}/"
                                          f"n={row['labels']}/draw={d}/study.json"
                                  ).read_text())["accuracy"] for d in range(2)]
            assert float(row[f"{init}_mean"]) == pytest.approx(np.mean(values), rel=1e-12)
    before = {name: (report / name).read_bytes() for name in names if name.endswith(".csv")}
    shutil.rmtree(report)
    again = script(f"--root={root}", "--quick")  # resumes: every run finished, none runs again
    assert again.returncode == 0, again.stderr[-2000:]
    ran = [line for line in again.stdout.splitlines()
           if any(f"] {step} " in line for step in ("pretrain", "probe", "fine-tune", "senses"))]
    assert ran == []
    assert {name: (report / name).read_bytes() for name in before} == before


@pytest.mark.e2e
def test_larger_bert_plan_fits_its_tpu_target():
    """bertjax-compile on the larger study's BERT (BERT-small, 256 x 128, TPU v5e-16)."""
    pytest.importorskip("libtpu", reason="bertjax-compile needs libtpu: pip install '.[tpu]'")
    study = load_study("configs/studies/families_large.gin")
    bert = next(p for p in make_plan(study).pretraining if p.model == "bert")
    result = subprocess.run(compile_command(bert, study), cwd=REPO, env=process_env(),
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "v5e:4x4" in result.stdout and " yes " in result.stdout
