"""The numba backend agrees with the NumPy backend on every op-table row, unfused and fused.

Every group is made a kernel here (min_kernel_size=0), so each op's scalar spelling runs in
numba, alone (unfused: one kernel per node) and inside fused groups, in float64 and float32.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import adjit
from optable import cases, make_inputs

pytest.importorskip("numba")

CASES = list(cases())
IDS = [f"{n}-{k}" for n, k, _, _ in CASES]
RTOL = {np.float64: 1e-12, np.float32: 1e-5}


def close(got, ref, dtype):
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.dtype, ref.dtype)
    scale = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
    np.testing.assert_allclose(got, ref, rtol=RTOL[dtype], atol=RTOL[dtype] * scale)


def run_both(fn, xs, dtype, fuse):
    c = np.random.default_rng(5).normal(size=np.shape(fn(*xs))).astype(dtype)

    def scalar(*a):
        return np.sum(fn(*a) * c)
    nums = tuple(range(len(xs)))
    ref = adjit.value_and_grad(scalar, argnums=nums, backend="numpy", fuse=False)(*xs)
    got = adjit.value_and_grad(scalar, argnums=nums, backend="numba", fuse=fuse,
                               min_kernel_size=0)(*xs)
    close(got[0], ref[0], dtype)
    for r, o in zip(ref[1], got[1]):
        close(o, r, dtype)
    out = adjit.compile(fn, backend="numba", fuse=fuse, min_kernel_size=0)(*xs)
    close(out, adjit.compile(fn, backend="numpy", fuse=False)(*xs), dtype)


@pytest.mark.parametrize("name,k,fn,spec", CASES, ids=IDS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fused_agrees_with_numpy(name, k, fn, spec, dtype):
    run_both(fn, make_inputs(spec, k, dtype), dtype, fuse=True)


@pytest.mark.parametrize("name,k,fn,spec", CASES, ids=IDS)
def test_unfused_agrees_with_numpy(name, k, fn, spec):
    run_both(fn, make_inputs(spec, k, np.float64), np.float64, fuse=False)


def test_kernels_are_shown_with_the_user_lines_they_come_from():
    def gelu(x):
        u = 0.7978845608 * (x + 0.044715 * x ** 3)
        return 0.5 * x * (1.0 + np.tanh(u))
    x = np.linspace(-3, 3, 10000).astype(np.float32)
    prog = adjit.compile(gelu, backend="numba").lower(x)
    (name, src), = prog.kernels.items()
    assert name.startswith("fused_") and "tanh" in name
    assert "u = 0.7978845608 * (x + 0.044715 * x ** 3)" in src
    assert f"_rt_kernels.{name}(" in prog.source
    # the program shows which user lines each kernel call fuses
    assert "fuses:" in prog.source and "u = 0.7978845608" in prog.source
    ref = 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(prog(x), ref, rtol=1e-5, atol=1e-6)


def test_parallel_kernels_broadcast_and_reduce_like_numpy():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(300, 700)).astype(np.float32)
    b = rng.normal(size=700).astype(np.float32)

    def fn(z, b):
        h = np.tanh(z + b)
        return h, np.sum(np.exp(h), axis=0), np.max(h * 2.0, axis=1), np.sum(h * z)
    got = adjit.compile(fn, backend="numba", parallel_size=1)(z, b)
    ref = adjit.compile(fn, backend="numpy")(z, b)
    for o, r in zip(got, ref):
        close(o, r, np.float32)


def test_special_values_follow_numpy():
    x = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-300, 50.0])

    def fn(x):
        return (x / x, np.log(x), np.sqrt(x), np.maximum(x, 0.5), np.minimum(x, 0.5),
                np.sign(x), np.tanh(x), np.tanh(x.astype(np.float32)), np.exp(x * 1e3))
    with np.errstate(all="ignore"):
        ref = adjit.compile(fn, backend="numpy")(x)
        got = adjit.compile(fn, backend="numba", min_kernel_size=0)(x)
    for o, r in zip(got, ref):
        np.testing.assert_allclose(o, r, rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_select_helpers_give_numpys_values_on_special_values(dtype):
    # sign, maximum, minimum, logaddexp and sigmoid are selects for floats (a branch on random
    # signs mispredicts in a loop carrying a sum); their NaN, infinity and -0.0 cases stay
    # NumPy's, integers keep the branching form
    import numba

    from adjit.backends.numba_helpers import (_rt_logaddexp, _rt_maximum, _rt_minimum,
                                              _rt_sigmoid, _rt_sign)
    v = [0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 800.0, -800.0]
    if dtype is np.int64:
        v = [0, 3, -4, 7]
    xs = np.array([a for a in v for _ in v], dtype)
    ys = np.array([b for _ in v for b in v], dtype)

    @numba.njit
    def run(xs, ys):
        out = np.empty((5, xs.size))
        for i in range(xs.size):
            x, y = xs[i], ys[i]
            out[0, i] = _rt_sign(x)
            out[1, i] = _rt_maximum(x, y)
            out[2, i] = _rt_minimum(x, y)
            out[3, i] = _rt_logaddexp(x, y)
            out[4, i] = _rt_sigmoid(x)
        return out
    got = run(xs, ys)
    with np.errstate(all="ignore"):
        f = xs
        ref = [np.sign(xs), np.maximum(xs, ys), np.minimum(xs, ys), np.logaddexp(xs, ys),
               np.where(f >= 0, 1 / (1 + np.exp(-np.abs(f))),
                        np.exp(-np.abs(f)) / (1 + np.exp(-np.abs(f))))]
    tol = 1e-6 if dtype is np.float32 else 1e-14
    for k, r in enumerate(ref):
        np.testing.assert_allclose(got[k], np.asarray(r, np.float64), rtol=tol, atol=0,
                                   equal_nan=True, err_msg=str(k))
    if dtype is np.float64:         # signed zeros as np.sign, np.maximum, np.minimum give them
        np.testing.assert_array_equal(np.signbit(got[:3]), np.signbit(
            np.array(ref[:3], np.float64)))


def test_a_new_process_loads_kernels_from_the_cache(tmp_path):
    code = textwrap.dedent("""
        import numpy as np, adjit
        f = adjit.compile(lambda x: np.tanh(x) * x + 1.0, backend="numba", min_kernel_size=0)
        x = np.ones(10)
        f(x)
        ks = vars(f.lower(x).fn.__globals__["_rt_kernels"]).values()
        print(sum(sum(k.stats.cache_hits.values()) for k in ks),
              sum(sum(k.stats.cache_misses.values()) for k in ks))
    """)
    env = dict(os.environ, ADJIT_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", code], env=env, check=True,
                           capture_output=True, text=True).stdout.split() for _ in range(2)]
    assert list(tmp_path.glob("adjit_kernel_*.py"))
    assert runs[0] == ["0", "1"] and runs[1] == ["1", "0"], runs


def test_every_helper_a_scalar_spelling_names_exists_for_numba():
    import re

    from adjit.backends import numba_helpers
    from adjit.ir.ops import OPS, SCALAR_HELPERS
    named = {h for op in OPS.values() for h in re.findall(r"\b(_rt_\w+)\(", op.scalar or "")}
    assert named <= set(SCALAR_HELPERS)
    missing = [h for h in named if not hasattr(numba_helpers, h)]
    assert not missing, f"define {missing} in backends/numba_helpers.py"


def test_donated_arguments_take_the_results_when_the_arrays_allow_it():
    def adam_like(p, g, m):
        m = 0.9 * m + 0.1 * g
        return p - 0.01 * m / (np.sqrt(np.abs(m)) + 1e-8), m
    rng = np.random.default_rng(0)
    p, g, m = (rng.normal(size=(64, 100)) for _ in range(3))
    ref = adam_like(p, g, m)
    f = adjit.compile(adam_like, backend="numba", min_kernel_size=0, donate_argnums=(0, 2))
    pc, mc = p.copy(), m.copy()
    out = f(pc, g, mc)
    assert out[0] is pc and out[1] is mc
    for o, r in zip(out, ref):
        np.testing.assert_allclose(o, r, rtol=1e-14)
    # the same array twice, or a strided view, cannot be overwritten safely: fresh results
    same = m.copy()
    out = f(same, g, same)
    assert out[0] is not same and out[1] is not same
    np.testing.assert_allclose(out[1], 0.9 * m + 0.1 * g, rtol=1e-14)
    view = np.asfortranarray(p)
    out = f(view, g, m.copy())
    assert out[0] is not view
    np.testing.assert_allclose(out[0], ref[0], rtol=1e-14)
    # NumPy ignores donation
    np.testing.assert_allclose(adjit.compile(adam_like, backend="numpy", donate_argnums=0)(
        p, g, m)[0], ref[0], rtol=1e-14)


def _sweep(name):
    rng = np.random.default_rng(0)
    specials = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 5e-324, -5e-324]
    wide = {"exp": np.linspace(-750, 720, 20001), "expm1": np.linspace(-50, 720, 20001),
            "tanh": np.linspace(-30, 30, 20001)}.get(name, np.logspace(-323, 308, 20001))
    tiny = np.logspace(-320, 0, 2001)
    return np.concatenate([wide, tiny, -tiny, rng.normal(size=5000) * 3,
                           1 + rng.normal(size=2000) * 1e-3, specials,
                           [709.78, -745.1, 0.625, -0.625, 2.0 ** 53 + 2, -1 + 1e-16]])


@pytest.mark.parametrize("name", ["exp", "expm1", "log", "log1p", "tanh"])
def test_vectorisable_math_helpers_are_within_two_ulp_of_numpy(name):
    # numba_helpers' _rt_exp & co. replace the C library's (which numba cannot vectorise)
    import numba

    from adjit.backends import numba_helpers as H
    helper = getattr(H, f"_rt_{name}")

    @numba.njit
    def run(x, out):
        for i in range(x.size):
            out[i] = helper(x[i])
    x = _sweep(name)
    with np.errstate(all="ignore"):
        ref = getattr(np, name)(x)
    got = np.empty_like(x)
    run(x, got)
    normal = np.isfinite(ref) & (np.abs(ref) >= np.finfo(np.float64).tiny)
    ulps = np.abs(got[normal] - ref[normal]) / np.spacing(np.abs(ref[normal]))
    assert ulps.max() <= 2, (name, x[normal][np.argmax(ulps)], ulps.max())
    # infinities, NaN, zeros (with their sign) as NumPy's; subnormal results within one step
    rest = ~normal
    np.testing.assert_array_equal(np.signbit(got[rest]) & (got[rest] == 0),
                                  np.signbit(ref[rest]) & (ref[rest] == 0))
    np.testing.assert_allclose(got[rest], ref[rest], rtol=0, atol=1e-323)
    x32 = np.concatenate([x[np.abs(x) < 1e30], np.linspace(-110, 90, 200001),
                          np.logspace(-45, 38, 20001), -np.logspace(-45, 0, 20001),
                          1 + np.random.default_rng(1).normal(size=20000) * 1e-3]
                         ).astype(np.float32)
    with np.errstate(all="ignore"):
        exact = getattr(np, name)(x32.astype(np.float64))
        ref32 = exact.astype(np.float32)
    got32 = np.empty_like(x32)
    run(x32, got32)
    ok = np.isfinite(ref32) & (np.abs(ref32) >= np.finfo(np.float32).tiny)
    # float32's own forms (Cephes' expf and logf) are within 1.5 ulp of the exact value
    # (NumPy's own float32 loops: 2.3 to 2.9 here); tanh is Eigen's rational form (XLA's)
    tol = 8 if name == "tanh" else 1.5
    err = np.abs(got32[ok] - exact[ok]) / np.spacing(np.abs(ref32[ok]))
    assert err.max() <= tol, (name, x32[ok][np.argmax(err)], err.max())
    np.testing.assert_array_equal(np.isnan(got32), np.isnan(ref32))
    rest = ~ok & ~np.isnan(ref32)         # infinities, signed zeros; subnormals within a step
    np.testing.assert_array_equal(np.signbit(got32[rest]), np.signbit(ref32[rest]))
    np.testing.assert_allclose(got32[rest], ref32[rest], rtol=0, atol=1.5e-45)


def test_log1p_keeps_what_rounding_one_plus_x_lost_within_an_ulp():
    # the correction c = (1 - (u - x)) / u needs u - x exact, true from u = 1 + x >= 2 on
    # (Sterbenz); it was taken from u >= sqrt(2) on, 2 ulp off at x = 0.42 (now 0.84)
    import numba

    from adjit.backends import numba_helpers as H

    @numba.njit
    def run(x, out):
        for i in range(x.size):
            out[i] = H._rt_log1p(x[i])
    x = np.random.default_rng(1).uniform(-0.5, 3, 200000)
    got = np.empty_like(x)
    run(x, got)
    exact = np.log1p(x.astype(np.longdouble))
    if np.finfo(np.longdouble).nmant < 60:
        pytest.skip("long double is float64 here")
    assert (np.abs(got - exact) / np.spacing(np.abs(got))).max() <= 1


@pytest.mark.parametrize("loss", [
    lambda w, x: np.mean(x * w + np.log1p(np.exp(-2 * x * w))),
    lambda w, x: np.sum(np.tanh(w * x)),
    lambda w, x: np.sum(np.logaddexp(0, w * x)),
    lambda w, x: np.sum(np.exp(w[:, None] * x[None, :8]), axis=1).sum(),
    lambda w, x: np.sum((w - x) ** 2) + np.sum(np.sign(w) * x),
], ids=["logcosh", "sum-tanh", "softplus", "row-sums", "squares"])
def test_a_sum_joins_its_group_with_a_reassociable_add(loss):
    # sweep 28: a sum added in order made the group's loop scalar (a value_and_grad of a mean
    # loss ran 9x slower than the NumPy backend), so such sums stayed apart; now only the
    # running sum's add may be reassociated (_rt_radd): the loop vectorises with the sum in
    # it, every other operation as written, and the sum is as close to exact as NumPy's
    rng = np.random.default_rng(0)
    w, x = rng.normal(size=(2, 20000))
    f = adjit.value_and_grad(loss, backend="numba")
    prog = f.lower(w, x)
    summing = [src for src in prog.kernels.values() if "acc" in src]
    assert summing and all("_rt_radd(acc" in src for src in summing)
    assert not any("acc0 = np.float64((acc0" in src for src in summing)
    ref = adjit.value_and_grad(loss, backend="numpy")(w, x)
    got = f(w, x)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-10, atol=1e-14)


def test_a_max_along_the_innermost_axis_does_not_join_a_vectorised_group():
    # a running max is a select LLVM keeps in order: the exp's loop would stay scalar
    x = np.random.default_rng(1).normal(size=(64, 512))
    f = adjit.compile(lambda x: np.max(np.exp(x) * 2.0, axis=1), backend="numba",
                      min_kernel_size=0)
    kernels = list(f.lower(x).kernels.values())
    assert any("_rt_exp" in src for src in kernels)
    assert not any("_rt_exp" in src and "acc" in src for src in kernels), kernels
    np.testing.assert_allclose(f(x), np.max(np.exp(x) * 2.0, axis=1), rtol=1e-15)


@pytest.mark.parametrize("e", [3, 4, 7, -3, -8])
def test_whole_powers_are_products_in_kernels(e):
    # sweep 28: x ** 3 called the C library's pow() per element (GELU's cube: 14x JAX)
    x = np.random.default_rng(0).normal(size=5000) + 0.1
    f = adjit.compile(lambda x: x ** e * 2.0, backend="numba", min_kernel_size=0)
    code = [line for src in f.lower(x).kernels.values() for line in src.splitlines()
            if not line.lstrip().startswith("#")]
    assert code and not any("**" in line for line in code), code
    np.testing.assert_allclose(f(x), x ** e * 2.0, rtol=1e-14, atol=1e-300)
    w = np.cos(np.arange(x.size))
    g = adjit.grad(lambda x: np.sum(x ** e * w), backend="numba", min_kernel_size=0)(x)
    np.testing.assert_allclose(g, e * x ** (e - 1) * w, rtol=1e-13, atol=1e-300)


@pytest.mark.parametrize("loss, make", [
    (lambda E, ids: np.sum(np.tanh(E[ids]) * np.arange(1.0, 5.0)),
     lambda r: r.integers(-50, 50, size=300)),                      # repeats, negatives
    (lambda E, ids: np.sum(E[ids] ** 2),
     lambda r: r.integers(0, 50, size=(20, 7))),                    # 2-d ids
    (lambda E, ids: np.sum(E[ids, 1:3] * E[ids, :2]),
     lambda r: r.integers(0, 50, size=40)),                         # then a slice: reference
    (lambda E, ids: np.sum(np.exp(E[ids // 4, ids % 4])),
     lambda r: r.integers(0, 200, size=(30, 3))),                   # two index arrays
    (lambda E, ids: np.sum(E[:, ids % 4] ** 3),
     lambda r: r.integers(0, 200, size=30)),                        # columns: reference
    (lambda E, ids: np.sum(E[ids[:0]]) + np.sum(E),
     lambda r: r.integers(0, 50, size=5)),                          # no positions
], ids=["rows", "2d-ids", "rows-then-slice", "two-arrays", "columns", "empty"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_scatter_add_of_a_gather_loops_in_numba_as_the_reference_adds(loss, make, dtype):
    # the VJP of E[ids]: np.add.at took 28.8 ms for 50,000 rows of 64 (sweep 30), a compiled
    # loop over rows 2.5 ms; repeated and negative positions add up as NumPy's do
    r = np.random.default_rng(3)
    E, ids = r.normal(size=(50, 4)).astype(dtype), make(r)
    f = adjit.grad(loss, backend="numba")
    got, ref = f(E, ids), adjit.grad(loss, backend="numpy")(E, ids)
    assert got.dtype == ref.dtype == dtype
    np.testing.assert_allclose(got, ref, rtol=RTOL[dtype], atol=RTOL[dtype])


def test_scatter_add_with_positions_out_of_bounds_raises_numpys_error():
    # the gradient alone does not run the gather, whose IndexError would have been the check
    f = adjit.grad(lambda E, ids: np.sum(E[ids]), backend="numba")
    E = np.ones((5, 3))
    np.testing.assert_array_equal(f(E, np.array([4, -5, 4])), [[1] * 3] + [[0] * 3] * 3 +
                                  [[2] * 3])
    for bad in (np.array([0, 5]), np.array([-6, 1])):
        with pytest.raises(IndexError):
            f(E, bad)


@pytest.mark.parametrize("e", [3, 4, 5, 6, 7, 8, -3, -8, 3.0])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fuse", [True, False])
def test_whole_powers_are_products_with_the_same_bits_on_both_backends(e, dtype, fuse):
    # NumPy's float power calls pow() per element except for 2, 0.5 and -1 (x ** 3.0: 30 ms on
    # 512k elements, x * x * x 0.23: sweep 30); both CPU backends now square and multiply
    x = np.random.default_rng(2).uniform(-2, 2, 5000).astype(dtype)
    f = lambda x: (x + 1.0) ** e + x ** e * 0.5   # noqa: E731
    a = adjit.compile(f, backend="numpy", fuse=fuse)
    b = adjit.compile(f, backend="numba", fuse=fuse, min_kernel_size=0)
    got = a(x)
    assert got.dtype == dtype and "_rt_ops['pow']" in a.lower(x).source

    def near(a, b):      # the sum cancels near x = -1/3: a tolerance on the terms' size
        np.testing.assert_allclose(a, b, rtol=0, atol=8 * np.finfo(dtype).eps * np.abs(b).max())
    if fuse:
        np.testing.assert_array_equal(got, b(x))
    else:                # numba's unfused kernels take the exponent as an argument: pow()
        near(got, b(x))
    near(got, f(x))
    g = adjit.grad(lambda x: np.sum(f(x)), backend="numpy", fuse=fuse)(x)
    # (x ** -8)' has x ** -9: NumPy's and the C library's pow, an ulp apart
    near(g, adjit.grad(lambda x: np.sum(f(x)), backend="numba", fuse=fuse,
                       min_kernel_size=0)(x))


def test_other_powers_keep_numpys_power():
    x = np.random.default_rng(2).uniform(0.1, 2, 50)
    for e in (2.0, 2.5, 9.0, -1.0, 0.5):
        f = adjit.compile(lambda x: x ** e, backend="numpy")
        assert "_rt_ops['pow']" not in f.lower(x).source
        np.testing.assert_array_equal(f(x), x ** e)


@pytest.mark.parametrize("loss, shape", [
    (lambda u: np.sum((u[1:] - u[:-1]) ** 2) + np.sum(u[2:] * u[:-2]), (3000,)),
    (lambda u: np.sum((u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
                       - 4 * u[1:-1, 1:-1]) ** 2) + np.sum(np.abs(u[1:] - u[:-1])), (64, 48)),
    (lambda u: np.sum(u[::2, 1:] * u[1::2, :-1]), (64, 48)),            # steps: the reference
    (lambda u: np.sum(u[1:, None, :] * u[None, :-1, :]), (20, 30)),     # 3-d: the reference
    (lambda u: np.sum(u[1:, 1:, :] - u[:-1, :-1, :] ** 2), (6, 7, 8)),  # 3-d: the reference
], ids=["diffs", "stencil", "steps", "broadcast", "3d"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_cotangent_of_overlapping_slices_adds_as_the_reference(loss, shape, dtype):
    # place_add in numba adds every piece to a row of the result while it is in cache (one
    # pass where NumPy makes one per piece), in the same order of additions
    u = np.random.default_rng(4).normal(size=shape).astype(dtype)
    got = adjit.grad(loss, backend="numba", min_kernel_size=0)(u)
    ref = adjit.grad(loss, backend="numpy")(u)
    np.testing.assert_allclose(got, ref, rtol=RTOL[dtype], atol=RTOL[dtype])
