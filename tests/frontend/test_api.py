"""The public API: pytrees, weak scalars, caching, static arguments, nesting, reports."""
import doctest

import numpy as np
import pytest

import adjit


def mlp_loss(params, X, y):
    h = np.tanh(X @ params["W1"].T + params["b1"])
    z = h @ params["W2"].T + params["b2"]
    logp = z - adjit.logsumexp(z, axis=1, keepdims=True)
    return -np.mean(logp[np.arange(len(y)), y])


def make(rng, dtype=np.float64, n=8, d=5, h=7, k=3):
    p = {"W1": rng.normal(size=(h, d)), "b1": rng.normal(size=h),
         "W2": rng.normal(size=(k, h)), "b2": rng.normal(size=k)}
    p = {k_: v.astype(dtype) for k_, v in p.items()}
    return p, rng.normal(size=(n, d)).astype(dtype), rng.integers(0, k, size=n)


def test_grad_has_the_structure_of_the_argument():
    p, X, y = make(np.random.default_rng(0))
    g = adjit.grad(mlp_loss, backend="numpy")(p, X, y)
    assert set(g) == set(p) and all(g[k].shape == p[k].shape for k in p)
    assert adjit.gradcheck(mlp_loss, p, X, y, eps=1e-5) < 1e-6


def test_lists_tuples_and_argnums_tuple():
    def f(ws, x):
        a, (b, c) = ws[0], ws[1]
        return np.sum(a * x) + np.sum(b * c * x)
    ws = [np.ones(3), (np.full(3, 2.0), np.full(3, 3.0))]
    x = np.arange(3.0)
    gws, gx = adjit.grad(f, argnums=(0, 1), backend="numpy")(ws, x)
    assert isinstance(gws, list) and isinstance(gws[1], tuple)
    np.testing.assert_array_equal(gws[1][0], 3.0 * x)
    np.testing.assert_array_equal(gx, 1.0 + 6.0)


def test_python_scalars_are_weak():
    x = np.ones(4, np.float32)
    assert adjit.compile(lambda x: x * 2.5 + 1, backend="numpy")(x).dtype == np.float32
    g = adjit.grad(lambda x, s: np.sum(x * s), argnums=1, backend="numpy")(x, 3.0)
    assert float(g) == 4.0
    out = adjit.compile(lambda x, s: x * s, backend="numpy")(x, 3.0)
    assert out.dtype == np.float32


def test_float32_stays_float32_through_grad():
    p, X, y = make(np.random.default_rng(1), np.float32)
    g = adjit.grad(mlp_loss, backend="numpy")(p, X, y)
    assert all(v.dtype == np.float32 for v in g.values())


def test_cache_per_signature():
    f = adjit.grad(lambda x: np.sum(x ** 3), backend="numpy")
    f(np.ones(3))
    f(np.full(3, 2.0))
    assert len(f._cache) == 1
    f(np.ones(4))
    f(np.ones(4, np.float32))
    assert len(f._cache) == 3
    assert f.lower(np.ones(3)) is f.lower(np.zeros(3))


def test_value_and_grad_with_aux():
    def f(w):
        loss = np.sum(w * w)
        return loss, {"norm": np.sqrt(loss)}
    (v, aux), g = adjit.value_and_grad(f, has_aux=True, backend="numpy")(np.array([3.0, 4.0]))
    assert float(v) == 25.0 and float(aux["norm"]) == 5.0
    np.testing.assert_array_equal(g, [6.0, 8.0])
    g2, aux2 = adjit.grad(f, has_aux=True, backend="numpy")(np.array([3.0, 4.0]))
    np.testing.assert_array_equal(g2, g)


def test_nested_grad_and_hessian():
    f = lambda x: np.sum(np.sin(x) * x)  # noqa: E731
    x = np.array([0.3, 1.1])
    gg = adjit.grad(lambda x: np.sum(adjit.grad(f)(x)), backend="numpy")(x)
    h = adjit.hessian(f, backend="numpy")(x)
    np.testing.assert_allclose(gg, h.sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(np.diag(h), 2 * np.cos(x) - x * np.sin(x), rtol=1e-12)


def test_jacobian_both_modes():
    A = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(adjit.jacobian(lambda x: A @ x, backend="numpy")(np.ones(3)), A)
    B = np.arange(12.0).reshape(4, 3)
    np.testing.assert_allclose(adjit.jacobian(lambda x: B @ x, backend="numpy")(np.ones(3)), B)


def test_vjp_and_jvp():
    x = np.array([1.0, 2.0])
    out, f_vjp = adjit.vjp(lambda x, y: x * y, x, np.array([3.0, 4.0]), backend="numpy")
    gx, gy = f_vjp(np.ones(2))
    np.testing.assert_array_equal(gx, [3.0, 4.0])
    np.testing.assert_array_equal(gy, x)
    _, t = adjit.jvp(lambda x: np.exp(x), (x,), (np.ones(2),), backend="numpy")
    np.testing.assert_allclose(t, np.exp(x))


def test_unused_argument_gets_a_real_zero_gradient():
    g = adjit.grad(lambda x, y: np.sum(x), argnums=1, backend="numpy")(np.ones(2), np.ones(3))
    np.testing.assert_array_equal(g, np.zeros(3))
    g += 1  # results are ordinary writable arrays


def test_generated_source_is_readable():
    p, X, y = make(np.random.default_rng(2))
    prog = adjit.grad(mlp_loss, backend="numpy").lower(p, X, y)
    src = prog.source
    assert "def grad_mlp_loss(params_W1, params_b1, params_W2, params_b2, X, y):" in src
    assert "# backward" in src and "del " in src
    assert "test_api.py:" in src and "h = np.tanh(X @ params[\"W1\"].T" in src
    assert "g_params_W1" in src or "g_h" in src
    assert "v" in prog.ir and "matmul" in prog.ir
    assert "digraph" in prog.graph.to_dot()


def test_static_estimate_matches_measured_peak():
    """One MLP gradient step with arrays of megabytes: estimate within 10% of tracemalloc."""
    rng = np.random.default_rng(3)
    p = {"W1": rng.normal(size=(512, 784)).astype(np.float32),
         "b1": np.zeros(512, np.float32),
         "W2": rng.normal(size=(512, 512)).astype(np.float32) * 0.05,
         "b2": np.zeros(512, np.float32),
         "W3": rng.normal(size=(10, 512)).astype(np.float32) * 0.05,
         "b3": np.zeros(10, np.float32)}
    X = rng.normal(size=(256, 784)).astype(np.float32)
    y = rng.integers(0, 10, size=256)

    def loss(p, X, y):
        h = adjit.relu(X @ p["W1"].T + p["b1"])
        h = adjit.relu(h @ p["W2"].T + p["b2"])
        z = h @ p["W3"].T + p["b3"]
        return -np.mean(adjit.log_softmax(z)[np.arange(len(y)), y])
    f = adjit.value_and_grad(loss, backend="numpy")
    est = f.lower(p, X, y).memory.peak_bytes
    measured = adjit.measure_peak_memory(f, p, X, y)
    assert est > 2**20
    assert abs(measured - est) <= 0.10 * measured, (est, measured)


@pytest.mark.parametrize("mod", ["adjit", "adjit.frontend.functions", "adjit.frontend.api",
                                 "adjit.frontend.trace", "adjit.frontend.linalg",
                                 "adjit.frontend.custom"])
def test_docstring_examples_run(mod):
    import importlib
    m = importlib.import_module(mod)
    res = doctest.testmod(m, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0 and res.attempted > 0


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_value_used_after_its_elided_broadcast_stays_alive(backend):
    """Regression: the max was deleted at its last direct use although its (elided)
    broadcast was read later, an UnboundLocalError in the generated code."""
    def f(x):
        m = np.max(x, axis=1, keepdims=True)
        s = np.sum(np.exp(x - m), axis=1, keepdims=True)
        return np.sum(s + m), np.sum(x >= m)
    x = np.arange(6.0).reshape(2, 3)
    got = adjit.compile(f, backend=backend)(x)
    np.testing.assert_allclose(got[0], f(x)[0])
    assert got[1] == f(x)[1]


def test_backward_comments_name_the_forward_op():
    src = adjit.grad(lambda x: np.sum(np.tanh(x)), backend="numpy").lower(np.ones(3)).source
    assert "vjp of tanh" in src
