"""The sweep script expands the cartesian product of bindings into distinct workdirs, and the
declared presets into pretraining, fine-tuning from it, and a report."""

import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_dry_run_lists_every_point(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "scripts/sweep.py",
            "--gin_file=configs/experiments/bert_tiny_cpu.gin",
            f"--root={tmp_path}",
            "--sweep=NSP=True,False",
            "--sweep=bert_pretraining_source.whole_word_masking=True,False",
            "--dry_run",
            "--noprogress",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    *lines, report = result.stdout.splitlines()
    assert len(lines) == 4 and "bertjax.cli.report" in report
    workdirs = {line.split("--workdir=")[1].split()[0] for line in lines}
    assert len(workdirs) == 4
    assert all("--noprogress" in line and "--gin.NSP=" in line for line in lines)


def test_bad_axis_is_one_line(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "scripts/sweep.py",
            "--gin_file=x.gin",
            f"--root={tmp_path}",
            "--sweep=NSP",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0 and "is not NAME=VALUE1,VALUE2" in result.stderr


def dry_run(*args):
    result = subprocess.run([sys.executable, "scripts/sweep.py", *args, "--dry_run"], cwd=REPO,
                            capture_output=True, text=True, check=True)
    return [line.split() for line in result.stdout.splitlines()]


def flag(cmd, name):
    return next(arg.split("=", 1)[1] for arg in cmd if arg.startswith(f"--{name}="))


@pytest.mark.parametrize("preset, pretrainings, points", [
    ("bert_table5", 3, ["mlm_nsp", "no_nsp", "ltr_no_nsp", "ltr_no_nsp_bilstm"]),
    ("bert_table6", 4, ["L=1,H=64,A=2", "L=2,H=128,A=2", "L=4,H=128,A=4", "L=4,H=256,A=4"]),
    ("gpt_table5", 1, ["transformer_aux_lm", "no_aux_lm", "no_pretraining"]),
    ("elmo_table2", 1, ["last_only", "all_lambda_1", "all_lambda_0.001"]),
])
def test_presets_pretrain_then_finetune_from_it_then_report(tmp_path, preset, pretrainings,
                                                            points):
    cmds = dry_run(f"--preset={preset}", f"--root={tmp_path}")
    tools = [cmd[2] for cmd in cmds]
    assert tools.count("bertjax.cli.train") == pretrainings
    assert tools.count("bertjax.cli.finetune") == len(points) and tools[-1] == "bertjax.cli.report"
    pretrained = set()
    for cmd in cmds:
        if cmd[2] == "bertjax.cli.train":
            pretrained.add(flag(cmd, "workdir"))
        elif cmd[2] == "bertjax.cli.finetune":  # its pretraining ran before it
            assert flag(cmd, "init") in pretrained and flag(cmd, "train").endswith("train.tsv")
    finetuned = [f"{tmp_path}/finetune/{p}" for p in points]
    assert [flag(c, "workdir") for c in cmds if c[2] == "bertjax.cli.finetune"] == finetuned
    assert cmds[-1][3:] == [*finetuned, f"--out={tmp_path}/report"]


def test_table5_ablations(tmp_path):
    cmds = {flag(c, "workdir").removeprefix(f"{tmp_path}/"): " ".join(c)
            for c in dry_run("--preset=bert_table5", f"--root={tmp_path}")[:-1]}
    assert "--gin.NSP=False" in cmds["pretrain/no_nsp"]
    assert "bert_ltr_tiny_cpu.gin" in cmds["pretrain/ltr_no_nsp"]
    assert "bert_tiny_cpu.gin" in cmds["pretrain/base"] and "NSP" not in cmds["pretrain/base"]
    assert "--gin.finetune.bilstm=True" in cmds["finetune/ltr_no_nsp_bilstm"]
    assert f"--init={tmp_path}/pretrain/ltr_no_nsp" in cmds["finetune/ltr_no_nsp_bilstm"]
    assert "bilstm" not in cmds["finetune/ltr_no_nsp"]
