"""exp, expm1, log, log1p and tanh inside numba kernels: adjit's vectorisable forms against the C
library's calls, NumPy's SIMD loops and JAX, same run.

Usage: python benchmarks/kernel_math.py [--n 65536] [--repeat 50]
One loop `out[i] = f(x[i])` over n elements, compiled by numba with the kernels' own settings
(error_model="numpy"), once with adjit's helper (backends/numba_helpers.py: branch-free
arithmetic emitted as LLVM IR, so LLVM vectorises the loop) and once with math.f (numba calls
the C library per element and cannot vectorise the loop without SVML); NumPy's ufunc with
out=; jax.jit of jnp.f (x64 for float64). ns per element, median of --repeat calls, one
thread for every library. Also the error of the helper against NumPy in ulps over the same x
(log and log1p of |x|).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import threads  # noqa: E402,F401 - sets the thread counts before NumPy is imported

import argparse  # noqa: E402
import math  # noqa: E402

import numpy as np  # noqa: E402

from common import machine, median_ms, optional, table  # noqa: E402

NAMES = ("exp", "expm1", "log", "log1p", "tanh")


def loops(numba, helper, libm):
    @numba.njit(error_model="numpy")
    def with_helper(x, out):
        for i in range(x.size):
            out[i] = helper(x[i])

    @numba.njit(error_model="numpy")
    def with_libm(x, out):
        for i in range(x.size):
            out[i] = libm(x[i])
    return with_helper, with_libm


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=65536)
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    import numba

    from adjit.backends import numba_helpers as H
    jax = optional("jax")
    if jax is not None:
        jax.config.update("jax_enable_x64", True)
    print("\n".join(machine()))
    rng = np.random.default_rng(0)
    rows = []
    for dtype in (np.float64, np.float32):
        for name in NAMES:
            x = (rng.normal(size=args.n) * 3).astype(dtype)
            if name.startswith("log"):
                x = np.abs(x)
            out = np.empty_like(x)
            helper, libm = loops(numba, getattr(H, f"_rt_{name}"), getattr(math, name))
            t_help = median_ms(lambda: helper(x, out), args.repeat)
            with np.errstate(all="ignore"):
                ref = getattr(np, name)(x)
            ok = np.isfinite(ref) & (ref != 0)
            ulp = float(np.max(np.abs(out[ok].astype(np.float64) - ref[ok]) /
                               np.spacing(np.abs(ref[ok]))))
            t_libm = median_ms(lambda: libm(x, out), args.repeat)
            t_np = median_ms(lambda: getattr(np, name)(x, out=out), args.repeat)
            if jax is not None:
                f = jax.jit(getattr(jax.numpy, name))
                xj = jax.numpy.asarray(x)
                t_jax = median_ms(lambda: f(xj).block_until_ready(), args.repeat)
            per = 1e6 / args.n       # ms for n elements -> ns per element
            rows.append([name, np.dtype(dtype).name, f"{t_help * per:.2f}",
                         f"{t_libm * per:.2f}", f"{t_np * per:.2f}",
                         f"{t_jax * per:.2f}" if jax is not None else "-",
                         f"{t_libm / t_help:.1f}x", f"{t_help / t_np:.2f}",
                         f"{ulp:.1f}"])
    print(f"\n### ns per element, n = {args.n}, one thread\n")
    print(table(["f", "dtype", "adjit helper", "math.f (C library)", "NumPy", "JAX",
                 "C library / helper", "helper / NumPy", "max ulp vs NumPy"], rows))


if __name__ == "__main__":
    main()
