"""Every gin file parses and builds: sizes, meshes, runs and experiments."""

import pathlib

import gin
import pytest

from bertjax.cli import gin_utils
from bertjax.models.bert import PARAM_COUNTS, BertConfig
from bertjax.training.mesh import mesh_shape

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
