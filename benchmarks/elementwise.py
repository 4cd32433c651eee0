"""Elementwise work, adjit against its peers in the same run, and against copy bandwidth.

Usage: python benchmarks/elementwise.py [--n 4194304] [--repeat 20]
GELU-tanh forward and backward (y and the cotangent of x for a given cotangent of y) and an
Adam update of n float32 parameters, by NumPy as a user writes it, PyTorch eager,
torch.compile, JAX jit, a hand-fused numba loop, and adjit's NumPy and numba backends. GB/s
count the bytes each step must read and write at least, to compare with this machine's copy
bandwidth measured in the same run. A peer that is not installed is skipped with a line.
"""
import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import (copy_bandwidth_gbs, machine, median_ms, optional, table,  # noqa: E402
                    tune_malloc)

import adjit  # noqa: E402

C = math.sqrt(2 / math.pi)
LR, B1, B2, EPS, STEP = 1e-3, 0.9, 0.999, 1e-8, 10


# -- GELU ------------------------------------------------------------------------------------
def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(C * (x + 0.044715 * x * x * x)))


def gelu_fwd_bwd(x, g):
    """y = gelu(x) and the cotangent of x for the cotangent g of y, in one program."""
    y, f_vjp = adjit.vjp(gelu, x)
    return y, f_vjp(g)[0]


def numpy_gelu(x, g):
    x3 = x * x * x
    t = np.tanh(C * (x + 0.044715 * x3))
    y = 0.5 * x * (1.0 + t)
    du = C * (1.0 + 3 * 0.044715 * x * x)
    dx = g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)
    return y, dx


def numba_gelu():
    import numba

    @numba.njit(parallel=True, fastmath=False)
    def k(x, g, y, dx):
        c, a = np.float32(C), np.float32(0.044715)
        for i in numba.prange(x.size):
            xi = x[i]
            t = math.tanh(c * (xi + a * xi * xi * xi))
            y[i] = np.float32(0.5) * xi * (np.float32(1) + t)
            du = c * (np.float32(1) + np.float32(3) * a * xi * xi)
            dx[i] = g[i] * (np.float32(0.5) * (np.float32(1) + t)
                            + np.float32(0.5) * xi * (np.float32(1) - t * t) * du)

    def run(x, g):
        y, dx = np.empty_like(x), np.empty_like(x)
        k(x, g, y, dx)
        return y, dx
    return run


# -- Adam --------------------------------------------------------------------------------------
def adam(p, g, m, v):
    m = B1 * m + (1 - B1) * g
    v = B2 * v + (1 - B2) * g * g
    mhat = m / (1 - B1 ** STEP)
    vhat = v / (1 - B2 ** STEP)
    return p - LR * mhat / (np.sqrt(vhat) + EPS), m, v


def numpy_adam(p, g, m, v):
    """In place, as a careful NumPy user writes it (the state is updated where it lives)."""
    m *= B1
    m += (1 - B1) * g
    v *= B2
    v += (1 - B2) * g * g
    d = np.sqrt(v / (1 - B2 ** STEP))
    d += EPS
    np.divide(m, d, out=d)
    d *= LR / (1 - B1 ** STEP)
    p -= d
    return p, m, v


def numba_adam():
    import numba

    @numba.njit(parallel=True)
    def k(p, g, m, v, c1, c2):
        b1, b2, lr, eps = np.float32(B1), np.float32(B2), np.float32(LR), np.float32(EPS)
        for i in numba.prange(p.size):
            gi = g[i]
            mi = b1 * m[i] + (np.float32(1) - b1) * gi
            vi = b2 * v[i] + (np.float32(1) - b2) * gi * gi
            m[i] = mi
            v[i] = vi
            p[i] = p[i] - lr * (mi / c1) / (math.sqrt(vi / c2) + eps)

    @numba.njit(parallel=True)
    def k2(p, g, m, v, po, mo, vo, c1, c2):
        b1, b2, lr, eps = np.float32(B1), np.float32(B2), np.float32(LR), np.float32(EPS)
        for i in numba.prange(p.size):
            gi = g[i]
            mi = b1 * m[i] + (np.float32(1) - b1) * gi
            vi = b2 * v[i] + (np.float32(1) - b2) * gi * gi
            mo[i] = mi
            vo[i] = vi
            po[i] = p[i] - lr * (mi / c1) / (math.sqrt(vi / c2) + eps)

    c = (np.float32(1 - B1 ** STEP), np.float32(1 - B2 ** STEP))

    def run(p, g, m, v):
        k(p, g, m, v, *c)
        return p, m, v

    def fresh(p, g, m, v):
        out = [np.empty_like(p) for _ in range(3)]
        k2(p, g, m, v, *out, *c)
        return out
    return run, fresh


def torch_gelu(torch):
    F = torch.nn.functional

    def step(f):
        def run(x, g):
            x.grad = None
            y = f(x)
            y.backward(g)
            return y, x.grad
        return run
    return step(lambda x: F.gelu(x, approximate="tanh")), step(torch.compile(
        lambda x: F.gelu(x, approximate="tanh")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 22)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    n = args.n
    torch, jax = optional("torch"), optional("jax")
    numba = optional("numba")
    print("\n".join("# " + line for line in machine()))
    print(f"# glibc malloc tuned as by the adjit command (benchmarks/common.py): {tune_malloc()}")
    bw = copy_bandwidth_gbs()
    print(f"# copy bandwidth (np.copyto of 64 MiB, read + write): {bw:.1f} GB/s")
    rng = np.random.default_rng(0)
    x = rng.normal(size=n).astype(np.float32)
    g = rng.normal(size=n).astype(np.float32)

    # GELU: reads x and g, writes y and dx
    gelu_bytes = 4 * n * 4
    rows = {"NumPy": lambda: numpy_gelu(x, g)}
    if torch is not None:
        torch.set_num_threads(len(os.sched_getaffinity(0)))
        tx = torch.from_numpy(x.copy()).requires_grad_(True)
        tg = torch.from_numpy(g)
        eager, comp = torch_gelu(torch)
        rows["PyTorch eager"] = lambda: eager(tx, tg)
        rows["torch.compile"] = lambda: comp(tx, tg)
    if jax is not None:
        jf = jax.jit(lambda x, g: (lambda y, f: (y, f(g)[0]))(*jax.vjp(
            lambda x: jax.nn.gelu(x, approximate=True), x)))
        jx, jg = jax.numpy.asarray(x), jax.numpy.asarray(g)
        rows["JAX jit"] = lambda: jax.block_until_ready(jf(jx, jg))
    if numba is not None:
        k = numba_gelu()
        rows["hand-fused numba loop (math.tanh)"] = lambda: k(x, g)
    for be in ("numpy", "numba"):
        f = adjit.compile(gelu_fwd_bwd, backend=be)
        ref = numpy_gelu(x.astype(np.float64), g.astype(np.float64))
        got = f(x, g)
        err = max(float(np.max(np.abs(a - r)) / np.max(np.abs(r))) for a, r in zip(got, ref))
        print(f"# adjit {be} GELU: largest error {err:.1e} relative to the largest value")
        rows[f"adjit {be}"] = (lambda f: lambda: f(x, g))(f)
    report("GELU-tanh forward + backward", n, gelu_bytes, rows, bw, args.repeat)

    # Adam: reads p, g, m, v; writes p, m, v
    adam_bytes = 7 * n * 4
    state = [rng.normal(size=n).astype(np.float32) for _ in range(2)]
    m0, v0 = state[0], np.abs(state[1])
    p0 = rng.normal(size=n).astype(np.float32)
    cp = [a.copy() for a in (p0, m0, v0)]
    rows = {"NumPy (in place)": lambda: numpy_adam(cp[0], g, cp[1], cp[2])}
    if torch is not None:
        tp = torch.from_numpy(p0.copy()).requires_grad_(True)
        opt = torch.optim.Adam([tp], lr=LR, betas=(B1, B2), eps=EPS, fused=True)
        tp.grad = torch.from_numpy(g)
        opt.step()
        rows["torch Adam(fused=True)"] = opt.step
    if numba is not None:
        k, k_fresh = numba_adam()
        hp = [a.copy() for a in (p0, m0, v0)]
        rows["hand-fused numba loop (in place)"] = lambda: k(hp[0], g, hp[1], hp[2])
        rows["hand-fused numba loop (new arrays)"] = lambda: k_fresh(p0, g, m0, v0)
    for be in ("numpy", "numba"):
        f = adjit.compile(adam, backend=be)
        f(p0, g, m0, v0)
        rows[f"adjit {be} (new arrays)"] = (lambda f: lambda: f(p0, g, m0, v0))(f)
    f = adjit.compile(adam, backend="numba", donate_argnums=(0, 2, 3))
    dp = [a.copy() for a in (p0, m0, v0)]
    f(dp[0], g, dp[1], dp[2])
    rows["adjit numba"] = lambda: f(dp[0], g, dp[1], dp[2])
    print("# adjit numba: donate_argnums=(0, 2, 3), so p, m, v are updated in place")
    report("Adam update", n, adam_bytes, rows, bw, args.repeat)


def report(title, n, nbytes, rows, bw, repeat):
    ms = {name: median_ms(fn, repeat=repeat) for name, fn in rows.items()}
    print(f"\n### {title}, n = {n} float32 ({nbytes / 1e6:.0f} MB must move)\n")
    out = [[name, f"{t:.2f}", f"{nbytes / (t * 1e-3) / 1e9:.1f}",
            f"{nbytes / (t * 1e-3) / 1e9 / bw:.2f}", f"{ms['adjit numba'] / t:.2f}"]
           for name, t in ms.items()]
    print(table(["implementation", "ms", "GB/s", "of copy bandwidth", "adjit numba / this"],
                out))


if __name__ == "__main__":
    main()
