"""bertjax-train on the GPT experiment, then bertjax-generate on its workdir; bad inputs each
give one `bertjax-generate: error:` line and exit status 2."""

import json
import pathlib
import subprocess
import sys

import pytest

from bertjax.tokenizers.bpe import learn_bpe
from tests.in_process import run_tool
from tests.process_env import process_env

REPO = pathlib.Path(__file__).resolve().parents[2]
TEXT = ("The module defines a class. Each class has methods and attributes.\n"
        "Return the value of the named attribute of object.\n\n") * 40


def _run(module, *args):
    env = process_env(8)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpt")
    corpus = root / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    result = run_tool(
        "bertjax.cli.train", "--gin_file=configs/experiments/gpt_tiny_cpu.gin",
        f"--workdir={root / 'run'}", "--noprogress", "--gin.NUM_STEPS=2", "--gin.BATCH_SIZE=8",
        "--gin.SEQ_LENGTH=16", "--gin.VOCAB_SIZE=300", "--gin.gpt_config.num_layers=1",
        "--gin.gpt_config.hidden_size=32", "--gin.gpt_config.num_heads=2",
        "--gin.gpt_config.mlp_dim=64", "--gin.gpt_config.max_position_embeddings=40",
        f"--gin.lm_pretraining_source.corpus='{corpus}'", cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "steps 0 -> 2" in result.stdout
    return root / "run"


def run_generate(*args):
    """bertjax-generate in this process: (exit status, stdout, the error lines)."""
    result = run_tool("bertjax.cli.generate", *args)
    errors = [line for line in result.stderr.splitlines() if "bertjax-generate: error:" in line]
    return result.returncode, result.stdout, errors


def test_generate_from_the_workdir_of_a_gpt_run(workdir):
    record = json.loads((workdir / "model.json").read_text())
    assert record["family"] == "gpt" and record["config"]["transformer"]["num_layers"] == 1
    code, out, _ = run_generate(f"--checkpoint={workdir}", "--prompt=The module",
                                "--prompt=Return", "--greedy", "--max_new_tokens=8", "--json")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["prompt"] for r in rows] == ["The module", "Return"]
    code, again, _ = run_generate(f"--checkpoint={workdir / 'checkpoints' / '2'}",
                                  "--prompt=Return", "--greedy", "--max_new_tokens=8", "--json")
    assert json.loads(again)["continuation"] == rows[1]["continuation"]  # batch-independent


def test_the_console_module_runs(workdir):
    result = _run("bertjax.cli.generate", f"--checkpoint={workdir}", "--prompt=The",
                  "--max_new_tokens=4", "--top_k=5", "--top_p=0.9", "--seed=3")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("The")


@pytest.mark.parametrize("args,match", [
    (["--top_p=1.5"], "top_p=1.5 is outside (0, 1]"),
    (["--top_p=0"], "top_p=0.0 is outside (0, 1]"),
    (["--top_k=0"], "top_k=0 is below 1"),
    (["--temperature=-1"], "temperature=-1.0 is negative"),
    (["--max_new_tokens=30", "--prompt=" + "word " * 20], "at most 10 fit the model's 40-token"),
])
def test_bad_settings_give_one_line(workdir, args, match):
    code, _, errors = run_generate(f"--checkpoint={workdir}", "--prompt=x", *args)
    assert code == 2 and len(errors) == 1 and match in errors[0], errors


def test_a_bert_checkpoint_is_refused(tmp_path):
    (tmp_path / "checkpoints" / "10" / "state").mkdir(parents=True)
    (tmp_path / "model.json").write_text(json.dumps({"family": "bert", "config": {}}))
    code, _, errors = run_generate(f"--checkpoint={tmp_path}", "--prompt=x")
    assert code == 2 and len(errors) == 1
    assert "holds a BERT model, but bertjax-generate needs a GPT checkpoint" in errors[0]


def test_a_tokenizer_of_another_size_is_refused(workdir, tmp_path):
    vocab, merges = learn_bpe([TEXT], 280).save(tmp_path)
    code, _, errors = run_generate(f"--checkpoint={workdir}", "--prompt=x",
                                   f"--vocab={vocab}", f"--merges={merges}")
    assert code == 2 and len(errors) == 1
    assert "has 280 tokens but" in errors[0] and "300-token vocabulary" in errors[0]


def test_translate_task_builds_gpt2s_prompt_and_stops_at_the_line_end(workdir, tmp_path):
    examples = tmp_path / "pairs.txt"
    examples.write_text("A class = La classe\n\nA = Une\n", encoding="utf-8")  # in 40 tokens
    code, out, errors = run_generate(f"--checkpoint={workdir}", "--task=translate",
                                     f"--translation_examples={examples}", "--prompt=The module",
                                     "--greedy", "--max_new_tokens=8", "--json")
    assert code == 0, errors
    row = json.loads(out)
    assert row["prompt"] == "A class = La classe\nA = Une\nThe module ="
    assert "\n" not in row["continuation"] and row["continuation"] == row["continuation"].strip()


@pytest.mark.parametrize("text,match", [
    ("The class = La classe\nno pair here\n", "pairs.txt:2: not 'english sentence = french"),
    ("\n\n", "pairs.txt: no example pairs"),
])
def test_bad_translation_examples_give_one_line(workdir, tmp_path, text, match):
    examples = tmp_path / "pairs.txt"
    examples.write_text(text, encoding="utf-8")
    code, _, errors = run_generate(f"--checkpoint={workdir}", "--task=translate",
                                   f"--translation_examples={examples}", "--prompt=x")
    assert code == 2 and len(errors) == 1 and match in errors[0], errors
