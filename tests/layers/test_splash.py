"""Splash attention: equal to the XLA path (Pallas's interpreter on the CPU), compiled ahead of
time for a TPU v5e slice with heads sharded over the model axis, and refused on TPU v3 in one
line (Mosaic cannot compile it there)."""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.cli import compile as compile_cli
from bertjax.layers.attention import AttentionMask, MultiHeadAttention
from bertjax.layers.splash import NOT_ON_V3
from tests.child_process import call_in_child

needs_libtpu = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None,
    reason="libtpu is not installed: pip install -e '.[tpu]' to compile for TPU topologies",
)
V5E_BASE = "configs/experiments/bert_base_tpu_v5e_16_splash.gin"


@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-5), ("bfloat16", 2e-2)])
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_splash_equals_xla_under_padding(causal, dtype, tolerance):
    lengths = jnp.array([[128], [70]])
    mask = AttentionMask((jnp.arange(128)[None] < lengths).astype(jnp.int32), causal=causal,
                         real_tokens_first=True)
    x = jax.random.normal(jax.random.key(0), (2, 128, 64))
    outputs = {}
    for impl in ("xla", "splash"):
        layer = MultiHeadAttention(num_heads=2, head_dim=32, implementation=impl, dtype=dtype)
        params = layer.init(jax.random.key(1), x, mask, True)
        outputs[impl] = np.asarray(layer.apply(params, x, mask, True), np.float32)
    error = np.linalg.norm(outputs["splash"] - outputs["xla"]) / np.linalg.norm(outputs["xla"])
    assert error < tolerance


@pytest.mark.tpu
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_the_compiled_kernel_equals_xla_on_a_tpu(causal):
    """On a TPU, Mosaic compiles the kernel (the CPU interprets it): the same agreement."""
    assert jax.default_backend() == "tpu"
    test_splash_equals_xla_under_padding(causal, "bfloat16", 2e-2)


def test_splash_equals_xla_on_packed_rows():
    """Packed rows go in as segment ids: each sequence attends to itself only."""
    ids = jnp.array([[1] * 50 + [2] * 60 + [3] * 18, [1] * 100 + [0] * 28])
    mask = AttentionMask((ids > 0).astype(jnp.int32), real_tokens_first=True,
                         sequence_ids=ids, max_sequences=3)
    x = jax.random.normal(jax.random.key(0), (2, 128, 64))
    outputs = {}
    for impl in ("xla", "splash"):
        layer = MultiHeadAttention(num_heads=2, head_dim=32, implementation=impl)
        params = layer.init(jax.random.key(1), x, mask, True)
        outputs[impl] = np.asarray(layer.apply(params, x, mask, True))[np.asarray(ids) > 0]
    error = np.linalg.norm(outputs["splash"] - outputs["xla"]) / np.linalg.norm(outputs["xla"])
    assert error < 1e-5


def test_lengths_off_the_kernel_blocks_are_one_line():
    layer = MultiHeadAttention(num_heads=2, head_dim=8, implementation="splash")
    x = jnp.zeros((1, 40, 16))
    with pytest.raises(ValueError, match="multiples of 128, not 40 x 40: pad the inputs or use "
                                         "attention_impl='xla'"):
        layer.init(jax.random.key(0), x, None, True)


SMALL = ["bert_config.size = 'tiny'", "bert_config.vocab_size = 1024", "BATCH_SIZE = 16",
         "train.seq_phases = ((1.0, 128),)", "make_mesh.data = 2", "make_mesh.model = 2",
         "aot_compile.topology = 'v5e:2x2'"]


@needs_libtpu
def test_small_bert_compiles_for_tpu_v5e_with_heads_over_the_model_axis():
    result = compile_cli.compile_experiment([V5E_BASE], SMALL)
    (phase,) = result.phases
    assert result.accelerator.name == "TPU v5e" and phase.num_devices == 4
    assert phase.fits and phase.flops > 0


@needs_libtpu
def test_splash_on_tpu_v3_is_one_line():
    with pytest.raises(ValueError, match=NOT_ON_V3.replace("(", r"\(").replace(")", r"\)")):
        compile_cli.compile_experiment([V5E_BASE], [*SMALL[:-1], "aot_compile.topology = "
                                                    "'v3:2x2'", "make_mesh.data = 4"])


@pytest.mark.e2e
@needs_libtpu
def test_bert_base_compiles_for_tpu_v5e_16_with_splash():
    result = call_in_child(compile_cli.compile_experiment, [V5E_BASE])  # GBs of host memory
    assert [(p.seq_length, p.steps) for p in result.phases] == [(128, 900_000), (512, 100_000)]
    for p in result.phases:
        assert p.num_devices == 16 and p.fits, p.memory
        assert 0.5 < p.flops * p.num_devices / p.model_flops < 1.2
