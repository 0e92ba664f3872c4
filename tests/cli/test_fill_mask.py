"""bertjax-fill-mask: the end of `make demo`. It fills in blanks of held-out text with the
model a run just trained, next to the true words, and measures masked-LM accuracy there."""

import pathlib
import re
import subprocess
import sys

import pytest

from bertjax.data import corpora
from bertjax.inference.fill_mask import MaskFiller
from tests.in_process import run_tool
from tests.process_env import process_env

REPO = pathlib.Path(__file__).resolve().parents[2]


def run(*args):
    env = process_env()
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The demo's own config on the stdlib corpus, shortened to a few steps."""
    workdir = tmp_path_factory.mktemp("demo")
    result = run_tool("bertjax.cli.train", "--gin_file=configs/experiments/bert_tiny_cpu.gin",
                      f"--workdir={workdir}", "--noprogress", "--gin.NUM_STEPS=3",
                      "--gin.BATCH_SIZE=8", "--gin.VOCAB_SIZE=1024", cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir


def test_held_out_documents_are_never_trained_on():
    train, held_out = corpora.stdlib_documents(), corpora.stdlib_documents("held_out")
    everything = corpora.stdlib_documents("all")
    assert len(held_out) == len(everything) // corpora.HELD_OUT_EVERY
    assert len(train) + len(held_out) == len(everything)
    trained_text = {" ".join(d) for d in train}
    assert not any(" ".join(d) in trained_text for d in held_out)


def test_demo_ends_with_blanks_filled_next_to_the_true_words(demo_run):
    result = run("-m", "bertjax.cli.fill_mask", f"--checkpoint={demo_run}", "--examples=3")
    assert result.returncode == 0, result.stderr[-3000:]
    blanks = re.findall(r"blank \d: true: (\S+) +model: (.+)", result.stdout)
    assert len(blanks) >= 3, result.stdout
    for _, guesses in blanks:
        assert len(re.findall(r"\(\d\.\d\d\)", guesses)) == 3  # top-3 with probabilities
    accuracy = re.search(r"masked-LM accuracy on held-out text: (\d\.\d+) \(([\d,]+)",
                         result.stdout)
    assert accuracy and 0.0 <= float(accuracy[1]) <= 1.0 and int(accuracy[2].replace(",", "")) > 0


def test_fill_returns_a_distribution_per_blank(demo_run):
    filler = MaskFiller.from_workdir(demo_run)
    guesses = filler.fill("The [MASK] module provides [MASK] for regular expressions .", top_k=5)
    assert len(guesses) == 2 and all(len(g) == 5 for g in guesses)
    for g in guesses:
        probabilities = [p for _, p in g]
        assert probabilities == sorted(probabilities, reverse=True) and 0 < sum(probabilities) <= 1


def test_sentence_without_a_blank_is_one_line(demo_run):
    result = run("-m", "bertjax.cli.fill_mask", f"--checkpoint={demo_run}",
                 "--sentence=no blank here")
    assert result.returncode == 2
    errors = [x for x in result.stderr.splitlines() if "error:" in x]
    assert len(errors) == 1 and "[MASK]" in errors[0], result.stderr[-2000:]

