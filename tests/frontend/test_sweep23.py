"""Regressions from the twelfth session (sweep 23)."""
import numpy as np
import pytest

import adjit


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


def _numgrad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


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
