"""Regressions from the sixth session's user-style sweep and its known-left list."""
import numpy as np
import pytest

import adjit


def test_ascontiguousarray_of_a_strided_view_is_a_copy():
    def f(z):
        z = z * 1.0
        c, d = np.ascontiguousarray(z.T), np.ascontiguousarray(z[0])
        z[0, 0] = 100.0          # NumPy: c is a copy (z.T is not C-ordered), d a view
        return c, d

    z = np.arange(6.0).reshape(2, 3)
    for got, want in zip(adjit.compile(f)(z), f(z.copy())):
        np.testing.assert_array_equal(got, want)


def test_order_a_of_a_fortran_ordered_argument_is_refused_not_misread():
    f = adjit.compile(lambda x: np.sum(x.ravel("A") * np.arange(6.0)))
    xc = np.arange(6.0).reshape(2, 3)
    assert f(xc) == 55.0
    with pytest.raises(adjit.UnsupportedError, match="Fortran-ordered.*order='C'"):
        f(np.asfortranarray(xc))      # NumPy reads it column by column: 49.0
    g = adjit.grad(lambda x: np.sum(x.ravel() * np.arange(6.0)))
    np.testing.assert_array_equal(g(np.asfortranarray(xc)), xc)   # order 'C' is layout-free


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_svd_hermitian_gives_numpys_factors(backend):
    rng = np.random.default_rng(3)
    a = rng.normal(size=(2, 4, 4))
    a = a + np.swapaxes(a, -1, -2)          # eigenvalues of both signs
    f = adjit.compile(lambda a: np.linalg.svd(a, hermitian=True), backend=backend)
    for got, want in zip(f(a), np.linalg.svd(a, hermitian=True)):
        np.testing.assert_allclose(got, want, atol=1e-12)
    s = adjit.compile(lambda a: np.linalg.svd(a, compute_uv=False, hermitian=True))(a)
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), atol=1e-12)


def test_svd_hermitian_gradient_of_its_own_signs():
    w = np.random.default_rng(4).normal(size=(4, 4))

    def loss(a):
        u, s, vh = np.linalg.svd(a + a.T, hermitian=True)
        return np.sum(u * w) + np.sum(vh * w.T) + np.sum(s ** 2)

    assert adjit.gradcheck(loss, np.random.default_rng(5).normal(size=(4, 4))) < 1e-6
