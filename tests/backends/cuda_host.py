"""A host stand-in for CuPy, so the CuPy backend's generated modules run without a GPU.

`HostRuntime` has the interface of `cupy_runtime.CupyRuntime`: `xp` is NumPy, and each
ElementwiseKernel / ReductionKernel definition is compiled by nvcc as host C++ (the same body
and preamble CuPy would get, in `cuda_source.translation_unit(..., "host")`) and called through
ctypes with CuPy's broadcasting and output rules. Stream capture is emulated: a "graph" re-runs
the program into the captured result buffers, which is what a replay does.
"""
import ctypes
import os

import numpy as np

from adjit.backends import cuda_source as cs


class _Kernel:
    def __init__(self, rt, kdef):
        self.rt, self.kdef, self.fn = rt, kdef, None
        self.ins, self.outs = kdef.params("in"), kdef.params("out")
        rt.pending.append(self)

    def _args(self, args):
        arrays = []
        for (dt, name), a in zip(self.ins, args):
            if isinstance(a, np.ndarray) and a.dtype != dt:
                raise TypeError(f"{self.kdef.name}: {name} is {dt}, got an array of {a.dtype}")
            arrays.append(np.asarray(a, dtype=dt))
        return arrays

    def _ptrs(self, arrays):
        return [ctypes.c_void_p(a.ctypes.data) for a in arrays]


class _Elementwise(_Kernel):
    def __call__(self, *args):
        nin = len(self.ins)
        if len(args) not in (nin, nin + len(self.outs)):
            raise TypeError(f"{self.kdef.name}: takes {nin} inputs (+ outputs), got {len(args)}")
        ins, given = self._args(args[:nin]), list(args[nin:])
        shape = np.broadcast_shapes(*[a.shape for a in ins], *[o.shape for o in given])
        ins = [np.ascontiguousarray(np.broadcast_to(a, shape)) for a in ins]
        for (dt, name), o in zip(self.outs, given):
            if o.dtype != dt or o.shape != shape:
                raise TypeError(f"{self.kdef.name}: output {name} must be {dt}{shape}")
        outs = [np.empty(shape, dt) for dt, _ in self.outs]
        self.rt.call(self, self._ptrs(ins + outs) + [ctypes.c_longlong(int(np.prod(shape)))])
        for o, r in zip(given, outs):
            o[...] = r
        res = given or outs
        return res[0] if len(res) == 1 else tuple(res)


class _Reduction(_Kernel):
    def __call__(self, *args, axis=None, keepdims=False):
        ins = self._args(args)
        shape = np.broadcast_shapes(*[a.shape for a in ins])
        nd = len(shape)
        axes = tuple(range(nd)) if axis is None else tuple(
            a % nd for a in (axis if isinstance(axis, tuple) else (axis,)))
        keep = [a for a in range(nd) if a not in axes]
        order = keep + list(axes)
        m = int(np.prod([shape[a] for a in keep]))
        k = int(np.prod([shape[a] for a in axes]))
        ins = [np.ascontiguousarray(np.broadcast_to(a, shape).transpose(order)) for a in ins]
        (dt, _), = self.outs
        out = np.empty(m, dt)
        self.rt.call(self, self._ptrs(ins + [out]) + [ctypes.c_longlong(m), ctypes.c_longlong(k)])
        kept = tuple(1 if a in axes else shape[a] for a in range(nd)) if keepdims else \
            tuple(shape[a] for a in keep)
        return out.reshape(kept)


class HostRuntime:
    """cupy_backend's runtime interface over NumPy and host-compiled kernels."""

    xp = np

    def __init__(self, workdir):
        self.workdir = workdir
        self.pending = []
        self.compiled_sources = []

    def elementwise(self, in_params, out_params, operation, name, preamble=""):
        return _Elementwise(self, cs.KernelDef("elementwise", name, in_params, out_params,
                                               operation, preamble))

    def reduction(self, in_params, out_params, map_expr, reduce_expr, post_map_expr, identity,
                  name, reduce_type=None, preamble=""):
        return _Reduction(self, cs.KernelDef("reduction", name, in_params, out_params, map_expr,
                                             preamble, reduce_expr, post_map_expr, identity,
                                             reduce_type or cs.CTYPES[out_params.split()[0]]))

    def call(self, kernel, args):
        if kernel.fn is None:
            self._compile()
        kernel.fn(*args)

    def _compile(self):
        """All kernels defined so far in one nvcc run (nvcc starts slowly); kernels whose code
        differs only in their name are compiled once."""
        batch, self.pending = [k for k in self.pending if k.fn is None], []
        unique = {}
        for k in batch:
            unique.setdefault(same_code(k.kdef), k.kdef)
        defs = list(unique.values())
        source = cs.translation_unit(defs, "host")
        self.compiled_sources.append(source)
        lib = ctypes.CDLL(cs.compile_unit(source, self.workdir, "host"))
        index = {key: i for i, key in enumerate(unique)}
        for k in batch:
            i = index[same_code(k.kdef)]
            k.fn = getattr(lib, cs.symbol(i, defs[i]))
            k.fn.restype = None
        self._keep = getattr(self, "_keep", []) + [lib]

    def to_device(self, x):
        return np.asarray(x)

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)

    def copy_into(self, buf, x):
        buf[...] = x

    def capture(self, run, buffers):
        """Emulated capture: like CUDA, capturing does not run the program; a replay re-runs
        it and leaves the results in the buffers the capture returned. Matrix products take
        the path they take under a real capture (no cuBLAS: cuda_source.MATMUL_SOURCE)."""
        self._capturing = True
        try:
            run(warmup=True)
            saved = [b.copy() for b in buffers]
            result = run(warmup=False)
            for b, s in zip(buffers, saved):
                b[...] = s
        finally:
            self._capturing = False
        self.captures = getattr(self, "captures", 0) + 1

        def replay():
            self._capturing = True
            try:
                new_result = run(warmup=False)
            finally:
                self._capturing = False
            for r, new in zip(result, new_result):
                if r is not new:
                    r[...] = new
        return replay, result, None

    # matrix products: as CupyRuntime.matmul, with the capture kernel compiled for the host
    _capturing = False

    def matmul(self, a, b):
        if not self._capturing:
            return a @ b
        from adjit.backends.cupy_runtime import _capturable_matmul
        self.capture_matmuls = getattr(self, "capture_matmuls", 0) + 1
        return _capturable_matmul(self, a, b)

    def _raw_matmul(self, dtype, r):
        return host_matmul_kernel(self.workdir, dtype, r)

    def _reduction_matmul(self):
        def reduce(x, y, axis):
            return np.sum(x * y, axis=axis)
        return reduce

    def launch(self, graph):
        self.launches = getattr(self, "launches", 0) + 1
        graph()


MATMUL_HOST_WRAPPERS = """
#define ADJIT_MATMUL_HOST(NAME, T) \\
extern "C" void NAME(const T* a, const T* b, T* c, long long m, long long n, long long k, \\
                     long long sai, long long sak, long long sbk, long long sbj, int x_is_row, \\
                     long long threads_x, long long threads_y, int r) { \\
    for (long long y0 = 0; y0 < threads_y; ++y0) \\
        for (long long x0 = 0; x0 < threads_x; ++x0) { \\
            if (r == 4) \\
                adjit_matmul_thread<T, 4>(a, b, c, m, n, k, sai, sak, sbk, sbj, x_is_row, \\
                                          x0, y0, threads_x, threads_y); \\
            else \\
                adjit_matmul_thread<T, 1>(a, b, c, m, n, k, sai, sak, sbk, sbj, x_is_row, \\
                                          x0, y0, threads_x, threads_y); \\
        } \\
}
ADJIT_MATMUL_HOST(adjit_matmul_host_f32, float)
ADJIT_MATMUL_HOST(adjit_matmul_host_f64, double)
"""


def host_matmul_kernel(workdir, dtype, r=1):
    """cuda_source.MATMUL_SOURCE's thread function (R x R blocks) compiled for the host and
    run for every thread of the grid, called as CuPy calls the RawKernel:
    kernel(grid, block, (a, b, c, m, n, k, sai, sak, sbk, sbj, x_is_row))."""
    lib = ctypes.CDLL(cs.compile_unit(cs.MATMUL_SOURCE + MATMUL_HOST_WRAPPERS, workdir, "host"))
    fn = getattr(lib, {"float32": "adjit_matmul_host_f32",
                       "float64": "adjit_matmul_host_f64"}[np.dtype(dtype).name])
    fn.restype = None

    def launch(grid, block, args):
        a, b, c = args[:3]
        assert c.flags.c_contiguous and a.dtype == b.dtype == c.dtype == np.dtype(dtype)
        assert len(args) == 11 and grid[1] <= 65535 and block[0] * block[1] * block[2] <= 1024
        ints = [ctypes.c_longlong(int(v)) for v in args[3:10]] + [ctypes.c_int(int(args[10]))]
        threads = [ctypes.c_longlong(int(grid[d]) * int(block[d])) for d in (0, 1)]
        fn(*[ctypes.c_void_p(x.ctypes.data) for x in (a, b, c)], *ints, *threads,
           ctypes.c_int(r))
    launch.lib = lib
    return launch


def same_code(d):
    """A key equal for kernels that differ only in their name."""
    return (d.kind, d.in_params, d.out_params, d.operation.replace(d.name, "@"),
            d.preamble.replace(d.name, "@"), d.reduce_expr, d.post_map_expr, d.identity,
            d.reduce_type)


def nvcc_available():
    return cs.nvcc_path() is not None


def workdir(tmp_path_factory):
    path = os.path.join(str(tmp_path_factory.getbasetemp()), "adjit_cuda")
    os.makedirs(path, exist_ok=True)
    return path


def pipeline(compiled, *args, fuse=True):
    """The scheduled graph the CuPy backend gets for compiled(*args)."""
    from adjit.backends import cupy_backend
    from adjit.passes.pipeline import run_pipeline
    return run_pipeline(compiled.trace(*args), cupy_backend, fuse=fuse)


def program(g, runtime, name="program", static_argnums=(), **options):
    """The Program the CuPy backend builds from scheduled graph g on `runtime`."""
    from adjit.backends import cupy_backend
    from adjit.backends.runtime import Program
    from adjit.passes.pipeline import memory_report
    b = cupy_backend.build(g, name, runtime=runtime, **options)
    return Program(b["fn"], b["source"], g, memory_report(g), g.meta["in_trees"],
                   g.meta["out_tree"], static_argnums, "cupy", b["kernels"], b["prepare"],
                   b["finish"])


def lower(compiled, *args, runtime, fuse=True, **options):
    """compiled.lower(*args) through the CuPy backend on `runtime` (no GPU needed)."""
    from adjit.backends.codegen import ident
    return program(pipeline(compiled, *args, fuse=fuse), runtime,
                   ident(compiled.__name__, "fn"), compiled.static_argnums, **options)


def generate(compiled, *args, fuse=True, **options):
    """(source, kernel defs) of the CuPy module for these arguments, with no runtime at all."""
    from adjit.backends import cupy_backend
    source, defs, _, _ = cupy_backend.generate(pipeline(compiled, *args, fuse=fuse),
                                               "program", **options)
    return source, defs
