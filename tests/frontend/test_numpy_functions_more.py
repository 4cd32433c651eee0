"""More NumPy functions written the way users write them: cov, corrcoef, quantiles, interp,
sinc, the modulo family, nan_to_num, select, piecewise, meshgrid, ufunc.outer, multi_dot,
isclose. Values match NumPy, gradients match central differences, float32 stays float32
where NumPy keeps it, and what cannot be traced is refused with a clear error."""
import doctest
import importlib
import warnings

import numpy as np
import pytest

import adjit

rng = np.random.default_rng(7)
M = rng.normal(size=(3, 5))                 # 3 variables, 5 observations
MT = rng.normal(size=(6, 3))                # 6 observations of 3 variables (rowvar=False)
V = rng.normal(size=7)
B = rng.normal(size=(2, 3, 4))
FW = np.array([1, 2, 1, 3, 1])
AW = np.array([0.5, 1.0, 2.0, 0.25, 1.5])
XP = np.array([-2.0, -0.5, 0.0, 0.7, 1.5, 3.0])
FP = np.array([1.0, -1.0, 0.5, 2.0, 0.0, 1.0])
XI = np.array([-2.5, -1.3, -0.2, 0.31, 0.9, 1.7, 2.2, 3.4])      # inside and outside XP
POS = rng.uniform(0.5, 2.0, size=(3, 4))

# name -> (user function, arguments); every argument is differentiated (float64)
CASES = {
    # -- np.cov / np.corrcoef
    "cov_rows": (lambda m: np.cov(m), (M,)),
    "cov_rowvar_false": (lambda m: np.cov(m, rowvar=False), (MT,)),
    "cov_1d": (lambda v: np.cov(v), (V,)),
    "cov_1d_rowvar_false": (lambda v: np.cov(v, rowvar=False), (V,)),
    "cov_with_y": (lambda m: np.cov(m, m[::-1] ** 2), (M,)),
    "cov_y_rowvar_false": (lambda m: np.cov(m, m[:, :2] ** 2, rowvar=False), (MT,)),
    "cov_bias_ddof": (lambda m: np.cov(m, bias=True) + np.cov(m, ddof=2), (M,)),
    "cov_fweights": (lambda m: np.cov(m, fweights=FW), (M,)),
    "cov_aweights": (lambda m: np.cov(m, aweights=AW), (M,)),
    "cov_both_weights": (lambda m: np.cov(m, fweights=FW, aweights=AW, ddof=0)
                         + np.cov(m, fweights=FW, aweights=AW), (M,)),
    "corrcoef_rows": (lambda m: np.corrcoef(m), (M,)),
    "corrcoef_rowvar_false": (lambda m: np.corrcoef(m, rowvar=False), (MT,)),
    "corrcoef_xy": (lambda v: np.corrcoef(v, np.cos(v)), (V,)),
    # -- np.percentile / np.quantile
    "quantile_scalar": (lambda v: np.quantile(v, 0.3), (V,)),
    "quantile_list_axis": (lambda m: np.quantile(m, [0.1, 0.5, 0.9], axis=1), (M,)),
    "quantile_array_q_2d": (lambda b: np.quantile(b, np.array([[0.25], [0.8]]), axis=-1), (B,)),
    "quantile_axis_tuple": (lambda b: np.quantile(b, [0.2, 0.6], axis=(0, 2)), (B,)),
    "quantile_keepdims": (lambda b: np.quantile(b, 0.4, axis=1, keepdims=True)
                          + np.quantile(b, [0.4], keepdims=True), (B,)),
    "quantile_edges": (lambda v: np.quantile(v, [0.0, 1.0]) + np.quantile(v, 1), (V,)),
    "percentile": (lambda m: np.percentile(m, 40, axis=0), (M,)),
    "percentile_list_keepdims": (lambda m: np.percentile(m, [25, 75], axis=1, keepdims=True),
                                 (M,)),
    "quantile_methods": (lambda m: np.stack([np.quantile(m, [0.3, 0.55], axis=1, method=k)
                                             for k in ("lower", "higher", "nearest",
                                                       "midpoint", "hazen", "weibull",
                                                       "median_unbiased", "normal_unbiased",
                                                       "interpolated_inverted_cdf")]), (M,)),
    # -- np.interp (xp constant)
    "interp_x": (lambda x: np.interp(x, XP, FP), (XI,)),
    "interp_fp": (lambda fp: np.interp(XI, XP, fp), (FP,)),
    "interp_both_left_right": (lambda x, fp: np.interp(x, XP, fp, left=-3.0, right=fp[0] * 2),
                               (XI, FP)),
    "interp_2d_x": (lambda x: np.interp(x, XP, FP), (XI[:6].reshape(2, 3) * 0.9,)),
    "interp_scalar_x": (lambda x: np.interp(x[2], XP, FP * 2), (XI,)),
    # -- np.sinc
    "sinc": (lambda x: np.sinc(x), (B,)),
    # -- mod, fmod, floor_divide, divmod
    "mod_scalar": (lambda x: x % 1.5 + np.mod(x, -0.7) + np.remainder(x, 2.5), (B,)),
    "mod_traced_divisor": (lambda x, y: np.mod(x, y) + x % (y * -1.3), (B, POS)),
    "rmod": (lambda y: 2.5 % y + np.remainder(-3.1, y), (POS,)),
    "fmod": (lambda x, y: np.fmod(x, y) + np.fmod(x, -0.6) + np.fmod(2.3, y), (B, POS)),
    "floor_divide": (lambda x, y: x // 0.3 + np.floor_divide(x, y) + 2.0 // y + x * 0, (B, POS)),
    "divmod": (lambda x, y: np.divmod(x, y)[1] * 2 + divmod(x, 0.7)[1] + divmod(x, y)[0]
               + np.divmod(x, 0.4)[0], (B, POS)),
    # -- nan_to_num, select, piecewise
    "nan_to_num": (lambda x: np.nan_to_num(x * np.array([1.0, np.nan, np.inf, -np.inf]),
                                           posinf=5.0, neginf=-5.0)
                   + np.nan_to_num(x / np.array([1.0, 0.0, 2.0, 0.0]), nan=0.5, posinf=9.0,
                                   neginf=-7.0), (POS[0],)),
    "select": (lambda x: np.select([x < -0.5, x > 0.5], [x ** 2, np.sin(x)], default=x * 3)
               + np.select([x > 0], [x]), (B,)),
    "select_scalar_choices": (lambda x: np.select([x < 0, x < 1], [-1.0, x], 5.0), (B,)),
    "piecewise": (lambda x: np.piecewise(x, [x < 0, x >= 0], [lambda v: -v, lambda v: v ** 2]),
                  (B,)),
    "piecewise_constants_otherwise": (lambda x: np.piecewise(
        x, [x < -1, x > 1], [-1.0, lambda v: v * 2, lambda v: np.sin(v)]), (B * 1.5,)),
    "piecewise_no_otherwise": (lambda x: np.piecewise(x, [x < -0.3, x > 0.4],
                                                      [lambda v: v ** 3, 2.0]), (V,)),
    "piecewise_single_condition": (lambda x: np.piecewise(x, x > 0, [lambda v: v * 3]), (V,)),
    "piecewise_args": (lambda x: np.piecewise(x, [x > 0], [lambda v, a: v * a, 0.5], 4.0),
                       (V,)),
    # -- meshgrid, ufunc.outer, multi_dot, clip with traced bounds
    "meshgrid_xy": (lambda x, y: np.meshgrid(x, y), (V[:3], V[3:])),
    "meshgrid_ij_sparse": (lambda x, y: np.meshgrid(x, y, indexing="ij", sparse=True),
                           (V[:3], V[3:])),
    "meshgrid_three": (lambda x: np.meshgrid(x, x[:2] ** 2, np.sin(x[1:])), (V[:4],)),
    "meshgrid_three_ij": (lambda x: np.meshgrid(x, x[:2], x[1:], indexing="ij"), (V[:4],)),
    "ufunc_outer": (lambda x, y: np.add.outer(x, y) * np.multiply.outer(x, y)
                    + np.subtract.outer(x, y) + np.maximum.outer(x, y)
                    + np.divide.outer(x, y) + np.power.outer(x ** 2 + 1, y), (V[:3], POS[0])),
    "ufunc_outer_nd": (lambda m, v: np.multiply.outer(m, v), (M[:2, :3], V[:2])),
    "multi_dot_three": (lambda a: np.linalg.multi_dot([a, a.T, a]), (M,)),
    "multi_dot_vectors": (lambda a, v: np.linalg.multi_dot([v[:3], a, a.T, a, v[:5]]), (M, V)),
    "multi_dot_chain": (lambda a: np.linalg.multi_dot([a, a.T, a, M.T @ MT.T, MT, a]), (M,)),
    "multi_dot_two": (lambda a: np.linalg.multi_dot([a, a.T]), (M,)),
    "clip_traced_bounds": (lambda x, lo: np.clip(x, lo, 1.0) + np.clip(x, -1.0, lo + 1.0),
                           (B[0], POS * -0.5)),
    # -- NaN-aware statistics
    "nanvar_nanstd": (lambda m: np.nanvar(m * np.where(M0_NAN, np.nan, 1.0), axis=1)
                      + np.nanstd(m * np.where(M0_NAN, np.nan, 1.0), axis=1, ddof=1)
                      + np.nanvar(m), (M,)),
}
M0_NAN = np.zeros(M.shape, bool)
M0_NAN[0, 1] = M0_NAN[2, 4] = True

# results without a gradient (integer, boolean or piecewise constant): values only
VALUES_ONLY = {
    "mod_int": (lambda k: np.mod(k, 3) + np.remainder(k, -4) + k % 5 + 7 % (k * 0 + 3), (
        np.arange(-7, 8),)),
    "floor_divide_int": (lambda k: k // 3 + np.floor_divide(k, -4) + np.fmod(k, 3)
                         + np.fmod(k, -4) + 7 // (k * 0 + 2), (np.arange(-7, 8),)),
    "divmod_int": (lambda k: np.divmod(k, 3), (np.arange(-7, 8),)),
    "int_division_by_zero": (lambda k: (k // (k * 0), k % (k * 0), np.fmod(k, k * 0)),
                             (np.arange(-3, 4),)),
    "mod_exact_multiples": (lambda x: (x % 1.5, np.mod(x, -1.5), np.fmod(x, 1.5), x // 1.5,
                                       np.fmod(x, -1.5)),
                            (np.array([-4.5, -3.0, -0.0, 0.0, 1.5, 3.0, 4.5, 2.0, -2.0]),)),
    "mod_rounding": (lambda x: (x % 0.1, x // 0.1, np.fmod(x, 0.1), np.mod(-x, 0.1),
                                np.fmod(x * 3.1, 0.3)),
                     (np.array([0.3, 0.7, 2.35, 1e-3, 5.55]),)),
    "mod_special": (lambda x: (x % 0.0, x % np.inf, np.fmod(x, 0.0), x // 0.0),
                    (np.array([-1.5, 0.0, 2.0]),)),
    "sinc_at_zero": (lambda x: np.sinc(x), (np.array([0.0, 1.0, -2.0, 0.5, 1e-9]),)),
    "sinc_int": (lambda k: np.sinc(k), (np.arange(-3, 4),)),
    "interp_at_knots": (lambda x: np.interp(x, XP, FP), (np.concatenate([XP, [np.nan]]),)),
    "interp_one_knot": (lambda x: np.interp(x, [0.5], [2.0]), (XI,)),
    "interp_repeated_knots": (lambda x: np.interp(x, [0.0, 1.0, 1.0, 2.0], [0.0, 1.0, 3.0, 4.0]),
                              (np.array([0.5, 1.0, 1.5, 2.0, -1.0]),)),
    "isclose": (lambda x: (np.isclose(x, x + np.array([0.0, 1e-9, 1e-3, np.nan, 0.0])),
                           np.isclose(x, 1, rtol=0.5), np.isclose(x, x, equal_nan=True),
                           np.isclose(x, np.inf), np.isclose(1.0, x, atol=0.4)),
                (np.array([1.0, 2.0, 0.5, np.nan, np.inf]),)),
    "quantile_with_nan": (lambda v: (np.quantile(v, 0.5), np.quantile(v, [0.1, 1.0]),
                                     np.percentile(v, 30, method="lower")),
                          (np.array([1.0, np.nan, 3.0, 2.0]),)),
    "quantile_int": (lambda k: (np.quantile(k, 0.4), np.quantile(k, [0.4, 1]),
                                np.quantile(k, 1), np.median(k)), (np.arange(9) % 4,)),
    "nanargmax": (lambda v: (np.nanargmax(v), np.nanargmin(v), np.nanargmax(
        np.stack([v, -v]), axis=1)), (np.array([1.0, np.nan, 3.0, -2.0]),)),
    "piecewise_int": (lambda k: np.piecewise(k, [k < 0], [lambda v: v * 2.5, 1.7]),
                      (np.arange(-3, 4),)),
}


def _leaves(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _check_values(fn, args, rtol=1e-12):
    want = fn(*args)
    got = adjit.compile(fn, backend="numpy")(*args)
    assert type(got) is type(want) or not isinstance(want, (tuple, list))
    for g, w in zip(_leaves(got), _leaves(want), strict=True):
        w = np.asarray(w)
        assert np.shape(g) == w.shape
        assert np.asarray(g).dtype == w.dtype, (np.asarray(g).dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-15)
        if w.dtype.kind == "f":    # signed zeros and NaNs where NumPy has them
            np.testing.assert_array_equal(np.signbit(g), np.signbit(w))
    return got


def _weighted(fn):
    """A scalar loss weighing every output element differently, for gradcheck."""
    def loss(*args):
        return sum(np.sum(o * np.cos(np.arange(np.size(o)) + 0.3).reshape(np.shape(o)))
                   for o in _leaves(fn(*args)))
    return loss


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_match_numpy(name):
    fn, args = CASES[name]
    _check_values(fn, args)


@pytest.mark.parametrize("name", sorted(VALUES_ONLY))
def test_values_without_gradient_match_numpy(name):
    fn, args = VALUES_ONLY[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _check_values(fn, args)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_match_central_differences(name):
    fn, args = CASES[name]
    assert adjit.gradcheck(_weighted(fn), *args, argnums=tuple(range(len(args))),
                           eps=1e-6) < 1e-6


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_stays_float32_where_numpy_keeps_it(name):
    fn, args = CASES[name]
    args32 = tuple(a.astype(np.float32) for a in args)
    want = fn(*args32)
    got = adjit.compile(fn, backend="numpy")(*args32)
    for g, w in zip(_leaves(got), _leaves(want), strict=True):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4)
    g32 = adjit.grad(_weighted(fn), argnums=tuple(range(len(args))), backend="numpy")(*args32)
    assert all(g.dtype == np.float32 for g in g32)


def test_float32_results_of_the_dtype_rules():
    v32 = V.astype(np.float32)
    f = adjit.compile(lambda v: (np.quantile(v, 0.3), np.quantile(v, [0.3]), np.sinc(v),
                                 v % 2, v // 2, np.fmod(v, 2.0), np.cov(v),
                                 np.interp(v, XP, FP), np.nan_to_num(v, nan=np.float64(1)),
                                 np.piecewise(v, [v > 0], [lambda x: x * 2.0])),
                      backend="numpy")
    got = f(v32)
    assert [g.dtype for g in got] == [np.float32, np.float64, np.float32, np.float32,
                                      np.float32, np.float32, np.float64, np.float64,
                                      np.float32, np.float32]


def test_sinc_gradient_at_zero_is_zero_and_finite():
    x = np.array([0.0, 0.5, -1.0])
    g = adjit.grad(lambda x: np.sum(np.sinc(x)), backend="numpy")(x)
    assert g[0] == 0.0 and np.all(np.isfinite(g))
    d = (np.sinc(x[1:] + 1e-6) - np.sinc(x[1:] - 1e-6)) / 2e-6
    np.testing.assert_allclose(g[1:], d, rtol=1e-6)
    # the second derivative at 0 is -pi^2 / 3, from the Taylor polynomial that takes over there
    h = adjit.hessian(lambda x: np.sum(np.sinc(x)), backend="numpy")(x)
    np.testing.assert_allclose(np.diag(h)[0], -np.pi ** 2 / 3, rtol=1e-12)
    np.testing.assert_allclose(np.diag(h)[1:], (g1(x[1:] + 1e-6) - g1(x[1:] - 1e-6)) / 2e-6,
                               rtol=1e-5)


def g1(x):
    return adjit.grad(lambda x: np.sum(np.sinc(x)), backend="numpy")(x)


def test_mod_gradients_are_one_and_minus_floor():
    x, y = np.array([2.3, -1.7, 5.1]), np.array([0.7, 0.9, -1.3])
    gx, gy = adjit.grad(lambda x, y: np.sum(x % y), argnums=(0, 1), backend="numpy")(x, y)
    np.testing.assert_array_equal(gx, np.ones(3))
    np.testing.assert_array_equal(gy, -np.floor(x / y))
    gx, gy = adjit.grad(lambda x, y: np.sum(np.fmod(x, y)), argnums=(0, 1),
                        backend="numpy")(x, y)
    np.testing.assert_array_equal(gy, -np.trunc(x / y))


# exact multiples (remainder +-0), in-between points, and zero dividends
XM = np.array([0.0, -0.0, 1.0, 2.0, -1.0, -2.0, 3.0, 0.5, -0.5, 1.25, -2.75, 6.0])
YM = np.array([1.0, -1.0, 0.5, -0.5, 1.5, -2.0])


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_modulo_values_at_exact_multiples_keep_numpys_signed_zeros(backend, dtype):
    x, y = (a.astype(dtype) for a in np.broadcast_arrays(XM[:, None], YM[None, :]))
    fns = [lambda x, y: x % y, lambda x, y: np.mod(x, y), lambda x, y: np.remainder(x, y),
           lambda x, y: np.fmod(x, y), lambda x, y: x // y, lambda x, y: np.divmod(x, y)[1],
           lambda x, y: x % 1.0, lambda x, y: np.mod(x, -1.0), lambda x, y: np.fmod(x, 2.0),
           lambda x, y: np.fmod(x, -0.5), lambda x, y: 2.0 % y, lambda x, y: np.fmod(-2.0, y)]
    for fn in fns:
        got, want = adjit.compile(fn, backend=backend)(x, y), fn(x, y)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    # the cases from the report
    for fn, a, sign in [(np.mod, -2.0, False), (np.mod, 2.0, True), (np.fmod, -2.0, True)]:
        got = adjit.compile(lambda v: fn(v, 1.0 if a < 0 else -1.0), backend=backend)(
            np.array([a], dtype))
        assert got[0] == 0 and np.signbit(got[0]) == sign


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_modulo_gradients_flow_at_exact_multiples(backend):
    # d/dx is 1 everywhere, exact multiples (zero remainder) included, as in JAX
    x = np.array([0.0, 1.0, 2.0, 0.5, -1.0])
    g = adjit.grad(lambda z: np.sum(np.mod(z, 1.0)), backend=backend)(x)
    np.testing.assert_array_equal(g, np.ones(5))
    x, y = (a.copy() for a in np.broadcast_arrays(XM[:, None], YM[None, :]))
    for fn, q in [(np.mod, np.floor), (np.remainder, np.floor), (lambda a, b: a % b, np.floor),
                  (np.fmod, np.trunc)]:
        gx, gy = adjit.grad(lambda a, b: np.sum(fn(a, b)), argnums=(0, 1), backend=backend)(x, y)
        np.testing.assert_array_equal(gx, np.ones_like(x))
        np.testing.assert_array_equal(gy, -q(x / y))
        for ys in (1.0, -0.5):
            g = adjit.grad(lambda a: np.sum(fn(a, ys)), backend=backend)(XM)
            np.testing.assert_array_equal(g, np.ones_like(XM))
    gx, gy = adjit.grad(lambda a, b: np.sum(a // b + np.floor_divide(a, b)), argnums=(0, 1),
                        backend=backend)(x, y)
    assert not gx.any() and not gy.any()
    # away from the kinks, against central differences
    xs, ys = np.array([2.3, -1.7, 5.1, 0.4]), np.array([0.7, 0.9, -1.3, -2.2])
    for fn in (np.mod, np.fmod, lambda a, b: (a % b) * a, lambda a, b: np.fmod(a, b) ** 2):
        assert adjit.gradcheck(lambda a, b: np.sum(fn(a, b)), xs, ys, argnums=(0, 1)) < 1e-6


def test_hypot_keeps_python_scalars_weak():
    f32 = np.array([1.0, 2.5, -3.0], np.float32)
    for fn, a in [(lambda z: np.hypot(z, 1.0), f32), (lambda z: np.hypot(1.0, z), f32),
                  (lambda z: np.hypot(z, 2), f32), (lambda z: np.hypot(z, z), f32),
                  (lambda z: np.hypot(z, np.float64(1.0)), f32),
                  (lambda z: np.hypot(z, 1.0), f32.astype(np.float16)),
                  (lambda z: np.hypot(z, z), np.array([3, 4], np.int16)),
                  (lambda z: np.hypot(z, 3), np.array([3, 4], np.int64))]:
        got, want = adjit.compile(fn, backend="numpy")(a), fn(a)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6)
    g = adjit.grad(lambda z: np.sum(np.hypot(z, 1.0)), backend="numpy")(f32)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, f32 / np.hypot(f32, 1.0), rtol=1e-6)
    assert adjit.gradcheck(lambda a, b: np.sum(np.hypot(a, b)), V[:3], V[3:6],
                           argnums=(0, 1)) < 1e-6


def test_polyval_list_coefficients_are_float64_arrays():
    f32 = np.array([1.0, 2.5, -3.0], np.float32)
    p32 = np.array([1.0, 2.0], np.float32)
    for fn, a in [(lambda z: np.polyval([1.0, 2.0], z), f32),
                  (lambda z: np.polyval((1.0, 2.0, 3.0), z), f32),
                  (lambda z: np.polyval([1, 2], z), f32),
                  (lambda z: np.polyval(p32, z), f32),
                  (lambda z: np.polyval(z, 2.0), f32),
                  (lambda z: np.polyval(z, np.float32(2.0)), f32),
                  (lambda z: np.polyval([z[0], 2.0], z), f32),
                  (lambda z: np.polyval([1, 2], z), np.array([1, 2], np.int32))]:
        got, want = adjit.compile(fn, backend="numpy")(a), fn(a)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6)
    g = adjit.grad(lambda z: np.sum(np.polyval([1.0, 2.0, 3.0], z)), backend="numpy")(f32)
    np.testing.assert_allclose(g, 2 * f32 + 2.0, rtol=1e-6)
    assert adjit.gradcheck(lambda p, x: np.sum(np.polyval(p, x)), V[:3], V[3:],
                           argnums=(0, 1)) < 1e-6


def test_interp_gradient_is_the_slope():
    g = adjit.grad(lambda x: np.sum(np.interp(x, XP, FP)), backend="numpy")(XI)
    slopes = np.diff(FP) / np.diff(XP)
    want = np.where((XI < XP[0]) | (XI > XP[-1]), 0.0,
                    slopes[np.clip(np.searchsorted(XP, XI, "right") - 1, 0, len(XP) - 2)])
    np.testing.assert_allclose(g, want, rtol=1e-12)


def test_nan_to_num_gradient_passes_where_finite():
    x = np.array([1.0, np.nan, np.inf, -2.0, -np.inf])
    g = adjit.grad(lambda x: np.sum(np.nan_to_num(x) * 3.0), backend="numpy")(x)
    np.testing.assert_array_equal(g, [3.0, 0.0, 0.0, 3.0, 0.0])


def test_piecewise_where_gradient_is_safe_in_the_other_branch():
    # every function runs on all of x, as in JAX: a log of the negative part is computed, but
    # the unselected branch contributes no gradient
    x = np.array([-1.0, 0.5, 2.0])
    g = adjit.grad(lambda x: np.sum(np.piecewise(x, [x > 0], [lambda v: v ** 2, 0.0])),
                   backend="numpy")(x)
    np.testing.assert_array_equal(g, [0.0, 1.0, 4.0])


def test_meshgrid_returns_a_tuple_like_numpy():
    out = adjit.compile(lambda x, y: np.meshgrid(x, y), backend="numpy")(V[:3], V[3:])
    assert isinstance(out, tuple) and out[0].shape == (4, 3)


def test_numba_backend_gives_the_same_numbers():
    def f(x, y):
        return (np.sum(np.sinc(x) * (x % y) + np.fmod(x, y) * (x // y))
                + np.sum(np.interp(x, XP, FP)) + np.sum(np.quantile(x, [0.3, 0.8], axis=1))
                + np.sum(np.cov(x)) + np.sum(np.select([x > 0], [x ** 2], -x)))
    v, g = adjit.value_and_grad(f, argnums=(0, 1), backend="numpy")(B[0], POS)
    numba = adjit.value_and_grad(f, argnums=(0, 1), backend="numba", min_kernel_size=0)
    v2, g2 = numba(B[0], POS)
    np.testing.assert_allclose(v2, v, rtol=1e-12)
    for a, b in zip(g2, g):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_hessian_through_cov_and_quantile():
    def f(m):
        return np.sum(np.cov(m) ** 2) + np.sum(np.quantile(m, [0.3, 0.6], axis=1) ** 2)
    h = adjit.hessian(f, backend="numpy")(M)
    g = adjit.grad(f, backend="numpy")
    e = np.zeros(M.shape)
    e[1, 2] = 1e-6
    np.testing.assert_allclose(h[1, 2], (g(M + e) - g(M - e)) / 2e-6, rtol=1e-5, atol=1e-7)



# NaN-skipping quantiles: each slice's count of numbers is traced, so slices with different
# numbers of NaN (and none at all) agree with NumPy in value and dtype
_NANQ = np.where(np.random.default_rng(5).random((5, 7)) < 0.3, np.nan,
                 np.random.default_rng(6).normal(size=(5, 7)))
_NANQ[2] = np.nan
NAN_QUANTILES = {
    "nanmedian": lambda a: np.nanmedian(a),
    "nanmedian axis 1": lambda a: np.nanmedian(a, axis=1),
    "nanmedian keepdims": lambda a: np.nanmedian(a, axis=0, keepdims=True),
    "nanmedian even counts": lambda a: np.nanmedian(a[:, :4], axis=1),
    "nanquantile": lambda a: np.nanquantile(a, 0.3, axis=1),
    "nanquantile list": lambda a: np.nanquantile(a, [0.0, 0.1, 0.5, 1.0], axis=1),
    "nanquantile float64 q": lambda a: np.nanquantile(a, np.float64(0.3), axis=1,
                                                      keepdims=True),
    "nanpercentile axes": lambda a: np.nanpercentile(a, 75, axis=(0, 1)),
    **{f"nanquantile {m}": (lambda m: lambda a: np.nanquantile(a, [0.3, 0.5], axis=1,
                                                               method=m))(m)
       for m in ("nearest", "midpoint", "hazen", "lower", "higher", "weibull")},
}


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(NAN_QUANTILES))
def test_nan_quantiles_match_numpy(name, dtype, backend):
    fn, x = NAN_QUANTILES[name], _NANQ.astype(dtype)
    got = adjit.compile(fn, backend=backend)(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # NumPy's "All-NaN slice"
        want = fn(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-14)


@pytest.mark.filterwarnings("ignore:All-NaN slice")
@pytest.mark.parametrize("fn", [lambda a: np.sum(np.nanmedian(a, axis=1)[[0, 1, 3, 4]]),
                                lambda a: np.sum(np.nanquantile(a, [0.1, 0.9], axis=1)
                                                 [:, [0, 1, 3, 4]] ** 2)])
def test_nan_quantile_gradients_skip_the_nans(fn):
    g = adjit.grad(fn, backend="numpy")(_NANQ)
    num = np.zeros_like(_NANQ)
    for i in zip(*np.nonzero(~np.isnan(_NANQ))):
        e = np.zeros_like(_NANQ)
        e[i] = 1e-6
        num[i] = (fn(_NANQ + e) - fn(_NANQ - e)) / 2e-6
    assert not np.isnan(g).any()
    np.testing.assert_allclose(g, num, atol=1e-8)


def test_nan_quantiles_of_integers_are_the_quantiles():
    f = adjit.compile(lambda a: (np.nanmedian(a), np.nanpercentile(a, 30)), backend="numpy")
    assert f(np.arange(5)) == (np.nanmedian(np.arange(5)), np.nanpercentile(np.arange(5), 30))


# what adjit cannot trace raises an error naming the call, why, and the user's line
REFUSED = {
    "allclose": (lambda w: np.sum(w) * np.allclose(w, 1.0),
                 r"np\.allclose.*Python bool.*static_argnums"),
    "array_equal": (lambda w: np.sum(w) if np.array_equal(w, w) else 0.0,
                    r"np\.array_equal.*Python bool.*static_argnums"),
    "interp traced xp with a period": (lambda w: np.sum(np.interp(0.3, w, FP[:5], period=2.0)),
                                       r"np\.interp with traced xp and a period"),
    "interp traced period": (lambda w: np.sum(np.interp(w, XP, FP, period=w[0])),
                             r"np\.interp.*traced period"),
    "interp decreasing xp": (lambda w: np.sum(np.interp(w, XP[::-1], FP)),
                             r"np\.interp.*increasing"),
    "quantile traced q": (lambda w: np.sum(np.quantile(w, w[0] ** 2)),
                          r"np\.quantile.*q.*constant"),
    "quantile method": (lambda w: np.sum(np.quantile(w, 0.5, method="cubic")),
                        r"np\.quantile.*'cubic'.*linear"),
    "quantile range": (lambda w: np.sum(np.percentile(w, 120)), r"\[0, 100\]"),
    "cov traced frequency weights": (lambda w: np.sum(np.cov(M, fweights=w ** 2)),
                                     r"np\.cov.*fweights.*integer counts"),
    "cov 3d": (lambda w: np.sum(np.cov(w.reshape(5, 1, 1))), r"np\.cov.*2 dimensions"),
    "select lengths": (lambda w: np.sum(np.select([w > 0], [w, w])), r"np\.select.*same length"),
    "select non-boolean": (lambda w: np.sum(np.select([w], [w])), r"np\.select.*boolean"),
    "piecewise count": (lambda w: np.sum(np.piecewise(w, [w > 0], [1.0, 2.0, 3.0])),
                        r"np\.piecewise.*1 condition"),
    "meshgrid indexing": (lambda w: np.sum(np.meshgrid(w, w, indexing="xx")[0]),
                          r"np\.meshgrid.*indexing"),
    "multi_dot 3d": (lambda w: np.sum(np.linalg.multi_dot([w.reshape(1, 1, 5), M.T, M])),
                     r"multi_dot.*2-d"),
    "reduce outer of unary": (lambda w: np.sum(np.exp.outer(w, w)), r"outer"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_unsupported_calls_are_refused_clearly(name):
    fn, pattern = REFUSED[name]
    with pytest.raises((adjit.UnsupportedError, adjit.ShapeError, ValueError), match=pattern) \
            as info:
        adjit.grad(fn, backend="numpy")(V[:5].copy())
    assert "test_numpy_functions_more.py:" in str(info.value) or name == "reduce outer of unary"


def test_allclose_works_through_static_argnums():
    f = adjit.compile(lambda x, t: x * 2 if np.allclose(t, 1.0) else x, backend="numpy",
                      static_argnums=(1,))
    assert f(np.ones(2), 1.0)[0] == 2.0


@pytest.mark.parametrize("mod", ["adjit.frontend.statistics", "adjit.frontend.numeric"])
def test_docstring_examples_run(mod):
    res = doctest.testmod(importlib.import_module(mod), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0 and res.attempted > 0


# -- sweep 6: the modulo family exact (one fmod op + NumPy's npy_divmod), quantile with an
# integer q, nanargmin of integers and booleans, interp with infinite fp and at knots
_MOD_VALUES = [0.0, -0.0, 1.0, -1.0, 0.1, -0.1, 3.0, -3.0, 2.5, 7.0, -5.5, 0.7, 1e300,
               -1e300, 1e-300, 5e-324, np.inf, -np.inf, np.nan, 1.5, -1.5, 4.5, 0.3, 2.0 ** 53]
_MOD_FNS = {"remainder": lambda x, y: x % y, "floor_divide": lambda x, y: x // y,
            "fmod": np.fmod, "divmod": lambda x, y: np.divmod(x, y),
            "np.remainder": np.remainder, "np.floor_divide": np.floor_divide}


def _assert_bitwise(got, want):
    for g, w in zip(_leaves(got), _leaves(want), strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(np.signbit(g), np.signbit(w))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(_MOD_FNS))
def test_modulo_family_is_numpys_bit_for_bit(name, dtype, backend):
    fn = _MOD_FNS[name]
    x, y = (a.ravel().astype(dtype) for a in np.meshgrid(_MOD_VALUES, _MOD_VALUES))
    r = np.random.default_rng(3)
    x = np.concatenate([x, (r.normal(size=500) * 100).astype(dtype)])
    y = np.concatenate([y, r.normal(size=500).astype(dtype)])
    kw = {"min_kernel_size": 0} if backend == "numba" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _assert_bitwise(adjit.compile(fn, backend=backend, **kw)(x, y), fn(x, y))
        for c in (0.1, -0.7, 0.0, np.inf):
            _assert_bitwise(adjit.compile(lambda a: fn(a, c), backend=backend, **kw)(x),
                            fn(x, dtype(c)))


def test_modulo_report_cases():
    x = np.array([3.0, 2.5, 7.0])
    c = lambda f: adjit.compile(f, backend="numpy")        # noqa: E731
    np.testing.assert_array_equal(c(lambda x: x % 0.1)(x), x % 0.1)
    assert (c(lambda x: x % 0.1)(x) > 0.09).all()
    np.testing.assert_array_equal(c(lambda x: x // 0.1)(x), [29.0, 24.0, 69.0])
    np.testing.assert_array_equal(c(lambda x: np.fmod(x, 0.1))(x), np.fmod(x, 0.1))
    np.testing.assert_array_equal(c(lambda x: x % 0.1)(np.array([1e300])), [1e300 % 0.1])
    inf = np.array([np.inf, -np.inf])
    assert np.isnan(c(lambda x: x // 2.0)(inf)).all()
    assert np.isnan(c(lambda x: np.divmod(x, 2.0)[0])(inf)).all()


def test_modulo_gradients_at_rounded_multiples():
    # x / y rounds to a whole number but is not one: the gradient in y is -floor of the
    # exact quotient (29, not 30), and the gradients agree with JAX's rules elsewhere
    x, y = np.array([3.0, 2.5, -7.0]), np.array([0.1, 0.1, 0.1])
    gx, gy = adjit.grad(lambda a, b: np.sum(a % b), argnums=(0, 1), backend="numpy")(x, y)
    np.testing.assert_array_equal(gx, np.ones(3))
    np.testing.assert_array_equal(gy, -np.array([29.0, 24.0, -70.0]))
    gx, gy = adjit.grad(lambda a, b: np.sum(np.fmod(a, b)), argnums=(0, 1),
                        backend="numba")(x, y)
    np.testing.assert_array_equal(gy, -np.array([29.0, 24.0, -69.0]))
    t = adjit.jvp(lambda b: np.fmod(x, b), (y,), (np.ones(3),), backend="numpy")[1]
    np.testing.assert_array_equal(t, -np.array([29.0, 24.0, -69.0]))


_INT_DTYPES = [np.int64, np.uint64, np.int32, np.uint32, np.int8, np.uint8, np.bool_]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("dtype", _INT_DTYPES)
def test_integer_modulo_is_exact_beyond_2_53(dtype, backend):
    r = np.random.default_rng(4)
    if dtype is np.bool_:
        x, y = r.integers(0, 2, (2, 40)).astype(bool)
    else:
        info = np.iinfo(dtype)
        edge = [info.min, info.max, info.min + 1, info.max - 1, 0, 1, 2, 3, 7, info.max >> 1,
                (info.max >> 1) + 1, info.max >> 2, (info.max >> 2) - 1, info.max >> 11]
        if info.min < 0:
            edge += [-1, -2, -3, info.min >> 1, info.min >> 11]
        edge = np.array(edge).astype(dtype)
        big = r.integers(info.min, info.max, 1500, dtype=dtype, endpoint=True)
        small = r.integers(max(info.min, -999), min(info.max, 999), 1500,
                           endpoint=True).astype(dtype)
        x = np.concatenate([np.repeat(edge, edge.size), big, big])
        y = np.concatenate([np.tile(edge, edge.size), big[::-1], small])
    kw = {"min_kernel_size": 0} if backend == "numba" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for fn in (lambda a, b: a % b, lambda a, b: a // b, np.fmod, np.divmod):
            _assert_bitwise(adjit.compile(fn, backend=backend, **kw)(x, y), fn(x, y))
    big = np.array([2**62 + 1, 2**53 + 1, -(2**62) - 5])
    np.testing.assert_array_equal(adjit.compile(lambda a: (a % 3, a // 3), backend=backend,
                                                **kw)(big), (big % 3, big // 3))


@pytest.mark.parametrize("method", ["weibull", "interpolated_inverted_cdf", "hazen", "linear",
                                    "median_unbiased", "normal_unbiased", "midpoint",
                                    "lower", "higher", "nearest"])
def test_quantile_with_integer_q_clips_like_numpy(method):
    a = np.array([-0.5, 0.3, 0.9])
    m = np.arange(12.0).reshape(3, 4) ** 1.5
    for q in (0, 1, [0, 1], np.array([1, 0]), [0.0, 1]):
        f = adjit.compile(lambda v: np.quantile(v, q, method=method), backend="numpy")
        np.testing.assert_array_equal(f(a), np.quantile(a, q, method=method))
        g = adjit.compile(lambda v: np.quantile(v, q, axis=1, method=method), backend="numpy")
        np.testing.assert_array_equal(g(m), np.quantile(m, q, axis=1, method=method))
    g = adjit.grad(lambda v: np.quantile(v, 1, method=method), backend="numpy")(a)
    np.testing.assert_array_equal(g, [0.0, 0.0, 1.0])


@pytest.mark.parametrize("a", [np.array([3, 0, 1, 2], np.uint8), np.array([5, -128, 0], np.int8),
                               np.array([True, False, False]), np.array([True, True]),
                               np.array([2**64 - 1, 0, 5, 0], np.uint64),
                               np.array([2**63 - 1, -2**63, 0, -2**63]),
                               np.array([[3, 1, 7], [0, 9, 0]], np.uint16),
                               np.array([1.0, np.nan, -2.0, -2.0])])
def test_nanargmin_of_integers_and_booleans(a):
    for be in ("numpy", "numba"):
        assert adjit.compile(np.nanargmin, backend=be)(a) == np.nanargmin(a)
        np.testing.assert_array_equal(
            adjit.compile(lambda v: np.nanargmin(v, axis=0), backend=be)(a),
            np.nanargmin(a, axis=0))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_interp_infinite_fp_matches_numpy():
    xs = np.array([-1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, np.nan, np.inf])
    r = np.random.default_rng(5)
    for xp in ([0.0, 1.0, 2.0], [0.0, 1.0, 1.0, 2.0, 3.0, 3.0], [0.0, 0.0, 1.0], [1.0, 1.0]):
        base = r.normal(size=len(xp))
        for k in range(len(xp)):
            for v in (np.inf, -np.inf, np.nan):
                fp = base.copy()
                fp[k] = v
                for be in ("numpy", "numba"):
                    got = adjit.compile(lambda x, f: np.interp(x, xp, f), backend=be)(xs, fp)
                    np.testing.assert_array_equal(got, np.interp(xs, xp, fp))
    f = adjit.compile(lambda f: np.interp(np.array([1.5]), [0.0, 1.0, 2.0], f), backend="numpy")
    np.testing.assert_array_equal(f(np.array([0.0, np.inf, 1.0])), [np.inf])


def test_interp_gradient_at_knots_is_the_slope_to_the_right():
    g = adjit.grad(lambda x: np.sum(np.interp(x, [0.0, 1.0, 3.0], [0.0, 2.0, 3.0])),
                   backend="numpy")
    # JAX: the piece to the right of a knot, the one to the left at the last knot
    np.testing.assert_array_equal(g(np.array([0.0, 1.0, 3.0, 0.5, -1.0, 4.0])),
                                  [2.0, 0.5, 0.5, 2.0, 0.0, 0.0])
    t = adjit.jvp(lambda x: np.interp(x, [0.0, 1.0, 3.0], [0.0, 2.0, 3.0]),
                  (np.array([0.0, 1.0, 3.0]),), (np.ones(3),), backend="numpy")[1]
    np.testing.assert_array_equal(t, [2.0, 0.5, 0.5])
    gf = adjit.grad(lambda f: np.sum(np.interp(np.array([0.0, 1.0, 2.0]), [0.0, 1.0, 2.0], f)),
                    backend="numpy")(np.array([0.0, 2.0, 4.0]))
    np.testing.assert_array_equal(gf, [1.0, 1.0, 1.0])


def test_interp_gradients_with_repeated_knots_are_finite():
    xr, fr = np.array([0.0, 1.0, 1.0, 2.0, 3.0, 3.0]), np.array([0.0, 1.0, 5.0, 2.0, 4.0, 7.0])
    g = adjit.grad(lambda f: np.sum(np.interp(np.array([0.5, 3.5]), xr, f)),
                   backend="numpy")(fr)
    np.testing.assert_array_equal(g, [0.5, 0.5, 0.0, 0.0, 0.0, 1.0])
    g = adjit.grad(lambda x: np.sum(np.interp(x, xr, fr)), backend="numpy")(np.array([0.5, 3.5]))
    np.testing.assert_array_equal(g, [1.0, 0.0])
    g = adjit.grad(lambda x: np.sum(np.interp(x, [0.0, 0.0, 1.0], [1.0, 2.0, 3.0])),
                   backend="numba")(np.array([-1.0, 0.5]))
    np.testing.assert_array_equal(g, [0.0, 1.0])
