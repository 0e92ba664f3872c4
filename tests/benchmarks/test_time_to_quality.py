"""benchmarks/time_to_quality.py: the time each row takes to its peer's final held-out loss and
the ratio lines made from it, the corpus split, the fixed held-out masks, and (end-to-end tier)
the whole --quick run: every row in its own process, one scorer, the CSV and the ratio lines."""

import csv
import importlib
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.benchmarks.test_quick import REPO
from tests.conftest import shared_file
from tests.process_env import process_env

sys.path.insert(0, str(REPO / "benchmarks"))

import time_to_quality as ttq  # noqa: E402
import time_to_quality_score as scorer  # noqa: E402


def test_time_to_reach_interpolates_between_checkpoints_and_says_never():
    curve = [(10.0, 6.0), (20.0, 5.0), (30.0, 4.0)]
    assert ttq.time_to_reach(curve, 4.5) == pytest.approx(25.0)
    assert ttq.time_to_reach(curve, 6.5) == 10.0  # the first checkpoint already reaches it
    assert ttq.time_to_reach(curve, 3.9) is None


def test_ratio_lines_are_peer_time_over_bertjax_time_and_zero_when_never_reached():
    rows = [ttq.Row("run_mlm", "transformers run_mlm", "bert", "run_mlm", ()),
            ttq.Row("same_recipe", "bertjax, same recipe", "bert", "run_mlm", ()),
            ttq.Row("run_clm", "transformers run_clm", "gpt", "run_clm", ()),
            ttq.Row("gpt_same_recipe", "bertjax GPT-2, same recipe", "gpt", "run_clm", ())]
    curves = {"run_mlm": [(100.0, 5.0), (200.0, 4.0)], "same_recipe": [(50.0, 4.0)],
              "run_clm": [(100.0, 3.0)], "gpt_same_recipe": [(100.0, 3.5)]}
    out = "\n".join(ttq.ratio_lines(rows, curves))
    assert "ratio time_to_quality same_recipe: 4.00x\n" in out + "\n"
    assert re.search(r"^ratio time_to_quality gpt_same_recipe: 0\.00x \(never reached", out, re.M)


def test_best_recipe_gets_batch_and_steps_only_when_its_file_leaves_them(tmp_path):
    args = ttq.parse_args(["--batch_size=16", f"--corpus={ttq.__file__}"])
    gin = tmp_path / "budget.gin"
    gin.write_text("BATCH_SIZE = 128\nmake_optimizer.learning_rate = 2e-3\n")
    assert ttq.best_recipe_bindings(gin, args, 300) == ["NUM_STEPS = 300"]
    assert ttq.steps_in_budget({"steps": 480, "stopped": "budget"}, 2000) == 480
    assert ttq.steps_in_budget({"steps": 3, "stopped": "budget"}, 2000) == 2000
    assert ttq.steps_in_budget({"steps": 2000, "stopped": "num_steps"}, 2000) == 2000


def test_the_held_out_lines_are_never_in_the_training_file(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i}\n" for i in range(200)))
    train, heldout = ttq.split_corpus(corpus, 0.05, 0, tmp_path)
    assert heldout == [f"line {i}" for i in range(190, 200)]
    assert "line 189\n" in train.read_text() and "line 190" not in train.read_text()


def test_every_row_trains_and_is_scored_on_the_lines_as_bertjax_reads_them(tmp_path):
    # bertjax's corpus reader strips each line; run_clm reads lines verbatim. Unstripped,
    # the held-out text would hold tokens (" \n") that only the peer ever trained on.
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"  line {i} \t\n" + ("   \n" if i % 7 == 6 else "")
                              for i in range(200)))
    train, heldout = ttq.split_corpus(corpus, 0.05, 0, tmp_path)
    assert heldout and all(line == line.strip() for line in heldout)
    assert all(line == line.strip() for line in train.read_text().splitlines())
    assert "\n\n" in train.read_text()  # blank lines (document boundaries) stay blank


def test_held_out_masks_are_fixed_and_take_15_percent_of_real_tokens(tmp_path):
    from bertjax.tokenizers.wordpiece import learn_vocabulary, write_vocab

    lines = [f"the {w} of news number {i} went up today" for i, w in
             enumerate(["price", "cost", "rate", "share"] * 30)]
    write_vocab(learn_vocabulary(lines, 200), tmp_path / "vocab.txt")
    first = scorer.bert_heldout(lines, tmp_path / "vocab.txt", 64, 8)
    again = scorer.bert_heldout(lines, tmp_path / "vocab.txt", 64, 8)
    for key in first.arrays:
        np.testing.assert_array_equal(first.arrays[key], again.arrays[key])
    weights = first.arrays["masked_lm_weights"]
    assert first.rows == 8 and weights.sum(1).min() >= 8  # about 0.15 * 60 real tokens a row


@pytest.mark.e2e
@pytest.mark.torch
def test_quick_run_scores_every_row_and_prints_the_ratio_lines(tmp_path):
    pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate: "
                                             "pip install -e .[bench]")
    pytest.importorskip("datasets", reason="the peer reads its text with datasets")
    shared_file("agnews/unlabelled.txt")
    result = subprocess.run(
        [sys.executable, "benchmarks/time_to_quality.py", "--quick", f"--out={tmp_path}/run",
         f"--best_gin={tmp_path}/absent.gin"],
        cwd=REPO, env=process_env(), capture_output=True, text=True, timeout=1500)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    out = result.stdout
    for measure in ("same_recipe", "gpt_same_recipe"):
        assert re.search(rf"^ratio time_to_quality {measure}: \d+\.\d\dx", out, re.M), out
    assert "row bertjax, best small-budget recipe: skipped:" in out
    with pathlib.Path(tmp_path / "run" / "time_to_quality.csv").open() as f:
        table = list(csv.DictReader(f))
    assert {row["row"] for row in table} == {"transformers run_mlm", "bertjax, same recipe",
                                             "transformers run_clm",
                                             "bertjax GPT-2, same recipe"}
    assert all(float(row["heldout_loss"]) > 0 and 0 <= float(row["heldout_acc"]) <= 1
               for row in table)
    assert (tmp_path / "run" / "curves.png").is_file()


@pytest.mark.torch
@pytest.mark.parametrize("peer", ["hf_mlm", "hf_clm"])
def test_the_peers_rows_without_datasets_are_the_datasets_rows(peer, tmp_path, monkeypatch):
    """The GPU host has no `datasets`: the peers then read, tokenize and group the lines in
    plain lists, and must give the rows `datasets` gives."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("datasets", reason="the reference: the peer's text through datasets")
    monkeypatch.syspath_prepend(str(REPO / "benchmarks" / "peers"))
    module = importlib.import_module(peer)
    train, _ = ttq.split_corpus(shared_file("agnews/unlabelled.txt"), 0.05, 600, tmp_path)
    vocab = ttq.learn_vocabularies(train, 512, 64, tmp_path)
    tokenizer = (transformers.BertTokenizerFast.from_pretrained(vocab["hf_wordpiece"])
                 if peer == "hf_mlm" else
                 transformers.GPT2TokenizerFast.from_pretrained(vocab["hf_bpe"]))
    theirs = module.training_blocks(str(train), tokenizer, 64, tmp_path / "cache")
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed
    ours = module.training_blocks(str(train), tokenizer, 64, tmp_path / "cache")
    assert isinstance(ours, list) and len(ours) == len(theirs) > 50
    assert ours == [dict(row) for row in theirs]


SITE_WITHOUT_TENSORFLOW = """import sys
for name in ("tensorflow", "seqio", "tensorflow_text", "tensorflow_datasets", "datasets"):
    sys.modules[name] = None  # as on the GPU host: not installed
"""


@pytest.mark.torch
def test_prepared_rows_run_where_tensorflow_seqio_and_datasets_are_missing(tmp_path):
    """--prepare_only on this host, then the rows from the prepared directory in processes
    that cannot import TensorFlow, seqio or datasets (the GPU host's image): bertjax's row
    trains from the token store, the peer without datasets, and both are scored."""
    pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate: "
                                             "pip install -e .[bench]")
    shared_file("agnews/unlabelled.txt")
    prepared = tmp_path / "prepared"
    done = subprocess.run(
        [sys.executable, "benchmarks/time_to_quality.py", "--quick", "--prepare_only",
         f"--out={prepared}"], cwd=REPO, env=process_env(), capture_output=True, text=True,
        timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert (prepared / "store_bert" / "manifest.json").is_file()
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE_WITHOUT_TENSORFLOW)
    env = process_env()
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "benchmarks/time_to_quality.py", f"--prepared={prepared}",
         f"--out={tmp_path}/run", "--rows=run_mlm,same_recipe", "--budget_s=15",
         "--checkpoints=2", "--batch_size=8", "--max_steps=100", "--eval_rows=16",
         f"--plot={tmp_path}/run/curves.png"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    out = done.stdout
    assert done.returncode == 0, (out + done.stderr)[-3000:]
    assert re.search(r"^ratio time_to_quality same_recipe: \d+\.\d\dx", out, re.M), out
    assert f"prepared in {prepared}" in out and "BERT tiny" in out, out  # its settings
    assert "bertjax's rows read token stores built on the preparing host" in out, out
    with pathlib.Path(tmp_path / "run" / "time_to_quality.csv").open() as f:
        rows = {row["row"] for row in csv.DictReader(f)}
    assert rows == {"transformers run_mlm", "bertjax, same recipe"}


def test_gpu_rows_compute_in_bfloat16_on_cuda_from_the_prepared_stores(tmp_path, monkeypatch):
    """--device=gpu: BERT-base and GPT-2 124M, the peers on CUDA with bf16, bertjax's rows
    reading the prepared stores in bfloat16 (the bindings parse and give that model)."""
    import gin

    from bertjax.cli import gin_utils

    monkeypatch.chdir(REPO)
    args = ttq.parse_args(["--device=gpu", f"--prepared={tmp_path}",
                           "--rows=run_mlm,same_recipe,run_clm,gpt_same_recipe",
                           "--bertjax_binding=train.log_every = 7"])
    assert (args.bert_size, args.gpt_size, args.budget_s) == ("base", "gpt2_small", 180.0)
    (tmp_path / "sizes.json").write_text('{"bert": 30000, "gpt": 32000}')
    paths = {key: tmp_path / key for key in ("train", "wordpiece", "bpe", "hf_wordpiece",
                                             "hf_bpe", "bert", "gpt", "store_bert",
                                             "store_gpt")}
    paths["sizes"] = tmp_path / "sizes.json"
    rows, _ = ttq.build_rows(args, paths, tmp_path / "out")
    commands = {row.key: row.command for row in rows}
    assert "--device=cuda" in commands["run_mlm"] and "--device=cuda" in commands["run_clm"]
    for key, family, store in (("same_recipe", "bert", "store_bert"),
                               ("gpt_same_recipe", "gpt", "store_gpt")):
        files = [a.split("=", 1)[1] for a in commands[key] if a.startswith("--gin_file=")]
        bindings = [a.split("=", 1)[1] for a in commands[key]
                    if a.startswith("--gin_binding=")]
        assert f"store:{tmp_path / store}" in " ".join(bindings)
        assert bindings[-1] == "train.log_every = 7"  # after the row's own: it wins
        try:
            gin_utils.parse(files, bindings)
            config = gin.get_configurable(f"{family}_config")()
        finally:
            gin.clear_config()
        transformer = config.transformer
        assert (transformer.num_layers, transformer.hidden_size) == (12, 768)
        assert transformer.compute_dtype == "bfloat16", transformer.compute_dtype
