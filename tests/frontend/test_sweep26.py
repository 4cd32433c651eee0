"""Sweep 26's finds: Fortran-ordered copies made inside, lstsq of a rank-deficient matrix, NumPy
functions adjit does not implement named in the error, a 2-d block written at a traced offset,
data-dependent index functions, the scatter of an im2col backward."""
import numpy as np
import numpy.polynomial as P
import pytest
from finite_differences import numgrad as _fd

import adjit
from adjit.ir.errors import TraceError, UnsupportedError
from adjit.ir.ops import _scatter_add


A = np.arange(6.0).reshape(2, 3)


@pytest.mark.parametrize("f", [
    lambda A: np.copy(A, order="F").ravel(order="K"),
    lambda A: np.copy(A, order="F").reshape(-1, order="A"),
    lambda A: A.astype(np.float64, order="F").flatten("K"),
    lambda A: A.astype(np.float32, order="F").ravel("K"),
], ids=["copy-K", "copy-reshape-A", "astype-flatten-K", "astype32-K"])
def test_fortran_copies_made_inside_are_never_read_in_c_order(f):
    # NumPy reads memory order (0 3 1 4 2 5); adjit used to give C order silently
    with pytest.raises(UnsupportedError, match="order="):
        adjit.compile(f)(A)


def test_fortran_arrays_made_inside_and_filled_refuse_memory_order_reads():
    def filled(A):
        B = np.zeros((2, 3), order="F")
        B[:] = A
        return B.ravel("K")
    with pytest.raises(UnsupportedError, match="made Fortran-ordered"):
        adjit.compile(filled)(A)

    def c_order(A):     # order "C" (and "F") reads are fine
        B = np.empty((2, 3), order="F")
        B[...] = A * 2
        return np.concatenate([B.ravel(), B.reshape(-1, order="F")])
    np.testing.assert_array_equal(adjit.compile(c_order)(A), c_order(A))


def test_np_copy_keeps_the_values_and_the_gradient():
    w = np.arange(6.0).reshape(2, 3)

    def f(A):
        return np.sum(np.copy(A) * w) + np.sum(A.astype(np.float64, order="C") ** 2)
    np.testing.assert_allclose(adjit.grad(f)(A), _fd(f, A), rtol=1e-7)


RNG = np.random.default_rng(0)
_A2 = RNG.normal(size=(6, 2))
DEFICIENT = np.column_stack([_A2, _A2[:, 0]])      # 6 x 3 of rank 2
FULL = RNG.normal(size=(6, 3))
Y = RNG.normal(size=6)


@pytest.mark.parametrize("a", [DEFICIENT, FULL], ids=["rank-deficient", "full-rank"])
def test_lstsq_of_a_constant_matrix_is_numpys(a):
    def f(y):
        c, res, rank, s = np.linalg.lstsq(a, y, rcond=None)
        if rank < 3:            # a Python-usable rank, as NumPy's
            c = c * 2.0
        return np.sum(res) + np.sum(c)
    np.testing.assert_allclose(adjit.compile(f)(Y), f(Y), rtol=1e-12)
    np.testing.assert_allclose(adjit.grad(f)(Y), _fd(f, Y), rtol=1e-6, atol=1e-9)
    res = adjit.compile(lambda y: np.linalg.lstsq(a, y, rcond=None)[1])(Y)
    assert res.shape == np.linalg.lstsq(a, Y, rcond=None)[1].shape


def test_lstsq_of_a_traced_rank_deficient_matrix_gives_nan_residuals():
    # NumPy's residuals are empty there: a shape that depends on the values
    res = adjit.compile(lambda a: np.linalg.lstsq(a, Y, rcond=None)[1])(DEFICIENT)
    assert res.shape == (1,) and np.isnan(res[0])
    full = adjit.compile(lambda a: np.linalg.lstsq(a, Y, rcond=None)[1])(FULL)
    np.testing.assert_allclose(full, np.linalg.lstsq(FULL, Y, rcond=None)[1], rtol=1e-12)


def test_polyfit_of_traced_data_works_through_lstsq():
    x = np.linspace(0.0, 1.0, 8)
    y = np.sin(3 * x)
    f = lambda y: np.sum(P.polynomial.polyfit(x, y, 2) ** 2)    # noqa: E731
    np.testing.assert_allclose(adjit.grad(f)(y), _fd(f, y), rtol=1e-6)
    g = lambda y: np.sum(P.chebyshev.chebfit(x, y, 3))    # noqa: E731
    np.testing.assert_allclose(adjit.grad(g)(y), _fd(g, y), rtol=1e-6)


@pytest.mark.parametrize("call,name", [
    (lambda c: P.polynomial.polyadd(c, c[:2]), "numpy.polynomial.polynomial.polyadd"),
    (lambda c: P.polynomial.polyder(c, 2), "numpy.polynomial.polynomial.polyder"),
    (lambda c: P.polynomial.polyvander(c, 3), "numpy.polynomial.polynomial.polyvander"),
    (lambda c: np.poly1d(c)(np.arange(3.0)), "poly1d.__init__"),
], ids=["polyadd", "polyder", "polyvander", "poly1d"])
def test_numpy_code_adjit_does_not_implement_is_named(call, name):
    with pytest.raises((TraceError, UnsupportedError), match=f"inside [a-z_.]*{name}"):
        adjit.grad(lambda c: np.sum(call(c)))(np.array([1.0, 2.0, 3.0]))


def test_a_2d_block_at_traced_offsets_is_written():
    x, p = RNG.normal(size=(8, 9)), RNG.normal(size=(4, 5))
    off = np.array([2, 3])
    w = np.arange(9.0)

    def paste(x, p, off):
        y = x.copy()
        y[(off[0] + np.arange(4))[:, None], off[1] + np.arange(5)] = p
        return np.sum(y ** 2 * w)

    def paste_ix(x, p, off):
        y = x.copy()
        y[np.ix_(off[0] + np.arange(4), off[1] + np.arange(5))] = p
        return np.sum(y ** 2 * w)
    for f in (paste, paste_ix):
        assert np.isclose(adjit.compile(f)(x, p, off), f(x, p, off), rtol=1e-13)
        gx, gp = adjit.grad(f, argnums=(0, 1))(x, p, off)
        np.testing.assert_allclose(gx, _fd(lambda x: f(x, p, off), x), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(gp, _fd(lambda p: f(x, p, off), p), rtol=1e-6, atol=1e-8)

    def repeats(x, p, off):     # the same column for every row: positions repeat
        y = x.copy()
        y[(off[0] + np.arange(4))[:, None], off[1] + np.zeros(5, int)] = p
        return np.sum(y)
    with pytest.raises(UnsupportedError, match="may repeat"):
        adjit.grad(repeats)(x, p, off)


@pytest.mark.parametrize("f", [lambda x: np.sum(x[np.nonzero(x > 0)]),
                               lambda x: np.sum(np.argwhere(x > 0) * x[0]),
                               lambda x: np.sum(np.flatnonzero(x) * x[0]),
                               lambda x: x.nonzero()[0] * x[0]],
                         ids=["nonzero", "argwhere", "flatnonzero", "method"])
def test_data_dependent_index_functions_say_what_to_write(f):
    with pytest.raises(UnsupportedError, match=r"depends on the data.*np\.where\(condition, x"):
        adjit.grad(f)(np.ones(3))


@pytest.mark.parametrize("key,shape,gshape", [
    ((("s", slice(None)), ("a", 0)), (4, 10), (4, 6)),
    ((("s", slice(None)), ("s", slice(1, 3)), ("a", 0)), (2, 4, 10), (2, 2, 6)),
    ((("a", 0), ("s", slice(None))), (10, 3), (6, 3)),
])
def test_scatter_add_equals_add_at(key, shape, gshape):
    rng = np.random.default_rng(1)
    idx = rng.integers(-10, 10, size=6)      # repeats and negative positions, as add.at
    g = rng.normal(size=gshape)
    ref = np.zeros(shape)
    np.add.at(ref, tuple(idx if k[0] == "a" else k[1] for k in key), g)
    got = _scatter_add(g, idx, key=key, shape=shape)
    np.testing.assert_array_equal(got, ref)
    assert got.dtype == np.float64


# -- second round (testers D and E) ------------------------------------------------------------
def test_blocks_whose_positions_wrap_onto_each_other_are_refused():
    # NumPy wraps a negative position: i - 2 + np.arange(4) on 3 rows writes row 1 twice,
    # and np.array([0, -3]) names row 0 twice (the last write wins there; adjit added them)
    p = np.arange(1.0, 5.0)

    def block(p, i):
        y = np.zeros(3)
        y[i + np.arange(4)] = p
        return y

    def mesh(p, i):
        y = np.zeros((3, 2))
        y[(i + np.arange(4))[:, None], np.arange(2)] = p[:, None] * np.ones(2)
        return y

    def rows(p, j):
        y = np.zeros((3, 4))
        y[np.ix_(np.array([0, -3]), j + np.arange(2))] = p.reshape(2, 2)
        return y
    for f, a in ((mesh, -2), (rows, 1)):
        with pytest.raises(UnsupportedError, match="may repeat"):
            adjit.compile(f)(p, np.int64(a))
    # one axis: written one position after another, the last write wins as in NumPy
    np.testing.assert_array_equal(adjit.compile(block)(p, np.int64(-2)), block(p, -2))
    g = adjit.grad(lambda p, i: np.sum(block(p, i) * np.arange(1.0, 4.0)))(p, np.int64(-2))
    np.testing.assert_array_equal(g, [0.0, 3.0, 1.0, 2.0])     # p[0] is overwritten

    def fits(p, i):     # four distinct rows of five, whatever the offset's sign
        y = np.zeros(5)
        y[i + np.arange(4)] = p
        return y
    for i in (-3, 0, 1):
        np.testing.assert_array_equal(adjit.compile(fits)(p, np.int64(i)), fits(p, i))


@pytest.mark.parametrize("how", ["copy", "copy-K", "array", "view", "columns", "product",
                                 "sin", "astype"])
def test_values_computed_from_a_fortran_array_made_inside_refuse_memory_order_reads(how):
    def f(A):
        y = np.zeros((2, 3), order="F")
        y[:] = A
        z = {"copy": lambda: np.copy(y), "copy-K": lambda: y.copy("K"),
             "array": lambda: np.array(y), "view": lambda: y[:], "columns": lambda: y[:, :2],
             "product": lambda: y * 2, "sin": lambda: np.sin(y),
             "astype": lambda: y.astype(np.float32)}[how]()
        return z.ravel("K")
    with pytest.raises(UnsupportedError, match="order='K'"):
        adjit.compile(f)(A)


def test_a_users_shape_mistake_on_an_array_made_inside_is_not_blamed_on_numpy():
    def f(x):
        y = np.zeros(6)
        y[:] = x
        return np.reshape(y, (4, 4))
    with pytest.raises(adjit.ShapeError) as e:
        adjit.compile(f)(np.ones(6))
    assert "inside numpy" not in str(e.value)
