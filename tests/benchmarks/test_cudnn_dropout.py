"""benchmarks/cudnn_dropout.py's wiring on the CPU: with a stand-in for JAX's cuDNN binding that
drops out by a mask of its seed alone (cuDNN adds an offset per launch, which only a GPU shows),
the probe reads each layer's forward and backward masks back, and the control (one kernel for
every scanned layer) shows one mask for all; end-to-end, every check of every stack and the
record the device run keeps. On a GPU (the gpu marker), every check passes with cuDNN itself."""

import json
import sys

import jax
import jax.numpy as jnp
import pytest

from tests.benchmarks.test_quick import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import cudnn_dropout  # noqa: E402 - benchmarks/ is a directory of scripts, not a package


class SeededDropoutBinding:
    """Attention whose dropout mask is a function of the call's static seed (BTNH layout)."""

    MaskType = __import__("jax._src.cudnn.fused_attention_stablehlo",
                          fromlist=["MaskType"]).MaskType

    def dot_product_attention(self, q, k, v, *, scale, seed, dropout_rate, **kwargs):
        logits = jnp.einsum("bqhd,bthd->bhqt", q, k).astype(jnp.float32) * scale
        probs = jax.nn.softmax(logits, -1)
        keep = jax.random.bernoulli(jax.random.key(seed), 1 - dropout_rate, probs.shape)
        probs = jnp.where(keep, probs / (1 - dropout_rate), 0).astype(v.dtype)
        return jnp.einsum("bhqt,bthd->bqhd", probs, v)


@pytest.fixture
def seeded_cudnn(monkeypatch):
    import bertjax.layers.fused_attention as dispatch
    from bertjax.layers import cudnn_attention

    monkeypatch.setattr(cudnn_attention, "_binding", SeededDropoutBinding)
    monkeypatch.setattr(dispatch, "cudnn_runs", lambda dtype, head_dim: True)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")


def test_the_probe_reads_each_layers_forward_and_backward_masks(seeded_cudnn):
    switched, control = (cudnn_dropout.masks(s, remat=False) for s in cudnn_dropout.STACKS[1:])
    forward, backward = switched["forward"], switched["backward"]
    assert forward.shape == (4, 8, 64, 64) and 0.89 < forward.mean() < 0.91
    assert (forward == backward).all()  # the stand-in's backward drops what its forward did
    assert all((forward[0] != forward[i]).mean() > 0.1 for i in (1, 2, 3))
    assert all((control["forward"][0] == control["forward"][i]).all() for i in (1, 2, 3))


@pytest.mark.e2e
def test_every_check_and_the_record(seeded_cudnn, tmp_path):
    assert cudnn_dropout.main([f"--out={tmp_path}"]) == 0
    record = json.loads((tmp_path / "cudnn_dropout.json").read_text())
    rows = {row["stack"]: row for row in record["rows"]}
    assert record["passed"] and set(rows) == set(cudnn_dropout.STACKS)
    control = rows[cudnn_dropout.STACKS[-1]]
    assert not control["layers_differ"] and control["remat_draws_forward_mask"]
    assert not cudnn_dropout.passed([{**rows["scanned"], "layers_differ": False}])


@pytest.mark.gpu
def test_cudnn_attention_dropout_passes_every_check_on_the_gpu(tmp_path):
    """cuDNN itself, no stand-in: each layer draws its own mask, the backward drops what the
    forward dropped, and rematerialisation draws the forward's mask again."""
    assert cudnn_dropout.main([f"--out={tmp_path}"]) == 0
    record = json.loads((tmp_path / "cudnn_dropout.json").read_text())
    assert record["passed"]
