"""Forward-only programs compiled for evaluation: same numbers as `jax.jit`, and on CPU without
XLA's YNNPACK fusions (see bertjax.training.evaluation.CPU_INFERENCE_OPTIONS)."""

import jax
import numpy as np
import pytest

from bertjax.models.bert import BertModel, bert_config
from bertjax.training.evaluation import jit_inference


@pytest.fixture(scope="module")
def tiny_bert():
    config = bert_config("tiny", vocab_size=512, max_position_embeddings=64)
    model = BertModel(config)
    ids = np.random.default_rng(0).integers(5, 512, (4, 64)).astype(np.int32)
    mask = np.ones_like(ids)
    params = model.init(jax.random.PRNGKey(0), ids, None, mask)["params"]
    forward = lambda p, i, m: model.apply({"params": p}, i, None, m)["pooled_output"]  # noqa: E731
    return forward, params, ids, mask


def test_same_outputs_as_jax_jit(tiny_bert):
    forward, params, ids, mask = tiny_bert
    np.testing.assert_allclose(jit_inference(forward)(params, ids, mask),
                               jax.jit(forward)(params, ids, mask), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="a CPU compiler option")
def test_cpu_program_has_no_ynnpack_fusions(tiny_bert, monkeypatch):
    forward, params, ids, mask = tiny_bert
    monkeypatch.delenv("XLA_FLAGS", raising=False)

    def hlo(jitted):
        return jitted.lower(params, ids, mask).compile().as_text()

    assert "ynn_fusion" in hlo(jax.jit(forward))  # XLA's default, which training keeps
    assert "ynn_fusion" not in hlo(jit_inference(forward))
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=dot")
    assert "ynn_fusion" in hlo(jit_inference(forward))  # the user's own choice stands


def result(**metrics):
    from bertjax.training.evaluation import EvalResult

    return EvalResult(metrics, [{"id": "0", "prediction": 0, "gold": 0}])


def test_an_undefined_first_score_does_not_freeze_the_best_checkpoint(tmp_path):
    """An untrained regressor's constant predictions have no Pearson (NaN); NaN compares false
    with every number, so a best of NaN was never beaten and the run kept its first
    checkpoint. The best must be the evaluation with the highest defined score."""
    from bertjax.training.evaluation import BestKeeper

    keeper = BestKeeper(tmp_path, "pearson")
    params = {"w": np.zeros((2,), np.float32)}
    scores = [float("nan"), 0.2, float("nan"), 0.5, 0.4]
    for step, score in enumerate(scores, start=1):
        keeper.record(step, result(pearson=score), params)
    assert keeper.results["best"]["step"] == 1 + int(np.nanargmax(scores))
    assert keeper.results["best"]["pearson"] == 0.5
