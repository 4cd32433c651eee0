"""API cases from a sweep of how users call the transformations; each was a wrong number, a
crash or an unclear error before."""
import numpy as np
import pytest

import adjit
from adjit.frontend import api


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_equal_gradients_are_separate_arrays(backend):
    gf = adjit.grad(lambda p, x: np.sum(p["a"] * x) + np.sum(p["b"] * x), backend=backend)
    p = {"a": np.ones(3), "b": np.ones(3), "unused": np.ones(3)}
    acc = gf(p, np.ones(3))
    for k in acc:
        acc[k] += gf(p, np.ones(3))[k]
    np.testing.assert_array_equal(acc["a"], [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(acc["b"], [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(acc["unused"], [0.0, 0.0, 0.0])
    a, b = adjit.compile(lambda x: (x * 2, x * 2), backend=backend)(np.ones(3))
    assert a is not b


def test_a_constant_result_is_a_new_array_each_call():
    c = adjit.compile(lambda x: (x * 2, np.zeros(3)), backend="numpy")
    _, z = c(np.ones(2))
    z[0] = 5.0
    np.testing.assert_array_equal(c(np.ones(2))[1], np.zeros(3))


def test_logsumexp_of_infinities_is_infinite_as_in_numpy():
    with np.errstate(divide="ignore"):
        assert adjit.logsumexp(np.array([-np.inf, -np.inf])) == -np.inf
        got = adjit.compile(lambda x: adjit.logsumexp(x, axis=1), backend="numpy")(
            np.array([[-np.inf, -np.inf], [1.0, 2.0], [np.inf, 0.0]]))
    np.testing.assert_allclose(got, [-np.inf, np.logaddexp(1.0, 2.0), np.inf])
    np.testing.assert_allclose(adjit.grad(lambda x: adjit.logsumexp(x))(np.array([1.0, 2.0])),
                               np.exp([1.0, 2.0]) / np.exp([1.0, 2.0]).sum())


def test_float16_runs_on_the_numba_backend_as_numpy_code():
    x = np.ones(5000, np.float16)
    g = adjit.grad(lambda x: np.sum(x * x), backend="numba", min_kernel_size=0)(x)
    assert g.dtype == np.float16 and np.all(g == 2)


def test_complex_arguments_compile_and_string_results_are_constants():
    r = adjit.compile(lambda x: x * 2, backend="numpy")(np.array([1 + 1j]))
    assert r.dtype == np.complex128 and r[0] == 2 + 2j
    # a string in a result is a constant of the program, returned as it is (sweep 24: strings
    # inside containers are static, as string arguments are)
    g, aux = adjit.grad(lambda x: (np.sum(x), {"tag": "ok"}), has_aux=True)(np.ones(2))
    assert aux == {"tag": "ok"} and np.array_equal(g, [1.0, 1.0])


def test_static_argnums_count_from_the_end_and_are_checked():
    f = adjit.compile(lambda w, n: w * (2.0 if n > 1 else 1.0), static_argnums=-1,
                      backend="numpy")
    np.testing.assert_array_equal(f(np.ones(2), 3), [2.0, 2.0])
    with pytest.raises(adjit.OptionError, match="out of range"):
        adjit.compile(lambda w: w * 2, static_argnums=(3,))
    with pytest.raises(adjit.OptionError, match="ints"):
        adjit.compile(lambda w: w * 2, static_argnums="0")


def test_argnums_must_be_integers():
    with pytest.raises(adjit.GradError, match="argnums must be an int"):
        adjit.grad(lambda w: np.sum(w), argnums="0")(np.ones(2))


def test_the_transformation_cache_keeps_only_recent_functions():
    for i in range(api._TRANSFORMS_KEPT + 10):
        adjit.grad(lambda w, i=i: np.sum(w * i), backend="numpy")(np.ones(2))
    assert len(api._TRANSFORMS) <= api._TRANSFORMS_KEPT


@pytest.mark.parametrize("a", [np.array([3, 0, 1, 2], np.uint8), np.array([5, -128, 0], np.int8),
                               np.array([True, False]), np.array([2.0, -1.0, -1.0])],
                         ids=["uint8", "int8-min", "bool", "float-ties"])
def test_argmin_of_every_dtype(a):
    assert adjit.compile(lambda a: np.argmin(a), backend="numpy")(a) == np.argmin(a)
    assert adjit.compile(lambda a: a.argmin(), backend="numpy")(a) == np.argmin(a)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_gradient_equal_to_an_argument_is_not_that_argument(backend):
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    ps = [a, b]
    gs = adjit.grad(lambda ps: np.sum(ps[0] * ps[1]), backend=backend)(ps)
    for p, g in zip(ps, gs):
        p -= 0.1 * g  # in-place SGD must not see the other parameter change under it
    np.testing.assert_allclose(b, [2.9, 3.8])
    X = np.arange(6.0).reshape(2, 3)
    g = adjit.grad(lambda W, X: np.sum(X @ W), backend=backend)(np.ones((3, 2)), X)
    g[:] = 0.0  # the gradient is X.T: a view of the caller's X unless copied
    np.testing.assert_array_equal(X, np.arange(6.0).reshape(2, 3))


def test_arithmetic_on_python_scalar_arguments_stays_weak():
    x, t = np.ones(3, np.float32), 2.0
    for f in (lambda x, t: x / (1 + t), lambda x, t: 0.9 ** t * x, lambda x, t: x * t ** 2,
              lambda x, t: x * abs(-t), lambda x, t: x - np.exp(-t)):
        assert adjit.compile(f, backend="numpy")(x, t).dtype == f(x, t).dtype


def test_keyword_only_arguments_are_static_configuration():
    def f(w, *, scale, mode="sq", **extra):
        base = np.sum(w ** 2) if mode == "sq" else np.sum(np.abs(w))
        return base * scale * extra.get("c", 1.0)
    w = np.array([1.0, -2.0])
    np.testing.assert_allclose(adjit.grad(f)(w, scale=3.0), 6.0 * w)
    np.testing.assert_allclose(adjit.grad(f)(w, scale=2.0, mode="abs", c=5.0), 10.0 * np.sign(w))
    v, g = adjit.value_and_grad(f)(w, scale=0.5)
    assert v == 2.5
    assert adjit.compile(f, backend="numpy")(w, scale=2.0) == 10.0


def test_results_that_are_views_of_one_another_are_separate():
    a, b, w = np.ones((3, 4)), np.ones((4, 3)), np.ones((3, 4))
    gx, gy = adjit.grad(lambda x, y, w: np.sum(x * np.exp(w)) + np.sum(y * np.exp(w).T),
                        argnums=(0, 1), backend="numpy")(a, b, w)
    assert not np.shares_memory(gx, gy)


def test_python_ints_compare_by_value_with_small_integer_arrays():
    u8, i8 = np.array([0, 1, 200], np.uint8), np.array([0, 1, 100], np.int8)
    for f, a, t in [(lambda x, t: x > t, u8, -2), (lambda x, t: x > t, i8, 300),
                    (lambda x, t: x < t, i8, 300), (lambda x, t: x == t, i8, 1)]:
        np.testing.assert_array_equal(adjit.compile(f, backend="numpy")(a, t), f(a, t))
    np.testing.assert_array_equal(adjit.compile(lambda x: x > 300, backend="numpy")(i8),
                                  [False, False, False])


def test_weak_arguments_stay_weak_through_modulo_and_nested_transformations():
    x32 = np.ones(3, np.float32)
    for f, t in [(lambda x, t: x * (t % 2), 0.7), (lambda x, t: x * (t // 2), 3),
                 (lambda x, t: x * divmod(t, 2)[1], 0.7)]:
        assert adjit.compile(f, backend="numpy")(x32, t).dtype == np.float32
    v, _ = adjit.value_and_grad(lambda w, t: np.sum(w) * t, backend="numpy")(x32, 0.5)
    assert v.dtype == np.float32
