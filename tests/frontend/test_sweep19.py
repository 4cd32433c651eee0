"""Regressions and additions from the eighth session's sweep 19: NumPy functions users call
that adjit now traces (np.bincount with weights, np.apply_along_axis, np.matvec/np.vecmat)."""
import numpy as np
import pytest

import adjit

_LABELS = np.array([0, 1, 1, 4, 0, 0, 1, 2])


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("fn, x", [
    (lambda w: np.sum(np.bincount(_LABELS, weights=w) ** 2), np.linspace(-1, 2, 8)),
    (lambda w: np.bincount(_LABELS, w, minlength=7) @ np.arange(7.0), np.linspace(-1, 2, 8)),
    (lambda w: np.sum(np.bincount(_LABELS, weights=w) ** 2), np.linspace(-1, 2, 8, dtype="f4")),
    (lambda x: np.sum(np.apply_along_axis(lambda r: r**2 / np.sum(r**2), 1, x) *
                      np.arange(4)), np.arange(12.0).reshape(3, 4) - 5.5),
    (lambda x: np.sum(np.apply_along_axis(np.sort, 0, x) * np.arange(4)),
     np.cos(np.arange(12.0)).reshape(3, 4)),
    (lambda x: np.sum(np.apply_along_axis(np.linalg.norm, 1, x)), np.sin(np.arange(12.0)).reshape(3, 4)),
    (lambda x: np.sum(np.apply_along_axis(lambda r: np.outer(r, r), 1, x) * np.arange(4)),
     np.cos(np.arange(24.0)).reshape(2, 3, 4)),
    (lambda x: np.sum(np.apply_along_axis(lambda r, p: r**p, -1, x, 3)),
     np.cos(np.arange(24.0)).reshape(2, 3, 4)),
    (lambda x: np.sum(np.matvec(x, x[:, 0, :3]) ** 2), np.cos(np.arange(18.0)).reshape(2, 3, 3)),
    (lambda x: np.sum(np.vecmat(x[:, :, 0], x) ** 2), np.cos(np.arange(24.0)).reshape(2, 3, 4)),
])
def test_bincount_apply_along_axis_matvec_and_vecmat_match_numpy(fn, x, backend):
    if "matvec" in str(fn.__code__.co_names) and not hasattr(np, "matvec"):
        pytest.skip("np.matvec and np.vecmat are NumPy 2.2's")
    value, g = adjit.value_and_grad(fn, backend=backend)(x)
    want = fn(x)
    assert np.asarray(value).dtype == np.asarray(want).dtype
    np.testing.assert_allclose(value, want, rtol=1e-6)
    assert g.dtype == x.dtype
    assert adjit.gradcheck(fn, x.astype(np.float64), backend=backend) < 1e-6


def test_bincount_of_traced_labels_asks_for_the_length():
    def f(w):
        return np.sum(np.bincount(np.argmax(w.reshape(4, 2), 1), weights=w[:4]))
    with pytest.raises(adjit.UnsupportedError, match=r"np.add.at\(counts, x, weights\)"):
        adjit.grad(f)(np.ones(8))


def test_apply_along_axis_is_unrolled_up_to_a_limit():
    f = lambda x: np.sum(np.apply_along_axis(np.sum, 1, x))  # noqa: E731
    np.testing.assert_array_equal(adjit.grad(f)(np.ones((5, 2))), 1.0)
    with pytest.raises(adjit.UnsupportedError, match="axis= arguments"):
        adjit.grad(f)(np.ones((2000, 2)))


def test_numpys_method_called_through_the_class_names_the_line():
    def f(x):
        return np.sum(np.ndarray.copy(np.tanh(x)))
    with pytest.raises(adjit.TraceError, match=r"test_sweep19.py:\d+.*Write x.copy\(...\) or "
                                                r"np.copy\(x\)"):
        adjit.grad(f)(np.ones(3))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_softmax_and_log_softmax_are_exact_in_the_shift(backend):
    # (x - m) - log(sum(exp(x - m))), as SciPy and PyTorch: not x - (m + log(...)), which
    # rounds the log to the spacing of m
    x = np.array([1e16, 1e16, 1.0])
    np.testing.assert_allclose(adjit.compile(adjit.softmax, backend=backend)(x), [0.5, 0.5, 0])
    np.testing.assert_allclose(adjit.compile(adjit.log_softmax, backend=backend)(x),
                               [-np.log(2), -np.log(2), -1e16])
    w = np.array([0.3, -0.7, 0.2])
    np.testing.assert_allclose(
        adjit.grad(lambda x: np.sum(adjit.softmax(x) * w), backend=backend)(x), [0.25, -0.25, 0])
    x32 = np.array([1000.0, 990.0], np.float32)
    want = np.array([-4.5398899e-05, -10.0000454])      # x - m - log1p(exp(-10)) in float64
    np.testing.assert_allclose(adjit.compile(adjit.log_softmax, backend=backend)(x32), want,
                               rtol=1e-6, atol=3e-8)    # float32's log(1 + 4.54e-5); it was 2e-5 off
    np.testing.assert_allclose(adjit.compile(adjit.softmax, backend=backend)(x32), np.exp(want),
                               rtol=2e-6)
