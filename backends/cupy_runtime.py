"""The GPU side of CuPy programs: CuPy itself, kernel constructors cached by source, device
versions of the ops whose references allocate with NumPy, and stream capture for CUDA graphs.

`CupyRuntime` is what a generated module (backends/cupy_backend.py) calls; tests pass a host
stand-in with the same interface (tests/backends/cuda_host.py). Importing this file needs no
CuPy; creating a CupyRuntime does.
"""
from __future__ import annotations

import hashlib
import threading

import numpy as np

from ..ir.ops import OPS, _build_key


def to_device(x):
    """A NumPy array or scalar copied to the GPU (once); CuPy arrays pass through. Also the
    training loop's hook (nn/train.py) for moving the data and parameters before the first step."""
    import cupy
    return x if isinstance(x, cupy.ndarray) else cupy.asarray(np.asarray(x))


class CupyRuntime:
    """What generated modules call on the GPU: CuPy, kernel constructors cached by source hash,
    moves to the device, and stream capture (see cuda_graph.GraphRunner)."""

    _cache = {}
    _lock = threading.Lock()

    def __init__(self):
        import cupy
        self.xp = cupy

    def _kernel(self, kind, make, name, *code):
        # kernels whose code differs only in their name share one compiled kernel (named
        # after the first): CuPy compiles each kernel object once, at its first call
        key = (kind,) + tuple(c.replace(name, "@") if isinstance(c, str) else c for c in code)
        key = hashlib.sha256(repr(key).encode()).hexdigest()
        with self._lock:
            k = self._cache.get(key)
            if k is None:
                k = self._cache[key] = make()
        return k

    def elementwise(self, in_params, out_params, operation, name, preamble=""):
        return self._kernel("e", lambda: self.xp.ElementwiseKernel(
            in_params, out_params, operation, name, preamble=preamble),
            name, in_params, out_params, operation, preamble)

    def reduction(self, in_params, out_params, map_expr, reduce_expr, post_map_expr,
                  identity, name, reduce_type=None, preamble=""):
        return self._kernel("r", lambda: self.xp.ReductionKernel(
            in_params, out_params, map_expr, reduce_expr, post_map_expr, identity, name,
            reduce_type=reduce_type, preamble=preamble),
            name, in_params, out_params, map_expr, reduce_expr, post_map_expr, identity,
            reduce_type, preamble)

    to_device = staticmethod(to_device)

    # stream capture, used by cuda_graph.GraphRunner
    def capture(self, run, buffers):
        """Capture run() on a private stream and memory pool -> (graph, run's result, keep).

        run(warmup=True) executes once first, uncaptured, so kernels compile, cuBLAS sets up
        and the private pool caches every block the captured run takes: capture then
        allocates nothing new. The pool is the graph's alone, so no other array reuses its
        memory between replays. `buffers` (the static arguments) are already on the device.
        """
        cp = self.xp
        stream = cp.cuda.Stream(non_blocking=True)
        pool = cp.cuda.MemoryPool()
        relaxed = getattr(cp.cuda.runtime, "streamCaptureModeRelaxed", 2)
        cp.cuda.get_current_stream().synchronize()   # the arguments were copied there
        with cp.cuda.using_allocator(pool.malloc), stream:
            run(warmup=True)
            stream.synchronize()
            try:
                stream.begin_capture(mode=relaxed)   # relaxed: the pool may still cudaMalloc
            except TypeError:
                stream.begin_capture()               # a CuPy whose begin_capture takes no mode
            try:
                result = run(warmup=False)
            except BaseException:
                try:
                    stream.end_capture()
                except Exception:  # noqa: BLE001 - the capture is broken; run's error says why
                    pass
                raise
            graph = stream.end_capture()
        return graph, result, (stream, pool)

    def launch(self, graph):
        graph.launch(self.xp.cuda.get_current_stream())

    def copy_into(self, buf, x):
        if isinstance(x, self.xp.ndarray):
            self.xp.copyto(buf, x)
        elif np.ndim(x) == 0:
            buf.fill(np.asarray(x).item())
        else:
            buf.set(np.ascontiguousarray(x, dtype=buf.dtype))

    def empty(self, shape, dtype):
        return self.xp.empty(shape, dtype=dtype)


# -- device implementations of ops whose references allocate with NumPy ----------------------
def device_ops(rt):
    """The `_rt_ops` table on runtime rt: the OPS references, except the few that create arrays
    with NumPy (rewritten for rt.xp) and one_hot (one kernel instead of three launches); the
    rest index or call methods, which CuPy arrays share with NumPy's."""
    xp = rt.xp

    def unslice(g, index, shape):
        z = xp.zeros(shape, dtype=g.dtype)
        z[index] = g
        return z

    def scatter_add(g, *idx, key, shape):
        z = xp.zeros(shape, dtype=g.dtype)
        _add_at(xp)(z, _build_key(key, idx), g)
        return z

    def one_hot(labels, num_classes, dtype):
        # element i of the (..., C) result is in column i % C
        out = xp.empty(tuple(labels.shape) + (num_classes,), dtype=dtype)
        kernel = rt.elementwise(f"{labels.dtype.name} in0", f"{np.dtype(dtype).name} out0",
                                f"out0 = (in0 == (i % {num_classes})) ? 1 : 0;",
                                f"one_hot_{num_classes}")
        return kernel(labels[..., None], out)

    def concatenate(*xs, axis):
        return xp.concatenate(xs, axis=axis)

    ops = {name: od.numpy for name, od in OPS.items()}
    ops.update(unslice=unslice, scatter_add=scatter_add, one_hot=one_hot,
               concatenate=concatenate)
    return ops


def _add_at(xp):
    at = getattr(xp.add, "at", None)
    if at is not None:
        return at
    import cupyx  # CuPy before ufunc.at
    return cupyx.scatter_add


