"""adjit.custom_vjp and adjit.custom_jvp: user-given derivative rules, as JAX's.

Each rule below is the true derivative, so adjit's gradients must equal central differences
of the function itself; the cases cover reverse mode (grad), forward mode (jvp), second order
(hessian, hvp, grad of grad), pytrees, several results, nondiff_argnums, the backends,
checkpointing, and the errors a wrong rule gets."""
import functools

import numpy as np
import pytest

import adjit
from finite_differences import numgrad


def _rel(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return np.max(np.abs(a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1e-8))


# -- the rules -------------------------------------------------------------------------------
@adjit.custom_vjp
def sin_times(x, y):
    return np.sin(x) * y


def _sin_times_fwd(x, y):
    return sin_times(x, y), (np.cos(x), np.sin(x), y)


def _sin_times_bwd(res, g):
    cos_x, sin_x, y = res
    return cos_x * g * y, sin_x * g


sin_times.defvjp(_sin_times_fwd, _sin_times_bwd)


@adjit.custom_jvp
def log1pexp(x):
    return np.log1p(np.exp(x))


@log1pexp.defjvp
def _log1pexp_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return log1pexp(x), t / (1.0 + np.exp(-x))


@adjit.custom_vjp
def safe_norm(x):
    return np.sqrt(np.sum(x * x))


def _safe_norm_fwd(x):
    n = safe_norm(x)
    return n, (x, n)


def _safe_norm_bwd(res, g):
    x, n = res
    return (g * x / np.where(n == 0.0, 1.0, n),)


safe_norm.defvjp(_safe_norm_fwd, _safe_norm_bwd)


@adjit.custom_jvp
def softclip(x, lo, hi):
    return lo + (hi - lo) / (1.0 + np.exp(-x))


softclip.defjvps(lambda t, ans, x, lo, hi: t * (ans - lo) * (hi - ans) / (hi - lo),
                 lambda t, ans, x, lo, hi: t * (1.0 - (ans - lo) / (hi - lo)),
                 lambda t, ans, x, lo, hi: t * (ans - lo) / (hi - lo))


@adjit.custom_vjp
def polar(r, theta):
    """Two results: a tuple."""
    return r * np.cos(theta), r * np.sin(theta)


def _polar_fwd(r, theta):
    c, s = np.cos(theta), np.sin(theta)
    return (r * c, r * s), (r, c, s)


def _polar_bwd(res, g):
    r, c, s = res
    gx, gy = g
    return gx * c + gy * s, -gx * r * s + gy * r * c


polar.defvjp(_polar_fwd, _polar_bwd)


def _scale_fwd(k, x):
    return x * k, None


@functools.partial(adjit.custom_vjp, nondiff_argnums=(0,))
def scale(k, x):
    return x * k


scale.defvjp(_scale_fwd, lambda k, res, g: (g * k,))


X = np.array([0.3, -1.2, 2.0])
Y = np.array([2.0, -1.0, 0.5])


# -- values and gradients against central differences --------------------------------------
CASES = [
    ("custom_vjp", lambda x: np.sum(sin_times(x, Y) ** 2), X),
    ("custom_vjp second argument", lambda y: np.sum(sin_times(X, y) ** 2), Y),
    ("custom_jvp", lambda x: np.sum(log1pexp(x) * Y), X),
    ("custom_vjp of a norm", lambda x: safe_norm(x) ** 2 + np.sum(x), X),
    ("defjvps", lambda x: np.sum(softclip(x, -1.0, 3.0) ** 2), X),
    ("defjvps, bounds traced", lambda b: np.sum(softclip(X, b[0], b[1]) ** 2),
     np.array([-1.0, 3.0])),
    ("two results", lambda p: np.sum(polar(p[0], p[1])[0] * polar(p[0], p[1])[1] ** 2),
     np.array([1.5, 0.7])),
    ("nondiff_argnums", lambda x: np.sum(scale(3.0, x) ** 2), X),
    ("inside a larger function", lambda x: np.mean(np.tanh(log1pexp(x @ np.ones((3, 2))))), X),
    ("composed", lambda x: np.sum(log1pexp(sin_times(x, Y))), X),
]


@pytest.mark.parametrize("name,f,x", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_grad_matches_central_differences(name, f, x, backend):
    v, g = adjit.value_and_grad(f, backend=backend)(x)
    assert np.isclose(v, f(x), rtol=1e-12)
    assert _rel(g, numgrad(f, x)) < 1e-6


@pytest.mark.parametrize("name,f,x", CASES, ids=[c[0] for c in CASES])
def test_second_order_matches_central_differences(name, f, x):
    """hessian (reverse over reverse) and hvp (forward over reverse) go through the rules."""
    h = adjit.hessian(f)(x)
    gfun = adjit.grad(f)
    num = np.stack([numgrad(lambda z: gfun(z)[i], x, eps=1e-5) for i in range(x.size)])
    assert _rel(h, num) < 1e-5
    v = np.linspace(-1.0, 1.0, x.size)
    assert np.allclose(adjit.hvp(f)(x, v), h @ v, rtol=1e-10, atol=1e-12)


def test_jvp_uses_the_rules():
    t = np.array([1.0, 2.0, -1.0])
    _, tout = adjit.jvp(lambda x: sin_times(x, Y), (X,), (t,))
    assert np.allclose(tout, np.cos(X) * Y * t)
    _, tout = adjit.jvp(log1pexp, (np.array([800.0, 0.0]),), (np.array([1.0, 2.0]),))
    assert np.allclose(tout, [1.0, 1.0])
    jac = adjit.jacobian(lambda p: np.stack(polar(p[0], p[1])))(np.array([2.0, 0.5]))
    assert np.allclose(jac, [[np.cos(0.5), -2 * np.sin(0.5)], [np.sin(0.5), 2 * np.cos(0.5)]])


def test_the_rule_is_what_differentiates():
    """A stable rule where the function overflows (JAX's log1pexp example), a clipped
    cotangent, and a zero norm: the user's rule decides, not the traced function."""
    assert np.allclose(adjit.grad(lambda x: np.sum(log1pexp(x)))(np.array([800.0])), [1.0])

    @adjit.custom_vjp
    def clip_gradient(x):
        return x
    clip_gradient.defvjp(lambda x: (x, None), lambda res, g: (np.clip(g, -1.0, 1.0),))
    g = adjit.grad(lambda x: np.sum(3.0 * clip_gradient(x) - 0.5 * x))(np.ones(2))
    assert np.allclose(g, [0.5, 0.5])
    assert np.allclose(adjit.grad(lambda x: safe_norm(x))(np.zeros(3)), 0.0)


def test_outside_a_differentiated_trace_the_function_runs():
    assert np.allclose(sin_times(X, Y), np.sin(X) * Y)
    assert np.allclose(adjit.compile(lambda x: log1pexp(x))(X), np.log1p(np.exp(X)))
    g = adjit.compile(lambda x: log1pexp(x)).lower(X).graph
    assert all(g[n]["op"] != "custom_jvp" for n in g.nodes())
    # differentiated: the node is in the trace, and gone (an identity) after autodiff
    f = lambda x: np.sum(log1pexp(x))   # noqa: E731
    assert "custom_jvp[log1pexp]" in str(adjit.trace(adjit.grad(f), X))
    g = adjit.grad(f).lower(X).graph
    assert all(g[n]["op"] != "custom_jvp" for n in g.nodes())


def test_pytrees_and_integer_arguments():
    @adjit.custom_vjp
    def weighted(p, labels):
        return np.sum(p["w"][labels] * p["b"])

    def fwd(p, labels):
        return weighted(p, labels), (p, labels)

    def bwd(res, g):
        p, labels = res
        gw = np.zeros_like(p["w"])
        np.add.at(gw, labels, g * p["b"])
        return {"w": gw, "b": g * p["w"][labels]}, None
    weighted.defvjp(fwd, bwd)
    p = {"w": np.array([1.0, 2.0, 3.0]), "b": np.array([0.5, -1.0])}
    labels = np.array([2, 0])
    got = adjit.grad(lambda p: weighted(p, labels) ** 2)(p)
    for k in p:
        num = numgrad(lambda v: weighted({**p, k: v}, labels) ** 2, p[k])
        assert _rel(got[k], num) < 1e-7


def test_compiled_training_step_with_checkpointing():
    rng = np.random.default_rng(0)
    W, Xb = rng.normal(size=(4, 4)) * 0.5, rng.normal(size=(8, 4))

    def loss(W, X):
        h = X
        for _ in range(6):
            h = log1pexp(h @ W)
        return np.mean(h ** 2)
    plain = adjit.grad(loss)(W, Xb)
    for opts in ({"checkpoint": "sqrt"}, {"backend": "numba"}, {"fuse": False}):
        assert _rel(adjit.grad(loss, **opts)(W, Xb), plain) < 1e-12
    assert _rel(plain, numgrad(lambda w: loss(w, Xb), W)) < 1e-6

    @adjit.compile
    def step(W, X):
        return W - 0.1 * adjit.grad(loss)(W, X)
    assert np.allclose(step(W, Xb), W - 0.1 * plain)


def test_float32_results_keep_their_dtype():
    x = X.astype(np.float32)
    g = adjit.grad(lambda x: np.sum(log1pexp(x)))(x)
    assert g.dtype == np.float32
    assert np.allclose(g, 1 / (1 + np.exp(-X)), rtol=1e-6)


def test_gradcheck_finds_a_wrong_rule():
    @adjit.custom_vjp
    def cube(x):
        return x ** 3
    cube.defvjp(lambda x: (cube(x), x), lambda x, g: (2.0 * x ** 2 * g,))   # should be 3 x^2
    assert adjit.gradcheck(lambda x: np.sum(cube(x)), X) > 0.1


# -- errors ------------------------------------------------------------------------------
def _raises(match, f, *args):
    with pytest.raises(adjit.AdjitError, match=match) as e:
        adjit.grad(f)(*args)
    return e


def test_errors_name_the_rule_and_what_to_return():
    @adjit.custom_vjp
    def f(x, y):
        return x * y
    _raises("has no rule: call f.defvjp", lambda x: np.sum(f(x, 2.0)), X)
    with pytest.raises(adjit.GradError, match="has no rule"):
        f(X, 2.0)

    f.defvjp(lambda x, y: (f(x, y), y), lambda y, g: g * y)       # not a tuple per argument
    _raises("one cotangent per argument", lambda x: np.sum(f(x, Y)), X)
    f.defvjp(lambda x, y: (f(x, y), y), lambda y, g: (g * y,))    # one missing
    _raises(r"one cotangent per argument \(2", lambda x: np.sum(f(x, Y)), X)
    f.defvjp(lambda x, y: (f(x, y), y), lambda y, g: (np.sum(g * y), None))
    _raises(r"shape \(\) for an argument of shape \(3,\)", lambda x: np.sum(f(x, Y)), X)
    f.defvjp(lambda x, y: f(x, y), lambda y, g: (g * y, None))
    _raises(r"must return \(result, residuals\)", lambda x: np.sum(f(x, Y)), X)


def test_rules_may_not_close_over_traced_values():
    def loss(x):
        s = np.sum(x)

        @adjit.custom_vjp
        def f(z):
            return z * s
        f.defvjp(lambda z: (f(z), None), lambda res, g: (g * s,))
        return np.sum(f(x))
    with pytest.raises(adjit.TraceError, match="pass it as an argument"):
        adjit.grad(loss)(X)


def test_keyword_arguments_are_refused():
    with pytest.raises(TypeError, match="by position"):
        sin_times(X, y=Y)
