"""A model family is one record (bertjax.training.families): its record names and a registered
piece for every job the tools do (load, recipe, export, features, held-out score), and each of
its pretraining objectives a gin name that builds it and a name its workdirs read back by. A
family or objective that lacks a piece fails here, naming the piece and where it goes."""

import fnmatch
import importlib
import inspect
import json
import pathlib
import re
import sys
import types

import gin
import pytest

import bertjax.configurables
from bertjax.analysis.heldout import held_out
from bertjax.convert.export import FORMATS, ExportError, export
from bertjax.data.store import workers
from bertjax.finetune.families import ADAPTERS
from bertjax.training import families, workdir
from bertjax.training.families import FAMILIES, PIECES, Refusal
from tests.conftest import REPO_ROOT

for _module, _ in PIECES.values():  # what a tool imports before it asks for a piece
    importlib.import_module(_module)


def test_every_family_has_every_piece():
    assert families.missing() == []
    assert tuple(FAMILIES) == workdir.FAMILIES


def test_a_missing_piece_is_named_with_where_it_goes(monkeypatch):
    monkeypatch.delitem(FAMILIES["gpt"].pieces, "held_out")
    assert families.missing() == ["family 'gpt' has no held_out (its own objective scored on "
                                  "held-out text): register one in bertjax.analysis.heldout"]
    with pytest.raises(ValueError, match="no held-out score for family 'gpt': choose bert or "
                                         "elmo"):
        held_out("workdir", "gpt", "a.txt", "b.txt")
    with pytest.raises(ValueError, match="family 'gpt' has no held_out"):
        families.piece("gpt", "held_out")


def test_a_piece_of_an_undeclared_family_is_refused():
    with pytest.raises(ValueError, match="add it to RECORD_NAMES in bertjax/training/workdir.py"):
        families.provide("t5", "loader", print)
    with pytest.raises(ValueError, match="'tokenizer' is not a family piece"):
        families.provide("bert", "tokenizer", print)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_export_format_has_a_writer_or_a_refusal_saying_what_to_do(family):
    writers = families.piece(family, "export")
    assert sorted(writers) == sorted(FORMATS)
    for writer in writers.values():
        assert callable(writer) or (isinstance(writer, Refusal) and ": export" in writer.reason)


def test_an_export_refusal_is_one_line_before_any_weights_are_read(tmp_path):
    (tmp_path / "run").mkdir()
    record = {"format": workdir.FORMAT, "family": "elmo", "objective": "elmo_pretraining",
              "config": {}, "tokenizer": {}}
    (tmp_path / "run" / workdir.RECORD).write_text(json.dumps(record))
    with pytest.raises(ExportError, match="ELMo has no transformers counterpart: export it "
                                          "with --format=bilm"):
        export(tmp_path / "run", tmp_path / "out", format="hf")


@pytest.mark.parametrize("family, objective",
                         [(f.name, o) for f in FAMILIES.values() for o in f.objectives])
def test_every_objective_is_a_gin_name_that_builds_it_and_reads_back(family, objective):
    builder = gin.get_configurable(f"bertjax.{family}_config")
    sizes = sys.modules[inspect.unwrap(builder).__module__].SIZES
    config = builder(next(size for size in sizes if "tiny" in size), vocab_size=64)
    built = gin.get_configurable(f"bertjax.{objective}")(config)
    assert (built.name, built.family) == (objective, family)
    assert workdir.role(family, objective).pretrains


def test_every_gin_pretraining_objective_is_a_family_objective():
    """An objective registered with gin but not in its family's RECORD_NAMES would train runs
    that no tool could read back."""
    registered = {name.rpartition(".")[2] for name, _ in gin.config._REGISTRY.items()
                  if name.startswith("bertjax.") and name.endswith("_pretraining")}
    declared = {o for f in FAMILIES.values() for o in f.objectives}
    assert registered == declared


def section(title: str) -> str:
    """The text of docs/design.md's section `title`, up to the next one."""
    design = (REPO_ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    return design.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def unlisted(files: set[str], text: str) -> list[str]:
    """The files no path in `text` names (`<family>` and the like match any name)."""
    patterns = [re.sub(r"<\w+>", "*", p) for p in re.findall(r"`((?:bertjax|configs)/[\w/<>.*-]+)`",
                                                         text)]
    return sorted(f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns))


def file_of(value: object) -> str:
    """The repository path of `value`, a module or module name, or of the module that defines
    `value`, a function or class."""
    if not isinstance(value, types.ModuleType):
        value = sys.modules[value if isinstance(value, str) else value.__module__]
    return str(pathlib.Path(value.__file__).relative_to(REPO_ROOT))


def gin_function(name: str) -> object:
    return inspect.unwrap(gin.get_configurable(f"bertjax.{name}"))


def test_design_md_lists_every_file_a_family_touches():
    """docs/design.md's "Adding a model family" names the file of every piece the registry
    holds, of every family's gin names, data source and adapters, and the record names."""
    files = {file_of(workdir), file_of(bertjax.configurables), file_of(workers)}
    files |= {file_of(module) for module, _ in PIECES.values()}
    for family in FAMILIES.values():
        for value in family.pieces.values():
            writers = value.values() if isinstance(value, dict) else [value]
            files |= {file_of(w) for w in writers if not isinstance(w, Refusal)}
        files |= {file_of(gin_function(f"{family.name}_config"))}
        files |= {file_of(gin_function(o)) for o in family.objectives}
        files.add(file_of(workers.FAMILIES[family.name].partition(":")[0]))
    files |= {file_of(adapter) for adapter in ADAPTERS.values()}
    assert len(files) > 12, files
    assert unlisted(files, section("Adding a model family")) == []


def test_design_md_lists_every_file_an_objective_touches():
    files = {file_of(workdir), file_of(bertjax.configurables)}
    for family in FAMILIES.values():
        files |= {file_of(gin_function(o)) for o in family.objectives}
        files |= {file_of(w) for w in family.pieces["export"].values()
                  if not isinstance(w, Refusal)}
    assert unlisted(files, section("Adding an objective")) == []


def test_the_list_check_finds_an_unlisted_file():
    text = "1. `bertjax/models/<family>.py`: its config\n"
    assert unlisted({"bertjax/models/gpt.py", "bertjax/convert/export.py"}, text) == [
        "bertjax/convert/export.py"]


def test_every_family_has_a_token_store_source():
    assert tuple(workers.FAMILIES) == tuple(FAMILIES)
