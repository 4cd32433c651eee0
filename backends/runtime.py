"""Programs: a generated module wrapped as a callable over pytrees, plus its reports.

`Program(*args)` flattens the arguments, runs the generated function and rebuilds the result's
structure; `.source`, `.ir`, `.graph`, `.kernels` and `.memory` show what was compiled.
"""
from __future__ import annotations

import gc
import tracemalloc
from dataclasses import dataclass, field

import numpy as np

from ..frontend import pytree


@dataclass
class MemoryReport:
    """The schedule's static estimate of what the program allocates (inputs excluded)."""
    peak_bytes: int
    live_bytes: list
    steps: list = field(default_factory=list)          # node ids, in schedule order
    checkpoints: dict = field(default_factory=dict)    # node -> why it is kept
    recomputed_flops: int = 0
    forward_flops: int = 0

    @property
    def recompute_ratio(self) -> float:
        return self.recomputed_flops / self.forward_flops if self.forward_flops else 0.0

    def __str__(self):
        s = f"peak {self.peak_bytes / 2**20:.2f} MiB over {len(self.live_bytes)} steps"
        if self.checkpoints:
            s += (f"; {len(self.checkpoints)} checkpoints, recomputes "
                  f"{100 * self.recompute_ratio:.0f}% of the forward FLOPs")
        return s


class Program:
    """A compiled graph for one signature of arguments."""

    def __init__(self, fn, source, graph, memory, in_trees, out_tree, static_argnums, backend,
                 kernels=None, prepare=None, finish=None):
        self.fn, self.source, self.graph, self.memory = fn, source, graph, memory
        self.in_trees, self.out_tree = in_trees, out_tree
        self.static_argnums = set(static_argnums)
        self.backend = backend
        self.kernels = kernels or {}
        self._prepare = prepare or (lambda a: a)
        self._finish = finish or (lambda a: a)

    @property
    def ir(self) -> str:
        return str(self.graph)

    def flat_args(self, args):
        leaves = []
        for i, a in enumerate(args):
            if i in self.static_argnums:
                continue
            ls, _, _ = pytree.flatten(a)
            leaves.extend(ls)
        return leaves

    def __call__(self, *args):
        return self.run_flat(self.flat_args(args))

    def run_flat(self, leaves):
        """Run on the flattened array leaves of the non-static arguments."""
        prep, fin = self._prepare, self._finish
        outs = self.fn(*[prep(x) for x in leaves])
        return pytree.unflatten(self.out_tree, [fin(o) for o in outs])

    def __repr__(self):
        return f"<adjit.Program {self.backend} {self.graph.meta.get('fn_name', '')}: " \
               f"{len(self.graph)} nodes, {self.memory}>"


def measure_peak_memory(fn, *args) -> int:
    """Bytes allocated at peak during one call of fn(*args), above what was live before.

    Host arrays are measured with tracemalloc (NumPy reports its buffers to it); a compiled
    function is called once first so that compilation is not measured.
    """
    from .. import frontend  # noqa: F401 - keeps import order simple for callers
    if hasattr(fn, "lower"):
        fn(*args)
    if _uses_cupy(args):
        return _measure_cupy(fn, *args)
    gc.collect()
    was = tracemalloc.is_tracing()
    if not was:
        tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        out = fn(*args)
        _, peak = tracemalloc.get_traced_memory()
        del out
    finally:
        if not was:
            tracemalloc.stop()
    return int(peak - base)


def _uses_cupy(args):
    leaves, _, _ = pytree.flatten(list(args))
    return any(type(x).__module__.startswith("cupy") for x in leaves)


def _measure_cupy(fn, *args):
    import cupy
    pool = cupy.get_default_memory_pool()
    cupy.cuda.Device().synchronize()
    pool.free_all_blocks()
    base = pool.used_bytes()
    peak = [base]
    # CuPy's pool has no peak counter: sample used_bytes from an allocator hook
    from cupy.cuda import memory_hooks

    class _Peak(memory_hooks.MemoryHook):
        name = "adjit_peak"

        def malloc_postprocess(self, **kw):
            peak[0] = max(peak[0], pool.used_bytes())

    with _Peak():
        out = fn(*args)
        cupy.cuda.Device().synchronize()
    del out
    return int(peak[0] - base)


def as_numpy(x):
    return np.asarray(x)
