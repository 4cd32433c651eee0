"""Hessians, Jacobians and per-example gradients: adjit against JAX, PyTorch and NumPy, same run.

Usage: python benchmarks/transforms.py [--repeat 20] [--quick] [--threads N]

Programs (float64):
  hessian    adjit.hessian of Rosenbrock's function, n = 10, 100, 400 parameters, against
             jax.jit(jax.hessian) and torch.func.hessian (eager); hand-written NumPy: the
             tridiagonal Hessian written out with np.diag
  jacobian   adjit.jacobian of x -> tanh(W x) + x**3 for n = 50, 200 (square: reverse mode),
             against jax.jit(jax.jacrev) and torch.func.jacrev; NumPy: (1 - t**2)[:, None] * W
             + diag(3 x**2)
  perexample adjit.vmap(adjit.grad(loss), in_axes=(None, 0, 0)) of a 784-64-10 MLP's softmax
             cross-entropy, batch 32 and 128, against jax.jit(jax.vmap(jax.grad)) and
             torch.func.vmap(torch.func.grad); NumPy: the per-example backward written with
             einsum (outer products of each example's activations and deltas)
Each row checks adjit's result against the NumPy one (rtol 1e-9); a failed check prints a
MISMATCH line. compile = adjit's first call (trace, passes, codegen, first run); the times
are medians of --repeat calls after warm-up (benchmarks/common.py), with glibc's malloc tuned
as the `adjit` command tunes it (for every peer alike). BLAS, XLA and PyTorch use one thread
unless --threads is given. A peer that is not installed is skipped with a line.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import threads  # noqa: E402,F401 - sets the thread counts before NumPy is imported

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from common import machine, median_ms, optional, table, tune_malloc  # noqa: E402

import adjit  # noqa: E402


# -- the programs, as a NumPy user writes them ------------------------------------------------
def rosenbrock(x):
    return np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def rosen_hessian_numpy(x):
    d = np.zeros_like(x)
    d[:-1] += 1200 * x[:-1] ** 2 - 400 * x[1:] + 2
    d[1:] += 200
    off = -400 * x[:-1]
    return np.diag(d) + np.diag(off, 1) + np.diag(off, -1)


def squash(x, W):
    return np.tanh(W @ x) + x ** 3


def squash_jacobian_numpy(x, W):
    t = np.tanh(W @ x)
    return (1 - t ** 2)[:, None] * W + np.diag(3 * x ** 2)


def mlp_loss(params, x, y):
    W1, b1, W2, b2 = params
    h = np.tanh(x @ W1 + b1)
    z = h @ W2 + b2
    z = z - np.max(z)
    return -(z[y] - np.log(np.sum(np.exp(z))))


def mlp_per_example_numpy(params, X, Y):
    W1, b1, W2, b2 = params
    h = np.tanh(X @ W1 + b1)
    z = h @ W2 + b2
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    dz = p
    dz[np.arange(len(Y)), Y] -= 1
    dh = (dz @ W2.T) * (1 - h ** 2)
    return [np.einsum("bi,bj->bij", X, dh), dh, np.einsum("bi,bj->bij", h, dz), dz]


# -- peers ------------------------------------------------------------------------------------
def jax_versions(jax, jnp):
    def rosen(x):
        return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

    def sq(x, W):
        return jnp.tanh(W @ x) + x ** 3

    def loss(params, x, y):
        W1, b1, W2, b2 = params
        h = jnp.tanh(x @ W1 + b1)
        z = h @ W2 + b2
        z = z - jnp.max(z)
        return -(z[y] - jnp.log(jnp.sum(jnp.exp(z))))
    return {"hessian": jax.jit(jax.hessian(rosen)), "jacobian": jax.jit(jax.jacrev(sq)),
            "perexample": jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))}


def torch_versions(torch):
    from torch import func

    def rosen(x):
        return torch.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

    def sq(x, W):
        return torch.tanh(W @ x) + x ** 3

    def loss(params, x, y):
        W1, b1, W2, b2 = params
        h = torch.tanh(x @ W1 + b1)
        z = h @ W2 + b2
        z = z - torch.max(z)
        # z[y] of a mapped 0-d y is refused by torch.func.vmap: a gather instead
        return -(z.gather(0, y.reshape(1))[0] - torch.log(torch.sum(torch.exp(z))))
    return {"hessian": func.hessian(rosen), "jacobian": func.jacrev(sq),
            "perexample": func.vmap(func.grad(loss), in_dims=(None, 0, 0))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="the smallest size of each program")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    print("\n".join(machine()))
    # as the adjit command does (benchmarks/common.py): without it, a 160,000-element Hessian
    # page-faults its fresh arrays in on every call once glibc's mmap threshold is low
    print(f"glibc malloc tuned: {tune_malloc()}")
    jax = optional("jax")
    jx = tj = None
    if jax is not None:
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        jx = jax_versions(jax, jnp)
    torch = optional("torch")
    if torch is not None:
        torch.set_num_threads(args.threads or 1)
        tj = torch_versions(torch)
    rng = np.random.default_rng(0)
    cases = []
    for n in ([10] if args.quick else [10, 100, 400]):
        x = rng.normal(size=n)
        cases.append(("hessian", f"n={n}", adjit.hessian(rosenbrock), (x,),
                      rosen_hessian_numpy, lambda r: r))
    for n in ([50] if args.quick else [50, 200]):
        x, W = rng.normal(size=n), rng.normal(size=(n, n)) / np.sqrt(n)
        cases.append(("jacobian", f"n={n}", adjit.jacobian(squash), (x, W),
                      squash_jacobian_numpy, lambda r: r))
    for b in ([32] if args.quick else [32, 128]):
        params = [rng.normal(size=(784, 64)) * 0.05, np.zeros(64), rng.normal(size=(64, 10)) * 0.1,
                  np.zeros(10)]
        X, Y = rng.normal(size=(b, 784)), rng.integers(0, 10, size=b)
        cases.append(("perexample", f"batch {b}, 784-64-10",
                      adjit.vmap(adjit.grad(mlp_loss), in_axes=(None, 0, 0)), (params, X, Y),
                      mlp_per_example_numpy, lambda r: r))
    rows = []
    for name, size, fn, fargs, ref_fn, _ in cases:
        t = time.perf_counter()
        got = fn(*fargs)
        compile_s = time.perf_counter() - t
        ref = ref_fn(*[[a.copy() for a in v] if isinstance(v, list) else v for v in fargs])
        for a, b in zip(got if isinstance(got, list) else [got],
                        ref if isinstance(ref, list) else [ref]):
            if not np.allclose(a, b, rtol=1e-9, atol=1e-12 * np.abs(b).max()):
                print(f"MISMATCH {name} {size}: max abs diff {np.abs(a - b).max():.3g}")
        a_ms = median_ms(lambda: fn(*fargs), args.repeat)
        n_ms = median_ms(lambda: ref_fn(*fargs), args.repeat)
        j_ms = t_ms = float("nan")
        if jx is not None:
            j = jx[name]
            j_ms = median_ms(lambda: jax.block_until_ready(j(*fargs)), args.repeat)
        if tj is not None:
            targs = [[torch.from_numpy(a) for a in v] if isinstance(v, list)
                     else torch.from_numpy(v) for v in fargs]
            tf = tj[name]
            t_ms = median_ms(lambda: tf(*targs), args.repeat)
        rows.append([name, size, f"{a_ms:.3f}", f"{n_ms:.3f}", f"{j_ms:.3f}", f"{t_ms:.3f}",
                     f"{compile_s:.2f}", f"{a_ms / n_ms:.2f}", f"{a_ms / j_ms:.2f}",
                     f"{a_ms / t_ms:.2f}"])
        print(" ".join(rows[-1]), flush=True)
    print()
    print(table(["program", "size", "adjit ms", "NumPy by hand ms", "JAX jit ms",
                 "torch.func ms", "adjit compile s", "adjit / NumPy", "adjit / JAX",
                 "adjit / torch"], rows))


if __name__ == "__main__":
    main()
