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


SLICES_OF_PACKED = {
    "unpack": lambda a, b: np.prod(np.array([a * 2, b + 1])),
    "tuple unpack": lambda a, b: (lambda s: s[0] * s[1] + s[-1])(np.stack([a, b, a * b])),
    "rows of a stack": lambda a, b: np.sum(np.stack([a, b])[1:, ::2] * np.stack([a, b])[0][::2]),
    "across parts": lambda a, b: np.sum(np.concatenate([a, b, a], axis=1)[:, 2:5] ** 2),
    "within a part": lambda a, b: np.sum(np.concatenate([a, b], axis=1)[1, 4:6] ** 3),
    "negative index": lambda a, b: np.sum(np.concatenate([a, b])[-1] * 3.0),
    "reversed": lambda a, b: np.sum(np.concatenate([a, b], axis=1)[:, ::-1][:, 0] * a[:, 0]),
    "unit axis": lambda a, b: np.sum(np.reshape(a, (1, 3, 3))[0, :, 1:] * b[:, :2]),
    "empty": lambda a, b: np.sum(np.concatenate([a, b], axis=1)[:, 3:3]) + np.sum(a),
}


@pytest.mark.parametrize("name", list(SLICES_OF_PACKED))
def test_slices_of_packed_arrays(name):
    f = SLICES_OF_PACKED[name]
    rng = np.random.default_rng(6)
    if name in ("unpack", "tuple unpack"):
        args = (1.5, -0.5)
    else:
        args = (rng.normal(size=(3, 3)), rng.normal(size=(3, 3)))
    v, g = adjit.value_and_grad(f, argnums=(0, 1))(*args)
    np.testing.assert_allclose(v, f(*args), rtol=1e-12)
    assert adjit.gradcheck(f, *args) < 1e-6


def test_a_packed_state_unpacked_by_index_keeps_its_scalars():
    def f(a, b):
        s = np.array([a * 2, b + 1])
        x, v = s
        return x * v + s[0]

    src = adjit.compile(f, backend="numpy").lower(1.0, 2.0).source
    assert "concatenate" not in src and "reshape" not in src, src
