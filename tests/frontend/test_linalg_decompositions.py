"""np.linalg.svd, qr, pinv, lstsq, matrix_rank, cond and the singular-value norms, written as
users write them: values equal NumPy's (singular vectors up to sign), gradients pass gradcheck,
float32 stays float32, stacks batch, and what adjit cannot do is refused clearly."""
import numpy as np
import pytest

import adjit

rng = np.random.default_rng(0)


def rect(m, n, seed, batch=()):
    """(batch..., m, n) with singular values 1 .. k + 1, at least 0.5 apart (distinct)."""
    r = np.random.default_rng(seed)
    k = min(m, n)
    u = np.linalg.qr(r.normal(size=batch + (m, k)))[0]
    v = np.linalg.qr(r.normal(size=batch + (n, k)))[0]
    s = 1.0 + np.arange(k) + r.uniform(0.0, 0.5, size=batch + (k,))
    return (u * s[..., None, :]) @ np.swapaxes(v, -1, -2)


SHAPES = [(3, 3), (5, 3), (3, 5), (2, 4, 3), (2, 3, 4)]
IDS = ["x".join(map(str, s)) for s in SHAPES]


def _a(shape, seed=1):
    return rect(shape[-2], shape[-1], seed, tuple(shape[:-2]))


def T(x):
    return np.swapaxes(x, -1, -2)


# -- svd --------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_svd_values_match_numpy(shape):
    a = _a(shape)
    u, s, vh = adjit.compile(lambda a: np.linalg.svd(a, full_matrices=False),
                             backend="numpy")(a)
    ru, rs, rvh = np.linalg.svd(a, full_matrices=False)
    np.testing.assert_allclose(s, rs, rtol=1e-13)
    # singular vectors are defined up to sign: compare what the signs cannot change
    np.testing.assert_allclose((u * s[..., None, :]) @ vh, a, atol=1e-13)
    np.testing.assert_allclose(u @ T(u), ru @ T(ru), atol=1e-13)
    np.testing.assert_allclose(T(vh) @ vh, T(rvh) @ rvh, atol=1e-13)
    np.testing.assert_allclose(np.abs(u), np.abs(ru), atol=1e-13)


def test_svd_result_has_numpy_field_names_and_compute_uv_false_gives_s():
    a = _a((4, 3))

    def f(a):
        r = np.linalg.svd(a, full_matrices=False)
        return r.S, np.linalg.svd(a, compute_uv=False), r.U @ r.U.T, r.Vh.T @ r.Vh
    s, s_only, pu, pv = adjit.compile(f, backend="numpy")(a)
    ru, rs, rvh = np.linalg.svd(a, full_matrices=False)
    np.testing.assert_allclose(s, rs, rtol=1e-13)
    np.testing.assert_array_equal(s_only, np.linalg.svd(a, compute_uv=False))
    np.testing.assert_allclose(pu, ru @ ru.T, atol=1e-13)
    np.testing.assert_allclose(pv, rvh.T @ rvh, atol=1e-13)


def test_full_matrices_values_and_no_gradient_through_the_extra_vectors():
    a = _a((3, 3))
    u, s, vh = adjit.compile(np.linalg.svd, backend="numpy")(a)   # the default: full
    np.testing.assert_allclose((u * s) @ vh, a, atol=1e-13)
    # non-square: s and the determined factor differentiate; the full factor has NumPy's
    # values (a null space basis: np.linalg.svd(A)[2][-1]) and refuses a gradient
    g = adjit.grad(lambda a: np.sum(np.linalg.svd(a)[1]), backend="numpy")(_a((4, 3)))
    np.testing.assert_allclose(g, adjit.grad(lambda a: np.sum(np.linalg.svd(
        a, compute_uv=False)), backend="numpy")(_a((4, 3))))
    for shape, k in (((4, 3), 0), ((3, 4), 2)):
        got = adjit.compile(lambda a: np.linalg.svd(a)[k], backend="numpy")(_a(shape))
        np.testing.assert_allclose(np.abs(got), np.abs(np.linalg.svd(_a(shape))[k]),
                                   atol=1e-12)
    null = adjit.compile(lambda a: np.linalg.svd(a)[2][-1], backend="numpy")(_a((3, 4)))
    np.testing.assert_allclose(_a((3, 4)) @ null, 0, atol=1e-12)
    with pytest.raises(adjit.GradError, match=r"full U.*full_matrices=False") as info:
        adjit.grad(lambda a: np.sum(np.linalg.svd(a)[0] ** 3), backend="numpy")(_a((4, 3)))
    assert "test_linalg_decompositions.py:" in str(info.value)


def _low_rank(a):
    """The best rank-2 approximation: a projection, free of the signs."""
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return (u[:, :2] * s[:2]) @ vh[:2]


def _svd_loss(part, w):
    if part == "S":
        return lambda a: np.sum(np.linalg.svd(a, compute_uv=False) ** 2 * w)
    if part == "U":   # singular vectors enter through sign-free functions
        return lambda a: np.sum(np.abs(np.linalg.svd(a, full_matrices=False)[0]) * w)
    if part == "Vh":
        return lambda a: np.sum(np.linalg.svd(a, full_matrices=False).Vh ** 2 * w)
    return lambda a: np.sum(_low_rank(a) ** 2 * w)


@pytest.mark.parametrize("part,shape_of_w", [("S", lambda m, n: (3,)), ("U", lambda m, n: (m, 3)),
                                             ("Vh", lambda m, n: (3, n)),
                                             ("low_rank", lambda m, n: (m, n))],
                         ids=["S", "U", "Vh", "low_rank"])
@pytest.mark.parametrize("shape", [(4, 3), (3, 3), (3, 4)], ids=["tall", "square", "wide"])
def test_svd_gradcheck(part, shape_of_w, shape):
    w = np.random.default_rng(2).normal(size=shape_of_w(*shape))
    assert adjit.gradcheck(_svd_loss(part, w), _a(shape, 3), eps=1e-5) < 1e-6


def test_svd_gradient_of_a_batch():
    a = _a((2, 4, 3), 4)
    w = rng.normal(size=(4, 3))
    f = lambda a: np.sum(np.linalg.svd(a, full_matrices=False)[0] ** 2 * w)  # noqa: E731
    assert adjit.gradcheck(f, a, eps=1e-5) < 1e-6
    g = adjit.grad(f, backend="numpy")(a)
    for i in range(2):
        np.testing.assert_allclose(g[i], adjit.grad(f, backend="numpy")(a[i]), rtol=1e-12)


def test_singular_values_alone_have_a_gradient_even_when_repeated():
    # only the vectors' rules divide by s_j^2 - s_i^2: d(sum s)/da = U Vh, here the identity
    g = adjit.grad(lambda a: np.sum(np.linalg.svd(a, compute_uv=False)), backend="numpy")
    np.testing.assert_allclose(g(np.eye(3)), np.eye(3), atol=1e-15)
    g = adjit.grad(lambda a: np.linalg.norm(a, "nuc"), backend="numpy")
    np.testing.assert_allclose(g(2.0 * np.eye(3)), np.eye(3), atol=1e-15)


# -- dtypes -----------------------------------------------------------------------------------
FNS = {
    "svd": lambda a: np.sum(np.linalg.svd(a, full_matrices=False)[0] ** 2)
    + np.sum(np.linalg.svd(a, compute_uv=False)),
    "qr": lambda a: np.sum(np.linalg.qr(a).R ** 2) + np.sum(np.linalg.qr(a)[0] * 0.5),
    "pinv": lambda a: np.sum(np.linalg.pinv(a) ** 2),
    "norm2": lambda a: np.linalg.norm(a, 2) + np.linalg.norm(a, -2) + np.linalg.norm(a, "nuc"),
    "cond": lambda a: np.linalg.cond(a),
}


@pytest.mark.parametrize("name", sorted(FNS))
def test_float32_stays_float32(name):
    a = _a((4, 3), 5).astype(np.float32)
    value, g = adjit.value_and_grad(FNS[name], backend="numpy")(a)
    assert np.asarray(value).dtype == np.float32 and g.dtype == np.float32
    ref = adjit.grad(FNS[name], backend="numpy")(a.astype(np.float64))
    np.testing.assert_allclose(g, ref, rtol=2e-3, atol=2e-3)


def test_integer_input_becomes_float64():
    a = np.array([[3, 1], [1, 2], [0, 1]])
    f = adjit.compile(lambda a: (np.linalg.svd(a, compute_uv=False), np.linalg.qr(a).R,
                                 np.linalg.pinv(a)), backend="numpy")
    s, r, p = f(a)
    assert s.dtype == r.dtype == p.dtype == np.float64
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-14)
    np.testing.assert_allclose(p, np.linalg.pinv(a), atol=1e-14)


# -- qr ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_qr_matches_numpy_including_signs(shape):
    a = _a(shape, 6)
    q, r = adjit.compile(lambda a: tuple(np.linalg.qr(a)), backend="numpy")(a)
    rq, rr = np.linalg.qr(a)
    np.testing.assert_allclose(q, rq, atol=1e-13)
    np.testing.assert_allclose(r, rr, atol=1e-13)
    r_only = adjit.compile(lambda a: np.linalg.qr(a, mode="r"), backend="numpy")(a)
    np.testing.assert_allclose(r_only, rr, atol=1e-13)


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_qr_gradcheck(shape):
    a = _a(shape, 7)
    wq = np.random.default_rng(8).normal(size=shape[:-1] + (min(shape[-2:]),))
    wr = np.random.default_rng(9).normal(size=shape[:-2] + (min(shape[-2:]), shape[-1]))

    def f(a):
        q, r = np.linalg.qr(a)
        return np.sum(q * wq) + np.sum(np.sin(r) * wr)
    assert adjit.gradcheck(f, a, eps=1e-5) < 1e-6


def test_qr_modes_adjit_cannot_differentiate_are_refused():
    with pytest.raises(adjit.UnsupportedError, match=r"mode='complete'.*4 x 3.*'reduced'"):
        adjit.grad(lambda a: np.sum(np.linalg.qr(a, mode="complete")[0]),
                   backend="numpy")(_a((4, 3)))
    with pytest.raises(adjit.UnsupportedError, match=r"mode='raw'"):
        adjit.grad(lambda a: np.sum(np.linalg.qr(a, mode="raw")[0]), backend="numpy")(_a((3, 3)))
    # complete equals reduced for a wide matrix
    a = _a((3, 4))
    q, r = adjit.compile(lambda a: tuple(np.linalg.qr(a, mode="complete")), backend="numpy")(a)
    np.testing.assert_allclose(q @ r, a, atol=1e-13)


# -- pinv, lstsq, matrix_rank -----------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_pinv_matches_numpy_and_gradcheck(shape):
    a = _a(shape, 10)
    np.testing.assert_allclose(adjit.compile(np.linalg.pinv, backend="numpy")(a),
                               np.linalg.pinv(a), atol=1e-13)
    w = np.random.default_rng(11).normal(size=T(a).shape)
    assert adjit.gradcheck(lambda a: np.sum(np.linalg.pinv(a) * w), a, eps=1e-5) < 1e-6


def test_pinv_of_a_rank_deficient_matrix_and_its_gradient_at_constant_rank():
    b = rng.normal(size=(5, 2))
    a = b @ rng.normal(size=(2, 4))   # rank 2: NumPy's cutoff drops two singular values
    np.testing.assert_allclose(adjit.compile(np.linalg.pinv, backend="numpy")(a),
                               np.linalg.pinv(a), atol=1e-12)
    # perturbing along the rank-2 manifold: the gradient there is the derivative of pinv
    c = rng.normal(size=(2, 4))
    w = rng.normal(size=(4, 5))
    f = lambda c: np.sum(np.linalg.pinv(b @ c) * w)   # noqa: E731
    assert adjit.gradcheck(f, c, eps=1e-5) < 1e-6


def test_pinv_gradient_does_not_need_distinct_singular_values():
    a = 2.0 * np.eye(3)   # one singular value, three times
    w = rng.normal(size=(3, 3))
    g = adjit.grad(lambda a: np.sum(np.linalg.pinv(a) * w), backend="numpy")(a)
    np.testing.assert_allclose(g, -w / 4.0, atol=1e-15)   # a_bar = -inv^T w inv^T


def test_pinv_rcond_and_rtol():
    a = np.diag([1.0, 1e-3, 0.0])
    for kw in [{"rcond": 1e-2}, {"rtol": 1e-2}, {"rtol": None}, {}]:
        got = adjit.compile(lambda a: np.linalg.pinv(a, **kw), backend="numpy")(a)
        np.testing.assert_allclose(got, np.linalg.pinv(a, **kw), atol=1e-12)


@pytest.mark.parametrize("b_shape", [(6,), (6, 2)], ids=["vector", "matrix"])
def test_lstsq_matches_numpy(b_shape):
    a, b = _a((6, 3), 12), rng.normal(size=b_shape)
    got = adjit.compile(lambda a, b: np.linalg.lstsq(a, b, rcond=None), backend="numpy")(a, b)
    ref = np.linalg.lstsq(a, b, rcond=None)
    for g, r in zip(got, ref):
        assert np.shape(g) == np.shape(r) and np.asarray(g).dtype == np.asarray(r).dtype
        np.testing.assert_allclose(g, r, atol=1e-13)

    def loss(a, b):
        x, residuals, rank, s = np.linalg.lstsq(a, b, rcond=None)
        return np.sum(x ** 2) + np.sum(residuals) + np.sum(s) * rank
    assert adjit.gradcheck(loss, a, b, argnums=(0, 1), eps=1e-5) < 1e-6


def test_lstsq_of_a_wide_matrix_has_empty_residuals():
    a, b = _a((3, 5), 13), rng.normal(size=3)
    x, residuals, rank, s = adjit.compile(lambda a, b: np.linalg.lstsq(a, b),
                                          backend="numpy")(a, b)
    rx, rres, rrank, rs = np.linalg.lstsq(a, b)
    np.testing.assert_allclose(x, rx, atol=1e-13)
    assert residuals.shape == rres.shape == (0,) and rank == rrank == 3


def test_matrix_rank_is_a_traced_integer():
    low = rng.normal(size=(2, 5, 2)) @ rng.normal(size=(2, 2, 4))
    f = adjit.compile(lambda a: np.linalg.matrix_rank(a), backend="numpy")
    np.testing.assert_array_equal(f(low), np.linalg.matrix_rank(low))
    np.testing.assert_array_equal(f(_a((4, 3))), 3)

    def branch(a):
        if np.linalg.matrix_rank(a) < 3:
            return np.sum(a)
        return np.sum(a ** 2)
    with pytest.raises(adjit.AdjitError, match=r"test_linalg_decompositions.py"):
        adjit.grad(branch, backend="numpy")(_a((4, 3)))


# -- norms and cond ---------------------------------------------------------------------------
@pytest.mark.parametrize("ord", [2, -2, "nuc"])
@pytest.mark.parametrize("axis,keepdims", [((1, 2), False), ((2, 0), True), ((-1, 1), False)])
def test_singular_value_norms(ord, axis, keepdims):
    x = rect(4, 4, 14, (3,)).transpose(1, 0, 2)   # (4, 3, 4)
    f = lambda x: np.linalg.norm(x, ord, axis=axis, keepdims=keepdims)   # noqa: E731
    got = adjit.compile(f, backend="numpy")(x)
    assert got.shape == np.linalg.norm(x, ord, axis=axis, keepdims=keepdims).shape
    np.testing.assert_allclose(got, f(x), rtol=1e-13)
    assert adjit.gradcheck(lambda x: np.sum(f(x) ** 2), x, eps=1e-5) < 1e-6


@pytest.mark.parametrize("p", [None, 2, -2, "fro", "nuc", 1, -1, np.inf])
def test_cond(p):
    a = _a((3, 3), 15)
    assert np.isclose(adjit.compile(lambda a: np.linalg.cond(a, p), backend="numpy")(a),
                      np.linalg.cond(a, p), rtol=1e-13)
    assert adjit.gradcheck(lambda a: np.linalg.cond(a, p), a, eps=1e-5) < 1e-6


# -- refused ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [lambda a: np.linalg.eig(a)[0], np.linalg.eigvals],
                         ids=["eig", "eigvals"])
def test_eig_is_refused_with_eigh_suggested(fn):
    with pytest.raises(adjit.UnsupportedError,
                       match=r"np\.linalg\.eig.*complex.*eigh.*eigvalsh") as info:
        adjit.grad(lambda a: np.sum(fn(a)), backend="numpy")(_a((3, 3)))
    assert "test_linalg_decompositions.py:" in str(info.value)


# -- backends ---------------------------------------------------------------------------------
def _user_loss(a, b):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    q, r = np.linalg.qr(a)
    x = np.linalg.lstsq(a, b, rcond=None)[0]
    return (np.sum(u ** 2 * s) + np.sum(np.abs(vh)) + np.sum(q * r[0]) + np.sum(x ** 2)
            + np.linalg.norm(a, "nuc") + np.sum(np.linalg.pinv(a)))



@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_eigh_upper_matches_numpys_signs_and_reads_its_triangle(uplo, symmetric):
    # LAPACK's upper path gives other eigenvector signs than the lower one of a.T
    rs = np.random.RandomState(1)
    m = rs.randn(3, 3)
    a, r = (m.T @ m if symmetric else m), rs.randn(3, 3)

    def f(x):
        w, v = np.linalg.eigh(x, uplo)
        return np.sum(v * r) + np.sum(w ** 2) + np.sum(np.linalg.eigvalsh(x, UPLO=uplo) ** 3)
    for backend in ("numpy", "numba"):
        np.testing.assert_allclose(adjit.compile(lambda x: np.linalg.eigh(x, uplo)[1],
                                                 backend=backend)(a),
                                   np.linalg.eigh(a, uplo)[1], atol=1e-12)
    g = adjit.grad(f, backend="numpy")(a)
    num = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        e = np.zeros_like(a)
        e[i] = 1e-6
        num[i] = (f(a + e) - f(a - e)) / 2e-6
    np.testing.assert_allclose(g, num, atol=1e-6)    # zero off the triangle read
    t = rs.randn(3, 3)
    _, dt = adjit.jvp(f, (a,), (t,), backend="numpy")
    np.testing.assert_allclose(dt, np.sum(num * t), rtol=1e-6)

def test_numba_backend_agrees_with_numpy():
    pytest.importorskip("numba")
    a, b = _a((5, 3), 16), rng.normal(size=5)
    ref = adjit.value_and_grad(_user_loss, argnums=(0, 1), backend="numpy")(a, b)
    got = adjit.value_and_grad(_user_loss, argnums=(0, 1), backend="numba")(a, b)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-12)
    for g, r in zip(got[1], ref[1]):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)


def test_docstring_examples_run():
    import doctest
    import importlib
    res = doctest.testmod(importlib.import_module("adjit.frontend.decompositions"),
                          optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0 and res.attempted > 0
