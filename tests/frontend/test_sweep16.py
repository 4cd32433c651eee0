"""Regressions from the seventh session's sweep: code ported from HIPS/autograd's examples and
tests, google/tangent's test functions, JAX's NumPy op records, and the GPU path."""
import numpy as np
import pytest

import adjit


@pytest.mark.parametrize("fn", [lambda x: np.dot(2.0, x), lambda x: np.dot(x, 2.0),
                                lambda x: x.dot(np.float32(2.0)), lambda x: np.dot(x[0, 0, 0], x)])
def test_dot_of_a_0d_and_an_nd_array_is_a_product(fn):
    x = np.arange(24.0).reshape(2, 3, 4)
    got, want = adjit.compile(fn, backend="numpy")(x), fn(x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fn, x", [
    (lambda x: np.sum(np.std(x, axis=0)), np.array([[0.3, 0.5, -1.0]])),     # a batch of one
    (np.std, 3.5),
    (lambda x: np.linalg.norm(x), np.zeros(3)),
    (lambda x: np.sum(np.linalg.norm(x, axis=1)), np.array([[0.0, 0.0], [3.0, 4.0]])),
])
def test_std_and_norm_of_constant_or_zero_data_have_derivative_zero(fn, x):
    # as PyTorch: sqrt's 0 * inf stays out; the functions are constant (or at a kink) there
    for backend in ("numpy", "numba"):
        g = adjit.grad(fn, backend=backend)(x)
        assert np.all(np.isfinite(g))
    if np.shape(x) == (2, 2):
        np.testing.assert_allclose(g, [[0.0, 0.0], [0.6, 0.8]])
    else:
        np.testing.assert_array_equal(g, 0.0)


def test_pairwise_distances_have_finite_gradients_and_std_keeps_nan():
    x = np.random.default_rng(0).normal(size=(4, 2))
    f = lambda x: np.sum(np.linalg.norm(x[:, None] - x[None], axis=-1) ** 1.5)  # noqa: E731
    assert adjit.gradcheck(f, x) < 1e-6
    assert np.isnan(adjit.compile(np.std, backend="numpy")(np.array([1.0, np.nan])))
    assert np.isnan(adjit.compile(np.std, backend="numpy")(np.array([1.0, np.inf])))
    assert np.isnan(adjit.compile(lambda x: np.std(x, ddof=1), backend="numpy")(np.ones(1)))
