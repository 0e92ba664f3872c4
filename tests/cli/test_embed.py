"""bertjax-embed end to end (after a tiny bertjax-train ELMo run), and its bad-input errors."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bertjax.cli.embed import embed_file
from bertjax.inference.elmo import ElmoEmbedder
from tests.in_process import run_tool
from tests.process_env import process_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORDS = "the a river bank money loan water boat city house tree old new big small".split()
_RUN: dict = {}


def run_cli(module, *args):
    env = process_env()
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env=env)


@pytest.fixture
def workdir(tmp_path_factory):
    """A 3-step ELMo run of configs/experiments/elmo_tiny_cpu.gin on a small corpus."""
    if "workdir" not in _RUN:
        directory = tmp_path_factory.mktemp("elmo_cli")
        rng = np.random.default_rng(0)
        corpus = directory / "corpus.txt"
        corpus.write_text("\n".join(" ".join(rng.choice(WORDS, rng.integers(3, 9)))
                                    for _ in range(200)) + "\n")
        run = directory / "run"
        result = run_tool(
            "bertjax.cli.train", "--gin_file=configs/experiments/elmo_tiny_cpu.gin",
            f"--workdir={run}", "--noprogress", "--gin.NUM_STEPS=3", "--gin.BATCH_SIZE=8",
            "--gin.SEQ_LENGTH=8", "--gin.VOCAB_SIZE=64", f"--gin.elmo_source.corpus='{corpus}'",
            "--gin.elmo_source.tokenizer='whitespace'", cwd=REPO)
        assert result.returncode == 0, result.stderr[-2000:]
        assert json.loads((run / "model.json").read_text())["family"] == "elmo"
        _RUN["workdir"] = run
    return _RUN["workdir"]


def test_embed_cli_end_to_end_matches_python_api(workdir, tmp_path):
    lines = ["the river bank", "money in the bank", "a"]
    text = tmp_path / "in.txt"
    text.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.npz"
    result = run_cli("bertjax.cli.embed", f"--checkpoint={workdir}", f"--input={text}",
                     f"--output={out}")
    assert result.returncode == 0, result.stderr[-2000:]
    saved = np.load(out)
    assert sorted(saved.files) == ["0", "1", "2"]
    want = ElmoEmbedder.from_workdir(workdir).embed(lines)
    for i, layers in enumerate(want):
        assert saved[str(i)].shape == (3, len(lines[i].split()), 128)
        np.testing.assert_allclose(saved[str(i)], layers, atol=1e-6)
    mixed = tmp_path / "mixed.npz"
    assert embed_file(str(workdir), str(text), str(mixed), mix_weights=["0", "0", "1"]) == 0
    np.testing.assert_allclose(np.load(mixed)["1"], want[1][-1], atol=1e-6)


def one_error_line(capsys, *pattern):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bertjax-embed: "), err
    for part in pattern:
        assert part in err[0], err[0]


def test_empty_sentences_are_skipped_with_one_line_and_status_1(workdir, tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text("the river bank\n\nmoney\n")
    out = tmp_path / "out.npz"
    assert embed_file(str(workdir), str(text), str(out)) == 1
    one_error_line(capsys, "line(s) 2 empty, skipped", "remove empty lines")
    assert sorted(np.load(out).files) == ["0", "2"]


def test_bad_inputs_fail_with_one_line_and_status_2(workdir, tmp_path, capsys):
    out = str(tmp_path / "out.npz")
    assert embed_file(str(workdir), str(tmp_path / "absent.txt"), out) == 2
    one_error_line(capsys, "does not exist", "one sentence per line")
    binary = tmp_path / "data.bin"
    binary.write_bytes(bytes(range(256)))
    assert embed_file(str(workdir), str(binary), out) == 2
    one_error_line(capsys, "is not UTF-8 text")
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"the\x00bank\n")
    assert embed_file(str(workdir), str(nul), out) == 2
    one_error_line(capsys, "is binary, not text")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n \n")
    assert embed_file(str(workdir), str(blank), out) == 2
    one_error_line(capsys, "has no sentences")
    assert not (tmp_path / "out.npz").exists()


def test_wrong_vocabulary_or_model_family_fail_with_one_line(workdir, tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text("the river bank\n")
    out = str(tmp_path / "out.npz")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("</S>\n<S>\n<UNK>\nzebra\n")
    assert embed_file(str(workdir), str(text), out, vocab=str(vocab)) == 2
    one_error_line(capsys, "does not match the checkpoint's", "elmo_vocab.txt")
    gpt = tmp_path / "gpt_run"
    (gpt / "checkpoints" / "3" / "state").mkdir(parents=True)
    (gpt / "model.json").write_text(json.dumps({"family": "gpt", "config": {}}))
    assert embed_file(str(gpt), str(text), out) == 2
    one_error_line(capsys, "holds a GPT model", "ELMO")
    assert embed_file(str(tmp_path / "nowhere"), str(text), out) == 2
    one_error_line(capsys, "does not exist")
    assert embed_file(str(workdir), str(text), out, layers="middle") == 2
    one_error_line(capsys, "--layers=middle")


def test_a_10000_token_line_streams_in_bounded_memory(workdir, tmp_path):
    """One 10,000-token line (and a batch of short ones) embeds with peak resident memory
    under 2 GB: batches are bounded by tokens, and a long line streams through the biLM in
    windows with the LSTM state carried along."""
    rng = np.random.default_rng(0)
    text = tmp_path / "long.txt"
    text.write_text(" ".join(rng.choice(WORDS, 10_000)) + "\n" + "the river bank\n" * 100)
    out = tmp_path / "long.npz"
    wrapper = ("import resource, subprocess, sys; "
               "code = subprocess.run(sys.argv[1:]).returncode; "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)")
    env = process_env()
    result = subprocess.run([sys.executable, "-c", wrapper, sys.executable, "-m",
                             "bertjax.cli.embed", f"--checkpoint={workdir}", f"--input={text}",
                             f"--output={out}"], cwd=REPO, capture_output=True, text=True,
                            timeout=900, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    peak_kib = int(result.stdout.strip().splitlines()[-1])
    print(f"\npeak resident memory: {peak_kib / 2**20:.2f} GiB")
    assert peak_kib < 2 * 2**20
    assert np.load(out)["0"].shape == (3, 10_000, 128)


def test_an_output_on_a_full_disk_is_one_line_with_the_space_left(workdir, tmp_path, tmpfs,
                                                                  capsys):
    """It was "[Errno 28] No space left on device: 'e.npz'" with no space figure."""
    disk = tmpfs("64k")
    (disk / "filler").write_bytes(b"\0" * 60 * 1024)
    text = tmp_path / "in.txt"
    text.write_text("the river bank\n" * 50)
    assert embed_file(str(workdir), str(text), str(disk / "e.npz")) == 2
    one_error_line(capsys, f"no space left on the device to write {disk / 'e.npz'}",
                   "MiB free there")
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no temporary file
