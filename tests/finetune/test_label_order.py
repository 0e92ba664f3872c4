"""Labels keep the task's meaning whatever their spelling: the head's class i is the dataset's
class i (TFDS's ClassLabel order, GLUE's 0 / 1), the F1 of a two-class pair task is that of
the task's positive class (GLUE: MRPC 1 = equivalent, QQP 1 = duplicate), three classes
report no binary F1, and the metric that keeps the best checkpoint is the one asked for.

References: the TFDS builders' own class names (read from their code, no data needed) and
scikit-learn's f1_score / accuracy_score."""

import pathlib

import numpy as np
import pytest

from bertjax.finetune.examples import TaskDataError, TextExample
from bertjax.finetune.pretrained import load_pretrained
from bertjax.finetune.readers import tfds as tfds_reader
from bertjax.finetune.recipe import Recipe
from bertjax.finetune.setup import setup_task
from bertjax.finetune.tasks import get_task, read_task
from tests.minilm import random_bert

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
sklearn_metrics = pytest.importorskip("sklearn.metrics")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return load_pretrained(str(random_bert(tmp_path_factory.mktemp("bert") / "model")), "bert")


def builder_names(name):
    """The ClassLabel names of a TFDS builder's label feature, in id order."""
    tfds = pytest.importorskip("tensorflow_datasets")
    return tfds_reader.class_names(tfds.builder(name).info.features)["label"]


# gold and predicted class ids of 12 MRPC-like pairs (1 = equivalent in GLUE's numbering)
GOLD = [1, 1, 0, 1, 0, 0, 1, 1, 0, 1, 1, 0]
PRED = [1, 0, 0, 1, 1, 0, 1, 1, 1, 0, 1, 0]


def tfds_examples(name, ids):
    """Examples read as the TFDS reader reads glue/NAME rows with these label ids."""
    rows = [{"sentence1": f"a {i}".encode(), "sentence2": f"b {i}".encode(),
             "label": np.int64(y), "idx": np.int32(i)} for i, y in enumerate(ids)]
    return tfds_reader.examples_from_tfds(rows, get_task("pair_classification").reading,
                                          {"label": builder_names(name)}, where=name)


def measure(model, train, dev, predictions, **settings):
    recipe = Recipe("bert", "pair_classification", max_seq_length=16, **settings)
    setup = setup_task(recipe, model, train, dev, "dev")
    return setup, setup.task.measure(predictions, setup.data)


@pytest.mark.parametrize("name, positive", [("glue/mrpc", "equivalent"),
                                            ("glue/qqp", "duplicate")])
def test_tfds_class_names_keep_the_datasets_numbering(model, name, positive):
    """TFDS numbers MRPC's classes not_equivalent (0), equivalent (1): sorted names would put
    equivalent first and make index 1, and F1, the negative class."""
    examples = tfds_examples(name, GOLD)
    assert examples.label_order == tuple(builder_names(name))
    setup, scores = measure(model, examples, examples, [builder_names(name)[y] for y in PRED])
    assert setup.labels == builder_names(name) and setup.labels[1] == positive
    assert setup.task.targets(examples, setup.labels) == GOLD
    gold = [ex.label for ex in examples]
    pred = [builder_names(name)[y] for y in PRED]
    assert scores["f1"] == pytest.approx(sklearn_metrics.f1_score(gold, pred, pos_label=positive))
    assert scores["accuracy"] == pytest.approx(sklearn_metrics.accuracy_score(gold, pred))


def test_glue_files_and_tfds_names_score_the_same_predictions_the_same(model):
    files = [TextExample(str(i), (f"a {i}", f"b {i}"), str(y)) for i, y in enumerate(GOLD)]
    _, from_files = measure(model, files, files, [str(y) for y in PRED])
    names = builder_names("glue/mrpc")
    _, from_tfds = measure(model, tfds_examples("glue/mrpc", GOLD),
                           tfds_examples("glue/mrpc", GOLD), [names[y] for y in PRED])
    assert from_files == from_tfds
    assert from_files["f1"] == pytest.approx(sklearn_metrics.f1_score(GOLD, PRED, pos_label=1))


def test_names_without_a_numbering_need_the_positive_class_named(model):
    """A CSV of MRPC's names (transformers' fixture) says nothing of which class is
    positive: no F1 is reported unless finetune.positive_label names it."""
    examples = read_task(FIXTURES / "glue/mrpc_dev.csv", "pair_classification")
    gold = [ex.label for ex in examples]
    pred = ["equivalent"] * len(gold)
    _, scores = measure(model, examples, examples, pred)
    assert "f1" not in scores
    _, scores = measure(model, examples, examples, pred, positive_label="equivalent")
    assert scores["f1"] == pytest.approx(
        sklearn_metrics.f1_score(gold, pred, pos_label="equivalent"))
    with pytest.raises(TaskDataError, match="finetune.positive_label='yes' is not one of"):
        measure(model, examples, examples, pred, positive_label="yes")


def test_three_classes_report_accuracy_not_a_binary_f1(model):
    """MNLI: GLUE reports accuracy only; an F1 of one of three classes is no GLUE number."""
    examples = tfds_examples("glue/mnli", [0, 1, 2, 2, 1, 0])
    assert examples.label_order == ("entailment", "neutral", "contradiction")
    pred = ["entailment"] * len(examples)
    setup, scores = measure(model, examples, examples, pred)
    assert set(scores) == {"accuracy"}
    assert scores["accuracy"] == pytest.approx(
        sklearn_metrics.accuracy_score([ex.label for ex in examples], pred))
    with pytest.raises(ValueError, match="finetune.main_metric='f1' is not reported"):
        measure(model, examples, examples, pred, main_metric="f1")


def test_the_main_metric_setting_picks_the_best_checkpoint(model):
    """finetune.main_metric reaches the evaluator that keeps the best checkpoint."""
    from bertjax.finetune.evaluate import make_evaluator

    examples = tfds_examples("glue/mrpc", GOLD)
    recipe = Recipe("bert", "pair_classification", max_seq_length=16, main_metric="f1")
    setup = setup_task(recipe, model, examples, examples, "dev")
    assert make_evaluator(setup, 10, 4).main_metric == "f1"
    default = setup_task(Recipe("bert", "pair_classification", max_seq_length=16), model,
                         examples, examples, "dev")
    assert make_evaluator(default, 10, 4).main_metric == "accuracy"


def test_integer_labels_sort_as_numbers_and_names_as_given_order(model):
    examples = [TextExample(str(i), (f"t {i}",), str(y)) for i, y in enumerate([10, 2, 0, 1])]
    recipe = Recipe("bert", "classification", max_seq_length=16)
    assert setup_task(recipe, model, examples, examples, "dev").labels == ["0", "1", "2", "10"]
    named = [TextExample(str(i), (f"t {i}",), y) for i, y in enumerate(["b", "c", "a"])]
    ordered = Recipe("bert", "classification", max_seq_length=16, labels=("c", "a", "b"))
    assert setup_task(ordered, model, named, named, "dev").labels == ["c", "a", "b"]
    with pytest.raises(TaskDataError, match="label 'b' of the training data is not among"):
        setup_task(Recipe("bert", "classification", max_seq_length=16, labels=("c", "a")),
                   model, named, named, "dev")
