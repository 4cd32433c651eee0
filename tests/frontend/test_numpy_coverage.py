"""Loss functions written the way users write NumPy: values and gradients match NumPy."""
import numpy as np
import pytest

import adjit

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
