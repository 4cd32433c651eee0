"""Regressions from the seventh session's sweep: code ported from HIPS/autograd's examples and
tests, google/tangent's test functions, JAX's NumPy op records, and the GPU path."""
import numpy as np
import pytest

import adjit


@pytest.mark.parametrize("fn", [lambda x: np.dot(2.0, x), lambda x: np.dot(x, 2.0),
                                lambda x: x.dot(np.float32(2.0)), lambda x: np.dot(x[0, 0, 0], x)])
def test_dot_of_a_0d_and_an_nd_array_is_a_product(fn):
    x = np.arange(24.0).reshape(2, 3, 4)
    got, want = adjit.compile(fn, backend="numpy")(x), fn(x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fn, x", [
    (lambda x: np.sum(np.std(x, axis=0)), np.array([[0.3, 0.5, -1.0]])),     # a batch of one
    (np.std, 3.5),
    (lambda x: np.linalg.norm(x), np.zeros(3)),
    (lambda x: np.sum(np.linalg.norm(x, axis=1)), np.array([[0.0, 0.0], [3.0, 4.0]])),
])
def test_std_and_norm_of_constant_or_zero_data_have_derivative_zero(fn, x):
    # as PyTorch: sqrt's 0 * inf stays out; the functions are constant (or at a kink) there
    for backend in ("numpy", "numba"):
        g = adjit.grad(fn, backend=backend)(x)
        assert np.all(np.isfinite(g))
    if np.shape(x) == (2, 2):
        np.testing.assert_allclose(g, [[0.0, 0.0], [0.6, 0.8]])
    else:
        np.testing.assert_array_equal(g, 0.0)


def test_pairwise_distances_have_finite_gradients_and_std_keeps_nan():
    x = np.random.default_rng(0).normal(size=(4, 2))
    f = lambda x: np.sum(np.linalg.norm(x[:, None] - x[None], axis=-1) ** 1.5)  # noqa: E731
    assert adjit.gradcheck(f, x) < 1e-6
    assert np.isnan(adjit.compile(np.std, backend="numpy")(np.array([1.0, np.nan])))
    assert np.isnan(adjit.compile(np.std, backend="numpy")(np.array([1.0, np.inf])))
    assert np.isnan(adjit.compile(lambda x: np.std(x, ddof=1), backend="numpy")(np.ones(1)))


_RS = np.random.RandomState(0)


def _obj_with_closure_generator():
    r = np.random.default_rng(0)

    def obj(q):
        return np.sum(q * r.normal(size=q.shape))
    return obj


def _helper_drawing(q):
    return q * _RS.rand(*q.shape)


@pytest.mark.parametrize("fn", [
    lambda q: np.sum((_RS.randn(4) * np.exp(q)) ** 2),           # autograd's black_box_svi
    _obj_with_closure_generator(),
    lambda q: np.sum(_helper_drawing(q)),                          # through a helper
])
def test_a_random_generator_read_inside_a_traced_function_warns(fn):
    # its methods draw once, while tracing; np.random.randn already warned, rs.randn did not
    with pytest.warns(adjit.AdjitWarning, match="random generator.*reuses those numbers"):
        adjit.grad(fn, backend="numpy")(np.zeros(4))


@pytest.mark.parametrize("static", [(), (1,)])
def test_a_random_generator_argument_is_refused_also_as_static(static):
    f = adjit.grad(lambda q, rs: np.sum(q * rs.randn(3)), static_argnums=static,
                   backend="numpy")
    with pytest.raises(adjit.TraceError, match="random generator.*pass it in"):
        f(np.zeros(3), np.random.RandomState(0))


def test_a_traced_seed_is_refused_naming_the_line():
    def f(q, t):
        rng = np.random.default_rng(t)
        return np.sum(rng.standard_normal(3) * q)
    with pytest.raises(adjit.TraceError, match=r"default_rng of a traced value at .*test_sweep16"):
        adjit.grad(f, backend="numpy")(np.zeros(3), 1)


def test_hvp_takes_v_by_keyword_whatever_fn_calls_its_parameters():
    v = np.array([1.0, 0.0])
    for f in (lambda x, a: np.sum(x ** 3) * a, lambda v, a: np.sum(v ** 3) * a):
        h = adjit.hvp(f, backend="numpy")
        np.testing.assert_array_equal(h(np.ones(2), 2.0, v=v), [12.0, 0.0])
        np.testing.assert_array_equal(h(np.ones(2), 2.0, v), [12.0, 0.0])


def test_a_step_counter_used_as_an_index_is_told_to_pass_the_batch_in():
    x = np.arange(40.0).reshape(8, 5)

    def objective(w, it):                    # autograd's objective(params, iter)
        i = it % 4
        return np.sum(x[slice(i * 2, i * 2 + 2)] @ w)
    with pytest.raises(adjit.TraceError, match="pass it in as an argument"):
        adjit.grad(objective, backend="numpy")(np.ones(5), 3)


@pytest.mark.parametrize("fn, x", [
    (lambda x: np.prod(x, dtype=np.int32), np.zeros(0)),
    (lambda x: np.nanprod(x, dtype=np.int32), np.zeros(0)),
    (lambda x: np.sum(x, dtype=np.float32), 2.0),                  # a Python-number argument
    (lambda x: np.mean(x, dtype=np.float32), 2.0),
    (lambda x: np.sum(x, dtype=np.int32), 2),
    (lambda x: np.sum(x, dtype=np.float32) * np.ones(2, np.float16), 2.0),
    (lambda m: np.max(m, axis=0, initial=1), np.ones((2, 4), bool)),
    (lambda m: np.min(m, axis=0, initial=0), np.ones((2, 4), bool)),
    (lambda x: np.max(x, initial=5.5), np.arange(3)),
])
def test_reductions_keep_the_dtype_asked_for(fn, x):
    got, want = adjit.compile(fn, backend="numpy")(x), fn(x)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_array_equal(got, want)


def test_np_vectorize_of_traced_arrays_calls_f_per_element():
    vf = np.vectorize(lambda t: np.sin(t) * t)
    pair = np.vectorize(lambda a, b: (a * b, a + b))
    x = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
    np.testing.assert_allclose(adjit.compile(lambda x: vf(x), backend="numpy")(x), vf(x))
    assert adjit.gradcheck(lambda x: np.sum(vf(x) ** 2), x) < 1e-6
    for got, want in zip(adjit.compile(lambda x: pair(x, np.arange(3.0)), backend="numpy")(x),
                         pair(x, np.arange(3.0))):
        np.testing.assert_allclose(got, want)
    f32 = x.astype(np.float32)
    assert adjit.compile(lambda x: vf(x), backend="numpy")(f32).dtype == vf(f32).dtype
    with pytest.raises(adjit.UnsupportedError, match="np.vectorize.*up to 1024.*whole array"):
        adjit.compile(lambda x: vf(x), backend="numpy")(np.ones(2000))
    branchy = np.vectorize(lambda t: 1.0 if t > 0 else 0.0)
    with pytest.raises(adjit.TraceError, match="adjit.where"):
        adjit.compile(lambda x: branchy(x), backend="numpy")(x)


_X3 = np.random.default_rng(0).normal(size=(2, 3, 4))
NEW_FUNCTIONS = {
    "rollaxis": lambda x: np.rollaxis(x, 2),
    "rollaxis start": lambda x: np.rollaxis(x, 2, 1),
    "rollaxis to end": lambda x: np.rollaxis(x, 0, 3),
    "rollaxis negative": lambda x: np.rollaxis(x, -1, -2),
    "ediff1d": lambda x: np.ediff1d(x),
    "ediff1d ends": lambda x: np.ediff1d(x, to_end=[1, 2], to_begin=-1.0),
    "ediff1d float32": lambda x: np.ediff1d(x.astype(np.float32), to_begin=np.array([5.0])),
    "choose": lambda x: np.choose(np.array([[0, 1, 2, 1]]), [x[0, 0], x[0, 1], x[1]]),
    "choose clip": lambda x: np.choose(np.array([0, 3, -1, 1]), [x[0, 0], x[0, 1]], mode="clip"),
    "choose wrap": lambda x: np.choose(np.array([0, 3, -1, 1]), [x[0, 0], 2.0], mode="wrap"),
    "ldexp": lambda x: np.ldexp(x, np.array([1, -2, 3, 0])),
    "ldexp float32": lambda x: np.ldexp(x.astype(np.float32), 3),
    "ldexp tiny": lambda x: np.ldexp(np.array([1e300]), -1100) * x[0, 0, 1],
    "resize": lambda x: np.resize(x, (5, 7)),
    "resize 1d": lambda x: np.resize(x, 10),
    "resize empty": lambda x: np.resize(x, (0,)),
}


@pytest.mark.parametrize("name", sorted(NEW_FUNCTIONS))
def test_functions_autograd_tests_use_match_numpy(name):
    fn = NEW_FUNCTIONS[name]
    got, want = adjit.compile(fn, backend="numpy")(_X3), fn(_X3)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-15)
    if want.size and want.dtype == np.float64:
        assert adjit.gradcheck(lambda a: np.sum(np.sin(fn(a))), _X3) < 1e-6


def test_choose_with_traced_indices_needs_clip_or_wrap():
    a, lab = _X3[0, :2], np.array([0, 1, 1, 0])
    got = adjit.compile(lambda a, k: np.choose(k, [a[0], a[1]], mode="clip"),
                        backend="numpy")(a, lab)
    np.testing.assert_array_equal(got, np.choose(lab, [a[0], a[1]]))
    with pytest.raises(adjit.UnsupportedError, match="mode='clip'"):
        adjit.compile(lambda a, k: np.choose(k, [a[0], a[1]]), backend="numpy")(a, lab)


def test_a_write_into_rollaxis_reaches_the_array():
    def f(x):
        x = x * 1.0
        np.rollaxis(x, 1)[0] = 0.0
        return x
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(adjit.compile(f, backend="numpy")(x), f(x.copy()))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fn, shape", [
    (lambda a: np.nanmedian(a), (0, 4)), (lambda a: np.nanmedian(a, axis=0), (0, 4)),
    (lambda a: np.nanmedian(a, axis=1), (0, 4)), (lambda a: np.nanmedian(a, axis=1), (4, 0)),
    (lambda a: np.nanquantile(a, [0.2, 0.5], axis=0), (0, 3)),   # NumPy: nanmean's shape
    (lambda a: np.quantile(a, 0.5, axis=1), (0, 4)),
    (lambda a: np.nanpercentile(a, 30, axis=1, keepdims=True), (0, 4)),
])
def test_nan_quantiles_of_empty_arrays_are_numpys(fn, shape):
    x = np.zeros(shape)
    got, want = adjit.compile(fn, backend="numpy")(x), fn(x)
    assert np.shape(got) == np.shape(want) and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


_INTS = [np.array([0, 1, 2, 3, 5, 12, -7], np.int64), np.array([0, 1, 2, 3, 5, 12, -7], np.int32),
         np.array([1, 2, 200, 255], np.uint8)]
BITWISE = [lambda a: a & 1, lambda a: a | 4, lambda a: a ^ 3, lambda a: ~a, lambda a: a << 2,
           lambda a: a >> 1, lambda a: 1 << a % 5, lambda a: np.bitwise_and(a, 6),
           lambda a: np.left_shift(a, 1), lambda a: np.right_shift(a, np.int8(1)),
           lambda a: np.invert(a), lambda a: (a > 0) & (a < 3), lambda a: ~(a > 0),
           lambda a: (a > 0) << 1, lambda a: a & np.int8(3)]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("k", range(len(BITWISE)))
def test_bitwise_operations_of_integers_match_numpy(k, backend):
    fn = BITWISE[k]
    for a in _INTS:
        got, want = adjit.compile(fn, backend=backend, min_kernel_size=0)(a), fn(a)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_parity_masks_select_gradients_and_floats_are_refused():
    x, k = np.linspace(-1.0, 1.0, 7), _INTS[0]
    g = adjit.grad(lambda x, k: np.sum(np.where(k & 1, x ** 2, x)), backend="numpy")(x, k)
    np.testing.assert_allclose(g, np.where(k & 1, 2 * x, 1.0))
    assert adjit.compile(lambda a, b: a >> b, backend="numpy")(5, 1) == 2
    with pytest.raises(adjit.UnsupportedError, match="bitwise_and of float64.*integers"):
        adjit.compile(lambda x: x & 1, backend="numpy")(x)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("decimals", [-5, -3, -1, 0, 1, 3])
@pytest.mark.parametrize("x", [
    np.float32([1075.07, 2308.31, -5760.98, 0.125, 2.5]),
    np.array([150000.0, 250000.0, 48201953.0, 462849446.0, 0.0015, -2.675]),
    np.int32([14, 15, 25, 1234, -35]), np.uint8([14, 15, 250]),
], ids=["float32", "float64", "int32", "uint8"])
def test_round_with_decimals_is_numpys_bit_for_bit(x, decimals, backend):
    # NumPy divides by the exact 10 ** -d for negative d (x * 0.001 is not x / 1000)
    got = adjit.compile(lambda x: np.round(x, decimals), backend=backend, min_kernel_size=0)(x)
    want = np.round(x, decimals)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_log10_and_log2_are_exact_at_powers(backend):
    x = np.array([1000.0, 1e6, 1e-3, 2.0 ** 31, 7.3])
    f = adjit.compile(lambda x: (np.floor(np.log10(x)), np.log2(x)), backend=backend,
                      min_kernel_size=0)
    digits, l2 = f(x)
    np.testing.assert_array_equal(digits, [3, 6, -3, 9, 0])
    np.testing.assert_array_equal(l2, np.log2(x))
    assert adjit.gradcheck(lambda x: np.sum(np.log10(x) * np.log2(x)), np.array([3.0, 7.3])) \
        < 1e-8
    assert f(x.astype(np.float32))[1].dtype == np.float32


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_signbit_and_copysign_read_the_sign_bit_of_nan_and_zero(backend):
    with np.errstate(invalid="ignore"):
        x = np.array([-np.nan, np.nan, -0.0, 0.0, -1.0, 2.0, -np.inf, np.inf])
    for fn in (np.signbit, lambda x: np.signbit(np.copysign(2.0, x)),
               lambda x: np.signbit(np.copysign(x, -1.0)),
               lambda x: np.signbit(x.astype(np.float32))):
        got = adjit.compile(fn, backend=backend, min_kernel_size=0)(x)
        np.testing.assert_array_equal(got, fn(x))


def test_a_boolean_mask_squared_is_int8_as_numpys_operator():
    b = np.array([True, False])
    for fn in (lambda b: b ** 2, lambda b: np.power(b, 2), lambda b: b ** 3):
        got, want = adjit.compile(fn, backend="numpy")(b), fn(b)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


_VIEWS_OF_T = {
    "[::-1]": lambda t: t[::-1], "flip0": lambda t: np.flip(t, 0),
    "[:, ::-1]": lambda t: t[:, ::-1],
    ".T": lambda t: t.T, "rot90": lambda t: np.rot90(t),
    "ravel reversed reshaped": lambda t: t.ravel()[::-1].reshape(4, 4),
    "rows reshaped": lambda t: t[::2].reshape(2, 2, 2).reshape(2, 4),
}


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("maker", ["sum_keep", "plain_mul"])
@pytest.mark.parametrize("view", sorted(_VIEWS_OF_T))
def test_a_buffer_is_not_overwritten_while_a_view_of_it_is_read(view, maker, backend):
    # tangent-style fuzz: cos(t) went into t's buffer while t[::-1] (or a reversed vector
    # reshaped, which NumPy views) was still to be read, fused and unfused
    x = np.random.default_rng(0).standard_normal((4, 4))
    make = {"sum_keep": lambda x: (lambda h: h + np.sum(h, axis=1, keepdims=True))(np.sin(x)),
            "plain_mul": lambda x: np.sin(x) * 2.0}[maker]

    def f(x):
        t = make(x)
        v = _VIEWS_OF_T[view](t)
        return np.sum(np.sin(t[:v.shape[0], :v.shape[1]]) * v)
    num = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = 1e-6
        num[i] = (f(x + e) - f(x - e)) / 2e-6
    for fuse in (True, False):
        np.testing.assert_allclose(adjit.grad(f, backend=backend, fuse=fuse)(x), num, atol=1e-7)


def test_hvp_through_a_reshaped_transpose_is_not_overwritten():
    # a reshape of a transposed value, read again later, kept its buffer only in the
    # schedule's memory accounting: hvp was off by 39, hessian asymmetric
    def loss(y):
        t0 = y.T.reshape(3, 4) - 0.5 * (y * y)
        m = np.tanh(y + t0)
        return np.sum(m @ y.T.reshape(3, 4).T @ m * np.arange(12.0).reshape(3, 4))
    y, v = np.linspace(-1, 1, 12).reshape(3, 4), np.cos(np.arange(12.0)).reshape(3, 4)
    g = adjit.grad(loss, backend="numpy", fuse=False)
    want = (g(y + 1e-6 * v) - g(y - 1e-6 * v)) / 2e-6
    for backend in ("numpy", "numba"):
        np.testing.assert_allclose(adjit.hvp(loss, backend=backend)(y, v), want, rtol=1e-6,
                                   atol=1e-6)


def test_a_ragged_list_names_the_shapes_not_concatenate():
    with pytest.raises(adjit.ShapeError, match=r"different shapes \(\(\), \(3, 3\), \(\)\)"):
        adjit.compile(lambda x: np.sum([1.0, x, 3.0]), backend="numpy")(np.ones((3, 3)))


def test_reading_x_flat_copies_and_writing_it_reaches_x():
    def f(x):
        h = np.sin(x) * 1.0
        c, d = h.flat[:], h.flat[1:3]        # NumPy's flatiter indexing copies
        h += 1.0
        h.flat[0] = 7.0
        return c, d, h, h.flat[3], np.sum(list(h.flat))
    x = np.zeros((2, 2))
    for got, want in zip(adjit.compile(f, backend="numpy")(x), f(x.copy())):
        np.testing.assert_array_equal(got, want)


def test_choose_of_one_choice_copies_and_swapaxes_of_one_axis_is_x():
    def f(x):
        h = x * 1.0
        c = np.choose(0, [h])
        h += 1.0
        return c, np.swapaxes(h, 1, 1), h.swapaxes(-1, 1)
    x = np.arange(6.0).reshape(2, 3)
    for got, want in zip(adjit.compile(f, backend="numpy")(x), f(x.copy())):
        np.testing.assert_array_equal(got, want)


def test_hessian_of_an_array_output_is_one_hessian_per_element():
    g = lambda x: np.sin(x) * np.array([1.0, 2.0, 3.0]) * np.sum(x ** 2)  # noqa: E731
    x = np.linspace(0.2, 1.0, 3)
    h = adjit.hessian(g, backend="numpy")(x)
    assert h.shape == (3, 3, 3)
    np.testing.assert_allclose(h, adjit.jacobian(adjit.jacobian(g), backend="numpy")(x))
    eps, e = 1e-5, np.eye(3)
    jac = adjit.jacobian(g, backend="numpy")
    num = np.stack([(jac(x + eps * e[k]) - jac(x - eps * e[k])) / (2 * eps) for k in range(3)],
                   axis=-1)
    np.testing.assert_allclose(h, num, rtol=1e-6, atol=1e-8)


def test_a_dict_of_numbers_may_be_static_configuration():
    # cs231n's layers take conv_param = {'stride': 1, 'pad': 1}
    def conv1d(x, w, conv_param):
        stride, pad = conv_param["stride"], conv_param["pad"]
        n = int((x.shape[0] + 2 * pad - w.shape[0]) / stride + 1)
        xp = np.pad(x, pad)
        return np.stack([np.sum(xp[i * stride:i * stride + w.shape[0]] * w) for i in range(n)])
    f = adjit.compile(conv1d, static_argnums=2, backend="numpy")
    x, w = np.arange(6.0), np.ones(3)
    for p in ({"stride": 1, "pad": 1}, {"stride": 2, "pad": 1}, {"pad": 1, "stride": 2}):
        np.testing.assert_array_equal(f(x, w, p), conv1d(x, w, p))
    # keyed by the items in their order: a loop over the dict runs in that order (sweep 23)
    assert len(f._cache) == 3
    with pytest.raises(TypeError, match="must be hashable"):
        f(x, w, {"stride": 1, "pad": np.ones(2)})


def test_as_strided_and_escaped_tracers_are_named():
    from numpy.lib.stride_tricks import as_strided
    with pytest.raises(adjit.UnsupportedError, match="as_strided.*sliding_window_view"):
        adjit.compile(lambda x: as_strided(x, (2, 2), (8, 8)).sum(), backend="numpy")(np.ones(4))

    class Net:
        params = {"W": np.ones((3, 2))}

        def loss(self, x):
            return np.sum(x.dot(self.params["W"]) ** 2)
    net, x = Net(), np.ones((4, 3))

    def f(p, x):
        net.params = p          # cs231n style: the model keeps the traced parameters
        return net.loss(x)
    adjit.grad(f, backend="numpy")({"W": np.ones((3, 2))}, x)
    with pytest.raises(adjit.TraceError, match="after that function's trace ended"):
        np.ones((4, 3)).dot(net.params["W"])


def test_relu_spellings_at_zero_are_as_readme_says():
    x = np.array([0.0, 1.0, -1.0])
    for f, at0 in ((lambda x: np.maximum(0, x), 0.5), (lambda x: np.clip(x, 0, None), 0.5),
                   (adjit.relu, 0.0), (lambda x: x * (x > 0), 0.0),
                   (lambda x: np.where(x > 0, x, 0), 0.0)):
        g = adjit.grad(lambda x: np.sum(f(x)), backend="numpy")(x)
        np.testing.assert_array_equal(g, [at0, 1.0, 0.0])


def test_jvp_refuses_a_float_tangent_for_an_integer_primal():
    with pytest.raises(adjit.GradError, match="primal 0 has dtype int64.*as a float"):
        adjit.jvp(lambda a: a * a, (3,), (1.0,), backend="numpy")
    # an integer tangent for data (labels) is accepted and carries nothing
    _, t = adjit.jvp(lambda w, y: np.sum(w * y), (np.ones(2), np.arange(2)),
                     (np.ones(2), np.zeros(2, int)), backend="numpy")
    assert t == 1.0


def test_hessian_of_a_pytree_output_nests_like_jacobian_of_jacobian():
    f = lambda x, y: {"a": np.sin(x) * y[0, 0], "b": (np.sum(x * y[:, :1]), y @ y * x[0])}  # noqa
    x, y = np.linspace(0.1, 0.4, 4), np.full((2, 2), 0.5)
    h = adjit.hessian(f, argnums=(0, 1), backend="numpy")(x, y)
    j = adjit.jacobian(adjit.jacobian(f, argnums=(0, 1)), argnums=(0, 1), backend="numpy")(x, y)
    assert h["a"][1][0].shape == (4, 2, 2, 4)
    for a, b in zip(adjit.frontend.pytree.flatten(h)[0], adjit.frontend.pytree.flatten(j)[0]):
        np.testing.assert_array_equal(a, b)


def test_jax_at_updates_point_to_numpy_assignment():
    with pytest.raises(AttributeError, match=r"y = x.copy\(\); y\[i\] = v"):
        adjit.compile(lambda x: x.at[1].set(0.0), backend="numpy")(np.ones(3))


_EARLY_VIEWS = {
    "broadcast_to of a row": lambda c: np.broadcast_to(c[:1], (4, 4)),
    "broadcast_to": lambda c: np.broadcast_to(c, (2, 4, 4)),
    "broadcast_arrays": lambda c: np.broadcast_arrays(c, np.ones((2, 4, 4)))[0],
    "asarray with dtype": lambda c: np.asarray(c, dtype=np.float64),
    "array copy=None": lambda c: np.array(c, copy=None),
    "einsum diagonal": lambda c: np.einsum("ii->i", c),
    "sliding_window_view": lambda c: np.lib.stride_tricks.sliding_window_view(c, 2, axis=0),
    "flat": lambda c: c.flat,
    "ascontiguousarray": lambda c: np.ascontiguousarray(c),
    "as_strided": lambda c: np.lib.stride_tricks.as_strided(c, (4, 4), (32, 0)),
}


@pytest.mark.parametrize("name", sorted(_EARLY_VIEWS))
def test_a_view_taken_before_a_traced_write_sees_the_write(name):
    # NumPy's view functions adjit does not follow took plain views of the array's memory,
    # which a traced write fills with NaN: the result was nan and the gradient 0
    view = _EARLY_VIEWS[name]

    def f(x):
        c = np.zeros((4, 4))
        b = view(c)
        c[1] = x[1]
        c[2] += x[2]
        return np.sum(np.sin(np.asarray(list(b) if name == "flat" else b, dtype=float)))
    x = np.random.default_rng(0).normal(size=(4, 4))
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(x), f(x.copy()), rtol=1e-12)
    assert adjit.gradcheck(f, x) < 1e-6


def test_returning_a_masked_selection_names_the_functions_line():
    def f(x):
        y = x[x > 0]
        return y * 2
    with pytest.raises(adjit.UnsupportedError, match=r"x\[mask\] used as an array.*return y \* 2"):
        adjit.compile(f, backend="numpy")(np.array([1.0, -2.0, 3.0]))


def test_writes_through_views_of_early_views_reach_the_array():
    # views taken before the array's first traced write, then viewed again: the writes were
    # lost (rows of an RNN's history stayed 0; np.clip(v, ..., out=v) did nothing)
    def rows(x):
        hs = np.zeros((3, 3))
        first, rest = hs[0], hs[1:]
        first[:] = x
        for t in range(2):
            row = rest[t]
            row[:] = np.tanh(x) * (t + 1)
        return hs

    def clipped(x):
        c = np.eye(3)
        v = c[:]
        v += x
        np.clip(v, -0.7, 0.7, out=v)
        return c

    def transposed(x):
        t0 = np.zeros((3, 3))
        t1 = t0[:]
        t1 += x
        t1.T[0] = 7.0
        t1.reshape(9)[0] = -1.0
        r = t1.ravel()
        r[1] = -2.0
        t1[1:][0] = 5.0
        return t0, r
    x = np.array([0.1, 0.2, 0.3])
    for f in (rows, clipped, transposed):
        for backend in ("numpy", "numba"):
            got, want = adjit.compile(f, backend=backend)(x), f(x)
            got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
            for a, b in zip(got, want):
                np.testing.assert_allclose(a, b, rtol=1e-12)
    g = adjit.grad(lambda x: np.sum(rows(x) ** 2), backend="numpy")(x)
    np.testing.assert_allclose(g, 2 * x + 2 * (1 + 4) * np.tanh(x) / np.cosh(x) ** 2,
                               rtol=1e-12)


@pytest.mark.parametrize("make", [
    lambda: np.diag(np.ones(3)), lambda: np.tri(3),
    lambda: np.meshgrid(np.arange(3.0), np.arange(3.0))[0],
    lambda: np.fromfunction(lambda i, j: i + j, (3, 3)),
    lambda: np.asarray([[0.0] * 3] * 3)])
def test_more_constructors_make_arrays_that_take_traced_values(make):
    def f(x):
        a = make()
        a[1] = x
        a += x
        return a
    x = np.array([0.1, 0.2, 0.3])
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(x), f(x))


def test_a_traced_mask_assignment_into_a_view_reaches_the_array():
    x = np.array([[0.1, 0.9, 0.3], [0.6, 0.2, 0.8], [0.4, 0.7, 0.5]])

    def f(x):
        c0 = np.zeros((3, 3))
        v = c0[:, ::-1]
        v[1] = x[0]
        v[v > 0.05] = 0.25 * v[v > 0.05]
        return c0
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(x), f(x))
    assert adjit.gradcheck(lambda x: np.sum(f(x) ** 2), x) < 1e-6


def test_np_require_of_traced_arrays():
    x = np.arange(4.0)
    got = adjit.compile(lambda x: np.require(x * 2, np.float32, ["C", "O"]), backend="numpy")(x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, x * 2)
    g = adjit.grad(lambda x: np.sum(np.require(x, requirements="F") ** 2), backend="numpy")(x)
    np.testing.assert_array_equal(g, 2 * x)
    np.testing.assert_array_equal(np.require(x, requirements="C"), x)   # restored after


def test_a_block_write_into_a_stored_history_joins_slices_not_a_gather():
    # hs[:t] *= c in a loop: each step's writes are a few contiguous runs (14x eager as a
    # gather by an index array at T = 1600, 2.4x as slices)
    def rnn(w, xs):
        h, hs = np.zeros(w.shape[0]), np.zeros((len(xs), w.shape[0]))
        for t in range(len(xs)):
            h = np.tanh(w @ h + xs[t])
            hs[t] = h
            hs[:t] *= 0.999
        return np.sum(hs ** 2)
    rng = np.random.default_rng(0)
    w, xs = rng.normal(size=(4, 4)) * 0.3, rng.normal(size=(6, 4))
    f = adjit.value_and_grad(rnn, backend="numpy")
    g = adjit.trace(rnn, w, xs)            # the forward: no gather left
    assert not [n for n in g.nodes() if g[n]["op"] == "gather"]
    v, gw = f(w, xs)
    np.testing.assert_allclose(v, rnn(w, xs), rtol=1e-12)
    eps, num = 1e-6, np.zeros_like(w)
    for i in np.ndindex(w.shape):
        e = np.zeros_like(w)
        e[i] = eps
        num[i] = (rnn(w + e, xs) - rnn(w - e, xs)) / (2 * eps)
    np.testing.assert_allclose(gw, num, rtol=1e-6, atol=1e-8)


def _element_reads(x):
    c = np.zeros(9).reshape(3, 3)           # a view of a made-inside vector
    c[1] = x
    return c[1, 1] * 1.0 + c.ravel()[4] + sum(c[:, 1]) + c.T[1, 2] + c[-1][-1]


def _tail_loop(x):
    c = np.zeros(4)
    body = c[1:]                             # taken before the first traced write
    s = 0.0
    for i, v in enumerate(body):
        c[i + 1] = c[i] + x[i]
        s = s + v * x[i]
    return s + np.sum(c)


def _iterators(x):
    c = np.arange(6.0).reshape(2, 3)
    b, it = c.flat, np.nditer(c.T)
    c[1] = x
    total = sum(b) + sum(v * (i + 1) for i, v in enumerate(it))
    return total + sum(v * i[1] for i, v in np.ndenumerate(c)) + np.array(c.flat)[4]


def _where_out(x):
    c = np.ones(3)
    np.multiply(c, 2.0, out=c, where=np.array([True, False, True]))
    return c * x


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("fn", [_element_reads, _tail_loop, _iterators, _where_out])
def test_element_reads_and_iterators_of_made_inside_arrays(fn, backend):
    # a regression of the view-of-view fix (element reads of views gave the placeholder NaN),
    # and iterators that read the memory behind adjit's back
    x = np.array([0.3, 0.9, 0.4])
    np.testing.assert_allclose(adjit.compile(fn, backend=backend)(x), fn(x.copy()), rtol=1e-12)
    g = adjit.grad(lambda x: np.sum(fn(x)), backend=backend)(x)
    num = np.array([(np.sum(fn(x + e)) - np.sum(fn(x - e))) / 2e-6 for e in np.eye(3) * 1e-6])
    np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-8)


def test_as_strided_imported_before_tracing_sees_later_writes():
    from numpy.lib.stride_tricks import as_strided   # bound before adjit patches anything

    def f(x):
        c = np.linspace(0.0, 1.0, 6)
        b = as_strided(c, (3, 2), (8, 8))
        c[1:5] = x
        return np.sum(b * b) + np.sum(b.T @ np.ones(3))
    x = np.array([0.4, 0.8, 1.3, 0.2])
    for backend in ("numpy", "numba"):
        np.testing.assert_allclose(adjit.compile(f, backend=backend)(x), f(x.copy()))
    assert adjit.gradcheck(f, x) < 1e-6
