"""Differential tests: user-style NumPy functions give the same values and gradients on every
backend and compile option. The NumPy backend without fusion is the reference; fused NumPy,
checkpointed NumPy and a donated training step on NumPy must be bit-identical to it, numba
(and its donated step) close (rtol 1e-12 in float64, 1e-5 in float32). A donated argument that
is a writable C-contiguous array holds the step's result.

The first part holds reproducers of disagreements a sweep over ~400 such functions found; the
table after them is a sample of that sweep.
"""
import numpy as np
import pytest

import adjit
from adjit.backends.codegen import donatable_each
from adjit.frontend import pytree

rng = np.random.default_rng(3)
X = rng.normal(size=(6, 4))
Y = rng.normal(size=6)
YB = np.sign(rng.normal(size=6))
YC = rng.integers(0, 3, 6)
M = rng.normal(size=(4, 4))
A3 = rng.normal(size=(2, 3, 4))
w = rng.normal(size=4)
W = rng.normal(size=(3, 4))
P = rng.uniform(0.2, 1.0, size=5)
XL = rng.normal(size=(64, 80))      # 5,120 elements: numba's default runs kernels on these
yl = rng.integers(0, 10, 64)
seq = rng.normal(size=(5, 3))


def leaves(t):
    return pytree.flatten(t)[0]


def tree_map(fn, *trees):
    _, treedef = pytree.flatten(trees[0])[:2]
    return pytree.unflatten(treedef, [fn(*xs) for xs in zip(*(leaves(t) for t in trees))])


def copies(t):
    return tree_map(lambda a: np.array(a, copy=True), t)


def f32(t):
    return tree_map(lambda a: np.asarray(a, np.float32), t)


def assert_same(got, want, exact, rtol=None):
    got, want = leaves(got), leaves(want)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        if exact:
            assert np.array_equal(a, b, equal_nan=True), np.max(np.abs(a - b))
        else:
            if rtol is None:
                rtol = 1e-12 if b.dtype == np.float64 else 1e-5
            scale = max(1.0, float(np.max(np.abs(b)))) if b.size else 1.0
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale)


def reference(f, x):
    return adjit.value_and_grad(f, backend="numpy", fuse=False)(copies(x))


def sgd_step(f):
    def step(p):
        v, g = adjit.value_and_grad(f)(p)
        return v, tree_map(lambda a, b: a - 0.1 * b, p, g)
    return step


# documented exceptions: an argument still read after its update would be written (README)
STILL_READ = {"nested_params": "a's update reads b and b's reads a: one goes in place",
              "tril_flip_pad": "the update reads the parameter through a flipped view"}


def check_step(f, x, backend, in_place=True, **options):
    """The donated step equals value_and_grad and an SGD update; results land in place."""
    want_v, want_g = reference(f, x)
    want = (want_v, tree_map(lambda a, b: a - 0.1 * b, x, want_g))
    p = copies(x)
    before = leaves(p)
    got = adjit.compile(sgd_step(f), backend=backend, donate_argnums=0, **options)(p)
    rtol = 1e-12 if all(np.asarray(a).dtype == np.float64 for a in leaves(x)) else 1e-5
    assert_same(got, want, backend == "numpy", rtol)
    for a, b in zip(before, leaves(got[1])):
        if in_place and a.ndim and a.flags.c_contiguous and a.flags.writeable:
            assert np.shares_memory(a, b), "a donated C-contiguous array holds its result"


# -- reproducers -------------------------------------------------------------------------------
def batchnorm_std(x):
    y = (x - x.mean(axis=0)) / (x.std(axis=0) + 1e-5)
    return np.sum(y ** 3)


def powers(p):
    return np.sum(np.power(p, 3) + np.power(p, 2.5) + p ** -1 + p ** 0.5 + p ** 1.5 +
                  np.power(p, -2))


def powers_neg_base(w):
    return np.sum(w ** 3 + np.power(w, 4) + w ** 3.0)


@pytest.mark.parametrize("f,x", [(batchnorm_std, X), (batchnorm_std, f32(X)), (powers, f32(P)),
                                 (powers_neg_base, f32(w))], ids=["bn", "bn32", "pow32",
                                                                  "powneg32"])
def test_powers_with_constant_exponents_fused_equal_unfused(f, x):
    """The VJP of x ** 3 raises x to 3 - 1: computed from broadcast constants it was a full
    array of 2.0 unfused, a scalar 2.0 fused, and NumPy squares for the scalar (and for a
    stride-0 view) but calls pow for the array. Simplify now folds elementwise ops of uniform
    constants into a broadcast scalar."""
    assert_same(adjit.value_and_grad(f, backend="numpy")(x), reference(f, x), exact=True)


def test_elementwise_ops_of_uniform_constants_fold_to_a_broadcast_scalar():
    g = adjit.value_and_grad(lambda y: np.sum(y ** 3.0), backend="numpy",
                             fuse=False).lower(np.arange(1, 5.0)).graph
    subs = [n for n in g.nodes() if g[n]["op"] == "sub"]
    assert not subs
    consts = {float(np.asarray(g[n]["attrs"]["value"])) for n in g.nodes()
              if g[n]["op"] == "const"}
    assert 2.0 in consts


def test_cast_of_a_broadcast_is_a_broadcast_of_the_cast():
    """astype of a broadcast view lays out its result with the broadcast axis innermost, so
    the multiply written into it and the sum over it added in another order than fused."""
    f = lambda v: np.sum(np.broadcast_to(v, (3, 4)) * W)      # noqa: E731
    x = f32(w)
    assert_same(adjit.value_and_grad(f, backend="numpy")(x), reference(f, x), exact=True)
    g = adjit.trace(f, x)
    from adjit.passes.simplify import simplify
    s = simplify(g)
    casts = [n for n in s.nodes() if s[n]["op"] == "cast"]
    assert casts and all(s[n]["shape"] == (4,) for n in casts)


def swap_expand(a):
    b = np.expand_dims(np.swapaxes(a, 0, 2), 1)
    return np.sum(np.squeeze(b, 1) ** 3) + np.sum(a[:, None] * a[None])


@pytest.mark.parametrize("order", ["C", "F"])
def test_broadcast_result_of_a_fused_group_is_laid_out_as_unfused(order):
    """A fused group's full-shape result from smaller operands went into a new C-order array;
    unfused NumPy lays it out after its operands (F order here), so a sum over it differed."""
    x = np.array(A3, order=order)
    want = reference(swap_expand, x)
    for opts in (dict(), dict(checkpoint=2), dict(checkpoint="sqrt")):
        assert_same(adjit.value_and_grad(swap_expand, backend="numpy", **opts)(
            np.array(A3, order=order)), want, exact=True)
    check_step(swap_expand, x, "numpy")


@pytest.mark.parametrize("axis,weights", [(0, np.arange(1, 7.0)), (1, [1.0, 2.0, 3.0, 4.0]),
                                          (-1, np.ones(4)), (None, X * X + 1)])
def test_average_with_weights_along_an_axis(axis, weights):
    f = lambda x: np.sum(np.average(x, axis=axis, weights=weights) ** 2)   # noqa: E731
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(X), f(X), rtol=1e-13)
    assert adjit.gradcheck(f, X) < 1e-6


def test_average_with_weights_over_two_axes_and_misfit_weights():
    f = lambda a: np.average(a, axis=(2, 0), weights=np.arange(1, 9.0).reshape(4, 2))  # noqa
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(A3), f(A3), rtol=1e-13)
    with pytest.raises(adjit.AdjitError if hasattr(adjit, "AdjitError") else ValueError,
                       match="weights"):
        adjit.compile(lambda a: np.average(a, axis=0, weights=np.ones(5)),
                      backend="numpy")(A3)


def two_layers(p):
    h = X
    for Wk in p["layers"]:
        h = np.tanh(h @ Wk)
    return np.sum((h @ p["out"]) ** 2)


@pytest.mark.parametrize("backend,options", [("numpy", {}), ("numba", {"min_kernel_size": 0})])
def test_each_donated_argument_is_judged_alone(backend, options):
    """One strided (F-order, for numba's flat kernels) or read-only parameter used to keep
    every other parameter from being updated in place."""
    p = {"layers": [np.asfortranarray(rng.normal(size=(4, 4))), rng.normal(size=(4, 4))],
         "out": rng.normal(size=4)}
    ro = p["layers"][1]
    ro.flags.writeable = False
    check_step(two_layers, p, backend, **options)
    p2 = copies(p)
    p2["layers"][1].flags.writeable = False
    out = p2["out"]
    _, new = adjit.compile(sgd_step(two_layers), backend=backend, donate_argnums=0,
                           **options)(p2)
    assert np.shares_memory(new["out"], out)
    assert not np.shares_memory(new["layers"][1], p2["layers"][1])


def test_donatable_each_judges_overlap_per_array():
    a, b = np.zeros(4), np.zeros(4)
    c = np.zeros(8)
    assert donatable_each((a, b), ()) == (True, True)
    assert donatable_each((a, c[:4]), (c[4:],)) == (True, True)
    assert donatable_each((a, c[:5]), (c[4:],)) == (True, False)
    assert donatable_each((a, a), ()) == (False, False)
    assert donatable_each((a, np.asfortranarray(np.zeros((2, 2)))), (), True) == (True, False)
    assert donatable_each((a, 1.0), (b,)) == (True, False)
    assert not all(donatable_each((a, b[::2]), (b,))) and all(donatable_each((a,), (b,)))


# -- a sample of the sweep's user-style functions ----------------------------------------------
CASES = {}


def case(name, x, numba0=False):
    def deco(f):
        CASES[name] = (f, x, numba0)
        return f
    return deco


@case("mse", w)
def _(w):
    return np.mean((X @ w - Y) ** 2)


@case("huber", w)
def _(w, d=1.0):
    r = X @ w - Y
    return np.mean(np.where(np.abs(r) <= d, 0.5 * r ** 2, d * (np.abs(r) - 0.5 * d)))


@case("ce_logsoftmax", W, numba0=True)
def _(W):
    z = X @ W.T
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.sum(np.exp(z), axis=1, keepdims=True))
    return -np.mean(logp[np.arange(len(YC)), YC])


@case("hinge", w)
def _(w):
    return np.mean(np.maximum(0, 1 - YB * (X @ w))) + 0.01 * np.sum(w ** 2)


@case("focal", w)
def _(w, gamma=2.0):
    p = 1 / (1 + np.exp(-(X @ w)))
    y = (YB > 0).astype(float)
    pt = np.where(y == 1, p, 1 - p)
    return -np.mean((1 - pt) ** gamma * np.log(pt))


@case("kl_softmax", w)
def _(w):
    p = np.exp(w) / np.exp(w).sum()
    return np.sum(p * (np.log(p) - np.log(np.ones(4) / 4)))


@case("mlp_dict", {"W1": rng.normal(size=(4, 5)), "b1": np.zeros(5),
                   "W2": rng.normal(size=(5, 1)), "b2": np.zeros(1)}, numba0=True)
def _(p):
    h = np.tanh(X @ p["W1"] + p["b1"])
    return np.mean(((h @ p["W2"] + p["b2"]).ravel() - Y) ** 2)


@case("mlp_list", [rng.normal(size=(4, 5)), rng.normal(size=5), rng.normal(size=5)])
def _(ps):
    W1, b1, w2 = ps
    return np.sum((np.maximum(X @ W1 + b1, 0) @ w2 - Y) ** 2)


@case("layernorm", X)
def _(x):
    mu = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return np.sum((x - mu) / np.sqrt(var + 1e-5) * np.arange(4.0))


@case("batchnorm_std", X)
def _(x):
    return batchnorm_std(x)


@case("attention", rng.normal(size=(5, 4)), numba0=True)
def _(x):
    q, k, v = x @ M, x @ M.T, x @ (M * 0.5)
    s = q @ k.T / np.sqrt(4)
    a = np.exp(s - s.max(axis=-1, keepdims=True))
    a = a / a.sum(axis=-1, keepdims=True)
    return np.sum((a @ v) ** 2)


@case("rnn", {"Wh": rng.normal(size=(3, 3)) * 0.5, "Wx": rng.normal(size=(3, 3))})
def _(p):
    h = np.zeros(3)
    for t in range(seq.shape[0]):
        h = np.tanh(p["Wh"] @ h + p["Wx"] @ seq[t])
    return np.sum(h ** 2)


@case("conv_stack", rng.normal(size=(3, 3)))
def _(k):
    img = XL[:6, :6]
    out = np.stack([np.stack([np.sum(img[i:i + 3, j:j + 3] * k) for j in range(4)])
                    for i in range(4)])
    return np.sum(out ** 2)


@case("idx_mixed", M)
def _(m):
    return np.sum(m[::-1, 1:3] * m[-2::-1, ::-2][:, :2].sum()) + m[1, 2] * m[0, 0] + \
        np.sum(m[[0, 2, 3]] ** 2) + np.sum(m[M > 0])


@case("ellipsis_none", A3)
def _(a):
    return np.sum(a[..., 0] * a[:, None, :, 1].sum(axis=1)) + np.sum(a[None] ** 2)


@case("concat_split", w)
def _(w):
    a, b = np.split(w, 2)
    return np.sum(np.concatenate([b, a]) * np.arange(4.0))


@case("stack_axis", w)
def _(w):
    return np.sum(np.stack([w, w ** 2, np.sin(w)], axis=-1) @ np.arange(3.0))


@case("mean_var_std", M)
def _(m):
    return m.mean() + m.var() + m.std() + m.var(axis=0, ddof=1).sum()


@case("norms", M)
def _(m):
    return np.linalg.norm(m) + np.linalg.norm(m[0]) + np.linalg.norm(m, axis=0).sum()


@case("clip", w * 2)
def _(w):
    return np.sum(np.clip(w, -1, 1) ** 2 + w.clip(-0.5, None) + w.clip(max=0.7))


@case("transcendental", P)
def _(p):
    return np.sum(np.sqrt(p) + np.exp(p) + np.log(p) + np.log1p(p) + np.expm1(p) +
                  np.log2(p) + np.tanh(p) + np.arcsin(p * 0.9) + np.arctan2(p, 1.5))


@case("powers", P)
def _(p):
    return powers(p)


@case("power_array_exp", w)
def _(w):
    return np.sum(2.0 ** w + np.power(1.5, w))


@case("products", M)
def _(m):
    return np.dot(m, m).sum() + np.matmul(m, w).sum() + (m @ m.T).trace() + \
        np.outer(w, w @ m).sum()


@case("einsum", M)
def _(m):
    return np.einsum("ij,jk,kl->il", m, m, m).sum() + np.einsum("ii->i", m).sum()


@case("broadcast_to", w)
def _(w):
    return np.sum(np.broadcast_to(w, (3, 4)) * W)


@case("pairwise_dist", rng.normal(size=(5, 2)))
def _(x):
    d2 = np.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1)
    return np.sum(np.exp(-d2 / 0.5))


@case("cumsum", w)
def _(w):
    return np.cumsum(w)[-1] * np.cumsum(w ** 2)[2]


@case("swap_expand", A3)
def _(a):
    return swap_expand(a)


@case("nested_params", ((w, w * 2), {"c": M}))
def _(p):
    (a, b), d = p
    return np.sum(a * b ** 2) + np.sum(d["c"] ** 2)


@case("big_softmax_ce", rng.normal(size=(80, 10)) * 0.1, numba0=True)
def _(W):
    z = XL @ W
    z = z - z.max(axis=1, keepdims=True)
    lp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -lp[np.arange(64), yl].mean()


@case("big_softmax_axis0", XL)
def _(x):
    e = np.exp(x - x.max(axis=0))
    return np.sum(e / e.sum(axis=0) * np.cos(x))


@case("big_layernorm_T", XL.T.copy())
def _(x):
    x = x.T
    mu = x.mean(axis=1, keepdims=True)
    v = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    return np.sum(np.tanh((x - mu) / np.sqrt(v + 1e-5)) * XL)


@case("big_bias", rng.normal(size=80))
def _(b):
    h = np.maximum(XL + b, 0.0)
    return np.sum(h * h) / h.size + np.sum(np.abs(b))


@case("big_col_bias", rng.normal(size=64))
def _(b):
    return np.sum(np.tanh(XL * b[:, None] - b[:, None] ** 2).sum(axis=1) ** 2)


@case("big_aug_assign", XL)
def _(x):
    h = x * 1.0
    h += 2.0
    h *= x
    h -= np.mean(h)
    h /= 3.0
    return np.sum(h ** 2)


@case("big_where_guard", XL)
def _(x):
    safe = np.where(x > 0, x, 1.0)
    return np.sum(np.where(x > 0, np.log(safe), 0.0)) + np.sum(np.sqrt(np.abs(x) + 1e-3))


@case("big_max_ties", np.round(XL))
def _(x):
    return np.sum(np.max(x, axis=1) ** 2) + np.sum(np.min(x, axis=0))


@case("big_3d", rng.normal(size=(16, 20, 24)))
def _(a):
    m = a.mean(axis=1, keepdims=True)
    return np.sum(a.sum(axis=(0, 2)) ** 2) + np.sum((a - m) ** 3) + np.sum(a.max(axis=-1))


@case("big_transpose3", rng.normal(size=(16, 20, 24)))
def _(a):
    b = np.transpose(a, (2, 0, 1))
    return np.sum(np.sin(b) * np.arange(20.0)) + np.sum(b.sum(axis=0) ** 2)


@case("big_composites", XL)
def _(x):
    return np.sum(adjit.logsumexp(x, axis=1)) + np.sum(adjit.softmax(x, axis=0) ** 2) + \
        np.sum(adjit.relu(x) * adjit.sigmoid(x) + adjit.softplus(-x))


@case("big_mixed_precision", XL.astype(np.float32))
def _(x):
    return np.sum(x * np.float32(0.5)) + np.sum((x.astype(np.float64) - XL) ** 2)


@case("big_two_layer", {"W1": rng.normal(size=(80, 64)) * 0.1, "b1": np.zeros(64),
                        "W2": rng.normal(size=(64, 10)) * 0.1, "b2": np.zeros(10)})
def _(p):
    h = np.tanh(XL @ p["W1"] + p["b1"])
    z = h @ p["W2"] + p["b2"]
    return np.mean(-adjit.log_softmax(z, axis=1)[np.arange(64), yl])


@case("big_onehot_mse", rng.normal(size=(80, 10)) * 0.1)
def _(W):
    return np.mean((XL @ W - adjit.one_hot(yl, 10)) ** 2)


@case("big_repeat_use", XL)
def _(x):
    a = np.exp(-x * x)
    b = a * x
    c = b - a
    return np.sum(a) + np.sum(b * c) + np.sum(c ** 2) + np.sum(a * b * c)


@case("scalar_param", np.float64(0.7))
def _(s):
    return s ** 2 + np.sin(s) * np.exp(s) + np.sum(X * s)


@case("size1_dims", np.ones((1, 4)))
def _(x):
    return np.sum((X - x) ** 2) + np.sum(x.T @ x)


@case("gather_rows", rng.normal(size=(3, 4)))
def _(E):
    return np.sum(E[YC] * X) + np.sum(np.take(E, YC, axis=0) ** 2)


@case("take_along_argmax", X)
def _(x):
    idx = np.argmax(x, axis=1)
    return np.sum(np.take_along_axis(x, idx[:, None], axis=1)) + np.sum(x[np.arange(6), YC])


@case("scan_stack", rng.normal(size=(3, 3)) * 0.5)
def _(A):
    v, vs = np.ones(3), []
    for i in range(6):
        v = np.tanh(A @ v + i * 0.1)
        vs.append(v)
    return np.sum(np.stack(vs) ** 2)


@case("reshape_chain", A3)
def _(a):
    b = a.reshape(6, 4).T.reshape(2, 2, 6)
    return np.sum(b[:, 0] * b[:, 1]) + np.sum(a.reshape(-1)[::3] ** 2)


@case("pow_param_exponent", rng.uniform(0.5, 2.0, size=4))
def _(e):
    return np.sum(np.abs(X) ** e) + np.sum(2.0 ** e)


@case("kinks_at_zero", np.zeros(4))
def _(x):
    return np.sum(np.abs(x)) + np.sum(np.maximum(x, 0)) + np.sqrt(np.sum(x * x) + 1.0) + \
        np.sum(np.minimum(x, x))


@case("average_weights", X)
def _(x):
    return np.sum(np.average(x, axis=0, weights=np.arange(1, 7.0)) ** 2)


@case("tril_flip_pad", rng.normal(size=(4, 4)))
def _(x):
    return np.trace(x @ x) + np.sum(np.tril(x)) + np.sum(np.flip(x, 0) * x) + \
        np.sum(np.pad(x, 1) ** 2 * np.arange(6.0))


@case("prod_tile", rng.uniform(0.5, 1.5, size=(2, 3)))
def _(x):
    return np.prod(x) + np.sum(np.prod(x, axis=0)) + np.sum(np.tile(x, (2, 2)) * np.arange(6.0))


NAMES = sorted(CASES)


def _inputs(name, dtype):
    x = CASES[name][1]
    return copies(x) if dtype == "f64" else f32(x)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("name", NAMES)
def test_numpy_options_equal_unfused_bit_for_bit(name, dtype):
    f = CASES[name][0]
    x = _inputs(name, dtype)
    want = reference(f, x)
    for opts in (dict(), dict(checkpoint=2), dict(checkpoint="sqrt")):
        assert_same(adjit.value_and_grad(f, backend="numpy", **opts)(copies(x)), want,
                    exact=True)
    check_step(f, x, "numpy", in_place=name not in STILL_READ)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("name", NAMES)
def test_numba_equals_numpy(name, dtype):
    f, _, numba0 = CASES[name]
    x = _inputs(name, dtype)
    want = reference(f, x)
    # float32 anywhere in the inputs: sums of float32 values may add in another order
    rtol = 1e-12 if all(a.dtype == np.float64 for a in leaves(x)) else 1e-5
    assert_same(adjit.value_and_grad(f, backend="numba")(copies(x)), want, False, rtol)
    if numba0 and dtype == "f64":
        assert_same(adjit.value_and_grad(f, backend="numba", min_kernel_size=0)(copies(x)),
                    want, False, rtol)
        check_step(f, x, "numba", name not in STILL_READ, min_kernel_size=0)


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("big_")][:4])
def test_numba_donated_step(name):
    f, x, _ = CASES[name]
    check_step(f, x, "numba", name not in STILL_READ)


@pytest.mark.parametrize("name", ["big_layernorm_T", "swap_expand", "mlp_dict"])
def test_fortran_and_strided_inputs(name):
    f = CASES[name][0]
    for make in (lambda a: np.array(a, order="F") if np.ndim(a) > 1 else np.array(a),
                 lambda a: np.array(a[..., ::-1], copy=True)[..., ::-1] if np.ndim(a)
                 else np.array(a)):
        x = tree_map(make, CASES[name][1])
        want = reference(f, x)
        assert_same(adjit.value_and_grad(f, backend="numpy")(copies(x)), want, exact=True)
        assert_same(adjit.value_and_grad(f, backend="numba", min_kernel_size=0)(
            tree_map(make, CASES[name][1])), want, exact=False)
