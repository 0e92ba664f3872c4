"""The families study's wiring (scripts/families.py): the plan has every cell of every table
with distinct seeds, the derived data are what docs/families.md says, the tables are
recomputed from the runs' own files with spreads over their seeds, bad input is one line. The
end-to-end tier runs the quick study whole and compiles the larger BERT for its TPU target.
No test asserts a research result."""

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
from families_study.execute import compile_command, train_command  # noqa: E402
from families_study.flops import training_flops  # noqa: E402
from families_study.plan import make_plan  # noqa: E402

from tests.process_env import process_env  # noqa: E402

CPU = "configs/studies/families_cpu.gin"


def script(*args, timeout=600):
    return subprocess.run([sys.executable, "scripts/families.py", *args], cwd=REPO,
                          env=process_env(), capture_output=True, text=True, timeout=timeout)


def test_plan_has_every_cell_and_distinct_seeds():
    study = load_study(CPU)
    plan = make_plan(study)
    for task in ("agnews", "qnli5"):
        cells = [d for d in plan.downstream if d.task == task and d.variant == ""
                 and d.model in ("bert", "gpt", "elmo")]
        assert len(cells) == 3 * 2 * 2 * study.seeds  # family x init x approach x seed
        assert {d.seed for d in cells} == set(range(study.seeds))
    assert len({d.workdir for d in plan.downstream}) == len(plan.downstream)
    assert {name: len(rows) for name, rows in plan.tables.items()} == {
        "bert_table5": 4, "bert_table6": 3, "gpt_table5": 3, "elmo_table2": 3}
    pretrained = {p.workdir for p in plan.pretraining}
    assert all(d.pretraining.workdir in pretrained for d in plan.downstream)
    # the families' models pretrain once per seed, each with its own seed
    seeds = {p.seed for p in plan.pretraining if p.model == "gpt"}
    assert seeds == {0, 1, 2}
    commands = {p.seed: train_command(p, pathlib.Path("/r"), data_lib.StudyData(
        *(pathlib.Path(f"/d/{i}") for i in range(6)))) for p in plan.pretraining
        if p.model == "gpt"}
    assert {c for cmd in commands.values() for c in cmd if c.startswith("--gin.SEED=")} == {
        "--gin.SEED=0", "--gin.SEED=1", "--gin.SEED=2"}
    assert all("--gin.NUM_STEPS=400" in cmd and "--gin.CORPUS='/d/0'" in cmd
               for cmd in commands.values())
    # an ablation's single pretraining serves its downstream seeds, which still differ
    nsp = [d for d in plan.downstream if d.model == "bert_nsp"]
    assert {d.seed for d in nsp} == {0, 1, 2} and {d.pretraining.seed for d in nsp} == {0}
    # shared runs run once: Table 5's No NSP row is the families table's BERT
    assert plan.tables["bert_table5"][1].cell == "bert-pretrained-finetuned"


def test_dry_run_and_bad_input_are_one_line(tmp_path):
    result = script("--dry_run")
    assert result.returncode == 0 and result.stdout.startswith("13 pretraining runs, ")
    for args, message in [(("--study=nope.gin",), "does not exist"),
                          (("--dry_run", "--gin=families_study.seeds = 0"), "at least one seed"),
                          (("--dry_run", "--gin=families_study.tasks = ['squad']"),
                           "unknown tables or tasks")]:
        result = script(f"--root={tmp_path}", *args)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and message in result.stderr
    result = script(f"--root={tmp_path}", "--data=/nonexistent", "--gin=families_study.seeds=1")
    assert result.returncode == 2 and "missing" in result.stderr and "--data" in result.stderr
    assert not (tmp_path / "pretrain").exists()


SQUAD = {"version": "v2.0", "data": [{"title": "T", "paragraphs": [
    {"context": f"Alpha {p} is here. The answer {p} lies in Rome. A third sentence {p} ends.",
     "qas": [{"id": f"q{p}", "question": f"Where is answer {p}?", "is_impossible": False,
              "answers": [{"text": "Rome", "answer_start": 36 + 2 * len(str(p))}]},
             {"id": f"u{p}", "question": "Unanswerable?", "is_impossible": True,
              "answers": []}]} for p in range(6)]}]}


def test_qnli_pairs_from_squad():
    train, dev = data_lib.qnli_pairs(SQUAD)
    assert (len(train), len(dev)) == (8, 4)  # paragraphs 2 and 5 are dev; 2 pairs each
    for _, sentence, label in train + dev:
        assert ("Rome" in sentence) == (label == "entailment")
    assert [y for _, _, y in train].count("entailment") == 4
    assert data_lib.qnli_pairs(SQUAD) == (train, dev)


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


def fake_study(root: pathlib.Path, seeds: int = 2):
    """A quick study's plan with files written as its runs would, accuracies chosen here."""
    study = load_study("configs/studies/families_quick.gin",
                       [f"families_study.seeds = {seeds}"])
    plan = make_plan(study)
    transformer = {"hidden_size": 32, "mlp_dim": 64, "num_layers": 2, "num_heads": 2}
    elmo = {"char_filters": [[1, 4]], "max_chars": 50, "char_embed_dim": 4, "num_highway": 1,
            "proj_size": 8, "cell_size": 16, "num_layers": 2, "vocab_size": 50}
    for p in plan.pretraining:
        w = root / p.workdir
        w.mkdir(parents=True)
        config = elmo if p.family == "elmo" else {"vocab_size": 64, "transformer": transformer}
        (w / "model.json").write_text(json.dumps({"config": config, "data": {"batch_size": 8},
                                                  "objective": "x"}))
        (w / "metrics.jsonl").write_text("".join(json.dumps(
            {"step": s, "loss": 5.0 - s / 10, "mlm_loss": 5.0, "seq_length": 16}) + "\n"
            for s in (1, 2)))
        (w / "heldout.json").write_text(json.dumps(
            {"target": "t", "accuracy": 0.1 + p.seed / 100, "loss": 4.0, "unigram_accuracy": 0.05,
             "unigram_loss": 5.0, "unigram_token": "the"}))
        (w / "study.json").write_text(json.dumps({"seconds": 10.0}))
    rng = np.random.default_rng(0)
    accuracy = {}
    for d in plan.downstream:
        w = root / d.workdir
        w.mkdir(parents=True)
        accuracy[d.workdir] = float(rng.uniform(0.25, 0.9))
        (w / "metrics.jsonl").write_text(json.dumps({"step": 4, "loss": 1.0}) + "\n")
        final = {"accuracy": accuracy[d.workdir]}
        (w / "eval_results.json").write_text(json.dumps({"best": final, "final": final}))
    for family in ("bert", "gpt", "elmo"):
        for init in ("pretrained", "random"):
            for seed in range(seeds):
                w = root / "senses" / f"{family}-{init}" / f"seed={seed}"
                w.mkdir(parents=True)
                (w / "senses.json").write_text(json.dumps(
                    {"layers": ["token", "layer 1"], "separation": [0.0, 0.1 * (seed + 1)],
                     "separation_cue_before": [0.0, 0.2]}))
    return plan, accuracy


def read_csv(path):
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_tables_are_recomputed_from_the_runs_files(tmp_path):
    plan, accuracy = fake_study(tmp_path)
    tables.write_report(plan, tmp_path, ["agnews", "qnli5"])
    rows = {(r["family"], r["approach"]): r
            for r in read_csv(tmp_path / "report" / "families_agnews.csv")}
    assert len(rows) == 6
    for (family, approach), row in rows.items():
        for init in ("pretrained", "random"):
            values = [accuracy[f"runs/agnews/{family}-{init}-{approach}/seed={s}"]
                      for s in range(2)]
            assert float(row[f"{init}_mean"]) == pytest.approx(np.mean(values))
            assert float(row[f"{init}_std"]) == pytest.approx(np.std(values, ddof=1))
        gain = float(row["pretrained_mean"]) - float(row["random_mean"])
        assert float(row["gain"]) == pytest.approx(gain)
    senses = read_csv(tmp_path / "report" / "polysemy.csv")
    assert float(senses[1]["separation_std"]) == pytest.approx(np.std([0.1, 0.2], ddof=1))
    # change one run's file: the table follows it
    run = tmp_path / "runs/agnews/gpt-random-features/seed=0/eval_results.json"
    run.write_text(json.dumps({"final": {"accuracy": 0.0}}))
    tables.write_report(plan, tmp_path, ["agnews"])
    row = {r["family"] + r["approach"]: r for r in read_csv(
        tmp_path / "report" / "families_agnews.csv")}["gptfeatures"]
    expected = np.mean([0.0, accuracy["runs/agnews/gpt-random-features/seed=1"]])
    assert float(row["random_mean"]) == pytest.approx(expected)
    for name in ("bert_table5", "bert_table6", "gpt_table5", "elmo_table2", "pretraining"):
        assert (tmp_path / "report" / f"{name}.md").is_file()
    pre = read_csv(tmp_path / "report" / "pretraining.csv")
    assert float(pre[0]["accuracy_mean"]) == pytest.approx(0.105)  # seeds 0 and 1
    assert math.isclose(float(pre[0]["tflops"]) * 1e12, training_flops(
        "bert", tables._config(json.loads((tmp_path / plan.pretraining[0].workdir /
                                           "model.json").read_text())), 8, 16, 6))


def test_a_killed_study_resumes_where_it_stopped(tmp_path, monkeypatch):
    """Re-running skips every run whose study.json (written last) is there and runs the rest,
    a run whose workdir exists without that marker (killed mid-run) included."""
    from families_study import downstream, execute, senses

    plan, _ = fake_study(tmp_path)
    finished = set()
    for n, d in enumerate(plan.downstream):
        if n % 3 == 0:  # every third run finished; the others were killed after writing files
            (tmp_path / d.workdir / downstream.DONE).write_text(
                json.dumps({"results": {"accuracy": 0.5}, "seconds": 1.0}))
            finished.add(d.workdir)
    calls = []

    def fake_run(job, study, init, data, workdir):
        calls.append(job.workdir)
        return {"accuracy": 0.5}

    def no_process(*args, **kwargs):
        raise AssertionError("a finished pretraining run was started again")

    monkeypatch.setattr(downstream, "_finetune", fake_run)
    monkeypatch.setattr(downstream, "_features", fake_run)
    monkeypatch.setattr(senses, "run_senses", lambda *args: calls.append("senses"))
    monkeypatch.setattr(execute.subprocess, "run", no_process)
    monkeypatch.setattr(execute.interrupts, "start", no_process)
    monkeypatch.setattr(execute, "use_compilation_cache", lambda root: None)
    study = load_study("configs/studies/families_quick.gin", ["families_study.seeds = 2"])
    data = data_lib.StudyData(*(tmp_path / f"d{i}" for i in range(6)))
    logged = []
    execute.execute(plan, study, tmp_path, data, logged.append)
    expected = [d.workdir for d in plan.downstream if d.workdir not in finished]
    assert [c for c in calls if c != "senses"] == expected and finished
    assert [m.split(": ")[1] for m in logged if m.startswith("downstream")] == expected
    assert all((tmp_path / w / downstream.DONE).is_file() for w in expected)
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


def test_ctrl_c_stops_the_study_at_once_and_the_run_under_way_saves(tmp_path, agnews_dir,
                                                                    squad_dev):
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
    first = root / "pretrain" / "bert" / "seed=0"
    # one run started, and it got the signal once: it saved, and no other started
    assert log.read_text().splitlines() == [f"start {first}", f"stopped {first} SIGINT"]
    assert study.returncode == 130, err[-3000:]
    assert err.strip().splitlines() == [
        "families.py: interrupted (SIGINT): the runs under way saved where they stopped; "
        "rerun the same command to resume"]
    assert not (first / "study.json").exists()  # not recorded as finished: the rerun resumes it


def test_the_study_process_is_as_quiet_as_a_tool(tmp_path, agnews_dir, squad_dev):
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
    """Every cell runs and writes its files; the table holds the runs' own accuracies; a second
    run of the same command reruns nothing and recomputes the report identically from them."""
    root = tmp_path / "study"
    result = script(f"--root={root}", "--quick", "--jobs=2", timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    plan = make_plan(load_study("configs/studies/families_quick.gin"))
    for d in plan.downstream:
        results = json.loads((root / d.workdir / "eval_results.json").read_text())
        assert 0.0 <= results["final"]["accuracy"] <= 1.0, d.workdir
    for p in plan.pretraining:
        scored = json.loads((root / p.workdir / "heldout.json").read_text())
        assert p.model == "bert_ltr" or 0.0 <= scored["unigram_accuracy"] <= 1.0
    report = root / "report"
    names = sorted(path.name for path in report.iterdir())
    assert {"families_agnews.md", "families_qnli5.csv", "polysemy.csv", "curves.png",
            "families.png", "polysemy.png", "gpt_table5.md"} <= set(names)
    for row in read_csv(report / "families_agnews.csv"):  # the table reads the runs' files
        for init in ("pretrained", "random"):
            run = root / f"runs/agnews/{row['family']}-{init}-{row['approach']}/seed=0"
            final = json.loads((run / "eval_results.json").read_text())["final"]
            assert float(row[f"{init}_mean"]) == pytest.approx(final["accuracy"], rel=1e-12)
            assert float(row[f"{init}_std"]) == 0.0  # one seed
    before = {name: (report / name).read_bytes() for name in names if name.endswith(".csv")}
    shutil.rmtree(report)
    again = script(f"--root={root}", "--quick")  # resumes: every run finished, none runs again
    assert again.returncode == 0, again.stderr[-2000:]
    ran = [line for line in again.stdout.splitlines()
           if any(f"] {step} " in line for step in ("pretrain", "downstream", "senses"))]
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
