"""Every data source the loop runs offers the whole `DataSource` protocol, with the same
parameters, and the loop reads no other attribute of a source."""

import ast
import inspect
import pathlib

import pytest

from bertjax.data.bert.source import BertPretrainingSource
from bertjax.data.elmo.source import ElmoSource
from bertjax.data.gpt.source import LmPretrainingSource
from bertjax.finetune.arrays import ArraySource
from bertjax.training import loop
from bertjax.training.data_source import DataSource

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

MEMBERS = sorted({*DataSource.__annotations__,
                  *(name for name in vars(DataSource) if not name.startswith("_"))})


@pytest.mark.parametrize("source", [BertPretrainingSource, LmPretrainingSource, ElmoSource,
                                    ArraySource])
def test_sources_offer_the_protocol(source):
    assert set(MEMBERS) >= {"setting", "vocab_size", "prepare", "save", "feature_spec",
                            "batches", "padded_length"}
    for name in MEMBERS:
        assert hasattr(source, name), f"{source.__name__} lacks {name}"
        ours = getattr(DataSource, name, None)
        if inspect.isfunction(ours):
            theirs = getattr(source, name)
            assert (list(inspect.signature(theirs).parameters)
                    == list(inspect.signature(ours).parameters)), (source.__name__, name)


def test_the_loop_reads_only_the_protocol():
    tree = ast.parse(pathlib.Path(loop.__file__).read_text(encoding="utf-8"))
    read = {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
            and node.value.attr == "source"}
    assert read and read <= set(MEMBERS), read
    assert "getattr(exp.source" not in pathlib.Path(loop.__file__).read_text(encoding="utf-8")
