"""Regressions from the thirteenth session (sweep 24)."""
import numpy as np
import pytest

import adjit
from finite_differences import numgrad as _numgrad


_C = np.array([0.5, 0.3, 0.2])


def test_numpys_ufuncs_stay_themselves_while_tracing():
    """np.tanh compared by identity (an activation chosen by `act is np.tanh`) must be
    NumPy's own ufunc inside the trace (a proxy for lists of traced values once broke it)."""
    def layer(w, x, act=np.tanh):
        assert isinstance(np.tanh, np.ufunc) and type(np.add) is np.ufunc
        return np.sum((1.0 if act is np.tanh else 0.5) * act(x @ w))
    w, x = np.array([[0.3, -0.2], [0.1, 0.4]]), np.array([[1.0, 2.0]])
    np.testing.assert_allclose(adjit.compile(layer, backend="numpy")(w, x), layer(w, x))
    with pytest.raises(adjit.TraceError, match=r"np.stack\(\[a, b\]\)"):
        adjit.grad(lambda c: np.sum(np.exp([c[0], c[1]])))(_C)
    np.testing.assert_allclose(adjit.grad(lambda c: np.sum(np.exp(np.stack([c[0], c[1]]))))(_C),
                               [np.exp(0.5), np.exp(0.3), 0.0])


def test_ufunc_at_keeps_a_tuple_of_traced_indices_as_an_index():
    def f(z, y):
        g = np.zeros((4, 3))
        np.add.at(g, (np.arange(4), y), [z[0], z[1], z[2], z[3]])
        return np.sum(g * np.arange(12.0).reshape(4, 3))
    z, y = np.array([1.0, 2.0, 3.0, 4.0]), np.array([2, 0, 0, 1])
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(z, y), f(z, y))
    np.testing.assert_allclose(adjit.grad(f)(z, y), [2.0, 3.0, 6.0, 10.0])


def test_hvp_called_in_scipys_hessp_order_says_how_to_wrap_it():
    A, b = np.arange(12.0).reshape(6, 2), np.arange(6.0)

    def f(w, A, b, lam):
        return 0.5 * np.sum((A @ w - b) ** 2) + lam * np.sum(w ** 2)
    h = adjit.hvp(f)
    w, p = np.zeros(2), np.ones(2)
    with pytest.raises(adjit.AdjitError, match=r"hessp=lambda x, p, \*a: h\(x, \*a, p\)"):
        h(w, p, A, b, 0.3)          # SciPy's hessp(x, p, *args)
    np.testing.assert_allclose(h(w, A, b, 0.3, p), A.T @ (A @ p) + 0.6 * p)


def test_forward_mode_through_a_full_svd_whose_singular_values_alone_are_used():
    A = np.random.default_rng(0).uniform(-2, 2, (5, 3))
    V = np.ones((5, 3))
    f = lambda a: np.sum(np.linalg.svd(a)[1] ** 2)         # ||A||_F^2; U is 5 x 5
    val, tan = adjit.jvp(f, (A,), (V,))
    np.testing.assert_allclose(tan, 2 * np.sum(A * V), rtol=1e-12)
    np.testing.assert_allclose(adjit.hvp(f)(A, V), 2 * V, atol=1e-12)
    with pytest.raises(adjit.GradError, match="full U of np.linalg.svd"):
        adjit.jvp(lambda a: np.sum(np.linalg.svd(a)[0]), (A,), (V,))


@pytest.mark.parametrize("fn", [lambda a: np.dot(a, 2.0), lambda a: np.inner(a, 2.0),
                                lambda a: a.dot(2.0), lambda a: np.dot(2, a),
                                lambda a: np.dot(a, np.float32(2.0)),
                                lambda a: np.dot(a[0, 0], a)])
def test_dot_and_inner_of_a_python_number_promote_as_numpy(fn):
    a = np.ones((2, 2), np.float32)
    got = adjit.compile(fn, backend="numpy")(a)
    assert got.dtype == fn(a).dtype
    np.testing.assert_array_equal(got, fn(a))


def test_special_functions_at_infinities_and_signed_zeros():
    sp = pytest.importorskip("scipy.special")
    a = np.array([2.0, np.inf, np.inf, -1.5, 3.0, 2.0, -np.inf, -np.inf])
    b = np.array([np.inf, 2.5, np.inf, np.inf, 4.0, -np.inf, 2.5, np.inf])
    for fn in (sp.betaln, sp.beta):
        np.testing.assert_allclose(adjit.compile(fn, backend="numpy")(a, b), fn(a, b),
                                   rtol=1e-13)
    z = np.array([-0.0, 0.0])
    np.testing.assert_array_equal(adjit.compile(sp.ndtri, backend="numpy")(z), [-np.inf] * 2)
    x = np.array([-np.inf, -0.0, 0.0, 2.5])
    for backend in ("numpy", "numba"):
        opts = dict(backend=backend, min_kernel_size=0) if backend == "numba" else {}
        for fn in (sp.gammaln, sp.digamma):
            np.testing.assert_allclose(adjit.compile(lambda t: fn(t) * 1.0, **opts)(x), fn(x),
                                       rtol=1e-13)
    g = adjit.grad(lambda a: np.sum(sp.betaln(a, a[::-1] + 1)))(np.array([0.5, 25.0, 3.0]))
    assert np.all(np.isfinite(g))


def test_library_refusals_are_unsupported_and_trace_errors_alike():
    linalg = pytest.importorskip("scipy.linalg")
    sp = pytest.importorskip("scipy.special")
    A = np.eye(3) * 2.0
    for fn in (lambda a: linalg.expm(a), lambda a: linalg.solve(a, a[0]),
               lambda a: linalg.lu_factor(a)[0]):
        with pytest.raises(adjit.UnsupportedError) as e:
            adjit.grad(lambda a: np.sum(fn(a)))(A)
        assert type(e.value) is adjit.LibraryError and "(SciPy)" in str(e.value)
        assert isinstance(e.value, adjit.TraceError)
    with pytest.raises(adjit.UnsupportedError, match="polygamma.*calls it with s = n"):
        adjit.grad(lambda x, n: np.sum(sp.polygamma(n, x)))(np.array([0.5, 1.0]),
                                                          np.array([0, 1]))


@pytest.mark.parametrize("mode, kw", [
    ("maximum", {}), ("minimum", {"stat_length": 2}), ("mean", {"stat_length": ((1, 3), (2, 2))}),
    ("median", {"stat_length": (3, 1)}), ("mean", {}), ("linear_ramp", {}),
    ("linear_ramp", {"end_values": ((1.0, -2.0), (0.5, 3.0))})])
def test_pad_statistic_and_ramp_modes(mode, kw):
    rng = np.random.default_rng(24)
    X, w = rng.normal(size=(4, 5)), rng.normal(size=(8, 10))
    f = lambda x: np.pad(x, ((2, 2), (3, 2)), mode=mode, **kw)
    loss = lambda x: np.sum(f(x) * w[:, :10][:8, :f(x).shape[1]])
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(X), f(X), rtol=1e-14)
    np.testing.assert_allclose(adjit.grad(loss, backend="numpy")(X), _numgrad(loss, X),
                               rtol=1e-6, atol=1e-8)
    xi = (X * 10).astype(np.int64)
    if mode != "linear_ramp":
        np.testing.assert_array_equal(adjit.compile(f, backend="numpy")(xi), f(xi))


class _WeightedLoss:
    def __init__(self):
        self.w = np.array([1.0, 2.0, 0.5])

    def __call__(self, logits, y):
        lp = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
        return -np.sum(self.w[y] * lp[np.arange(len(y)), y])


class _Embed:
    def __init__(self):
        self.emb = np.arange(12.0).reshape(4, 3)

    def loss(self, h, ids):
        return np.sum(self.emb[ids] * h)


_CFG = {"w": np.array([1.0, 2.0, 0.5])}
_LIST = [np.array([1.0, 2.0, 0.5])]


def test_arrays_in_attributes_and_containers_are_indexed_by_traced_labels():
    """class weights on an object (self.w[y]), in a module's dict or list, indexed by traced
    labels: NumPy asked the labels for their values; a second trace sees them as Tables."""
    rng = np.random.default_rng(24)
    logits, y = rng.normal(size=(4, 3)), np.array([0, 2, 1, 1])
    loss = _WeightedLoss()
    m = _Embed()
    for f in (loss, lambda z, y: np.sum(_CFG["w"][y] * z[:, 0]),
              lambda z, y: np.sum(_LIST[0][y] * z[:, 0]), m.loss):
        np.testing.assert_allclose(adjit.compile(f, backend="numpy")(logits, y),
                                   f(logits, y), rtol=1e-13)
        np.testing.assert_allclose(adjit.grad(f)(logits, y),
                                   _numgrad(lambda z: f(z, y), logits), rtol=1e-6, atol=1e-9)
    # the user's objects hold their own arrays again
    assert type(loss.w) is np.ndarray and type(m.emb) is np.ndarray
    assert type(_CFG["w"]) is np.ndarray and type(_LIST[0]) is np.ndarray


def test_numpy_scalar_types_of_traced_values_get_their_own_advice():
    x = np.array([0.5, -1.0, 2.0])
    with pytest.raises(adjit.TraceError, match=r"np\.float64\(\.\.\.\) of a traced value.*"
                                               r"x\.astype\(np\.float64\)"):
        adjit.compile(lambda x: np.float64(np.sum(x)) * x, backend="numpy")(x)
    with pytest.raises(adjit.TraceError, match=r"np\.int32\(\.\.\.\)"):
        adjit.compile(lambda x: np.int32(x[0]) + x, backend="numpy")(x)
    np.testing.assert_allclose(adjit.compile(lambda x: np.sum(x).astype(np.float64) * x,
                                             backend="numpy")(x), 1.5 * x)


def test_multigammaln_rel_entr_at_extreme_ratios():
    sp = pytest.importorskip("scipy.special")
    a = np.array([2.5, 4.0, 10.0])
    f = lambda a: np.sum(sp.multigammaln(a, 3))
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(a), f(a), rtol=1e-13)
    np.testing.assert_allclose(adjit.grad(f)(a), sum(sp.digamma(a - j / 2) for j in range(3)),
                               rtol=1e-12)
    p = np.array([0.5, 0.5, 1e-300, 0.3, 2.0])
    q = np.array([1e-320, 1.0, 1e200, 0.31, 1.0])   # x / y overflows, underflows, is near 1
    for backend in ("numpy", "numba"):
        np.testing.assert_allclose(adjit.compile(sp.rel_entr, backend=backend)(p, q),
                                   sp.rel_entr(p, q), rtol=1e-13)


def test_numpy_polynomial_classes_with_traced_coefficients():
    from numpy.polynomial import Polynomial
    x = np.linspace(-1.0, 1.0, 5)
    f = lambda c: np.sum(Polynomial(c)(x) ** 2)
    c = np.array([0.5, -1.2, 2.0])
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(c), f(c), rtol=1e-13)
    np.testing.assert_allclose(adjit.grad(f)(c), _numgrad(f, c), rtol=1e-6)


_W24 = np.arange(15.0).reshape(5, 3)
_CFG24 = {"w": _W24}
_HIST24 = []


class _Keeps:
    def __init__(self, w):
        self.w = w

    def __call__(self, x, labels):
        self.wT = self.w.T                    # a view of the indexable stand-in, kept
        self.cache = {"head": self.w[:2]}     # two levels down
        self.same = self.w                    # the stand-in itself
        return np.sum(self.w[labels] * x)


def test_views_the_function_stores_on_users_objects_are_plain_arrays_afterwards():
    loss = _Keeps(_W24)

    def f(x, labels):
        _CFG24["w_head"] = _CFG24["w"][:2]
        _HIST24.append(_CFG24["w"][:1])
        return np.sum(_CFG24["w"][labels] * x)
    x, labels = np.ones((2, 3)), np.array([0, 4])
    assert adjit.compile(loss, backend="numpy")(x, labels) == 42.0
    assert adjit.compile(f, backend="numpy")(x, labels) == 42.0
    for v in (loss.wT, _CFG24["w_head"], _HIST24[0], loss.w, _CFG24["w"], loss.cache["head"]):
        assert type(v) is np.ndarray
    assert loss.w is _W24 and _CFG24["w"] is _W24 and loss.same is _W24
    assert np.shares_memory(loss.wT, _W24)


def test_pad_linear_ramp_of_integers_floors_as_numpy():
    x = np.array([[1, 5, 2], [7, 3, 9]])
    for kw in ({}, {"end_values": (3, -4)}):
        f = lambda x: np.pad(x, ((1, 2), (2, 3)), mode="linear_ramp", **kw)
        got = adjit.compile(f, backend="numpy")(x)
        assert got.dtype == f(x).dtype
        np.testing.assert_array_equal(got, f(x))


try:
    from scipy.special import multigammaln      # a module's name, as users import it
except ImportError:
    multigammaln = None


def test_multigammaln_imported_by_name():
    sp = pytest.importorskip("scipy.special")
    np.testing.assert_allclose(adjit.compile(lambda a: multigammaln(a, 3))(2.5),
                               multigammaln(2.5, 3), rtol=1e-14)
    np.testing.assert_allclose(adjit.grad(lambda a: multigammaln(a, 3))(2.5),
                               sum(sp.digamma(2.5 - j / 2) for j in range(3)), rtol=1e-12)


def test_ufunc_at_with_a_list_of_traced_positions():
    def f(x, idx):
        acc = np.zeros(3)
        np.add.at(acc, [idx[0], idx[1], idx[0]], x)
        top = np.zeros(3)
        np.maximum.at(top, [idx[0], idx[1], idx[1]], x)
        grid = np.zeros((3, 3))
        np.add.at(grid, ([idx[0], idx[1]], [idx[1], idx[1]]), x[:2])
        return acc, grid, top
    x, idx = np.array([0.3, -0.7, 2.0]), np.array([0, 2])
    for got, want in zip(adjit.compile(f, backend="numpy")(x, idx), f(x, idx)):
        np.testing.assert_allclose(got, want)


_H0 = np.ones((2, 3))


def test_ndarray_dot_of_a_traced_matrix_is_named_first():
    def stored(Wh):
        h = np.zeros((2, 2, 3))
        h[:, 0, :] = np.tanh(_H0.dot(Wh))       # CS231n's rnn_forward idiom
        return np.sum(h)

    def plain(Wh):
        return np.sum(np.tanh(_H0.dot(Wh)))
    for fn in (stored, plain):
        with pytest.raises(adjit.TraceError, match=r"X @ W or np\.dot\(X, W\)"):
            adjit.grad(fn)(np.eye(3))


def test_strings_inside_dict_arguments_are_static():
    """CS231n's batchnorm_forward(x, gamma, beta, bn_param) with bn_param = {"mode": "train",
    "running_mean": ...}: the string selects the program, the arrays are traced."""
    def batchnorm_forward(x, gamma, beta, bn_param):
        mode, rm = bn_param["mode"], bn_param["running_mean"]
        mu = x.mean(axis=0)
        if mode == "train":
            return gamma * (x - mu) / np.sqrt(x.var(axis=0) + 1e-5) + beta, 0.9 * rm + 0.1 * mu
        return gamma * (x - rm) + beta, rm
    x = np.random.default_rng(24).standard_normal((4, 3))
    c = adjit.compile(batchnorm_forward, backend="numpy")
    for mode in ("train", "test"):
        bp = {"mode": mode, "running_mean": np.full(3, 0.5)}
        for got, want in zip(c(x, np.ones(3), np.zeros(3), bp),
                             batchnorm_forward(x, np.ones(3), np.zeros(3), bp)):
            np.testing.assert_allclose(got, want, rtol=1e-14)
    g = adjit.grad(lambda bp, x: np.sum(batchnorm_forward(x, 1.0, 0.0, bp)[0] ** 3))(
        {"mode": "test", "running_mean": np.zeros(3)}, x)
    assert g["mode"] == "test"
    np.testing.assert_allclose(g["running_mean"], -3 * np.sum(x ** 2, axis=0), rtol=1e-12)


class _Nested:
    def __init__(self, cw):
        self.params = {"cw": cw}

    def loss(self, z, y):
        return np.sum(self.params["cw"][y] * z[:, 0])


_NESTED_CFG = {"inner": {"cw": np.array([1.0, 2.0, 0.5])}}


def test_arrays_two_levels_into_a_users_containers_are_indexable():
    cw = np.array([1.0, 2.0, 0.5])
    m = _Nested(cw)
    z, y = np.ones((4, 3)), np.array([0, 2, 1, 1])
    f = lambda z, y: np.sum(_NESTED_CFG["inner"]["cw"][y] * z[:, 0])
    for fn in (m.loss, f):
        assert adjit.compile(fn, backend="numpy")(z, y) == fn(z, y)
        np.testing.assert_allclose(adjit.grad(fn)(z, y)[:, 0], cw[y])
    assert m.params["cw"] is cw and type(_NESTED_CFG["inner"]["cw"]) is np.ndarray
