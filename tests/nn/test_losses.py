"""Tests for adjit.nn.losses: values against reference formulas, stability, gradients, errors."""

import numpy as np
import pytest

import adjit
from adjit.nn import binary_cross_entropy_with_logits, mse, softmax_cross_entropy


def ref_cross_entropy(logits, labels):
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -np.mean(logp[np.arange(len(labels)), labels])


def ref_bce(x, t):
    p = 1 / (1 + np.exp(-x))
    return np.mean(-t * np.log(p) - (1 - t) * np.log(1 - p))


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    return rng.standard_normal((7, 5)), rng.integers(0, 5, 7)


def test_cross_entropy_matches_reference_eager_and_compiled(batch):
    logits, labels = batch
    expected = ref_cross_entropy(logits, labels)
    assert softmax_cross_entropy(logits, labels) == pytest.approx(expected, rel=1e-12)
    f = adjit.compile(softmax_cross_entropy, backend="numpy")
    assert float(f(logits, labels)) == pytest.approx(expected, rel=1e-12)


def test_cross_entropy_is_stable_for_huge_logits():
    logits = np.array([[1000.0, 0.0, -1000.0], [-5000.0, 5000.0, 0.0]])
    f = adjit.compile(softmax_cross_entropy, backend="numpy")
    assert float(f(logits, np.array([0, 1]))) == pytest.approx(0.0, abs=1e-12)
    assert float(f(logits, np.array([1, 0]))) == pytest.approx(5500.0)
    g = adjit.grad(softmax_cross_entropy, backend="numpy")(logits, np.array([1, 0]))
    assert np.all(np.isfinite(g))


def test_cross_entropy_gradient_is_softmax_minus_one_hot(batch):
    logits, labels = batch
    g = adjit.grad(softmax_cross_entropy, backend="numpy")(logits, labels)
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(g, (p - np.eye(5)[labels]) / len(labels), atol=1e-14)
    assert adjit.gradcheck(softmax_cross_entropy, logits, labels) < 1e-7


def test_cross_entropy_with_probability_targets(batch):
    logits, labels = batch
    soft = np.eye(5)[labels]
    assert softmax_cross_entropy(logits, soft) == pytest.approx(
        ref_cross_entropy(logits, labels), rel=1e-12)


def test_mse_and_bce_match_reference_and_gradcheck():
    rng = np.random.default_rng(1)
    x, t = rng.standard_normal((6, 2)), rng.random((6, 2))
    assert mse(x, t) == pytest.approx(np.mean((x - t) ** 2), rel=1e-14)
    assert binary_cross_entropy_with_logits(x, t) == pytest.approx(ref_bce(x, t), rel=1e-12)
    assert adjit.gradcheck(mse, x, t) < 1e-7
    assert adjit.gradcheck(binary_cross_entropy_with_logits, x, t) < 1e-7


def test_bce_is_stable_for_huge_logits():
    f = adjit.compile(binary_cross_entropy_with_logits, backend="numpy")
    x = np.array([800.0, -800.0])
    assert float(f(x, np.array([1.0, 0.0]))) == pytest.approx(0.0, abs=1e-12)
    assert float(f(x, np.array([0.0, 1.0]))) == pytest.approx(800.0)


def test_float32_stays_float32():
    logits = np.zeros((4, 3), np.float32)
    out = adjit.compile(softmax_cross_entropy, backend="numpy")(logits, np.array([0, 1, 2, 0]))
    assert out.dtype == np.float32


@pytest.mark.parametrize("call, match", [
    (lambda: softmax_cross_entropy(np.zeros((3, 4)), np.array([0, 1])), "3 integer labels"),
    (lambda: softmax_cross_entropy(np.zeros(4), np.array([0])), "batch, classes"),
    (lambda: softmax_cross_entropy(np.zeros((0, 4)), np.zeros(0, int)), "empty"),
    (lambda: softmax_cross_entropy(np.zeros((2, 4)), np.array(["a", "b"])), "integers or"),
    (lambda: softmax_cross_entropy(np.zeros((2, 4)), np.array([0, 4])), "outside 0..3"),
    (lambda: mse(np.zeros((3, 1)), np.zeros(3)), "reshape"),
    (lambda: binary_cross_entropy_with_logits(np.zeros(2), np.zeros(3)), "differs"),
])
def test_errors_are_clear(call, match):
    with pytest.raises((adjit.ShapeError, ValueError), match=match):
        call()


def test_shape_errors_are_raised_while_tracing():
    f = adjit.compile(softmax_cross_entropy, backend="numpy")
    with pytest.raises(adjit.ShapeError, match="empty"):
        f(np.zeros((0, 3), np.float32), np.zeros(0, np.int64))
