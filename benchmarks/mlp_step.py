"""One training step's value and gradient of an MLP, adjit against its peers in the same run.

Usage: python benchmarks/mlp_step.py [--batch 64,256,1024] [--sizes 784,512,512,10]
                                     [--repeat 30] [--no-compile-times]
The model: relu MLP, weights stored (out, in), mean softmax cross-entropy over integer labels,
float32. Peers: the step's 8 matrix products alone (the floor: 3 forward, dW for each layer,
dH for the hidden layers), hand-written NumPy backprop (benchmarks/handwritten_numpy.py),
PyTorch eager and torch.compile (CPU), JAX jit(value_and_grad); a peer that is not installed is
skipped with a line saying so. Then the compile cost of the numba backend: a first compile
with an empty kernel cache, and a second process that finds the kernels cached.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import handwritten_numpy as hw  # noqa: E402
from common import machine, median_ms, optional, table, tune_malloc  # noqa: E402

import adjit  # noqa: E402


def loss(p, X, y):
    n = len(p) // 2
    h = X
    for i in range(1, n):
        h = adjit.relu(h @ p[f"W{i}"].T + p[f"b{i}"])
    z = h @ p[f"W{n}"].T + p[f"b{n}"]
    return -np.mean(adjit.log_softmax(z)[np.arange(len(y)), y])


def matmul_floor(p, X):
    """The 8 products of a 3-layer step with the shapes and layouts the step uses."""
    W1, W2, W3 = p["W1"], p["W2"], p["W3"]
    h1 = np.maximum(X @ W1.T, 0)
    h2 = np.maximum(h1 @ W2.T, 0)
    g3 = np.ones((X.shape[0], W3.shape[0]), X.dtype)
    g2 = np.ones_like(h2)
    g1 = np.ones_like(h1)

    def run():
        X @ W1.T
        h1 @ W2.T
        h2 @ W3.T
        g3.T @ h2
        g3 @ W3
        g2.T @ h1
        g2 @ W2
        g1.T @ X
    return run


def torch_steps(torch, p, X, y):
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    F = torch.nn.functional
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
    tX, ty = torch.from_numpy(X), torch.from_numpy(y.astype(np.int64))
    n = len(p) // 2

    def tloss(tp, X, y):
        h = X
        for i in range(1, n):
            h = torch.relu(h @ tp[f"W{i}"].T + tp[f"b{i}"])
        return F.cross_entropy(h @ tp[f"W{n}"].T + tp[f"b{n}"], y)

    def eager():
        for t in tp.values():
            t.grad = None
        out = tloss(tp, tX, ty)
        out.backward()
        return out
    compiled = torch.compile(tloss)

    def comp():
        for t in tp.values():
            t.grad = None
        out = compiled(tp, tX, ty)
        out.backward()
        return out
    return eager, comp


def jax_step(jax, p, X, y):
    jnp = jax.numpy
    n = len(p) // 2

    def jloss(p, X, y):
        h = X
        for i in range(1, n):
            h = jax.nn.relu(h @ p[f"W{i}"].T + p[f"b{i}"])
        z = h @ p[f"W{n}"].T + p[f"b{n}"]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(z), y[:, None], axis=1))
    f = jax.jit(jax.value_and_grad(jloss))
    jp = {k: jnp.asarray(v) for k, v in p.items()}
    jX, jy = jnp.asarray(X), jnp.asarray(y)

    def run():
        v, g = f(jp, jX, jy)
        jax.block_until_ready(g)
    return run


def bench_batch(batch, sizes, repeat, torch, jax):
    p = hw.make_mlp(sizes, 0, np.float32)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(batch, sizes[0])).astype(np.float32)
    y = rng.integers(0, sizes[-1], size=batch)
    rows = {"8 matrix products (floor)": matmul_floor(p, X),
            "hand-written NumPy": lambda: hw.loss_and_grads(p, X, y)}
    if torch is not None:
        rows["PyTorch eager"], rows["torch.compile"] = torch_steps(torch, p, X, y)
    if jax is not None:
        rows["JAX jit(value_and_grad)"] = jax_step(jax, p, X, y)
    for be in ("numpy", "numba"):
        f = adjit.value_and_grad(loss, backend=be)
        f(p, X, y)
        rows[f"adjit {be}"] = (lambda f: lambda: f(p, X, y))(f)
    ms = {name: median_ms(fn, repeat=repeat) for name, fn in rows.items()}
    floor = ms["8 matrix products (floor)"]
    peers = [k for k in ms if not k.startswith("adjit") and k != "8 matrix products (floor)"]
    best = min(peers, key=ms.get)
    out = []
    for name, t in ms.items():
        out.append([name, f"{t:.2f}", f"{t / floor:.2f}", f"{ms['adjit numba'] / t:.2f}"])
    print(f"\n### batch {batch}: best peer {best} ({ms[best]:.2f} ms, {ms[best] / floor:.2f}x "
          "the floor)\n")
    print(table(["step", "ms", "x floor", "adjit numba / this"], out))
    return ms


COMPILE_CHILD = textwrap.dedent("""
    import time
    t0 = time.perf_counter()
    import sys, numpy as np
    sys.path.insert(0, {bench!r})
    import handwritten_numpy as hw, mlp_step, adjit
    p = hw.make_mlp({sizes!r}, 0, np.float32)
    X = np.ones(({batch}, {sizes[0]}), np.float32)
    y = np.zeros({batch}, np.int64)
    f = adjit.value_and_grad(mlp_step.loss, backend="numba")
    t1 = time.perf_counter()
    f(p, X, y)
    t2 = time.perf_counter()
    print(f"{{t2 - t0:.3f}} {{t2 - t1:.3f}}")
""")


def compile_times(sizes, batch):
    """(first process, second process): seconds from start to the first result, and of the
    first call alone, with an empty kernel cache and then with the kernels cached."""
    code = COMPILE_CHILD.format(bench=os.path.dirname(os.path.abspath(__file__)),
                                sizes=list(sizes), batch=batch)
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, ADJIT_CACHE_DIR=d)
        runs = []
        for _ in range(2):
            out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                 capture_output=True, text=True).stdout.split()
            runs.append(tuple(float(v) for v in out))
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", default="64,256,1024")
    ap.add_argument("--sizes", default="784,512,512,10")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--no-compile-times", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    torch, jax = optional("torch"), optional("jax")
    if torch is not None:
        import torch._dynamo  # noqa: F401 - fail here, not in the middle of a table
    print("\n".join("# " + line for line in machine()))
    print(f"# glibc malloc tuned as by the adjit command (benchmarks/common.py): {tune_malloc()}")
    print(f"# MLP {sizes}, float32, relu, softmax cross-entropy; median of {args.repeat} "
          "calls after warm-up, a pause before each block")
    for b in [int(s) for s in args.batch.split(",")]:
        bench_batch(b, sizes, args.repeat, torch, jax)
    if not args.no_compile_times:
        (first_total, first_call), (second_total, second_call) = compile_times(sizes, 256)
        print("\n### compile cost of the numba backend (batch 256)\n")
        print(table(["process", "start to first result (s)", "first call (s)"], [
            ["first (empty kernel cache)", f"{first_total:.2f}", f"{first_call:.2f}"],
            ["second (kernels cached)", f"{second_total:.2f}", f"{second_call:.2f}"]]))


if __name__ == "__main__":
    main()
