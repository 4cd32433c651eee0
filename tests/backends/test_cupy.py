"""The CuPy backend: CUDA-graph training steps and donation (on the host runtime, no GPU), and
on a GPU (marked `gpu`, skipped without CuPy and a device): results equal the NumPy backend's
for the op table, random fused graphs, an MLP step and an Adam step, with and without graphs.
"""
import warnings

import numpy as np
import pytest

import adjit
from adjit.backends import cuda_graph, cupy_backend, cupy_runtime, registry
from adjit.frontend import pytree
from adjit.ir.errors import AdjitError
from cuda_host import HostRuntime, lower, nvcc_available, pipeline, workdir
from optable import cases, make_inputs
from programs import (adam_init, adam_step, fuzz_programs, mlp_loss, mlp_params, mnist_like,
                      sgd_step)

needs_nvcc = pytest.mark.skipif(not nvcc_available(), reason="nvcc is not on the PATH")
needs_gpu = pytest.mark.skipif(not cupy_backend.usable(),
                               reason=f"{cupy_backend.why_unusable()}")


def small_problem(dtype=np.float32):
    p = mlp_params([20, 16, 16, 10], dtype=dtype)
    X, y = mnist_like(8, dtype=dtype)
    return p, np.ascontiguousarray(X[:, :20]), y


def leaves(tree):
    return pytree.flatten(tree)[0]


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    if not nvcc_available():
        pytest.skip("nvcc is not on the PATH")
    return HostRuntime(workdir(tmp_path_factory))


# -- without a GPU: availability, donation, the graph runner on the host runtime ----------------
def test_auto_never_picks_cupy_without_a_gpu():
    if cupy_backend.usable():
        pytest.skip("a GPU is usable here")
    assert registry.resolve("auto").NAME != "cupy"
    with pytest.raises(AdjitError, match="cupy"):
        registry.resolve("cupy")


def test_donate_argnums_without_cuda_graph_gives_new_arrays(host):
    """README's portable adjit.compile(step, donate_argnums=...) runs uncaptured on a GPU:
    only a captured program owns buffers to update, so the results are new arrays."""
    p, X, y = small_problem()
    args = (p, X, y, np.float32(0.1))
    want = adjit.compile(sgd_step, backend="numpy")(*args)
    prog = lower(adjit.compile(sgd_step, backend="numpy"), *args, runtime=host,
                 donate_argnums=(0,))
    before = {k: v.copy() for k, v in p.items()}
    got = prog(*args)
    for k in p:
        np.testing.assert_array_equal(p[k], before[k])
    for a, b in zip(leaves(got), leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_donated_updates_are_written_in_place():
    """Every parameter and moment of a fused Adam step is updated in its argument's buffer."""
    p, X, y = small_problem()
    g = pipeline(adjit.compile(adam_step, backend="numpy"), p, adam_init(p), X, y,
                 np.float32(0.01))
    pairs, inplace = cuda_graph.donation(g, (0, 1))
    assert len(pairs) == len(inplace) == 1 + 3 * len(p)     # step count, params, m and v
    n_loss = 1
    assert [k for k, _ in pairs] == list(range(n_loss, n_loss + len(pairs)))
    source = cupy_backend.generate(g, "step", inplace)[0]
    assert "params_W1)" in source and "state_m_W1, " in source


def test_no_in_place_write_while_the_argument_is_still_read(host):
    def f(w):
        return w * 2.0, w + 1.0          # w is read after the first result is made
    g = pipeline(adjit.compile(f, backend="numpy"), np.ones(3), fuse=False)
    pairs, inplace = cuda_graph.donation(g, (0,))
    assert pairs == [(0, 0)] and not inplace
    step = lower(adjit.compile(f), np.ones(3), runtime=host, cuda_graph=True,
                 donate_argnums=(0,))
    w = np.ones(3)
    for _ in range(3):
        w, other = step(w)
    np.testing.assert_array_equal(w, 8.0)
    np.testing.assert_array_equal(other, 5.0)


@needs_nvcc
@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_cuda_graph_steps_equal_numpy(host, opt):
    """Captured once, replayed each step; donated results come back in the runner's buffers,
    the others as copies, and the values follow the NumPy backend step for step."""
    p, X, y = small_problem()
    lr = np.float32(0.05)
    fn = sgd_step if opt == "sgd" else adam_step
    args = (p, X, y, lr) if opt == "sgd" else (p, adam_init(p), X, y, lr)
    donate = (0,) if opt == "sgd" else (0, 1)
    ref = adjit.compile(fn, backend="numpy")
    step = lower(adjit.compile(fn), *args, runtime=host, cuda_graph=True,
                 donate_argnums=donate)
    runner = step.fn
    launches = getattr(host, "launches", 0)
    state_ref, state, losses = args, args, []
    for k in range(4):
        out_ref = ref(*state_ref)
        out = step(*state)
        losses.append(out[0])
        for a, b in zip(leaves(out), leaves(out_ref)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        state_ref = out_ref[1:] + args[len(out_ref) - 1:]
        state = out[1:] + args[len(out) - 1:]
        if k:
            buffers = {id(b) for b in runner.static_inputs}
            assert all(id(x) in buffers for x in leaves(out[1:]))   # fed back: no copies
    assert runner.mode == "graph"
    assert getattr(host, "launches", 0) - launches == 4
    assert "_rt_matmul(" in step.source and getattr(host, "capture_matmuls", 0) > 0
    assert len({id(x) for x in losses}) == 4 and len({float(x) for x in losses}) == 4


def test_capture_failure_runs_the_program_uncaptured(host):
    class NoCapture(HostRuntime):
        def capture(self, run, buffers):
            raise RuntimeError("operation not permitted when stream is capturing")
    rt = NoCapture(host.workdir)
    p, X, y = small_problem()
    step = lower(adjit.compile(sgd_step), p, X, y, np.float32(0.1), runtime=rt,
                 cuda_graph=True, donate_argnums=(0,))
    with pytest.warns(RuntimeWarning, match="capture failed"):
        loss, p2 = step(p, X, y, np.float32(0.1))
    loss_ref, p2_ref = adjit.compile(sgd_step, backend="numpy")(p, X, y, np.float32(0.1))
    np.testing.assert_allclose(loss, loss_ref, rtol=1e-6)
    for k in p:
        np.testing.assert_allclose(p2[k], p2_ref[k], rtol=1e-5, atol=1e-7)
    assert step.fn.mode == "eager"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step(p2, X, y, np.float32(0.1))                 # warned once


def test_output_buffers_when_arguments_broadcast_to_less(host):
    def f(b, c):
        return np.broadcast_to(b, (3, 4)) * 2.0 + c
    b, c = np.arange(4.0), np.float64(1.5)
    prog = lower(adjit.compile(f), b, c, runtime=host)
    assert "cp.empty((3, 4), dtype=cp.float64)" in prog.source
    np.testing.assert_array_equal(prog(b, c), f(b, c))


def test_program_reports_its_kernels():
    p, X, y = small_problem()
    src, defs = cupy_backend.generate(pipeline(adjit.compile(sgd_step), p, X, y,
                                               np.float32(0.1)))[:2]
    assert defs and all(d.name in src for d in defs)
    assert all(d.cuda().count("__global__") == 1 for d in defs)


def test_runtime_names_kernels_by_their_code():
    """Kernels differing only in their name are one object, and CuPy gets a name made from
    the code (the same source in every process: CuPy's disk cache is keyed by source)."""
    import types
    made = []

    def kernel(*args, **kw):
        made.append((args, kw))
        return object()
    rt = cupy_runtime.CupyRuntime.__new__(cupy_runtime.CupyRuntime)
    rt.xp = types.SimpleNamespace(ElementwiseKernel=kernel, ReductionKernel=kernel)
    rt._capturing = False
    saved = dict(cupy_runtime.CupyRuntime._cache)
    try:
        cupy_runtime.CupyRuntime._cache.clear()
        e1 = rt.elementwise("float32 in0", "float32 out0", "out0 = in0;", "neg_v3")
        e2 = rt.elementwise("float32 in0", "float32 out0", "out0 = in0;", "neg_v9")
        r1 = rt.reduction("float32 in0", "float32 out0", "_rt_map_f_v1(in0)", "(a + b)",
                          "out0 = a", "0.0f", "f_v1", reduce_type="float",
                          preamble="float _rt_map_f_v1(float x) { return x; }")
        r2 = rt.reduction("float32 in0", "float32 out0", "_rt_map_f_v7(in0)", "(a + b)",
                          "out0 = a", "0.0f", "f_v7", reduce_type="float",
                          preamble="float _rt_map_f_v7(float x) { return x; }")
    finally:
        cupy_runtime.CupyRuntime._cache.clear()
        cupy_runtime.CupyRuntime._cache.update(saved)
    assert e1 is e2 and r1 is r2 and len(made) == 2
    (eargs, _), (rargs, rkw) = made
    assert eargs[3].startswith("adjit_") and rargs[6].startswith("adjit_")
    assert rargs[2] == f"_rt_map_{rargs[6]}(in0)" and f"_rt_map_{rargs[6]}(" in rkw["preamble"]
    assert rkw["reduce_type"] == "float"


# -- on a GPU ----------------------------------------------------------------------------------
def _to_host(x):
    return x.get() if hasattr(x, "__cuda_array_interface__") else np.asarray(x)


def _assert_close(got, want, tol, normwise=False):
    """Elementwise, or per array relative to its largest value (normwise: Adam divides by
    sqrt(v), so where a gradient nearly cancels, cuBLAS's summation order moves the weight by
    a visible part of a step)."""
    got, want = leaves(got), leaves(want)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert type(a).__module__.startswith("cupy"), "results stay on the GPU"
        a, b = _to_host(a), np.asarray(b)
        if normwise:
            assert np.abs(a - b).max() <= tol * max(np.abs(b).max(), 1e-30)
        else:
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def _gpu_cases():
    # float32 fused (how models train) and float64 unfused (every op's own kernel, checked
    # tightly); the host tests in test_cuda_sources.py run all four combinations
    for name, k, fn, spec in cases():
        for dt, fuse in ((np.float32, True), (np.float64, False)):
            yield pytest.param(name, k, fn, spec, dt, fuse,
                               id=f"{name}-{k}-{np.dtype(dt).name}-"
                                  f"{'fused' if fuse else 'unfused'}")


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("name,k,fn,spec,dt,fuse", list(_gpu_cases()))
def test_gpu_op_table_equals_numpy(name, k, fn, spec, dt, fuse):
    xs = make_inputs(spec, k, dt)
    c = np.random.default_rng(7).normal(size=np.shape(fn(*xs))).astype(dt)

    def objective(*a):
        out = fn(*a)
        return np.sum(out * c), out
    args = tuple(range(len(xs)))
    want = adjit.value_and_grad(objective, argnums=args, has_aux=True, backend="numpy")(*xs)
    got = adjit.value_and_grad(objective, argnums=args, has_aux=True, backend="cupy",
                               fuse=fuse)(*xs)
    _assert_close(got, want, 2e-5 if dt == np.float32 else 1e-11)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("name,objective,xs", fuzz_programs(12), ids=lambda v: str(v)[:12])
def test_gpu_fuzzed_graphs_equal_numpy(name, objective, xs):
    args = tuple(range(len(xs)))
    want = adjit.value_and_grad(objective, argnums=args, has_aux=True, backend="numpy")(*xs)
    got = adjit.value_and_grad(objective, argnums=args, has_aux=True, backend="cupy")(*xs)
    _assert_close(got, want, 1e-4 if xs[0].dtype == np.float32 else 1e-11)


@pytest.mark.gpu
@pytest.mark.parametrize("cuda_graph", [False, True])
@pytest.mark.parametrize("opt", ["sgd", "adam"])
@needs_gpu
def test_gpu_training_steps_equal_numpy(opt, cuda_graph):
    import cupy
    p, X, y = small_problem()
    lr = np.float32(0.05)
    fn = sgd_step if opt == "sgd" else adam_step
    args = (p, X, y, lr) if opt == "sgd" else (p, adam_init(p), X, y, lr)
    donate = ((0,) if opt == "sgd" else (0, 1)) if cuda_graph else ()
    ref = adjit.compile(fn, backend="numpy")
    step = adjit.compile(fn, backend="cupy", cuda_graph=cuda_graph, donate_argnums=donate)
    state_ref = args
    # inputs may be NumPy (copied once) or CuPy arrays: the data lives on the GPU here
    state = args[:-3] + (cupy.asarray(X), cupy.asarray(y), lr)
    for _ in range(3):
        out_ref, out = ref(*state_ref), step(*state)
        _assert_close(out, out_ref, 1e-3 if opt == "adam" else 1e-4, normwise=opt == "adam")
        state_ref = out_ref[1:] + args[len(out_ref) - 1:]
        state = out[1:] + state[len(out) - 1:]
    if cuda_graph:
        assert step.lower(*state).fn.mode == "graph"


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_gpu_capture_matmul_equals_cublas(dt):
    """The kernel CUDA-graph programs multiply with (CuPy refuses cuBLAS while capturing), for
    every layout it distinguishes, small and large (R x R blocks), against cuBLAS; then once
    inside a real capture, replayed."""
    import cupy
    rt = cupy_runtime.CupyRuntime()
    rng = np.random.default_rng(0)

    def arr(*shape):
        return cupy.asarray(rng.normal(size=shape).astype(dt))
    A, B = arr(200, 37), arr(37, 700)
    cases = [(A, B), (A, cupy.ascontiguousarray(B.T).T), (cupy.asfortranarray(A), B),
             (cupy.ascontiguousarray(A.T).T, cupy.ascontiguousarray(B.T).T),
             (A[::2, ::-1], B[::-1, 1::3]), (A[3], B), (A, B[:, 5]), (A[1], B[:, 2]),
             (A[:, :0], B[:0]), (arr(3, 20, 37), B), (arr(1024, 784), arr(256, 784).T)]
    tol = 1e-4 if dt == np.float32 else 1e-11
    for a, b in cases:
        got, want = cupy_runtime._capturable_matmul(rt, a, b), a @ b
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got.get(), want.get(), rtol=tol, atol=tol * 10)
    a, b = cases[-1]

    def run(warmup):
        return (rt.matmul(a, b) * 2,)
    graph, (c,), keep = rt.capture(run, [a, b])
    rt.launch(graph)
    cupy.cuda.Device().synchronize()
    np.testing.assert_allclose(c.get(), 2 * (a @ b).get(), rtol=tol, atol=tol * 10)
    a[...] = 0                       # a replay reads the buffers anew
    rt.launch(graph)
    assert not cupy.any(c)


@pytest.mark.gpu
@needs_gpu
def test_gpu_kernels_are_built_once_and_cached_by_source():
    p, X, y = small_problem()
    adjit.compile(sgd_step, backend="cupy")(p, X, y, np.float32(0.1))
    before = len(cupy_runtime.CupyRuntime._cache)
    adjit.compile(sgd_step, backend="cupy")(p, X, y, np.float32(0.1))  # a new program
    assert len(cupy_runtime.CupyRuntime._cache) == before


@pytest.mark.gpu
@needs_gpu
def test_gpu_peak_memory_is_read_from_the_pool():
    import cupy
    p, X, y = small_problem()
    f = adjit.value_and_grad(mlp_loss, backend="cupy")
    args = ({k: cupy.asarray(v) for k, v in p.items()}, cupy.asarray(X), cupy.asarray(y))
    peak = adjit.measure_peak_memory(f, *args)
    estimate = f.lower(*args).memory.peak_bytes
    assert 0 < peak and estimate / 4 <= peak <= 4 * estimate + 2 ** 20


# -- assignment programs (concatenations of written rows, gathers, scatters, selects) ----------
def _assignment_cases():
    import sys
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "frontend"))
    from test_assignment import (_masked_updates, _numpy_in_place_functions, _rnn_hidden_states,
                                 _recurrence_with_element_writes, _fancy_last_write_wins,
                                 _transposed_reshape_copies, X)
    return X, [_masked_updates, _numpy_in_place_functions, _rnn_hidden_states,
               _recurrence_with_element_writes, _fancy_last_write_wins,
               _transposed_reshape_copies]


@pytest.mark.parametrize("k", range(6))
def test_assignment_programs_on_the_host_runtime_equal_numpy(host, k):
    X, fns = _assignment_cases()
    fn = fns[k]

    def loss(a):
        return np.sum(np.sin(fn(a) + 0.3))
    want = adjit.value_and_grad(loss, backend="numpy")(X)
    got = lower(adjit.value_and_grad(loss), X, runtime=host)(X)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-10, atol=1e-12)
