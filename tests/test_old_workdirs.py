"""Workdirs written before the run record was a versioned format still load, fine-tune on and
export: tests/fixtures/workdirs holds a BERT pretraining run and a BERT classification run
fine-tuned from it, written by bertjax at commit da21a29 (tiny models on the stdlib corpus:
bertjax-train with configs/experiments/bert_tiny_demo.gin at H32 L1, bertjax-finetune with
configs/finetune/bert_classification.gin; see tests/fixtures/README.md)."""

import json
import shutil

import numpy as np
import pytest

from bertjax.convert.export import export
from bertjax.finetune.pretrained import load_pretrained
from bertjax.training import workdir as workdir_lib
from tests.conftest import REPO_ROOT
from tests.in_process import run_tool

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "workdirs"


@pytest.fixture
def old(tmp_path):
    """Copies of the old workdirs (a test may write beside them)."""
    for name in ("bert_pretraining", "bert_classification"):
        shutil.copytree(FIXTURES / name, tmp_path / name)
    return tmp_path


def classification_data(tmp_path):
    from bertjax.data.corpora import stdlib_documents

    sentences = [" ".join(s.split())[:200] for d in stdlib_documents("held_out") for s in d
                 if len(s.split()) > 3][:24]
    rows = "".join(f"{s}\t{'even' if i % 2 == 0 else 'odd'}\n" for i, s in enumerate(sentences))
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + rows)
    return tmp_path / "train.tsv"


def test_old_records_read_as_the_runs_they_describe(old):
    pretraining = workdir_lib.read_record(old / "bert_pretraining")
    classification = workdir_lib.read_record(old / "bert_classification")
    assert (pretraining["family"], pretraining["objective"]) == ("bert", "bert_pretraining")
    assert (classification["family"], classification["objective"]) == ("bert", "bert_classify")
    config = workdir_lib.model_config(classification)
    assert config.transformer.hidden_size == 32 and config.vocab_size == 300


def test_an_old_pretraining_run_fine_tunes_and_an_old_fine_tuned_run_exports(old):
    data = classification_data(old)
    result = run_tool("bertjax.cli.finetune", "--gin_file=configs/finetune/bert_classification.gin",
                      f"--init={old / 'bert_pretraining'}", f"--train={data}", f"--eval={data}",
                      f"--workdir={old / 'new_run'}", "--gin.finetune.epochs=0.5",
                      "--gin.finetune.batch_size=8", "--gin.finetune.max_seq_length=32",
                      "--noprogress", cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    model = load_pretrained(str(old / "bert_classification"), "bert")
    assert model.config.transformer.hidden_size == 32
    out = export(old / "bert_classification", old / "export")
    assert out.model == "BertForSequenceClassification"
    config = json.loads((old / "export" / "config.json").read_text())
    assert config["id2label"] == {"0": "even", "1": "odd"}
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch_model = AutoModelForSequenceClassification.from_pretrained(old / "export")
    tokens = AutoTokenizer.from_pretrained(old / "export")("a new instance", return_tensors="pt")
    assert np.isfinite(torch_model(**tokens).logits.detach().numpy()).all()
