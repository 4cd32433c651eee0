"""Regressions from the ninth user-style sweep: each case once gave a wrong number, crashed on
valid code, or failed with an error that did not name the user's line."""
import types

import numpy as np
import pytest

import adjit

RNG = np.random.default_rng(9)
HOLDER = types.SimpleNamespace(table=np.arange(20.0))
TABLE = np.arange(40.0)
BACKENDS = ("numpy", "numba")


# -- wrong numbers -----------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_row_picked_by_a_0d_index_is_a_copy(backend):
    """x[np.argmax(...)] indexes with a 0-d integer array, which NumPy answers with a view; a
    fused op writing out= into it changed the caller's x and the result."""
    x = np.ones((3, 4)) + np.arange(3)[:, None]
    w = np.arange(4.0)
    keep = x.copy()
    cases = [lambda a: (a[a.sum(1).argmax()] * w).sum() + a.sum(),
             lambda a: np.exp(a[np.argmax(a.sum(1)), 1:]).sum() + a.sum(),
             lambda a: (np.exp(a)[np.array(1)] * w).sum() + np.exp(a).sum(),
             lambda a: np.sum(np.take(a, np.array(1), axis=0) * w) + a.sum()]
    for fn in cases:
        c = adjit.compile(fn, backend=backend)
        for _ in range(2):
            np.testing.assert_allclose(c(x), fn(keep), rtol=1e-12)
        np.testing.assert_array_equal(x, keep)
        assert adjit.gradcheck(fn, x) < 1e-6


@pytest.mark.parametrize("backend", BACKENDS)
def test_vjp_of_an_output_returned_twice_or_used_by_another(backend):
    x, o = np.arange(3.0), np.ones(3)
    vjp = lambda f: adjit.vjp(f, x, backend=backend)[1]((o, o))[0]  # noqa: E731
    np.testing.assert_allclose(vjp(lambda a: (a, a)), 2 * o)
    np.testing.assert_allclose(vjp(lambda a: (lambda s: (s, s))(np.sin(a))), 2 * np.cos(x))
    np.testing.assert_allclose(vjp(lambda a: (a * 2, a)), 3 * o)
    j = adjit.jacobian(lambda a: (lambda s: (s, 2 * s))(np.sum(np.sin(a))),
                       backend=backend)(np.arange(6.0))
    np.testing.assert_allclose(j[0], np.cos(np.arange(6.0)))
    np.testing.assert_allclose(j[1], 2 * np.cos(np.arange(6.0)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_hessian_of_parameters_that_are_added(backend):
    """The gradients of a and b in f(a + b) are one value: the reverse-mode Jacobian of the
    gradient took only one of the two seeds."""
    a, b = np.array([0.1, 0.5, 0.9]), np.array([0.3, -0.2, 0.4])
    h = adjit.hessian(lambda a, b: np.sum(np.sin(a + b)), argnums=(0, 1), backend=backend)(a, b)
    for i in range(2):
        for j in range(2):
            np.testing.assert_allclose(h[i][j], np.diag(-np.sin(a + b)), atol=1e-15)
    hp = adjit.hessian(lambda p: np.sum(np.sin(p["a"] + p["b"])), backend=backend)(
        {"a": a, "b": b})
    np.testing.assert_allclose(hp["a"]["a"], np.diag(-np.sin(a + b)), atol=1e-15)
    h2 = adjit.hessian(lambda a, b: np.sum(np.exp(a - b)), argnums=(0, 1), backend=backend)(a, b)
    np.testing.assert_allclose(h2[1][0], np.diag(-np.exp(a - b)))


# -- valid code that was refused ---------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_max_over_a_nonempty_axis_of_an_empty_batch(backend):
    x = np.zeros((0, 3))
    assert adjit.compile(lambda a: np.max(a, axis=1), backend=backend)(x).shape == (0,)
    assert adjit.compile(lambda a: adjit.log_softmax(a, axis=1), backend=backend)(x).shape == \
        (0, 3)
    with pytest.raises(adjit.ShapeError, match="axis of length 0 at .*test_sweep9"):
        adjit.compile(lambda a: np.max(a, axis=0), backend=backend)(x)


def test_boolean_indices_follow_numpy():
    x = np.arange(12.0).reshape(3, 4)
    c = lambda f: adjit.compile(f, backend="numpy")(x)  # noqa: E731
    assert c(lambda a: a[True]).shape == (1, 3, 4)
    np.testing.assert_array_equal(c(lambda a: a[..., np.array([True, False, True, True])]),
                                  x[..., [0, 2, 3]])
    for f in (lambda a: a[np.array([True, False])], lambda a: a[:, [True, False]],
              lambda a: a[np.ones((2, 4), bool)]):
        with pytest.raises(adjit.ShapeError, match="boolean index of shape"):
            c(f)
    with pytest.raises(adjit.UnsupportedError, match="selects nothing"):
        c(lambda a: a[False])


def test_trace_time_checks_name_the_line():
    x = np.arange(12.0).reshape(3, 4)
    c = lambda f: adjit.compile(f, backend="numpy")(x)  # noqa: E731
    table = [(lambda a: a.sum(axis=(0, 0)), adjit.ShapeError, "duplicate value in axis"),
             (lambda a: a[np.array([0, 7])], adjit.ShapeError, "index 7 is out of bounds"),
             (lambda a: a[:, [0, -5]], adjit.ShapeError, "index -5 is out of bounds for axis 1"),
             (lambda a: np.einsum("ij->k", a), adjit.ShapeError, "'k' does not appear"),
             (lambda a: np.pad(a, -1), adjit.ShapeError, "negative"),
             (lambda a: np.maximum(a * 1j, 0), adjit.UnsupportedError, "np.maximum of complex"),
             (lambda a: a[:a.argmax()], adjit.TraceError, "slice bound.*adjit.where"),
             (lambda a: print(f"{a.sum():.3f}"), adjit.TraceError, "format it outside"),
             # (a module's own TABLE is indexable since sweep 23, HOLDER.table since sweep
             # 24; an array a NumPy function made from it not)
             (lambda a: (TABLE * 2)[a.astype(int)], adjit.TraceError,
              r"np.array\(table\)\[idx\]")]
    for fn, err, msg in table:
        with pytest.raises(err, match=msg + ".*|.*" + msg) as info:
            c(fn)
        assert "test_sweep9.py" in str(info.value), str(info.value)


def test_arrays_computed_inside_the_function_receive_traced_values():
    """A Kalman filter: P = F @ P @ F.T from P = np.eye(2), then P += Q with a traced Q; and
    np.linspace/np.arange/np.ones(3) * 2 filled with traced values."""
    F = np.array([[1.0, 0.1], [0.0, 1.0]])
    H = np.array([[1.0, 0.0]])

    def kf(q, ys):
        P, m, ll = np.eye(2), np.zeros(2), 0.0
        for y in ys:
            m = F @ m
            P = F @ P @ F.T
            P += np.exp(q) * np.eye(2)
            S = H @ P @ H.T + 0.5
            K = P @ H.T / S
            r = y - H @ m
            m = m + K @ r
            P = P - K @ H @ P
            ll = ll - 0.5 * (np.log(S[0, 0]) + r[0] ** 2 / S[0, 0])
        return ll
    ys = RNG.normal(size=(6, 1))
    v, g = adjit.value_and_grad(kf, backend="numpy")(0.1, ys)
    np.testing.assert_allclose(v, kf(0.1, ys), rtol=1e-12)
    assert adjit.gradcheck(kf, 0.1, ys) < 1e-6

    def fill(x):
        t = np.linspace(0.0, 1.0, 3)
        t[0] = x[0]
        u = np.arange(3.0)
        u[1] = x[1]
        v = np.ones(3) * 2.0
        v[2] = x[2]
        return np.sum(t * x) + np.sum(u * v)
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(adjit.compile(fill, backend="numpy")(x), fill(x))
    assert adjit.gradcheck(fill, x) < 1e-6


def test_np_take_from_an_array_made_inside_with_traced_labels():
    table = np.arange(12.0).reshape(4, 3)
    y = np.array([1, 3, 0])
    f = lambda w, y: np.sum(np.take(np.array(table), y, axis=0) * w)  # noqa: E731
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(np.ones((3, 3)), y),
                               np.sum(table[y]))


# -- the transformations -----------------------------------------------------------------------
def test_jacobian_hessian_hvp_take_keyword_only_configuration_and_are_cached():
    x = np.array([0.1, 0.5, 0.9])
    np.testing.assert_allclose(adjit.jacobian(lambda a, *, k=1.0: a * k)(x, k=3.0),
                               3 * np.eye(3))
    f = lambda a, *, k=1.0: np.sum(a ** 3) * k  # noqa: E731
    np.testing.assert_allclose(adjit.hessian(f)(x, k=3.0), np.diag(18 * x))
    np.testing.assert_allclose(adjit.hvp(f)(x, x, k=3.0), 18 * x * x)
    assert adjit.hessian(f) is adjit.hessian(f)
    assert adjit.jacobian(f) is adjit.jacobian(f)
    assert adjit.hvp(f) is adjit.hvp(f)


def test_hessian_with_aux_and_the_errors_of_hvp():
    x = np.array([0.1, 0.5, 0.9])
    h, aux = adjit.hessian(lambda a: (np.sum(a ** 3), a * 2), has_aux=True)(x)
    np.testing.assert_allclose(h, np.diag(6 * x))
    np.testing.assert_allclose(aux, 2 * x)
    with pytest.raises(adjit.OptionError, match="has_aux"):
        adjit.hvp(lambda a: np.sum(a ** 3), has_aux=True)
    with pytest.raises(TypeError, match="vector v"):
        adjit.hvp(lambda a: np.sum(a ** 3))(x)
    with pytest.raises(adjit.OptionError, match="static_argnums"):
        adjit.grad(lambda a: np.sum(a), static_argnums=1.0)
    with pytest.raises(adjit.GradError, match="returned None"):
        adjit.grad(lambda a: None)(x)


def test_a_budget_at_the_lowest_peak_the_error_names_is_met():
    """BudgetError named a lowest peak (found among even splits) that the search's model had
    missed, then refused budgets above it."""
    rng = np.random.default_rng(1)

    def f(a, b, c, d):
        return np.sum((a + b) * c - d / (1 + a * a) + np.tanh(a * b * c * d))
    args = [rng.normal(size=(3, 1, 5)), rng.normal(size=(4, 1)), rng.normal(size=(5,)),
            rng.normal(size=(1, 1, 1))]
    want = adjit.value_and_grad(f, 2, backend="numpy")(*args)
    for budget in (1, 1500):
        try:
            prog = adjit.value_and_grad(f, 2, backend="numpy", memory_budget=budget)
            got = prog(*args)
        except adjit.BudgetError as e:
            low = int(str(e).split("at least memory_budget=")[1].split(",")[0])
            got = adjit.value_and_grad(f, 2, backend="numpy", memory_budget=low)(*args)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def test_static_configuration_1_and_1p0_trace_apart():
    i = np.arange(3)
    f = adjit.compile(lambda a, *, k: a * k, backend="numpy")
    assert f(i, k=1).dtype == np.int64 and f(i, k=1.0).dtype == np.float64
    g = adjit.compile(lambda a, k: a * k[0], static_argnums=1, backend="numpy")
    assert g(i, (1,)).dtype == np.int64 and g(i, (1.0,)).dtype == np.float64
    x = np.array([1.0, 2.0])
    h = adjit.grad(lambda a, *, mode: np.sum(a ** 2) if isinstance(mode, int) else np.sum(a ** 3))
    np.testing.assert_allclose(h(x, mode=1), 2 * x)
    np.testing.assert_allclose(h(x, mode=1.0), 3 * x ** 2)


def test_batched_trace_and_diagonal():
    c = RNG.normal(size=(2, 3, 4))
    cases = [lambda a: np.trace(a), lambda a: np.diagonal(a, axis1=1, axis2=2),
             lambda a: np.trace(a, axis1=1, axis2=2), lambda a: a.diagonal(1, 0, 2),
             lambda a: a.trace(0, 2, 1), lambda a: np.linalg.trace(a),
             lambda a: np.linalg.diagonal(a), lambda a: np.trace(a, -1, 2, 0)]
    for fn in cases:
        np.testing.assert_allclose(adjit.compile(fn, backend="numpy")(c), fn(c))
        assert adjit.gradcheck(lambda a: np.sum(np.sin(fn(a))), c) < 1e-6

    def write_after(a):
        a = a.copy()
        d = np.diagonal(a, axis1=1, axis2=2)   # a read-only view: it shows the write below
        a[:, 0, 0] = 7.0
        return d * 1
    np.testing.assert_allclose(adjit.compile(write_after, backend="numpy")(c), write_after(c))


def test_einsum_broadcasts_length_1_axes_and_takes_the_interleaved_form():
    a, b = RNG.normal(size=(2, 3, 4)), RNG.normal(size=(1, 4, 5))
    m = RNG.normal(size=(3, 4))
    cases = [(lambda a, b: np.einsum("...ij,...jk->...ik", a, b), (a, b)),
             (lambda a, b: np.einsum("bij,bjk->bik", a, b), (a, b)),
             (lambda a, b: np.einsum("...ij,...jk->...ik", a, b),
              (RNG.normal(size=(2, 1, 3, 4)), RNG.normal(size=(1, 5, 4, 2)))),
             (lambda c: np.einsum(c, [0, 1], c, [2, 1], [0, 2]), (m,)),
             (lambda c: np.einsum(c, [0, 1], c, [2, 1]), (m,)),
             (lambda c: np.einsum(c, [Ellipsis, 1], [Ellipsis]), (m,))]
    for fn, args in cases:
        np.testing.assert_allclose(adjit.compile(fn, backend="numpy")(*args), fn(*args))
        assert adjit.gradcheck(lambda *x: np.sum(np.sin(fn(*x))), *args,
                               argnums=tuple(range(len(args)))) < 1e-6
    with pytest.raises(adjit.ShapeError, match="axis of '...' has sizes 2 and 3"):
        adjit.compile(lambda a, b: np.einsum("...ij,...jk->...ik", a, b), backend="numpy")(
            a, RNG.normal(size=(3, 4, 5)))


NUMPY_GAPS = {
    "trunc": lambda a: np.trunc(a), "fix": lambda a: np.fix(a),
    "nanprod": lambda a: np.nanprod(np.where(a > 2.5, np.nan, a)),
    "nancumsum": lambda a: np.nancumsum(np.where(a > 2.5, np.nan, a)),
    "nancumprod": lambda a: np.nancumprod(np.where(a > 2.5, np.nan, a), axis=1),
    "unstack": lambda a: np.stack(np.unstack(a, axis=1)) if hasattr(np, "unstack") else a,
    "broadcast_arrays": lambda a: np.stack(np.broadcast_arrays(a, a[:1])),
    "diagflat": lambda a: np.diagflat(a, -1), "delete": lambda a: np.delete(a, [0, 2], axis=1),
    "delete_flat": lambda a: np.delete(a, slice(0, 5)),
    "insert": lambda a: np.insert(a, [1, 3], [[7.0], [8.0]], axis=1),
    "insert_scalar": lambda a: np.insert(a, 1, a[0] * 2, axis=0),
    "insert_flat": lambda a: np.insert(a, [4, 0, 0], a[0, :3]),
    "block": lambda a: np.block([[a, np.eye(2, 4)], [np.zeros((1, 4)), a[:1] * 2]]),
    "linspace": lambda a: np.linspace(a[0], a[1], 5, axis=1),
    "linspace_open": lambda a: np.linspace(0.0, a[0, 0], 4, endpoint=False),
    "take_clip": lambda a: np.take(a, [0, 9, -9], axis=1, mode="clip"),
    "take_wrap": lambda a: a.take([0, 9, -9], mode="wrap"),
}


@pytest.mark.parametrize("name", sorted(NUMPY_GAPS))
def test_numpy_functions_added_in_sweep9(name):
    fn = NUMPY_GAPS[name]
    a = RNG.uniform(0.5, 3.0, size=(2, 4))
    np.testing.assert_allclose(adjit.compile(fn, backend="numpy")(a), fn(a), rtol=1e-12)
    if name not in ("trunc", "fix"):
        assert adjit.gradcheck(lambda x: np.sum(np.sin(fn(x))), a) < 1e-6


def test_unsigned_sums_are_uint64_and_missing_methods_are_named():
    u8 = np.array([1, 2, 250], np.uint8)
    for fn in (np.sum, np.cumsum, np.prod, np.cumprod):
        assert adjit.compile(fn, backend="numpy")(u8).dtype == fn(u8).dtype
    with pytest.raises(AttributeError, match="x.byteswap is not supported.*test_sweep9"):
        adjit.compile(lambda a: a.byteswap(), backend="numpy")(np.ones(3))
    # shifts of integers trace since the seventh session (test_sweep16); of floats, NumPy
    # refuses them too
    with pytest.raises(adjit.UnsupportedError, match="left_shift of float64"):
        adjit.compile(lambda a: a << 1, backend="numpy")(np.arange(3.0))


def test_scipy_routines_that_need_concrete_arrays_are_named():
    linalg = pytest.importorskip("scipy.linalg")
    stats = pytest.importorskip("scipy.stats")
    special = pytest.importorskip("scipy.special")
    t = np.array([0.5, 1.0])
    y = np.array([1.0, 2.0, 0.5])
    m = np.eye(3) * 2.0 + 0.1
    table = [(lambda a: np.sum(linalg.solve_triangular(m * a[0], y, lower=True)),
              "scipy.linalg.solve_triangular"),
             (lambda a: stats.iqr(y * a[0]), "scipy.stats.iqr"),
             (lambda a: np.sum(linalg.expm(m * a[1])), "scipy.linalg.expm")]
    for fn, name in table:   # (the distributions' methods trace: test_scipy_stats.py)
        advice = "statistic or log-density written out" if "stats" in name else "np.linalg"
        with pytest.raises(adjit.AdjitError, match=name + r".*test_sweep9.py:\d+.*" + advice):
            adjit.grad(fn)(t)
    # an error of the user's own inside a SciPy function adjit follows keeps its message
    with pytest.raises(adjit.ShapeError, match="axis 3 is out of bounds"):
        adjit.grad(lambda a: np.sum(special.logsumexp(a, axis=3)))(t)


def test_lower_and_trace_take_keyword_only_configuration():
    x = np.ones(3)
    g = adjit.grad(lambda a, *, k=1.0: np.sum(a * k), backend="numpy")
    np.testing.assert_allclose(g(x, k=2.0), 2 * x)
    assert "2.0" in g.lower(x, k=2.0).source
    gr = adjit.compile(lambda a, *, k=1.0: a * k, backend="numpy").trace(x, k=2.0)
    assert any(gr[n]["op"] == "const" and gr[n]["attrs"]["value"] == 2.0 for n in gr.nodes())
    assert len(adjit.trace(lambda a, n: a * n, x, 3, static_argnums=1).inputs) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_boolean_arithmetic_is_logical_in_kernels(backend):
    x = np.linspace(-1.0, 1.0, 5000)     # large enough for a numba kernel
    cases = [lambda a: ((a > 0) + (a < 0.5)).sum(), lambda a: (a * ((a > 0) + (a > 0.5))).sum(),
             lambda a: ((a > 0) * (a < 0.5)).sum(), lambda a: np.cumsum((a > 0) + (a < 0.5)),
             lambda a: ((a > 0) + True).sum(), lambda a: ((a > 0) + (a < 0.5)).mean()]
    for fn in cases:
        np.testing.assert_allclose(adjit.compile(fn, backend=backend)(x), fn(x), rtol=1e-12)
    g = adjit.grad(lambda a: (a * ((a > 0) + (a > 0.5))).sum(), backend=backend)(x)
    np.testing.assert_allclose(g, (x > 0).astype(float))


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_rules_of_fmax_fmin_and_median(backend):
    v = np.array([1.0, np.nan, 3.0, -np.inf, 2.0])
    a = np.array([[1.0, np.nan, 3.0], [0.5, 2.0, 1.0]])
    cases = [(lambda t: np.fmax(t, 2.0), v), (lambda t: np.fmin(t, 2.0), v),
             (lambda t: np.fmax(t, t[::-1]), v), (lambda t: np.median(t), v),
             (lambda t: np.median(t, axis=1), a), (lambda t: np.median(t, 0, keepdims=True), a)]
    for fn, arg in cases:
        np.testing.assert_array_equal(adjit.compile(fn, backend=backend)(arg), fn(arg))
    y = np.array([1.0, 5.0, 3.0])
    np.testing.assert_allclose(adjit.grad(lambda t: np.sum(np.fmax(t, 2.0)))(y), [0, 1, 1])


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")   # np.matrix's own
@pytest.mark.parametrize("backend", BACKENDS)
def test_other_byte_orders_and_array_subclasses(backend):
    x = np.arange(5000, dtype=">f8") / 100
    f = lambda a: np.sum(np.exp(-a) * 2 + a)  # noqa: E731
    np.testing.assert_allclose(adjit.compile(f, backend=backend)(x), f(x), rtol=1e-12)
    np.testing.assert_allclose(adjit.grad(lambda a: np.sum(a * a), backend=backend)(x), 2 * x)
    with pytest.raises(adjit.TraceError, match="np.matrix.*@"):
        adjit.compile(lambda m: m * m, backend=backend)(np.matrix([[1.0, 2.0], [3.0, 4.0]]))
    with pytest.raises(adjit.TraceError, match="masked array"):
        adjit.compile(lambda m: m * m, backend=backend)(np.ma.array([1.0, 2.0], mask=[0, 1]))


def test_numba_runs_library_calls_as_numpy_code_unless_amortised():
    """A float64 arctan in a kernel calls the C library per element; NumPy's loop is SIMD code:
    such groups run as NumPy code, unless a dozen cheap ops share the call. tanh, exp, log
    are adjit's own vectorised forms in kernels (numba_helpers): those groups are kernels."""
    x64 = RNG.normal(size=(300, 300))
    lower = lambda f, x: adjit.compile(f, backend="numba").lower(x)  # noqa: E731
    assert not lower(lambda a: np.arctan(a) * 2 + a, x64).kernels
    assert lower(lambda a: np.tanh(a) * 2 + a, x64).kernels
    assert lower(lambda a: np.tanh(a) * 2 + a, x64.astype(np.float32)).kernels
    many = lambda a: (np.arctan(a) + a * a * a + 2 * a * a - a / 3 + 1  # noqa: E731
                      + np.abs(a) * np.maximum(a, 0.1) * a - a * 0.5 + a * a)
    assert lower(many, x64).kernels
    for f in (lambda a: np.tanh(a) * 2 + a, lambda a: np.arctan(a) * 2 + a, many):
        np.testing.assert_allclose(adjit.compile(f, backend="numba")(x64), f(x64), rtol=1e-12)


def test_a_python_int_argument_used_as_configuration_points_to_static_argnums():
    a = np.ones((3, 4))
    for fn, args in [(lambda x, axis: np.sum(x, axis=axis), (a, 1)),
                     (lambda x, n: x.reshape(n, -1), (a, 3)), (lambda x, n: x[:n - 1], (a, 3))]:
        with pytest.raises(adjit.TraceError, match=r"Python int.*static_argnums.*keyword-only"):
            adjit.compile(fn, backend="numpy")(*args)
    np.testing.assert_allclose(adjit.compile(lambda x, axis: np.sum(x, axis=axis),
                                             static_argnums=1, backend="numpy")(a, 1), a.sum(1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_python_number_results_come_back_as_python_numbers(backend):
    """A step counter t + 1 returned as a strong int64 array made 0.9 ** t float64 on the next
    step, and float32 parameters float64 with it."""
    def step(w, t, lr):
        t = t + 1
        g = adjit.grad(lambda v: np.sum(v ** 2))(w)
        return w - lr * g * (1 - 0.9 ** t), t
    c = adjit.compile(step, backend=backend)
    w, t = np.ones(3, np.float32), 0
    for k in range(3):
        w, t = c(w, t, 0.1)
        assert w.dtype == np.float32 and type(t) is int and t == k + 1
    assert adjit.compile(lambda x: (x * 2, 0.5, 3), backend=backend)(np.ones(2))[1:] == (0.5, 3)


def test_a_weight_read_at_every_step_holds_one_running_gradient():
    """The gradient of W in an unrolled RNN was summed from T per-step parts at the end (fusion
    had merged the running sum into one group), holding T full-size parts: T x H^2 bytes."""
    H, T, B = 128, 40, 4
    W = RNG.normal(size=(H, H)) * 0.05
    xs = RNG.normal(size=(T, B, H))

    def rnn(W, xs):
        h = np.zeros((xs.shape[1], W.shape[0]))
        hs = np.zeros((len(xs), xs.shape[1], W.shape[0]))
        for t in range(len(xs)):
            h = np.tanh(h @ W + xs[t])
            hs[t] = h
        return np.sum(hs ** 2)
    f = adjit.value_and_grad(rnn, backend="numpy")
    peak = f.lower(W, xs).memory.peak_bytes
    assert peak < 8 * W.nbytes, peak          # was about T * W.nbytes
    # against backpropagation through time written by hand
    v, g = f(W, xs)
    hs, h = [], np.zeros((B, H))
    for t in range(T):
        h = np.tanh(h @ W + xs[t])
        hs.append(h)
    want, dh = np.zeros_like(W), np.zeros((B, H))
    for t in reversed(range(T)):
        dz = (dh + 2 * hs[t]) * (1 - hs[t] ** 2)
        want += (hs[t - 1] if t else np.zeros((B, H))).T @ dz
        dh = dz @ W.T
    np.testing.assert_allclose(v, sum(np.sum(x ** 2) for x in hs), rtol=1e-12)
    np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-12)


def test_vjp_is_taken_at_the_primals_given_to_it():
    x = np.array([0.1, 0.5, 0.9])
    x0 = x.copy()
    _, f = adjit.vjp(np.sin, x)
    x += 1.0                        # the caller moves on before pulling back
    np.testing.assert_allclose(f(np.ones(3))[0], np.cos(x0))
    p = {"w": x0.copy()}
    _, f = adjit.vjp(lambda q: np.sin(q["w"]), p)
    p["w"] = p["w"] * 0
    np.testing.assert_allclose(f(np.ones(3))[0]["w"], np.cos(x0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_where_trap_gives_finite_gradients(backend):
    """np.where(x > 0, f(x), 0) with f infinite or nan where x <= 0: the unselected branch's
    zero cotangent stays zero through f's derivative (JAX and PyTorch give nan)."""
    import warnings
    x = np.array([-1.0, 0.0, 4.0, 2.0])
    cases = [(lambda a: np.sum(np.where(a > 0, np.sqrt(a), 0)), [0, 0, 0.25, 0.5 / np.sqrt(2)]),
             (lambda a: np.sum(np.where(a > 0, a * np.log(a), 0)),
              [0, 0, np.log(4) + 1, np.log(2) + 1]),
             (lambda a: np.sum(np.where(a > 0, 1 / a, 0)), [0, 0, -1 / 16, -1 / 4]),
             (lambda a: np.sum(np.where(a < 3, np.exp(a * 400), 0)),
              [400 * np.exp(-400), 400, 0, 400 * np.exp(800)])]
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # no floating-point warnings from the program
        for fn, want in cases:
            g = adjit.grad(fn, backend=backend)(x)
            np.testing.assert_allclose(g, want, rtol=1e-12)
    # scipy.special.logsumexp takes that path for its overflow fallback
    sp = pytest.importorskip("scipy.special")
    for v in (np.array([-1000.0, -999.0]), np.array([1000.0, 999.0])):
        w = np.exp(v - v.max()) / np.sum(np.exp(v - v.max()))
        np.testing.assert_allclose(adjit.grad(lambda a: sp.logsumexp(a), backend=backend)(v), w)


def test_special_values_of_sigmoid_logaddexp_hypot_and_det():
    z = np.array([-40.0, -25.0, -1.0, 0.0, 1.0, 30.0, 800.0, -800.0])
    want = np.where(z >= 0, 1 / (1 + np.exp(-np.abs(z))), np.exp(-np.abs(z)) /
                    (1 + np.exp(-np.abs(z))))
    np.testing.assert_allclose(adjit.compile(adjit.sigmoid, backend="numpy")(z), want,
                               rtol=1e-15)
    # the derivative is out (1 - out) as in JAX and PyTorch: 1 - out rounds for large x
    e = np.exp(-np.abs(z))
    np.testing.assert_allclose(adjit.grad(lambda a: np.sum(adjit.sigmoid(a)))(z),
                               e / (1 + e) ** 2, rtol=1e-12, atol=1e-15)
    f = lambda a: -np.sum(np.log(adjit.sigmoid(a)))  # noqa: E731
    np.testing.assert_allclose(adjit.compile(f)(z[:2]), 65.0, rtol=1e-9)
    x = np.array([-np.inf, np.inf, -np.inf, 1.0])
    y = np.array([-np.inf, np.inf, 0.0, 1.0])
    for fn in (np.logaddexp, np.logaddexp2):
        np.testing.assert_array_equal(adjit.compile(fn, backend="numpy")(x, y), fn(x, y))
    a = np.array([1e200, 1e-300, np.inf, 3.0, 0.0])
    b = np.array([1.0, 1e-300, np.nan, 4.0, 0.0])
    np.testing.assert_allclose(adjit.compile(np.hypot, backend="numpy")(a, b), np.hypot(a, b))
    s = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 1.0]])     # singular
    np.testing.assert_allclose(adjit.grad(np.linalg.det)(s),
                               [[-2, -2, 2], [1, 1, -1], [0, 0, 0]], atol=1e-12)
    np.testing.assert_allclose(adjit.grad(lambda m: np.linalg.det(m) ** 2)(s), 0, atol=1e-12)


def test_compiled_methods():
    import functools

    class Model:
        def __init__(self):
            self.w = np.ones((3, 3))

        @adjit.compile
        def plain(self, a):
            return self.w @ a

        @functools.partial(adjit.compile, static_argnums=0)
        def static(self, a):
            return self.w @ a
    m = Model()
    np.testing.assert_allclose(m.static(np.ones(3)), [3.0, 3.0, 3.0])
    np.testing.assert_allclose(Model.static(m, np.ones(3)), [3.0, 3.0, 3.0])
    with pytest.raises(adjit.TraceError, match="argument self.*static_argnums=0"):
        m.plain(np.ones(3))


def _masked_updates():
    def one_column(a):
        a = a.copy()
        a[a[:, 0] > 0, 1] = 5.0
        return a

    def columns(a):
        a = a.copy()
        a[:, a[0] > 0] += 1.0
        return a

    def sliced(a):
        a = a.copy()
        a[1:, a[0] > 0] *= 2.0
        return a

    def through_f(a):
        a = a.copy()
        a[..., a[0] > 0] = np.exp(a[..., a[0] > 0])
        return a
    return [one_column, columns, sliced, through_f]


@pytest.mark.parametrize("fn", _masked_updates(), ids=lambda f: f.__name__)
def test_a_traced_mask_beside_constant_indices(fn):
    x = np.array([[1.0, -2.0, 3.0], [-1.0, 5.0, 6.0], [2.0, 0.5, -3.0]])
    np.testing.assert_allclose(adjit.compile(fn, backend="numpy")(x), fn(x))
    assert adjit.gradcheck(lambda a: np.sum(np.sin(fn(a))), x) < 1e-6


def test_repeat_split_and_tuple_indices_as_numpy():
    x = np.arange(4.0)
    cases = [lambda a: np.repeat(a, [1, 0, 2, 3]), lambda a: np.repeat(a.reshape(2, 2), [2, 1], 1),
             lambda a: a[(0, 1), ], lambda a: np.stack(np.split(a, 2.0))]
    for fn in cases:
        np.testing.assert_array_equal(adjit.compile(fn, backend="numpy")(x), fn(x))
    np.testing.assert_allclose(adjit.grad(lambda a: np.sum(np.repeat(a, [1, 0, 2, 3]) ** 2))(x),
                               [0, 0, 8, 18])
    with pytest.raises(adjit.ShapeError, match="counts must be integers"):
        adjit.compile(lambda a: np.repeat(a, 2.5), backend="numpy")(x)
    np.testing.assert_allclose(adjit.compile(lambda a: np.fft.rfft(a), backend="numpy")(x),
                               np.fft.rfft(x), atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_log_gamma_family(backend):
    """gammaln and polygamma (digamma, trigamma, ...) with derivatives of every order, from
    SciPy where installed, else adjit's own series (ir/special.py), checked against known
    values that need neither."""
    import math

    from adjit.frontend import functions as F
    from adjit.ir.special import polygamma_numpy
    euler = 0.5772156649015329
    z = np.array([0.5, 1.0, 2.0, 7.25, 30.0, -0.5, -2.5])
    np.testing.assert_allclose(polygamma_numpy(np.array([1.0, 0.5, 2.0]), 0),
                               [-euler, -euler - 2 * math.log(2), 1 - euler], rtol=1e-14)
    np.testing.assert_allclose(polygamma_numpy(np.array([1.0, 0.5]), 1),
                               [math.pi ** 2 / 6, math.pi ** 2 / 2], rtol=1e-14)
    np.testing.assert_allclose(polygamma_numpy(np.array([1.0]), 2), [-2 * 1.2020569031595942],
                               rtol=1e-14)
    assert list(polygamma_numpy(np.array([0.0, -1.0]), 0)[:1]) == [-np.inf]
    lg = adjit.compile(lambda a: F.gammaln(a), backend=backend)(z)
    np.testing.assert_allclose(lg, [math.lgamma(v) for v in z], rtol=1e-13)
    # d/dx gammaln = digamma: against central differences of math.lgamma
    g = adjit.grad(lambda a: np.sum(F.gammaln(a)), backend=backend)(z)
    fd = [(math.lgamma(v + 1e-6) - math.lgamma(v - 1e-6)) / 2e-6 for v in z]
    np.testing.assert_allclose(g, fd, rtol=1e-7)
    h = adjit.hessian(lambda a: np.sum(F.gammaln(a)), backend=backend)(z[:3])
    np.testing.assert_allclose(np.diag(h), polygamma_numpy(z[:3], 1), rtol=1e-12)
    big = np.linspace(0.1, 40, 5000)         # a kernel on numba
    np.testing.assert_allclose(adjit.compile(lambda a: F.polygamma(0, a), backend=backend)(big),
                               polygamma_numpy(big, 0), rtol=1e-12, atol=1e-13)


def test_scipy_log_gamma_functions_trace():
    sp = pytest.importorskip("scipy.special")
    alpha = np.array([0.5, 2.0, 3.5])
    x = np.array([0.2, 0.3, 0.5])

    def dirichlet_logpdf(a):
        return sp.gammaln(np.sum(a)) - np.sum(sp.gammaln(a)) + np.sum((a - 1) * np.log(x))
    np.testing.assert_allclose(adjit.grad(dirichlet_logpdf)(alpha),
                               sp.digamma(alpha.sum()) - sp.digamma(alpha) + np.log(x))
    f = lambda a: np.sum(sp.betaln(a, a[::-1]) + 0.3 * sp.psi(a))  # noqa: E731
    np.testing.assert_allclose(adjit.compile(f)(alpha), f(alpha), rtol=1e-13)
    assert adjit.gradcheck(f, alpha) < 1e-6


def test_the_log_gamma_family_without_scipy(monkeypatch):
    import math

    from adjit.frontend import functions as F
    from adjit.ir import special
    monkeypatch.setattr(special, "_SCIPY", {"gammaln": None, "polygamma": None})
    z = np.array([0.5, 1.0, 7.25, -2.5, 0.0])
    np.testing.assert_allclose(adjit.compile(lambda a: F.gammaln(a), backend="numpy")(z),
                               [math.lgamma(v) if v else np.inf for v in z], rtol=1e-13)
    g = adjit.grad(lambda a: np.sum(F.gammaln(a[:3])), backend="numpy")(z)
    np.testing.assert_allclose(g[:3], special.polygamma_numpy(z[:3], 0), rtol=1e-13)


def test_escaped_tracers_and_mutated_argument_containers_are_reported():
    class Layer:
        def forward(self, x, w):
            self.output = x @ w
            return self.output
    layer, x, w = Layer(), np.ones((2, 3)), np.ones((3, 2))
    adjit.grad(lambda v: np.sum(layer.forward(x, v)), backend="numpy")(w)
    with pytest.raises(adjit.TraceError, match="trace ended"):
        np.argmax(layer.output, 1)

    def bn(x, gamma, bn_param):
        mu = x.mean(0)
        bn_param["running_mean"] = 0.9 * bn_param["running_mean"] + 0.1 * mu
        return np.sum(gamma * (x - mu) ** 2)
    p = {"running_mean": np.zeros(3)}
    with pytest.warns(adjit.AdjitWarning, match=r"bn_param.*not updated"):
        adjit.grad(bn, argnums=1, backend="numpy")(np.arange(6.0).reshape(2, 3), np.ones(3), p)
    with pytest.raises(adjit.TraceError, match="argument 'n'.*static_argnums"):
        adjit.compile(lambda a, n: np.split(a, n), backend="numpy")(np.ones(4), 2)


def test_overwritten_and_dropped_positions_keep_finite_gradients():
    """sqrt(0) overwritten by x[0] = 1, np.fill_diagonal or dropped by a slice: the zero
    cotangent stays zero through sqrt's derivative (the N-body energy's diagonal)."""
    def s1(x):
        r = np.sqrt(x)
        r[0] = 1.0
        return np.sum(r)

    def s2(x):
        r = np.sqrt(x)
        np.fill_diagonal(r, 1.0)
        return np.sum(r)
    np.testing.assert_allclose(adjit.grad(s1)(np.array([0.0, 1.0, 4.0])), [0, 0.5, 0.25])
    np.testing.assert_allclose(adjit.grad(s2)(np.array([[0.0, 1.0], [4.0, 0.0]])),
                               [[0, 0.5], [0.25, 0]])
    np.testing.assert_allclose(adjit.grad(lambda x: np.sum(np.sqrt(x)[1:]))(
        np.array([0.0, 1.0, 4.0])), [0, 0.5, 0.25])

    def nbody(pos, m):
        d = pos[:, None, :] - pos[None, :, :]
        r = np.sqrt((d ** 2).sum(-1))
        np.fill_diagonal(r, 1.0)
        e = m[:, None] * m[None] / r
        e[np.diag_indices(len(m))] = 0
        return -0.5 * e.sum()
    pos = RNG.normal(size=(4, 3))
    assert adjit.gradcheck(nbody, pos, np.ones(4)) < 1e-6


def test_logaddexp_and_sigmoid_keep_float32():
    f32 = np.array([0.1, 0.2, 0.3], np.float32)
    for fn in (lambda x: np.logaddexp(x, 0.0), lambda x: np.logaddexp(0.0, x),
               lambda x: np.logaddexp2(x, 1), adjit.sigmoid):
        assert adjit.compile(fn, backend="numpy")(f32).dtype == np.float32


def test_sigmoid_without_scipy(monkeypatch):
    from adjit.ir import special
    monkeypatch.setitem(special._SCIPY, "expit", None)
    x = np.array([-800.0, -40.0, -1.0, 0.0, 2.0, 800.0])
    e = np.exp(-np.abs(x))
    want = np.where(x >= 0, 1 / (1 + e), e / (1 + e))
    np.testing.assert_allclose(special.expit(x), want, rtol=1e-15)
    assert special.expit(x.astype(np.float32)).dtype == np.float32
    assert float(special.expit(np.array(0.0))) == 0.5 and special.expit(np.array(-1.0)).shape == ()


def test_value_and_grad_of_a_one_hot_loss_checkpoints():
    """The one-hot targets depend on the integer labels alone: they are not data that every
    checkpoint would have to carry (value_and_grad of softmax_cross_entropy found no cut)."""
    from adjit.nn import MLP
    from adjit.nn.losses import softmax_cross_entropy
    net = MLP([16] + [16] * 8 + [10], activation="tanh")
    p = net.init(0)
    x = RNG.random((256, 16)).astype(np.float32)
    y = RNG.integers(0, 10, 256)

    def ce(q, a, b):
        return softmax_cross_entropy(net.apply(q, a), b)
    plain = adjit.value_and_grad(ce, backend="numpy").lower(p, x, y).memory
    ck = adjit.value_and_grad(ce, backend="numpy", checkpoint="sqrt").lower(p, x, y).memory
    assert ck.checkpoints and ck.peak_working_bytes < plain.peak_working_bytes
    v0, g0 = adjit.value_and_grad(ce, backend="numpy")(p, x, y)
    v1, g1 = adjit.value_and_grad(ce, backend="numpy", checkpoint="sqrt")(p, x, y)
    assert v0 == v1 and all(np.array_equal(g0[k], g1[k]) for k in g0)


def test_trainer_takes_any_model_with_init_and_apply():
    from adjit.nn import SGD, Trainer

    class Linear:
        def init(self, seed=0):
            rng = np.random.default_rng(seed)
            return {"W": (rng.normal(size=(4, 3)) * 0.1).astype(np.float32),
                    "b": np.zeros(3, np.float32)}

        def apply(self, p, x):
            return x @ p["W"] + p["b"]
    tr = Trainer(Linear(), SGD(0.1, backend="numpy"), backend="numpy")
    params, state = tr.init(seed=0)
    x = RNG.random((64, 4)).astype(np.float32)
    y = RNG.integers(0, 3, 64)
    loss0 = float(tr.step(params, state, x, y)[0])
    params, state, history = tr.fit(params, state, x, y, epochs=3, batch_size=16,
                                    progress=False, log=lambda *a: None)
    assert history.train_loss[-1] < loss0


def test_arrays_computed_from_integer_arrays_made_inside_receive_traced_values():
    x = np.arange(4.0) + 0.5

    def a(v):
        t = np.arange(4).astype(float)
        t[2] = v[3]
        return t

    def b(v):
        t = np.arange(4) / 4
        t[0] = v[0]
        return t

    def c(v):
        t = np.arange(4) * 1.5
        t += v
        return t

    def d(v):
        t = np.arange(4)          # an integer array: the write truncates, as in NumPy
        t[1] = v[1]
        return t * 1.0
    for fn in (a, b, c, d):
        np.testing.assert_array_equal(adjit.compile(fn, backend="numpy")(x), fn(x))
    np.testing.assert_allclose(adjit.grad(lambda v: np.sum(c(v) ** 2))(x), 2 * c(x))


def test_more_python_number_results_and_asarray_of_a_buffer():
    x32 = np.ones(3, np.float32)
    assert adjit.compile(lambda w, t: (w, t > 1), backend="numpy")(x32, 2)[1] is True
    r = adjit.compile(lambda w, t: (w, t ** 0.5), backend="numpy")(x32, 7)[1]
    assert type(r) is float and abs(r - 7 ** 0.5) < 1e-15

    def e(v):
        a = np.ones(4)
        b = np.asarray(a)     # the same array: the write reaches a
        b += v
        return a
    np.testing.assert_array_equal(adjit.compile(e, backend="numpy")(np.arange(4.0)), e(np.arange(4.0)))


def test_nan_extremes_bool_negation_and_linspace_dtype():
    import warnings
    a = np.array([[np.nan, np.nan], [1.0, np.nan]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # NumPy's all-NaN slice warning
        for fn in (lambda v: np.nanmax(v, axis=1), lambda v: np.nanmin(v, axis=1)):
            np.testing.assert_array_equal(adjit.compile(fn, backend="numpy")(a), fn(a))
    np.testing.assert_array_equal(
        adjit.compile(lambda v, t: v * (-t), backend="numpy")(np.ones(3, np.float32), True), -1)
    f32 = np.array([0.5], np.float32)
    assert adjit.compile(lambda v: np.linspace(v[0], 1.0, 3), backend="numpy")(f32).dtype == \
        np.float32


def test_python_number_results_through_transformations():
    x32 = np.ones(3, np.float32)
    assert adjit.grad(lambda w, t: (np.sum(w * t), t + 1), has_aux=True,
                      backend="numpy")(x32, 1)[1] == 2
    (_, aux), _ = adjit.value_and_grad(lambda w, t: (np.sum(w * t), t + 1), has_aux=True,
                                       backend="numpy")(x32, 1)
    assert type(aux) is int and aux == 2
    assert type(adjit.jvp(lambda w, t: (w * t, t + 1), (x32, 1), (x32, 0.0),
                          backend="numpy")[0][1]) is int


GLOBAL_TABLE = np.arange(4.0)


def test_np_copy_of_an_outside_array_receives_traced_values():
    def f(w):
        y = np.copy(GLOBAL_TABLE)
        y[0] = w[0]
        return np.sum(y * w)
    w = np.ones(4)
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(w), f(w))
    np.testing.assert_allclose(adjit.grad(f, backend="numpy")(w), [2.0, 1.0, 2.0, 3.0])
    np.testing.assert_array_equal(GLOBAL_TABLE, np.arange(4.0))


def test_searchsorted():
    a = np.array([0.1, 0.5, 0.9, 2.0])
    v = np.array([[0.0, 0.5], [1.0, 5.0]])
    for side in ("left", "right"):
        f = lambda s, u: np.searchsorted(s, u, side=side)  # noqa: E731
        got = adjit.compile(f, backend="numpy")(a, v)
        np.testing.assert_array_equal(got, f(a, v))
        assert got.dtype == f(a, v).dtype
    cum = np.cumsum([0.2, 0.3, 0.5])     # inverse-CDF sampling of a categorical
    u = np.array([0.1, 0.45, 0.99])
    np.testing.assert_array_equal(adjit.compile(lambda x: np.searchsorted(cum, x))(u),
                                  np.searchsorted(cum, u))
    np.testing.assert_array_equal(adjit.compile(lambda s: s.searchsorted(0.7))(a), 2)


def test_unravel_index_of_an_argmax():
    x = RNG.normal(size=(3, 4, 5))
    for order in ("C", "F"):
        f = lambda a: np.unravel_index(np.argmax(a), a.shape, order=order)  # noqa: E731
        assert tuple(int(v) for v in adjit.compile(f, backend="numpy")(x)) == \
            tuple(int(v) for v in f(x))
    h = lambda a: a[np.unravel_index(np.argmax(a), a.shape)] * 2  # noqa: E731
    np.testing.assert_allclose(adjit.compile(h, backend="numpy")(x), h(x))
    assert adjit.grad(h, backend="numpy")(x).sum() == 2.0


def test_jacobian_dtype_is_the_inputs_in_both_modes():
    b32 = np.ones(2, np.float32)
    assert adjit.jacobian(lambda w: np.outer(w.astype(np.float64), w))(b32).dtype == np.float32
    assert adjit.jacobian(lambda w: np.sum(w.astype(np.float64) ** 2, axis=0,
                                          keepdims=True))(b32).dtype == np.float32


def test_convolution_with_sliding_window_view():
    from numpy.lib.stride_tricks import sliding_window_view as swv
    x = RNG.normal(size=(1, 2, 5, 5))
    k = RNG.normal(size=(3, 2, 3, 3))

    def conv(a, w):
        return np.einsum("bchwij,ocij->bohw", swv(a, (3, 3), axis=(2, 3)), w)
    np.testing.assert_allclose(adjit.compile(conv, backend="numpy")(x, k), conv(x, k),
                               rtol=1e-12, atol=1e-12)
    assert adjit.gradcheck(lambda a, w: np.sum(np.sin(conv(a, w))), x, k, argnums=(0, 1)) < 1e-6
    v = np.arange(6.0)
    np.testing.assert_array_equal(adjit.compile(lambda a: swv(a, 3), backend="numpy")(v),
                                  swv(v, 3))


def test_partition_and_argpartition_meet_numpys_contract():
    x = RNG.normal(size=(3, 7))
    np.testing.assert_allclose(adjit.compile(lambda a: np.partition(a, 3, axis=1)[:, 3])(x),
                               np.partition(x, 3, axis=1)[:, 3])
    top = adjit.compile(lambda a: np.sort(a[0][np.argpartition(a[0], 2)[:2]]))(x)
    np.testing.assert_allclose(top, np.sort(x[0][np.argpartition(x[0], 2)[:2]]))
    assert adjit.grad(lambda a: np.partition(a, 3, axis=1)[:, :3].sum())(x).sum() == 9.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_augmented_assignment_to_a_scalar_rebinds_it(backend):
    """NumPy scalars (np.sum(x), x[i], Python-number arithmetic) are immutable: acc += v
    makes a new value, and names holding the old one keep it."""
    x = np.array([1.0, 2.0, 3.0, 4.0])

    def running(a):
        acc, hist = 0.0, []
        for i in range(len(a)):
            acc += a[i]
            hist.append(acc)
        return np.array(hist)

    def reg(a):
        loss = np.sum(a ** 2)
        base = loss
        loss += 0.1 * np.sum(np.abs(a))
        return loss - base

    def reshaped(a):
        t = np.dot(a[:2], a[2:])
        r = t.reshape(-1)
        r[0] = 7.0
        return t

    def zero_d_array(a):
        z = np.zeros(())       # a 0-d array: NumPy's += is in place, b sees it
        b = z
        z += a[0]
        return b
    for fn in (running, reg, reshaped, zero_d_array):
        np.testing.assert_allclose(adjit.compile(fn, backend=backend)(x), fn(x), rtol=1e-12)
    w = np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(adjit.grad(lambda a: np.sum(running(a) * w), backend=backend)(x),
                               [10.0, 9.0, 7.0, 4.0])


def test_the_where_trap_through_any_elementwise_function():
    x = np.array([-1.0, 0.0, 2.0])
    for f in (np.sin, np.tanh, np.cos, np.abs, np.arctan, lambda v: np.log1p(np.abs(v))):
        g = adjit.grad(lambda a: np.sum(np.where(a > 0, f(np.log(a)), 0)))(x)
        assert np.all(np.isfinite(g)) and g[0] == 0 and g[1] == 0


def test_augmented_assignment_through_advanced_indices_of_an_array_made_inside():
    x = np.arange(8.0).reshape(2, 4)

    def f(a):
        y = np.zeros((2, 4))
        y[:, [1, 2]] += a[:2, :2]
        return y
    np.testing.assert_array_equal(adjit.compile(f, backend="numpy")(x), f(x))
    assert adjit.gradcheck(lambda a: np.sum(np.sin(f(a))), x) < 1e-6


def test_sweep11_final_items():
    a = np.array([0.1, 0.5, 0.9])
    v = np.array([0.0, 0.6, 1.0, np.nan])
    for side in ("left", "right"):
        f = lambda s, u: np.searchsorted(s, u, side=side)  # noqa: E731
        np.testing.assert_array_equal(adjit.compile(f, backend="numpy")(a, v), f(a, v))
    x = np.array([700.0, 705.0, 710.4, -702.0])
    for fn in (np.cosh, np.sinh):
        np.testing.assert_allclose(adjit.compile(fn, backend="numpy")(x), fn(x), rtol=1e-15)
    big = np.array([[1.0, -2.0], [3.0, 4.0]])
    z = np.array([2.0, 3.0])

    def masked_add(m, t):
        m = m.copy()
        m[m > 0] += t[0]
        return m
    np.testing.assert_array_equal(adjit.compile(masked_add, backend="numpy")(big, z),
                                  masked_add(big, z))

    def two_steps(t):
        c = np.arange(4) * 3 / 2       # int array made inside, then two float steps
        c[0] = t[0]
        return c
    np.testing.assert_array_equal(adjit.compile(two_steps, backend="numpy")(z), two_steps(z))
    aux = adjit.grad(lambda w, *, k: (np.sum(w), k + 1), has_aux=True, backend="numpy")(z, k=2)[1]
    assert aux == 3 and type(aux) is int


def test_cumprod_multiplies_left_to_right_as_numpy():
    x = np.array([1e-200, 1e-200, 1e200, 1e200])
    np.testing.assert_array_equal(adjit.compile(np.cumprod, backend="numpy")(x), np.cumprod(x))
    y = RNG.normal(size=(3, 5))
    y[1, 2] = 0.0
    np.testing.assert_array_equal(adjit.compile(lambda a: np.cumprod(a, axis=1))(y),
                                  np.cumprod(y, axis=1))
    assert adjit.gradcheck(lambda a: np.sum(np.cumprod(a, axis=1) * np.arange(5.0)), y) < 1e-6
