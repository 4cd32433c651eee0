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
    if name in ("custom_vjp of a norm", "custom_vjp", "custom_vjp second argument", "composed"):
        # fwd's primal or residual is the function itself (sin_times(x, y), safe_norm(x)), a
        # custom_vjp inside the gradient: forward mode through it is refused (JAX's jvp of
        # grad, and its jax.hessian = jacfwd(jacrev), refuse it too)
        with pytest.raises(adjit.GradError, match="adjit.hessian"):
            adjit.hvp(f)(x, v)
        return
    assert np.allclose(adjit.hvp(f)(x, v), h @ v, rtol=1e-10, atol=1e-12)


def test_a_jvp_rules_own_call_keeps_its_rule_at_every_order():
    """A straight-through estimator whose rule calls the function (`ans = ste(x)`): its
    second derivative takes the rule again, as JAX's (hessian of sum(ste(x) ** 2) is 2, not
    the 0 of round's own derivative)."""
    @adjit.custom_jvp
    def ste(x):
        return np.round(x)

    @ste.defjvp
    def _(p, t):
        return ste(p[0]), t[0]
    x = np.array([0.3, -1.2, 2.6])
    np.testing.assert_allclose(adjit.grad(lambda x: np.sum(ste(x) ** 2))(x), 2 * np.round(x))
    np.testing.assert_allclose(adjit.hessian(lambda x: np.sum(ste(x) ** 2))(x), 2 * np.eye(3))
    np.testing.assert_allclose(adjit.hessian(lambda x: np.sum(ste(x) * x))(x), 2 * np.eye(3))
    np.testing.assert_allclose(adjit.hvp(lambda x: np.sum(ste(x) * x))(x, np.ones(3)), 2.0)


def test_jvp_uses_the_rules():
    t = np.array([1.0, 2.0, -1.0])
    with pytest.raises(adjit.GradError, match="forward-mode differentiation .*custom_vjp"):
        adjit.jvp(lambda x: sin_times(x, Y), (X,), (t,))
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


def test_keyword_arguments_bind_by_name_and_keyword_only_parameters_are_refused():
    assert np.allclose(adjit.grad(lambda x: np.sum(sin_times(x, y=Y)))(X), np.cos(X) * Y)
    with pytest.raises(TypeError, match="keyword-only parameters"):
        @adjit.custom_vjp
        def f(x, *, k):
            return x * k
        f.defvjp(lambda x, *, k: (x * k, None), lambda r, g: (g,))
        f(X, k=2.0)


# -- sweep 25, tester D ----------------------------------------------------------------------
def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


@adjit.custom_jvp
def sig_jvps(x):
    return _sigmoid(x)


sig_jvps.defjvps(lambda t, ans, x: t * ans * (1 - ans))


@adjit.custom_jvp
def sig_jvp(x):
    return _sigmoid(x)


@sig_jvp.defjvp
def _sig_jvp(p, t):
    s = sig_jvp(p[0])
    return s, t[0] * s * (1 - s)


@adjit.custom_vjp
def sig_vjp(x):
    return _sigmoid(x)


def _sig_fwd(x):
    s = sig_vjp(x)
    return s, s


sig_vjp.defvjp(_sig_fwd, lambda s, g: (g * s * (1 - s),))


@pytest.mark.parametrize("f", [sig_jvps, sig_jvp, sig_vjp], ids=["defjvps", "defjvp", "vjp"])
def test_a_rule_calling_its_own_function_keeps_the_rule_when_differentiated_again(f):
    """JAX's `ans = f(x)` inside the rule: the inner call is the custom function again, so a
    Hessian goes through the rule (0 at x = -800) and not through exp(800) (nan)."""
    x = np.array([-800.0, 0.5])
    s = _sigmoid(0.5)
    want = np.diag([0.0, s * (1 - s) * (1 - 2 * s)])
    loss = lambda x: np.sum(f(x))   # noqa: E731
    assert np.allclose(adjit.hessian(loss)(x), want, atol=1e-15)
    assert np.allclose(adjit.grad(lambda x: np.sum(adjit.grad(loss)(x)))(x), np.diag(want))
    if f is sig_vjp:    # fwd's residual is sig_vjp(x): forward mode through it is refused
        with pytest.raises(adjit.GradError, match="forward-mode"):
            adjit.hvp(loss)(x, np.ones(2))
    else:
        assert np.allclose(adjit.hvp(loss)(x, np.ones(2)), np.diag(want))


def test_second_derivatives_go_through_fwd_as_ordinary_code():
    """JAX's clip_gradient (fwd returns x itself): the rule gives the first derivative; a
    second one differentiates the code fwd and bwd ran (JAX: jacrev(grad)), and hvp is J v."""
    @functools.partial(adjit.custom_vjp, nondiff_argnums=(0, 1))
    def clip_gradient(lo, hi, x):
        return x
    clip_gradient.defvjp(lambda lo, hi, x: (x, None),
                         lambda lo, hi, _, g: (np.clip(g, lo, hi),))
    f = lambda x: np.sum(np.sin(clip_gradient(-0.75, 0.75, x)) ** 2)   # noqa: E731
    x = np.array([0.2, 1.0, 3.0])
    g = adjit.grad(f)
    assert np.allclose(g(x), np.clip(np.sin(2 * x), -0.75, 0.75))
    h = adjit.hessian(f)(x)
    num = np.stack([numgrad(lambda z: g(z)[i], x, eps=1e-6) for i in range(3)])
    assert np.allclose(h, num, atol=1e-6) and np.allclose(np.diag(h), [1.8421, 0.0, 1.9203],
                                                           atol=1e-4)
    v = np.array([1.0, -1.0, 0.5])
    assert np.allclose(adjit.hvp(f)(x, v), h @ v)


def test_a_custom_vjp_serves_reverse_mode_only():
    """clip_gradient's bwd is not linear in g: a Jacobian by columns through it would differ
    from grad's rows (JAX refuses forward mode there). jacobian and hessian use reverse."""
    @adjit.custom_vjp
    def clip_gradient(x):
        return x
    clip_gradient.defvjp(lambda x: (x, None), lambda r, g: (np.clip(g, -0.5, 0.5),))
    k = np.arange(1.0, 6.0)
    f = lambda s: clip_gradient(3.0 * s * k)   # noqa: E731
    rows = [adjit.grad(lambda s: f(s)[i])(1.0) for i in range(5)]
    assert np.allclose(adjit.jacobian(f)(1.0), rows) and np.allclose(rows, 1.5 * k)
    with pytest.raises(adjit.GradError, match="serves reverse mode only"):
        adjit.jvp(f, (1.0,), (1.0,))


def test_a_traced_nondiff_argument_of_a_custom_vjp_is_refused():
    @functools.partial(adjit.custom_vjp, nondiff_argnums=(1,))
    def f(x, k):
        return np.sin(x) * k
    f.defvjp(lambda x, k: (f(x, k), np.cos(x)), lambda k, c, g: (g * c * k,))
    with pytest.raises(adjit.GradError, match="nondiff_argnums but holds a traced array"):
        adjit.grad(lambda x: np.sum(f(x, np.sum(x))))(X)
    assert np.allclose(adjit.grad(lambda x: np.sum(f(x, 2.0)))(X), 2.0 * np.cos(X))


def test_a_function_in_a_custom_jvps_nondiff_argnums():
    """JAX's app(f, x) example."""
    @functools.partial(adjit.custom_jvp, nondiff_argnums=(0,))
    def app(f, x):
        return f(x)

    @app.defjvp
    def app_jvp(f, primals, tangents):
        (x,), (x_dot,) = primals, tangents
        return app(f, x), 2.0 * x_dot
    assert np.allclose(adjit.grad(lambda x: np.sum(app(np.sin, x)))(np.array([1.0, 2.0])),
                       [2.0, 2.0])


def test_defaults_and_keywords_are_bound_before_the_rules_see_the_arguments():
    @adjit.custom_jvp
    def f(x, s=2.0):
        return x * s

    @f.defjvp
    def f_jvp(p, t):
        return f(*p), t[0] * p[1]
    assert np.allclose(adjit.grad(lambda x: np.sum(f(x)))(np.ones(3)), 2.0)
    assert np.allclose(adjit.grad(lambda x: np.sum(f(x, s=3.0)))(np.ones(3)), 3.0)

    @adjit.custom_vjp
    def h(x, s=2.0):
        return x * s
    h.defvjp(lambda x, s: (h(x, s), s), lambda s, g: (g * s, None))
    assert np.allclose(adjit.grad(lambda x: np.sum(h(x)))(np.ones(3)), 2.0)


def test_rule_mistakes_get_clear_messages():
    @functools.partial(adjit.custom_jvp, nondiff_argnums=(1,))
    def f(x, k):
        return np.sin(x) * k
    with pytest.raises(TypeError, match="defjvps cannot be used with nondiff_argnums"):
        f.defjvps(lambda t, ans, x, k: np.cos(x) * k * t)

    @adjit.custom_jvp
    def mj(x):
        return 2 * x

    @mj.defjvp
    def _(p, t):
        return mj(p[0]), (2 * t[0])[:2]
    _raises(r"gave a tangent of shape \(2,\) for a result of shape \(3,\)",
            lambda x: np.sum(mj(x)), np.ones(3))

    @adjit.custom_vjp
    def two(x, y):
        return x * y
    two.defvjp(lambda x, y: (two(x, y), (x, y)), lambda r, g: (g * r[1],))
    _raises(r"\(2 of them, \(g_x, g_y\); None for an argument without one\); it returned "
            r"tuple of length 1", lambda x: np.sum(two(x, Y)), X)


def test_an_error_inside_a_rule_names_the_rules_line():
    @adjit.custom_vjp
    def f(x):
        return x * 2.0

    def bwd(res, g):
        if np.sum(g) > 0:       # branching on a traced value
            return (g,)
        return (-g,)
    f.defvjp(lambda x: (f(x), None), bwd)
    with pytest.raises(adjit.TraceError) as e:
        adjit.grad(lambda x: np.sum(f(x)))(X)
    assert "if np.sum(g) > 0" in str(e.value)


def test_differentiated_the_value_is_the_rules_primal_as_in_jax():
    """The function overflows at 1000; its rules compute the primal stably: value_and_grad,
    jvp, vjp and has_aux give 1000 (JAX's values); a plain compile runs the function."""
    @adjit.custom_vjp
    def v(x):
        return np.log(1.0 + np.exp(x))
    v.defvjp(lambda x: (np.logaddexp(0.0, x), x), lambda x, g: (g / (1 + np.exp(-x)),))

    @adjit.custom_jvp
    def j(x):
        return np.log(1.0 + np.exp(x))

    @j.defjvp
    def _(p, t):
        return np.logaddexp(0.0, p[0]), t[0] / (1 + np.exp(-p[0]))
    x = np.array([1000.0])
    with np.errstate(over="ignore"):
        for f in (v, j):
            value, g = adjit.value_and_grad(lambda x: np.sum(f(x)))(x)
            assert value == 1000.0 and g[0] == 1.0
            assert adjit.vjp(f, x)[0][0] == 1000.0
            assert adjit.grad(lambda x: (np.sum(f(x)), f(x)), has_aux=True)(x)[1][0] == 1000.0
            assert np.isinf(adjit.compile(f)(x)[0])
        assert adjit.jvp(j, (x,), (np.ones(1),))[0][0] == 1000.0


def test_a_scalar_tangent_for_a_vector_result_is_refused():
    """Broadcast, it would be a wrong derivative (3 cos x for cos x here); JAX refuses it."""
    @adjit.custom_jvp
    def f(x):
        return np.sin(x)

    @f.defjvp
    def _(p, t):
        return f(p[0]), np.sum(np.cos(p[0]) * t[0])
    _raises(r"tangent of shape \(\) for a result of shape \(3,\)", lambda x: np.sum(f(x)), X)
