"""model.json is a versioned file format (docs/design.md, "The run record"): every name a run
can record reads back as the run it describes, every fine-tuned head has its output, and a
record bertjax cannot describe is one line, never another family's code."""

import json

import pytest

from bertjax.finetune.heads.bert import bert_finetuning
from bertjax.finetune.heads.elmo import elmo_task_objective
from bertjax.finetune.outputs import OUTPUTS, SCORE, output_of_head
from bertjax.models.bert import bert_config
from bertjax.models.elmo import elmo_config
from bertjax.training import workdir as workdir_lib
from bertjax.training.workdir import FORMAT, HEADS, RecordError, Role, read_record, role

pytestmark = pytest.mark.unit  # the unit tier: make test-unit


def test_every_recorded_head_has_its_output_and_the_objectives_write_those_names():
    assert sorted(o.head for o in OUTPUTS) == sorted(HEADS)
    config = bert_config("tiny", vocab_size=100)
    for output in OUTPUTS:
        assert output_of_head(output.head) is output
        name = bert_finetuning(config, output).name
        assert name == f"bert_{output.head}"
        assert role("bert", name) == Role("head", output.head)
    elmo = elmo_task_objective(elmo_config("tiny", vocab_size=64), SCORE, 1, pair=True)
    assert role("elmo", elmo.name) == Role("head", "regress", pair=True)


@pytest.mark.parametrize("family, objective, expected", [
    ("bert", "bert_pretraining", Role("pretraining")),
    ("bert", "bert_ltr_pretraining", Role("ltr_pretraining")),
    ("bert", "bert_features_concat_last_four", Role("features", "concat_last_four")),
    ("gpt", "gpt_pretraining", Role("pretraining")),
    ("gpt", "gpt_similarity", Role("transformation", "similarity")),
    ("elmo", "elmo_pretraining", Role("pretraining")),
    ("elmo", "elmo_pair_classify", Role("head", "classify", pair=True)),
    ("elmo", "elmo_tag", Role("head", "tag")),
])
def test_each_objective_name_reads_as_what_its_run_trained(family, objective, expected):
    assert role(family, objective) == expected


@pytest.mark.parametrize("family, objective", [
    ("bert", "bert_multilabel"), ("gpt", "gpt_classify"), ("elmo", "elmo_span"),
    ("elmo", "elmo_pair_tag"), ("bert", "gpt_pretraining")])
def test_an_objective_no_family_has_is_one_line(family, objective):
    with pytest.raises(RecordError, match=f"objective '{objective}' of a {family} run is not "
                                          "one this bertjax knows"):
        role(family, objective)


def write(tmp_path, **changes):
    record = {"format": FORMAT, "family": "bert", "objective": "bert_classify", "config": {},
              "tokenizer": {}, **changes}
    (tmp_path / workdir_lib.RECORD).write_text(json.dumps(record))
    return tmp_path


def test_a_record_of_another_family_or_a_newer_format_is_one_line(tmp_path):
    assert read_record(write(tmp_path))["family"] == "bert"
    with pytest.raises(RecordError, match="records family 't5', which this bertjax does not "
                                          "have"):
        read_record(write(tmp_path, family="t5", objective="t5_pretraining"))
    with pytest.raises(RecordError, match="of record format 2, newer than this bertjax's"):
        read_record(write(tmp_path, format=2))
    old = {k: v for k, v in json.loads(write(tmp_path).joinpath("model.json").read_text()).items()
           if k != "format"}  # records written before the format said its version: version 1
    (tmp_path / workdir_lib.RECORD).write_text(json.dumps(old))
    assert read_record(tmp_path)["objective"] == "bert_classify"
