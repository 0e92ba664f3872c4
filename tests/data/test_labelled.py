"""Downstream task data: every format read from real files, every bad input one error line.

Real data: ../shared/data (AG News TSV, a SQuAD 2.0 slice) and the small public excerpts in
tests/fixtures (tests/fixtures/README.md names their sources). TFDS cannot be prepared
offline, so its mapping is tested on hand-built examples shaped like the builders' ones.
"""

import copy
import csv
import json
import logging
import pathlib

import numpy as np
import pytest

from bertjax.finetune.examples import (
    ChoiceExample,
    QaExample,
    TaggedSentence,
    TaskDataError,
    TextExample,
)
from bertjax.finetune.readers import tfds as labelled_tfds
from bertjax.finetune.task import check_labels
from bertjax.finetune.tasks import get_task, read_task
from bertjax.metrics.squad import normalize_answer
from tests.conftest import shared_file

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"


def one_line_error(capsys, call, *fragments) -> str:
    """The TaskDataError message of call(): one line holding every fragment, nothing printed."""
    with pytest.raises(TaskDataError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert str(fragment) in message, (fragment, message)
    assert capsys.readouterr() == ("", ""), "nothing else is printed"
    return message


def write(path: pathlib.Path, text: str) -> pathlib.Path:
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------- real files


def test_agnews_tsv():
    train = read_task(shared_file("agnews/train.tsv"), "classification")
    test = read_task(shared_file("agnews/test.tsv"), "classification", split_hint="test")
    assert len(train) == 4000 and len(test) == 1000
    assert all(isinstance(e, TextExample) and len(e.texts) == 1 for e in train)
    assert [e.id for e in train] == [str(i) for i in range(4000)]
    assert train[0] == TextExample(
        "0",
        ("RedEnvelope is still in the red. Do investors have something to cheer about?",),
        "Business",
    )
    assert check_labels(train, test, "agnews/test.tsv") == ["Business", "Sci/Tech", "Sports",
                                                            "World"]
    assert sum(e.label == "Sports" for e in train) == 955


def test_squad_v2_slice(caplog):
    path = shared_file("squad-v2-dev-5/dev.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    qas = [qa for a in data["data"] for p in a["paragraphs"] for qa in p["qas"]]
    assert (len(qas), sum(qa["is_impossible"] for qa in qas)) == (1407, 702)
    with caplog.at_level(logging.WARNING):
        examples = read_task(path, "qa", split_hint="validation")
    assert not caplog.records, "the official slice has no mismatched answers"
    assert len(examples) == 1407 and sum(e.impossible for e in examples) == 702
    assert [e.id for e in examples] == [qa["id"] for qa in qas]
    assert sum(len(e.answers) for e in examples) == sum(len(qa["answers"]) for qa in qas)
    for example in examples:
        assert isinstance(example, QaExample)
        assert bool(example.answers) != example.impossible
        for text, start in example.answers:
            assert example.context[start : start + len(text)] == text
    assert examples[0].answers[0] == ("France", 159)
    assert read_task(path, "qa") == examples  # as training data too: nothing to drop


def test_squad_mismatched_answers_warn_once_with_counts(tmp_path, caplog, capsys):
    data = json.loads(shared_file("squad-v2-dev-5/dev.json").read_text(encoding="utf-8"))
    corrupted = copy.deepcopy(data)
    qas = [qa for a in corrupted["data"] for p in a["paragraphs"] for qa in p["qas"]]
    answered = [qa for qa in qas if qa["answers"]]
    for answer in answered[0]["answers"]:  # every answer of the first question: dropped
        answer["answer_start"] += 1
    answered[1]["answers"][0]["answer_start"] = -5  # one of several answers
    answered[2]["answers"][-1]["text"] += " and more"
    bad = len(answered[0]["answers"]) + 2
    path = tmp_path / "corrupted.json"
    path.write_text(json.dumps(corrupted), encoding="utf-8")

    with caplog.at_level(logging.WARNING):
        train = read_task(path, "qa")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"{path}: {bad} answers whose answer_start does not match their text "
                        "were skipped as spans (their texts still score predictions); so were "
                        "1 training questions left with no answer"]
    assert len(train) == 1406 and answered[0]["id"] not in {e.id for e in train}
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        dev = read_task(path, "qa", split_hint="validation")
    assert len(dev) == 1407 and dev[[e.id for e in dev].index(answered[0]["id"])].answers == ()
    assert len(caplog.records) == 1 and f"{bad} answers" in caplog.records[0].getMessage()
    assert capsys.readouterr() == ("", "")

    # Scoring ignores answer_start, as the official evaluate-v2.0.py does: its gold answers
    # are the texts of every answer that normalizes to something, else [""] (get_raw_scores).
    official = {qa["id"]: [a["text"] for a in qa["answers"] if normalize_answer(a["text"])]
                or [""] for qa in qas}
    golds = dict(zip([e.id for e in dev], get_task("qa").golds(dev), strict=True))
    assert golds == official  # this file has no answer that normalizes to nothing
    assert golds[answered[0]["id"]] == [a["text"] for a in answered[0]["answers"]]
    assert golds[answered[2]["id"]][-1].endswith(" and more")


def test_mrpc_tsv_is_unquoted_and_csv_is_quoted():
    tsv = read_task(FIXTURES / "glue/mrpc_train.tsv", "pair_classification")
    csv_ = read_task(FIXTURES / "glue/mrpc_dev.csv", "pair_classification")
    assert [e.texts for e in tsv] == [e.texts for e in csv_] and len(tsv) == 6
    assert tsv[0].texts[1] == '" The foodservice pie business does not fit our long-term growth ' \
        "strategy ."  # a GLUE TSV keeps a leading quote as text
    assert tsv[1].texts[1].startswith('His wife said he was " 100 percent behind George Bush "')
    assert [e.label for e in tsv] == ["1", "0", "0", "1", "0", "1"]  # "Quality"
    assert [e.label for e in csv_] == ["equivalent", "not_equivalent", "not_equivalent",
                                       "equivalent", "not_equivalent", "equivalent"]
    assert [e.id for e in tsv] == ["0", "1", "2", "3", "4", "5"]


def test_stsb_regression():
    examples = read_task(FIXTURES / "glue/stsb_train.tsv", "regression")  # CRLF line ends
    assert [e.label for e in examples] == [5.0, 3.8, 3.8, 2.6, 4.25, 4.25, 0.5, 1.6, 2.2]
    assert examples[6] == TextExample("6", ("A man is smoking.", "A man is skating."), 0.5)
    assert [e.id for e in examples] == [str(i) for i in range(9)]  # the "index" column
    genre = read_task(FIXTURES / "glue/stsb_train.tsv", "classification",
                      text_columns=["sentence2"], label_column="genre")
    assert genre[0] == TextExample("0", ("An air plane is taking off.",), "main-captions")
    unlabelled = read_task(FIXTURES / "glue/stsb_train.tsv", "regression", label_column="")
    assert {e.label for e in unlabelled} == {None}


def test_json_lines():
    rte = read_task(FIXTURES / "superglue/rte.jsonl", "pair_classification")
    assert len(rte) == 4 and [e.id for e in rte] == ["0", "1", "2", "3"]  # "idx"
    assert rte[0] == TextExample(
        "0",
        ("No Weapons of Mass Destruction Found in Iraq Yet.",
         "Weapons of Mass Destruction Found in Iraq."),
        "not_entailment",
    )
    news = read_task(FIXTURES / "agnews/allennlp_sample.jsonl", "classification")
    assert [e.label for e in news] == ["2", "2", "4"]  # JSON numbers stay label strings
    assert news[1].texts == ("AP - Eli Manning has replaced Kurt Warner as the New York Giants' "
                             "starting quarterback.",)


def test_conll2003_excerpt():
    sentences = read_task(FIXTURES / "conll2003/eng_testa_excerpt.txt", "tagging")
    assert all(isinstance(s, TaggedSentence) for s in sentences)
    assert [len(s.tokens) for s in sentences] == [11, 2, 35, 37, 7, 2, 14]  # 2 -DOCSTART-s
    assert [s.id for s in sentences] == [str(i) for i in range(7)]
    assert [s.document for s in sentences] == [0, 0, 0, 0, 1, 1, 1]  # -DOCSTART- starts one
    assert sentences[0].tokens[:3] == ("CRICKET", "-", "LEICESTERSHIRE")
    assert sentences[0].tags[:3] == ("O", "O", "B-ORG")  # the last column: NER, not chunk
    assert sentences[2].tags[:5] == ("B-MISC", "I-MISC", "O", "B-PER", "I-PER")
    assert all(len(s.tokens) == len(s.tags) for s in sentences)
    assert check_labels(sentences, sentences[4:], "testa") == [
        "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-MISC", "I-PER", "O"]


def swag_rows() -> list[dict]:
    with open(FIXTURES / "swag/val_excerpt.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_swag_csv_and_json_lines(tmp_path):
    examples = read_task(FIXTURES / "swag/val_excerpt.csv", "multiple_choice")
    rows = swag_rows()
    assert len(examples) == len(rows) == 11
    assert all(isinstance(e, ChoiceExample) and len(e.endings) == 4 for e in examples)
    assert examples[0] == ChoiceExample(
        "0",
        "Students lower their eyes nervously.",
        ("She pats her shoulder, then saunters toward someone.", "She turns with two students.",
         "She walks slowly towards someone.", "She wheels around as her dog thunders out."),
        2,
    )
    for example, row in zip(examples, rows, strict=True):  # context + ending = the full text
        assert example.label == int(row["label"])
        assert [f"{example.context} {e}" for e in example.endings] == [
            f"{row['startphrase']} {row[f'ending{i}']}" for i in range(4)]

    jsonl = tmp_path / "swag.jsonl"
    jsonl.write_text("".join(json.dumps({**r, "label": int(r["label"])}) + "\n" for r in rows))
    assert read_task(jsonl, "multiple_choice") == examples

    only_startphrase = tmp_path / "startphrase.csv"
    with open(only_startphrase, "w", newline="", encoding="utf-8") as f:
        columns = ["startphrase", "ending0", "ending1", "ending2", "ending3", "label"]
        writer = csv.DictWriter(f, columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    plain = read_task(only_startphrase, "multiple_choice")
    assert plain[8].context == "The judge supervises the routine of the gymnast. Then, the " \
        "gymnast spins"  # a quoted CSV field with a comma
    assert plain[8].endings[2] == "to do his routine on the bars." and plain[8].label == 1


def test_column_detection_rules(tmp_path, capsys):
    qnli = write(tmp_path / "qnli.tsv", "index\tquestion\tsentence\tlabel\n"
                 "0\tWhat?\tThis.\tentailment\n")
    assert read_task(qnli, "pair_classification")[0].texts == ("What?", "This.")
    one_line_error(capsys, lambda: read_task(qnli, "classification"), "qnli.tsv",
                   "('question', 'sentence')", "pair_classification", "finetune.text_columns")
    mnli = write(tmp_path / "mnli.tsv", "sentence1\tsentence2\tlabel1\tgold_label\n"
                 "A.\tB.\tneutral\tneutral\n")
    assert read_task(mnli, "pair_classification")[0].label == "neutral"
    both = write(tmp_path / "both.csv", "text,label,score\nHi,a,1\n")
    one_line_error(capsys, lambda: read_task(both, "classification"), "both.csv",
                   "['label', 'score']", "finetune.label_column")
    assert read_task(both, "regression", label_column="score")[0].label == 1.0


# ---------------------------------------------------------------- bad input


def test_missing_empty_and_binary_files(tmp_path, capsys):
    absent = tmp_path / "nowhere.tsv"
    one_line_error(capsys, lambda: read_task(absent, "classification"), absent,
                   "no such file", "fix the task data path")
    one_line_error(capsys, lambda: read_task(tmp_path, "classification"), "is a directory")
    for name, text in [("empty.tsv", ""), ("header.tsv", "sentence\tlabel\n\n"),
                       ("blank.conll", "-DOCSTART- -X- -X- O\n\n\n"), ("empty.jsonl", "\n")]:
        path = write(tmp_path / name, text)
        task = "tagging" if name.endswith("conll") else "classification"
        one_line_error(capsys, lambda p=path, t=task: read_task(p, t), name, "no examples")
    binary = tmp_path / "model.tsv"
    binary.write_bytes(b"sentence\tlabel\n\x00\x01\x02\xff")
    one_line_error(capsys, lambda: read_task(binary, "classification"), binary,
                   "binary file")
    latin1 = tmp_path / "latin1.tsv"
    latin1.write_bytes("sentence\tlabel\nok\ta\ncaf\u00e9\tb\n".encode("latin-1"))
    one_line_error(capsys, lambda: read_task(latin1, "classification"), f"{latin1}:3",
                   "UTF-8")
    one_line_error(capsys, lambda: read_task(absent, "ner"), "'ner'", "task type")


def test_header_without_the_configured_columns(capsys):
    stsb = FIXTURES / "glue/stsb_train.tsv"
    message = one_line_error(
        capsys, lambda: read_task(stsb, "regression", text_columns=["s1", "s2"]),
        stsb, "'s1'", "'sentence1'", "'score'", "finetune.text_columns")
    assert "columns ['index', 'genre'" in message
    one_line_error(capsys, lambda: read_task(stsb, "regression", label_column="similarity"),
                   stsb, "'similarity'", "'score'", "finetune.label_column")
    agnews = shared_file("agnews/train.tsv")
    one_line_error(capsys, lambda: read_task(agnews, "pair_classification"), agnews,
                   "['sentence', 'label']", "finetune.text_columns")
    one_line_error(capsys, lambda: read_task(FIXTURES / "superglue/rte.jsonl",
                                             "pair_classification", text_columns=["premise"]),
                   "names 1 columns", "pair_classification takes 2")


def test_bad_rows_name_the_line(tmp_path, capsys):
    ragged = write(tmp_path / "ragged.tsv", "sentence\tlabel\nfine\tpos\nA\ttab\tinside\tneg\n")
    one_line_error(capsys, lambda: read_task(ragged, "classification"), f"{ragged}:3",
                   "4 fields", "header has 2", "not quoted")
    score = write(tmp_path / "sts.tsv", "sentence1\tsentence2\tscore\na\tb\t4.5\nc\td\tn/a\n")
    one_line_error(capsys, lambda: read_task(score, "regression"), f"{score}:3", "'n/a'",
                   "not a number", "finetune.label_column")
    nolabel = write(tmp_path / "nolabel.csv", "sentence,label\nfine,pos\nmissing,\n")
    one_line_error(capsys, lambda: read_task(nolabel, "classification"), f"{nolabel}:3",
                   "no 'label' label", 'finetune.label_column=""')
    json_lines = write(tmp_path / "bad.jsonl", '{"text": "ok", "label": "a"}\n\n'
                       '{"text": "broken", "label": }\n')
    one_line_error(capsys, lambda: read_task(json_lines, "classification"), f"{json_lines}:3",
                   "invalid JSON")
    not_object = write(tmp_path / "list.jsonl", '["text", "label"]\n')
    one_line_error(capsys, lambda: read_task(not_object, "classification"), f"{not_object}:1",
                   "not an object")
    squad = write(tmp_path / "squad.json", '{"version": "v2.0",\n "data": [,]}\n')
    one_line_error(capsys, lambda: read_task(squad, "qa"), f"{squad}:2", "invalid JSON")
    not_squad = write(tmp_path / "notsquad.json", '{"data": [{"title": "x"}]}')
    one_line_error(capsys, lambda: read_task(not_squad, "qa"), "not SQuAD JSON", "'paragraphs'")
    choice = write(tmp_path / "choice.csv", "startphrase,ending0,ending1,label\nA,b,c,2\n")
    one_line_error(capsys, lambda: read_task(choice, "multiple_choice"), f"{choice}:2",
                   "ending index 0...1")


def test_conll_line_with_the_wrong_number_of_columns(tmp_path, capsys):
    lines = (FIXTURES / "conll2003/eng_testa_excerpt.txt").read_text().split("\n")
    lines[20] = lines[20].rsplit(" ", 1)[0]  # drop the NER column: its chunk tag would be read
    path = write(tmp_path / "shifted.txt", "\n".join(lines))
    one_line_error(capsys, lambda: read_task(path, "tagging"), f"{path}:21", "3 fields",
                   "first sentence has 4", "fix that line")
    single = write(tmp_path / "tokens.txt", "EU\nrejects\n")
    one_line_error(capsys, lambda: read_task(single, "tagging"), f"{single}:1", "tag last")


def test_eval_label_never_seen_in_training(capsys):
    train = read_task(FIXTURES / "glue/mrpc_dev.csv", "pair_classification")
    eval_ = [*train, TextExample("x", ("a", "b"), "paraphrase")]
    one_line_error(capsys, lambda: check_labels(train[:1], eval_, "mrpc/dev.csv"),
                   "mrpc/dev.csv", "'not_equivalent'", "(and 1 more)", "training data")
    unlabelled = [TextExample("0", ("a", "b"), None)]
    assert check_labels(train, unlabelled, "test") == ["equivalent", "not_equivalent"]


# ---------------------------------------------------------------- TFDS


CONTEXT = "The Normans gave their name to Normandy, a region in France."
NO_ANSWERS = {"text": np.array([], object), "answer_start": np.array([], np.int32)}
BUILDER_SHAPED = {  # hand-built examples with the features of these TFDS builders
    "glue/sst2": [
        {"sentence": b"a gripping film ", "label": np.int64(1), "idx": np.int32(7)},
        {"sentence": b"dull", "label": np.int64(-1), "idx": np.int32(8)},  # a test example
    ],
    "glue/stsb": [{"sentence1": b"A plane.", "sentence2": b"A jet.", "label": np.float32(4.5),
                   "idx": np.int32(0)}],
    "glue/mnli": [{"premise": b"P.", "hypothesis": b"H.", "label": np.int64(2),
                   "idx": np.int32(3)}],
    "squad/v2.0": [
        {"id": b"q1", "title": b"Normans", "context": CONTEXT.encode(), "question": b"Where?",
         "answers": {"text": np.array([b"France", b"Normandy"]),
                     "answer_start": np.array([53, 3], np.int32)},  # 3 does not match
         "plausible_answers": NO_ANSWERS, "is_impossible": np.bool_(False)},
        {"id": b"q2", "title": b"Normans", "context": CONTEXT.encode(), "question": b"Who?",
         "answers": NO_ANSWERS, "plausible_answers": {"text": np.array([b"Normans"]),
                                                      "answer_start": np.array([4], np.int32)},
         "is_impossible": np.bool_(True)},
    ],
    "conll2003": [{"tokens": np.array([b"EU", b"rejects", b"German", b"call"]),
                   "ner": np.array([3, 0, 7, 0]), "pos": np.array([22, 42, 16, 21]),
                   "chunks": np.array([11, 21, 11, 12])}],
    "hellaswag": [{"activity_label": b"Cricket", "context": b"A man bowls. He",
                   "endings": np.array([b"runs.", b"sings.", b"sleeps.", b"flies."]),
                   "label": np.int32(0), "source_id": b"x", "split_type": b"indomain"}],
}
CONLL_NER = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]


def from_tfds(name, task_type, names=None, **kwargs):
    return labelled_tfds.examples_from_tfds(BUILDER_SHAPED[name], get_task(task_type).reading,
                                            names or {}, where=f"tfds:{name}:x", **kwargs)


def test_tfds_text_examples_from_builder_shaped_dicts():
    assert from_tfds("glue/sst2", "classification", {"label": ["negative", "positive"]}) == [
        TextExample("7", ("a gripping film ",), "positive"), TextExample("8", ("dull",), None)]
    assert from_tfds("glue/stsb", "regression") == [TextExample("0", ("A plane.", "A jet."), 4.5)]
    names = {"label": ["entailment", "neutral", "contradiction"]}
    assert from_tfds("glue/mnli", "pair_classification", names) == [
        TextExample("3", ("P.", "H."), "contradiction")]


def test_tfds_squad_conll_and_hellaswag_from_builder_shaped_dicts(caplog):
    with caplog.at_level(logging.WARNING):
        examples = from_tfds("squad/v2.0", "qa")
    assert examples == [QaExample("q1", "Where?", CONTEXT, (("France", 53),), False,
                                  ("France", "Normandy")),
                        QaExample("q2", "Who?", CONTEXT, (), True)]
    assert "1 answers whose answer_start" in caplog.records[0].getMessage()
    names = {"ner": CONLL_NER, "pos": [f"P{i}" for i in range(47)]}
    assert from_tfds("conll2003", "tagging", names) == [
        TaggedSentence("0", ("EU", "rejects", "German", "call"), ("B-ORG", "O", "B-MISC", "O"))]
    assert from_tfds("conll2003", "tagging", names, label_column="pos")[0].tags == (
        "P22", "P42", "P16", "P21")
    assert from_tfds("hellaswag", "multiple_choice") == [
        ChoiceExample("0", "A man bowls. He", ("runs.", "sings.", "sleeps.", "flies."), 0)]


def test_builder_shaped_dicts_have_the_builders_features():
    tfds = pytest.importorskip("tensorflow_datasets")
    for name, examples in BUILDER_SHAPED.items():
        features = tfds.builder(name).info.features  # from the builder's code: no data needed
        assert set(examples[0]) == set(features), name
        assert labelled_tfds.class_names(features).get("label", []) == (
            {"glue/sst2": ["negative", "positive"],
             "glue/mnli": ["entailment", "neutral", "contradiction"]}.get(name, []))
    squad = tfds.builder("squad/v2.0").info.features
    assert set(squad["answers"].feature) == {"text", "answer_start"}
    assert labelled_tfds.class_names(tfds.builder("conll2003").info.features)["ner"] == CONLL_NER


def test_tfds_spec_parsing():
    assert labelled_tfds.parse_spec("tfds:glue/sst2") == ("glue/sst2", None)
    assert labelled_tfds.parse_spec("tfds:squad/v2.0:validation") == ("squad/v2.0", "validation")
    assert labelled_tfds.parse_spec("tfds:glue/mnli:train[:10%]") == ("glue/mnli", "train[:10%]")


def test_tfds_missing_dataset_is_one_line(tmp_path, capsys, caplog):
    pytest.importorskip("tensorflow_datasets")
    capsys.readouterr()  # importing TensorFlow may print
    one_line_error(capsys, lambda: read_task("tfds:no_such_dataset_xyz", "classification"),
                   "tfds:no_such_dataset_xyz", "split 'train'", "not found",
                   "prepare it with `tfds build no_such_dataset_xyz`")
    with caplog.at_level(logging.WARNING):  # a known builder whose data is not prepared
        one_line_error(capsys, lambda: labelled_tfds.read_tfds(
            "tfds:glue/sst2:validation", get_task("classification").reading,
            data_dir=str(tmp_path)),
            "tfds:glue/sst2:validation", "split 'validation'", "could not find data",
            "prepare it with `tfds build glue/sst2`")
    assert not caplog.records, "TFDS's own warnings are not shown"
    one_line_error(capsys, lambda: read_task("tfds:", "qa"), "names no TFDS dataset")


def test_tfds_read_task_maps_the_real_builders_features():
    tfds = pytest.importorskip("tensorflow_datasets")
    import tensorflow as tf

    def as_dataset(self, *args, **kwargs):
        return tf.data.Dataset.from_tensor_slices(
            {"sentence": ["good", "bad"], "label": np.array([1, 0]), "idx": np.array([0, 1])})

    with tfds.testing.mock_data(as_dataset_fn=as_dataset):  # the real glue/sst2 DatasetInfo
        examples = read_task("tfds:glue/sst2:validation", "classification")
    assert examples == [TextExample("0", ("good",), "positive"),
                        TextExample("1", ("bad",), "negative")]
