"""bertjax-train end to end: a tiny run, its resume, and one clear line (exit 2, workdir
untouched) for each bad input; what every tool does for a user: --help, the backend line,
a quiet start."""

import hashlib
import pathlib
import subprocess
import sys
from importlib.metadata import distribution

import pytest

import bertjax.cli.process as cli_process
from tests.in_process import run_tool
from tests.process_env import process_env

REPO = pathlib.Path(__file__).resolve().parents[2]
EXPERIMENT = "configs/experiments/bert_tiny_cpu.gin"
CONSOLE_SCRIPTS = {
    ep.name: ep.value.split(":")[0]
    for ep in distribution("bertjax").entry_points
    if ep.group == "console_scripts"
}


def run_module(module, *args):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600)


def run_cli(workdir, *bindings, gin_file=EXPERIMENT, corpus=None, cwd=REPO, process=False):
    """bertjax-train on the tiny experiment: in this process, or in its own with `process`."""
    args = [
        f"--gin_file={gin_file}",
        f"--workdir={workdir}",
        "--noprogress",
        "--gin.NUM_STEPS=2",
        "--gin.BATCH_SIZE=8",
        "--gin.VOCAB_SIZE=512",
        "--gin.bert_config.max_position_embeddings=128",
    ]
    if corpus is not None:
        args.append(f"--gin.bert_pretraining_source.corpus='{corpus}'")
    args += list(bindings)
    if not process:
        return run_tool("bertjax.cli.train", *args, cwd=cwd)
    env = process_env(8)
    return subprocess.run([sys.executable, "-m", "bertjax.cli.train", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def error_line(result, program="bertjax-train"):
    """The single `PROGRAM: error:` line; stderr holds nothing else but the backend line."""
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(f"{program}: error:")]
    others = [line for line in lines if not line.startswith(f"{program}: JAX backend")]
    assert len(errors) == 1 and others == errors, result.stderr[-3000:]
    return errors[0]


def tree_digest(path):
    digest = hashlib.sha256()
    for file in sorted(p for p in pathlib.Path(path).rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def trained(tmp_path_factory, bert_sample):
    workdir = tmp_path_factory.mktemp("run")
    result = run_cli(workdir, corpus=bert_sample)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "steps 0 -> 2" in result.stdout
    return workdir


def test_tiny_run_writes_checkpoint_tensorboard_and_metrics(trained):
    assert (trained / "checkpoints" / "2").is_dir()
    assert list((trained / "tensorboard").glob("events.out.tfevents.*"))
    assert (trained / "metrics.jsonl").read_text().count('"loss"') >= 1
    assert (trained / "vocab.txt").is_file() and (trained / "config.gin").is_file()


def test_rerun_resumes_instead_of_starting_over(trained, bert_sample, tmp_path):
    import shutil

    workdir = tmp_path / "copy"
    shutil.copytree(trained, workdir)
    result = run_cli(workdir, "--gin.NUM_STEPS=3", corpus=bert_sample)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "steps 2 -> 3" in result.stdout
    assert (workdir / "checkpoints" / "3").is_dir()


@pytest.mark.parametrize(
    "make_corpus, expected",
    [
        (lambda d: d / "missing.txt", "no such file"),
        (lambda d: (d / "empty.txt").write_text("\n\n") and d / "empty.txt", "corpus is empty"),
        (
            lambda d: (
                (d / "single.txt").write_text("One sentence.\n\nAnother one.\n")
                and d / "single.txt"
            ),
            "NSP needs documents of 2+ sentences",
        ),
    ],
    ids=["missing-corpus", "empty-corpus", "no-multi-sentence-document"],
)
def test_bad_corpus_fails_with_one_line_and_keeps_checkpoint(
    trained, tmp_path, make_corpus, expected
):
    before = tree_digest(trained / "checkpoints")
    line = error_line(run_cli(trained, corpus=make_corpus(tmp_path)))
    assert expected in line
    assert tree_digest(trained / "checkpoints") == before


def test_invalid_utf8_is_replaced_with_a_warning(tmp_path, bert_sample):
    corpus = tmp_path / "bad_bytes.txt"
    corpus.write_bytes(pathlib.Path(bert_sample).read_bytes().replace(b"the", b"th\xff\xfe", 3))
    result = run_cli(tmp_path / "run", corpus=corpus)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "bad_bytes.txt" in result.stderr and "UTF-8" in result.stderr


def test_unknown_gin_binding(trained, bert_sample):
    line = error_line(run_cli(trained, "--gin.bert_config.hiden_size=64", corpus=bert_sample))
    assert "hiden_size" in line


def test_float16_is_refused_before_anything_is_written(tmp_path, bert_sample):
    workdir = tmp_path / "fp16"
    line = error_line(run_cli(workdir, "--gin.bert_config.dtype='float16'", corpus=bert_sample))
    assert "dtype float16 trains with gradients that underflow" in line
    assert "set dtype = 'bfloat16'" in line and not workdir.exists()


def test_misspelled_config_name(trained):
    line = error_line(run_cli(trained, gin_file="configs/experiments/bert_tiny_cpuu.gin"))
    assert "bert_tiny_cpuu.gin" in line and "bert_tiny_cpu.gin" in line


def test_batch_not_divisible_by_data_parallel_devices(trained, bert_sample):
    line = error_line(run_cli(trained, "--gin.BATCH_SIZE=12", "--gin.make_mesh.num_devices=8",
                              corpus=bert_sample))
    assert "not divisible by the 8 data-parallel devices" in line


def test_checkpoint_of_another_model_size_is_refused_and_kept(trained, bert_sample):
    before = tree_digest(trained / "checkpoints")
    line = error_line(
        run_cli(trained, "--gin.NUM_STEPS=4", "--gin.bert_config.size='mini'", corpus=bert_sample)
    )
    assert "does not match the configured model" in line
    assert tree_digest(trained / "checkpoints") == before


@pytest.mark.parametrize("script", sorted(CONSOLE_SCRIPTS))
def test_help_prints_the_description_and_the_tools_flags(script):
    result = run_module(CONSOLE_SCRIPTS[script], "--help")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith(f"{script}:"), result.stdout[:300]
    assert "USAGE" not in result.stdout
    own_flag = {"bertjax-train": "--workdir", "bertjax-compile": "--jobs",
                "bertjax-prepare": "--workers", "bertjax-generate": "--prompt",
                "bertjax-embed": "--input",
                "bertjax-finetune": "--init", "bertjax-fill-mask": "--checkpoint",
                "bertjax-report": "--out", "bertjax-export": "--format",
                "bertjax-glue": "--glue_dir"}
    assert script in own_flag, f"name a flag of {script} here"
    assert own_flag[script] in result.stdout


def test_start_shows_the_backend_and_no_tensorflow_chatter(trained, bert_sample):
    result = run_cli(trained, corpus=bert_sample, process=True)  # complete: a no-op run
    assert result.returncode == 0, result.stderr[-3000:]
    assert "bertjax-train: JAX backend cpu, 8 device(s)" in result.stderr
    for chatter in ("cuda drivers", "oneDNN", "absl::InitializeLog", "cpu_feature_guard"):
        assert chatter not in result.stderr, result.stderr[-3000:]


def test_cpu_is_the_default_only_without_an_accelerator(monkeypatch):
    monkeypatch.setattr(cli_process.glob, "glob", lambda pattern: [])
    assert not cli_process.has_accelerator()
    monkeypatch.setattr(cli_process.glob, "glob",
                        lambda pattern: ["/dev/nvidia0"] if "nvidia" in pattern else [])
    assert cli_process.has_accelerator()
    monkeypatch.setattr(cli_process.glob, "glob",
                        lambda pattern: ["/dev/accel0"] if "accel" in pattern else [])
    assert cli_process.has_accelerator()


def test_misspelled_macro_is_an_error_naming_the_real_one(trained, bert_sample):
    line = error_line(run_cli(trained, "--gin.num_steps=3", corpus=bert_sample))
    assert "num_steps" in line and "did you mean NUM_STEPS" in line


def test_binding_of_another_experiment_is_an_error(trained, bert_sample):
    line = error_line(run_cli(trained, "--gin.lm_pretraining_source.corpus='x'",
                            corpus=bert_sample))
    assert "lm_pretraining_source.corpus is never read" in line


def test_gin_syntax_error_is_one_line(trained):
    line = error_line(run_cli(trained, "--gin.NUM_STEPS=("))
    assert "bad gin config" in line


@pytest.mark.parametrize("steps", ["0", "-5"])
def test_non_positive_num_steps_is_refused_and_config_gin_kept(trained, bert_sample, steps):
    before = (trained / "config.gin").read_bytes()
    line = error_line(run_cli(trained, f"--gin.NUM_STEPS={steps}", corpus=bert_sample))
    assert "NUM_STEPS" in line and "positive" in line
    assert (trained / "config.gin").read_bytes() == before


def test_a_complete_run_rerun_keeps_its_config_gin(trained, bert_sample):
    before = (trained / "config.gin").read_bytes()
    result = run_cli(trained, "--gin.make_optimizer.learning_rate=0.5", corpus=bert_sample)
    assert result.returncode == 0 and "no new steps" in result.stdout
    assert (trained / "config.gin").read_bytes() == before


def test_binary_corpora_are_refused(tmp_path):
    png = tmp_path / "picture.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    for corpus in ("/bin/ls", png):
        workdir = tmp_path / f"run_{pathlib.Path(corpus).name}"
        line = error_line(run_cli(workdir, corpus=corpus))
        assert f"{corpus} is a binary file, not text" in line
        assert not workdir.exists()


def test_workdir_that_is_a_file(tmp_path):
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    line = error_line(run_cli(file))
    assert "is a file, not a directory" in line
    assert file.read_text() == "mine"


@pytest.mark.parametrize("binding, message", [
    ("--gin.bert_config.vocab_size=100", "set bert_config.vocab_size >= "),
    ("--gin.BATCH_SIZE=12", "not divisible by the 8 data-parallel devices"),
    # packed rows of 128 tokens hold at most 25 instances of 5+ tokens: 1000 took 6 GB
    ("--gin.PACKED_SEQUENCES=1000", "PACKED_SEQUENCES (bert_pretraining_source.packed_sequences)"
                                    " is 1000, but a row of 128 tokens holds at most 25 "),
])
def test_failed_validation_leaves_no_trace(tmp_path, bert_sample, binding, message):
    workdir = tmp_path / "run"
    line = error_line(run_cli(workdir, binding, "--gin.make_mesh.num_devices=8",
                              corpus=bert_sample))
    assert message in line
    assert not workdir.exists() or not any(workdir.iterdir()), list(workdir.rglob("*"))


@pytest.mark.parametrize("binding, message", [
    ("--gin.PACKED_SEQUENCES=2.5", "gin macro PACKED_SEQUENCES is 2.5, but "
                                   "bert_pretraining.packed_sequences takes a whole number"),
    ("--gin.PACKED_SEQUENCES='3'", "is '3' (quoted text), but bert_pretraining.packed_sequences "
                                   "takes a whole number: write PACKED_SEQUENCES = 3, without "
                                   "quotes"),
    ("--gin.PACKED_SEQUENCES=None", "gin macro PACKED_SEQUENCES is None, but"),
    ("--gin.NUM_STEPS='abc'", "gin macro NUM_STEPS is 'abc' (quoted text), but train.num_steps "
                              "takes a whole number"),
    ("--gin.train.log_every=2.5", "gin binding train.log_every is 2.5, but it takes a whole "
                                  "number"),
    ("--gin.make_optimizer.learning_rate='1e-3'", "gin binding make_optimizer.learning_rate is "
                                                  "'1e-3' (quoted text), but it takes a number"),
])
def test_a_setting_of_the_wrong_type_is_one_line_naming_it(tmp_path, binding, message):
    """A value of the wrong type failed deep inside the run with a raw TypeError; every
    numeric setting is checked against its configurable's type when gin is parsed."""
    workdir = tmp_path / "run"
    line = error_line(run_cli(workdir, binding))
    assert message in line, line
    assert not workdir.exists()


def test_failed_run_on_an_existing_workdir_changes_nothing(trained, bert_sample):
    before = tree_digest(trained)
    error_line(run_cli(trained, "--gin.bert_config.size='mini'", "--gin.NUM_STEPS=4",
                     corpus=bert_sample))
    assert tree_digest(trained) == before


def test_flag_typo_is_one_line(tmp_path):
    line = error_line(run_cli(tmp_path, "--num_step=3"))
    assert "num_step" in line and "--help" in line


def test_packaged_configs_are_found_from_another_directory(tmp_path, bert_sample):
    result = run_cli(tmp_path / "run", corpus=bert_sample, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Path not found" not in result.stderr
