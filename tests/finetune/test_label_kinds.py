"""Table files a user gets wrong in ways that used to pass silently or be misexplained: a label
column mixing class numbers and names (it trained a head with a class per spelling), and a TSV
line over csv's field limit (the error advised fixing the quoting of an unquoted format)."""

import csv

import pytest

from bertjax.finetune.examples import TaskDataError
from bertjax.finetune.tasks import read_task

pytestmark = pytest.mark.unit  # the unit tier: make test-unit


def test_a_label_column_mixing_numbers_and_names_is_one_line(tmp_path):
    path = tmp_path / "train.tsv"
    rows = ["sentence\tlabel", "stocks fell\tBusiness", "the match ended\tSports",
            "a new phone\tSci/Tech", "talks resumed\t1", "rain again\tWorld"]
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(TaskDataError) as refused:
        read_task(str(path), "classification")
    assert str(refused.value) == (
        f"{path}:5: label '1' in column 'label', whose other labels are names such as "
        "'Business': a label column holds class names or class numbers, not both; fix that "
        "line or finetune.label_column")


def test_numbers_alone_and_names_alone_are_labels(tmp_path):
    for labels in (["0", "1", "1"], ["World", "Sports", "World"]):
        path = tmp_path / "train.tsv"
        path.write_text("sentence\tlabel\n" + "".join(f"s {i}\t{label}\n"
                                                       for i, label in enumerate(labels)))
        assert [ex.label for ex in read_task(str(path), "classification")] == labels


def test_a_tsv_line_over_the_field_limit_says_so_not_quoting(tmp_path):
    path = tmp_path / "train.tsv"
    huge = "word " * (csv.field_size_limit() // 5 + 10)
    path.write_text(f"sentence\tlabel\nshort\tWorld\n{huge}\tSports\n")
    with pytest.raises(TaskDataError) as refused:
        read_task(str(path), "classification")
    message = str(refused.value)
    assert message.startswith(f"{path}:3: a field of more than ")
    assert "remove or split that line" in message and "quot" not in message
