"""Regressions from the fourteenth session (sweep 25)."""
import collections
import os
import warnings

import numpy as np
import pytest

import adjit


# -- layouts of arguments (tester B) ---------------------------------------------------------
def _ravel_k(x):
    return np.sum(x.ravel(order="K") * np.arange(x.size))


@pytest.mark.parametrize("make", [
    lambda: np.asfortranarray(np.arange(12.0).reshape(3, 4) ** 2)[:, ::2],   # F-like strides
    lambda: np.arange(24.0).reshape(2, 3, 4).transpose(2, 0, 1),             # permuted axes
], ids=["strided-fortran", "permuted"])
def test_order_k_of_an_argument_laid_out_otherwise_than_c_is_refused(make):
    """NumPy reads these in their memory order; adjit refused only F-contiguous ones and
    read the others in C order (a wrong number and a transposed gradient)."""
    x = make()
    with pytest.raises(adjit.UnsupportedError, match="memory layout"):
        adjit.compile(_ravel_k)(x)


def test_order_k_of_a_strided_c_like_argument_is_its_c_order():
    x = np.arange(20.0).reshape(4, 5)[:, ::2]
    assert adjit.compile(_ravel_k)(x) == _ravel_k(x)


def test_a_fortran_ordered_memmap_is_not_given_the_c_ordered_program(tmp_path):
    def f(x):
        return np.sum(x.reshape(-1, order="A") * np.arange(x.size))
    a = np.arange(6.0).reshape(2, 3) ** 2
    mm = np.memmap(os.path.join(tmp_path, "m.dat"), dtype=np.float64, mode="w+", shape=(2, 3),
                   order="F")
    mm[:] = a
    c = adjit.compile(f)
    assert c(a) == f(a)
    # its own program, reading Fortran order (refused before sweep 29, which follows the
    # layout of arguments)
    assert c(mm) == f(mm) != f(a)


def test_contiguity_constructors_of_arguments_alias_as_numpy_does():
    def h(x):
        y = np.asfortranarray(x)     # x itself when x is Fortran-ordered
        y[0, 0] = 0.0
        return np.sum(x)

    def f(x):
        y = np.ascontiguousarray(x)  # a copy when x is strided
        y[0] = 0.0
        return np.sum(x)
    xf = np.asfortranarray(np.arange(1.0, 7.0).reshape(2, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", adjit.AdjitWarning)
        assert adjit.compile(h)(xf) == h(xf.copy(order="K")) == 20.0
        assert adjit.compile(h)(np.ascontiguousarray(xf)) == h(np.ascontiguousarray(xf))
        for make in (lambda: np.arange(1.0, 9.0)[::2], lambda: np.arange(1.0, 9.0)[::-1],
                     lambda: np.arange(1.0, 9.0)):
            assert adjit.compile(f)(make()) == f(make()), make().strides


# -- small API points (tester B) ---------------------------------------------------------------
def test_donate_argnums_none_means_none_as_in_jax():
    assert np.array_equal(adjit.compile(lambda a: a * 2, donate_argnums=None)(np.ones(2)),
                          [2.0, 2.0])


def test_an_object_array_of_numbers_gets_the_conversion_advice():
    X = np.array([[1.0, 2.0], [3.0, 4.0]]).astype(object)
    with pytest.raises(adjit.TraceError, match=r"x.astype\(float\)") as e:
        adjit.grad(lambda w, X: np.sum(X @ w))(np.ones(2), X)
    assert "static_argnums" not in str(e.value)


def test_a_defaultdict_argument_gets_a_defaultdict_gradient():
    d = collections.defaultdict(list, {"a": np.ones(2), "b": np.ones(3)})
    f = adjit.grad(lambda d: np.sum(d["a"] ** 2) + np.sum(d["b"]))
    g = f(d)
    assert type(g) is collections.defaultdict and g.default_factory is list
    assert np.array_equal(g["a"], [2.0, 2.0]) and np.array_equal(g["b"], [1.0, 1.0, 1.0])
    g = f(collections.defaultdict(list, {"a": np.zeros(2), "b": np.ones(3)}))
    assert type(g) is collections.defaultdict and np.array_equal(g["a"], [0.0, 0.0])


# -- generated code (tester C) ----------------------------------------------------------------
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_an_argument_named_like_a_builtin_does_not_hide_it(backend):
    """inf and nan were written float('inf'): a parameter called float broke the program."""
    def g(float, x):
        return np.sum(np.clip(float * x, -np.inf, 5.0))
    got = adjit.grad(g, argnums=(0, 1), backend=backend)(np.ones(3), np.ones(3))
    assert np.array_equal(got[0], np.ones(3)) and np.array_equal(got[1], np.ones(3))

    def sum(range, len):   # noqa: A001 - a user's names
        return np.mean(np.where(range > 0, range * len, np.nan))
    v, g2 = adjit.value_and_grad(sum, backend=backend)(np.array([1.0, 2.0]),
                                                       np.array([3.0, 4.0]))
    assert v == 5.5 and np.array_equal(g2, [1.5, 2.0])


def test_argument_names_that_clean_up_alike_stay_distinct():
    def f(x_in2, x, x_):
        return np.sum(x_in2 * x * x_)
    g = adjit.grad(f, argnums=(0, 1, 2))(np.ones(2), np.ones(2), 2 * np.ones(2))
    assert [list(v) for v in g] == [[2.0, 2.0], [2.0, 2.0], [1.0, 1.0]]
    p = {"a_in2": np.ones(3), "a": np.ones(3), "a!": np.ones(3)}
    g = adjit.grad(lambda p: sum(np.sum(np.sin(v)) for v in p.values()))(p)
    assert all(np.allclose(g[k], np.cos(1.0)) for k in p)


def test_a_file_name_with_a_line_break_stays_inside_comments(tmp_path):
    name = str(tmp_path / 'x\n__import__("os").system("id")\n.py')
    ns = {"np": np}
    exec(compile("def f(x):\n    return np.sum(np.log1p(np.exp(x * 3.0)))\n", name, "exec"), ns)
    prog = adjit.grad(ns["f"], backend="numba").lower(np.ones(5000))
    for text in [prog.ir, prog.source] + list(prog.kernels.values()):
        assert not any(line.startswith("__import__") for line in text.splitlines())


def test_values_are_named_after_a_line_only_when_it_is_one_assignment():
    """`e = np.exp(c); f_ = e * 2` named f_'s value e (the first target of the line)."""
    def f(x, w):
        c = x * w
        e = np.exp(c); f_ = e * 2   # noqa: E702 - the case
        s = np.sum(f_ + e)
        return s
    src = adjit.grad(f, backend="numpy", fuse=False).lower(np.ones(3), np.ones(3)).source
    assert "e_v" not in src and "c_v" in src


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_transpose_read_by_one_matrix_product_is_written_into_it(backend):
    """README's excerpt: `X @ params_W1.T` and `v28.T @ X`, not a statement per transpose."""
    def loss(params, X, y):
        h = np.tanh(X @ params["W1"].T + params["b1"])
        z = h @ params["W2"].T + params["b2"]
        logp = z - adjit.logsumexp(z, axis=1, keepdims=True)
        return -np.mean(logp[np.arange(len(y)), y])
    rng = np.random.default_rng(0)
    params = {"W1": rng.normal(size=(16, 20)), "b1": np.zeros(16),
              "W2": rng.normal(size=(10, 16)), "b2": np.zeros(10)}
    X, y = rng.normal(size=(8, 20)), rng.integers(0, 10, size=8)
    src = adjit.grad(loss, backend=backend).lower(params, X, y).source
    assert "X @ params_W1.T" in src and ".T @ X" in src and "= params_W1.T" not in src
    ref = adjit.grad(loss, backend="numpy", fuse=False)(params, X, y)
    got = adjit.grad(loss, backend=backend)(params, X, y)
    assert all(np.allclose(got[k], ref[k], rtol=1e-13) for k in params)


def test_a_budget_below_the_programs_minimum_names_the_minimum():
    """A refit after fusion lowered the budget below zero and reported that internal figure
    ("memory_budget must be a positive ... number of bytes, got -42048")."""
    rng = np.random.default_rng(3)
    W, xs = rng.normal(size=(16, 16)) * 0.3, rng.normal(size=(40, 16))

    def rnn(W, xs):
        h, tot = np.zeros(16), 0.0
        for t in range(xs.shape[0]):
            h = np.tanh(W @ h + xs[t])
            tot = tot + np.sum(h ** 2)
        return tot
    with pytest.raises(adjit.BudgetError, match=r"at least memory_budget=\d+"):
        adjit.grad(rnn, backend="numpy", memory_budget=12000)(W, xs)



# -- layouts, second round (tester E) ---------------------------------------------------------
def _write_then_sum(make_view):
    def f(x):
        y = make_view(x)
        y.reshape(-1)[0] = 100.0
        return np.sum(x)
    return f


@pytest.mark.parametrize("name,make_view,make_x", [
    ("asfortranarray of strided 1-d", lambda x: np.asfortranarray(x),
     lambda: np.arange(1.0, 9.0)[::2]),
    ("asarray F of (1, n) strided", lambda x: np.asarray(x, order="F"),
     lambda: np.arange(1.0, 9.0).reshape(1, 8)[:, ::2]),
    ("ravel of negative strides", np.ravel, lambda: np.arange(1.0, 9.0)[::-2]),
    ("reshape of a Fortran array", lambda x: x.reshape(-1),
     lambda: np.asfortranarray(np.arange(1.0, 13.0).reshape(3, 4))),
    ("reshape of every other row", lambda x: x.reshape(-1),
     lambda: np.arange(1.0, 25.0).reshape(6, 4)[::2]),
    ("array copy=None order C of a Fortran array",
     lambda x: np.array(x, copy=None, order="C"),
     lambda: np.asfortranarray(np.arange(1.0, 13.0).reshape(3, 4))),
], ids=lambda v: v if isinstance(v, str) else "")
def test_views_and_copies_of_arguments_follow_their_layout(name, make_view, make_x):
    """NumPy copies these (the argument is not laid out for a view); adjit took views, so a
    write into the copy changed the argument (value and gradient)."""
    f = _write_then_sum(make_view)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", adjit.AdjitWarning)
        assert adjit.compile(f)(make_x()) == f(make_x())
        assert np.array_equal(adjit.grad(f)(make_x()), np.ones_like(make_x()))


@pytest.mark.parametrize("make", [
    lambda x: np.asfortranarray(x), lambda x: np.array(x, order="F"),
    lambda x: x.copy(order="F")])
def test_order_a_of_a_fortran_copy_made_inside_is_refused(make):
    """It read the Fortran copy in C order (a wrong number, a transposed gradient)."""
    def f(x):
        return np.sum(make(x).ravel(order="A") * np.arange(x.size))
    with pytest.raises(adjit.UnsupportedError, match="memory layout"):
        adjit.compile(f)(np.arange(6.0).reshape(2, 3))
    g = lambda x: np.sum(make(x).ravel(order="F") * np.arange(x.size))   # noqa: E731
    x = np.arange(6.0).reshape(2, 3)
    assert adjit.compile(g)(x) == g(x)
