"""The sweep script expands the cartesian product of bindings into distinct workdirs."""

import pathlib
import subprocess
import sys

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
    lines = result.stdout.splitlines()
    assert len(lines) == 4
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
