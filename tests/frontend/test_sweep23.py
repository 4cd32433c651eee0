"""Regressions from the twelfth session (sweep 23)."""
import numpy as np
import pytest

import adjit
from finite_differences import numgrad as _numgrad


def test_hvp_takes_v_last_when_other_arguments_come_by_keyword():
    def f(x, scale=2.0):
        return scale * np.sum(x ** 3)
    h = adjit.hvp(f)
    x, v = np.array([1.0, 2.0]), np.array([1.0, 0.0])
    np.testing.assert_allclose(h(x, v), [12.0, 0.0])
    np.testing.assert_allclose(h(x, v, scale=3.0), [18.0, 0.0])
    np.testing.assert_allclose(h(x, scale=3.0, v=v), [18.0, 0.0])


def test_argnums_may_name_a_parameter_left_at_its_default_by_a_keyword_call():
    def f(x, w=1.5, b=1.0):
        return np.sum(x * w) * b
    x = np.array([1.0, 2.0])
    assert float(adjit.grad(f, argnums=1)(x, b=2.0)) == 6.0
    gx, gw = adjit.grad(f, argnums=(0, -2))(x, b=2.0)
    np.testing.assert_allclose(gx, [3.0, 3.0])
    assert float(gw) == 6.0


@pytest.mark.parametrize("key", [(True, [3, 0]), ([3, 0], True), (Ellipsis, True, [1]),
                                 (True, slice(None))])
def test_a_scalar_true_beside_index_arrays_broadcasts_away(key):
    x = np.arange(5.0)
    np.testing.assert_array_equal(adjit.compile(lambda a: a[key] * 2)(x), x[key] * 2)


def test_a_scalar_true_beside_index_arrays_in_two_dimensions():
    X = np.arange(12.0).reshape(3, 4)
    for key in [(Ellipsis, True, [1, 2]), (True, 1, [1, 2]), ([0, 1], True, [1, 2]),
                (True, np.array([[0], [1]]), [1, 2])]:
        np.testing.assert_array_equal(adjit.compile(lambda a: a[key])(X), X[key])
    with pytest.raises(adjit.UnsupportedError, match="True apart"):
        adjit.compile(lambda a: a[True, :, [1, 2]])(X)


def test_a_scalar_true_beside_index_arrays_in_a_write():
    def f(x):
        y = x.copy()
        y[True, [3, 0]] = x[:2] * 2
        y[[1], True] += 1
        return y
    x = np.arange(5.0)
    np.testing.assert_array_equal(adjit.compile(f)(x), f(x))
    assert adjit.gradcheck(lambda x: np.sum(f(x) ** 2), x) < 1e-7


_RNG = np.random.default_rng(1)
_XS, _YS, _W = _RNG.normal(size=50), _RNG.normal(size=50), _RNG.random(50)
_YS[7] = 10.0
_XN = _XS.copy()
_XN[3] = np.nan


@pytest.mark.parametrize("f", [
    lambda w: np.histogram2d(_XS, _YS, bins=4, weights=w)[0] ** 2,
    lambda w: np.histogram2d(_XN, _YS, bins=(3, 5), range=[[-1, 1], [-2, 2]], weights=w,
                             density=True)[0],
    lambda w: np.histogram2d(_XS, _YS, bins=[np.array([-2.0, 0.0, 0.5, 2.0]), 3],
                             weights=w * 2)[0],
    lambda w: np.histogramdd(np.stack([_XS, _YS, _XS * _YS], 1), bins=3, weights=w)[0] ** 2,
    lambda w: np.histogramdd([_XS, _YS], bins=(2, 3), weights=w, density=True)[0],
    lambda w: np.histogramdd(_YS, bins=5, weights=w ** 2)[0],
], ids=["2d", "2d-range-density-nan", "2d-edges", "dd", "dd-list-density", "dd-1d"])
def test_histogram2d_and_histogramdd_of_constant_samples_with_traced_weights(f):
    np.testing.assert_allclose(adjit.compile(f)(_W), f(_W), rtol=1e-12)

    def loss(w):
        h = f(w)
        return np.sum(h * np.arange(h.size).reshape(h.shape))
    np.testing.assert_allclose(adjit.grad(loss)(_W), _numgrad(loss, _W), atol=1e-6)


def test_histogram2d_of_traced_samples_is_refused_naming_the_line():
    with pytest.raises(adjit.UnsupportedError, match="histogram2d of traced data.*test_sweep23"):
        adjit.compile(lambda w: np.histogram2d(w, _YS)[0])(_W)
    assert adjit.compile(lambda w: np.histogram2d(_XS, _YS, weights=np.arange(50) > 9)[0])(
        _W).dtype == np.float64


def test_static_arguments_keep_the_sign_of_zero_and_the_order_of_dicts():
    c = adjit.compile(lambda a, s: a / s, static_argnums=1, backend="numpy")
    np.testing.assert_array_equal(c(np.ones(2), 0.0), [np.inf, np.inf])
    np.testing.assert_array_equal(c(np.ones(2), -0.0), [-np.inf, -np.inf])

    def f(x, cfg):
        for name, scale in cfg.items():
            x = getattr(np, name)(x) * scale
        return x
    c = adjit.compile(f, static_argnums=1, backend="numpy")
    x = np.array([0.5, 1.0])
    for cfg in ({"sin": 1.0, "exp": 1.0}, {"exp": 1.0, "sin": 1.0}):
        np.testing.assert_allclose(c(x, cfg), f(x, cfg), rtol=1e-15)


def test_static_dataclass_fields_are_keyed_by_type_and_may_hold_lists():
    import dataclasses

    @dataclasses.dataclass
    class Layer:
        x: np.ndarray
        k: float = dataclasses.field(default=1.0, metadata={"static": True})
        sizes: list = dataclasses.field(default_factory=lambda: [4, 8, 2],
                                        metadata={"static": True})
    c = adjit.compile(lambda L: L.x * L.k * len(L.sizes), backend="numpy")
    x = np.array([100], dtype=np.int8)
    assert c(Layer(x, 2)).dtype == np.int8
    np.testing.assert_array_equal(c(Layer(x, 2.0)), [600.0])
    s = adjit.compile(lambda L: L.x / L.k, backend="numpy")
    np.testing.assert_array_equal(s(Layer(np.ones(1), -0.0)), [-np.inf])
    g = adjit.grad(lambda L: np.sum(L.x ** 2) * len(L.sizes))(Layer(np.ones(2)))
    np.testing.assert_array_equal(g.x, [6.0, 6.0])
    assert g.sizes == [4, 8, 2]

    @dataclasses.dataclass
    class Bad:
        x: np.ndarray
        table: np.ndarray = dataclasses.field(default=None, metadata={"static": True})
    with pytest.raises(TypeError, match=r"static field x\.table holds ndarray"):
        adjit.compile(lambda b: b.x * 2)(Bad(np.ones(2), np.ones(2)))


def test_grad_of_a_compiled_function_keeps_its_static_arguments():
    import functools

    @functools.partial(adjit.compile, static_argnums=1)
    def loss(x, kind):
        return np.sum(np.tanh(x)) if kind == "tanh" else np.sum(np.sin(x))
    x = np.array([0.1, 0.2])
    np.testing.assert_allclose(adjit.grad(loss)(x, "sin"), np.cos(x), rtol=1e-14)
    np.testing.assert_allclose(adjit.grad(loss)(x, "tanh"), 1 - np.tanh(x) ** 2, rtol=1e-14)


_TABLE = np.array([0.5, 1.0, 2.0, 4.0])
_EDGES = np.array([-1.0, 0.0, 1.0])
_CLASS_WEIGHTS = np.array([1.0, 3.0])
_M = np.arange(12.0).reshape(3, 4)


@pytest.mark.parametrize("f", [
    lambda x: np.sum(_TABLE[np.searchsorted(_EDGES, x)] * x ** 2),
    lambda x: np.sum(np.take(_TABLE, np.searchsorted(_EDGES, x)) * x ** 2),
    lambda x: np.sum(np.asarray(_TABLE)[np.searchsorted(_EDGES, x)] * x ** 2),
    lambda x: np.sum(_M[:, np.argsort(x)] @ x),
    lambda x: np.sum(_M.T[np.argmax(x)] * x[:3]),
    lambda x: np.sum(_TABLE.reshape(2, 2)[np.argmax(x) % 2] * x[:2]),
    lambda x: np.sum({"t": _TABLE}["t"][np.argmin(x)] * x),
], ids=["getitem", "take", "asarray", "columns", "transpose", "reshape", "dict"])
def test_a_modules_array_is_indexable_by_traced_positions(f):
    x = np.array([-2.0, -0.5, 0.5, 3.0])
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(x), f(x), rtol=1e-15)
    assert adjit.gradcheck(f, x) < 1e-6
    assert type(_TABLE) is np.ndarray and type(_M) is np.ndarray   # restored


def test_class_weights_indexed_by_integer_labels():
    def wbce(z, y):
        return np.sum(_CLASS_WEIGHTS[y] * (np.logaddexp(0, z) - y * z))
    z, y = np.array([0.3, -1.2, 2.5, 0.1]), np.array([0, 1, 1, 0])
    g = adjit.grad(wbce)(z, y)
    np.testing.assert_allclose(g, _CLASS_WEIGHTS[y] * (1 / (1 + np.exp(-z)) - y), rtol=1e-14)


def test_a_closures_array_is_indexable_by_traced_positions_and_copies_take_traced_values():
    def make():
        w = np.array([1.0, 2.0, 3.0])

        def pick(k):
            return w[k]

        def f(x):
            c = w.copy()
            c[0] = x[1]
            z = np.zeros_like(w)
            z[1] = x[2]
            return pick(np.argmax(x)) * x + w[np.argsort(x)] + c + z
        return f, w
    f, w = make()
    x = np.array([0.3, -1.2, 2.5])
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(x), f(x), rtol=1e-15)
    assert adjit.gradcheck(lambda x: np.sum(f(x) ** 2), x) < 1e-6
    cells = [c.cell_contents for c in f.__closure__]
    assert [type(v) for v in cells if isinstance(v, np.ndarray)] == [np.ndarray]   # restored


def test_keyword_arguments_are_keyed_in_the_order_given():
    def pipeline(x, **steps):
        for name, scale in steps.items():
            x = getattr(np, name)(x) * scale
        return x
    c = adjit.compile(pipeline, backend="numpy")
    x = np.array([0.5, 1.0])
    for kw in ({"sin": 1.0, "exp": 1.0}, {"exp": 1.0, "sin": 1.0}):
        np.testing.assert_allclose(c(x, **kw), pipeline(x, **kw), rtol=1e-15)


def test_string_arguments_are_static_configuration():
    def loss(x, kind):
        return np.sum(np.tanh(x)) if kind == "tanh" else np.sum(np.sin(x))
    x = np.array([0.1, 0.2])
    np.testing.assert_allclose(adjit.grad(loss)(x, "sin"), np.cos(x), rtol=1e-15)
    np.testing.assert_allclose(adjit.grad(loss)(x, kind="tanh"), 1 - np.tanh(x) ** 2,
                               rtol=1e-15)
    assert float(adjit.compile(loss)(x, "sin")) == pytest.approx(np.sum(np.sin(x)))
    with pytest.raises(adjit.TraceError, match="<U3"):
        adjit.grad(loss, argnums=1)(x, "sin")


def test_compile_of_a_transformation_keeps_its_static_arguments():
    def f(x, kind, n):
        return np.sum(np.sin(x) * n) if kind == "sin" else np.sum(x)
    x = np.array([0.1, 0.2])
    np.testing.assert_allclose(adjit.compile(adjit.grad(f, static_argnums=2))(x, "sin", 3),
                               3 * np.cos(x), rtol=1e-15)
    assert float(adjit.compile(adjit.compile(f, static_argnums=2))(x, "sin", 3)) == \
        pytest.approx(3 * np.sum(np.sin(x)))


def test_gradcheck_passes_keywords_and_differences_float32_programs_coarsely():
    x = np.array([0.3, 1.2, -0.5])
    assert adjit.gradcheck(lambda a: np.sum(np.exp(a.astype(np.float32))), x) < 1e-3
    assert adjit.gradcheck(lambda x, scale=1.0: np.sum(np.sin(x)) * scale, x, scale=2.0) < 1e-8


def test_keyword_misuse_messages():
    def kf(x, *, scale=1.0):
        return x * scale

    def po(a, b, /):
        return a * b

    def kk(x, **kw):
        return x * kw["b"]
    x = np.ones(2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'scal'; did you mean "
                                        "'scale'"):
        adjit.compile(kf)(x, scal=0.5)
    with pytest.raises(TypeError, match="positional-only"):
        adjit.compile(po)(x, b=x)
    with pytest.raises(TypeError, match=r"argument\(s\) b holding arrays"):
        adjit.compile(kk)(x, a=2.0, b=x)


def test_an_attribute_set_in_post_init_is_explained():
    import dataclasses

    @dataclasses.dataclass
    class Params:
        w: np.ndarray

        def __post_init__(self):
            self.w_sq = self.w ** 2
    with pytest.raises(adjit.TraceError, match="without calling __init__ or __post_init__"):
        adjit.grad(lambda p: np.sum(p.w_sq * p.w))(Params(np.array([1.0, 2.0])))


def test_scipy_spellings_of_numpy_functions():
    sp = pytest.importorskip("scipy.special")
    x = np.array([-1.5, -0.0, 0.0, 0.3, 2.0, 7.0, np.inf, -np.inf, np.nan])
    for name in ("expm1", "log1p", "cbrt", "exp2", "exp10", "loggamma"):
        f = getattr(sp, name)
        with np.errstate(all="ignore"):
            for dt in (np.float64, np.float32):
                got = adjit.compile(lambda x: f(x), backend="numpy")(x.astype(dt))
                want = f(x.astype(dt))
                assert got.dtype == want.dtype
                np.testing.assert_allclose(got, want, rtol=1e-6 if dt == np.float32 else 1e-14)
        assert adjit.gradcheck(lambda x: np.sum(f(x)), np.array([0.3, 2.0, 3.0])) < 1e-6


def test_quantile_levels_passed_as_arguments_say_to_make_them_static():
    def pinball(pred, q=0.9):
        return np.quantile(pred, q)
    with pytest.raises(adjit.UnsupportedError, match="argument 'q'.*static_argnums"):
        adjit.compile(pinball)(np.arange(5.0), 0.9)
    assert float(adjit.compile(pinball, static_argnums=1)(np.arange(5.0), 0.9)) == 3.6


@pytest.mark.parametrize("method", ["inverted_cdf", "averaged_inverted_cdf",
                                    "closest_observation"])
def test_the_discrete_quantile_methods_match_numpy(method):
    import warnings
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 4, 7, 10):
        x = rng.normal(size=(n, 3))
        xn = x.copy()
        xn[rng.random(x.shape) < 0.3] = np.nan
        for q in (0.0, 0.1, 0.25, 1 / 3, 0.5, 0.6, 0.9, 1.0, [0.0, 0.5, 1.0]):
            for fn, a in ((np.quantile, x), (np.nanquantile, xn)):
                for ax in (None, 0):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        want = fn(a, q, axis=ax, method=method)
                        got = adjit.compile(lambda a: fn(a, q, axis=ax, method=method),
                                            backend="numpy")(a)
                    np.testing.assert_array_equal(got, want)
    x = rng.normal(size=7)
    assert adjit.gradcheck(lambda a: np.sum(np.quantile(a, [0.2, 0.5, 0.7], method=method)),
                           x) < 1e-8


def test_median_overwrite_input_and_nanquantile_of_a_matrix_of_levels():
    x = np.array([3.0, 1.0, 4.0, 1.5])
    assert float(adjit.compile(lambda x: np.median(x, overwrite_input=True))(x)) == 2.25
    with pytest.raises(TypeError, match="keepdim"):
        adjit.compile(lambda x: np.median(x, keepdim=True))(x)
    rng = np.random.default_rng(0)
    a = rng.normal(size=(5, 4))
    a[rng.random(a.shape) < 0.3] = np.nan
    q = np.array([[0.1, 0.5], [0.7, 0.9], [0.0, 1.0]])
    for ax in (None, 0, 1):
        np.testing.assert_allclose(
            adjit.compile(lambda a: np.nanquantile(a, q, axis=ax, keepdims=True))(a),
            np.nanquantile(a, q, axis=ax, keepdims=True), rtol=1e-14)


def test_quantile_weights_say_how_to_write_the_weighted_quantile():
    with pytest.raises(adjit.UnsupportedError, match="np.searchsorted"):
        adjit.compile(lambda x: np.quantile(x, 0.3, weights=np.ones(4),
                                            method="inverted_cdf"))(np.arange(4.0))


def test_scipy_stats_refusals_name_the_function_called():
    st = pytest.importorskip("scipy.stats")
    with pytest.raises(adjit.AdjitError, match=r"scipy\.stats\.iqr \(SciPy\)"):
        adjit.grad(lambda x: st.iqr(np.exp(x)))(np.arange(5.0))


_WT = np.array([1.0, 2.0, 3.0, 4.0])
_WT_ALIAS = _WT
_PRIOR = np.array([1.0, 2.0, 3.0])
_PHASES = np.array([1 + 2j, -0.5 + 0.1j, 3 - 1j])
_FORTRAN = np.arange(6.0).reshape(2, 3).T


def _normalized(a):
    b = np.asarray(a, dtype=float)
    if b is a:              # the usual copy guard
        b = b.copy()
    b /= b.sum()
    return b


@pytest.mark.parametrize("f", [
    lambda x: np.sum(_normalized(_WT) * x) + _WT[np.argmax(x)],
    lambda x: np.sum(_normalized(_WT) * x),
    lambda x: np.sum(x) * (1.0 if _WT is _WT_ALIAS else 9.0) +
    _WT[np.argmax(x)],
    lambda x: np.sum(np.real(_PHASES[np.argsort(x[:3])] * x[:3])) +
    np.sum(np.take(_PHASES, np.argsort(x[:3])).imag) + np.sum(_PHASES.take(np.argsort(x[:3])).real),
    lambda x: np.sum(_FORTRAN.copy(order="K").ravel(order="K")[:4] * x) +
    _FORTRAN[np.argmax(x) % 3, 0],
    lambda x: np.sum(_WT.take(np.argsort(x)) * x),
    lambda x: np.sum(x) + np.histogram(_WT, bins=3, weights=x)[0].sum() + _WT[np.argmin(x)],
], ids=["copy-guard", "copy-guard-alone", "identity", "complex", "fortran-copy", "take",
        "histogram"])
def test_module_arrays_keep_numpys_semantics_when_indexed_by_traced_positions(f):
    before = _WT.copy()
    x = np.array([0.5, 0.25, -0.3, 1.2])
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(x), f(x), rtol=1e-14)
    assert adjit.gradcheck(f, x) < 1e-6
    np.testing.assert_array_equal(_WT, before)
    assert type(_WT) is np.ndarray and _WT is _WT_ALIAS


def test_a_new_array_from_a_module_array_takes_traced_values():
    def loss(x):
        state = np.concatenate([_PRIOR, np.zeros(2)])
        state[3] = x[0]
        state[4] = x[1] ** 2
        return np.sum(state * state) + _PRIOR[np.argmin(x)]
    x = np.array([0.5, 0.25])
    assert float(adjit.compile(loss, backend="numpy")(x)) == pytest.approx(loss(x), rel=1e-15)


def test_an_in_place_update_of_a_global_keeps_the_global():
    import sys
    mod = sys.modules[__name__]
    mod._G = np.array([1.0, 2.0, 4.0])
    orig = mod._G

    def loss(x):
        global _G
        _G += 0.0
        return np.sum(_G[np.argsort(x)] * x)
    x = np.array([0.3, -0.7, 1.2])
    assert float(adjit.compile(loss, backend="numpy")(x)) == pytest.approx(loss(x))
    assert mod._G is orig and type(orig) is np.ndarray


def test_an_embedding_table_indexed_many_times_is_one_constant():
    emb = np.random.default_rng(0).normal(size=(400, 16))

    def loss(x):
        idx = np.argsort(x)
        return sum(np.sum(emb[(idx + k) % 400] @ np.ones(16)) for k in range(40)) * x[0]
    g = adjit.compile(loss, backend="numpy").trace(np.arange(4.0))
    consts = [n for n in g.nodes() if g[n]["op"] == "const" and g[n]["shape"] == (400, 16)]
    assert len(consts) == 1


def test_a_misspelt_dataclass_field_keeps_pythons_message():
    import dataclasses

    @dataclasses.dataclass
    class Params:
        w: np.ndarray
    with pytest.raises(AttributeError, match="has no attribute 'weight'"):
        adjit.grad(lambda p: np.sum(p.weight))(Params(np.ones(3)))


def test_gradcheck_makes_positional_strings_static():
    def act(x, kind="tanh"):
        return np.sum(np.tanh(x) if kind == "tanh" else np.sin(x))
    assert adjit.gradcheck(act, np.array([0.3, 0.8]), "sin") < 1e-8


def _with_einsum_diagonal(A):
    K = A @ A.T
    np.einsum('ii->i', K)[:] += 1.0          # K + I through NumPy's writable view
    return np.sum(K ** 2)


def _through_fortran_view(A):
    K = A @ A.T
    Kt = np.asfortranarray(K.T)               # K.T itself: already Fortran-ordered
    Kt *= 2.0
    return np.sum(K ** 2)


def _window_after_a_write(A):
    K = A @ A.T
    win = np.lib.stride_tricks.sliding_window_view(K, 2, axis=0)    # a read-only view
    K += 1.0
    return np.sum(win ** 2)


def _conj_of_real(A):
    K = A * 2
    c = K.conj()                              # of a real array: K itself
    c *= 3
    return np.sum(K ** 2)


def _einsum_transpose_write(A):
    K = A @ A.T
    np.einsum('ij->ji', K)[0, 1] = 5.0
    return np.sum(K ** 2)


def _einsum_view_of_zeros(A):
    Z = np.zeros((3, 3))
    np.einsum('ii->i', Z)[...] += A[0]
    return np.sum(Z * A)


@pytest.mark.parametrize("f", [_with_einsum_diagonal, _through_fortran_view,
                               _window_after_a_write, _conj_of_real, _einsum_transpose_write,
                               _einsum_view_of_zeros])
def test_numpys_views_write_through_and_show_later_writes(f):
    A = np.arange(9.0).reshape(3, 3) / 10
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(A), f(A.copy()), rtol=1e-14)
    assert adjit.gradcheck(f, A) < 1e-6


def test_eigenvectors_of_a_repeated_eigenvalue_give_no_nan_to_a_projector():
    u = np.array([1.0, 2.0, 2.0]) / 3
    S = np.eye(3) + 0.5 * np.outer(u, u)        # eigenvalues 2, 2, 3 of S + S.T

    def top(S):
        _, E = np.linalg.eigh(S + S.T)
        V = E[:, -1:]
        return np.sum(V @ V.T * np.arange(9.0).reshape(3, 3))
    g = adjit.grad(top)(S)
    np.testing.assert_allclose(g, _numgrad(top, S), atol=1e-6)


def test_ix_takes_traced_index_vectors():
    K = np.arange(36.0).reshape(6, 6)

    def f(K, tr):
        return np.sum(K[np.ix_(tr, tr)] ** 2) + np.sum(
            K[np.ix_([True, False, True, False, False, True], tr)])
    tr = np.array([4, 0, 2])
    assert float(adjit.compile(f)(K, tr)) == f(K, tr)
    assert adjit.gradcheck(f, K, tr) < 1e-6


def test_interp_with_sample_points_passed_as_an_argument_and_bincount_minlength():
    # traced sample points are supported since sweep 30 (they were refused)
    assert adjit.compile(lambda t, ts, u: np.interp(t, ts, u))(
        0.5, np.arange(3.0), np.arange(3.0) * 2) == 1.0
    with pytest.raises(adjit.UnsupportedError, match="minlength only bounds it"):
        adjit.compile(lambda w, y: np.bincount(y, w, minlength=3))(np.ones(3), np.arange(3))


def test_transformations_as_decorators_with_options():
    @adjit.grad(argnums=1)
    def f(a, b):
        return np.sum(a * b ** 2)

    @adjit.value_and_grad(has_aux=True)
    def g(a):
        return np.sum(a ** 2), a * 2
    np.testing.assert_array_equal(f(np.ones(2), np.arange(2.0)), [0.0, 2.0])
    (v, aux), gr = g(np.ones(2))
    assert float(v) == 2.0 and np.array_equal(gr, [2.0, 2.0]) and np.array_equal(aux, [2, 2])
    np.testing.assert_array_equal(adjit.hessian(argnums=0)(lambda a: np.sum(a ** 3))(
        np.ones(2)), 6 * np.eye(2))


_WRITTEN = np.array([1.0, 2.0, 3.0])


def test_a_module_array_written_between_two_traced_reads_gives_each_its_numbers():
    def f(x):
        a = _WRITTEN[np.argmax(x)]
        _WRITTEN[2] = 10.0
        b = _WRITTEN[np.argmax(x)]
        _WRITTEN[2] = 3.0
        return a * x + b
    x = np.array([0.1, 0.2, 0.9])
    np.testing.assert_array_equal(adjit.compile(f, backend="numpy")(x), f(x))
    np.testing.assert_array_equal(_WRITTEN, [1.0, 2.0, 3.0])


def test_compile_of_hvp_keeps_v_last_with_keywords():
    def f(x, y, scale=1.0):
        return np.sum(x ** 3 * y) * scale
    x, y, v = np.array([1.0, 2.0]), np.ones(2), np.array([1.0, 0.0])
    np.testing.assert_array_equal(adjit.compile(adjit.hvp(f))(x, y, v, scale=3.0), [18.0, 0.0])


_T3 = np.arange(10.0)


def test_when_the_second_trace_fails_elsewhere_its_error_is_shown():
    def f(x, idx):
        y = x * _T3[idx]
        if y.sum() > 0:             # the real problem, past the table
            y = -y
        return np.sum(y)
    with pytest.raises(adjit.TraceError, match="adjit.where"):
        adjit.compile(f, backend="numpy")(np.ones(3), np.array([1, 2, 3]))


def test_windows_of_a_strided_array_show_later_writes():
    from numpy.lib.stride_tricks import sliding_window_view

    def f(x):
        M = x * 1.0
        w = sliding_window_view(M.T, 2, axis=0)
        M[0] = 0.0
        return np.sum(w)
    x = np.arange(1.0, 7.0).reshape(2, 3)
    assert float(adjit.compile(f, backend="numpy")(x)) == f(x)
    np.testing.assert_array_equal(adjit.grad(f)(x), [[0, 0, 0], [1, 2, 1]])


def _fill_through_an_earlier_view(x):
    b = np.zeros((2, 3))
    r = b[1]
    b[0] = x[0]
    r.fill(x[1])
    return b


def _fill_a_reshaped_array(x):
    b = np.zeros(6).reshape(2, 3)
    b[0] = x[0]
    b.fill(x[1])
    return b


def _sort_through_an_earlier_view(x):
    b = np.zeros((2, 3))
    r = b[:, ::-1]
    b[0] = x
    b[1] = x * 2
    r.sort(axis=0)
    return b


def _asarray_in_fortran_order_copies(x):
    c = np.asarray(x, order="F")
    c[0, 0] = 100.0
    return x * 1.0 + c


def _require_fortran_copies(x):
    b = x * 1.0
    c = np.require(b, requirements="F")
    b[...] = 0.0
    return c


def _contiguous_copy_of_a_diagonal(x):
    b = x * 1.0
    d = np.ascontiguousarray(b.diagonal())
    b[...] = 0.0
    return d


def _complex_fortran_copy(x):
    z = x * (1 + 0j)
    c = np.asfortranarray(z)
    c[0, 0] = 100.0
    return z.real + c.imag


def _swapaxes_of_a_view_method(x):
    b = np.zeros((3, 3))
    b[...] = x
    v = np.swapaxes(b.view(), 0, 1)
    b[...] = 2 * x
    return v


def _transpose_of_a_view_sees_two_writes(x):
    M = np.zeros((3, 3))
    P = M[1:]
    v = np.transpose(P)
    w = np.transpose(P)
    w -= x[0, 0]
    w = np.einsum('ij->ji', P)
    w -= x[1, 1]
    return v


@pytest.mark.parametrize("f", [_fill_through_an_earlier_view, _fill_a_reshaped_array,
                               _sort_through_an_earlier_view, _asarray_in_fortran_order_copies,
                               _require_fortran_copies, _contiguous_copy_of_a_diagonal,
                               _complex_fortran_copy, _swapaxes_of_a_view_method,
                               _transpose_of_a_view_sees_two_writes])
def test_views_and_copies_through_numpys_layout_rules(f):
    x = np.arange(1.0, 10.0).reshape(3, 3) / 4
    arg = x[0] if f in (_fill_through_an_earlier_view, _fill_a_reshaped_array) else x
    arg = x[0] if f is _sort_through_an_earlier_view else arg
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(arg), f(arg.copy()),
                               rtol=1e-15)
    loss = lambda a: np.sum(f(a) * np.arange(np.size(f(a))).reshape(np.shape(f(a))))  # noqa: E731
    assert adjit.gradcheck(loss, arg) < 1e-6


def _flat_writes(x):
    b = np.zeros((2, 3))
    b.T.flat[1:5] = x[:4]              # through a non-contiguous view of an array made inside
    y = x.reshape(2, 3) * 1.0
    y.flat = [7.0, 8.0]                # repeated, as NumPy's flatiter repeats it
    y.T.flat[1:3] = x[:2]
    return b + y


def test_flat_writes_reach_the_array_in_c_order():
    x = np.arange(1.0, 7.0)
    np.testing.assert_array_equal(adjit.compile(_flat_writes, backend="numpy")(x),
                                  _flat_writes(x.copy()))
    assert adjit.gradcheck(lambda x: np.sum(_flat_writes(x) * np.arange(6).reshape(2, 3)),
                           x) < 1e-6

    def g(x):
        z = x * (1 + 0.5j)
        z.flat = [7.0, 8.0]
        return z
    np.testing.assert_array_equal(adjit.compile(g)(x[:4]), g(x[:4].copy()))


@pytest.mark.parametrize("view", [lambda b: b.diagonal(), lambda b: np.broadcast_to(b[0], (2, 3)),
                                  lambda b: np.lib.stride_tricks.sliding_window_view(b, 2, 1)])
def test_read_only_views_of_arrays_made_inside_refuse_traced_writes(view):
    def f(x):
        b = np.zeros((3, 3))
        view(b)[...] = x[0]
        return b
    with pytest.raises(ValueError, match="read-only"):
        f(np.ones(3))
    with pytest.raises(ValueError, match="read-only"):
        adjit.compile(f)(np.ones(3))


def test_layout_copies_of_arrays_made_inside_take_traced_values():
    def f(x):
        c = np.ascontiguousarray(np.zeros((2, 3)).T)
        np.put(c, [0], x[0, 0])
        c[1, 1] = x[0, 1]
        d = np.asfortranarray(np.ones((2, 3)))
        d += x
        return c.T + d
    x = np.arange(1.0, 7.0).reshape(2, 3)
    np.testing.assert_array_equal(adjit.compile(f, backend="numpy")(x), f(x))
    assert adjit.gradcheck(lambda x: np.sum(f(x) ** 2), x) < 1e-6


def test_asarray_in_fortran_order_of_an_array_made_inside_copies_it():
    def f(x):
        b = np.zeros((4, 6), np.float32)
        b[...] = x
        v = np.asarray(b, order="F")       # b is C-ordered: NumPy copies
        w = v[::-1]
        w *= 2.0
        return b, v
    x = np.arange(1.0, 25.0).reshape(4, 6)
    for got, want in zip(adjit.compile(f, backend="numpy")(x), f(x)):
        np.testing.assert_array_equal(got, want)
