"""The GPU path end to end without a GPU: CuPy's interface on the host (tests/backends/hostcupy,
nvcc-compiled host kernels, recorded stream capture) put first on PYTHONPATH of a child process,
which then runs what a user runs on a GPU: the GPU tests, the user API with NumPy and CuPy
arguments, a CUDA-graph training step, the memory probe, `adjit mnist --backend cupy`, and
benchmarks/gpu_check.py --smoke. hostcupy refuses what CuPy refuses (implicit host copies,
cuBLAS and host reads during capture), so a mistake of that kind fails here before it costs
time on a device. Needs nvcc; a child process, so this process never imports the stand-in.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from cuda_host import nvcc_available

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
pytestmark = pytest.mark.skipif(not nvcc_available(), reason="nvcc is not on the PATH")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    work = tmp_path_factory.mktemp("hostcupy")
    e = dict(os.environ, HOSTCUPY_WORKDIR=str(work), CUPY_CACHE_DIR=str(work / "cupy"))
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(HERE, "hostcupy"),
                                                    e.get("PYTHONPATH")]))
    return e


def _run(cmd, env, timeout=600):
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=timeout)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    return out


def test_the_stand_in_is_what_the_child_imports(env):
    out = _run([sys.executable, "-c", "import cupy; from adjit.backends import cupy_backend, "
                "registry; print(cupy.__version__, cupy_backend.why_unusable(), "
                "registry.resolve('auto').NAME)"], env)
    assert "hostcupy None cupy" in out


USER = textwrap.dedent("""
    import numpy as np, cupy, adjit, warnings
    warnings.simplefilter("error", RuntimeWarning)     # a failed capture warns: fail instead

    def loss(p, X, y):
        h = np.tanh(X @ p["W1"].T + p["b1"])
        z = h @ p["W2"].T + p["b2"]
        logp = z - adjit.logsumexp(z, axis=1, keepdims=True)
        return -np.mean(logp[np.arange(len(y)), y])

    rng = np.random.default_rng(0)
    p = {"W1": rng.normal(size=(16, 8)).astype(np.float32) * 0.3, "b1": np.zeros(16, np.float32),
         "W2": rng.normal(size=(4, 16)).astype(np.float32) * 0.3, "b2": np.zeros(4, np.float32)}
    X = rng.normal(size=(32, 8)).astype(np.float32)
    y = rng.integers(0, 4, size=32)
    v0, g0 = adjit.value_and_grad(loss, backend="numpy")(p, X, y)

    # NumPy arguments and CuPy arguments; results stay on the device
    for args in ((p, X, y), ({k: cupy.asarray(v) for k, v in p.items()}, cupy.asarray(X),
                            cupy.asarray(y))):
        v, g = adjit.value_and_grad(loss)(*args)          # backend="auto" picks cupy
        assert isinstance(v, cupy.ndarray) and isinstance(g["W1"], cupy.ndarray)
        assert abs(float(v) - float(v0)) < 1e-5
        for k in p:
            assert np.allclose(g[k].get(), g0[k], atol=1e-5), k

    # a whole SGD step with momentum as one CUDA graph, parameters donated
    def step(p, m, X, y):
        g = adjit.grad(loss)(p, X, y)
        m = {k: 0.9 * m[k] + g[k] for k in p}
        return {k: p[k] - 0.1 * m[k] for k in p}, m
    ref = adjit.compile(step, backend="numpy")
    gpu = adjit.compile(step, backend="cupy", cuda_graph=True, donate_argnums=(0, 1))
    s_ref = (p, {k: np.zeros_like(v) for k, v in p.items()})
    s_gpu = ({k: cupy.asarray(v) for k, v in p.items()},
             {k: cupy.zeros(v.shape, v.dtype) for k, v in p.items()})
    Xg, yg = cupy.asarray(X), cupy.asarray(y)
    for _ in range(4):
        s_ref, s_gpu = ref(*s_ref, X, y), gpu(*s_gpu, Xg, yg)
    assert gpu.lower(*s_gpu, Xg, yg).fn.mode == "graph"
    for k in p:
        assert np.allclose(s_gpu[0][k].get(), s_ref[0][k], atol=1e-5), k

    # gradcheck of the device gradient, with device arguments (copied to the host)
    pf = lambda w, X: np.sum(np.tanh(X @ w) ** 2)
    w64 = cupy.asarray(rng.normal(size=8))
    assert adjit.gradcheck(pf, w64, cupy.asarray(X.astype(np.float64)), backend="cupy") < 1e-6

    # peak memory from the pool, with NumPy arguments too (the program copies them in)
    f = adjit.grad(loss, backend="cupy")
    with_numpy = adjit.measure_peak_memory(f, p, X, y)
    with_cupy = adjit.measure_peak_memory(f, *args)
    assert 0 < with_cupy < with_numpy, (with_cupy, with_numpy)

    # complex CuPy results passed back in (split into their parts on the device), and
    # nanmax without host reads or all-NaN warnings (RuntimeWarning is an error here)
    half = adjit.compile(lambda z: 0.5 * z + 1j, backend="cupy")
    z = half(half(np.array([1 + 2j, 3 - 1j])))
    assert isinstance(z, cupy.ndarray) and np.allclose(z.get(), [0.25 + 2j, 0.75 + 1.25j])
    Xn = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan]])
    top = adjit.compile(lambda X: np.nanmax(X, axis=1), backend="cupy")(Xn)
    assert np.array_equal(top.get(), [3.0, np.nan], equal_nan=True)
    print("user API ok", with_numpy, with_cupy)
""")


def test_user_api_and_cuda_graph_step(env):
    assert "user API ok" in _run([sys.executable, "-c", USER], env)


SWEEP30 = textwrap.dedent("""
    import numpy as np, cupy, adjit
    r = np.random.default_rng(0)
    E = r.normal(size=(50, 4)).astype(np.float32)
    ids = r.integers(-50, 50, 300)
    u = r.normal(size=(64, 48)).astype(np.float32)
    X = r.normal(size=(6, 5)).astype(np.float32)
    cases = [
        ("embed", lambda E, ids: np.sum(np.tanh(E[ids]) * np.arange(1.0, 5.0)), (E, ids)),
        ("powers", lambda u: np.sum((u + 1.0) ** 3 + u ** -3), (u,)),
        ("slices", lambda u: np.sum((u[:-2, 1:-1] + u[2:, 1:-1] - 2 * u[1:-1, 1:-1]) ** 2)
         + np.sum(np.abs(u[1:] - u[:-1])), (u,)),
        ("masked", lambda X: X[X > 0].mean() + np.var(X[X > 0.2], ddof=1), (X,)),
        ("i0", lambda X: np.sum(np.i0(X)), (X,)),
        ("knots", lambda X: np.sum(np.interp(np.linspace(-1, 1, 7), np.sort(X[0]), X[1])),
         (X,)),
    ]
    for name, f, args in cases:
        ref = adjit.value_and_grad(f, backend="numpy")(*args)
        got = adjit.value_and_grad(f, backend="cupy")(*args)
        assert isinstance(got[1], cupy.ndarray), name
        np.testing.assert_allclose(float(cupy.asnumpy(got[0])), ref[0], rtol=1e-4, err_msg=name)
        np.testing.assert_allclose(cupy.asnumpy(got[1]), ref[1], rtol=1e-3, atol=1e-4,
                                   err_msg=name)
    print("sweep 30 ok")
""")


def test_programs_of_the_eighteenth_session_on_the_gpu_backend(env):
    """Gathers and their scatter-add, whole powers, overlapping slices, masked reductions,
    i0's derivative rule and traced interp knots (new or changed on the CPU backends in
    sweep 30): the same values and gradients through the CuPy backend."""
    assert "sweep 30 ok" in _run([sys.executable, "-c", SWEEP30], env)


def test_gpu_tests_pass(env):
    """The GPU tests gpu_check.py runs on a device, but the op table and fuzz cases (one
    device kernel set per case: minutes of host compiles here; the host tests in
    test_cuda_sources.py compile and run those kernels already)."""
    out = _run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                "tests/backends/test_cupy.py", "-k", "not op_table and not fuzzed"], env)
    assert " passed" in out and " skipped" not in out, out[-3000:]


def test_mnist_command_on_the_gpu_backend(env):
    out = _run([sys.executable, "-m", "adjit.cli", "mnist", "--backend", "cupy", "--epochs", "1",
                "--hidden", "32", "--no-progress"], env)
    assert "accuracy" in out.lower(), out[-3000:]


def test_gpu_check_smoke(env, tmp_path):
    path = tmp_path / "gpu_check.json"
    out = _run([sys.executable, "benchmarks/gpu_check.py", "--smoke", "--budget", "400",
                "--out", str(path)], env)
    table = json.loads(path.read_text())
    rows = table["rows"]
    failed = [r for r in rows if r["ok"] is False]
    assert table["complete"] and not failed, out[-6000:]
    sections = {r["section"] for r in rows}
    assert {"environment", "equality", "epoch", "checkpoint"} <= sections, sections
