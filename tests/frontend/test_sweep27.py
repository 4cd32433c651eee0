"""Sweep 27's finds: shuffling traced arrays, ..."""
import warnings

import numpy as np
import pytest
from finite_differences import numgrad as _fd

import adjit
from adjit.ir.errors import AdjitWarning, TraceError


X = np.arange(12.0).reshape(4, 3)


def test_generator_shuffle_of_a_traced_matrix_is_refused_not_repeating_rows():
    # NumPy's generic shuffle path swaps rows through views: rows came back repeated
    def f(x):
        rng = np.random.default_rng(0)
        y = x * 1.0
        rng.shuffle(y)
        return y
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # a user silencing everything still gets the error
        with pytest.raises(TraceError, match=r"test_sweep27.py:\d+ \(rng.shuffle\(y\)\).*"
                                             r"rng.permutation\(x\)"):
            adjit.compile(f)(X)
    assert not any(f[1] is not None and "shuffling" in f[1].pattern
                   for f in warnings.filters)     # the filter lives only while tracing


def test_generator_permutation_of_a_traced_matrix_is_numpys():
    def f(x):
        return np.random.default_rng(0).permutation(x * 2.0)
    with pytest.warns(AdjitWarning, match="draws once"):
        np.testing.assert_array_equal(adjit.compile(f)(X), f(X))


def test_module_shuffle_and_permutation_of_traced_arrays_use_numpys_draws():
    def f(x):
        np.random.seed(3)
        y = x * 1.0
        np.random.shuffle(y)
        return y, np.random.permutation(x)
    with pytest.warns(AdjitWarning, match="draws its order once"):
        got = adjit.compile(f)(X)
    for a, b in zip(got, f(X)):
        np.testing.assert_array_equal(a, b)

    def loss(x):
        np.random.seed(3)
        np.random.shuffle(x)          # the argument itself, in place
        return np.sum(x.sum(0) * np.arange(1.0, 4.0)) + np.sum(x[0] ** 2)
    with pytest.warns(AdjitWarning):
        g = adjit.grad(loss)(X)
    np.testing.assert_allclose(g, _fd(loss, X.copy()), rtol=1e-7)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_run_time_index_errors_name_the_users_line(backend):
    def f(x, i):
        return np.sum(x[i] * 2)
    x = np.arange(4.0)
    with pytest.raises(IndexError, match=r"index 7 is out of bounds.*compiled code of "
                                         r"test_sweep27.py:\d+ \(return np.sum\(x\[i\] \* 2\)\)"):
        adjit.compile(f, backend=backend)(x, np.array(7))
    with pytest.raises(IndexError, match=r"out of bounds.*test_sweep27.py:\d+ .*in the vjp"):
        adjit.grad(f, backend=backend)(x, np.array([1, -9]))
    with pytest.raises(IndexError, match="test_sweep27.py"):
        adjit.vmap(f, in_axes=(None, 0))(x, np.array([0, 1, 9]))


def test_run_time_linalg_errors_name_the_users_line():
    def f(a, b):
        return np.linalg.solve(a, b).sum()
    with pytest.raises(np.linalg.LinAlgError, match=r"compiled code of test_sweep27.py:\d+"):
        adjit.compile(f)(np.zeros((2, 2)), np.ones(2))


def test_vmap_argument_mistakes_say_what_to_do():
    from adjit.ir.errors import OptionError, ShapeError
    X = np.ones((4, 3))
    with pytest.raises(ShapeError, match=r"give None for argument 1 .*in_axes=\(0, None\)"):
        adjit.vmap(lambda a, n: a * n)(X, 3)
    with pytest.raises(ShapeError, match="give an axis from -2 to 1"):
        adjit.vmap(lambda a, b: a + b, in_axes=(2, 0))(X, X)
    for f in (adjit.vmap(lambda x, w: x @ w, in_axes=(0, None), static_argnums=1),
              adjit.compile(lambda x, w: x * w, static_argnums=1)):
        with pytest.raises(TypeError, match=r"static argument 1 \('w'\) is an array \(shape "
                                            r"\(3,\)\), which cannot be static"):
            f(X, X[0])
    for option in ("axis_size", "axis_name"):
        with pytest.raises(OptionError, match=f"adjit.vmap has no {option}.*np.arange"):
            adjit.vmap(lambda x: x, **{option: 3})


def test_a_mapped_length_gets_the_mask_advice_not_static():
    # sweep 27: x[:n] with a mapped n advised static_argnums, impossible for a mapped value
    X = np.random.default_rng(0).normal(size=(4, 8))
    n = np.array([3, 2, 5, 1])
    for f in (lambda x, n: np.sum(x[:n]), lambda x, n: np.sum(x) * np.arange(n).sum()):
        with pytest.raises(TraceError, match=r"'n' is mapped by vmap.*np\.where\(np\.arange"):
            adjit.vmap(f)(X, n)
    masked = adjit.vmap(lambda x, n: np.sum(np.where(np.arange(len(x)) < n, x, 0)))(X, n)
    np.testing.assert_allclose(masked, [X[i, :k].sum() for i, k in enumerate(n)])


@pytest.mark.parametrize("xp, period, x", [
    (np.linspace(0, 2 * np.pi, 8, endpoint=False), 2 * np.pi,
     np.array([5.8, 6.0, 6.2, -1.0, 13.0, 0.3])),
    (np.array([350.0, 10, 90, 180, 270]), -360, np.array([-5.0, 0, 355, 400, 725, 95])),
])
def test_interp_with_a_period_is_numpys(xp, period, x):
    # sweep 27: period= was refused with a hint (np.mod of x) that gave wrong numbers
    fp = np.cos(xp / 7.0)

    def f(x, fp):
        return np.interp(x, xp, fp, period=period)
    np.testing.assert_allclose(adjit.compile(f)(x, fp), f(x, fp), rtol=1e-14)

    def loss(x, fp):
        return np.sum(f(x, fp) ** 2)
    gx, gf = adjit.grad(loss, argnums=(0, 1))(x, fp)
    np.testing.assert_allclose(gx, _fd(lambda x: loss(x, fp), x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gf, _fd(lambda f: loss(x, f), fp), rtol=1e-6, atol=1e-8)


def _segmax(v, labels):
    c = np.full(10, -1e9)
    np.maximum.at(c, labels, v)
    return c


@pytest.mark.parametrize("case", ["segmax", "convolve-shared", "convolve-long-mapped"])
def test_vmap_of_segment_maxima_and_convolutions_does_not_grow_with_the_stack(case):
    # sweep 27: np.maximum.at and np.convolve ran once per element: a 2000-stack compiled
    # for 17 s (JAX: 0.5 s)
    rng = np.random.default_rng(2)
    kernel = rng.normal(size=5)
    if case == "segmax":
        fn, make = _segmax, lambda b: (rng.normal(size=(b, 30)), rng.integers(-10, 10, (b, 30)))
    elif case == "convolve-shared":
        fn = lambda x: np.convolve(x, kernel, mode="same")      # noqa: E731
        make = lambda b: (rng.normal(size=(b, 40)),)            # noqa: E731
    else:                                # a kernel past _SHIFTED_TAPS, mapped like the signal
        fn = lambda x, k: np.convolve(x, k, mode="full")        # noqa: E731
        make = lambda b: (rng.normal(size=(b, 40)), rng.normal(size=(b, 20)))  # noqa: E731
    sizes = []
    for b in (3, 30):
        args = make(b)
        f = adjit.vmap(fn)
        np.testing.assert_allclose(f(*args), np.stack([fn(*(a[i] for a in args))
                                                       for i in range(b)]), rtol=1e-12)
        sizes.append(len(f.lower(*args).graph))
        loss = lambda x, *rest: np.sum(np.tanh(f(x, *rest)))     # noqa: E731
        g = adjit.grad(loss)(*args)
        np.testing.assert_allclose(g, _fd(lambda x: loss(x, *args[1:]), args[0]),
                                   rtol=1e-6, atol=1e-6)
    assert sizes[0] == sizes[1]


def test_vmap_of_maximum_at_keeps_an_out_of_range_position_an_error():
    # positions are moved into each element's stretch of one array: 10 in a 10-array must not
    # land in the next element's
    labels = np.zeros((3, 4), np.int64)
    labels[1, 2] = 10
    with pytest.raises(IndexError, match="out of bounds"):
        adjit.vmap(_segmax)(np.ones((3, 4)), labels)


@pytest.mark.parametrize("edge_order", [1, 2])
def test_gradient_with_traced_coordinates(edge_order):
    # sweep 27: refused with advice (static_argnums) that an array cannot follow
    x = np.sort(np.random.default_rng(0).uniform(0, 3, 12))
    Y = np.sin(x)[:, None] * np.arange(1.0, 4.0)

    def f(Y, x):
        return np.gradient(Y, x, 0.5, edge_order=edge_order)
    for got, ref in zip(adjit.compile(f)(Y, x), f(Y, x)):
        np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-13)

    def loss(Y, x):
        return np.sum(np.tanh(np.gradient(Y, x, axis=0, edge_order=edge_order)))
    gY, gx = adjit.grad(loss, argnums=(0, 1))(Y, x)
    np.testing.assert_allclose(gx, _fd(lambda x: loss(Y, x), x), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gY, _fd(lambda Y: loss(Y, x), Y), rtol=1e-5, atol=1e-7)


def test_scipy_cosm1_and_the_von_mises_densities_of_traced_data():
    sc = pytest.importorskip("scipy.special")
    st = pytest.importorskip("scipy.stats")
    x = np.array([1e-9, 0.1, 1.0, 3.0, -2.0, 1e3])
    np.testing.assert_allclose(adjit.compile(lambda x: sc.cosm1(x))(x), sc.cosm1(x),
                               rtol=1e-15)
    assert adjit.gradcheck(lambda x: np.sum(sc.cosm1(x)), x[1:5]) < 1e-6
    xs = np.array([0.3, -1.0, 2.0])
    for dist, shape in ((st.vonmises, 1.5), (st.vonmises_line, 2.0)):
        def f(x, loc, dist=dist, shape=shape):
            return np.sum(dist.logpdf(x, shape, loc=loc))
        np.testing.assert_allclose(adjit.compile(f)(xs, 0.2), f(xs, 0.2), rtol=1e-14)
        assert adjit.gradcheck(f, xs, 0.2) < 1e-6
