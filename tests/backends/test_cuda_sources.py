"""The CuPy backend's CUDA sources, checked without a GPU.

nvcc (on the PATH in CI) compiles every kernel the backend writes for the op table, for the
differential fuzzer's random programs (tests/fuzzgen.py), an MLP gradient and an Adam step, as
PTX for sm_90 in one run; and compiles the same bodies as host C++, so the generated modules
run against NumPy (tests/backends/cuda_host.py). The generated Python compiles without CuPy.
"""
import re
import subprocess
import sys

import numpy as np
import pytest

import adjit
from adjit.backends import cuda_source as cs
from adjit.backends import cupy_backend
from adjit.frontend import pytree
from adjit.ir.ops import OPS, SCALAR_HELPERS
from cuda_host import (HostRuntime, generate, lower, nvcc_available, pipeline, program,
                       same_code, workdir)
from optable import cases, make_inputs
from programs import (adam_init, adam_step, fuzz_programs, mlp_loss, mlp_loss_one_hot, mlp_params,
                      mnist_like)

needs_nvcc = pytest.mark.skipif(not nvcc_available(), reason="nvcc is not on the PATH")
DTYPES = [np.float32, np.float64]
FUZZ_COUNT = 40      # programs drawn from the differential fuzzer (tests/fuzzgen.py)


# -- the programs under test ---------------------------------------------------------------------
def _optable_function(fn, xs, dt):
    c = np.random.default_rng(7).normal(size=np.shape(fn(*xs))).astype(dt)

    def objective(*a):
        out = fn(*a)
        return np.sum(out * c), out
    return adjit.value_and_grad(objective, argnums=tuple(range(len(xs))), has_aux=True,
                                backend="numpy")


def optable_programs():
    """(id, reference compiled fn, inputs, fuse): values and gradients of every op-table row."""
    for name, k, fn, spec in cases():
        for dt in DTYPES:
            xs = make_inputs(spec, k, dt)
            for fuse in (True, False):
                yield (f"{name}-{k}-{np.dtype(dt).name}-{'fused' if fuse else 'unfused'}",
                       _optable_function(fn, xs, dt), xs, fuse)


def fuzz_cases():
    for name, objective, xs in fuzz_programs(FUZZ_COUNT):
        vg = adjit.value_and_grad(objective, argnums=tuple(range(len(xs))), has_aux=True,
                                  backend="numpy", fuse=False)
        for fuse in (True, False):
            yield f"{name}-{'fused' if fuse else 'unfused'}", vg, xs, fuse


def model_programs():
    p = mlp_params([20, 16, 16, 10])
    X, y = mnist_like(8)
    X = np.ascontiguousarray(X[:, :20])
    lr = np.float32(0.01)
    yield "mlp-grad", adjit.value_and_grad(mlp_loss, backend="numpy"), [p, X, y], True
    yield "mlp-grad-one-hot", adjit.value_and_grad(mlp_loss_one_hot, backend="numpy"), \
        [p, X, y.astype(np.int32)], True
    yield "adam-step", adjit.compile(adam_step, backend="numpy"), \
        [p, adam_init(p), X, y, lr], True
    p64 = {k: v.astype(np.float64) for k, v in p.items()}
    yield "mlp-grad-f64-unfused", adjit.value_and_grad(mlp_loss, backend="numpy"), \
        [p64, X.astype(np.float64), y], False


def all_programs():
    return list(optable_programs()) + list(integer_programs()) + list(fuzz_cases()) + \
        list(model_programs())


# -- without nvcc: the sources themselves ---------------------------------------------------------
def test_every_scalar_helper_has_a_c_definition():
    assert set(SCALAR_HELPERS) <= set(cs.HELPERS), \
        f"define {sorted(set(SCALAR_HELPERS) - set(cs.HELPERS))} in cuda_source.HELPERS"


def test_every_fusable_op_has_a_cuda_spelling():
    missing = [n for n, od in OPS.items() if od.fusion in ("map", "broadcast", "reduce")
               and not od.cuda]
    assert not missing


def test_c_literals_are_typed_and_exact():
    assert cs.c_literal(0.5, np.float32) == "0.5f"
    assert cs.c_literal(0.1, np.float32) == "0.1f"
    assert cs.c_literal(0.1, np.float64) == "0.1"
    assert cs.c_literal(-2.0, np.float64) == "(-2.0)"
    assert cs.c_literal(3, np.int64) == "((long long)3)"
    assert cs.c_literal(True, np.bool_) == "true"
    assert cs.c_literal(-np.inf, np.float32) == "_rt_f32_bits(0xff800000u)"
    assert cs.c_literal(np.nan, np.float64).startswith("_rt_f64_bits(0x7ff8")


def test_generated_module_is_python_without_cupy():
    """The whole module source (kernels and statements) compiles as Python; no CuPy import."""
    count = 0
    for _, ref, xs, fuse in list(optable_programs())[::3] + list(model_programs()):
        source, defs = generate(ref, *xs, fuse=fuse)
        compile(source, "<cupy module>", "exec")
        assert "import" not in source
        count += 1
    assert count > 50
    assert "cupy" not in sys.modules or cupy_backend.usable()


def test_mlp_gradient_source_reads_like_the_numpy_backend():
    _, ref, xs, _ = next(p for p in model_programs() if p[0] == "mlp-grad")
    source, defs = generate(ref, *xs)
    assert "# backward" in source and "g_params_W1" in source
    assert "@" in source and ".T" in source            # cuBLAS through cupy, transposes as views
    assert any(d.kind == "reduction" for d in defs)    # a fused reduction (logsumexp)
    assert all(re.fullmatch(r"[a-z_]+_v\d+(_[a-z]+\d+)?(_\d+)?", d.name) for d in defs)


def test_fused_adam_update_is_one_kernel_per_parameter():
    _, ref, xs, _ = next(p for p in model_programs() if p[0] == "adam-step")
    _, defs = generate(ref, *xs)
    updates = [d for d in defs if d.kind == "elementwise" and "sqrt" in d.operation]
    assert len(updates) == len(xs[0])
    assert all(d.out_params.count(",") == 2 for d in updates)   # new p, m and v


# -- with nvcc ---------------------------------------------------------------------------------
def _op_kernels():
    """A kernel for every fusable op in float32 and float64 (int32 and int64 for the bitwise
    ones; other integers come from the op table
    traced with integer inputs), casts between every pair of dtypes, and each reduction alone
    and with a prologue, straight from the registry."""
    progs = []
    for name, od in OPS.items():
        if od.fusion not in ("map", "broadcast") or od.arity is None or name == "cast":
            continue
        for dt in ["int32", "int64"] if od.integer_only else ["float32", "float64"]:
            dts = [np.dtype(bool) if (name == "where" and k == 0) else np.dtype(dt)
                   for k in range(od.arity)]
            attrs = {"shape": (2, 3)} if name == "broadcast_to" else \
                {"n": 2} if name == "polygamma" else {}
            progs.append(_one_op(f"{name}_{dt}", name, dts, attrs))
    kinds = ["float32", "float64", "int32", "int64", "bool", "uint8"]
    for src in kinds:
        for dst in kinds:
            progs.append(_one_op(f"cast_{src}_{dst}", "cast", [np.dtype(src)],
                                 {"dtype": np.dtype(dst)}))
    for name, od in OPS.items():
        if od.fusion != "reduce":
            continue
        for dt in ["float32", "float64", "int64"]:
            d = np.dtype(dt)
            pro = [cs.Instr("input", (), d, {"index": 0}), cs.Instr("mul", (0, 0), d, {}, 5)]
            progs.append(cs.ScalarProgram(f"{name}_{dt}", [d], pro[:1], [0],
                                          {"op": name, "dtype": d}))
            progs.append(cs.ScalarProgram(f"{name}_sq_{dt}", [d], pro, [1],
                                          {"op": name, "dtype": d}))
    return [cs.kernel_def(p) for p in progs]


def _one_op(tag, name, dts, attrs):
    out = np.dtype(OPS[name].dtype(dts, attrs))
    instrs = [cs.Instr("input", (), d, {"index": k}) for k, d in enumerate(dts)]
    instrs.append(cs.Instr(name, tuple(range(len(dts))), out, attrs, 99))
    return cs.ScalarProgram(tag, dts, instrs, [len(dts)])


def integer_programs():
    """The op table's rows on integer inputs, where the frontend accepts them (values only)."""
    for name, k, fn, spec in cases():
        xs = [np.round(x * 3).astype(np.int64) for x in make_inputs(spec, k)]
        f = adjit.compile(fn, backend="numpy")
        try:
            with np.errstate(all="ignore"):
                f(*xs)
        except (adjit.AdjitError, ValueError):   # no integers here, or negative powers
            continue
        for fuse in (True, False):
            yield f"{name}-{k}-int64-{'fused' if fuse else 'unfused'}", f, xs, fuse


@pytest.fixture(scope="module")
def graphs():
    """pid -> (scheduled graph for the CuPy backend, reference, inputs) of every program."""
    return {pid: (pipeline(ref, *xs, fuse=fuse), ref, xs)
            for pid, ref, xs, fuse in all_programs()}


@pytest.fixture(scope="module")
def generated_defs(graphs):
    defs = {}
    for g, _, _ in graphs.values():
        for d in cupy_backend.generate(g)[1]:
            defs.setdefault(same_code(d), d)
    return _op_kernels() + list(defs.values())


@needs_nvcc
def test_every_kernel_compiles_with_nvcc(generated_defs, tmp_path_factory):
    """One nvcc run (PTX for sm_90, the H200) over the op table's kernels and every kernel the
    backend writes for the op table, the fuzzer's graphs, an MLP gradient and an Adam step."""
    source = cs.translation_unit(generated_defs)
    ptx = open(cs.compile_unit(source, workdir(tmp_path_factory))).read()
    entries = dict(_ptx_entries(ptx))
    assert len(entries) == len(generated_defs)
    for k, d in enumerate(generated_defs):
        body = entries[cs.symbol(k, d)]
        code = d.operation + d.preamble
        # typed literals keep float32 kernels in float32 (unless the user casts to float64;
        # and sinf and cosf have a float64 slow path, for huge arguments)
        if "float64" not in d.in_params + d.out_params and "(double)" not in code and \
                not re.search(r"\b(sin|cos)\(", code):
            assert ".f64" not in body, f"{d.name} computes in float64:\n{d.operation}"


def _ptx_entries(ptx):
    parts = re.split(r"\.visible \.entry (\w+)\(", ptx)
    return [(parts[k], parts[k + 1]) for k in range(1, len(parts) - 1, 2)]


@needs_nvcc
def test_nvcc_errors_name_the_kernel_line(tmp_path):
    bad = cs.KernelDef("elementwise", "broken", "float32 in0", "float32 out0", "out0 = nope;")
    with pytest.raises(cs.KernelSourceError, match=r"nope[\s\S]*out0 = nope"):
        cs.compile_unit(cs.translation_unit([bad]), str(tmp_path))


# -- the generated modules, run on the host against NumPy --------------------------------------
@pytest.fixture(scope="module")
def host_programs(graphs, tmp_path_factory):
    """Every program built by the CuPy backend on the host runtime; all kernels are compiled
    by the first call, in one nvcc run."""
    if not nvcc_available():
        pytest.skip("nvcc is not on the PATH")
    rt = HostRuntime(workdir(tmp_path_factory))
    return {pid: (program(g, rt), ref, xs) for pid, (g, ref, xs) in graphs.items()}


def _check(host_programs, pid, rtol32=2e-5, rtol64=1e-11):
    prog, ref, xs = host_programs[pid]
    got = pytree.flatten(prog(*xs))[0]
    want = pytree.flatten(ref(*xs))[0]
    assert len(got) == len(want)
    # CUDA's and NumPy's float32 functions differ in the last bits, also where a float32
    # value later meets float64
    single = any(x.dtype == np.float32 for x in pytree.flatten(xs)[0])
    tol = rtol32 if single else rtol64
    for a, b in zip(got, want):
        a = np.asarray(a)   # the host runtime is NumPy: reductions to 0-d give scalars
        assert a.dtype == np.asarray(b).dtype
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


OPTABLE_IDS = [p[0] for p in optable_programs()]


@pytest.mark.parametrize("pid", OPTABLE_IDS)
def test_op_table_on_host_equals_numpy(host_programs, pid):
    _check(host_programs, pid)


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")   # log1p(-1), both sides
@pytest.mark.parametrize("pid", [p[0] for p in integer_programs()])
def test_op_table_on_integers_on_host_equals_numpy(host_programs, pid):
    _check(host_programs, pid)


@pytest.mark.parametrize("pid", [p[0] for p in fuzz_cases()])
def test_fuzzed_graphs_on_host_equal_numpy(host_programs, pid):
    _check(host_programs, pid, rtol32=1e-4)


@pytest.mark.parametrize("pid", [p[0] for p in model_programs()])
def test_models_on_host_equal_numpy(host_programs, pid):
    _check(host_programs, pid, rtol32=1e-4)


@needs_nvcc
def test_literals_round_trip_through_nvcc(tmp_path):
    """Constants reach the kernels bit for bit, including infinities, NaN and subnormals."""
    values = {np.float32: [0.1, -1e-40, 3.4028235e38, np.inf, -np.inf, 1 / 3],
              np.float64: [0.1, -5e-324, 1.7976931348623157e308, np.inf, 1 / 3]}
    rt = HostRuntime(str(tmp_path))
    for dt, vals in values.items():
        d = np.dtype(dt)
        instrs = [cs.Instr("input", (), d, {"index": 0})]
        instrs += [cs.Instr("const", (), d, {"value": v}) for v in vals]
        prog = cs.ScalarProgram(f"lits_{d.name}", [d], instrs, list(range(1, len(instrs))))
        kd = cs.kernel_def(prog)
        k = rt.elementwise(kd.in_params, kd.out_params, kd.operation, kd.name, kd.preamble)
        outs = k(np.zeros(1, d))
        got = np.array([o[0] for o in outs], d)
        np.testing.assert_array_equal(got.view(f"u{d.itemsize}"),
                                      np.array(vals, d).view(f"u{d.itemsize}"))
    nan = cs.ScalarProgram("nan", [np.dtype("f4")], [
        cs.Instr("input", (), np.dtype("f4"), {"index": 0}),
        cs.Instr("const", (), np.dtype("f4"), {"value": np.nan})], [1])
    kd = cs.kernel_def(nan)
    assert np.isnan(rt.elementwise(kd.in_params, kd.out_params, kd.operation, kd.name,
                                   kd.preamble)(np.zeros(1, "f4"))[0])


@needs_nvcc
def test_nan_semantics_follow_numpy(tmp_path):
    """maximum, minimum and max-reductions propagate NaN as NumPy does; sign keeps it."""
    rt = HostRuntime(str(tmp_path))
    f = adjit.compile(lambda x, y: (np.maximum(x, y), np.minimum(x, y), np.sign(x),
                                    np.max(x, axis=0)), backend="numpy")
    x = np.array([np.nan, 1.0, -2.0, 0.0])
    y = np.array([0.0, np.nan, 3.0, -0.0])
    for fuse in (True, False):
        got = lower(f, x, y, runtime=rt, fuse=fuse)(x, y)
        for a, b in zip(got, f(x, y)):
            np.testing.assert_array_equal(a, b)


def test_runtime_subprocess_has_no_cupy_import():
    """Generating a CuPy module never imports CuPy (CI machines have none)."""
    code = ("import sys, numpy as np, adjit\n"
            "sys.path[:0] = ['tests', 'tests/backends']\n"
            "from cuda_host import generate\n"
            "src, defs = generate(adjit.grad(lambda x: np.sum(np.tanh(x) ** 2)), np.ones(3))\n"
            "assert defs and 'cupy' not in sys.modules, sorted(sys.modules)\n")
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    res = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


# -- matrix products inside captured CUDA graphs (CuPy refuses cuBLAS while capturing) --------
@needs_nvcc
def test_capture_matmul_kernel_compiles_for_the_h200(tmp_path):
    ptx = open(cs.compile_unit(cs.MATMUL_SOURCE, str(tmp_path), optimize=True)).read()
    assert set(cs.MATMUL_KERNELS.values()) <= {name for name, _ in _ptx_entries(ptx)}


def _strided_operands(rng, dt):
    """(a, b) pairs of every layout the capture matmul chooses between, 1-D and stacks."""
    A = rng.normal(size=(7, 5)).astype(dt)
    B = rng.normal(size=(5, 6)).astype(dt)
    yield A, B                                       # both row-major
    yield np.asfortranarray(A), B.T.copy().T         # a column-major, b column-major
    yield A, np.ascontiguousarray(B.T).T             # b a transposed view (NT: copies)
    yield np.ascontiguousarray(A.T).T, np.ascontiguousarray(B.T).T
    yield A[::2, ::-1], B[::-1, 1::2]                # negative and non-unit strides
    yield A[:1], B[:, :1]                            # (1, k) @ (k, 1)
    yield A[2], B                                    # 1-D @ 2-D
    yield A, B[:, 3]                                 # 2-D @ 1-D
    yield A[3], B[:, 2]                              # 1-D @ 1-D
    yield A[:, :0], B[:0]                            # k = 0
    yield rng.normal(size=(3, 7, 5)).astype(dt), B   # a stack: the reduction path


@needs_nvcc
@pytest.mark.parametrize("dt", DTYPES)
def test_capture_matmul_equals_numpy(tmp_path, dt):
    from adjit.backends.cupy_runtime import _capturable_matmul
    rt = HostRuntime(str(tmp_path))
    rng = np.random.default_rng(3)
    for a, b in _strided_operands(rng, dt):
        got, want = _capturable_matmul(rt, a, b), a @ b
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5 if dt == np.float32 else 1e-12,
                                   atol=1e-6 if dt == np.float32 else 1e-12)


def test_graph_programs_multiply_without_cublas():
    """Under capture (cuda_graph=True) products call the runtime's matmul, not `@`."""
    _, ref, xs, _ = next(p for p in model_programs() if p[0] == "adam-step")
    g = pipeline(ref, *xs)

    def code(source):
        return "\n".join(ln for ln in source.splitlines() if not ln.strip().startswith("#"))
    plain = code(cupy_backend.generate(g)[0])
    captured = code(cupy_backend.generate(g, capture=True)[0])
    assert " @ " in plain and "_rt_matmul(" not in plain
    assert " @ " not in captured and captured.count("_rt_matmul(") == plain.count(" @ ")


@needs_nvcc
@pytest.mark.parametrize("r", [1, 4])
def test_capture_matmul_grid_stride_loops_cover_every_element(tmp_path, r):
    """Grids smaller than C (each thread loops), larger (threads idle) and ragged (C not a
    multiple of the blocks), both mappings, R x R blocks of C per thread."""
    from cuda_host import host_matmul_kernel
    kernel = host_matmul_kernel(str(tmp_path), np.float64, r)
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(9, 4)), rng.normal(size=(4, 11))
    for grid, block in (((1, 1, 1), (2, 3, 1)), ((1, 1, 1), (3, 2, 1)),
                        ((2, 3, 1), (32, 8, 1))):
        for x_is_row in (0, 1):
            c = np.full((9, 11), np.nan)
            kernel(grid, block, (a, b, c, 9, 11, 4, 4, 1, 11, 1, x_is_row))
            np.testing.assert_allclose(c, a @ b, rtol=1e-12)


@needs_nvcc
def test_capture_matmul_uses_register_blocks_for_large_products(tmp_path):
    from adjit.backends.cupy_runtime import _capturable_matmul
    assert cs.matmul_launch(128, 256, 0)[0] == 1 and cs.matmul_launch(1024, 256, 0)[0] == 4
    rt = HostRuntime(str(tmp_path))
    rng = np.random.default_rng(9)
    a = rng.normal(size=(300, 37)).astype(np.float32)
    b = np.ascontiguousarray(rng.normal(size=(450, 37)).astype(np.float32)).T   # NT
    np.testing.assert_allclose(_capturable_matmul(rt, a, b), a @ b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_capturable_matmul(rt, b.T, a.T), b.T @ a.T, rtol=1e-4,
                               atol=1e-5)
