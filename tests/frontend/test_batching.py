"""Batching (frontend/batching.py, OpDef.batch): adjit.vmap and the one-sweep Jacobians.

Every op of the table is mapped over a stack and compared with a loop of NumPy calls; its
gradient is mapped too (per-example gradients batch the VJPs' ops); an op with a batch rule
gives a program whose size does not depend on the stack's length.
"""
import numpy as np
import pytest

import adjit
from adjit.frontend import api
from adjit.ir.errors import OptionError, ShapeError
from adjit.ir.ops import OPS
from optable import TABLE, cases, make_inputs

CASES = list(cases())
IDS = [f"{n}-{k}" for n, k, _, _ in CASES]
FIRST = [c for c in CASES if c[1] == 0]
FIRST_IDS = [f"{n}" for n, _, _, _ in FIRST]
# ops applied once per element of the stack (no batch rule): the custom rules' nodes (removed
# after autodiff)
UNROLLED = {"custom_vjp", "custom_jvp"}
N = 3


def _stack(spec, n=N, seed=0):
    """Inputs for n elements, stacked on a new first axis."""
    per = [make_inputs(spec, seed + i) for i in range(n)]
    return [np.stack([p[j] for p in per]) for j in range(len(spec))]


def _loop(fn, xs, axes):
    n = next(x.shape[0] for x, a in zip(xs, axes) if a == 0)
    return np.stack([np.asarray(fn(*[x[i] if a == 0 else x for x, a in zip(xs, axes)]))
                     for i in range(n)])


def test_every_op_has_a_batch_rule_or_is_named_unrolled():
    without = {n for n, op in OPS.items() if op.batch is None} - {"input", "const", "fused"}
    assert without == UNROLLED, sorted(without ^ UNROLLED)


@pytest.mark.parametrize("name,k,fn,spec", CASES, ids=IDS)
def test_vmap_matches_a_loop(name, k, fn, spec):
    xs = _stack(spec)
    np.testing.assert_allclose(adjit.vmap(fn)(*xs), _loop(fn, xs, [0] * len(xs)),
                               rtol=1e-11, atol=1e-12)
    if len(xs) > 1:     # the first argument mapped, the others shared by all
        mixed = [xs[0]] + [x[1] for x in xs[1:]]
        axes = (0,) + (None,) * (len(xs) - 1)
        np.testing.assert_allclose(adjit.vmap(fn, in_axes=axes)(*mixed),
                                   _loop(fn, mixed, axes), rtol=1e-11, atol=1e-12)
        mixed = [xs[0][1]] + xs[1:]     # the first shared, the others mapped
        axes = (None,) + (0,) * (len(xs) - 1)
        np.testing.assert_allclose(adjit.vmap(fn, in_axes=axes)(*mixed),
                                   _loop(fn, mixed, axes), rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("name,k,fn,spec", FIRST, ids=FIRST_IDS)
def test_per_example_gradients_match_a_loop(name, k, fn, spec):
    xs = _stack(spec)
    w = np.random.default_rng(7).normal(size=np.shape(fn(*make_inputs(spec, 0))))

    def loss(*a):
        return np.sum(fn(*a) * w)
    argnums = tuple(range(len(xs)))
    got = adjit.vmap(adjit.grad(loss, argnums=argnums))(*xs)
    g = adjit.grad(loss, argnums=argnums)
    want = [np.stack([g(*[x[i] for x in xs])[j] for i in range(N)]) for j in range(len(xs))]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name,k,fn,spec", FIRST, ids=FIRST_IDS)
def test_a_batch_rule_keeps_the_program_size(name, k, fn, spec):
    if name in UNROLLED or name == "searchsorted":     # (its row's sorted array is mapped)
        pytest.skip("applied once per element")
    sizes = [len(adjit.vmap(fn).trace(*_stack(spec, n)).nodes()) for n in (2, 5)]
    assert sizes[0] == sizes[1]


def test_vmap_of_grad_is_jax_per_example_gradients():
    rng = np.random.default_rng(0)
    W, X, y = rng.normal(size=(4, 3)), rng.normal(size=(6, 4)), rng.normal(size=6)

    def loss(W, x, y):
        return (np.tanh(x @ W).sum() - y) ** 2
    got = adjit.vmap(adjit.grad(loss), in_axes=(None, 0, 0))(W, X, y)
    assert got.shape == (6, 4, 3)
    for i in range(6):
        np.testing.assert_allclose(got[i], adjit.grad(loss)(W, X[i], y[i]), rtol=1e-13)
    # and the gradient through a vmap: the sum of the per-example ones
    total = adjit.grad(lambda W: np.sum(adjit.vmap(loss, (None, 0, 0))(W, X, y)))(W)
    np.testing.assert_allclose(total, got.sum(0), rtol=1e-12)


def test_vmap_in_and_out_axes():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(3, 4))
    # axis 1 of a, the output's stack axis last
    m = rng.normal(size=(3, 5))
    got = adjit.vmap(lambda u, m: u @ m, in_axes=(1, None), out_axes=-1)(a, m)
    np.testing.assert_allclose(got, np.stack([a[:, j] @ m for j in range(4)], -1), rtol=1e-13)
    # dict arguments with a prefix of their structure, tuple outputs with their own axes
    d = {"w": rng.normal(size=(2, 3)), "s": rng.normal(size=3)}
    out = adjit.vmap(lambda p, x: (p["w"] @ x, np.sum(p["s"] * x)),
                     in_axes=({"w": None, "s": None}, 0), out_axes=(1, 0))(d, m.T)
    np.testing.assert_allclose(out[0], d["w"] @ m, rtol=1e-13)
    np.testing.assert_allclose(out[1], d["s"] @ m, rtol=1e-13)
    # nested: an outer product
    x, y = np.arange(3.0), np.arange(4.0)
    np.testing.assert_array_equal(
        adjit.vmap(adjit.vmap(lambda u, v: u * v, (None, 0)), (0, None))(x, y), np.outer(x, y))
    # an unmapped output (out_axes None) and a Python-number argument
    c, s = adjit.vmap(lambda u, k: (k * 2.0, u * k), in_axes=(0, None), out_axes=(None, 0))(
        x, 3.0)
    assert float(c) == 6.0
    np.testing.assert_array_equal(s, x * 3.0)
    # integer positions mapped with the data: x[i] per row (a gather of stacked positions)
    m, i = np.arange(12.0).reshape(3, 4), np.array([0, 3, 1])
    np.testing.assert_array_equal(adjit.vmap(lambda r, j: r[j])(m, i), m[np.arange(3), i])


def test_vmap_refusals_name_the_problem():
    x = np.ones((3, 2))
    with pytest.raises(ShapeError, match="mapped axes differ in size"):
        adjit.vmap(lambda a, b: a + b)(x, np.ones((4, 2)))
    with pytest.raises(OptionError, match="2 entries for 1 arguments"):
        adjit.vmap(lambda a: a, in_axes=(0, 0))(x)
    with pytest.raises(OptionError, match="no argument is mapped"):
        adjit.vmap(lambda a: a, in_axes=None)(x)
    with pytest.raises(OptionError, match="out_axes is None for output 0"):
        adjit.vmap(lambda a: a * 2.0, out_axes=None)(x)
    with pytest.raises(ShapeError, match="no such axis"):
        adjit.vmap(lambda a: a, in_axes=2)(x)
    with pytest.raises(OptionError, match="does not match the value"):
        adjit.vmap(lambda p: p["a"], in_axes=([0],))({"a": x})
    with pytest.raises(OptionError, match="must be an int, None"):
        adjit.vmap(lambda a: a, in_axes="0")
    with pytest.raises(OptionError, match="takes no has_aux"):
        adjit.vmap(lambda a: a, has_aux=True)
    with pytest.raises(ShapeError, match="has length 0"):
        adjit.vmap(np.sin)(np.zeros((0, 3)))


def test_a_search_in_a_shared_sorted_array_is_one_search():
    knots, vals = np.linspace(0.0, 1.0, 11), np.linspace(0.0, 1.0, 11) ** 2
    f = adjit.vmap(lambda v: np.interp(v, knots, vals))
    sizes = [len(f.trace(np.full((n, 3), 0.5)).nodes()) for n in (2, 9)]
    assert sizes[0] == sizes[1]
    v = np.random.default_rng(5).uniform(size=(6, 3))
    np.testing.assert_allclose(f(v), np.interp(v, knots, vals), rtol=1e-14)


def test_a_shared_constant_matrix_does_not_split_the_jacobian():
    # the chunk size counts the stacked intermediates only, not a shared n x n constant
    n = 300
    K = np.random.default_rng(6).normal(size=(n, n)) / n
    h = adjit.hessian(lambda x: np.sin(x) @ K @ x)
    assert n * n * n > api._STACK_ELEMENTS      # a count of the constant would split it
    sizes = [len(adjit.hessian(lambda x: np.sin(x) @ K[:m, :m] @ x, backend="numpy")
                 .lower(np.ones(m)).graph.nodes()) for m in (200, n)]
    assert sizes[0] == sizes[1]
    x = np.random.default_rng(7).normal(size=n)
    want = K * np.cos(x)[:, None] + K.T * np.cos(x)[None, :] - np.diag(np.sin(x) * (K @ x))
    np.testing.assert_allclose(h(x), want, rtol=1e-10, atol=1e-12)


def test_hessian_is_one_sweep_whatever_the_size():
    def rosen(x):
        return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)
    h = adjit.hessian(rosen)
    sizes = [len(h.lower(np.ones(n)).graph.nodes()) for n in (4, 40)]
    assert sizes[0] == sizes[1]
    x = np.random.default_rng(2).normal(size=6)
    H = h(x)
    # the tridiagonal Hessian of Rosenbrock's function, written out
    d = np.zeros(6)
    d[:-1] += 1200 * x[:-1] ** 2 - 400 * x[1:] + 2
    d[1:] += 200
    np.testing.assert_allclose(np.diag(H), d, rtol=1e-12)
    np.testing.assert_allclose(np.diag(H, 1), -400 * x[:-1], rtol=1e-12)
    np.testing.assert_allclose(H, H.T, rtol=1e-12)


@pytest.mark.parametrize("limit", [1, 7, 1 << 22])
def test_jacobian_in_chunks_is_the_same(monkeypatch, limit):
    # small limits cut the stacked sweep into many chunks (down to one seed each)
    monkeypatch.setattr(api, "_STACK_ELEMENTS", limit)

    def f(x, w):
        return np.concatenate([np.tanh(w @ x), np.cumsum(x) ** 2])
    x, w = np.random.default_rng(3).normal(size=4), np.random.default_rng(4).normal(size=(3, 4))
    jx, jw = adjit.jacobian(f, argnums=(0, 1), backend="numpy")(x, w)
    eps = 1e-6
    for q, (arg, jac) in enumerate([(x, jx), (w, jw)]):
        for i in np.ndindex(arg.shape):
            d = np.zeros_like(arg)
            d[i] = eps
            args_p = [x + d, w] if q == 0 else [x, w + d]
            args_m = [x - d, w] if q == 0 else [x, w - d]
            fd = (f(*args_p) - f(*args_m)) / (2 * eps)
            np.testing.assert_allclose(jac[(...,) + i], fd, rtol=1e-6, atol=1e-8)
