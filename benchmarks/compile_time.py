"""Compile time of value_and_grad for an MLP: trace + passes + codegen, per stage.

Usage: python benchmarks/compile_time.py [--sizes 784,512,512,10] [--backend numpy] [--repeat 5]
Prints the median time of each stage and the total against the issue's 0.3 s target.
"""
import argparse
import os
import sys
import statistics
import time

import numpy as np

import adjit
from adjit.backends.registry import resolve

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mlp_step import loss  # noqa: E402 - the same MLP loss the step benchmark times
from adjit.passes.pipeline import run_pipeline


def make(sizes, batch=256):
    rng = np.random.default_rng(0)
    p = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]), 1):
        p[f"W{i}"] = (rng.normal(size=(b, a)) / np.sqrt(a)).astype(np.float32)
        p[f"b{i}"] = np.zeros(b, np.float32)
    X = rng.normal(size=(batch, sizes[0])).astype(np.float32)
    y = rng.integers(0, sizes[-1], size=batch)
    return p, X, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="784,512,512,10")
    ap.add_argument("--backend", default="numpy")
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    p, X, y = make(sizes)
    be = resolve(a.backend)
    rows = {"trace + autodiff": [], "passes": [], "codegen + load": [], "total": []}
    for _ in range(a.repeat):
        f = adjit.value_and_grad(loss, backend=a.backend)
        t0 = time.perf_counter()
        g = f.trace(p, X, y)
        t1 = time.perf_counter()
        g2 = run_pipeline(g, be)
        t2 = time.perf_counter()
        be.build(g2, "step")
        t3 = time.perf_counter()
        rows["trace + autodiff"].append(t1 - t0)
        rows["passes"].append(t2 - t1)
        rows["codegen + load"].append(t3 - t2)
        rows["total"].append(t3 - t0)
    print(f"value_and_grad of MLP {a.sizes}, backend {a.backend}, "
          f"{len(g2)} nodes after passes; median of {a.repeat}")
    print(f"{'stage':<20}{'ms':>10}")
    for k, v in rows.items():
        print(f"{k:<20}{1000 * statistics.median(v):>10.1f}")
    tot = statistics.median(rows["total"])
    print(f"target 300 ms: {'met' if tot < 0.3 else 'MISSED'} ({tot / 0.3:.2f}x of the target)")


if __name__ == "__main__":
    main()
