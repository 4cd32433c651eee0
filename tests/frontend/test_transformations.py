"""Transformations as a user coming from JAX writes them: each case checks adjit against
central differences or closed forms (float64); the optional JAX cross-check skips without jax.

A row: (name, transformation(adjit-like module) -> callable, args, expected). The expected value
is computed from NumPy alone so the table runs without JAX; `JAX_TABLE` repeats a subset with
the same code run by jax."""
import collections

import numpy as np
import pytest

import adjit

rng = np.random.default_rng(0)
X3 = rng.normal(size=3)
M = rng.normal(size=(3, 4))
P = collections.namedtuple("P", "w b")


def numgrad(f, x, eps=1e-6):
    x = np.array(x, dtype=np.float64)
    g = np.zeros(x.size)
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = eps
        g[k] = (f((x.reshape(-1) + e).reshape(x.shape))
                - f((x.reshape(-1) - e).reshape(x.shape))) / (2 * eps)
    return g.reshape(x.shape)


def _step_closing_over_batch():
    # the JAX idiom: inside a compiled step, grad of a lambda that closes over a traced batch
    @adjit.compile(backend="numpy")
    def step(w, X):
        return w - 0.1 * adjit.grad(lambda w_: np.sum(np.tanh(X @ w_) ** 2))(w)
    X = rng.normal(size=(5, 3))
    want = X3 - 0.1 * numgrad(lambda w: np.sum(np.tanh(X @ w) ** 2), X3)
    return step(X3, X), want


def _nested_closure():
    def f(x):   # inner grad treats the closed-over x as a constant, the outer one does not
        return np.sum(adjit.grad(lambda y: np.sum(np.sin(x * y) * x))(x * 2))

    def ref(x):
        y = 2 * x
        return np.sum(x * x * np.cos(x * y))
    return adjit.grad(f)(X3), numgrad(ref, X3)


def _three_levels():
    def f(a):
        def g(b):
            return np.sum(adjit.grad(lambda c: np.sum(a * b * c ** 2))(b))
        return np.sum(adjit.grad(g)(a))
    # g(b) = sum(2 a b^2), g'(b) = 4 a b; f(a) = sum(4 a^2), f'(a) = 8 a
    return adjit.grad(f)(X3), 8 * X3


def _jvp_of_closure():
    def f(x):
        return np.sum(adjit.jvp(lambda y: x * y ** 2, (x,), (np.ones(3),))[1])
    return adjit.grad(f)(X3), 4 * X3


def _vjp_of_closure():
    def f(x):
        _, back = adjit.vjp(lambda y: x * y ** 2, x)
        return np.sum(back(np.ones(3))[0])
    return adjit.grad(f)(X3), 4 * X3


def _compiled_inner_with_concrete_args():
    def f(x):
        inner = adjit.compile(lambda y: y * x)
        return np.sum(inner(np.ones(3)))
    return adjit.grad(f)(X3), np.ones(3)


def _vjp_dict_cotangent_in_other_order():
    _, back = adjit.vjp(lambda x: {"a": x * 2, "b": x ** 2}, X3)
    return back({"b": np.full(3, 2.0), "a": np.ones(3)})[0], 2 + 4 * X3


def _vjp_has_aux():
    out, back, aux = adjit.vjp(lambda x: (x * 2, np.sum(x)), X3, has_aux=True)
    return (back(np.ones(3))[0], aux), (np.full(3, 2.0), np.sum(X3))


def _hvp_dict_in_other_order():
    d = {"a": X3, "b": X3 + 1}
    v = {"b": np.ones(3), "a": np.full(3, 3.0)}
    h = adjit.hvp(lambda d: np.sum(d["a"] ** 2 * d["b"]))(d, v)
    # H = [[2b, 2a], [2a, 0]] per element
    return h, {"a": 2 * d["b"] * 3 + 2 * d["a"] * 1, "b": 2 * d["a"] * 3}


def _kwargs():
    f = lambda x, y: np.sum(x * y)  # noqa: E731
    return adjit.grad(f)(X3, y=X3 + 1), X3 + 1


def _kwarg_static():
    f = adjit.compile(lambda x, n: x ** n, static_argnums=1, backend="numpy")
    return f(X3, n=3), X3 ** 3


def _gradcheck_static_and_aux():
    e1 = adjit.gradcheck(lambda x, n: np.sum(x ** n), X3, 3, static_argnums=1)
    e2 = adjit.gradcheck(lambda x: (np.sum(np.sin(x)), x), X3, has_aux=True)
    return max(e1, e2) < 1e-6, True


CASES = {
    "argnums tuple": (lambda: adjit.grad(lambda a, b: np.sum(a * b ** 2), argnums=(0, 1))(
        X3, X3 + 1), ((X3 + 1) ** 2, 2 * X3 * (X3 + 1))),
    "argnums negative": (lambda: adjit.grad(lambda a, b: np.sum(a * b ** 2), argnums=-1)(
        X3, X3 + 1), 2 * X3 * (X3 + 1)),
    "namedtuple argument": (lambda: adjit.grad(lambda p: np.sum(p.w ** 2 + p.b))(P(X3, X3)),
                            P(2 * X3, np.ones(3))),
    "dict with a Python float": (lambda: adjit.grad(lambda d: np.sum(d["a"] ** 2) + d["b"])(
        {"a": X3, "b": 2.0}), {"a": 2 * X3, "b": 1.0}),
    "jit-style step closing over a traced batch": (_step_closing_over_batch, None),
    "grad of a closure over an outer tracer": (_nested_closure, None),
    "three nested closures": (_three_levels, None),
    "jvp of a closure inside grad": (_jvp_of_closure, None),
    "vjp of a closure inside grad": (_vjp_of_closure, None),
    "compiled closure called with concrete args inside grad": (
        _compiled_inner_with_concrete_args, None),
    "vjp dict cotangent, keys in another order": (_vjp_dict_cotangent_in_other_order, None),
    "vjp has_aux": (_vjp_has_aux, None),
    "hvp dict v, keys in another order": (_hvp_dict_in_other_order, None),
    "hvp argnums tuple": (lambda: adjit.hvp(lambda a, b: np.sum(a ** 2 * b), argnums=(0, 1))(
        X3, X3 + 1, (np.ones(3), np.full(3, 2.0))),
        (2 * (X3 + 1) + 2 * X3 * 2, 2 * X3)),
    "jacobian argnums tuple": (lambda: adjit.jacobian(lambda a, b: a * b ** 2, argnums=(0, 1))(
        X3, X3 + 1), (np.diag((X3 + 1) ** 2), np.diag(2 * X3 * (X3 + 1)))),
    "jacobian dict input": (lambda: adjit.jacobian(lambda d: d["a"] * d["b"])(
        {"a": X3, "b": X3 + 1}), {"a": np.diag(X3 + 1), "b": np.diag(X3)}),
    "jacobian tuple output": (lambda: adjit.jacobian(lambda x: (x * 2, np.sum(x)))(X3),
                              (2 * np.eye(3), np.ones(3))),
    "jacobian forward mode, dict in and out": (lambda: adjit.jacobian(
        lambda d: {"o": d["a"][:1] * d["b"][:1]})({"a": X3, "b": X3 + 1}),
        {"o": {"a": np.eye(3)[:1] * (X3[0] + 1), "b": np.eye(3)[:1] * X3[0]}}),
    "jacobian has_aux": (lambda: adjit.jacobian(lambda x: (x ** 2, np.sum(x)), has_aux=True)(
        X3), (np.diag(2 * X3), np.sum(X3))),
    "hessian dict": (lambda: adjit.hessian(lambda d: np.sum(d["a"] ** 2 * d["b"]))(
        {"a": X3, "b": X3 + 1}),
        {"a": {"a": np.diag(2 * (X3 + 1)), "b": np.diag(2 * X3)},
         "b": {"a": np.diag(2 * X3), "b": np.zeros((3, 3))}}),
    "hessian argnums tuple": (lambda: adjit.hessian(lambda a, b: np.sum(a ** 2 * b),
                                                    argnums=(0, 1))(X3, X3 + 1),
                              ((np.diag(2 * (X3 + 1)), np.diag(2 * X3)),
                               (np.diag(2 * X3), np.zeros((3, 3))))),
    "hessian static_argnums": (lambda: adjit.hessian(
        lambda x, mode: np.sum(x ** 3) if mode == "cube" else np.sum(x),
        static_argnums=1)(X3, "cube"), np.diag(6 * X3)),
    "hessian matrix input": (lambda: adjit.hessian(lambda W: np.sum(W ** 3))(M).shape,
                             (3, 4, 3, 4)),
    "pow: d/dexponent at base 0 (JAX: 0)": (lambda: adjit.grad(
        lambda b, e: np.sum(b ** e), argnums=1)(np.array([0.0, 3.0]), np.array([2.0, 2.0])),
        np.array([0.0, 9 * np.log(3.0)])),
    "pow: d/dbase at exponent 0 (JAX: 0)": (lambda: adjit.grad(
        lambda b, e: np.sum(b ** e))(np.array([0.0, 3.0]), np.array([0.0, 0.0])),
        np.zeros(2)),
    "pow: jvp at base 0": (lambda: adjit.jvp(lambda b, e: b ** e, (np.zeros(2), np.full(2, 2.0)),
                                             (np.ones(2), np.ones(2)))[1], np.zeros(2)),
    "int ** 2.0 is float": (lambda: adjit.compile(lambda x: x ** 2.0)(np.arange(3)),
                            np.arange(3) ** 2.0),
    "keyword argument": (_kwargs, None),
    "keyword argument naming a static parameter": (_kwarg_static, None),
    "gradcheck with static_argnums and has_aux": (_gradcheck_static_and_aux, None),
}


def _check(got, want):
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), (got, want)
        for k in want:
            _check(got[k], want[k])
    elif isinstance(want, tuple) and not isinstance(want, (np.ndarray,)) and (
            not want or not isinstance(want[0], int)):
        assert isinstance(got, tuple) and type(got) is type(want), (type(got), type(want))
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _check(a, b)
    elif isinstance(want, (bool, tuple)):
        assert got == want, (got, want)
    else:
        got = np.asarray(got)
        assert got.shape == np.shape(want), (got.shape, np.shape(want))
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", list(CASES))
def test_transformation(name):
    run, want = CASES[name]
    got = run()
    if want is None:
        got, want = got
    _check(got, want)


# -- errors: each names the user's line and says what to do -----------------------------------
def _leaked():
    box = []
    adjit.grad(lambda x: box.append(x) or np.sum(x))(X3)
    return adjit.grad(lambda y: np.sum(box[0] * y))(X3)


ERRORS = {
    "non-scalar output": (lambda: adjit.grad(lambda x: x * 2)(X3), adjit.GradError,
                          ["shape (3,)", "test_transformations.py", ".sum()"]),
    "tuple output without has_aux": (lambda: adjit.grad(lambda x: (np.sum(x), x))(X3),
                                     adjit.GradError, ["has_aux=True"]),
    "Python int argument": (lambda: adjit.grad(lambda x: x ** 2.0)(3), adjit.GradError,
                            ["int64", "3.0", "test_transformations.py"]),
    "integer output": (lambda: adjit.grad(lambda x: np.sum(x > 0))(X3), adjit.GradError,
                       ["floating-point output", "test_transformations.py"]),
    "complex loss": (lambda: adjit.grad(lambda x: np.sum(x * x))(np.array([1 + 1j])),
                     adjit.GradError, ["real scalar loss", "np.abs(z) ** 2"]),
    "escaped tracer": (_leaked, adjit.TraceError,
                       ["finished", "test_transformations.py", "argument"]),
    "keyword-only array": (lambda: adjit.compile(lambda x, *, s: x * s)(X3, s=X3),
                           TypeError, ["s holding arrays", "functools.partial"]),
    "cotangent with the wrong structure": (
        lambda: adjit.vjp(lambda x: {"a": x}, X3)[1]({"b": X3}), adjit.ShapeError, ["'a'"]),
    "tangent with the wrong shape": (
        lambda: adjit.jvp(lambda x: x, (X3,), (np.ones(4),)), adjit.ShapeError, ["(4,)"]),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_clear_error(name):
    run, exc, words = ERRORS[name]
    with pytest.raises(exc) as info:
        run()
    for w in words:
        assert w in str(info.value), (w, str(info.value))


# -- dtypes ----------------------------------------------------------------------------------
def test_tangents_and_cotangents_take_the_primal_dtype():
    x = X3.astype(np.float32)
    _, back = adjit.vjp(lambda x: x * 2, x)
    assert back(np.ones(3))[0].dtype == np.float32
    _, t = adjit.jvp(lambda x: x * 2, (x,), (np.ones(3),))
    assert t.dtype == np.float32
    assert adjit.hvp(lambda x: np.sum(x ** 3))(x, np.ones(3)).dtype == np.float32
    assert adjit.jacobian(lambda x: x * x)(x).dtype == np.float32


# -- intentional differences from JAX, pinned so a change is deliberate -----------------------
def test_abs_at_zero_has_derivative_zero():
    # sign(0) = 0, the minimum-norm subgradient (PyTorch's choice); JAX gives 1
    g = adjit.grad(lambda x: np.sum(np.abs(x)))(np.array([-1.0, 0.0, 1.0]))
    np.testing.assert_array_equal(g, [-1.0, 0.0, 1.0])


def test_vjp_gives_none_for_integer_primals():
    _, back = adjit.vjp(lambda x, i: x * i, X3, np.arange(3))
    assert back(np.ones(3))[1] is None   # JAX gives a float0 zero array


# -- the same code under JAX (optional) -------------------------------------------------------
JAX_TABLE = [
    ("grad", lambda t, np_: t.grad(lambda x: np_.sum(np_.sin(x) * x ** 2)), (X3,)),
    ("grad argnums", lambda t, np_: t.grad(lambda a, b: np_.sum(a * b ** 3), argnums=(0, 1)),
     (X3, X3 + 1)),
    ("hessian matrix", lambda t, np_: t.hessian(lambda W: np_.sum(np_.tanh(W) ** 2 * M)), (M,)),
    ("hessian dict", lambda t, np_: t.hessian(lambda d: np_.sum(d["a"] ** 2 * d["b"])),
     ({"a": X3, "b": X3 + 1},)),
    ("jacobian tuple out", lambda t, np_: getattr(t, "jacrev", t.jacobian)(
        lambda x: (x * 2, np_.sum(x ** 2))), (X3,)),
    ("maximum ties", lambda t, np_: t.grad(lambda x, y: np_.sum(np_.maximum(x, y)),
                                           argnums=(0, 1)),
     (np.array([1.0, 2.0]), np.array([1.0, 1.0]))),
    ("relu at 0", lambda t, np_: t.grad(lambda x: np_.sum(np_.maximum(x, 0.0))),
     (np.array([-1.0, 0.0, 1.0]),)),
    ("pow at 0", lambda t, np_: t.grad(lambda b, e: np_.sum(b ** e), argnums=(0, 1)),
     (np.array([0.0, 3.0, 0.0]), np.array([2.0, 2.0, 0.5]))),   # at 0**0 some JAX versions give nan
    ("closure", lambda t, np_: t.grad(
        lambda x: np_.sum(t.grad(lambda y: np_.sum(np_.sin(x * y) * x))(x * 2))), (X3,)),
]


@pytest.mark.parametrize("name,make,args", JAX_TABLE, ids=[r[0] for r in JAX_TABLE])
def test_matches_jax(name, make, args):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    want = make(jax, jnp)(*args)
    got = make(adjit, np)(*args)
    flat_w, tree_w = jax.tree_util.tree_flatten(want)
    flat_g, tree_g = jax.tree_util.tree_flatten(got)
    assert tree_w == tree_g
    for a, b in zip(flat_g, flat_w):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)


