"""Tests for adjit.nn.layers: MLP shapes, initialization, forward values and gradients."""

import numpy as np
import pytest

import adjit
from adjit.nn import MLP


def reference_forward(params, X, act, n_layers):
    h = X
    for i in range(1, n_layers + 1):
        z = h @ params[f"W{i}"].T + params[f"b{i}"]
        h = act(z) if i < n_layers else z
    return h


ACTS = {"relu": lambda z: np.maximum(z, 0), "tanh": np.tanh,
        "sigmoid": lambda z: 1 / (1 + np.exp(-z))}


def test_init_shapes_are_out_by_in_and_biases_zero():
    params = MLP([5, 7, 3]).init(seed=1)
    assert {k: v.shape for k, v in params.items()} == {
        "W1": (7, 5), "b1": (7,), "W2": (3, 7), "b2": (3,)}
    assert all(v.dtype == np.float32 for v in params.values())
    assert not params["b1"].any() and not params["b2"].any()


def test_init_is_seeded():
    a, b, c = MLP([4, 4]).init(0), MLP([4, 4]).init(0), MLP([4, 4]).init(1)
    assert np.array_equal(a["W1"], b["W1"]) and not np.array_equal(a["W1"], c["W1"])


def test_he_init_variance_for_relu():
    w = MLP([400, 300], "relu", dtype=np.float64).init(0)["W1"]
    assert abs(w.var() / (2 / 400) - 1) < 0.03          # normal, variance 2 / n_in


@pytest.mark.parametrize("act", ["tanh", "sigmoid"])
def test_xavier_init_for_bounded_activations(act):
    w = MLP([400, 300], act, dtype=np.float64).init(0)["W1"]
    limit = np.sqrt(6 / 700)
    assert np.abs(w).max() <= limit                      # uniform on +-sqrt(6/(in+out))
    assert abs(w.var() / (2 / 700) - 1) < 0.03


@pytest.mark.parametrize("act", sorted(ACTS))
def test_apply_matches_numpy_eager_and_compiled(act):
    net = MLP([6, 5, 4, 3], act, dtype=np.float64)
    params = net.init(2)
    X = np.random.default_rng(0).standard_normal((8, 6))
    expected = reference_forward(params, X, ACTS[act], 3)
    np.testing.assert_allclose(net.apply(params, X), expected, rtol=1e-12)
    compiled = adjit.compile(net.apply, backend="numpy")
    np.testing.assert_allclose(compiled(params, X), expected, rtol=1e-12)


@pytest.mark.parametrize("act", sorted(ACTS))
def test_gradient_through_mlp_matches_central_differences(act):
    net = MLP([3, 4, 2], act, dtype=np.float64)
    params = net.init(3)
    params["b1"] = params["b1"] + 0.1                     # keep relu inputs away from 0
    X = np.random.default_rng(1).standard_normal((5, 3))

    def loss(params, X):
        return np.sum(net.apply(params, X) ** 2)
    assert adjit.gradcheck(loss, params, X) < 1e-6


def test_bad_configuration_and_input_shapes():
    with pytest.raises(ValueError, match="activation"):
        MLP([2, 2], activation="gelu")
    with pytest.raises(ValueError, match="at least two"):
        MLP([3])
    net = MLP([4, 2])
    with pytest.raises(adjit.ShapeError, match="expects 4"):
        adjit.compile(net.apply, backend="numpy")(net.init(0), np.zeros((3, 5), np.float32))


def test_num_params_and_repr():
    net = MLP([784, 256, 10])
    assert net.num_params() == 784 * 256 + 256 + 256 * 10 + 10
    assert sum(v.size for v in net.init(0).values()) == net.num_params()
    assert repr(net) == "MLP([784, 256, 10], activation='relu')"


@pytest.mark.parametrize("kwargs, match", [
    (dict(sizes=[2.5, 3]), "whole-number widths"),        # was silently MLP([2, 3])
    (dict(sizes=["a", 3]), "whole-number widths"),
    (dict(sizes=[True, 3]), "whole-number widths"),
    (dict(sizes=[4, 3], dtype=np.int32), "floating-point"),  # was all-zero int weights
])
def test_bad_sizes_and_dtype(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MLP(**kwargs)


def test_whole_float_sizes_are_accepted_and_bad_seeds_and_params_are_clear():
    net = MLP([4.0, np.int64(3)])
    assert net.sizes == [4, 3]
    with pytest.raises(ValueError, match="non-negative integer, got -1"):
        net.init(-1)
    params = MLP([4, 5, 3]).init(0)
    del params["b2"]
    with pytest.raises(KeyError, match="params has no b2"):
        MLP([4, 5, 3]).apply(params, np.zeros((2, 4), np.float32))
