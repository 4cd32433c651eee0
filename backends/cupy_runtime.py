"""The GPU side of CuPy programs: CuPy itself, kernel constructors cached by source, device
versions of the ops whose references allocate with NumPy, and stream capture for CUDA graphs.

`CupyRuntime` is what a generated module (backends/cupy_backend.py) calls; tests pass a host
stand-in with the same interface (tests/backends/cuda_host.py). Importing this file needs no
CuPy; creating a CupyRuntime does.
"""
from __future__ import annotations

import functools
import hashlib
import threading

import numpy as np

from ..ir.ops import OPS, _build_key
from . import cuda_source as cs


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
        self._capturing = False   # True while capture() runs the program (see matmul)

    def _kernel(self, kind, make, name, *code):
        # kernels whose code differs only in their name share one kernel object (CuPy compiles
        # each once, at its first call), and CuPy gets a name made from the code: the source
        # is then the same in every process, so CuPy's disk cache (~/.cupy/kernel_cache, keyed
        # by the source) serves what another process (a test shard) compiled already
        key = (kind,) + tuple(c.replace(name, "@") if isinstance(c, str) else c for c in code)
        key = hashlib.sha256(repr(key).encode()).hexdigest()
        with self._lock:
            k = self._cache.get(key)
            if k is None:
                canon = f"adjit_{key[:20]}"
                k = self._cache[key] = make(
                    canon, lambda s: s.replace(name, canon) if isinstance(s, str) else s)
        return k

    def elementwise(self, in_params, out_params, operation, name, preamble=""):
        return self._kernel("e", lambda canon, r: self.xp.ElementwiseKernel(
            in_params, out_params, r(operation), canon, preamble=r(preamble)),
            name, in_params, out_params, operation, preamble)

    def reduction(self, in_params, out_params, map_expr, reduce_expr, post_map_expr,
                  identity, name, reduce_type=None, preamble=""):
        return self._kernel("r", lambda canon, r: self.xp.ReductionKernel(
            in_params, out_params, r(map_expr), r(reduce_expr), r(post_map_expr), r(identity),
            canon, reduce_type=reduce_type, preamble=r(preamble)),
            name, in_params, out_params, map_expr, reduce_expr, post_map_expr, identity,
            reduce_type, preamble)

    to_device = staticmethod(to_device)

    # matrix products: cuBLAS, except inside a captured graph
    def matmul(self, a, b):
        """a @ b. CuPy raises NotImplementedError for any cuBLAS call on a capturing stream
        (cupy_backends/cuda/libs/cublas.pyx, setStream), so while capture() runs the program
        (the warm-up too, which compiles the kernel) products use cuda_source.MATMUL_SOURCE,
        or a ReductionKernel for stacks and other dtypes."""
        if not self._capturing:
            return a @ b
        return _capturable_matmul(self, a, b)

    def _raw_matmul(self, dtype, r):
        key = (np.dtype(dtype).name, r)
        with self._lock:
            k = self._mm_cache.get(key)
            if k is None:
                module = self._mm_cache.get("module")
                if module is None:
                    module = self._mm_cache["module"] = self.xp.RawModule(
                        code=cs.MATMUL_SOURCE)
                k = self._mm_cache[key] = module.get_function(cs.MATMUL_KERNELS[key])
        return k

    def _reduction_matmul(self):
        with self._lock:
            k = self._mm_cache.get("reduction")
            if k is None:
                k = self._mm_cache["reduction"] = self.xp.ReductionKernel(
                    "T x, T y", "T z", "x * y", "a + b", "z = a", "0", "adjit_matmul_reduce")
        return k

    _mm_cache = {}

    # stream capture, used by cuda_graph.GraphRunner
    def capture(self, run, buffers):
        """Capture run() on a private stream and memory pool -> (graph, run's result, keep).

        run(warmup=True) executes once first, uncaptured, so kernels compile and the private
        pool caches every block the captured run takes: capture then allocates nothing new.
        Both runs multiply with our kernel, not cuBLAS (see matmul). The pool is the graph's
        alone, so no other array reuses its memory between replays. `buffers` (the static
        arguments) are already on the device.
        """
        cp = self.xp
        stream = cp.cuda.Stream(non_blocking=True)
        pool = cp.cuda.MemoryPool()
        relaxed = getattr(cp.cuda.runtime, "streamCaptureModeRelaxed", 2)
        cp.cuda.get_current_stream().synchronize()   # the arguments were copied there
        self._capturing = True   # matmul avoids cuBLAS (see there), the warm-up included
        try:
            with cp.cuda.using_allocator(pool.malloc), stream:
                run(warmup=True)
                stream.synchronize()
                try:
                    stream.begin_capture(mode=relaxed)   # relaxed: the pool may cudaMalloc
                except TypeError:
                    stream.begin_capture()               # a CuPy whose begin_capture has no mode
                try:
                    result = run(warmup=False)
                except BaseException:
                    try:
                        stream.end_capture()
                    except Exception:  # noqa: BLE001 - the capture is broken; run's error says why
                        pass
                    raise
                graph = stream.end_capture()
        finally:
            self._capturing = False
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


def _capturable_matmul(rt, a, b):
    """np.matmul(a, b) without cuBLAS: 2-D (and 1-D) float32/float64 products with the
    strided kernel of cuda_source.MATMUL_SOURCE, anything else with a ReductionKernel over the
    broadcast product. The result is a new contiguous array."""
    xp = rt.xp
    dt = np.result_type(a.dtype, b.dtype)
    a = a if a.dtype == dt else a.astype(dt)
    b = b if b.dtype == dt else b.astype(dt)
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    if a2.ndim > 2 or b2.ndim > 2 or (dt.name, 1) not in cs.MATMUL_KERNELS:
        c = rt._reduction_matmul()(a2[..., :, :, None], b2[..., None, :, :], axis=-2)
    else:
        (m, k), n = a2.shape, b2.shape[1]
        c = xp.empty((m, n), dtype=dt)
        if c.size and not k:
            c.fill(0)
        elif c.size:
            size = dt.itemsize
            sai, sak = (s // size for s in a2.strides)
            sbk, sbj = (s // size for s in b2.strides)
            if abs(sbj) == 1 and n > 1:
                x_is_row = 0
            elif abs(sai) == 1 and m > 1:
                x_is_row = 1
            elif n >= m:     # neither is contiguous along C's rows or columns: copy one
                b2 = xp.ascontiguousarray(b2)
                sbk, sbj, x_is_row = n, 1, 0
            else:
                a2 = xp.asfortranarray(a2)
                sai, sak, x_is_row = 1, m, 1
            r, grid, block = cs.matmul_launch(m, n, x_is_row)
            rt._raw_matmul(dt, r)(grid, block, (
                a2, b2, c, np.int64(m), np.int64(n), np.int64(k), np.int64(sai),
                np.int64(sak), np.int64(sbk), np.int64(sbj), np.int32(x_is_row)))
    if a.ndim == 1 and b.ndim == 1:
        return c.reshape(())
    if a.ndim == 1:
        return c.reshape(c.shape[:-2] + c.shape[-1:])
    if b.ndim == 1:
        return c.reshape(c.shape[:-1])
    return c


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

    def scatter_add(g, *idx, key, shape, unique=False):
        z = xp.zeros(shape, dtype=g.dtype)
        if unique:
            z[_build_key(key, idx)] = g
        else:
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

    # cuFFT through xp.fft; complex arrays are their parts (..., 2): ir/ops.py's references
    # with the array module given
    from ..ir.ops import _cabs, _fft, _irfft, _rfft
    fft, rfft, irfft, cabs = (functools.partial(f, xp=xp) for f in (_fft, _rfft, _irfft, _cabs))

    # np.fmax.reduce's values with device reductions alone: cupy.nanmax reads the result back
    # to the host to warn about all-NaN slices (a synchronization, and a failed CUDA-graph
    # capture); here NaN is skipped as -inf (+inf) and an all-NaN slice gives NaN
    def _nan_extreme(x, axis, keepdims, fill, reduce):
        missing = xp.isnan(x)
        r = reduce(xp.where(missing, fill, x), axis=axis, keepdims=keepdims)
        return xp.where(xp.all(missing, axis=axis, keepdims=keepdims), xp.nan, r).astype(x.dtype)

    def nanmax(x, axis, keepdims):
        return _nan_extreme(x, axis, keepdims, -xp.inf, xp.max)

    def nanmin(x, axis, keepdims):
        return _nan_extreme(x, axis, keepdims, xp.inf, xp.min)

    ops = {name: od.numpy for name, od in OPS.items()}
    ops.update(unslice=unslice, scatter_add=scatter_add, one_hot=one_hot,
               concatenate=concatenate, fft=fft, rfft=rfft,
               irfft=irfft, cabs=cabs, nanmax=nanmax,
               nanmin=nanmin)
    return ops


def _add_at(xp):
    at = getattr(xp.add, "at", None)
    if at is not None:
        return at
    import cupyx  # CuPy before ufunc.at
    return cupyx.scatter_add
