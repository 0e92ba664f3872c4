"""Runs that differ only by seed, summarised: groups from the workdir names, the sample
standard deviation, refusals, and bertjax-report --over_seeds writing the table and CSV."""

import csv
import io
import json

import numpy as np
import pytest

from bertjax.analysis.runs import load_run
from bertjax.analysis.seeds import seed_csv_table, seed_of, seed_summary, seed_table
from bertjax.cli.report import report

pytestmark = pytest.mark.unit  # the unit tier: make test-unit


def finetuned(path, accuracy, loss=0.5):
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text(json.dumps({"step": 10, "loss": loss}) + "\n")
    final = {"accuracy": accuracy}
    (path / "eval_results.json").write_text(json.dumps({"best": final, "final": final}))
    return path


@pytest.fixture
def cells(tmp_path):
    values = {"bert-pretrained": [0.80, 0.82, 0.84], "bert-random": [0.70, 0.75]}
    paths = []
    for cell, accuracies in values.items():
        for seed, accuracy in enumerate(accuracies):
            paths.append(finetuned(tmp_path / cell / f"seed={seed}", accuracy, loss=seed))
    return values, paths


def test_groups_means_and_sample_deviations(cells):
    values, paths = cells
    summary = seed_summary([load_run(p) for p in paths], metrics=["dev_accuracy", "loss"])
    assert list(summary) == list(values)
    for cell, accuracies in values.items():
        spread = summary[cell]["dev_accuracy"]
        assert spread.n == len(accuracies) and spread.seeds == tuple(range(len(accuracies)))
        assert spread.mean == pytest.approx(np.mean(accuracies))
        assert spread.std == pytest.approx(np.std(accuracies, ddof=1))
    header, rows = seed_table(summary, ["dev_accuracy"], digits=3)
    assert header == ["run", "seeds", "dev_accuracy"]
    assert rows[0] == ["bert-pretrained", "3", "0.820 ± 0.020"]


def test_names_with_bindings_and_one_seed(tmp_path):
    run = load_run(finetuned(tmp_path / "NSP=False,seed=7", 0.5))
    assert seed_of(run) == ("NSP=False", 7)
    summary = seed_summary([run])
    assert summary["NSP=False"]["dev_accuracy"].std == 0.0
    assert summary["NSP=False"]["dev_accuracy"].text(3) == "0.500"


def test_refusals_name_the_fix(tmp_path):
    with pytest.raises(ValueError, match="does not end in seed=N"):
        seed_of(load_run(finetuned(tmp_path / "no_seed", 0.5)))
    a = load_run(finetuned(tmp_path / "x" / "seed=1", 0.5))
    b = load_run(finetuned(tmp_path / "y" / "x,seed=1", 0.6))
    with pytest.raises(ValueError, match="seed 1 twice"):
        seed_summary([a, b])


def test_report_over_seeds_writes_table_and_csv(cells, tmp_path):
    values, paths = cells
    out = tmp_path / "report"
    text = report([str(p) for p in paths], str(out), plot=False, over_seeds=True)
    assert (out / "report.md").read_text() == text
    assert text.splitlines()[0] == "| run | seeds | steps | loss | dev_accuracy | best_accuracy |"
    assert "| bert-pretrained | 3 | 10 ± 0 | 1 ± 1 | 0.82 ± 0.02 | 0.82 ± 0.02 |" in text
    rows = list(csv.DictReader(io.StringIO((out / "report.csv").read_text())))
    by_run = {r["run"]: r for r in rows}
    assert float(by_run["bert-random"]["dev_accuracy_mean"]) == pytest.approx(0.725)
    assert float(by_run["bert-random"]["dev_accuracy_std"]) == pytest.approx(
        np.std(values["bert-random"], ddof=1))
    header, csv_rows = seed_csv_table(seed_summary([load_run(p) for p in paths]))
    assert header[:2] == ["run", "seeds"] and len(csv_rows) == 2
