"""Regressions from the eleventh session (sweep 22)."""
import numpy as np
import pytest

import adjit
from finite_differences import numgrad as _numgrad


def _thomas(a, b, c, d):
    n = len(d)
    cp, dp, x = np.zeros(n), np.zeros(n), np.zeros(n)
    cp[0] = c[0] / b[0]
    dp[0] = d[0] / b[0]
    for i in range(1, n):
        m = b[i] - a[i] * cp[i - 1]
        cp[i] = c[i] / m
        dp[i] = (d[i] - a[i] * dp[i - 1]) / m
    x[-1] = dp[-1]
    for i in range(n - 2, -1, -1):          # back substitution: written last to first
        x[i] = dp[i] - cp[i] * x[i + 1]
    return x


def test_elements_written_last_to_first_are_joined_in_order_without_a_gather():
    rng = np.random.default_rng(0)
    n = 40
    a, c, d = rng.normal(size=(3, n))
    b = 4 + rng.random(n)
    loss = lambda b: np.sum(_thomas(a, b, c, d) ** 2)
    np.testing.assert_allclose(adjit.compile(lambda b: _thomas(a, b, c, d))(b),
                               _thomas(a, b, c, d), rtol=1e-13)
    g = adjit.grad(loss)
    np.testing.assert_allclose(g(b), _numgrad(loss, b), rtol=1e-6, atol=1e-9)
    ops = [g.lower(b).graph[n]["op"] for n in g.lower(b).graph.nodes()]
    # the writes were joined in the array's order: no gather, so no scatter in the backward
    # and no guards for cotangents that might be structural zeros (they are not)
    assert "gather" not in ops and "scatter_add" not in ops and "where" not in ops


@pytest.mark.parametrize("order", ["reversed", "shuffled", "pairs", "scattered"])
def test_writes_in_any_order_read_back_as_numpy(order):
    rng = np.random.default_rng(1)
    n = 30
    if order == "reversed":
        keys = [slice(i, i + 1) for i in range(n - 1, -1, -1)]
    elif order == "shuffled":
        keys = [int(i) for i in rng.permutation(n)]
    elif order == "pairs":
        keys = [slice(i, i + 2) for i in range(n - 2, -1, -2)]
    else:
        keys = [int(i) for i in rng.choice(n, 12, replace=False)]

    def fill(x):
        y = np.full(n, 0.5)
        for k, key in enumerate(keys):
            y[key] = x[key] * (k + 1.0)
        return y * x

    x = rng.normal(size=n)
    np.testing.assert_array_equal(adjit.compile(fill)(x), fill(x))
    loss = lambda x: np.sum(np.sin(fill(x)))
    np.testing.assert_allclose(adjit.grad(loss)(x), _numgrad(loss, x), rtol=1e-6, atol=1e-9)


_X = np.array([-0.36, 1.2, 1.4, 0.317, 0.414, -0.49])


def _clip_in_place_where(x):
    o = np.zeros(6)
    o[:] = x
    np.clip(o, -0.3, 0.8, out=o, where=x > 0)
    return o


def _clip_into_full_where(x):
    o = np.zeros(6)
    o[:] = x
    o2 = np.full(6, 9.0)
    np.clip(o, -0.3, 0.8, out=o2, where=x > 0)
    return o2


def _clip_constant_into_made_here(x):
    o = np.full(6, 0.5)
    np.clip(np.arange(6.0) - 2, -1, 1, out=o, where=x > 0)
    return o


@pytest.mark.parametrize("fn", [_clip_in_place_where, _clip_into_full_where,
                                _clip_constant_into_made_here])
def test_clip_with_where_into_an_array_made_inside_keeps_its_values(fn):
    np.testing.assert_array_equal(adjit.compile(fn)(_X), fn(_X))
    loss = lambda x: np.sum(fn(x) ** 3)
    np.testing.assert_allclose(adjit.grad(loss)(_X), _numgrad(loss, _X), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("form", [np.sqrt, lambda z: z ** 0.5, lambda z: np.power(z, 0.5)])
@pytest.mark.parametrize("point", [(2.0, 0.0), (0.0, 2.0), (0.0, -2.0), (-1.0, 1.0),
                                   (3.0, -0.5), (1e-3, 0.0)])
def test_complex_sqrt_keeps_its_derivative_on_the_axes(form, point):
    v = np.array(point)
    for part in (np.real, np.imag):
        f = lambda v: part(form(v[0] + 1j * v[1]))
        np.testing.assert_allclose(adjit.grad(f)(v), _numgrad(f, v), rtol=1e-6, atol=1e-8)


def test_complex_sqrt_values_and_signed_zeros_as_numpy():
    z = np.array([0j, complex(-0.0, 0), complex(0, -0.0), complex(-0.0, -0.0), 4, -4,
                  complex(-4, -0.0), 2j, -2j, 1 + 1j, -1 - 1j, complex(-3, 1e-300)])
    got, want = adjit.compile(np.sqrt)(z), np.sqrt(z)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got.imag), np.signbit(want.imag))


def test_a_numpy_complex128_base_is_not_a_weak_python_number():
    z = np.array([1 + 2j, -0.5 + 0.25j], np.complex64)
    f = lambda z: np.complex128(1 - 1j) ** z
    assert adjit.compile(f)(z).dtype == f(z).dtype == np.complex128
    g = lambda z: (1 - 1j) ** z
    assert adjit.compile(g)(z).dtype == g(z).dtype == np.complex64


_NAN_LISTS = [lambda x: np.nanmax([x[0], x[2], x[3]]), lambda x: np.nanmin((x[0], x[1])),
              lambda x: np.nanmax([x[0], 1.5, np.nan]), lambda x: np.nanmax([x, 2 * x], axis=0),
              lambda x: np.nanmedian([x[0], x[1], x[2]]), lambda x: np.nanstd([x[0], x[2]]),
              lambda x: np.ediff1d([x[0], x[2], x[3]]), lambda x: np.trace([[x[0], x[2]],
                                                                          [x[3], x[0]]]),
              lambda x: np.diag([x[0], x[2]]), lambda x: np.einsum("i,i", [x[0], x[2]],
                                                                   [x[3], x[2]]),
              lambda x: np.where([True, False], [x[0], x[2]], 0.0),
              lambda x: np.take([x[0], x[2], x[3]], [2, 0])]


@pytest.mark.parametrize("fn", _NAN_LISTS)
def test_functions_take_lists_of_traced_values(fn):
    x = np.array([0.5, np.nan, 2.0, -1.0])
    got, want = adjit.compile(fn)(x), fn(x)
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, equal_nan=True)


def test_a_real_ufunc_with_where_into_a_complex_out():
    def f(a):
        o = np.zeros(4, complex)
        np.exp(a, out=o, where=a > 0)
        return o
    a = np.array([-1.0, 0.5, 0.2, 0.9])
    got, want = adjit.compile(f)(a), f(a)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("cv", [5.0, -0.0, np.inf, (1.0, -0.0)])
def test_pad_with_constants_keeps_signed_zeros(cv):
    x = np.array([0.0, -0.0, 1.5])
    f = lambda x: np.pad(x, 1, constant_values=cv)
    got, want = adjit.compile(f)(x), f(x)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_complex_asarray_copies_as_numpy_and_full_like_takes_shape():
    z = np.array([0.5 + 1j, -1 + 1j, 2 + 1j])

    def f(z):
        u = z * 1
        same = (np.asarray(u, dtype=np.complex128), np.array(u, dtype=complex, copy=None))
        copies = (np.asarray(u, copy=True), np.asanyarray(u, copy=True))
        u[1] = 5j
        return same + copies + (np.full_like(z, 2 - 1j, shape=(2,)),
                                np.full_like(z.astype(np.complex64), np.complex128(2 - 1j)),
                                np.full_like(z, 1.5, dtype=float))
    for got, want in zip(adjit.compile(f)(z), f(z)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_buffer_methods_take_traced_arguments():
    def rnn(W, x):
        h = np.zeros((3, 2))
        for t in range(1, 3):
            h[t] = np.tanh(x + h[t - 1].dot(W.T))    # h[0] is the zeros block at t = 1
        return np.sum(h)
    W, x = np.array([[0.5, 0.1], [-0.2, 0.4]]), np.array([1.0, 2.0])
    value, grad = adjit.value_and_grad(rnn)(W, x)
    np.testing.assert_allclose(value, rnn(W, x), rtol=1e-13)
    np.testing.assert_allclose(grad, _numgrad(lambda W: rnn(W, x), W), rtol=1e-6)
    f = lambda W: np.zeros((2, 2)).clip(W, 1).sum() + np.arange(4.0).take(
        np.argmax(W, axis=0)).sum() + np.ones(3).max(initial=W[1, 1] * 5)
    np.testing.assert_allclose(adjit.compile(f)(W), f(W), rtol=1e-13)


def test_array_valued_axes_and_shapes():
    U = lambda t: np.array([[np.cos(t), np.sin(t)], [-np.sin(t), np.cos(t)]]) + 0j

    def gate(th):
        st = np.zeros((2, 2))
        st[0, 0] = 1
        return np.tensordot(st, U(th[0]), ((0,), np.arange(1)))
    th = np.array([0.3])
    np.testing.assert_allclose(adjit.compile(gate)(th), gate(th), rtol=1e-13)
    x = np.arange(8.0).reshape(2, 2, 2)
    m = lambda x: (np.moveaxis(x, np.arange(1, 3), [0, 1]), x.reshape(np.array([4, 2])))
    for got, want in zip(adjit.compile(m)(x), m(x)):
        np.testing.assert_array_equal(got, want)


def test_constructors_imported_by_name_follow_traced_writes():
    import _from_numpy_imports as M
    x = np.array([0.3, 0.7])
    for fn in (M.filled, M.complex_filled, M.joined, M.pooled):
        np.testing.assert_allclose(adjit.compile(fn)(x), fn(x), rtol=1e-13)
    assert M.zeros is np.zeros       # the module's names are NumPy's again after tracing


def _bar_stiffness(form, n=12):
    ke = np.array([[1.0, -1.0], [-1.0, 1.0]])

    def energy(E):
        K = np.zeros((n, n))
        for e in range(n - 1):
            d = np.array([e, e + 1])
            if form == "slice":
                K[e:e + 2, e:e + 2] += E[e] * ke
            elif form == "ix":
                K[np.ix_(d, d)] += E[e] * ke
            else:
                np.add.at(K, (np.repeat(d, 2), np.tile(d, 2)), E[e] * ke.ravel())
        return np.sum(K ** 2) + K[3, 4]
    return energy


@pytest.mark.parametrize("form", ["slice", "ix", "add.at"])
def test_element_assembly_reads_and_writes_only_the_element_block(form):
    energy = _bar_stiffness(form)
    E = 1.0 + np.arange(11) * 0.1
    g = adjit.value_and_grad(energy, backend="numpy")
    value, grad = g(E)
    np.testing.assert_allclose(value, energy(E), rtol=1e-13)
    np.testing.assert_allclose(grad, _numgrad(energy, E), rtol=1e-6)
    graph = g.lower(E).graph
    full = [n for n in graph.nodes() if graph[n]["op"] in ("gather", "scatter_add", "add")
            and int(np.prod(graph[n]["shape"])) == 144]
    # one gather placing the writes (and its scatter in the backward), not one per element
    assert len(full) <= 2


def test_add_at_with_repeated_positions_in_a_loop():
    def f(w):
        L = np.zeros((6, 6))
        for r in range(3):
            np.add.at(L, ([0, 1, 0, 5], [2, 2, 2, 0]), w * (r + 1.0))
            np.subtract.at(L, ([1, 1], [2, 2]), w[:2])
        return L
    w = np.array([0.5, -1.0, 2.0, 3.0])
    np.testing.assert_array_equal(adjit.compile(f)(w), f(w))
    loss = lambda w: np.sum(np.sin(f(w)))
    np.testing.assert_allclose(adjit.grad(loss)(w), _numgrad(loss, w), rtol=1e-6)


def test_numpy_polynomial_evaluation_at_traced_points():
    import numpy.polynomial.chebyshev as C
    import numpy.polynomial.polynomial as P
    x, y = np.array([0.3, -0.5, 0.9]), np.array([0.1, 0.2, -0.7])
    c2, c1 = np.arange(1.0, 7.0).reshape(3, 2), np.array([1.0, -2.0, 0.5])
    for f in (lambda x: C.chebval2d(x, y, c2), lambda x: C.chebgrid2d(x, y, c2),
              lambda x: P.polyvalfromroots(x, c1), lambda x: P.polyval(x, c2),
              lambda x: P.polyval2d(x, y, c2), lambda x: C.chebval(x, x)):
        got, want = adjit.compile(f)(x), f(x)
        assert np.shape(got) == np.shape(want)
        np.testing.assert_allclose(got, want, rtol=1e-13)
        loss = lambda x: np.sum(f(x) ** 2)
        np.testing.assert_allclose(adjit.grad(loss)(x), _numgrad(loss, x), rtol=1e-6)


def test_defaults_skipped_by_a_keyword_call_stay_python_values():
    def loss(W, X, training=True, rate=0.1):
        h = X @ W
        if training:
            h = h * (1 - rate)
        return np.sum(h ** 2)
    W, X = np.full(4, 0.5), np.eye(4)
    np.testing.assert_allclose(adjit.grad(loss)(W, X, rate=0.5), [0.25] * 4)
    c = adjit.compile(loss)
    assert c(W, X, rate=0.5) == loss(W, X, rate=0.5)
    assert c(W, X, rate=0.7) == loss(W, X, rate=0.7)      # rate stays a traced argument

    def layers(W, n_layers=2, scale=1.0):
        for _ in range(n_layers):
            W = np.tanh(W) * scale
        return W.sum()
    assert adjit.compile(layers)(W, scale=2.0) == layers(W, scale=2.0)


def test_tan_is_numpys_tan():
    x = np.linspace(-1.4, 1.4, 9)
    np.testing.assert_array_equal(adjit.compile(np.tan, backend="numpy")(x), np.tan(x))
    np.testing.assert_allclose(adjit.grad(lambda x: np.sum(np.tan(x)))(x), 1 / np.cos(x) ** 2,
                               rtol=1e-13)


def test_frozen_scipy_norm_and_its_quantiles():
    st = pytest.importorskip("scipy.stats")
    x = np.array([-1.0, 0.3, 2.0])
    for f in (lambda x: st.norm(0.5, 1.5).logpdf(x), lambda x: st.norm(x[0], 2.0).sf(x),
              lambda x: st.norm(loc=x[1], scale=1.5).pdf(x),
              lambda x: st.norm.ppf(np.array([0.1, 0.5, 0.99]), x, 1.5),
              lambda x: st.norm.isf(np.array([1e-10, 0.5, 0.9]), 0.0, np.abs(x) + 1)):
        np.testing.assert_allclose(adjit.compile(f)(x), f(x), rtol=1e-12)
        loss = lambda x: np.sum(f(x))
        np.testing.assert_allclose(adjit.grad(loss)(x), _numgrad(loss, x), rtol=1e-5)
    assert "logpdf" not in type(st.norm).__dict__     # SciPy's own class again after tracing


_COMPLEX_STORES = {
    "full": lambda x: np.full((2, 3), x[1] * 1j),
    "full_like": lambda x: np.full_like(x * 1j, x[1] * 1j),
    "fill_diagonal": lambda x: (lambda u: (np.fill_diagonal(u, x[:2] * 1j), u)[1])(
        np.zeros((2, 2), complex)),
    "put": lambda x: (lambda u: (np.put(u, [0, 2], x[:2] * 1j), u)[1])(np.zeros(4, complex)),
    "copyto where": lambda x: (lambda u: (np.copyto(u, x * (1 + 1j), where=x > 0.7), u)[1])(
        np.ones(3, complex)),
    "putmask": lambda x: (lambda u: (np.putmask(u, x > 0.7, x * 1j), u)[1])(np.ones(3, complex)),
    "add.at": lambda x: (lambda u: (np.add.at(u, [0, 0, 2], x * 1j), u)[1])(np.zeros(3, complex)),
    "subtract.at": lambda x: (lambda u: (np.subtract.at(u, [1, 1], x[:2] * (2 - 1j)), u)[1])(
        np.ones(3, complex)),
    "trace": lambda x: (np.outer(x, x) * 1j).trace(),
    "diagonal": lambda x: (np.outer(x, x) * (1 - 1j)).diagonal(),
    "repeat": lambda x: (x * 1j).repeat(2),
    "take": lambda x: (x * 1j).take([2, 0]),
    "fill": lambda x: (lambda z: (z.fill(x[0] * 1j), z)[1])(x * 1j),
}


@pytest.mark.parametrize("name", sorted(_COMPLEX_STORES))
def test_complex_stores_and_methods(name):
    f = _COMPLEX_STORES[name]
    x = np.array([0.5, 1.0, 2.0])
    got, want = adjit.compile(f)(x), f(x)
    assert np.result_type(got) == np.result_type(want) and np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-13)
    loss = lambda x: np.sum(np.abs(f(x) + 0.3) ** 2)
    np.testing.assert_allclose(adjit.grad(loss)(x), _numgrad(loss, x), rtol=1e-6)


def test_result_type_of_traced_arrays_and_object_dtypes_refused():
    def f(x, t):
        assert np.result_type(x, np.float32) == np.float64
        assert np.result_type(x.astype(np.float32), t) == np.float32
        return x.astype(np.result_type(x, np.float32))
    np.testing.assert_array_equal(adjit.compile(f)(np.ones(3), 2.0), np.ones(3))
    with pytest.raises(adjit.UnsupportedError, match="object"):
        adjit.compile(lambda x: x.astype(object))(np.ones(3))


def test_np_array_with_ndmin_and_copy_none_is_a_view():
    def f(x):
        u = x * 1.0
        c, d = np.array(u, copy=None, ndmin=2), np.array(u, ndmin=2)
        u[1] = 5.0
        return c * 1, d
    x = np.array([0.5, -1.0, 2.0])
    for got, want in zip(adjit.compile(f)(x), f(x)):
        np.testing.assert_array_equal(got, want)


def test_state_left_in_outside_attributes_warns():
    class Momentum:
        def __init__(self):
            self.m = None

        def update(self, w, g):
            if self.m is None:
                self.m = np.zeros(np.shape(g))
            self.m = 0.9 * self.m + g
            return w - 0.1 * self.m

    opt = Momentum()
    loss = lambda w: np.sum(w ** 2)
    step = adjit.compile(lambda w: opt.update(w, adjit.grad(loss)(w)))
    with pytest.warns(adjit.AdjitWarning, match="opt.m"):
        step(np.ones(3))

    class Net:
        def __init__(self):
            self.W = np.ones(3)

        def loss(self, W, x):
            return np.sum((W * x) ** 2)
    net = Net()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        adjit.grad(net.loss)(net.W, np.ones(3))
        adjit.grad(lambda p: np.sum(p["a"] ** 2))({"a": np.ones(2)})


def test_large_array_keys_fail_as_numpy_and_choose_of_a_made_array():
    def bad(x):
        K = np.zeros((1100, 1000))
        K[0, 0] = x[0]
        return K[[1, 2, 3], [1, 2]]
    with pytest.raises(adjit.ShapeError, match="broadcast"):
        adjit.compile(bad)(np.ones(2))

    def out_of_bounds(x):
        A = np.zeros((5, 5))
        A[[1, 5]] = x[0]
        return A
    with pytest.raises(adjit.ShapeError, match=r"shape \(5, 5\)"):
        adjit.compile(out_of_bounds)(np.ones(2))
    x = np.arange(8.0)
    f = lambda x: np.array([0, 1, 1, 0]).choose([x[:4], x[4:]])
    np.testing.assert_array_equal(adjit.compile(f)(x), f(x))


def test_isin_of_traced_values():
    x = np.array([0.0, 1.0, 2.5, np.nan, -1.0, 1.0])
    for f in (lambda x: np.isin(x, [0.0, 1.0]), lambda x: np.isin(x, [2.5, np.nan], invert=True),
              lambda x: np.isin(x.reshape(2, 3), np.array([[1.0], [-1.0]])),
              lambda x: np.isin(x, x[:2]), lambda x: np.isin(x, []),
              lambda x: np.isin(x, [x[4], 7.0])):
        got, want = adjit.compile(f)(x), f(x)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    g = adjit.grad(lambda x: np.sum(np.where(np.isin(x, [1.0]), x * 2, x)))
    np.testing.assert_array_equal(g(np.array([1.0, 2.0])), [2.0, 1.0])
