"""hostcupy: the part of CuPy's interface that adjit and benchmarks/gpu_check.py use, run on the
host, so the whole GPU path (user API, CUDA graphs, the memory probe, training, gpu_check.py) runs
without a GPU. Put its folder first on PYTHONPATH: `import cupy` then finds this module.

What it keeps of CuPy, so that code which runs here is likely to run on a device:
- `cupy.ndarray` is not a NumPy array: implicit conversion (`np.asarray(x)`, `float(x)` aside)
  raises TypeError as CuPy does (`.get()` copies to the host); a NumPy array passed where CuPy
  wants device arrays (ufuncs, operators, kernels) raises TypeError; reductions and integer
  indexing give 0-d arrays, not scalars; `.base` is the array that owns the memory.
- ElementwiseKernel and ReductionKernel compile their C body with nvcc as host code (the same
  translation unit as tests/backends/cuda_host.py), with CuPy's broadcasting, output and
  type-variable rules; RawModule runs cuda_source.MATMUL_SOURCE's kernels thread by thread.
- Stream capture records every operation on the capturing stream and a graph's launch replays
  them into the same buffers; during capture, reading a value on the host (`get`, `item`,
  `float`, `bool`, synchronize), copying host data in, and cuBLAS (matmul, dot, tensordot,
  einsum, `@`) raise as CUDA and CuPy do (cupy#6290).
- The default memory pool counts the bytes of live arrays, and MemoryHook's
  malloc_postprocess runs at each allocation, so measure_peak_memory's CuPy probe works.
Everything else NumPy does is forwarded to NumPy, so it is more permissive than CuPy where CuPy
lacks a function.
"""
import contextlib
import os
import sys
import tempfile
import threading
import time
import types
import weakref

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(_HERE)))   # tests/backends: cuda_host
import cuda_host  # noqa: E402

from adjit.backends import cuda_source as _cs  # noqa: E402

__version__ = "14.0.0+hostcupy"
_CAPTURING = ("cudaErrorStreamCaptureUnsupported: operation not permitted when stream is "
              "capturing")


# -- streams, capture and memory --------------------------------------------------------------
_local = threading.local()


def _streams():
    if not hasattr(_local, "streams"):
        _local.streams = [_NULL_STREAM]
    return _local.streams


def _capture_log():
    """The list recording operations, when the current stream is capturing; else None."""
    s = _streams()[-1]
    return s._log if s._log is not None else None


def _touch(arrays):
    """Before an operation runs during capture: save the memory it may write that existed
    before the capture began, so end_capture can put it back (a captured operation does not
    run, it only runs at each launch)."""
    s = _streams()[-1]
    for a in arrays:
        if isinstance(a, np.ndarray):
            root = _root(a)
            if id(root) not in s._undo and id(root) not in s._new:
                s._undo[id(root)] = (root, root.copy())


def _no_sync(what):
    if _capture_log() is not None:
        raise RuntimeError(f"{what}: {_CAPTURING}")


class _Pool:
    def __init__(self):
        self._used = self._free = 0

    def _alloc(self, n):
        self._used += n
        self._free = max(0, self._free - n)

    def _release(self, n):
        self._used -= n
        self._free += n

    def malloc(self, size):
        raise NotImplementedError("hostcupy: MemoryPool.malloc is only a handle for "
                                  "cuda.using_allocator")

    def used_bytes(self):
        return self._used

    def free_bytes(self):
        return self._free

    def total_bytes(self):
        return self._used + self._free

    def free_all_blocks(self, stream=None):
        self._free = 0

    def n_free_blocks(self):
        return 0

    def set_limit(self, size=None, fraction=None):
        pass

    def get_limit(self):
        return 0


_DEFAULT_POOL = _Pool()
_allocators = [_DEFAULT_POOL]
_hooks = []
_owned = weakref.WeakValueDictionary()   # id(root NumPy array) -> the ndarray owning it
_roots = {}                              # id(root) -> weakref(root), roots counted in a pool


def _root(a):
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _count(root):
    """Count a new allocation (a root NumPy array) in the current pool; run the hooks."""
    ref = _roots.get(id(root))
    if ref is not None and ref() is root:
        return
    s = _streams()[-1]
    if s._log is not None:
        s._new.add(id(root))
    pool = _allocators[-1]
    n = int(root.nbytes)
    pool._alloc(n)
    _roots[id(root)] = weakref.ref(root)
    weakref.finalize(root, _forget, id(root), pool, n)
    for h in list(_hooks):
        h.malloc_postprocess(device_id=0, size=n, mem_size=n, mem_ptr=root.ctypes.data,
                             pmem_id=0)


def _forget(key, pool, n):
    _roots.pop(key, None)
    pool._release(n)


# -- arrays -----------------------------------------------------------------------------------
class ndarray:
    """A device array: a NumPy array behind an interface that refuses host conversions."""
    __array_priority__ = 100

    def __init__(self, shape, dtype=float, memptr=None, strides=None, order="C"):
        self._a = np.empty(shape, dtype, order=order)
        self._owner = None
        _count(self._a)
        _owned[id(self._a)] = self

    # host <-> device
    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use "
                        "`.get()` to construct a NumPy array explicitly.")

    def get(self, stream=None, order="C", out=None, blocking=True):
        _no_sync("ndarray.get")
        if out is not None:
            out[...] = self._a
            return out
        return np.array(self._a, order=order)

    def set(self, arr, stream=None):
        _no_sync("ndarray.set (a host-to-device copy)")
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"Only numpy.ndarray can be set to cupy.ndarray, not {type(arr)}")
        if arr.shape != self._a.shape:
            raise ValueError(f"Shape mismatch. Old shape: {self._a.shape}, new shape: "
                             f"{arr.shape}")
        if arr.dtype != self._a.dtype:
            raise TypeError(f"{arr.dtype} cannot be set to an array of {self._a.dtype}")
        self._a[...] = arr

    def item(self, *args):
        _no_sync("ndarray.item")
        return self._a.item(*args)

    def tolist(self):
        _no_sync("ndarray.tolist")
        return self._a.tolist()

    def __float__(self):
        _no_sync("float(ndarray)")
        return float(self._a)

    def __int__(self):
        _no_sync("int(ndarray)")
        return int(self._a)

    def __index__(self):
        _no_sync("operator.index(ndarray)")
        return self._a.__index__()

    def __bool__(self):
        _no_sync("bool(ndarray)")
        return bool(self._a)

    def __complex__(self):
        _no_sync("complex(ndarray)")
        return complex(self._a)

    # attributes
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: self._a.flags)
    base = property(lambda self: self._owner)
    device = property(lambda self: cuda.Device(0))
    T = property(lambda self: _call(np.transpose, (self,), {}))
    mT = property(lambda self: _call(np.swapaxes, (self, -1, -2), {}))
    real = property(lambda self: _call(np.real, (self,), {}))
    imag = property(lambda self: _call(np.imag, (self,), {}))

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self._a.ctypes.data, mem=None, device_id=0)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self._a.shape, "typestr": self._a.dtype.str,
                "data": (self._a.ctypes.data, False), "version": 3,
                "strides": None if self._a.flags.c_contiguous else self._a.strides}

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        for k in range(len(self._a)):
            yield self[k]

    def __repr__(self):
        return repr(self._a).replace("array(", "hostcupy.array(", 1)

    __str__ = __repr__

    def __hash__(self):
        raise TypeError("unhashable type: 'cupy.ndarray'")

    def __getitem__(self, key):
        _index_check(key)
        return _call(_getitem, (self, key), {}, host_ok=True)

    def __setitem__(self, key, value):
        _index_check(key, value)
        _call(_setitem, (self, key, value), {}, host_ok=True)

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_a", "_owner"):
            raise AttributeError(name)
        attr = getattr(np.ndarray, name, None)
        if attr is None or not callable(attr):
            raise AttributeError(f"'cupy.ndarray' object has no attribute {name!r}")
        if name in _CUBLAS:
            return lambda *a, **k: _cublas(name, attr, (self,) + a, k)
        return lambda *a, **k: _call(attr, (self,) + a, k)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if ufunc is np.matmul:
            return _cublas("matmul", getattr(ufunc, method), inputs, kwargs)
        return _call(getattr(ufunc, method), inputs, kwargs)

    def __array_function__(self, func, types_, args, kwargs):
        if func.__name__ in _CUBLAS:
            return _cublas(func.__name__, func, args, kwargs)
        return _call(func, args, kwargs)

    def __matmul__(self, other):
        return _cublas("matmul", np.matmul, (self, other), {})

    def __rmatmul__(self, other):
        return _cublas("matmul", np.matmul, (other, self), {})

    def __imatmul__(self, other):
        return _cublas("matmul", np.matmul, (self, other), {"out": self})


def _index_check(*parts):
    """CuPy copies NumPy arrays and lists in an index (or a stored value) to the device, and a
    boolean mask's result size is read back on the host: neither may happen during capture."""
    if _capture_log() is None:
        return
    for p in parts:
        for s in p if isinstance(p, tuple) else (p,):
            if isinstance(s, (np.ndarray, list)):
                raise RuntimeError(f"indexing with a host array: {_CAPTURING}")
            if isinstance(s, ndarray) and s.dtype == np.bool_ and parts[0] is p:
                raise RuntimeError(f"indexing with a boolean mask (reads its count): "
                                   f"{_CAPTURING}")


def _getitem(a, key):
    return a[key]


def _setitem(a, key, value):
    a[key] = value


def _operator(name):
    method = getattr(np.ndarray, name)
    if name.startswith("__i"):
        def op(self, *other):
            _call(method, (self,) + other, {})
            return self
    else:
        def op(self, *other):
            return _call(method, (self,) + other, {})
    op.__name__ = name
    return op


for _name in ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor",
              "lshift", "rshift"]:
    for _form in ("__{}__", "__r{}__", "__i{}__"):
        setattr(ndarray, _form.format(_name), _operator(_form.format(_name)))
for _name in ["__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__neg__",
              "__pos__", "__abs__", "__invert__", "__divmod__", "__rdivmod__"]:
    setattr(ndarray, _name, _operator(_name))

_CUBLAS = {"matmul", "dot", "vdot", "inner", "tensordot", "einsum", "__matmul__"}


def _cublas(name, fn, args, kwargs):
    if _capture_log() is not None:
        raise NotImplementedError(f"{name}: cuBLAS is not allowed during stream capture "
                                  "(CuPy refuses cublas calls on a capturing stream, "
                                  "cupy#6290)")
    return _call(fn, args, kwargs)


def _unwrap(x, host_ok, inputs):
    if isinstance(x, ndarray):
        inputs[id(x._a)] = x
        return x._a
    if isinstance(x, np.ndarray):
        if not host_ok:
            raise TypeError(f"Unsupported type {type(x)}")
        return x
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(v, host_ok, inputs) for v in x)
    if isinstance(x, dict):
        return {k: _unwrap(v, host_ok, inputs) for k, v in x.items()}
    return x


def _wrap(r, inputs):
    if isinstance(r, np.ndarray):
        given = inputs.get(id(r))
        if given is not None:
            return given                 # out= and in-place results: the array passed
        root = _root(r)
        owner = _owned.get(id(root))
        if owner is not None and owner._a is root:
            out = ndarray.__new__(ndarray)
            out._a, out._owner = r, owner
            return out
        _count(root)
        out = ndarray.__new__(ndarray)
        out._a, out._owner = r, None
        if r is root:
            _owned[id(root)] = out
        return out
    if isinstance(r, np.generic):
        return _wrap(np.array(r), inputs)
    if isinstance(r, tuple):
        return tuple(_wrap(v, inputs) for v in r)
    if isinstance(r, list):
        return [_wrap(v, inputs) for v in r]
    return r


def _zero_d(r):
    if isinstance(r, np.generic):
        return np.array(r)
    if isinstance(r, (tuple, list)):   # NumPy's named results (SlogdetResult): plain tuples,
        return type(r)(_zero_d(v) for v in r) if type(r) in (tuple, list) else \
            tuple(_zero_d(v) for v in r)   # as CuPy gives
    return r


def _arrays(r):
    if isinstance(r, np.ndarray):
        return [r]
    if isinstance(r, (tuple, list)):
        return [a for v in r for a in _arrays(v)]
    if isinstance(r, dict):
        return [a for v in r.values() for a in _arrays(v)]
    return []


def _call(fn, args, kwargs, host_ok=False):
    """fn on the NumPy arrays behind the arguments; results wrapped; recorded while the
    current stream captures (a replay recomputes into the same result arrays)."""
    inputs = {}
    a = _unwrap(args, host_ok, inputs)
    k = _unwrap(kwargs, host_ok, inputs)
    log = _capture_log()
    if log is not None:
        _touch(_arrays((a, k)))
    r = _zero_d(fn(*a, **k))      # CuPy's reductions give 0-d arrays, not scalars
    if log is not None:
        outs = _arrays(r)

        def replay(fn=fn, a=a, k=k, outs=outs):
            new = _arrays(_zero_d(fn(*a, **k)))
            for o, n in zip(outs, new):
                if o is not n:
                    np.copyto(o, n)
        log.append(replay)
    return _wrap(r, inputs)


# -- creation and transfer --------------------------------------------------------------------
def _from_host(a, dtype=None, order="K", copy=True):
    if isinstance(a, ndarray):
        if copy or (dtype is not None and np.dtype(dtype) != a.dtype):
            return _call(np.array, (a,), {"dtype": dtype, "order": order, "copy": True})
        return a
    _no_sync("a host-to-device copy")
    return _wrap(np.array(a, dtype=dtype, order=order, copy=True), {})


def asarray(a, dtype=None, order=None, blocking=False):
    return _from_host(a, dtype, order or "K", copy=False)


def array(obj, dtype=None, copy=True, order="K", subok=False, ndmin=0, blocking=False):
    r = _from_host(obj, dtype, order, copy=copy)
    while r.ndim < ndmin:
        r = r[None]
    return r


def ascontiguousarray(a, dtype=None):
    return _call(np.ascontiguousarray, (a,), {"dtype": dtype})


def asfortranarray(a, dtype=None):
    return _call(np.asfortranarray, (a,), {"dtype": dtype})


def asnumpy(a, stream=None, order="C", out=None, blocking=True):
    if isinstance(a, ndarray):
        return a.get(order=order, out=out)
    return np.asarray(a, order=order)


def get_array_module(*args):
    return sys.modules[__name__] if any(isinstance(a, ndarray) for a in args) else np


def get_default_memory_pool():
    return _DEFAULT_POOL


def get_default_pinned_memory_pool():
    return _Pool()


class _Ufunc:
    def __init__(self, uf):
        self._uf, self.__name__ = uf, uf.__name__
        self.nin, self.nout = uf.nin, uf.nout

    def __call__(self, *args, **kwargs):
        return _call(self._uf, args, kwargs)

    def __getattr__(self, name):
        method = getattr(self._uf, name)
        return lambda *a, **k: _call(method, a, k) if callable(method) else method


class _Namespace(types.ModuleType):
    """A NumPy namespace whose functions take and give device arrays."""

    def __init__(self, name, np_mod, creators=()):
        super().__init__(name)
        self._np, self._creators = np_mod, set(creators)

    def __getattr__(self, name):
        attr = getattr(self._np, name)
        if isinstance(attr, np.ufunc):
            return _Ufunc(attr)
        if isinstance(attr, types.ModuleType):
            return _Namespace(f"{self.__name__}.{name}", attr)
        if callable(attr) and not isinstance(attr, type):
            if name in _CUBLAS or self._np is np.linalg:
                return lambda *a, **k: _cublas(f"{self.__name__}.{name}", attr, a, k)
            return lambda *a, **k: _call(attr, a, k)
        return attr


_module = sys.modules[__name__]
_NP = _Namespace("cupy", np)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(_NP, name)


# -- kernels ----------------------------------------------------------------------------------
_RT = None


def _runtime():
    """cuda_host's compiler (all kernels defined so far in one nvcc run)."""
    global _RT
    if _RT is None:
        work = os.environ.get("HOSTCUPY_WORKDIR") or tempfile.mkdtemp(prefix="hostcupy_")
        os.makedirs(work, exist_ok=True)
        _RT = cuda_host.HostRuntime(work)
    return _RT


def _parse(params):
    out = []
    for part in filter(None, (p.strip() for p in params.split(","))):
        words = part.split()
        raw = words[0] == "raw"
        if raw:
            raise NotImplementedError("hostcupy: raw kernel parameters")
        out.append((words[-2], words[-1]))
    return out


def _is_type(t):
    return t in _cs.CTYPES      # anything else (T, S) is a type variable


def _bind(params, values, env):
    """Type variables (T) of params bound from the array arguments, as CuPy does."""
    for (t, _), v in zip(params, values):
        if not _is_type(t) and isinstance(v, ndarray):
            env.setdefault(t, v.dtype.name)
    return ", ".join(f"{t if _is_type(t) else env[t]} {n}" for t, n in params)


def _kernel_inputs(name, values):
    for v in values:
        if isinstance(v, np.ndarray):
            raise TypeError(f"{name}: Unsupported type {type(v)}")
        if not isinstance(v, (ndarray, int, float, bool, complex, np.generic)):
            raise TypeError(f"{name}: Unsupported type {type(v)}")


class ElementwiseKernel:
    def __init__(self, in_params, out_params, operation, name="kernel", reduce_dims=True,
                 preamble="", no_return=False, return_tuple=False, loop_prep="",
                 after_loop="", options=()):
        self.in_params, self.out_params, self.operation = in_params, out_params, operation
        self.name, self.preamble = name, preamble
        self._ins, self._outs = _parse(in_params), _parse(out_params)
        self._made = {}

    def __call__(self, *args, size=None, block_size=None, stream=None):
        nin = len(self._ins)
        if len(args) not in (nin, nin + len(self._outs)):
            raise TypeError(f"Wrong number of arguments for {self.name!r}")
        _kernel_inputs(self.name, args)
        env = {}
        ins_text = _bind(self._ins, args[:nin], env)
        outs_text = _bind(self._outs, args[nin:], env)
        key = (ins_text, outs_text)
        k = self._made.get(key)
        if k is None:
            k = self._made[key] = _runtime().elementwise(ins_text, outs_text, self.operation,
                                                         self.name, self.preamble)
        ins = [a._a if isinstance(a, ndarray) else a for a in args[:nin]]
        given = list(args[nin:])
        if not given:
            shape = np.broadcast_shapes(*[np.shape(a) for a in ins])
            given = [ndarray(shape, dt) for dt, _ in k.outs]
        outs = [o._a for o in given]
        log = _capture_log()
        if log is not None:
            _touch(outs)
            log.append(lambda: k(*ins, *outs))
        k(*ins, *outs)
        return given[0] if len(given) == 1 else tuple(given)


class ReductionKernel:
    def __init__(self, in_params, out_params, map_expr, reduce_expr, post_map_expr, identity,
                 name="reduce_kernel", reduce_type=None, reduce_dims=True, preamble="",
                 options=()):
        self.args = (in_params, out_params, map_expr, reduce_expr, post_map_expr, identity)
        self.name, self.reduce_type, self.preamble = name, reduce_type, preamble
        self._ins, self._outs = _parse(in_params), _parse(out_params)
        self._made = {}

    def __call__(self, *args, out=None, axis=None, keepdims=False, stream=None):
        if len(args) != len(self._ins):
            raise TypeError(f"Wrong number of arguments for {self.name!r}")
        _kernel_inputs(self.name, args)
        env = {}
        ins_text = _bind(self._ins, args, env)
        outs_text = _bind(self._outs, [out], env)
        reduce_type = self.reduce_type          # a C type, a dtype name, or a type variable
        if reduce_type is not None and reduce_type not in _cs.CTYPES.values():
            reduce_type = _cs.CTYPES[env.get(reduce_type, reduce_type)]
        key = (ins_text, outs_text, reduce_type)
        k = self._made.get(key)
        if k is None:
            in_params, out_params, map_expr, reduce_expr, post_map_expr, identity = self.args
            k = self._made[key] = _runtime().reduction(
                ins_text, outs_text, map_expr, reduce_expr, post_map_expr, identity, self.name,
                reduce_type, self.preamble)
        ins = [a._a if isinstance(a, ndarray) else np.asarray(a) for a in args]

        def run():
            return k(*ins, axis=axis, keepdims=keepdims)
        r = run()
        log = _capture_log()
        if log is not None and out is not None:
            _touch([out._a])
        result = out if out is not None else _wrap(np.array(r), {})
        if out is not None:
            out._a[...] = r
        if log is not None:
            target = result._a
            log.append(lambda: np.copyto(target, run()))
        return result


class RawModule:
    """Only cuda_source.MATMUL_SOURCE: its kernels run thread by thread on the host."""

    def __init__(self, code=None, path=None, options=(), backend="nvrtc", translate_cucomplex=False,
                 name_expressions=None, jitify=False):
        if code != _cs.MATMUL_SOURCE:
            raise NotImplementedError("hostcupy.RawModule runs cuda_source.MATMUL_SOURCE only")
        self._names = {v: k for k, v in _cs.MATMUL_KERNELS.items()}

    def get_function(self, name):
        dtype, r = self._names[name]
        launch = cuda_host.host_matmul_kernel(_runtime().workdir, dtype, r)

        def kernel(grid, block, args, shared_mem=0, stream=None):
            _kernel_inputs(name, args)
            host = [a._a if isinstance(a, ndarray) else a for a in args]
            log = _capture_log()
            if log is not None:
                _touch(host[2:3])
                log.append(lambda: launch(grid, block, host))
            launch(grid, block, host)
        return kernel


# -- cupy.cuda --------------------------------------------------------------------------------
class Stream:
    def __init__(self, null=False, non_blocking=False, ptds=False):
        self._log = None          # the operations recorded while capturing
        self._undo, self._new = {}, set()

    def __enter__(self):
        _streams().append(self)
        return self

    def __exit__(self, *exc):
        _streams().pop()

    def use(self):
        _streams()[-1:] = [self]
        return self

    def synchronize(self):
        if self._log is not None:
            raise RuntimeError(f"Stream.synchronize: {_CAPTURING}")

    def begin_capture(self, mode=None):
        if self is _NULL_STREAM:
            raise RuntimeError("cudaErrorStreamCaptureUnsupported: the null stream cannot "
                               "be captured")
        if self._log is not None:
            raise RuntimeError("cudaErrorIllegalState: already capturing")
        self._log, self._undo, self._new = [], {}, set()

    def end_capture(self):
        """The graph of what was recorded; memory that existed before the capture holds what
        it held then (the recorded operations ran only to give Python their results)."""
        if self._log is None:
            raise RuntimeError("cudaErrorIllegalState: not capturing")
        log, self._log = self._log, None
        for root, saved in self._undo.values():
            np.copyto(root, saved)
        self._undo, self._new = {}, set()
        return Graph(log)

    def is_capturing(self):
        return self._log is not None

    @property
    def ptr(self):
        return id(self)


_NULL_STREAM = Stream(null=True)


class Graph:
    def __init__(self, log):
        self._log = log

    def launch(self, stream=None):
        _no_sync("Graph.launch")
        for op in self._log:
            op()

    def upload(self, stream=None):
        pass


class Event:
    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self._t = None

    def record(self, stream=None):
        self._t = time.perf_counter()

    def synchronize(self):
        _no_sync("Event.synchronize")


def get_elapsed_time(start, end):
    return (end._t - start._t) * 1000.0


class Device:
    def __init__(self, device=None):
        self.id = 0 if device is None else int(device)
        self.compute_capability = "90"

    def synchronize(self):
        _no_sync("Device.synchronize")

    def use(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    @property
    def mem_info(self):
        return (64 << 30) - _DEFAULT_POOL.total_bytes(), 64 << 30


class MemoryHook:
    name = "MemoryHook"

    def __enter__(self):
        _hooks.append(self)
        return self

    def __exit__(self, *exc):
        _hooks.remove(self)

    def malloc_preprocess(self, **kwargs):
        pass

    def malloc_postprocess(self, **kwargs):
        pass

    def free_preprocess(self, **kwargs):
        pass

    def free_postprocess(self, **kwargs):
        pass


def MemoryPool(allocator=None):
    return _Pool()


@contextlib.contextmanager
def using_allocator(allocator=None):
    pool = getattr(allocator, "__self__", None)
    if not isinstance(pool, _Pool):
        pool = _DEFAULT_POOL
    _allocators.append(pool)
    try:
        yield
    finally:
        _allocators.pop()


def get_current_stream(device_id=None):
    return _streams()[-1]


def _device_properties(device_id):
    return {"name": b"hostcupy (NumPy and nvcc host code, no GPU)",
            "totalGlobalMem": 64 << 30, "multiProcessorCount": 1, "major": 9, "minor": 0,
            "maxThreadsPerBlock": 1024}


runtime = types.SimpleNamespace(
    getDeviceCount=lambda: 1, getDevice=lambda: 0,
    getDeviceProperties=_device_properties,
    runtimeGetVersion=lambda: 13000, driverGetVersion=lambda: 13000,
    deviceSynchronize=lambda: _no_sync("runtime.deviceSynchronize"),
    streamCaptureModeGlobal=0, streamCaptureModeThreadLocal=1, streamCaptureModeRelaxed=2)

memory_hooks = types.ModuleType("cupy.cuda.memory_hooks")
memory_hooks.MemoryHook = MemoryHook

cuda = types.ModuleType("cupy.cuda")
cuda.__dict__.update(
    Stream=Stream, Graph=Graph, Event=Event, get_elapsed_time=get_elapsed_time, Device=Device,
    MemoryHook=MemoryHook, MemoryPool=MemoryPool, using_allocator=using_allocator,
    get_current_stream=get_current_stream, runtime=runtime, memory_hooks=memory_hooks,
    is_available=lambda: True, get_device_id=lambda: 0)
sys.modules["cupy.cuda"] = cuda
sys.modules["cupy.cuda.memory_hooks"] = memory_hooks

# NumPy's scalar types and constants are CuPy's too
for _name in ["bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "float32", "float64", "complex64", "complex128", "intp", "dtype",
              "pi", "e", "inf", "nan", "newaxis", "finfo", "iinfo", "result_type",
              "promote_types", "can_cast"]:
    globals()[_name] = getattr(np, _name)
