"""Fusion pass invariants: groups verify, never form a cycle, keep results, fuse reductions."""
import networkx as nx
import numpy as np
import pytest

import adjit
from adjit.ir.errors import GradError, VerifyError
from adjit.ir.fused import evaluate
from adjit.ir.ops import OPS
from adjit.ir.verify import verify
from adjit.passes.fusion import fuse_elementwise
from adjit.passes.simplify import simplify
from optable import cases, make_inputs

CASES = list(cases())
IDS = [f"{n}-{k}" for n, k, _, _ in CASES]


def fused(fn, *args, **options):
    g = simplify(adjit.trace(fn, *args))
    return g, fuse_elementwise(g, **options)


def groups(g):
    out = {}
    for n in g.nodes():
        if g[n]["op"] == "fused":
            out.setdefault((g[n]["attrs"]["kernel"], g.args(n)), []).append(n)
    return out


def contracted_is_acyclic(g):
    """Each group as one vertex: the graph of groups and other nodes has no cycle."""
    unit = {n: key for key, ns in groups(g).items() for n in ns}
    c = nx.DiGraph()
    for n in g.nodes():
        c.add_node(unit.get(n, n))
        for a in g.args(n):
            if unit.get(a, a) != unit.get(n, n):
                c.add_edge(unit.get(a, a), unit.get(n, n))
    return nx.is_directed_acyclic_graph(c)


def test_chain_becomes_one_kernel_and_input_is_unchanged():
    x = np.linspace(-1, 1, 12).reshape(3, 4)
    b = np.arange(4.0)
    g, f = fused(lambda x, b: np.tanh(x * 2.0 + b) - x, x, b)
    before = str(g)
    assert len(groups(f)) == 1
    (key, nodes), = groups(f).items()
    assert len(nodes) == 1 and key[0].startswith("fused_") and "tanh" in key[0]
    assert not any(f[n]["op"] == "broadcast_to" for n in f.nodes())
    assert str(g) == before
    verify(f, "fusion")


def test_merging_through_an_outside_node_would_be_a_cycle():
    # a = exp(x) feeds a matmul whose result meets `a` again: {a, c} would need the matmul
    # both before and after the group, so exp and the add stay apart
    def fn(x):
        a = np.exp(x)
        m = a @ a
        return np.sum(np.sin(a) + m)
    x = np.random.default_rng(0).normal(size=(4, 4))
    _, f = fused(fn, x)
    verify(f, "fusion")
    assert contracted_is_acyclic(f)
    exps = [k for k in groups(f) if "exp" in k[0]]
    adds = [k for k in groups(f) if "add" in k[0]]
    assert exps and adds and not set(exps) & set(adds)
    np.testing.assert_allclose(adjit.compile(fn, backend="numpy")(x), fn(x), rtol=1e-14)


@pytest.mark.parametrize("name,k,fn,spec", CASES, ids=IDS)
def test_fused_groups_verify_and_are_acyclic_on_the_op_table(name, k, fn, spec):
    xs = make_inputs(spec, k)
    c = np.random.default_rng(k).normal(size=np.shape(fn(*xs)))
    vg = adjit.value_and_grad(lambda *a: np.sum(fn(*a) * c), argnums=tuple(range(len(xs))))
    g = simplify(vg.trace(*xs))
    f = fuse_elementwise(g)
    verify(f, "fusion")
    assert contracted_is_acyclic(f)
    # every elementwise node went into a group
    assert not any(OPS[f[n]["op"]].fusion == "map" for n in f.nodes())


@pytest.mark.parametrize("name,k,fn,spec", CASES, ids=IDS)
def test_fusion_does_not_change_results_on_numpy(name, k, fn, spec):
    """The NumPy backend runs fused groups with the same calls, so the values agree to the
    last bits; only an update in place can give a temporary of a transposed input another
    memory order than NumPy would, and so another summation order in a later reduction."""
    xs = make_inputs(spec, k)
    c = np.random.default_rng(k).normal(size=np.shape(fn(*xs)))

    def scalar(*a):
        return np.sum(fn(*a) * c)
    nums = tuple(range(len(xs)))
    ref = adjit.value_and_grad(scalar, argnums=nums, backend="numpy", fuse=False)(*xs)
    got = adjit.value_and_grad(scalar, argnums=nums, backend="numpy", fuse=True)(*xs)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-14, atol=1e-14)
    for r, o in zip(ref[1], got[1]):
        np.testing.assert_allclose(o, r, rtol=1e-14, atol=1e-14)


def test_backward_pass_needs_an_intermediate_so_the_group_has_two_outputs():
    def loss(w, x):
        h = adjit.relu(x @ w + 1.0)
        return np.sum(np.tanh(h @ w.T))
    w = np.random.default_rng(1).normal(size=(4, 3))
    x = np.random.default_rng(2).normal(size=(5, 4))
    g = simplify(adjit.grad(loss).trace(w, x))
    f = fuse_elementwise(g)
    multi = [ns for ns in groups(f).values() if len(ns) > 1]
    assert multi, str(f)
    # the outputs of one group are consecutive nodes sharing one expression
    for ns in multi:
        assert ns == list(range(ns[0], ns[0] + len(ns)))
        assert len({f[n]["attrs"]["output"] for n in ns}) == len(ns)
    dtypes = {f[n]["dtype"] for ns in multi for n in ns}
    assert np.dtype(bool) in dtypes           # the relu mask, kept for the backward pass
    np.testing.assert_allclose(adjit.grad(loss, backend="numpy")(w, x),
                               adjit.grad(loss, backend="numpy", fuse=False)(w, x), rtol=0)


def test_prologue_fuses_into_the_reduction():
    def lse(z, m):
        return np.sum(np.exp(z - m), axis=1)
    z = np.random.default_rng(0).normal(size=(6, 10))
    m = z.max(axis=1, keepdims=True)
    _, f = fused(lse, z, m)
    (key, nodes), = groups(f).items()
    assert len(nodes) == 1
    n = nodes[0]
    assert f[n]["shape"] == (6,)
    ref, red = f[n]["attrs"]["outputs"][0]
    assert red == ("sum", (1,), False)
    # exp(z - m) is never a node of its own: one pass over z
    assert not any(f[k]["shape"] == (6, 10) for k in f.nodes() if k not in f.inputs)
    np.testing.assert_allclose(evaluate([z, m], f[n]["attrs"])[0], lse(z, m), rtol=1e-15)


def test_reductions_are_kept_apart_for_backends_that_ask():
    z = np.ones((3, 4))
    _, f = fused(lambda z: np.sum(np.exp(z), axis=1), z, reductions=False)
    assert any(f[n]["op"] == "sum" for n in f.nodes())


def test_a_reduction_feeding_its_own_group_is_not_fused():
    def softmax(z):
        e = np.exp(z)
        return e / np.sum(e, axis=1, keepdims=True)
    z = np.random.default_rng(0).normal(size=(3, 5))
    _, f = fused(softmax, z)
    verify(f, "fusion")
    assert contracted_is_acyclic(f)
    np.testing.assert_allclose(adjit.compile(softmax, backend="numpy")(z), softmax(z),
                               rtol=1e-15)


def test_printed_ir_names_the_kernel_and_the_output():
    w = np.ones((3, 3))
    _, f = fused(lambda w: np.tanh(w) * w + 1.0, w)
    text = str(f)
    assert "fused[fused_" in text and "expr" not in text


def test_verify_checks_fused_nodes():
    _, f = fused(lambda x: np.exp(x) * 2.0, np.ones(4))
    n = next(k for k in f.nodes() if f[k]["op"] == "fused")
    f[n]["dtype"] = np.dtype(np.float32)
    with pytest.raises(VerifyError, match="dtype"):
        verify(f, "test")
    f[n]["dtype"] = np.dtype(np.float64)
    f[n]["attrs"] = dict(f[n]["attrs"], shape=(5,))
    with pytest.raises(VerifyError, match="shape"):
        verify(f, "test")


def test_fused_nodes_have_no_vjp():
    with pytest.raises(GradError, match="after autodiff"):
        OPS["fused"].vjp(None, None)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_memory_estimate_counts_a_groups_temporaries(backend):
    """NumPy code for a group holds temporaries besides its results (backends' scratch_bytes);
    a numba kernel holds none: the estimate matches tracemalloc either way."""
    def gelu_grad(x):
        def gelu(x):
            return 0.5 * x * (1.0 + np.tanh(0.79788456 * (x + 0.044715 * x * x * x)))
        return adjit.grad(lambda x: np.sum(gelu(x) * x))(x)
    x = np.random.default_rng(0).normal(size=(256, 512))
    f = adjit.compile(gelu_grad, backend=backend)
    est = f.lower(x).memory.peak_bytes
    measured = adjit.measure_peak_memory(f, x)
    assert abs(measured - est) <= 0.1 * measured, (est, measured)


def test_an_unrolled_scalar_loop_is_cut_into_bounded_groups():
    from adjit.passes.fusion import MAX_GROUP

    def euler(p):
        x, v = p[0], p[1]
        for _ in range(400):
            x, v = x + 0.01 * v, v - 0.01 * (p[2] * x + 0.1 * v)
        return x * x
    p = np.array([1.0, 0.0, 2.0])
    g = simplify(adjit.trace(euler, p))
    f = fuse_elementwise(g)
    verify(f)
    sizes = {f[n]["attrs"]["kernel"]: len(f[n]["attrs"]["expr"]) for n in f.nodes()
             if f[n]["op"] == "fused"}
    assert len(sizes) > 1 and max(sizes.values()) <= 3 * MAX_GROUP
    assert adjit.compile(euler, backend="numpy")(p) == pytest.approx(euler(p), rel=1e-12)


def test_max_inputs_bounds_the_arrays_a_group_reads():
    # a weight's gradient summed over the steps of a loop: one add per step
    def f(A, ys):
        return sum(np.tanh(A @ ys[t]) * (t + 1) for t in range(40))

    args = (np.ones((8, 8)), np.ones((40, 8)))
    g, fg = fused(f, *args, max_inputs=16)
    widths = [len(set(a for a in fg.args(n) if fg[a]["op"] != "const"))
              for n in fg.nodes() if fg[n]["op"] == "fused"]
    assert widths and max(widths) <= 16, widths
    assert len(groups(fused(f, *args)[1])) < len(groups(fg))      # unbounded: fewer groups
    for backend in ("numba", "numpy"):
        np.testing.assert_allclose(adjit.compile(f, backend=backend)(*args), f(*args))


def test_unstacking_a_list_of_scalars_indexes_once_per_element():
    # np.array([...]) of n scalars: its VJP's slice + reshape per element becomes x[i]
    def f(x):
        return np.sum(np.array([np.sin(x[i]) * i for i in range(4)]) ** 2)
    x = np.linspace(0.0, 1.0, 4)
    g = adjit.grad(f, backend="numpy").lower(x).graph
    ops = [g[n]["op"] for n in g.nodes()]
    assert ops.count("reshape") == 8     # stacking forward, gathering x's pieces: not unstacking
    assert adjit.gradcheck(f, x) < 1e-8


def test_scalars_stay_unfused_for_backends_that_run_small_groups_as_numpy_code():
    import adjit
    from adjit.backends import numba_backend, numpy_backend
    from adjit.passes.fusion import fuse_elementwise
    assert numpy_backend.FUSION_OPTIONS["min_size"] == numba_backend.FUSION_OPTIONS["min_size"] == 2
    g = adjit.trace(lambda s, v: np.sin(s) * s + 1.0 + np.sum(np.exp(v) * v), np.float64(0.3),
                    np.ones(8))
    fused = fuse_elementwise(g, min_size=2)
    ops = [fused[n]["op"] for n in fused.nodes()]
    assert ops.count("fused") == 1                       # exp(v) * v and its sum
    assert {"sin", "mul", "add"} <= set(ops)             # the 0-d work stays as it was


def test_a_reduction_far_from_its_group_stays_apart_when_the_search_gives_up():
    # a recursion of 300 steps puts more than the search limit of units between the
    # group feeding the sum and the sum: it must not be joined (it used to assert)
    import adjit

    def f(b, x):
        A = np.zeros(len(x))
        for i in range(1, len(x)):
            A[i] = b * x[i] + A[i - 1]
        return np.sum(np.log(b + A))
    x = np.random.default_rng(0).uniform(0.1, 0.9, 300)
    np.testing.assert_allclose(adjit.grad(f, backend="numba")(0.5, x), 600.0)
