"""Every gin file parses and builds: sizes, meshes, runs and experiments; includes resolve from
any directory; gin's private tables that bertjax's checks read still have the shape they read."""

import importlib.metadata
import logging
import pathlib
import sys

import gin
import pytest

from bertjax.cli import gin_utils
from bertjax.models.bert import PARAM_COUNTS, BertConfig
from bertjax.training.mesh import mesh_shape

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"
EXPERIMENTS = sorted(
    p.relative_to(CONFIGS.parent).as_posix() for p in (CONFIGS / "experiments").glob("*.gin")
)
BERT_MODELS = sorted((CONFIGS / "models").glob("bert_*.gin"))


@pytest.fixture(autouse=True)
def clean_gin():
    gin.clear_config()
    yield
    gin.clear_config()


@pytest.mark.parametrize("path", BERT_MODELS, ids=lambda p: p.stem)
def test_bert_model_files_build_their_size(path):
    gin_utils.parse([str(path)], [])
    config = gin.get_configurable("bertjax.bert_config")()
    size = path.stem.removeprefix("bert_")
    assert isinstance(config, BertConfig) and f"{PARAM_COUNTS[size] / 1e6:.1f}M" in path.read_text()


@pytest.mark.parametrize("name, devices", [("cpu", 8), ("tpu_v3_32", 32), ("tpu_v3_128", 128),
                                           ("tpu_v5e_16", 16)])
def test_mesh_files_fit_their_device_count(name, devices):
    gin_utils.parse([f"configs/meshes/{name}.gin"], [])
    data = gin.query_parameter("make_mesh.data")
    fsdp = gin.query_parameter("make_mesh.fsdp")
    model = gin.query_parameter("make_mesh.model")
    assert mesh_shape(devices, data, fsdp, model)[0] * fsdp * model == devices


@pytest.mark.parametrize("path", EXPERIMENTS)
def test_experiments_build(path):
    gin_utils.parse([path], [])
    experiment = gin_utils.configured("train")
    assert experiment.batch_size > 0 and experiment.num_steps > 0
    assert experiment.objective.model is not None and experiment.optimizer is not None
    batch = experiment.objective.example_batch(2, experiment.seq_phases[-1][1])
    assert all(v.shape[0] == 2 for v in batch.values())
    # bertjax-train's check before it writes anything (it also builds the mesh, not done here)
    gin_utils.check_all_read(ignore=("aot_compile", "make_mesh"))


def test_paper_setups():
    gin_utils.parse(["configs/experiments/bert_base_tpu_v3_32.gin"], [])
    base = gin_utils.configured("train")
    assert (base.batch_size, base.num_steps) == (256, 1_000_000)
    assert base.seq_phases == ((0.9, 128), (0.1, 512))
    encoder = base.objective.model.config.transformer
    assert encoder.num_layers == 12 and encoder.dtype == "bfloat16"
    gin.clear_config()
    gin_utils.parse(["configs/experiments/bert_large_tpu_v3_128.gin"], [])
    assert gin_utils.configured("train").objective.model.config.transformer.num_layers == 24


def test_unknown_experiment_names_the_choices():
    with pytest.raises(gin_utils.ConfigError, match="bert_tiny_cpu.gin"):
        gin_utils.parse(["configs/experiments/bert_tiny.gin"], [])


def test_mesh_bindings_reach_the_training_mesh():
    gin_utils.parse(["configs/meshes/cpu.gin"], ["make_mesh.data = 2", "make_mesh.fsdp = 4"])
    mesh = gin.get_configurable("bertjax.make_mesh")()
    assert dict(mesh.shape) == {"data": 2, "fsdp": 4, "model": 1}


def test_includes_resolve_from_another_directory_with_the_checkout_on_the_path(
        tmp_path, monkeypatch, caplog):
    """`configs` importable as a namespace package (the checkout on sys.path) made gin's
    package-resource reader raise a TypeError on the first include; a miss logged an error."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(CONFIGS.parent))
    with caplog.at_level(logging.INFO):
        gin_utils.parse(["configs/experiments/bert_tiny_demo.gin"], [])
    assert gin_utils.configured("train").num_steps > 0
    assert not [r for r in caplog.records if "Path not found" in r.getMessage()]
    assert "configs" not in sys.modules  # nothing imported it as a package


GIN_CHANGED = (f"gin-config {importlib.metadata.version('gin-config')} keeps its bindings "
               "otherwise than bertjax/cli/gin_utils.py reads them (check_all_read, check_types, "
               "_use_bertjax_configs read gin's private tables): update those functions for it, "
               "or pin the gin-config they were written for")


def test_gin_private_tables_have_the_shape_gin_utils_reads():
    import bertjax.configurables  # noqa: F401 - registers every gin name

    gin.parse_config(["DATA = -1", "make_mesh.data = %DATA", "make_mesh.fsdp = 1"])
    config, operative = gin.config._CONFIG, gin.config._OPERATIVE_CONFIG
    [key] = [k for k in config if k[1] != "gin.macro"]
    assert isinstance(key, tuple) and key[0] == "" and key[1].endswith(".make_mesh"), GIN_CHANGED
    assert set(config[key]) == {"data", "fsdp"}, GIN_CHANGED
    assert getattr(config[key]["data"], "config_key", None) == ("DATA", "gin.macro"), GIN_CHANGED
    assert config[("DATA", "gin.macro")]["value"] == -1, GIN_CHANGED
    match = gin.config._REGISTRY.get_match(key[1])
    assert match.name == "make_mesh" and callable(match.wrapped), GIN_CHANGED
    gin.get_configurable("bertjax.make_mesh")()
    assert {"data", "fsdp"} <= set(operative.get(key, {})), GIN_CHANGED
    readers = gin.config._FILE_READERS
    assert all(isinstance(r, tuple) and len(r) == 2 and all(map(callable, r))
               for r in readers), GIN_CHANGED
    gin_utils.check_all_read()  # every binding above was read
    gin.parse_config(["train.num_steps = 1"])  # bound, never called
    with pytest.raises(gin_utils.ConfigError, match="train.num_steps is never read"):
        gin_utils.check_all_read()
