"""bertjax-finetune end to end: BERT from the real MiniLM checkpoint (its first two layers in
the fast tier, all six in the end-to-end tier, which checks accuracy), GPT and ELMo from
bertjax workdirs (whether they learn: the end-to-end tier), on AG News
(../shared/data/agnews); resume; one clear line (exit 2, the best checkpoint untouched) for
each kind of bad input."""

import csv
import hashlib
import json
import pathlib
import re
import subprocess
import sys

import pytest

from tests.in_process import run_tool
from tests.minilm import minilm_dir, truncated_minilm
from tests.process_env import process_env

REPO = pathlib.Path(__file__).resolve().parents[2]
MINILM = minilm_dir()
QUICK = ["--gin.finetune.max_seq_length=48", "--gin.finetune.learning_rate=1e-4",
         "--gin.finetune.eval_every=5", "--gin.finetune.epochs=1.0"]


def run_module(module, *args):
    env = process_env()
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)


def write_tsv(path, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("sentence\tlabel\n")
        f.writelines(f"{text}\t{label}\n" for text, label in rows)
    return path


def agnews_rows(agnews_dir, name, n, labels=None):
    with open(agnews_dir / name, encoding="utf-8") as f:
        rows = [(r["sentence"], r["label"]) for r in
                csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
    return [r for r in rows if labels is None or r[1] in labels][:n]


@pytest.fixture(scope="module")
def data(agnews_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("agnews")
    return (write_tsv(root / "train.tsv", agnews_rows(agnews_dir, "train.tsv", 320)),
            write_tsv(root / "dev.tsv", agnews_rows(agnews_dir, "test.tsv", 200)))


def finetune(workdir, recipe, train, dev, *extra, init=MINILM, process=False):
    """bertjax-finetune (extra: --gin.NAME=VALUE flags): in this process, or with `process` in
    its own as a user runs it."""
    args = (f"--gin_file=configs/finetune/{recipe}.gin", f"--init={init}", f"--train={train}",
            f"--eval={dev}", f"--workdir={workdir}", "--noprogress", *extra)
    if process:
        return run_module("bertjax.cli.finetune", *args)
    return run_tool("bertjax.cli.finetune", *args, cwd=REPO)


def digest(path):
    h = hashlib.sha256()
    for file in sorted(p for p in pathlib.Path(path).rglob("*") if p.is_file()):
        h.update(str(file.relative_to(path)).encode() + file.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def minilm_2(tmp_path_factory):
    """MiniLM cut to its first two layers (tests/minilm.py): the same wiring, quicker."""
    return truncated_minilm(tmp_path_factory.mktemp("minilm") / "first_2_layers")


@pytest.fixture(scope="module")
def bert_run(data, minilm_2, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("bert_agnews")
    result = finetune(workdir, "bert_classification", *data, *QUICK, init=minilm_2)
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir, result


def check_classification_run(workdir, result):
    """What a finished classification run leaves: its summary lines, evaluation results of
    the best and final steps, one prediction per dev row, the best parameters, model.json."""
    assert "steps 0 -> 10" in result.stdout and "best (step" in result.stdout
    results = json.loads((workdir / "eval_results.json").read_text())
    assert set(results["final"]) >= {"accuracy", "mcc", "macro_f1"}
    rows = [json.loads(line) for line in (workdir / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 200 and set(rows[0]) == {"id", "prediction", "gold"}
    assert (workdir / "best" / "params").is_dir()
    assert json.loads((workdir / "model.json").read_text())["family"] == "bert"
    return results


def test_bert_classification_run_leaves_results_predictions_and_best(bert_run):
    results = check_classification_run(*bert_run)
    assert 0 <= results["best"]["accuracy"] <= 1, results  # two layers: wiring, not accuracy


def real_token_share(workdir):
    """Real tokens over token slots trained on, from metrics.jsonl."""
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "real_tokens_per_second" in r]
    return (sum(r["real_tokens_per_second"] for r in trained)
            / sum(r["tokens_per_second"] for r in trained))


def test_packed_classification_run_trains_on_real_tokens(data, minilm_2, tmp_path):
    """finetune.packed_sequences: the same run in packed rows of 128 tokens (the same 10 steps
    of about 32 examples each), nearly all of each row real tokens (unpacked, AG News
    sentences fill a third of 128; benchmarks/finetune_classification.py times both)."""
    result = finetune(tmp_path, "bert_classification", *data, *QUICK,
                      "--gin.finetune.max_seq_length=128", "--gin.finetune.packed_sequences=4",
                      init=minilm_2)
    assert result.returncode == 0, result.stderr[-3000:]
    check_classification_run(tmp_path, result)
    assert real_token_share(tmp_path) > 0.85


def test_packing_a_task_it_cannot_pack_is_one_line(data, minilm_2, tmp_path, agnews_dir):
    result = finetune(tmp_path, "bert_tagging", *data, "--gin.finetune.packed_sequences=4",
                      init=minilm_2)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith(
        "packs no rows for finetune.task='tagging': set finetune.packed_sequences = 0")


@pytest.mark.e2e
def test_packed_classification_learns_from_minilm(data, tmp_path):
    """All six layers in packed rows learn AG News topics as the unpacked run does."""
    result = finetune(tmp_path, "bert_classification", *data, *QUICK,
                      "--gin.finetune.packed_sequences=4")
    assert result.returncode == 0, result.stderr[-3000:]
    assert check_classification_run(tmp_path, result)["best"]["accuracy"] > 0.5


@pytest.mark.e2e
def test_bert_classification_from_minilm(data, tmp_path_factory):
    """All six layers, in a process of its own as a user runs it, learn AG News topics."""
    workdir = tmp_path_factory.mktemp("bert_agnews_full")
    result = finetune(workdir, "bert_classification", *data, *QUICK, process=True)
    assert result.returncode == 0, result.stderr[-3000:]
    results = check_classification_run(workdir, result)
    assert results["best"]["accuracy"] > 0.5, results  # 4 topics: the majority is ~0.3


def test_rerun_resumes_and_keeps_the_best(bert_run, data, minilm_2):
    workdir, _ = bert_run
    before = digest(workdir / "best")
    result = finetune(workdir, "bert_classification", *data, *QUICK, init=minilm_2)
    assert result.returncode == 0 and "steps 10 -> 10" in result.stdout, result.stderr[-2000:]
    assert digest(workdir / "best") == before


def test_a_resume_with_an_init_of_another_vocabulary_is_refused(bert_run, data, minilm_2,
                                                                 tmp_path):
    """Same shapes, another vocabulary: the run used to go on, replacing vocab.txt and
    init.txt under checkpoints trained with the old one."""
    workdir, _ = bert_run
    other = tmp_path / "other"
    other.mkdir()
    for file in minilm_2.iterdir():
        if file.name != "vocab.txt":
            (other / file.name).symlink_to(file)
    tokens = (minilm_2 / "vocab.txt").read_text(encoding="utf-8").splitlines()
    tokens[2000], tokens[2001] = tokens[2001], tokens[2000]
    (other / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    before = {name: (workdir / name).read_bytes() for name in ("vocab.txt", "init.txt",
                                                              "task.json")}
    best = digest(workdir / "best")
    line = error_line("--gin_file=configs/finetune/bert_classification.gin", f"--init={other}",
                      f"--workdir={workdir}", f"--train={data[0]}", f"--eval={data[1]}", *QUICK)
    assert f"{workdir / 'vocab.txt'}, which checkpoint 10 was trained with, differs" in line
    assert str(minilm_2.resolve()) in line  # the --init to pass instead
    cased = tmp_path / "cased"
    cased.mkdir()
    for file in minilm_2.iterdir():
        if file.name != "tokenizer_config.json":
            (cased / file.name).symlink_to(file)
    config = json.loads((minilm_2 / "tokenizer_config.json").read_text())
    (cased / "tokenizer_config.json").write_text(json.dumps({**config, "do_lower_case": False}))
    line = error_line("--gin_file=configs/finetune/bert_classification.gin", f"--init={cased}",
                      f"--workdir={workdir}", f"--train={data[0]}", f"--eval={data[1]}", *QUICK)
    assert "lower_case=False" in line and "trained with True" in line, line
    assert {name: (workdir / name).read_bytes() for name in before} == before
    assert digest(workdir / "best") == best


def test_a_rerun_on_other_training_data_says_so(bert_run, data, minilm_2):
    """The finished run trains no step on the other data, so its record keeps the corpus it
    was trained on (it was rewritten: a later rerun on the original data got a false line)."""
    workdir, _ = bert_run
    record = (workdir / "model.json").read_text()
    result = finetune(workdir, "bert_classification", data[1], data[1], *QUICK, init=minilm_2)
    assert result.returncode == 0, result.stderr[-2000:]
    changed = [x for x in result.stderr.splitlines() if "resuming with corpus" in x]
    assert len(changed) == 1 and str(data[1]) in changed[0] and str(data[0]) in changed[0]
    assert (workdir / "model.json").read_text() == record
    assert json.loads(record)["data"]["corpus"].startswith(f"{data[0]} (")


def test_cut_rows_and_a_predict_file_of_other_labels_are_each_one_warning(
        bert_run, data, minilm_2, tmp_path):
    """Rows longer than max_seq_length were cut, and a --predict file labelled with classes
    the model never saw (SST-2's 0/1 through an AG News model) was predicted, without a
    word."""
    workdir, _ = bert_run
    other = write_tsv(tmp_path / "sst2.tsv", [("a fine film", "1"), ("a dull film", "0"),
                                              ("a long film", "0")])
    result = finetune(workdir, "bert_classification", *data, *QUICK, f"--predict={other}",
                      init=minilm_2)
    assert result.returncode == 0, result.stderr[-2000:]
    cut = [x for x in result.stderr.splitlines() if "finetune.max_seq_length=48" in x]
    assert len(cut) == 1 and re.search(r"\b\d+ sequences of the 320 training examples", cut[0])
    unseen = [x for x in result.stderr.splitlines() if "never trained on" in x]
    assert len(unseen) == 1 and "3 of its 3 rows" in unseen[0] and "(0, 1)" in unseen[0]


def test_task_records_are_written_before_the_first_step(data, minilm_2, tmp_path, monkeypatch):
    """task.json, vocab.txt and init.txt used to be written at the end: a run killed on the
    way could not be exported (and the message blamed the bertjax version)."""
    from bertjax.training import loop

    class KilledError(Exception):
        pass

    def killed(*args, **kwargs):
        raise KilledError  # as kill -9 at the first step: nothing after it runs

    monkeypatch.setattr(loop, "_train_phase", killed)
    with pytest.raises(KilledError):
        finetune(tmp_path, "bert_classification", *data, *QUICK, init=minilm_2)
    task = json.loads((tmp_path / "task.json").read_text())
    assert task["labels"] and task["tokenizer"]["files"] == {"vocab": "vocab.txt"}
    assert (tmp_path / "vocab.txt").read_bytes() == (minilm_2 / "vocab.txt").read_bytes()
    assert (tmp_path / "init.txt").read_text().strip() == str(minilm_2.resolve())
    record = json.loads((tmp_path / "model.json").read_text())
    assert set(record["tokenizer"]["sha256"]) == {"vocab"}  # a resume checks it


def error_line(*args):
    """bertjax-finetune in this process: the one error line (exit status 2)."""
    result = run_tool("bertjax.cli.finetune", *args, "--noprogress")
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines()
             if line.strip() and "JAX backend" not in line]
    assert len(lines) == 1 and lines[0].startswith("bertjax-finetune: error:"), lines
    return lines[0]


def test_bad_inputs_are_one_line_and_keep_the_best(bert_run, data, minilm_2, tmp_path):
    workdir, _ = bert_run
    train, dev = data
    before = digest(workdir / "best")
    base = ["--gin_file=configs/finetune/bert_classification.gin", f"--init={minilm_2}",
            f"--workdir={workdir}"]

    def fails(*args, train=train, dev=dev, expect):
        line = error_line(*base, f"--train={train}", f"--eval={dev}", *args)
        assert all(part in line for part in expect), line

    fails(train=tmp_path / "missing.tsv", expect=["missing.tsv"])
    (tmp_path / "empty.tsv").write_text("")
    fails(train=tmp_path / "empty.tsv", expect=["empty.tsv"])
    (tmp_path / "cols.tsv").write_text("title\ttopic\nA headline\tSports\n")
    fails(train=tmp_path / "cols.tsv", expect=["cols.tsv", "finetune.label_column"])
    unseen = write_tsv(tmp_path / "unseen.tsv", [("A new sentence here.", "Weather")])
    fails(dev=unseen, expect=["'Weather'", "unseen.tsv"])
    conll = tmp_path / "bad.conll"
    conll.write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nGerman JJ\n")
    error = error_line("--gin_file=configs/finetune/bert_tagging.gin", f"--init={MINILM}",
                       f"--workdir={tmp_path / 'ner'}", f"--train={conll}", f"--eval={conll}")
    assert "bad.conll:4" in error
    gpt_recipe = error_line("--gin_file=configs/finetune/gpt_classification.gin",
                            f"--init={MINILM}", f"--workdir={tmp_path / 'gpt'}",
                            f"--train={train}", f"--eval={dev}")
    assert "holds a BERT model" in gpt_recipe and "finetune.family" in gpt_recipe
    assert digest(workdir / "best") == before


@pytest.mark.parametrize("binding, message", [
    ("--gin.finetune.packed_sequences=2.5", "gin binding finetune.packed_sequences is 2.5, but "
                                            "it takes a whole number"),
    ("--gin.finetune.packed_sequences='3'", "write finetune.packed_sequences = 3, without quotes"),
    ("--gin.finetune.packed_sequences=None", "gin binding finetune.packed_sequences is None, but"),
    ("--gin.finetune.epochs='3'", "gin binding finetune.epochs is '3' (quoted text), but it "
                                  "takes a number or None"),
    # a raw JaxRuntimeError (586 GB) after the workdir was made
    ("--gin.finetune.packed_sequences=1000000", "finetune.packed_sequences is 1000000, but a row "
                                                "of 128 tokens holds at most 64 examples"),
])
def test_a_recipe_setting_of_the_wrong_type_or_size_is_one_line(data, tmp_path, binding, message):
    workdir = tmp_path / "run"
    line = error_line("--gin_file=configs/finetune/bert_classification.gin", f"--init={MINILM}",
                      f"--workdir={workdir}", f"--train={data[0]}", f"--eval={data[1]}", binding)
    assert message in line, line
    assert not workdir.exists()


def test_squad_context_longer_than_the_model_without_doc_stride(squad_dev, tmp_path):
    line = error_line("--gin_file=configs/finetune/bert_squad.gin", f"--init={MINILM}",
                      f"--workdir={tmp_path}", f"--train={squad_dev}", f"--eval={squad_dev}",
                      "--gin.finetune.doc_stride=0", "--gin.finetune.max_seq_length=128")
    assert "finetune.doc_stride" in line


def test_a_vocabulary_that_does_not_fit_the_checkpoint(data, tmp_path):
    copy = tmp_path / "minilm"
    copy.mkdir()
    for file in MINILM.iterdir():
        if file.is_file():
            (copy / file.name).symlink_to(file)
    (copy / "vocab.txt").unlink()
    (copy / "vocab.txt").write_text("\n".join((MINILM / "vocab.txt").read_text().split("\n")[:900]))
    line = error_line("--gin_file=configs/finetune/bert_classification.gin",
                      f"--init={copy}", f"--workdir={tmp_path / 'run'}", f"--train={data[0]}",
                      f"--eval={data[1]}")
    assert "vocab.txt" in line and "tokens" in line


def test_a_truncated_hugging_face_init_is_one_line(data, minilm_2, tmp_path):
    """A model.safetensors cut short (an interrupted download) was a raw SafetensorError."""
    copy = tmp_path / "minilm"
    copy.mkdir()
    for file in minilm_2.iterdir():
        if file.name != "model.safetensors":
            (copy / file.name).symlink_to(file)
    weights = (minilm_2 / "model.safetensors").read_bytes()
    (copy / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    line = error_line("--gin_file=configs/finetune/bert_classification.gin", f"--init={copy}",
                      f"--workdir={tmp_path / 'run'}", f"--train={data[0]}",
                      f"--eval={data[1]}")
    assert f"{copy / 'model.safetensors'}: cannot be read" in line and "truncated" in line
    assert not (tmp_path / "run").exists()
    (copy / "config.json").unlink()
    (copy / "config.json").write_text('{"model_type": "bert",')  # cut short too
    line = error_line("--gin_file=configs/finetune/bert_classification.gin", f"--init={copy}",
                      f"--workdir={tmp_path / 'run'}", f"--train={data[0]}",
                      f"--eval={data[1]}")
    assert f"{copy / 'config.json'}: not valid JSON" in line  # was JSON's message alone


@pytest.fixture(scope="module")
def two_topics(agnews_dir, tmp_path_factory):
    """Sports vs Business (AG News), and their training text as a pretraining corpus."""
    root = tmp_path_factory.mktemp("two_topics")
    labels = ("Sports", "Business")
    train = agnews_rows(agnews_dir, "train.tsv", 640, labels)
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(text for text, _ in agnews_rows(agnews_dir, "train.tsv", 4000)))
    return (write_tsv(root / "train.tsv", train),
            write_tsv(root / "dev.tsv", agnews_rows(agnews_dir, "test.tsv", 200, labels)), corpus)


def pretrain(workdir, experiment, corpus, source, *extra, steps=20):
    result = run_tool("bertjax.cli.train", f"--gin_file=configs/experiments/{experiment}.gin",
                      f"--workdir={workdir}", "--noprogress", f"--gin.NUM_STEPS={steps}",
                      "--gin.BATCH_SIZE=16", f"--gin.{source}.corpus='{corpus}'",
                      f"--gin.{source}.corpus_format='plain'", *extra, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir


@pytest.mark.e2e  # the fast tier's GPT wiring and L3 logging: test_finetune_paths.py
def test_gpt_fine_tunes_with_the_auxiliary_lm_loss(two_topics, tmp_path):
    train, dev, corpus = two_topics
    gpt = pretrain(tmp_path / "gpt", "gpt_tiny_cpu", corpus, "lm_pretraining_source",
                   "--gin.SEQ_LENGTH=64", "--gin.VOCAB_SIZE=2048")
    settings = ["--gin.finetune.max_seq_length=64", "--gin.finetune.learning_rate=1e-3",
                "--gin.finetune.epochs=3.0", "--gin.finetune.eval_every=20"]
    result = finetune(tmp_path / "ft", "gpt_classification", train, dev, *settings, init=gpt)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "ft" / "eval_results.json").read_text())
    assert results["best"]["accuracy"] > 0.7, results  # two balanced topics: chance 0.5
    lm_losses = [json.loads(line).get("lm_loss") for line in
                 (tmp_path / "ft" / "metrics.jsonl").read_text().splitlines()]
    assert any(loss is not None for loss in lm_losses)  # L3 = L2 + lambda L1


@pytest.mark.e2e  # the fast tier runs the same path for a few steps (the test below)
def test_elmo_task_model_learns_and_reports_its_mix(two_topics, tmp_path):
    train, dev, corpus = two_topics
    elmo = pretrain(tmp_path / "elmo", "elmo_tiny_cpu", corpus, "elmo_source",
                    "--gin.SEQ_LENGTH=32", "--gin.elmo_config.token_encoder='word'",
                    "--gin.elmo_source.tokenizer='whitespace'")
    settings = ["--gin.finetune.epochs=5.0", "--gin.finetune.eval_every=50",
                "--gin.finetune.elmo_dropout=0.0", "--gin.finetune.learning_rate=1e-2"]
    result = finetune(tmp_path / "ft", "elmo_classification", train, dev, *settings, init=elmo)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "ft" / "eval_results.json").read_text())
    assert results["best"]["accuracy"] > 0.7, results
    weights = results["mix_weights"]["input_mix"]["weights"]
    assert len(weights) == 3 and abs(sum(weights) - 1) < 1e-5


def test_elmo_task_model_runs_and_reports_its_mix(two_topics, tmp_path):
    """The ELMo task model from a 2-step bertjax workdir, a few fine-tuning steps: the wiring
    and the mix report (whether it learns is the end-to-end test above)."""
    train, dev, corpus = two_topics
    elmo = pretrain(tmp_path / "elmo", "elmo_tiny_cpu", corpus, "elmo_source",
                    "--gin.SEQ_LENGTH=32", "--gin.elmo_config.token_encoder='word'",
                    "--gin.elmo_source.tokenizer='whitespace'", steps=2)
    result = finetune(tmp_path / "ft", "elmo_classification", train, dev,
                      "--gin.finetune.epochs=0.2", "--gin.finetune.eval_every=2", init=elmo)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "ft" / "eval_results.json").read_text())
    assert 0.0 <= results["best"]["accuracy"] <= 1.0, results
    weights = results["mix_weights"]["input_mix"]["weights"]
    assert len(weights) == 3 and abs(sum(weights) - 1) < 1e-5
