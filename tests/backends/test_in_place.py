"""Writing into existing buffers on the NumPy backend. Donated arguments: results written
into the arguments' buffers (`out=`) are bit-identical to new arrays; each in-place update runs
as soon as its gradient exists, so a training step's peak no longer holds every gradient (the
estimate still matches the measurement); arguments that alias, are read-only, or are still
read later are not overwritten; random programs agree with and without donation. Dying
values: a fused group writes its result and temporaries into arguments that die there."""
import numpy as np
import pytest

import adjit
from adjit.ir.errors import AdjitError
from adjit.nn.memory_study import tanh_mlp_loss as tanh_mlp
from programs import adam_init, adam_step, fuzz_programs, mlp_params, mnist_like, sgd_step


def copies(tree):
    if isinstance(tree, dict):
        return {k: copies(v) for k, v in tree.items()}
    return np.array(tree, copy=True)


def leaves(tree):
    if isinstance(tree, dict):
        return [x for k in sorted(tree) for x in leaves(tree[k])]
    if isinstance(tree, (tuple, list)):
        return [x for v in tree for x in leaves(v)]
    return [tree]


def same_bits(a, b):
    la, lb = leaves(a), leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x, y, equal_nan=True), np.max(np.abs(x - y))


def tanh_sgd(params, x):
    loss, g = adjit.value_and_grad(tanh_mlp)(params, x)
    return loss, {k: params[k] - np.float32(0.01) * g[k] for k in params}


def tanh_problem(depth, width, batch, seed=0):
    rng = np.random.default_rng(seed)
    p = {}
    for i in range(depth):
        p[f"W{i}"] = (rng.normal(size=(width, width)) / np.sqrt(width)).astype(np.float32)
        p[f"b{i}"] = (rng.normal(size=width) * 0.1).astype(np.float32)
    return p, rng.normal(size=(batch, width)).astype(np.float32)


# -- results -------------------------------------------------------------------------------------
@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("checkpoint", [None, "sqrt"])
def test_sgd_step_in_place_equals_new_arrays(fuse, checkpoint):
    p = mlp_params([20, 16, 16, 10])
    X, y = mnist_like(8)
    X = np.ascontiguousarray(X[:, :20])
    lr = np.float32(0.1)
    want = adjit.compile(sgd_step, backend="numpy", fuse=fuse, checkpoint=checkpoint)(
        p, X, y, lr)
    f = adjit.compile(sgd_step, backend="numpy", fuse=fuse, checkpoint=checkpoint,
                      donate_argnums=(0,))
    mine = copies(p)
    got = f(mine, X, y, lr)
    same_bits(got, want)
    assert all(got[1][k] is mine[k] for k in p), "updates were not written in place"
    assert "out=params_W1 if _rt_in_place" in f.lower(p, X, y, lr).source


def test_adam_step_updates_parameters_and_moments_in_place():
    p = mlp_params([20, 16, 10])
    X, y = mnist_like(8)
    X = np.ascontiguousarray(X[:, :20])
    state, lr = adam_init(p), np.float32(0.01)
    want = adjit.compile(adam_step, backend="numpy")(p, state, X, y, lr)
    f = adjit.compile(adam_step, backend="numpy", donate_argnums=(0, 1))
    mp, ms = copies(p), copies(state)
    got = f(mp, ms, X, y, lr)
    same_bits(got, want)
    assert all(got[1][k] is mp[k] and got[2]["m"][k] is ms["m"][k]
               and got[2]["v"][k] is ms["v"][k] for k in p)
    # a second step from the returned buffers equals a second step on new arrays
    want2 = adjit.compile(adam_step, backend="numpy")(want[1], want[2], X, y, lr)
    same_bits(f(got[1], got[2], X, y, lr), want2)


@pytest.mark.parametrize("checkpoint", [None, "sqrt", 3])
def test_deep_step_with_checkpoints_equals_plain(checkpoint):
    p, x = tanh_problem(9, 24, 5)
    want = adjit.compile(tanh_sgd, backend="numpy")(p, x)
    got = adjit.compile(tanh_sgd, backend="numpy", checkpoint=checkpoint,
                        donate_argnums=0)(copies(p), x)
    same_bits(got, want)


@pytest.mark.parametrize("min_kernel_size", [0, 10 ** 9])   # kernels; NumPy code
def test_numba_backend_with_donation_equals_numpy(min_kernel_size):
    p, x = tanh_problem(4, 64, 64)
    want = adjit.compile(tanh_sgd, backend="numpy")(p, x)
    f = adjit.compile(tanh_sgd, backend="numba", donate_argnums=0,
                      min_kernel_size=min_kernel_size)
    mine = copies(p)
    got = f(mine, x)
    for a, b in zip(leaves(got), leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert all(got[1][k] is mine[k] for k in p), "updates were not written in place"
    # a donated array in Fortran order is not written (kernels need C order): still right
    fortran = {k: np.asfortranarray(v) for k, v in p.items()}
    again = f(fortran, x)
    for a, b in zip(leaves(again), leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_numba_training_step_memory_is_estimated():
    """On numba too, updates run as their gradients appear and the estimate is measured."""
    p, x = tanh_problem(8, 256, 8)      # weights of 256 KiB, activations of 8 KiB
    f = adjit.compile(tanh_sgd, backend="numba", donate_argnums=0)
    est = f.lower(p, x).memory.peak_bytes
    assert est < sum(v.nbytes for v in p.values()) / 3
    meas = adjit.measure_peak_memory(f, copies(p), x)
    assert abs(meas - est) <= 0.1 * est + 4096, (meas, est)


# -- when an argument must not be overwritten ------------------------------------------------------
def test_aliased_donated_arguments_are_not_overwritten():
    x = np.arange(6.0).reshape(2, 3)
    f = adjit.compile(lambda p: {"a": p["a"] * 2.0, "b": p["b"] + 1.0}, backend="numpy",
                      donate_argnums=0)
    f({"a": x.copy(), "b": x.copy()})
    got = f({"a": x, "b": x})              # one buffer for both: neither may be written
    np.testing.assert_array_equal(got["a"], np.arange(6.0).reshape(2, 3) * 2)
    np.testing.assert_array_equal(got["b"], np.arange(6.0).reshape(2, 3) + 1)
    np.testing.assert_array_equal(x, np.arange(6.0).reshape(2, 3))
    # a donated argument that is a view of another argument is not written either
    big = np.arange(12.0).reshape(4, 3)
    g = adjit.compile(lambda a, b: (a * 2.0, b), backend="numpy", donate_argnums=0)
    out = g(big[:2], big)
    np.testing.assert_array_equal(out[0], np.arange(6.0).reshape(2, 3) * 2)
    np.testing.assert_array_equal(out[1], np.arange(12.0).reshape(4, 3))


def test_read_only_donations_are_left_alone():
    x = np.arange(4.0)
    x.flags.writeable = False
    f = adjit.compile(lambda a: a * 3.0, backend="numpy", donate_argnums=0)
    np.testing.assert_array_equal(f(x), np.arange(4.0) * 3)
    np.testing.assert_array_equal(x, np.arange(4.0))


@pytest.mark.parametrize("fn", [
    lambda w: (w * 2.0 + 1.0, np.sum(w)),            # the old value is read after the update
    lambda w: (np.sum(w), w * 2.0 + 1.0, np.max(w)),
    lambda w: w - w.T,                                # the update reads a transposed view
    lambda w: (w * 2.0, w.T),                         # a result is a view of the argument
    lambda w: (np.exp(w), w @ w),
], ids=["read-after", "read-around", "transposed", "view-result", "matmul-after"])
def test_values_still_needed_are_never_overwritten(fn):
    w = np.random.default_rng(0).normal(size=(4, 4))
    want = adjit.compile(fn, backend="numpy")(w.copy())
    got = adjit.compile(fn, backend="numpy", donate_argnums=0)(w.copy())
    same_bits(got, want)


def test_fuzzed_programs_agree_with_and_without_donation():
    progs = fuzz_programs(40)
    if not progs:
        pytest.skip("hypothesis is not installed")
    checked = 0
    for name, objective, xs in progs:
        def step(*a, objective=objective):
            return objective(*a)[1]
        want = adjit.compile(step, backend="numpy")(*xs)
        f = adjit.compile(step, backend="numpy", donate_argnums=tuple(range(len(xs))))
        with np.errstate(all="ignore"):
            got = f(*[x.copy() for x in xs])
        same_bits(got, want)
        checked += bool(f.lower(*xs).graph.meta["schedule"].in_place)
    assert checked >= 5, f"only {checked} programs wrote a result in place"


def test_unknown_donated_argument_is_named():
    with pytest.raises(AdjitError, match="donate_argnums names argument 3"):
        adjit.compile(lambda a: a * 2.0, backend="numpy", donate_argnums=3)(np.ones(3))


# -- memory --------------------------------------------------------------------------------------
def test_updates_run_as_soon_as_their_gradient_exists():
    """Gradients outweigh activations here: a step that writes each update into its
    parameter at once peaks below the bytes of all gradients together; the estimate agrees
    with tracemalloc."""
    p, x = tanh_problem(8, 128, 4)
    grads = sum(v.nbytes for v in p.values())
    plain = adjit.compile(tanh_sgd, backend="numpy")
    donated = adjit.compile(tanh_sgd, backend="numpy", donate_argnums=0)
    assert plain.lower(p, x).memory.peak_bytes >= grads
    est = donated.lower(p, x).memory.peak_bytes
    assert est < grads / 3       # a gradient and one temporary, not 16 gradients
    meas = adjit.measure_peak_memory(donated, copies(p), x)
    assert abs(meas - est) <= 0.1 * est + 4096, (meas, est)


@pytest.mark.parametrize("checkpoint", ["sqrt", 4])
def test_checkpointed_training_step_peaks_lower_than_store_all(checkpoint):
    p, x = tanh_problem(36, 32, 512)     # activations outweigh gradients
    base = adjit.compile(tanh_sgd, backend="numpy", donate_argnums=0)
    ck = adjit.compile(tanh_sgd, backend="numpy", donate_argnums=0, checkpoint=checkpoint)
    est_base = base.lower(p, x).memory.peak_bytes
    est = ck.lower(p, x).memory.peak_bytes
    assert est < 0.5 * est_base, (est, est_base)
    meas = adjit.measure_peak_memory(ck, copies(p), x)
    assert abs(meas - est) <= 0.1 * est, (meas, est)


def test_memory_budget_of_a_training_step_counts_updates_in_place():
    """A budget between the donated step's "sqrt" and store-all peaks fits (the checkpoint
    pass counts the updated parameters as written in place, not as new arrays), the
    measurement stays under it, and it recomputes less than "sqrt"."""
    p, x = tanh_problem(36, 128, 64)
    progs = {name: adjit.compile(tanh_sgd, backend="numpy", donate_argnums=0, **opts)
             for name, opts in [("all", {}), ("sqrt", {"checkpoint": "sqrt"})]}
    peaks = {k: f.lower(p, x).memory.peak_bytes for k, f in progs.items()}
    budget = (peaks["all"] + peaks["sqrt"]) // 2
    assert budget < sum(v.nbytes for v in p.values())   # less than all gradients together
    f = adjit.compile(tanh_sgd, backend="numpy", donate_argnums=0, memory_budget=budget)
    m = f.lower(p, x).memory
    assert m.peak_bytes <= budget
    assert m.recompute_ratio < progs["sqrt"].lower(p, x).memory.recompute_ratio
    assert adjit.measure_peak_memory(f, copies(p), x) <= budget
    same_bits(f(copies(p), x), adjit.compile(tanh_sgd, backend="numpy")(p, x))


# -- dying values ----------------------------------------------------------------------------------
def test_tanh_backward_allocates_nothing_new():
    """`g * (1 - h * h)` runs in the buffers of g and h, which die there."""
    p, x = tanh_problem(3, 64, 32)
    src = adjit.grad(tanh_mlp, backend="numpy").lower(p, x).source
    body = src[src.index("# backward"):]
    lines = [ln.strip() for ln in body.splitlines()]
    k = next(i for i, ln in enumerate(lines) if ln.startswith("_t0 = np.multiply("))
    end = next(i for i in range(k, len(lines)) if lines[i].startswith("v"))
    calls = [ln for ln in lines[k:end + 1] if "= np." in ln and not ln.startswith("#")]
    assert len(calls) == 3 and all("out=" in ln for ln in calls), calls


@pytest.mark.parametrize("fn", [
    lambda a, b: np.sum(np.exp(a) * np.tanh(a) + b),            # an argument read twice
    lambda a, b: np.sum((a * b) * (a * b).T),                   # a value read through a view
    lambda a, b: np.sum(np.maximum(a, 0) * a + np.exp(b) * b),
    lambda a, b: np.sum(np.sin(a @ b) * (a @ b)),
    lambda a, b: np.sum(a[:, :1] * np.cos(a) + b[0]),           # broadcast of a sliced value
    lambda a, b: np.sum(np.exp(a @ b) * 2.0 + (a @ b).T),       # a dying product and its .T
    lambda a, b: np.sum(np.sin((a @ b).T) * (a @ b) * 3.0),
], ids=["twice", "view", "relu", "matmul", "broadcast", "product-T", "T-product"])
def test_dying_value_reuse_equals_new_arrays(fn):
    """The schedule's reuse of dying buffers changes no bit: with fusion (groups reuse) and
    without (elementwise ufuncs reuse), against NumPy itself and the gradients."""
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(5, 5)), rng.normal(size=(5, 5))
    got = adjit.value_and_grad(fn, argnums=(0, 1), backend="numpy")(a, b)
    assert got[0] == fn(a, b)
    for fuse in (False, True):
        other = adjit.value_and_grad(fn, argnums=(0, 1), backend="numpy", fuse=fuse)(a, b)
        for x, y in zip(leaves(other), leaves(got)):
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-15)
    assert adjit.gradcheck(fn, a, b) < 1e-5      # central differences near zero entries


def test_a_value_read_with_its_transpose_is_not_overwritten():
    """A group reading X and X.T where X dies: neither the result nor a temporary may take
    X's buffer (found by the linear-algebra tests: the result was off by about 6)."""
    rng = np.random.default_rng(0)
    M1, M2 = rng.normal(size=(4, 4)), rng.normal(size=(4, 4))

    def f(A):
        X = A @ A
        Y = A @ M1
        return (X * M1 + X.T * M2) + (Y * M1 + Y.T * M2)
    A = rng.normal(size=(4, 4))
    for backend in ("numpy", "numba"):
        for k in (0, 10 ** 9):
            got = adjit.compile(f, backend=backend, min_kernel_size=k)(A)
            np.testing.assert_allclose(got, f(A), rtol=1e-12, atol=1e-12)


def test_working_memory_of_a_donated_step_sets_nothing_aside():
    """measure_peak_memory(exclude_results=True) subtracts results it allocated; updates
    written into the parameters' own buffers were not allocated, so the working memory of a
    donated step is its whole peak."""
    def step(p, x):           # the updates first, then a large temporary: the peak
        return {k: v * 0.5 for k, v in p.items()}, np.sum(np.exp(x) * np.cos(x))
    p = {f"w{i}": np.ones((256, 256)) for i in range(4)}
    x = np.ones((512, 512))
    f = adjit.compile(step, backend="numpy", donate_argnums=0)
    whole = adjit.measure_peak_memory(f, copies(p), x)
    work = adjit.measure_peak_memory(f, copies(p), x, exclude_results=True)
    assert whole > x.nbytes
    assert abs(work - whole) <= 0.05 * whole, (work, whole)
