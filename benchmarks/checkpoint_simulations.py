"""Gradient checkpointing of simulations: the gradient with respect to the initial state.

    python benchmarks/checkpoint_simulations.py [--n 20000] [--steps 100]

Two programs whose every input is differentiated (no data input marks where the chain
runs): an explicit 1-D heat equation with a tanh source term (state u; np.roll stencil) and a
leapfrog pendulum chain (state x and v: a cut is one of them with the other kept beside it),
both with adjit's default fusion (a fused elementwise step leaves no value to cut at, so the
pipeline also checkpoints before fusing, and keeps that program when it is smaller). For adjit
(NumPy backend): the static estimate and the measured peak (measure_peak_memory, working
memory besides the results) with no checkpointing and with checkpoint="sqrt", and the time
of one gradient. Peer: JAX under jit, store-all and jax.checkpoint around blocks of
sqrt(steps) steps, with XLA's own memory analysis (temporary bytes of the compiled
gradient) and its time. Prints a Markdown table; never asserts.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))
import adjit  # noqa: E402

DT = 0.01


def heat(u, steps):
    for _ in range(steps):
        u = np.tanh(u + 0.1 * (np.roll(u, 1) - 2 * u + np.roll(u, -1)))
    return np.sum(u ** 2)


def leapfrog(x, v, steps):
    for _ in range(steps):
        v = v - DT * np.sin(x)
        x = x + DT * v
    return np.sum(x ** 2) + np.sum(v ** 2)


def _best(fn, repeat=3):
    best = math.inf
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def adjit_rows(name, fn, args, argnums, fuse):
    rows = []
    for ck in (None, "sqrt"):
        f = adjit.grad(fn, argnums=argnums, backend="numpy", fuse=fuse, checkpoint=ck,
                       static_argnums=(len(args),))
        full = args + (STEPS,)
        mem = f.lower(*full).memory
        work = adjit.measure_peak_memory(f, *full, exclude_results=True)
        secs = _best(lambda: f(*full))
        rows.append((name, f"adjit {'store-all' if ck is None else 'sqrt'}",
                     mem.peak_bytes, work, secs, mem.recompute_ratio))
    return rows


def jax_rows(name, fn_jax, args, argnums):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return [(name, "JAX", None, None, None, None)]
    jax.config.update("jax_enable_x64", True)
    rows = []
    for remat in (False, True):
        g = jax.jit(jax.grad(lambda *a: fn_jax(jnp, jax, remat, *a), argnums=argnums))
        jargs = [jnp.asarray(a) for a in args]
        compiled = g.lower(*jargs).compile()
        try:
            temp = compiled.memory_analysis().temp_size_in_bytes
        except Exception:  # noqa: BLE001 - older jaxlib: no analysis
            temp = None
        jax.block_until_ready(g(*jargs))
        secs = _best(lambda: jax.block_until_ready(g(*jargs)))
        rows.append((name, f"JAX {'jax.checkpoint blocks' if remat else 'store-all'}", temp,
                     None, secs, None))
    return rows


def heat_jax(jnp, jax, remat, u):
    k = max(1, int(round(math.sqrt(STEPS))))

    def block(u, n):
        for _ in range(n):
            u = jnp.tanh(u + 0.1 * (jnp.roll(u, 1) - 2 * u + jnp.roll(u, -1)))
        return u
    done = 0
    while done < STEPS:
        n = min(k, STEPS - done)
        u = (jax.checkpoint(lambda u, n=n: block(u, n)) if remat else
             (lambda u, n=n: block(u, n)))(u)
        done += n
    return jnp.sum(u ** 2)


def leapfrog_jax(jnp, jax, remat, x, v):
    k = max(1, int(round(math.sqrt(STEPS))))

    def block(s, n):
        x, v = s
        for _ in range(n):
            v = v - DT * jnp.sin(x)
            x = x + DT * v
        return x, v
    s, done = (x, v), 0
    while done < STEPS:
        n = min(k, STEPS - done)
        s = (jax.checkpoint(lambda s, n=n: block(s, n)) if remat else
             (lambda s, n=n: block(s, n)))(s)
        done += n
    x, v = s
    return jnp.sum(x ** 2) + jnp.sum(v ** 2)


def main():
    global STEPS
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--frameworks", default="adjit,jax")
    a = p.parse_args()
    STEPS = a.steps
    rng = np.random.default_rng(0)
    u, x, v = (rng.normal(size=a.n) for _ in range(3))
    rows = []
    if "adjit" in a.frameworks:
        rows += adjit_rows("heat", heat, (u,), 0, True)
        rows += adjit_rows("leapfrog", leapfrog, (x, v), (0, 1), True)
    if "jax" in a.frameworks:
        rows += jax_rows("heat", heat_jax, (u,), 0)
        rows += jax_rows("leapfrog", leapfrog_jax, (x, v), (0, 1))
    print(f"\nn = {a.n}, {a.steps} steps, float64; memory in MiB (adjit: static estimate / "
          "measured working memory; JAX: XLA temporary bytes)\n")
    print("| program | schedule | estimate / XLA temp | measured work | ms per gradient | "
          "recomputed |")
    print("|---|---|---|---|---|---|")
    for name, what, est, work, secs, ratio in rows:
        def mib(b):
            return "-" if b is None else f"{b / 2**20:.2f}"
        print(f"| {name} | {what} | {mib(est)} | {mib(work)} | "
              f"{'-' if secs is None else f'{secs * 1e3:.1f}'} | "
              f"{'-' if ratio is None else f'{100 * ratio:.0f}%'} |")


STEPS = 100

if __name__ == "__main__":
    main()
