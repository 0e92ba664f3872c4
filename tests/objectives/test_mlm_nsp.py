"""MLM and NSP losses against a direct numpy computation: weights, padding, accuracy."""

import numpy as np
import pytest
from scipy.special import log_softmax

from bertjax.objectives.mlm import mlm_loss
from bertjax.objectives.nsp import nsp_loss
from bertjax.objectives.objective import metric_values

pytestmark = pytest.mark.unit  # the unit tier: make test-unit


def test_mlm_loss_weights_selected_positions_only():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 4, 11)).astype(np.float32)
    ids = rng.integers(0, 11, (3, 4))
    weights = np.array([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], np.float32)
    ids[0, 0] = logits[0, 0].argmax()  # one sure hit
    metrics = metric_values(mlm_loss(logits, ids, weights))
    loss = metrics["mlm_loss"]
    xent = -np.take_along_axis(log_softmax(logits, -1), ids[..., None], -1)[..., 0]
    assert np.isclose(loss, (xent * weights).sum() / weights.sum(), atol=1e-6)
    hits = (logits.argmax(-1) == ids) * weights
    assert np.isclose(metrics["mlm_accuracy"], hits.sum() / weights.sum())
    assert metrics["mlm_weight"] == weights.sum()
    logits_changed = logits.copy()
    logits_changed[weights == 0] = 100.0  # padding slots never matter
    assert np.isclose(mlm_loss(logits_changed, ids, weights)["mlm_loss"].value, loss)


def test_nsp_loss_and_accuracy():
    logits = np.array([[2.0, 0.0], [0.0, 1.0], [3.0, -1.0]], np.float32)
    labels = np.array([0, 0, 1])
    metrics = metric_values(nsp_loss(logits, labels))
    loss = metrics["nsp_loss"]
    xent = -log_softmax(logits, -1)[np.arange(3), labels]
    assert np.isclose(loss, xent.mean(), atol=1e-6)
    assert np.isclose(metrics["nsp_accuracy"], 1 / 3)
