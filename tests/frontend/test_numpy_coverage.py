"""Loss functions written the way users write NumPy: values and gradients match NumPy."""
import numpy as np
import pytest

import adjit
from adjit.frontend import composites as C

rng = np.random.default_rng(0)
X = rng.normal(size=(6, 4))
YB = np.sign(rng.normal(size=6))
YC = rng.integers(0, 3, 6)
W0 = rng.normal(size=(3, 4))
w0 = rng.normal(size=4)
M0 = rng.normal(size=(4, 4)) + 3.0

USER_CODE = {
    "mse": (lambda w: np.mean((X @ w - YB) ** 2), w0),
    "logistic": (lambda w: np.mean(np.log(1 + np.exp(-YB * (X @ w)))), w0),
    "l1_l2": (lambda w: np.sum(np.abs(w)) + 0.5 * np.linalg.norm(w) ** 2, w0),
    "var_std": (lambda w: (X @ w).var() + np.std(X @ w), w0),
    "clip": (lambda w: np.sum(np.log(np.clip(1 / (1 + np.exp(-(X @ w))), 1e-7, 1 - 1e-7))), w0),
    "slices": (lambda M: np.sum(M[:, 0] * M[..., 1:].sum(axis=1)) + np.sum(M[::-1] * M), M0),
    "concat": (lambda w: np.sum(np.concatenate([w, w ** 2]) ** 2), w0),
    "reshape": (lambda M: np.sum(M.reshape(-1) * M.flatten()) + np.sum(M.reshape(2, 8) ** 3), M0),
    "softmax_ce": (lambda W: -np.mean(np.log((np.exp(X @ W.T) / np.sum(
        np.exp(X @ W.T), axis=1, keepdims=True))[np.arange(6), YC])), W0),
    "range_index": (lambda W: -np.mean(np.log((np.exp(X @ W.T) / np.exp(X @ W.T).sum(
        1, keepdims=True))[range(6), YC])), W0),
    "max_min": (lambda M: np.sum(np.max(M, axis=1)) + M.max() + M.min(axis=0).sum(), M0),
    "scalars": (lambda w: np.sum(np.float32(0.5) * w + 2 ** w + w ** 3 + np.sqrt(
        np.sum(w ** 2) + 1e-8)), w0),
    "mean_axes": (lambda M: M.mean(0).sum() + M.sum(axis=1).mean(), M0),
    "sigmoid": (lambda w: np.sum(1.0 / (1.0 + np.exp(-w))), w0),
    "dots": (lambda w: w @ w + np.dot(w, w) + w.dot(M0 @ w) + np.vdot(w, w)
             + np.sum(np.outer(w, w)), w0),
    "bool_mask": (lambda w: np.sum(w * (X[0] > 0)), w0),
    "python_sum": (lambda w: sum([abs(w + 5).sum(), w.sum()]), w0),
    "hinge": (lambda w: np.mean(np.maximum(0, 1 - YB * (X @ w))), w0),
    "leaky_relu": (lambda w: np.sum(np.where(X @ w > 0, X @ w, 0.01 * (X @ w))), w0),
    "newaxis": (lambda w: np.sum(w[None, :] * w[:, None]), w0),
    "eye_onehot": (lambda W: -np.sum(np.eye(3)[YC] * adjit.log_softmax(X @ W.T)) / 6, W0),
    "trig": (lambda w: np.sum(np.sin(w) ** 2 + np.log(np.cosh(w)) + np.tanh(w)), w0),
    "norm_axis": (lambda M: np.sum(np.linalg.norm(M, axis=1)), M0),
    "tile_repeat": (lambda w: np.sum(np.tile(w, 3) * np.arange(12.0))
                    + np.sum(np.repeat(w, 2) * np.arange(8.0)), w0),
    "einsum": (lambda W: np.sum(np.einsum("ij,kj->ik", X, W) ** 2), W0),
    "stack": (lambda w: np.sum(np.stack([w, 2 * w], axis=1) ** 2), w0),
    "loop_unrolled": (lambda w: sum(np.sum(w[i] * X[:, i]) for i in range(len(w))), w0),
    "iterate_rows": (lambda M: sum(np.sum(row ** 2) for row in M), M0),
    "trace_diag": (lambda M: np.trace(M @ M) + np.sum(np.diag(M) ** 2), M0),
    "cumsum": (lambda w: np.sum(np.cumsum(w) ** 2), w0),
    "logaddexp": (lambda w: np.sum(np.logaddexp(0, w)), w0),
    "column_norm": (lambda M: np.sum(M / M.sum(axis=0, keepdims=True) * M), M0),
}

P0 = rng.uniform(0.2, 0.9, size=5)
K0 = rng.normal(size=3)
A0 = rng.normal(size=(2, 3, 4))
# NumPy functions, methods and idioms added after the first table (each once failed to trace,
# raised an unclear error or, for np.inner of matrices, gave wrong numbers)
USER_CODE.update({
    "reshape_tuple_method": (lambda M: np.sum(M.reshape((2, 8)).T ** 2), M0),
    "inner_matrices": (lambda M: np.sum(np.inner(M, M ** 2)), M0),
    "dot_nd": (lambda A: np.sum(np.dot(A, M0) ** 2) + np.sum(A.dot(w0)), A0),
    "np_array_of_tracers": (lambda w: np.sum(np.array([w[0], w[1] * 2, w[2] ** 2]) ** 2)
                            + np.sum(np.asarray(w) * np.array(w)), w0),
    "rnn_stacked_states": (lambda W: np.mean(np.array(_rnn_states(W)) ** 2), M0 * 0.3),
    "conv_sliding_windows": (lambda K: np.sum(np.array([[np.sum(X[i:i + 3, j:j + 3] * K)
                                                        for j in range(2)]
                                                       for i in range(4)]) ** 2), W0[:, :3]),
    "constant_bool_mask": (lambda M: np.sum(M[M0 > 3] ** 2) + np.sum(M[0][[True, False] * 2]),
                           M0),
    "bool_mask_operators": (lambda w: np.sum(np.where((w > -1) & (w < 1) | ~(w > -5), w ** 2,
                                                      w)), w0),
    "split_family": (lambda M: sum(np.sum(p ** 2) * (i + 1) for i, p in enumerate(
        np.split(M, [1, 3], axis=1) + np.array_split(M[0], 3) + np.hsplit(M, 2))), M0),
    "stacks": (lambda w: np.sum(np.column_stack([w, w ** 2]) ** 2) + np.sum(np.dstack([w, w]))
               + np.sum(np.hstack([w[0], w[1:], 2.0]) * np.arange(5.0))
               + np.sum(np.vstack([w, w * 2]) ** 3), w0),
    "inverse_trig": (lambda p: np.sum(np.arcsin(p) + np.arccos(p) + np.arctan(p)
                                      + np.arcsinh(p) + np.arccosh(p + 1.5) + np.arctanh(p)
                                      + np.arctan2(p, 1.5 - p) + np.hypot(p, 2.0)
                                      + np.cbrt(p) + np.deg2rad(p)), P0),
    "sinh_cosh": (lambda w: np.sum(np.sinh(w) + np.cosh(w) + np.logaddexp2(w, 0.5)), w0),
    "tensordot": (lambda M: np.sum(np.tensordot(A0, M, axes=([2], [0])) ** 2)
                  + np.tensordot(M, M, axes=2) + np.sum(np.tensordot(w0, M, axes=0)), M0),
    "einsum_extended": (lambda M: np.einsum("ii", M) + np.sum(np.einsum("ii->i", M) ** 2)
                        + np.einsum("ij,jk,ki->", M, M, M)
                        + np.sum(np.einsum("...j,j->...", A0, M[0]))
                        + np.sum(np.einsum("...ij,...kj->...ik", A0, A0 * M[0])), M0),
    "prod_cumprod": (lambda p: np.prod(p) + np.sum(np.cumprod(p)) + p.prod()
                     + np.sum(np.prod(np.outer(p, p), axis=1, keepdims=True)), P0),
    "prod_with_zero": (lambda w: np.prod(w * np.array([1.0, 0.0, 1.0, 1.0])) + np.sum(
        np.cumprod(w * np.array([1.0, 0.0, 1.0, 1.0]))) + np.prod(w[:2] - w[:2]), w0),
    "sort_median": (lambda M: np.sum(np.sort(M, axis=0) * np.arange(16.0).reshape(4, 4))
                    + np.median(M) + np.sum(np.median(M, axis=1)) + np.sum(np.sort(M[0]))
                    + np.sum(M[0][np.argsort(M[1])] * np.arange(4.0)), M0),
    "roll_pad": (lambda M: np.sum(np.roll(M, 1) * np.roll(M, (1, -2), axis=(0, 1)) * M0)
                 + np.sum(np.pad(M, 1) * np.arange(36.0).reshape(6, 6))
                 + np.sum(np.pad(M, ((0, 1), (2, 0)), constant_values=2.0) ** 2)
                 + np.sum(np.pad(M, 1, mode="reflect") * np.pad(M0, 1, mode="edge")), M0),
    "take_diff_ptp": (lambda w: np.sum(np.take(w, [0, 2, 3]) ** 2) + np.sum(np.diff(w) ** 2)
                      + np.ptp(w) + np.sum(np.diff(w, n=2, prepend=0.0) ** 2), w0),
    "convolve": (lambda k: np.sum(np.convolve(np.sin(np.arange(8.0)), k) ** 2)
                 + np.sum(np.convolve(np.arange(8.0), k, "same") ** 2)
                 + np.sum(np.correlate(np.arange(8.0), k) ** 2)
                 + np.sum(np.correlate(k, np.arange(5.0), "full") * np.arange(7.0)), K0),
    "triu_moveaxis_kron": (lambda M: np.sum(np.triu(M, 1) ** 2) + np.sum(np.tril(M) * M0)
                           + np.sum(np.moveaxis(A0, 0, -1) * M[0, :2])
                           + np.sum(np.kron(M[:2, :2], M0) ** 2)
                           + np.sum(np.linalg.matrix_power(M * 0.3, 3))
                           + np.sum(np.rot90(M) * M0), M0),
    "norm_orders": (lambda M: np.linalg.norm(M, 1) + np.linalg.norm(M, np.inf)
                    + np.linalg.norm(M[0], 3) + np.linalg.norm(M[1], 1)
                    + np.linalg.norm(M[2], -np.inf) + np.sum(np.linalg.norm(M, ord=1, axis=1))
                    + np.sum(X / np.linalg.norm(X, axis=1, keepdims=True) * M[0]), M0),
    "nan_logical_reductions": (lambda w: np.nansum(w ** 2) + np.nanmean(w) + np.nanmax(w)
                               + np.sum(w * np.isfinite(w)) + np.sum(w * np.any(X > 0, 0))
                               + np.sum(w * (X > -5).all(axis=0)), w0),
    "reduction_keywords": (lambda M: np.mean(M, where=M0 > 3) + np.sum(M, where=M0 > 3)
                           + np.max(M[0], initial=5.0) + np.sum(M, 0, np.float64).sum()
                           + M.std(ddof=1) + np.sum(M, initial=1.0)
                           + np.max(M[0], where=M0[0] > 3, initial=-9.0), M0),
    "methods": (lambda w: w.repeat(2).sum() + w.copy().sum() + w.take([1, 2]).sum()
                + w.cumprod().sum() + w.reshape((2, 2)).prod(axis=0).sum(), w0),
    "polyval_trapezoid_cross": (lambda k: np.sum(np.polyval(k, np.linspace(-1, 1, 5)) ** 2)
                                + np.sum(np.polyval([1.0, -2.0, 0.5], k))
                                + np.sum(np.cross(k, np.array([1.0, 2.0, 3.0])) ** 2)
                                + C.trapezoid(k ** 2, dx=0.1), K0),
    "ufunc_methods": (lambda M: np.add.reduce(M, axis=1).sum() + np.multiply.reduce(M[0] + 3)
                      + np.sum(np.add.accumulate(M[0]) ** 2), M0),
})


def _rnn_states(W):
    h, hs = np.zeros(4), []
    for x in X[:3]:
        h = np.tanh(h @ W + x)
        hs.append(h)
    return hs


@pytest.mark.parametrize("name", sorted(USER_CODE))
def test_user_code_values_and_gradients(name):
    fn, arg = USER_CODE[name]
    np.testing.assert_allclose(adjit.compile(fn, backend="numpy")(arg), fn(arg), rtol=1e-12)
    assert adjit.gradcheck(fn, arg, eps=1e-5) < 1e-6


def test_argmax_accuracy_as_aux():
    def loss(W, X, y):
        z = X @ W.T
        acc = np.mean(np.argmax(z, axis=1) == y)
        return -np.mean(adjit.log_softmax(z)[np.arange(len(y)), y]), acc
    (v, acc), g = adjit.value_and_grad(loss, has_aux=True, backend="numpy")(W0, X, YC)
    assert float(acc) == np.mean(np.argmax(X @ W0.T, axis=1) == YC)
    assert g.shape == W0.shape


# what adjit cannot trace raises an error naming the call and the user's line
REFUSED = {
    "np.where with one argument": (lambda w: np.sum(w[np.where(w > 0)]), r"np\.where\(cond"),
    "put with mode=clip": (lambda w: np.put(w, np.argmax(w)[None], 1.0, mode="clip") or
                           np.sum(w), r"put with mode='clip' at traced positions"),
    "bitwise on floats": (lambda w: np.sum(w & 1), r"bitwise_and of float64"),
    "unequal split": (lambda w: np.sum(np.split(w, 3)[0]), r"split.*array_split"),
    "matrix 3-norm": (lambda w: np.linalg.norm(w.reshape(2, 2), 3), r"norm.*ord=3"),
    "pad mode": (lambda w: np.sum(np.pad(w, 1, mode="empty")), r"np\.pad.*'empty'"),
    "unsupported keyword": (lambda w: np.sum(np.quantile(w, 0.5, weights=w)), r"np\.quantile.*weights="),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_unsupported_numpy_is_refused_clearly(name):
    fn, pattern = REFUSED[name]
    with pytest.raises((adjit.UnsupportedError, adjit.ShapeError), match=pattern) as info:
        adjit.grad(fn, backend="numpy")(w0)
    assert "test_numpy_coverage.py:" in str(info.value)


def test_np_array_is_restored_after_tracing():
    original = np.array
    adjit.grad(lambda w: np.sum(np.array([w, w]) ** 2), backend="numpy")(w0)
    assert np.array is original


# -- np.linalg: inv, solve, det, slogdet, cholesky, eigh -------------------------------------------
def _spd(n, seed, batch=()):
    """Symmetric positive definite, eigenvalues 1 .. n + 1 and at least 0.5 apart."""
    r = np.random.default_rng(seed)
    q = np.linalg.qr(r.normal(size=batch + (n, n)))[0]
    w = 1.0 + np.arange(n) + r.uniform(0.0, 0.5, size=batch + (n,))
    return (q * w[..., None, :]) @ np.swapaxes(q, -1, -2)


S0 = _spd(4, 1)
SB = _spd(3, 2, (2,))                         # a stack of two SPD matrices
G0 = 2.0 * np.eye(4) + 0.3 * rng.normal(size=(4, 4))   # invertible, not symmetric
R0 = rng.normal(size=4)
Y0 = rng.normal(size=(4, 2))
SIGN_FREE = np.abs   # eigenvectors are defined up to sign: losses see them through squares


def gaussian_nll(S, r=R0):
    return 0.5 * (r @ np.linalg.solve(S, r)) + 0.5 * np.linalg.slogdet(S)[1]


LINALG = {
    "inv": lambda A: np.sum(np.linalg.inv(A) * G0) + np.trace(np.linalg.inv(A @ A)),
    "solve_vector": lambda A: np.sum(np.linalg.solve(A, R0) ** 2),
    "solve_matrix": lambda A: np.sum(np.linalg.solve(A, Y0) * Y0),
    "solve_b": lambda b: np.sum(np.linalg.solve(G0, b) ** 3) + np.sum(np.linalg.solve(S0, b)),
    "det": lambda A: np.linalg.det(A) + np.linalg.det(A[:2, :2]) ** 2,
    "slogdet": lambda A: np.linalg.slogdet(A)[1] * np.linalg.slogdet(A).sign,
    "slogdet_unpacked": lambda A: _logabsdet(A),
    "cholesky": lambda A: np.sum(np.linalg.cholesky(A) * G0),
    "cholesky_upper": lambda A: np.sum(np.linalg.cholesky(A, upper=True) ** 2 * G0),
    "eigh": lambda A: np.sum(np.linalg.eigh(A)[0] ** 2)
    + np.sum(SIGN_FREE(np.linalg.eigh(A).eigenvectors) * G0),
    "eigh_upper": lambda A: np.sum(np.linalg.eigh(A, UPLO="U")[1] ** 2 * G0)
    + np.sum(np.linalg.eigvalsh(A, "U") * R0),
    "eigvalsh": lambda A: np.sum(np.exp(np.linalg.eigvalsh(A))),
    "gaussian_nll": gaussian_nll,
    "gaussian_nll_cholesky": lambda S: 0.5 * np.sum(np.linalg.solve(np.linalg.cholesky(S), R0)
                                                   ** 2)
    + np.sum(np.log(np.diag(np.linalg.cholesky(S)))),
    "least_squares": lambda w: np.sum((X @ np.linalg.solve(X.T @ X + np.diag(w ** 2), X.T @ YB)
                                       - YB) ** 2),
    "whitening": lambda A: np.sum((np.linalg.inv(np.linalg.cholesky(A)) @ X.T) ** 2),
    "matrix_power_negative": lambda A: np.sum(np.linalg.matrix_power(A, -2)),
    "parameterized_covariance": lambda B: gaussian_nll(B @ B.T + np.eye(4)),
}
LINALG_ARGS = {"solve_b": R0, "det": G0, "slogdet": G0, "inv": G0, "least_squares": w0 + 1.0,
               "matrix_power_negative": G0, "parameterized_covariance": G0}


def _logabsdet(A):
    sign, logabsdet = np.linalg.slogdet(A)
    return logabsdet


@pytest.mark.parametrize("name", sorted(LINALG))
def test_linalg_values_and_gradients(name):
    fn, arg = LINALG[name], LINALG_ARGS.get(name, S0)
    np.testing.assert_allclose(adjit.compile(fn, backend="numpy")(arg), fn(arg), rtol=1e-12)
    assert adjit.gradcheck(fn, arg, eps=1e-5) <= 1e-6


BATCHED = {
    "inv": (lambda A: np.sum(np.linalg.inv(A) ** 2), SB),
    "solve_vector": (lambda A: np.sum(np.linalg.solve(A, R0[:3]) ** 2), SB),
    "solve_broadcast_b": (lambda A: np.sum(np.linalg.solve(A, Y0[:3]) ** 2), SB),
    "solve_broadcast_a": (lambda b: np.sum(np.linalg.solve(S0[:3, :3], b) ** 2),
                          rng.normal(size=(2, 3, 2))),
    "det": (lambda A: np.sum(np.linalg.det(A) * np.array([1.0, -2.0])), SB),
    "slogdet": (lambda A: np.sum(np.linalg.slogdet(A)[1] ** 2), SB),
    "cholesky": (lambda A: np.sum(np.linalg.cholesky(A) ** 3), SB),
    "eigh": (lambda A: np.sum(np.linalg.eigh(A)[0] ** 3) + np.sum(np.linalg.eigh(A)[1] ** 4),
             SB),
    "nll_stack": (lambda S: np.sum(0.5 * np.sum(R0[:3] * np.linalg.solve(S, R0[:3]), axis=-1)
                                   + 0.5 * np.linalg.slogdet(S)[1]), SB),
}


@pytest.mark.parametrize("name", sorted(BATCHED))
def test_linalg_batched(name):
    fn, arg = BATCHED[name]
    got = adjit.compile(fn, backend="numpy")(arg)
    np.testing.assert_allclose(got, fn(arg), rtol=1e-12)
    assert adjit.gradcheck(fn, arg, eps=1e-5) <= 1e-6


def test_linalg_results_have_numpy_shapes():
    def shapes(A, b):
        return (np.linalg.inv(A), np.linalg.solve(A, b), np.linalg.solve(A, b[:, None]),
                np.linalg.det(A), np.linalg.slogdet(A)[0], np.linalg.cholesky(A),
                np.linalg.eigh(A)[0], np.linalg.eigh(A)[1], np.linalg.solve(A[0], A))
    A = _spd(3, 4, (2, 5))
    got = adjit.compile(shapes, backend="numpy")(A, R0[:3])
    for g, r in zip(got, shapes(A, R0[:3])):
        assert g.shape == np.shape(r)
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(LINALG))
def test_linalg_float32_stays_float32(name):
    fn, arg = LINALG[name], LINALG_ARGS.get(name, S0)
    x = arg.astype(np.float32)
    v, g = adjit.value_and_grad(fn, backend="numpy")(x)
    assert g.dtype == np.float32
    assert v.dtype == np.asarray(fn(x)).dtype    # as NumPy promotes (a float64 constant may)
    np.testing.assert_allclose(g, adjit.grad(fn, backend="numpy")(arg), rtol=2e-3, atol=2e-3)


def test_gaussian_nll_gradient_is_the_textbook_one():
    # d/dS of 0.5 r^T S^-1 r + 0.5 log|S| is 0.5 (S^-1 - S^-1 r r^T S^-1)
    si = np.linalg.inv(S0)
    want = 0.5 * (si - si @ np.outer(R0, R0) @ si)
    np.testing.assert_allclose(adjit.grad(gaussian_nll, backend="numpy")(S0), want, rtol=1e-10)


def test_gaussian_nll_hessian_by_nesting():
    fn = LINALG["parameterized_covariance"]
    v = rng.normal(size=G0.shape)
    hv = adjit.hvp(fn, backend="numpy")(G0, v)
    gr = adjit.grad(fn, backend="numpy")
    num = (gr(G0 + 1e-6 * v) - gr(G0 - 1e-6 * v)) / 2e-6
    np.testing.assert_allclose(hv, num, rtol=1e-5, atol=1e-6)
    h = adjit.hessian(lambda w: LINALG["least_squares"](w), backend="numpy")(w0 + 1.0)
    g = adjit.grad(LINALG["least_squares"], backend="numpy")
    num = np.stack([(g(w0 + 1.0 + 1e-6 * e) - g(w0 + 1.0 - 1e-6 * e)) / 2e-6
                    for e in np.eye(4)], axis=1)
    np.testing.assert_allclose(h, num, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(LINALG))
def test_linalg_numba_backend_gives_the_same_numbers(name):
    fn, arg = LINALG[name], LINALG_ARGS.get(name, S0)
    v, g = adjit.value_and_grad(fn, backend="numpy")(arg)
    v2, g2 = adjit.value_and_grad(fn, backend="numba", min_kernel_size=0)(arg)
    np.testing.assert_allclose(v2, v, rtol=1e-12)
    np.testing.assert_allclose(g2, g, rtol=1e-10, atol=1e-12)


def test_singular_matrix_raises_linalg_error():
    f = adjit.value_and_grad(lambda A: np.sum(np.linalg.inv(A)), backend="numpy")
    with pytest.raises(np.linalg.LinAlgError):
        f(np.ones((3, 3)))
    with pytest.raises(np.linalg.LinAlgError):   # not positive definite
        adjit.grad(lambda A: np.sum(np.linalg.cholesky(A)), backend="numpy")(-S0)


def test_linalg_shape_mistakes_are_named():
    with pytest.raises(adjit.ShapeError, match=r"np\.linalg\.inv.*square.*\(3, 4\)"):
        adjit.grad(lambda A: np.sum(np.linalg.inv(A)), backend="numpy")(np.ones((3, 4)))
    with pytest.raises(adjit.ShapeError, match=r"np\.linalg\.solve.*\(4,\).*\(3, 3\)"):
        adjit.grad(lambda A: np.sum(np.linalg.solve(A, R0)), backend="numpy")(S0[:3, :3])
    with pytest.raises(adjit.UnsupportedError, match=r"np\.linalg\.det of float16"):
        adjit.compile(np.linalg.det, backend="numpy")(S0.astype(np.float16))
