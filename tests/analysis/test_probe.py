"""The feature-based approach's classifier: L2 logistic regression fitted by L-BFGS, the same
solution as scikit-learn's, the L2 weight chosen on a held-out tenth, pairs combined."""

import numpy as np
import pytest

from bertjax.analysis.probe import fit_probe, pair_features


def data(n=600, d=20, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) * rng.uniform(0.1, 10, size=d) + rng.normal(size=d)
    w = rng.normal(size=(d, classes))
    y = np.argmax(x / x.std(0) @ w + rng.normal(size=(n, classes)), axis=1)
    return x, y


def test_same_classifier_as_scikit_learn():
    linear_model = pytest.importorskip("sklearn.linear_model", reason="needs scikit-learn")
    x, y = data()
    probe = fit_probe(x[:400], y[:400])
    z = (x[:400] - probe.mean) / probe.scale
    # sklearn minimises C * sum(nll) + |W|^2 / 2; the probe mean(nll) + l2 |W|^2
    reference = linear_model.LogisticRegression(C=1 / (2 * probe.l2 * 400), tol=1e-8,
                                                max_iter=5000).fit(z, y[:400])
    centred = probe.weights - probe.weights.mean(1, keepdims=True)  # softmax's free shift
    np.testing.assert_allclose(centred, reference.coef_.T, atol=2e-3)
    test = (x[400:] - probe.mean) / probe.scale
    assert probe.accuracy(x[400:], y[400:]) == pytest.approx(reference.score(test, y[400:]),
                                                             abs=0.01)


def test_l2_chosen_on_held_out_rows_and_fit_is_deterministic():
    x, y = data(n=300, d=40)
    a, b = fit_probe(x, y, seed=3), fit_probe(x, y, seed=3)
    assert a.l2 == b.l2 and np.array_equal(a.weights, b.weights)
    assert 0.0 <= a.heldout_accuracy <= 1.0 and a.accuracy(x, y) > 0.6
    assert fit_probe(x, y, l2_grid=(10.0,)).l2 == 10.0


def test_pairs_and_bad_input():
    u, v = np.ones((4, 3)), np.full((4, 3), 2.0)
    np.testing.assert_array_equal(pair_features(u, v)[0], [1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2])
    with pytest.raises(ValueError, match="N >= 10"):
        fit_probe(np.zeros((3, 2)), [0, 1, 0])
