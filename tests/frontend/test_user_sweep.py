"""Cases from a sweep of scientific NumPy code written as users write it: each was refused or
answered with an unhelpful message before. Values are compared with NumPy, gradients with
central differences."""
import math

import numpy as np
import pytest

import adjit

RNG = np.random.default_rng(3)
X = RNG.normal(size=(4, 3))


def _mask_assign(a):
    y = a * 2
    y[y > 0.15] = 0.0
    y[np.abs(a) < 0.3] = a[0, 0]
    return y


def _mask_assign_into_buffer(a):
    o = np.zeros(3)
    o[a[0] > 0] = 1.5
    return o * a[1]


def _row_mask_assign(a):
    y = a.copy()
    y[a[:, 0] > 0] = a[1, 1]  # a mask over the first axis sets whole rows
    return y


def _matrix_transpose_view(a):
    x = a.copy()
    t = np.matrix_transpose(x) if hasattr(np, "matrix_transpose") else x.T
    x[0, 1] = 50.0 * a[1, 1]
    return t


CASES = {
    "mask assignment": _mask_assign,
    "mask assignment into np.zeros": _mask_assign_into_buffer,
    "row mask assignment": _row_mask_assign,
    "np.sum of a list": lambda a: np.sum([a[0], a[1] ** 2]),
    "np.linalg.norm of a list": lambda a: np.linalg.norm([a[0, 0], a[1, 1]]),
    "np.max of a list with a number": lambda a: np.max([a[0, 0], a[1, 1], 0.5]),
    "np.mean of a tuple, axis": lambda a: np.mean((a[0], a[1]), axis=0),
    "np.full with a traced value": lambda a: np.full((2, 3), a[0, 0]),
    "np.full_like with a traced value": lambda a: np.full_like(a, a[1, 1]) * a,
    "np.full with a traced row": lambda a: np.full((2, 3), a[0]),
    "reshape order F": lambda a: a.reshape(2, 6, order="F"),
    "ravel order F": lambda a: a.ravel(order="F") * np.arange(12),
    "np.reshape order F": lambda a: np.reshape(a, (4, 3), order="F"),
    "np.diag above": lambda a: np.diag(a[0], 1) @ np.ones(4),
    "np.diag below": lambda a: np.diag(a[1], -2),
    "tridiagonal": lambda a: (np.diag(a[:, 0]) + np.diag(a[:3, 1], 1)
                              + np.diag(a[:3, 2], -1)) @ a[:, 0],
    "real, imag and view": lambda a: a.real + a.imag + a.view() * 2,
}
CASES.update({
    "reshape order A is C for C-contiguous arrays": lambda a: np.reshape(a, (3, 4), order="A"),
    "np.ravel order F": lambda a: np.ravel(a, order="F") * np.arange(12),
    "svd with NumPy's default full_matrices, s and vh used": lambda a: (
        np.sum(np.linalg.svd(a)[1]) + np.linalg.svd(a)[2] ** 2),
})
if hasattr(np, "vecdot"):  # NumPy 2 names
    CASES.update({
        "np.vecdot": lambda a: np.vecdot(a, a),
        "np.matrix_transpose": lambda a: np.matrix_transpose(a) @ a,
        "np.cumulative_sum with the initial 0": lambda a: np.cumulative_sum(
            a, axis=0, include_initial=True),
        "np.linalg.vector_norm": lambda a: np.linalg.vector_norm(a, axis=1),
        "np.linalg.vector_norm of all": lambda a: np.linalg.vector_norm(a),
        "np.linalg.matrix_norm": lambda a: np.linalg.matrix_norm(a),
        "np.linalg.vecdot": lambda a: np.linalg.vecdot(a, a),
        "np.vecdot with axis": lambda a: np.vecdot(a, a, axis=0),
        "vector_norm over two axes": lambda a: np.linalg.vector_norm(
            a.reshape(2, 2, 3), axis=(0, 2)),
        "vector_norm over two axes, ord 1, keepdims": lambda a: np.linalg.vector_norm(
            a.reshape(2, 2, 3), axis=(0, 2), ord=1, keepdims=True),
        "matrix_transpose is a view": _matrix_transpose_view,
    })


@pytest.mark.parametrize("name", sorted(CASES))
def test_value_and_gradient(name):
    fn = CASES[name]
    got = adjit.compile(fn, backend="numpy")(X)
    want = fn(X.copy())
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert adjit.gradcheck(lambda a: np.sum(np.sin(fn(a) + 0.3)), X) < 1e-6


def test_scipy_special_compositions():
    sp = pytest.importorskip("scipy.special")
    p = RNG.uniform(0.1, 0.9, size=(4, 3))
    for fn in (sp.expit, sp.log_expit, sp.logit, lambda a: sp.xlogy(a, a + 1),
               lambda a: sp.xlog1py(a - 0.1, a), sp.erf, sp.erfc, sp.ndtr, sp.entr,
               lambda a: sp.rel_entr(a, a[::-1]),
               lambda a: 0.5 * a * (1 + sp.erf(a / np.sqrt(2)))):    # GELU
        for backend in ("numpy", "numba"):
            np.testing.assert_allclose(adjit.compile(fn, backend=backend)(p), fn(p),
                                       rtol=1e-12)
        assert adjit.gradcheck(lambda a: np.sum(fn(a)), p) < 1e-6
    x32 = p.astype(np.float32)
    assert adjit.compile(lambda a: sp.entr(a) + sp.erf(a))(x32).dtype == np.float32
    with pytest.raises(adjit.UnsupportedError, match=r"zeta\(s, q\) with s not constant"):
        adjit.compile(lambda a: sp.zeta(a + 1.5, 1.0), backend="numpy")(p)
    # scipy.special.softmax is written in NumPy (np.array(..., copy=np._CopyMode...))
    f = lambda a: np.sum(sp.softmax(a, axis=1) ** 2)  # noqa: E731
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(p), f(p), rtol=1e-12)
    assert adjit.gradcheck(f, p) < 1e-6


def test_scipy_array_api_functions_trace():
    """SciPy's array-API code (logsumexp, log_softmax, zscore, entropy) asks the tracer for its
    namespace (NumPy's) and assigns into copies: both work while tracing."""
    sp = pytest.importorskip("scipy.special")
    stats = pytest.importorskip("scipy.stats")
    x = RNG.normal(size=(4, 5))
    w = RNG.uniform(0.5, 2.0, size=(4, 5))
    q = RNG.uniform(0.1, 1.0, size=20)
    cases = [lambda a: np.sum(sp.logsumexp(a, axis=1)), lambda a: sp.logsumexp(a),
             lambda a: np.sum(sp.logsumexp(a, axis=0, keepdims=True) ** 2),
             lambda a: np.sum(sp.logsumexp(a, axis=1, b=w)),
             lambda a: np.sum(sp.logsumexp(w, axis=1, b=a ** 2)),
             lambda a: np.sum(sp.logsumexp(a, axis=1, b=w, return_sign=True)[0]),
             lambda a: np.sum(sp.log_softmax(a, axis=1) * w),
             lambda a: np.sum(stats.zscore(a, axis=1) * w),
             lambda a: stats.entropy(np.exp(a).ravel()),
             lambda a: stats.entropy(np.exp(a).ravel(), q)]
    for fn in cases:
        np.testing.assert_allclose(adjit.compile(fn, backend="numpy")(x), fn(x), rtol=1e-12)
        assert adjit.gradcheck(fn, x) < 1e-6


def test_mask_assignment_of_several_values_is_refused_clearly():
    def f(a):
        y = a.copy()
        y[y > 0] = a[a > 0.5]  # another mask: the counts may differ
        return y
    with pytest.raises(adjit.UnsupportedError, match="other_mask"):
        adjit.compile(f, backend="numpy")(X)

    def g(a):
        y = a.copy()
        y[y > 0] = np.arange(12.0)
        return y
    with pytest.raises(adjit.UnsupportedError, match=r"np.where\(mask, new_values, x\)"):
        adjit.compile(g, backend="numpy")(X)


def test_math_functions_point_to_numpy():
    with pytest.raises(adjit.TraceError, match=r"use the NumPy function \(np.exp"):
        adjit.compile(lambda a: math.exp(a[0, 0]), backend="numpy")(X)


def test_builtin_max_points_to_np_maximum():
    with pytest.raises(adjit.TraceError, match="np.maximum"):
        adjit.compile(lambda a: max(a[0, 0], a[1, 1]), backend="numpy")(X)


def test_unfollowed_numpy_call_names_the_users_line_and_np_stack():
    def f(a):
        return np.trim_zeros(a.ravel())  # np.trim_zeros is not followed by adjit
    with pytest.raises(adjit.AdjitError, match=r"test_user_sweep.py:\d+") as e:
        adjit.compile(f, backend="numpy")(X)
    assert "fromnumeric" not in str(e.value) and "shape_base" not in str(e.value)


def test_list_message_suggests_np_stack():
    def f(a):
        return np.sort_complex([a[0, 0], a[1, 1]])
    with pytest.raises(adjit.TraceError, match=r"np.stack\(\[a, b\]\)"):
        adjit.compile(f, backend="numpy")(X)


def test_diag_of_infinite_values_has_zeros_off_the_diagonal():
    got = adjit.compile(np.diag, backend="numpy")(np.array([np.inf, 1.0]))
    np.testing.assert_array_equal(got, np.diag(np.array([np.inf, 1.0])))


def test_integer_vector_norms_are_float():
    if not hasattr(np.linalg, "vector_norm"):
        pytest.skip("NumPy 1")
    v = np.array([3, -4])
    for ord_ in (1, -1, np.inf, 2):
        got = adjit.compile(lambda v: np.linalg.vector_norm(v, ord=ord_), backend="numpy")(v)
        assert got.dtype == np.float64 and got == np.linalg.vector_norm(v, ord=ord_)


def test_the_undetermined_factor_of_a_full_svd_has_values_but_no_gradient():
    a = RNG.normal(size=(5, 3))
    got = adjit.compile(lambda a: np.linalg.svd(a)[0], backend="numpy")(a)
    np.testing.assert_allclose(got @ got.T, np.eye(5), atol=1e-12)    # orthogonal, 5 x 5
    with pytest.raises(adjit.GradError, match="full_matrices=False"):
        adjit.grad(lambda a: np.sum(np.linalg.svd(a)[0] @ np.ones(5)), backend="numpy")(a)


def test_lstsq_negative_rcond_is_machine_precision():
    a = np.outer(np.arange(6.0), [1.0, 2.0, 3.0]) + 1.0
    b = np.arange(6.0)
    got = adjit.compile(lambda a, b: np.linalg.lstsq(a, b, rcond=-1)[0], backend="numpy")(a, b)
    np.testing.assert_allclose(got, np.linalg.lstsq(a, b, rcond=-1)[0], atol=1e-12)
