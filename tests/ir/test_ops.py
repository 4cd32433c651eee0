"""Every op: shape rule vs NumPy, VJP vs central differences, JVP vs VJP, HVP vs gradients."""
import numpy as np
import pytest

import adjit
from adjit.ir.ops import OPS
from optable import TABLE, cases, make_inputs

CASES = list(cases())
IDS = [f"{n}-{k}" for n, k, _, _ in CASES]
# stop_gradient's derivative ignores the stopped factor on purpose: differences cannot see it
FD_CASES = [c for c in CASES if TABLE[c[0]].get("fd", True)]
FD_IDS = [f"{n}-{k}" for n, k, _, _ in FD_CASES]
# only reached through other ops or with integer inputs, so the row's graph may not show it
# (custom rules: only in a trace that is differentiated; a plain trace runs the function)
INDIRECT = {"scatter_add", "one_hot", "sum", "custom_vjp", "custom_jvp"}
EPS = 1e-6


def test_every_op_has_a_table_row():
    # fused nodes are made by passes/fusion.py, never traced: tests/passes/test_fusion.py
    missing = set(OPS) - set(TABLE) - {"input", "const", "fused"}
    assert not missing, f"ops without a row in tests/optable.py: {sorted(missing)}"


@pytest.mark.parametrize("name,k,fn,spec", CASES, ids=IDS)
def test_shape_rule_matches_numpy(name, k, fn, spec):
    xs = make_inputs(spec, k)
    ref = np.asarray(fn(*xs))
    g = adjit.trace(fn, *xs)
    assert g[g.outputs[0]]["shape"] == ref.shape
    assert g[g.outputs[0]]["dtype"] == ref.dtype
    assert any(g[n]["op"] == name for n in g.nodes()) or name in INDIRECT
    got = adjit.compile(fn, backend="numpy")(*xs)
    np.testing.assert_allclose(got, ref, rtol=1e-14, atol=1e-14)


def _directional(fn, xs, rng):
    """<J^T c, t> from adjit against <c, (f(x + eps t) - f(x - eps t)) / 2 eps>."""
    out = np.asarray(fn(*xs))
    c = rng.normal(size=out.shape)
    ts = [rng.normal(size=x.shape) for x in xs]
    _, f_vjp = adjit.vjp(fn, *xs, backend="numpy")
    cts = f_vjp(c)
    lhs = sum(float(np.sum(ct * t)) for ct, t in zip(cts, ts))
    plus = np.asarray(fn(*[x + EPS * t for x, t in zip(xs, ts)]))
    minus = np.asarray(fn(*[x - EPS * t for x, t in zip(xs, ts)]))
    rhs = float(np.sum(c * (plus - minus) / (2 * EPS)))
    return lhs, rhs, c, ts


@pytest.mark.parametrize("name,k,fn,spec", FD_CASES, ids=FD_IDS)
def test_vjp_matches_central_differences(name, k, fn, spec):
    rng = np.random.default_rng(100 + k)
    xs = make_inputs(spec, k)
    lhs, rhs, _, _ = _directional(fn, xs, rng)
    assert abs(lhs - rhs) / max(abs(lhs), abs(rhs), 1e-8) <= 1e-7


@pytest.mark.parametrize("name,k,fn,spec", FD_CASES, ids=FD_IDS)
def test_gradcheck(name, k, fn, spec):
    """Every element of every gradient, relative error <= 1e-7 (the seeds' formula).

    eps = 1e-5 balances the truncation error (~eps^2) against rounding in the summed test
    function (~1e-16 |f| / eps) for values of order one.
    """
    xs = make_inputs(spec, k)
    c = np.random.default_rng(7).normal(size=np.shape(fn(*xs)))

    def scalar(*a):
        return np.sum(fn(*a) * c)
    err = adjit.gradcheck(scalar, *xs, argnums=tuple(range(len(xs))), eps=1e-5)
    assert err <= _GRADCHECK_TOL.get(name, 1e-7)


def _no_scipy():
    try:
        import scipy.special  # noqa: F401
        return False
    except ImportError:
        return True


# without SciPy, gammaln's values come from math.lgamma, whose last bits are not smooth
# enough for central differences at 1e-7 (its derivative, digamma, is adjit's own series and
# is checked against known values in tests/frontend/test_sweep9.py)
_GRADCHECK_TOL = {"gammaln": 1e-6} if _no_scipy() else {}
# central differences of log2(2^x + 2^y) carry 1.2e-7 on one case; the rule itself matches
# 2^x / (2^x + 2^y) in long double to 1e-16
_GRADCHECK_TOL["logaddexp2"] = 3e-7
# the 70-row case sums 140 solved entries: the smallest entries of the matrix's gradient read
# 8e-6 of central differences' noise; the rule matches JAX's to 2e-15 there
_GRADCHECK_TOL["solve_triangular"] = 2e-5


@pytest.mark.parametrize("name,k,fn,spec", CASES, ids=IDS)
def test_jvp_agrees_with_vjp(name, k, fn, spec):
    rng = np.random.default_rng(200 + k)
    xs = make_inputs(spec, k)
    out, f_vjp = adjit.vjp(fn, *xs, backend="numpy")
    v = rng.normal(size=np.shape(out))
    us = [rng.normal(size=x.shape) for x in xs]
    if not TABLE[name].get("jvp", True):
        # reverse mode only (a custom_vjp's rule, as in JAX): forward mode is refused
        with pytest.raises(adjit.GradError, match="forward-mode"):
            adjit.jvp(fn, tuple(xs), tuple(us), backend="numpy")
        return
    _, ju = adjit.jvp(fn, tuple(xs), tuple(us), backend="numpy")
    lhs = float(np.sum(v * ju))
    rhs = sum(float(np.sum(a * u)) for a, u in zip(f_vjp(v), us))
    assert abs(lhs - rhs) <= 1e-12 * max(1.0, abs(lhs))


@pytest.mark.parametrize("name,k,fn,spec", FD_CASES, ids=FD_IDS)
def test_hvp_matches_gradient_differences(name, k, fn, spec):
    rng = np.random.default_rng(300 + k)
    xs = make_inputs(spec, k)
    c = rng.normal(size=np.shape(fn(*xs)))

    def scalar(x, *rest):
        return np.sum(fn(x, *rest) * c)
    v = rng.normal(size=xs[0].shape)
    hv = adjit.hvp(scalar, backend="numpy")(*xs, v)
    gr = adjit.grad(scalar, backend="numpy")
    num = (gr(xs[0] + EPS * v, *xs[1:]) - gr(xs[0] - EPS * v, *xs[1:])) / (2 * EPS)
    np.testing.assert_allclose(hv, num, rtol=1e-5, atol=1e-6)


def test_stop_gradient_blocks_the_cotangent():
    x = np.array([1.0, -2.0, 3.0])
    g = adjit.grad(lambda x: np.sum(adjit.stop_gradient(x) * x), backend="numpy")(x)
    np.testing.assert_array_equal(g, x)


def test_one_hot_of_traced_labels():
    def f(w, y):
        return np.sum(adjit.one_hot(y, 4, dtype=np.float64) * w)
    w = np.arange(12.0).reshape(3, 4)
    y = np.array([1, 3, 0])
    g = adjit.trace(f, w, y)
    assert any(g[n]["op"] == "one_hot" for n in g.nodes())
    assert adjit.compile(f, backend="numpy")(w, y) == 1 + 7 + 8
    np.testing.assert_array_equal(adjit.grad(f, backend="numpy")(w, y), np.eye(4)[y])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_where_fast_path_is_exactly_np_where(dtype):
    from adjit.ir.ops import OPS
    x = np.array([1.5, -2.0, np.nan, np.inf, -np.inf, -0.0, 0.0, 3.0], dtype)
    c = np.array([True, False, True, False, True, True, False, True])
    for args in [(c, x, dtype(0)), (c, dtype(0), x), (c, x, dtype(-0.0)), (c, x, x[::-1].copy())]:
        got, ref = OPS["where"].numpy(*args), np.where(*args)
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got.view(np.uint8), ref.view(np.uint8))


@pytest.mark.parametrize("name,k,fn,spec", CASES, ids=IDS)
def test_float32_stays_float32_in_values_and_cotangents(name, k, fn, spec):
    xs = make_inputs(spec, k, np.float32)
    out, f_vjp = adjit.vjp(fn, *xs, backend="numpy")
    assert out.dtype == np.asarray(fn(*xs)).dtype  # as NumPy promotes (a row may cast)
    for ct in f_vjp(np.ones(out.shape, out.dtype)):
        assert ct.dtype == np.float32, name
