"""Sweep 29's finds (and sweep 28's messages left open): class attributes indexed by traced
positions, array-like wrappers whose __array__ returns a traced array, string labels as an
argument, long-double constants, memory-order reshapes of arguments, Python bool flags,
strings in arithmetic."""
import numpy as np
import pytest

import adjit
from adjit.ir.errors import TraceError


class _Base:
    shared = np.array([1.0, 2.0, 3.0])


class _Loss(_Base):
    weights = np.array([1.0, 2.0, 0.5, 4.0])          # set in the class body
    cfg = {"w": np.array([5.0, 6.0, 7.0, 8.0])}

    def __call__(self, w):
        i = np.argmax(w)
        return (np.sum(self.weights[i] * w ** 2) + self.shared[i % 3] +
                _Loss.cfg["w"][i] * w[0])


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_class_attribute_tables_take_traced_positions(backend):
    # sweep 28: an array set in the class body, read as self.weights[i] or Loss.weights[i],
    # was refused (instance attributes worked)
    w = np.array([0.1, 0.5, -0.2, 0.3])
    g = adjit.grad(_Loss(), backend=backend)(w)
    np.testing.assert_allclose(g, [0.4 + 6.0, 2.0, -0.8, 1.2], rtol=1e-14)
    # the class holds its own arrays again after the trace
    assert type(_Loss.weights) is np.ndarray and type(_Base.shared) is np.ndarray
    assert type(_Loss.cfg["w"]) is np.ndarray


class _Param:
    def __init__(self, a):
        self.a = a

    def __array__(self, dtype=None, copy=None):
        return self.a


def test_an_array_like_wrapper_of_a_traced_array_unwraps():
    x = np.array([0.5, -1.0, 2.0])
    g = adjit.grad(lambda w: np.sum(np.asarray(_Param(w)) ** 2))(x)
    np.testing.assert_allclose(g, 2 * x)
    g = adjit.grad(lambda w: np.sum(np.array(_Param(w), dtype=np.float64) ** 3))(x)
    np.testing.assert_allclose(g, 3 * x ** 2)
    # a NumPy function given the wrapper itself: named, with the way out
    with pytest.raises(TraceError, match=r"__array__ returns a traced array at .*"
                                         r"test_sweep29.py:\d+.*np.asarray\(obj\)"):
        adjit.grad(lambda w: np.sum(_Param(w)) ** 2)(x)


def test_string_labels_as_an_argument_say_what_works():
    x = np.array([1.0, 2.0, 4.0])
    labels = np.array(["a", "b", "a"])

    def loss(x, labels):
        u, inv = np.unique(labels, return_inverse=True)
        s = np.zeros(len(u))
        np.add.at(s, inv, x)
        return np.sum(s ** 2)
    with pytest.raises(TraceError, match=r"array of strings.*codes.*tuple\(labels\)"):
        adjit.grad(loss)(x, labels)
    with pytest.raises(TypeError, match=r"array of strings.*tuple\(labels\)"):
        adjit.grad(loss, static_argnums=1)(x, labels)
    # what the message says works
    g = adjit.grad(loss, static_argnums=1)(x, tuple(labels))
    np.testing.assert_allclose(g, [10.0, 4.0, 10.0])


@pytest.mark.skipif(np.finfo(np.longdouble).nmant <= 52, reason="long double is float64 here")
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_long_double_constants_keep_their_digits(backend):
    # sweep 29: np.longdouble(1) / 3 was written as np.float128(0.3333333333333333)
    third = np.longdouble(1) / 3
    c = np.clongdouble(1 + 2j) / 3
    x = np.ones(3, np.longdouble)
    np.testing.assert_array_equal(adjit.compile(lambda x: x - third, backend=backend)(x),
                                  x - third)
    z = x.astype(np.clongdouble)
    np.testing.assert_array_equal(adjit.compile(lambda z: z * c, backend=backend)(z), z * c)


_LAYOUTS = {
    "F": lambda: np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    "C": lambda: np.arange(6.0).reshape(2, 3),
    "T": lambda: np.arange(6.0).reshape(3, 2).T,
    "strided": lambda: np.asfortranarray(np.arange(24.0).reshape(2, 3, 4))[:, :, ::2],
}


@pytest.mark.parametrize("layout", list(_LAYOUTS))
@pytest.mark.parametrize("how", ["ravel K", "ravel A", "reshape A", "T ravel K", "T ravel A"])
def test_memory_order_reshapes_of_arguments_follow_their_layout(how, layout):
    # sweep 29: a.ravel(order='K') of a Fortran-ordered argument was refused, though the
    # argument's layout is known (one program per layout)
    x = _LAYOUTS[layout]()
    w = np.cos(np.arange(x.size))
    op, order = how.rsplit(" ", 1)

    def f(a):
        a = a.T if op.startswith("T") else a
        r = a.reshape(-1, order=order) if op == "reshape" else a.ravel(order=order)
        return np.sum(r * w)
    if layout == "strided" and how == "ravel K":     # strides increase: memory order
        with pytest.raises(adjit.UnsupportedError, match="order='K' of a strided view"):
            adjit.compile(f)(x)
        return
    np.testing.assert_allclose(adjit.compile(f)(x), f(x), rtol=1e-15)
    g = adjit.grad(f)(x)
    num = np.zeros_like(x)
    for i in np.ndindex(*x.shape):
        xp = _LAYOUTS[layout]()      # the same layout, one element moved
        xp[i] += 1.0
        num[i] = f(xp) - f(x)         # linear in x: exact
    np.testing.assert_allclose(g, num, rtol=1e-12, atol=1e-12)


def test_a_python_bool_argument_is_a_static_flag():
    # sweep 29: f(W, X, training=False) with `if training:` was refused (a traced bool)
    def f(W, X, training=True):
        h = X @ W
        if training:
            h = h * 0.5
        return np.sum(h ** 2)
    W, X = np.ones((3, 2)), np.ones((4, 3))
    np.testing.assert_array_equal(adjit.grad(f)(W, X, training=False), np.full((3, 2), 24.0))
    np.testing.assert_array_equal(adjit.grad(f)(W, X, True), np.full((3, 2), 6.0))
    c = adjit.compile(f)
    assert (c(W, X, False), c(W, X, True), c(W, X)) == (72.0, 18.0, 18.0)


def test_arithmetic_with_a_string_names_it():
    # sweep 29: X @ W with X a string said "use * to scale"; X * W made a string array
    W = np.ones((3, 2))
    for f in (lambda W, X: np.sum(X @ W), lambda W, X: np.sum(X * W)):
        with pytest.raises(TypeError, match=r"meets the string 'abc' at .*test_sweep29.py"):
            adjit.grad(f)(W, "abc")
