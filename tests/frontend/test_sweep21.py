"""Regressions from the tenth session (sweep 21: MyGrad's, Chainer's, JAX's linalg/einsum and
PyTorch's OpInfo tests ported, special values, loop-heavy code)."""
import types

import numpy as np
import pytest

import adjit

_A = np.array([-2.0, -0.3, 0.2, 0.9])


def test_modf_has_derivative_one_at_negative_integers_and_keeps_numpys_signs():
    x = np.array([-2.0, -1.0, -0.0, 2.0, -2.5, np.inf, -np.inf, np.nan, 3.7, 0.0])
    frac, whole = adjit.compile(np.modf)(x)
    want_frac, want_whole = np.modf(x)
    np.testing.assert_array_equal(frac, want_frac)
    np.testing.assert_array_equal(np.signbit(frac), np.signbit(want_frac))
    np.testing.assert_array_equal(whole, want_whole)
    np.testing.assert_array_equal(
        adjit.grad(lambda v: np.sum(np.modf(v)[0]))(np.array([-2.0, -1.0, -0.0, 2.0, -2.5])), 1.0)


def _clip_into_zeros(a):
    o = np.zeros_like(a)
    np.clip(a, -0.5, 0.5, where=a > 0, out=o)
    return o


def _clip_the_negatives(a):
    c = a.copy()
    np.clip(c, -0.5, 0.5, out=c, where=c < 0)
    return c


def _clip_method_where(a):
    c = a.copy()
    c.clip(-0.2, 0.2, out=c, where=c > 0)
    return c


def _greater_into_floats(a):
    o = np.full_like(a, 7.0)
    np.greater(a, 0.5, out=o, where=a > 0)
    return o


@pytest.mark.parametrize("fn, grad", [(_clip_into_zeros, [0, 0, 1, 0]),
                                      (_clip_the_negatives, [0, 1, 1, 1]),
                                      (_clip_method_where, None), (_greater_into_floats, None)])
def test_clip_and_predicates_with_where_keep_out_where_the_mask_is_false(fn, grad):
    np.testing.assert_array_equal(adjit.compile(fn)(_A), fn(_A))
    if grad is not None:
        np.testing.assert_array_equal(adjit.grad(lambda a: np.sum(fn(a)))(_A), grad)


def test_clip_takes_dtype_and_integer_bounds_beyond_the_dtype():
    assert adjit.compile(lambda a: np.clip(a, 0, 1, dtype=np.float32))(_A).dtype == np.float32
    a = np.array([-100, 5, 100], np.int8)
    for fn in (lambda a: np.clip(a, -1000, 50), lambda a: a.clip(-5, 300)):
        r = adjit.compile(fn)(a)
        assert r.dtype == np.int8
        np.testing.assert_array_equal(r, fn(a))


def test_gaussian_elimination_with_row_swaps_by_argmax():
    """A[[k, p]] = A[[p, k]] with p from argmax: one write per position, in order."""
    def logdet(A):
        A = A.copy()
        for k in range(A.shape[0] - 1):
            p = k + np.argmax(np.abs(A[k:, k]))
            A[[k, p]] = A[[p, k]]
            A[k + 1:] -= np.outer(A[k + 1:, k] / A[k, k], A[k])
        return np.sum(np.log(np.abs(np.diag(A))))
    A = np.random.default_rng(0).normal(size=(5, 5))
    np.testing.assert_allclose(adjit.compile(logdet)(A), np.linalg.slogdet(A)[1], rtol=1e-12)
    np.testing.assert_allclose(adjit.grad(logdet)(A), np.linalg.inv(A).T, atol=1e-12)

    def repeated(x):
        y = np.zeros(4)
        i = np.argmax(x)
        y[[i, i, 0]] = x[:3]
        return y
    x = np.array([0.3, 2.0, 1.0, 0.5])
    np.testing.assert_array_equal(adjit.compile(repeated)(x), repeated(x))


def test_matrix_power_refuses_a_float_exponent_as_numpy():
    with pytest.raises(TypeError, match="exponent must be an integer"):
        adjit.compile(lambda a: np.linalg.matrix_power(a, 2.7))(np.eye(2))
    np.testing.assert_array_equal(
        adjit.compile(lambda a: np.linalg.matrix_power(a, np.int64(3)))(2 * np.eye(2)), 8 * np.eye(2))


def test_norm_with_a_traced_ord_asks_for_a_static_argument():
    with pytest.raises(adjit.TraceError, match="ord="):
        adjit.compile(lambda x, p: np.linalg.norm(x, ord=p))(np.ones(3), 2)
    assert adjit.compile(lambda x, p: np.linalg.norm(x, ord=p), static_argnums=1)(
        np.ones(4), 1) == 4.0


def test_array_methods_take_numpys_keywords():
    m = np.array([True, False, True, True])
    cases = [lambda a: (a > 0).all(where=m), lambda a: (a > 0).any(axis=0, where=~m),
             lambda a: np.all(a > -1, where=m), lambda a: a.argsort(stable=True),
             lambda a: a.argsort(axis=0, kind="stable"),
             lambda a: (a.reshape(2, 2) > 0).all(1, keepdims=True)]
    for fn in cases:
        np.testing.assert_array_equal(adjit.compile(fn)(_A), fn(_A))

    def sort_stable(a):
        c = a.copy()
        c.sort(stable=True)
        return c
    np.testing.assert_array_equal(adjit.compile(sort_stable)(_A), np.sort(_A))
    with pytest.raises(adjit.TraceError, match=r"\.item\(\)"):
        adjit.compile(lambda a: a.item(1))(_A)


def test_xlogy_is_zero_at_x_zero_for_every_y_but_nan():
    sp = pytest.importorskip("scipy.special")
    x = np.array([0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 0.0])
    y = np.array([-1.0, -np.inf, np.nan, 0.0, 2.0, -1.0, 3.0])
    np.testing.assert_array_equal(adjit.compile(sp.xlogy)(x, y), sp.xlogy(x, y))
    np.testing.assert_array_equal(adjit.compile(sp.xlog1py)(x, y - 1), sp.xlog1py(x, y - 1))


def test_nanmedian_of_an_odd_count_is_the_middle_value_itself():
    x = np.array([1e308, np.nan, 1e308, 3.0])
    assert adjit.compile(np.nanmedian)(x) == 1e308
    np.testing.assert_array_equal(adjit.grad(np.nanmedian)(np.array([3.0, np.nan, 1.0, 2.0])),
                                  [0, 0, 0, 1])


@pytest.mark.parametrize("spec, shapes", [
    ("ab,cd,bc->ad", [(6, 5), (4, 3), (5, 4)]), ("ea,fb,abcd,gc,hd->efgh", [(2, 3)] * 2 + [
        (3, 3, 3, 3)] + [(2, 3)] * 2), ("ij,jk,kl->", [(3, 4), (4, 5), (5, 2)]),
    ("ij,j->ij", [(5, 4), (4,)]), ("i,i,i->i", [(5,)] * 3), ("i,j,k->ijk", [(2,), (3,), (4,)]),
    ("ii,ij,j", [(3, 3), (3, 4), (4,)]), ("bij,bj->bi", [(2, 3, 4), (2, 4)])])
def test_einsum_contracts_in_numpys_greedy_order_and_multiplies_when_nothing_is_summed(
        spec, shapes):
    rng = np.random.default_rng(1)
    xs = [rng.normal(size=s) for s in shapes]

    def fn(*xs):
        return np.einsum(spec, *xs)
    np.testing.assert_allclose(adjit.compile(fn)(*xs), fn(*xs), rtol=1e-12, atol=1e-12)
    assert adjit.gradcheck(lambda *xs: np.sum(np.sin(fn(*xs))), *xs) < 1e-6
    g = adjit.trace(fn, *xs)
    biggest = max(int(np.prod(g[n]["shape"])) for n in g.nodes())
    assert biggest <= max(int(np.prod(s)) for s in shapes + [np.shape(fn(*xs))]) * 6
    ins, _, out = spec.partition("->")
    if out and all(c in out for c in ins if c.isalpha()):     # nothing summed: products
        assert not any(g[n]["op"] == "matmul" for n in g.nodes())


def test_add_reduceat_accumulates_bools_and_small_integers_in_numpys_dtype():
    for x in (np.array([1, 2, 3, 4]) > 2, np.array([100, 100, 100, 5], np.int8),
              np.array([1, 2, 3, 4], np.uint8), np.arange(4.0, dtype=np.float32)):
        for u in (np.add, np.multiply, np.maximum):
            got, want = adjit.compile(lambda x: u.reduceat(x, [0, 3]))(x), u.reduceat(x, [0, 3])
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
    with pytest.raises(IndexError, match="out-of-bounds"):
        adjit.compile(lambda x: np.add.reduceat(x, [-1, 2]))(np.arange(4.0))


def test_float32_rel_entr_computes_in_float64_as_scipy():
    sp = pytest.importorskip("scipy.special")
    x = np.array([0.90001, 0.900001], np.float32)
    got = adjit.compile(lambda x: sp.rel_entr(x, np.float32(0.9)))(x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, sp.rel_entr(x, np.float32(0.9)), rtol=1e-6)


def test_polyint_of_a_constant_polynomial_with_traced_integration_constants():
    p = np.array([1.0, -2.0, 3.0])

    def f(k):
        return np.sum(np.polyint(p, 2, k=k) ** 2)
    k = np.array([1.0, 2.0])
    np.testing.assert_allclose(adjit.compile(f)(k), f(k), rtol=1e-12)
    assert adjit.gradcheck(f, k) < 1e-6


def test_storing_into_a_copy_of_an_outside_array_names_the_line():
    C = np.ones(3)

    def f(x):
        y = C.copy()
        y[1] = x[0]
        return y
    # a closure's own array copied by its method takes traced values since sweep 23 (the
    # second trace sees it as a Table), one held by an object (two levels down) since sweep
    # 24; one held three levels down still names the line
    np.testing.assert_array_equal(adjit.compile(f)(np.array([5.0, 2.0])), [1.0, 5.0, 1.0])
    holder = types.SimpleNamespace(C=np.ones(3))

    def g(x):
        y = holder.C.copy()
        y[1] = x[0]
        return y
    np.testing.assert_array_equal(adjit.compile(g)(np.array([5.0, 2.0])), [1.0, 5.0, 1.0])
    deep = types.SimpleNamespace(a=types.SimpleNamespace(b=types.SimpleNamespace(C=np.ones(3))))

    def h(x):
        y = deep.a.b.C.copy()
        y[1] = x[0]
        return y
    with pytest.raises(adjit.TraceError, match=r"test_sweep21.py.*np\.copy\(X\)"):
        adjit.compile(h)(np.ones(2))


def test_two_output_ufuncs_store_into_a_tuple_of_out_arrays():
    def f(x):
        q, r = np.zeros(3), np.zeros(3)
        np.divmod(x, 0.7, out=(q, r))
        fr, wh = np.zeros(3), np.zeros(3)
        np.modf(x, out=(fr, wh))
        return q + 10 * r + 100 * fr + wh
    x = np.array([1.5, -2.3, 0.2])
    np.testing.assert_array_equal(adjit.compile(f)(x), f(x))
    np.testing.assert_array_equal(adjit.grad(lambda x: np.sum(f(x)))(x), 110.0)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_sign_of_negative_zero_is_positive_zero_in_kernels_too(backend):
    x = np.array([-0.0, 0.0, np.nan, -2.0, 3.0] * 2000)
    got = adjit.compile(lambda x: np.sign(x) * 1.0, backend=backend, min_kernel_size=0)(x)
    np.testing.assert_array_equal(got, np.sign(x))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(np.sign(x)))


def test_derivatives_at_the_ends_of_the_domain_are_infinite():
    ss = pytest.importorskip("scipy.special")
    cases = [(ss.logit, [0.3, 1.0, 0.0], [1 / 0.21, np.inf, np.inf]),
             (ss.erfinv, [-1.0, 0.5, 1.0], [np.inf, 1.1125848, np.inf]),
             (ss.ndtri, [0.0, 0.3, 1.0], [np.inf, 2.8761037, np.inf]),
             (ss.entr, [0.0, 1.0], [np.inf, -1.0])]
    for fn, x, want in cases:
        x = np.array(x)
        np.testing.assert_allclose(adjit.grad(lambda v: np.sum(fn(v)))(x), want, rtol=1e-6)
        with np.errstate(all="ignore"):
            np.testing.assert_allclose(adjit.compile(fn)(x), fn(x), rtol=1e-15)


def test_linalg_tensordot_and_argmax_of_a_0d_array_along_its_axis():
    a, b = np.arange(12.0).reshape(3, 4), np.arange(20.0).reshape(4, 5)
    np.testing.assert_array_equal(
        adjit.compile(lambda a, b: np.linalg.tensordot(a, b, axes=1))(a, b), a @ b)
    for fn in (lambda x: np.argmax(x, axis=-1), lambda x: np.argmin(x, axis=0)):
        assert adjit.compile(fn)(np.array(3.0)) == 0


def test_nanmax_and_nanmin_are_numpys_one_pass_with_max_gradients():
    y = np.array([[np.nan, np.nan, np.nan], [1.0, 3.0, 3.0], [0.0, -0.0, np.nan]])
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        for fn in (lambda y: np.nanmax(y, axis=1), lambda y: np.nanmin(y, axis=1)):
            got, want = adjit.compile(fn)(y), fn(y)
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    g = adjit.grad(lambda y: np.sum(np.nanmax(y, axis=1)))(y)
    np.testing.assert_array_equal(g, [[0, 0, 0], [0, 0.5, 0.5], [0.5, 0.5, 0]])
    prog = adjit.compile(lambda y: np.nanmax(y), backend="numpy").lower(y)
    assert "_rt_ops['nanmax']" in prog.source and "isnan" not in prog.source


def test_a_ufunc_of_constants_into_an_array_made_here_under_a_traced_mask():
    def f(a):
        o = np.zeros(4)
        np.sqrt(np.arange(4.0), out=o, where=a > 0)
        return o * a
    a = np.array([1.0, -1.0, 2.0, 3.0])
    np.testing.assert_array_equal(adjit.compile(f)(a), f(a))


@pytest.mark.parametrize("fn", [
    lambda a: np.pad(a, 1, constant_values=(a[0, 0], 1.0)),
    lambda a: np.pad(a, ((1, 0), (0, 2)), constant_values=((a[0, 0], a[1, 1]), (2.0, a[0, 1]))),
    lambda a: np.pad(a, ((1, 1), (2, 1)), constant_values=((a[0, 0],), (a[1, 0] * 2,))),
    lambda a: np.pad(a[0], 3, constant_values=[(a[1, 1], 5.0)])])
def test_pad_with_traced_constant_values_per_axis_and_side(fn):
    a = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(adjit.compile(fn)(a), fn(a))
    w = np.cos(np.arange(fn(a).size)).reshape(fn(a).shape)
    assert adjit.gradcheck(lambda a: np.sum(fn(a) ** 2 * w), a) < 1e-6


def test_fmax_and_fmin_reduce_skip_nan_and_share_ties_evenly():
    x = np.array([0.25, 0.5, 0.5, np.nan])
    np.testing.assert_array_equal(adjit.grad(lambda x: np.fmax.reduce(x))(x), [0, 0.5, 0.5, 0])
    y = np.array([[1.0, np.nan], [np.nan, np.nan], [3.0, 2.0]])
    for fn in (lambda y: np.fmax.reduce(y, axis=1), lambda y: np.fmin.reduce(y, axis=0)):
        np.testing.assert_array_equal(adjit.compile(fn)(y), fn(y))


def test_row_and_column_swaps_at_traced_positions_with_more_indices():
    A = np.random.default_rng(0).normal(size=(4, 4))
    b = np.array([0.1, 3.0, 2.0, -1.0])

    def rows(A):
        i, B = np.argmax(b * A[0, 0]), A.copy()
        B[[i, 0], :] = B[[0, i], :]
        return B

    def cols(A):
        i, B = np.argmax(b * A[0, 0]), A.copy()
        B[:, [i, 0]] = B[:, [0, i]]
        B[[i, 2], 1:3] = A[0, :2] * 2
        B[(i, 0), ] = 3.0
        return B
    for fn in (rows, cols):
        np.testing.assert_array_equal(adjit.compile(fn)(A), fn(A))
        assert adjit.gradcheck(lambda A: np.sum(fn(A) * np.arange(16.0).reshape(4, 4)), A) < 1e-6


def test_two_output_ufunc_with_one_out_slot_none_returns_the_computed_result():
    def f(x):
        frac = np.zeros(3)
        return np.modf(x, out=(frac, None))[1] + frac

    def shared(x):
        a = np.zeros(3)
        np.divmod(x, 2.0, out=(a, a))     # NumPy keeps the first output
        return a
    x = np.array([1.5, -2.25, 3.0])
    for fn in (f, shared):
        np.testing.assert_array_equal(adjit.compile(fn)(x), fn(x))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_recurrence_written_element_by_element_is_stacked_in_one_call(backend):
    def ema(x):
        y = np.zeros(len(x))
        for i in range(1, len(x)):
            y[i] = 0.9 * y[i - 1] + x[i]
        return y
    x = np.cos(np.arange(12.0))
    np.testing.assert_allclose(adjit.compile(ema, backend=backend)(x), ema(x), rtol=1e-14)
    assert adjit.gradcheck(lambda x: np.sum(ema(x)[3:] ** 2), x, backend=backend) < 1e-6
    src = adjit.compile(ema, backend=backend).lower(x).source
    assert "np.array([np.float64(0.0), " in src and "concatenate" not in src.replace(
        "= concatenate(", "")


def test_writes_at_traced_positions_with_integers_apart_put_the_index_axis_first():
    A = np.array([[5.0, 1.0, 0.0]])

    def apart(A):          # NumPy: an integer and an index array apart: their axis first
        k, T = np.argmax(A[0]), np.zeros((2, 2, 3))
        T[1, :, [k, 2]] = np.array([[1.0, 2.0], [3.0, 4.0]]) * A[0, 0]
        return T

    def adjacent(A):
        k, T = np.argmax(A[0]), np.zeros((2, 4, 3))
        T[:, 1, [k, 2]] = np.arange(4.0).reshape(2, 2) * A[0, 0]
        return T
    for fn in (apart, adjacent):
        np.testing.assert_array_equal(adjit.compile(fn)(A), fn(A))


def test_nanmax_of_missing_targets_keeps_gradients_finite():
    y = np.array([[1.0, np.nan, 2.0], [np.nan, 3.0, 0.5]])
    p = np.array([[0.5, 1.0, 1.5], [2.0, 2.5, 3.0]])
    for fn in (lambda p: np.sum(np.nanmax((p - y) ** 2, axis=1)),
               lambda p: np.sum(np.fmin.reduce((p - y) ** 2, axis=1))):
        g = adjit.grad(fn)(p)
        assert np.all(np.isfinite(g)) and np.all(g[np.isnan(y)] == 0)


def test_signed_zeros_survive_additions_of_zero_constants():
    x = np.array([-0.0, 1.0])
    with np.errstate(divide="ignore"):
        for fn in (lambda x: 1 / (x - -0.0), lambda x: 1 / (0.0 + x),
                   lambda x: 1 / (x + np.array([-0.0, 0.0])), lambda x: 1 / (x - 0.0)):
            np.testing.assert_array_equal(adjit.compile(fn)(x), fn(x))


def test_pad_with_an_infinite_or_negative_zero_traced_value_and_layout_setters():
    a = np.array([[-0.0, 1.0], [2.0, 3.0]])
    for fn in (lambda a: np.pad(a, 1, constant_values=a[1, 1] * np.inf),
               lambda a: np.pad(a, 1, constant_values=a[1, 1] * -0.0)):
        got, want = adjit.compile(fn)(a), fn(a)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))

    def reshaped(x):
        y = np.zeros(6)
        y[:] = x
        y.shape = (2, 3)
        return y.sum(axis=0)
    with pytest.raises(adjit.UnsupportedError, match=r"x\.shape.*reshape"):
        adjit.compile(reshaped)(np.arange(6.0))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_stacked_elements_shared_with_a_concatenation_that_stays(backend):
    def f(x):
        y, z = np.zeros(7), np.zeros(7)
        for i in range(1, 7):
            y[i] = 0.5 * y[i - 1] + x[i]
        y[1] = np.array([y[1], z[1], x[1]]).sum()
        for i in range(1, 7):
            z[i] = 0.5 * z[i - 1] + x[i]
        y[3:7] += z[1:5]
        return y + z
    x = np.arange(7.0)
    np.testing.assert_allclose(adjit.compile(f, backend=backend)(x), f(x), rtol=1e-14)
