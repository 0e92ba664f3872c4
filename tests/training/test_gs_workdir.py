"""A whole run on object storage, against a GCS emulator on loopback (tests/gcs.py): pretrain
with --workdir=gs://... on a corpus on gs://, resume, refuse a second run, fine-tune from that
workdir into another gs:// workdir with --predict, run one GLUE task from GLUE files on gs://
into a gs:// workdir, and report; nothing lands in the local directory or under /gs/.
The end-to-end tier also stops a run with SIGTERM and checks that the resumed run ends with
the parameters of an uninterrupted one."""

import json
import logging
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from bertjax import files
from bertjax.data.corpora import stdlib_documents, write_bert_format
from bertjax.training.lease import LEASE, Lease, WorkdirInUseError
from bertjax.training.metrics import read_metrics
from tests.gcs import (
    free_port,
    gcs_bucket,  # noqa: F401 - the fixture
)
from tests.in_process import run_tool
from tests.process_env import process_env
from tests.scripts.test_tpu import WHERE, _option, dry_run
from tests.training.test_faults import REPO, TINY, final_params

TOPICS = {"Sports": ["the team won the match", "a late goal decided the game",
                     "the coach praised his players", "fans cheered the champions"],
          "Business": ["shares fell on the market", "the bank raised its rates",
                       "profits rose this quarter", "investors sold the stock"]}


def pretrain_args(workdir, corpus, *bindings):
    return ["--gin_file=configs/experiments/bert_tiny_cpu.gin", f"--workdir={workdir}",
            "--noprogress", f"--gin.bert_pretraining_source.corpus='{corpus}'", *TINY, *bindings]


def steps(workdir):
    return [row["step"] for row in read_metrics(files.as_path(workdir) / "metrics.jsonl")]


@pytest.fixture(scope="module")
def corpus(gcs_bucket):  # noqa: F811 - the fixture
    """Two bert-format files on gs://, named by a glob."""
    documents = stdlib_documents("held_out")
    half = len(documents) // 2
    write_bert_format(documents[:half], f"{gcs_bucket}/corpus/a.txt")
    write_bert_format(documents[half:], f"{gcs_bucket}/corpus/b.txt")
    return f"{gcs_bucket}/corpus/*.txt"


def test_a_lease_on_gs_refuses_a_second_run_until_it_goes_stale(gcs_bucket, caplog):  # noqa: F811
    workdir = f"{gcs_bucket}/leased"
    first = Lease(workdir)
    first.acquire()
    with pytest.raises(WorkdirInUseError, match=f"^{workdir} is in use by PID {os.getpid()} "):
        Lease(workdir).acquire()
    later = Lease(workdir, timeout=0.0)  # the first stopped renewing as far as it can tell
    with caplog.at_level(logging.WARNING):
        later.acquire()
    assert "it was not renewed for" in caplog.text and f"PID {os.getpid()}" in caplog.text
    first.release()  # no longer its lease: left alone
    lease_file = files.as_path(workdir) / LEASE
    assert json.loads(lease_file.read_text())["token"] == later.record["token"]
    later.release()
    assert not lease_file.exists()


def write_topics(path):
    """A small two-topic classification TSV (16 rows)."""
    rows = [f"{text} {n}\t{label}\n" for n in range(2) for label, texts in TOPICS.items()
            for text in texts]
    files.write_text(path, "sentence\tlabel\n" + "".join(rows))
    return path


@pytest.fixture(scope="module")
def pretrained(gcs_bucket, corpus, tmp_path_factory):  # noqa: F811
    """(workdir, run directory): a run on gs:// stopped at step 2, resumed to step 3."""
    workdir, tmp_path = f"{gcs_bucket}/pretrain", tmp_path_factory.mktemp("cwd")
    first = run_tool("bertjax.cli.train", *pretrain_args(
        workdir, corpus, "--gin.NUM_STEPS=2", "--gin.train.checkpoint_every=1"), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    run = files.as_path(workdir)
    assert {p.name for p in run.iterdir()} >= {"checkpoints", "model.json", "vocab.txt",
                                               "metrics.jsonl", "tensorboard", "config.gin"}
    assert "lease.json" not in {p.name for p in run.iterdir()}
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert list(tmp_path.iterdir()) == []  # nothing under ./gs:/...

    resumed = run_tool("bertjax.cli.train", *pretrain_args(workdir, corpus, "--gin.NUM_STEPS=3"),
                       cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "steps 2 -> 3" in resumed.stdout and steps(workdir) == [1, 2, 3]
    assert list(tmp_path.iterdir()) == []
    return workdir, tmp_path


def test_pretrain_and_resume_with_workdir_and_corpus_on_gs(pretrained):
    """What the fixture checks: the run's files on gs://, none under ./gs:/, a resume."""
    workdir, _ = pretrained
    assert json.loads((files.as_path(workdir) / "model.json").read_text())["data"][
        "corpus"].startswith("gs://")


def test_a_second_run_on_a_gs_workdir_is_refused(pretrained, corpus):
    workdir, tmp_path = pretrained
    holder = Lease(workdir)  # another run holds it: refused before anything
    holder.acquire()
    try:
        refused = run_tool("bertjax.cli.train", *pretrain_args(
            workdir, corpus, "--gin.NUM_STEPS=4"), cwd=tmp_path)
    finally:
        holder.release()
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].startswith(
        f"bertjax-train: error: {workdir} is in use by PID ")
    assert steps(workdir) == [1, 2, 3]


def local_shadow(gs_path):
    """Where pathlib.Path puts a gs:// path on the local disk: /gs/BUCKET/PATH (what
    pathlib.Path(epath.Path("gs://BUCKET/PATH")) is)."""
    return pathlib.Path("/gs", gs_path.split("://", 1)[1])


def write_unlabelled(path):
    """A GLUE test split's layout: index, sentence; no label."""
    rows = [f"{i}\t{text} {i}\n" for i, text in enumerate(TOPICS["Sports"] + TOPICS["Business"])]
    files.write_text(path, "index\tsentence\n" + "".join(rows))
    return path


@pytest.mark.e2e
def test_finetune_from_a_gs_workdir_and_report_both(gcs_bucket, pretrained):  # noqa: F811
    """Fine-tuning with --predict into a gs:// workdir: the submission lands in the bucket
    (it used to go through a local /gs/BUCKET/... folder, a PermissionError for a non-root
    user, and the path printed was that local one)."""
    workdir, tmp_path = pretrained
    finetuned, topics = f"{gcs_bucket}/topics", write_topics(f"{gcs_bucket}/data/topics.tsv")
    test = write_unlabelled(f"{gcs_bucket}/data/SST-2/test.tsv")
    tuned = run_tool(
        "bertjax.cli.finetune", "--gin_file=configs/finetune/bert_classification.gin",
        f"--init={workdir}", f"--train={topics}", f"--eval={topics}", f"--workdir={finetuned}",
        f"--predict={test}", "--noprogress", "--gin.finetune.max_seq_length=32",
        "--gin.finetune.epochs=1.0", "--gin.finetune.batch_size=8",
        "--gin.finetune.eval_every=100", cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stderr
    tuned_dir = files.as_path(finetuned)
    assert {"eval_results.json", "predictions.jsonl", "init.txt", "best", "model.json",
            "submission"} <= {p.name for p in tuned_dir.iterdir()}
    assert (tuned_dir / "init.txt").read_text().strip() == workdir
    submission = (tuned_dir / "submission" / "SST-2.tsv").read_text().splitlines()
    assert submission[0] == "index\tprediction" and len(submission) == 9
    assert {row.split("\t")[1] for row in submission[1:]} <= set(TOPICS)
    assert f"wrote {finetuned}/submission/SST-2.tsv" in tuned.stderr
    assert not local_shadow(finetuned).exists()

    report = run_tool("bertjax.cli.report", finetuned, workdir,
                      f"--out={gcs_bucket}/report", "--noplot", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    table = files.as_path(f"{gcs_bucket}/report/report.md").read_text()
    assert "| topics |" in table and "| pretrain |" in table and "pretrain_steps" in table
    assert list(tmp_path.iterdir()) == []


def worker_command(workdir, corpus, *bindings):
    """The command scripts/tpu/train.sh starts on every worker of a slice (docs/tpu.md's Cloud TPU
    block), with its bertjax-train run as this interpreter's module and --distributed, which
    finds the peers of a TPU pod, given as the one-process equivalent a CPU host needs."""
    extra = [f"--gin.bert_pretraining_source.corpus='{corpus}'", "--noprogress", *TINY,
             *bindings]
    (ssh,) = dry_run("train.sh", *WHERE, "--gin-file=configs/experiments/bert_tiny_cpu.gin",
                     f"--workdir={workdir}", "--", *extra)
    words = shlex.split(_option(ssh, "command"))
    train = words[words.index("nohup") + 1:words.index(">")]
    assert train[:2] == [".venv/bin/bertjax-train", "--distributed"]
    port = free_port()
    return [sys.executable, "-m", "bertjax.cli.train", f"--coordinator_address=127.0.0.1:{port}",
            "--num_processes=1", "--process_id=0", *train[2:]]


def train_process(workdir, corpus, *bindings):
    return subprocess.Popen(worker_command(workdir, corpus, *bindings), cwd=REPO,
                            env=process_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.mark.e2e
def test_sigterm_on_gs_resumes_to_the_uninterrupted_parameters(gcs_bucket, corpus):  # noqa: F811
    """docs/tpu.md's Cloud TPU workflow on the emulator: train.sh's worker command, `train.sh
    --stop` (SIGTERM) after a checkpoint, rerun: the parameters of an uninterrupted run."""
    steps_ = "--gin.NUM_STEPS=60"  # the straight run saves only at its end
    straight = train_process(f"{gcs_bucket}/straight", corpus, steps_,
                             "--gin.train.checkpoint_every=60")
    out, err = straight.communicate(timeout=900)
    assert straight.returncode == 0, err

    workdir, bindings = f"{gcs_bucket}/stopped", (steps_, "--gin.train.checkpoint_every=5")
    stopped = train_process(workdir, corpus, *bindings)
    deadline = time.time() + 600
    while True:  # metrics reach gs:// at each checkpoint: wait for the one at step 5
        try:
            if steps(workdir) and steps(workdir)[-1] >= 5:
                break
        except FileNotFoundError:
            pass
        assert stopped.poll() is None and time.time() < deadline, stopped.communicate()
        time.sleep(0.5)
        files.filesystem(workdir).invalidate_cache()  # gcsfs caches listings: look afresh
    stopped.send_signal(signal.SIGTERM)
    out, err = stopped.communicate(timeout=600)
    assert stopped.returncode == 0 and "stopped at step" in err, err
    resumed = train_process(workdir, corpus, *bindings)
    out, err = resumed.communicate(timeout=900)
    assert resumed.returncode == 0, err
    assert steps(workdir) == list(range(1, 61))
    ours, _ = final_params(workdir, 60)
    theirs, _ = final_params(f"{gcs_bucket}/straight", 60)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.e2e  # gcsfs retries for about 40 s before it gives up
def test_an_unreachable_gs_workdir_is_one_line(tmp_path):
    """gcsfs logged about 50 lines of its retry traceback before bertjax's one line."""
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = {**process_env(), "STORAGE_EMULATOR_HOST": closed, "TENSORSTORE_GCS_HTTP_URL": closed,
           "GOOGLE_AUTH_TOKEN_FOR_TESTING": "test", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
    result = subprocess.run([sys.executable, "-m", "bertjax.cli.train",
                             "--gin_file=configs/experiments/bert_tiny_cpu.gin",
                             "--workdir=gs://unreachable/run", "--noprogress"], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert lines[0].startswith("bertjax-train: JAX backend "), lines  # the run's lease comes next
    assert len(lines) == 2, result.stderr[-3000:]  # no gcsfs traceback around the error
    assert lines[1].startswith("bertjax-train: error: gs://unreachable/run cannot be reached ")


def write_sst2(glue_dir):
    """GLUE's SST-2 layout (sentence, label 0/1) on gs://: train.tsv and dev.tsv."""
    rows = [f"{text} {n}\t{int(label == 'Sports')}\n" for n in range(2)
            for label, texts in TOPICS.items() for text in texts]
    for split in ("train", "dev"):
        files.write_text(f"{glue_dir}/SST-2/{split}.tsv", "sentence\tlabel\n" + "".join(rows))
    return glue_dir


@pytest.mark.e2e
def test_one_glue_task_with_data_and_workdir_on_gs(gcs_bucket, pretrained):  # noqa: F811
    """bertjax-glue read --glue_dir=gs://... as a local path (gs:/BUCKET/...: 'is not a
    directory') and made its runs' workdirs pathlib paths (/gs/BUCKET/...), which reached
    the bucket only through etils mapping /gs/ back."""
    workdir, tmp_path = pretrained
    glue_dir, root = write_sst2(f"{gcs_bucket}/glue_data"), f"{gcs_bucket}/glue"
    result = run_tool(
        "bertjax.cli.glue", f"--init={workdir}", f"--glue_dir={glue_dir}", "--tasks=sst2",
        f"--workdir={root}", "--noprogress", "--gin.finetune.max_seq_length=32",
        "--gin.finetune.epochs=1.0", "--gin.finetune.batch_size=8", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"results: {root}/glue_results.md" in result.stdout
    (rate,) = (files.as_path(root) / "SST-2").iterdir()
    run = rate / "seed_0"
    assert {"model.json", "checkpoints", "dev_predictions_SST-2.jsonl"} <= {
        p.name for p in run.iterdir()}
    scores = json.loads((files.as_path(root) / "glue_results.json").read_text())["scores"]
    assert list(scores) == ["SST-2"] and len(scores["SST-2"]["SST-2"]["accuracy"]) == 1
    assert not local_shadow(root).exists() and list(tmp_path.iterdir()) == []
