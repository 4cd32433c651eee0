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
