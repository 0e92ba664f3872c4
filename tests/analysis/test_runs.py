"""Reading run workdirs back for bertjax-report: final metrics, gin settings, swept columns."""

import json
import math

import pytest

from bertjax.analysis.report import markdown, table
from bertjax.analysis.runs import RunError, load_run, name_bindings, read_gin

pytestmark = pytest.mark.unit  # the unit tier: make test-unit


def make_run(path, rows, gin="", results=None, init=None, model_config=None):
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "config.gin").write_text(gin)
    if results is not None:
        (path / "eval_results.json").write_text(json.dumps(results))
    if init is not None:
        (path / "init.txt").write_text(f"{init}\n")
    if model_config is not None:
        (path / "model.json").write_text(json.dumps({"family": "bert", "config": model_config}))
    return path


GIN = """# Macros:
# ==============================================================================
NSP = {nsp}

# Parameters for bert_pretraining:
# ==============================================================================
bert_pretraining.use_nsp = %NSP

# Parameters for train:
# ==============================================================================
train.seq_phases = \\
    ((1.0, 128),)
"""


def test_name_bindings():
    assert name_bindings("NSP=False,masking='none'") == {"NSP": "False", "masking": "'none'"}
    assert name_bindings("L=4,H=128,A=4") == {"L": "4", "H": "128", "A": "4"}
    assert name_bindings("seq_phases=((1.0, 128),),NSP=True")["seq_phases"] == "((1.0, 128),)"
    assert name_bindings("mlm_nsp") is None


def test_final_metrics_and_pretraining_columns(tmp_path):
    history = [{"step": s, "loss": 8.0 - s, "mlm_loss": 2.0, "grad_norm": 1.0}
               for s in range(1, 11)]
    pre = make_run(tmp_path / "pre", history, GIN.format(nsp="True"))
    rows = [{"step": 5, "loss": 1.0}, {"step": 5, "dev_accuracy": 0.4}, {"step": 10, "loss": 0.5},
            {"step": 10, "dev_accuracy": 0.6}]
    ft = make_run(tmp_path / "ft", rows, "finetune.bilstm = False\n",
                  {"best": {"step": 10, "accuracy": 0.6}, "final": {"accuracy": 0.6}}, pre)
    final = load_run(ft).final(last=2)
    assert final["loss"] == 0.75 and final["dev_accuracy"] == 0.6 and final["steps"] == 10
    assert final["best_accuracy"] == 0.6 and "best_step" not in final
    assert final["pretrain_loss"] == -1.5  # the mean of its last two: 8 - 9 and 8 - 10
    assert math.isclose(final["pretrain_mlm_perplexity"], math.exp(2.0))
    assert "pretrain_grad_norm" not in final


def test_swept_columns_come_from_differing_gin(tmp_path):
    runs = [load_run(make_run(tmp_path / name, [{"step": 1, "loss": 1.0}], GIN.format(nsp=nsp)))
            for name, nsp in (("with", "True"), ("without", "False"))]
    assert read_gin(runs[0].path)["train.seq_phases"] == "((1.0, 128),)"
    header, rows = table(runs)
    assert header[:2] == ["run", "NSP"] and "use_nsp" not in header  # the same column once
    assert [r[:2] for r in rows] == [["with", "True"], ["without", "False"]]
    assert markdown(header, rows).splitlines()[1].startswith("|---|")


def test_bad_runs_are_one_line(tmp_path):
    with pytest.raises(RunError, match="no metrics.jsonl"):
        load_run(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{oops\n{"step": 2}\n')  # a bad line, not the last
    with pytest.raises(RunError, match="metrics.jsonl:1 is not a JSON object"):
        load_run(tmp_path)


def test_pretraining_settings_are_pretrain_columns_and_unbound_ones_take_their_value(tmp_path):
    """A fine-tuning row showed its pretraining run's settings under their own names, as if
    the fine-tuning had set them; and a setting bound in one run only (a model size override)
    was left out, though the other run used another value (its size's, in its model.json)."""
    history = [{"step": 1, "loss": 1.0}]
    small = make_run(tmp_path / "small", history,
                     GIN.format(nsp="True") + "bert_config.hidden_size = 64\n",
                     model_config={"vocab_size": 512, "transformer": {"hidden_size": 64}})
    base = make_run(tmp_path / "base", history, GIN.format(nsp="False"),
                    model_config={"vocab_size": 512, "transformer": {"hidden_size": 128}})
    runs = [load_run(make_run(tmp_path / f"ft_{pre.name}", history,
                              "finetune.learning_rate = 0.001\n", init=pre))
            for pre in (small, base)]
    header, rows = table(runs)
    assert header[:3] == ["run", "pretrain_NSP", "pretrain_hidden_size"], header
    assert [r[:3] for r in rows] == [["ft_small", "True", "64"], ["ft_base", "False", "128"]]
    header, rows = table([load_run(small), load_run(base)])
    assert header[:3] == ["run", "NSP", "hidden_size"], header
    assert [r[2] for r in rows] == ["64", "128"]
