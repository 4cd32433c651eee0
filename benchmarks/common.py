"""Shared pieces of the benchmarks: fair timing, machine description, optional peers.

Timing: every timed block starts after a short sleep, so the spinning worker threads of the
previous block (OpenBLAS keeps them busy ~0.1 s after a call) do not take the cores; the
figure is the median of `repeat` calls after warm-up calls.
"""
import importlib
import os
import platform
import statistics
import time

import numpy as np

from adjit import tune_malloc  # noqa: F401 - what the adjit command does; peers alike


def median_ms(fn, repeat=30, warmup=3, pause=0.25):
    for _ in range(warmup):
        fn()
    time.sleep(pause)
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return 1e3 * statistics.median(ts)


def optional(name):
    """The module, or None (and a line saying so) when the peer is not installed."""
    try:
        return importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - any import failure means the peer is skipped
        print(f"# skipping {name}: not installed ({type(e).__name__}: {e})")
        return None


def machine():
    """One line per fact: CPU, cores, library versions, BLAS."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    lines = [f"machine: {cpu}, {cores} cores, Python {platform.python_version()}, "
             f"date {time.strftime('%Y-%m-%d')}"]
    vers = []
    for name in ("numpy", "numba", "torch", "jax"):
        try:
            vers.append(f"{name} {importlib.import_module(name).__version__}")
        except Exception:  # noqa: BLE001 - not installed
            vers.append(f"{name} absent")
    lines.append("versions: " + ", ".join(vers))
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        lines.append(f"BLAS: {blas.get('name')} {blas.get('version')}")
    except Exception:  # noqa: BLE001 - older NumPy
        pass
    return lines


def copy_bandwidth_gbs(nbytes=64 << 20, repeat=20):
    """GB/s of a large array copy (bytes read + bytes written), this machine, now."""
    a = np.ones(nbytes // 8)
    b = np.empty_like(a)
    ms = median_ms(lambda: np.copyto(b, a), repeat=repeat)
    return 2 * a.nbytes / (ms * 1e-3) / 1e9


def table(header, rows):
    """A Markdown table: rows are lists of cells (already formatted)."""
    out = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)
