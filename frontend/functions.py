"""Array functions that build IR: the ones NumPy calls dispatch to, and the ones VJP rules use.

Every function takes Tracers, NumPy arrays or Python scalars. With no Tracer among its
arguments it simply computes with NumPy, so the same code runs traced and untraced. Type
promotion follows NumPy 2 (Python scalars are weak: a float32 array stays float32), and
broadcasting is made explicit with `broadcast_to` nodes.
"""
from __future__ import annotations

import builtins
import functools
import math
import numbers

import numpy as np

from ..ir.errors import GradError, OutOfBoundsError, ShapeError, UnsupportedError
from ..ir.ops import OPS, _build_key
from .buffer import Buffer, resolve
from .tracer import Tracer, current, user_where, _at


def _resolving(fn):
    """adjit's own functions read a promoted Buffer's traced value (see buffer.py)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*[resolve(a) if isinstance(a, Buffer) else a for a in args], **kwargs)
    return wrapper


# -- lifting values into the trace ------------------------------------------------------------
def _is_tracer(x):
    return isinstance(x, Tracer)


def _ctx(xs):
    for x in xs:
        if isinstance(x, Tracer):
            return x.ctx
    return None


def const(value, dtype=None):
    """A constant node in the current trace (0-d constants are broadcast where used)."""
    ctx = current()
    value = np.array(value, dtype=dtype)  # a copy: the caller may write into its array later
    return ctx.emit("const", [], {"value": value, "dtype": value.dtype})


def _from_device(x):
    """A CuPy array the function reads from a global or a closure: baked in as a constant,
    as NumPy ones are (its values copied to the host once, when the function is traced)."""
    return x.get() if hasattr(x, "__cuda_array_interface__") and hasattr(x, "get") else x


def _refuse_special_array(cls):
    """An np.matrix (whose * is a matrix product), a masked array (whose sums skip masked
    entries) or a scipy.sparse matrix (cls: its type) read from a global or closure would be
    taken as a plain array: wrong numbers. Refused, naming the line."""
    if issubclass(cls, np.matrix):
        what, fix = ("an np.matrix, whose * is a matrix product",
                     "np.asarray(m) outside the function and write products with @")
    elif issubclass(cls, np.ma.MaskedArray):
        what, fix = ("a masked array, whose operations skip masked entries",
                     "the data and the mask as two arrays (np.ma.getdata(m), "
                     "np.ma.getmaskarray(m)) and select with np.where")
    elif cls.__module__.startswith("scipy.sparse"):
        what, fix = ("a scipy.sparse matrix",
                     "A.toarray() (dense), or its COO form with np.add.at: out = "
                     "np.zeros(...); np.add.at(out, A.row, A.data[:, None] * x[A.col])")
    else:
        return
    raise UnsupportedError(f"a traced value meets {what}{_at(user_where())}; adjit traces plain "
                           f"arrays: use {fix}")


def lift(x, dtype, ctx=None):
    """A Tracer for x with the given dtype (constants are folded to that dtype)."""
    x = _from_device(x)
    if isinstance(x, Buffer):
        x = resolve(x)  # a NumPy array made in the function that traced values were stored in
    if isinstance(x, (list, tuple)):
        from .numpy_api import _from_nested, _holds_tracer
        if _holds_tracer(x):
            x = _from_nested(x, np.asarray)  # [t0, 1.0, t1]: stacked, as np.array would
    if isinstance(x, Tracer):
        return cast(x, dtype)
    _refuse_special_array(type(x))
    ctx = ctx or current()
    with_ctx = ctx if ctx is not None else current()
    dtype = np.dtype(dtype)
    if type(x) is int and dtype.kind in "iu" and not (
            np.iinfo(dtype).min <= x <= np.iinfo(dtype).max):
        # NumPy 2: int8_array + 300 raises rather than wrapping
        raise OverflowError(f"Python integer {x} out of bounds for {dtype}"
                            f"{_at(user_where())}")
    if with_ctx.promoted and isinstance(x, np.ndarray) and x.size:
        from .buffer import refuse_stale_view
        refuse_stale_view(x, with_ctx)
    # a copy: NumPy arrays the function writes into later keep the value they had here
    if dtype.kind == "O" or getattr(x, "dtype", None) == object:
        what = "an array of Python objects (dtype=object)" if isinstance(x, np.ndarray) \
            else f"a {type(x).__name__} (an object to NumPy)"
        raise UnsupportedError(f"{what} meets a traced value{_at(user_where())}; adjit traces "
                               "numeric arrays: convert it with float(...) or .astype(float)")
    value = np.array(x, dtype=dtype)
    if value.dtype.kind == "c":
        _no_complex()
    return with_ctx.emit("const", [], {"value": value, "dtype": value.dtype})


def _no_complex():
    raise UnsupportedError(f"a complex value in this operation is not supported by adjit"
                           f"{_at(user_where())}: complex arrays are traced as their real and "
                           "imaginary parts through arithmetic, np.fft and matrix products "
                           "(README); write this step on z.real and z.imag")


def _weak(x):
    """A Python number (bool, int, float, complex), which NumPy 2 promotes weakly. Other
    numbers.Number types (fractions.Fraction, decimal.Decimal) are object scalars to NumPy."""
    return isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic)


def result_dtype(*xs):
    """NumPy 2 promotion: arrays and NumPy scalars are strong, Python scalars weak."""
    parts = [_dtype_part(x) for x in xs]
    for x, p in zip(xs, parts):
        if isinstance(p, np.dtype) and p.kind in "USV" and any(
                isinstance(v, Tracer) for v in xs):
            # NumPy refuses arithmetic of numbers and strings (np.ones(2) * "abc"); adjit
            # promoted to a string dtype and failed later, or said "use * to scale"
            raise TypeError(
                f"a traced array meets the {'string' if p.kind in 'US' else 'value'} "
                f"{x!r:.40}{_at(user_where())}: arithmetic needs numbers. A string argument is "
                "a static value, not data: was it passed where an array was expected?")
    return np.result_type(*parts)


def _is_weak(x):
    """A Python number, or a traced value standing for one (a Python scalar argument, or
    arithmetic on such arguments alone)."""
    if isinstance(x, Tracer):
        d = x.ctx.graph[x.id]
        return (d["op"] == "input" and bool(d["attrs"].get("weak"))) or x.id in x.ctx.weak
    return _weak(x)


def _dtype_part(x):
    x = _from_device(x)
    if isinstance(x, Tracer):
        if _is_weak(x):
            # a Python scalar argument stays weak, as it would be in untraced NumPy code
            return {"b": True, "i": 1, "u": 1, "f": 1.0, "c": 1j}[x.dtype.kind]
        return x.dtype
    return x if _weak(x) else np.asarray(x).dtype


def _broadcast_shape(op, shapes):
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        shown = " and ".join(str(tuple(s)) for s in shapes)
        raise ShapeError(f"{op}: shapes {shown} cannot be broadcast together"
                         f"{_at(user_where())}") from None


def _shape_of(x):
    return x.shape if isinstance(x, Tracer) else np.shape(x)


def _traced_complex(x) -> bool:
    """A traced complex array (frontend/complex.py; marked on its class, as for pytree.py)."""
    return getattr(type(x), "_adjit_complex", False)


def _complex_operand(x) -> bool:
    return _traced_complex(x) or isinstance(x, complex) or (
        isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind == "c")


def _elementwise(op, xs, dtype=None, float_only=False):
    """Promote, lift and broadcast xs, then emit `op`; with no tracer, compute with NumPy."""
    if any(_traced_complex(x) for x in xs):
        from . import complex as CX
        return CX.elementwise(op, xs)
    xs = _lists_as_arrays(xs)
    if not any(isinstance(x, Tracer) for x in xs):
        return OPS[op].numpy(*[np.asarray(x) if not _weak(x) else x for x in xs])
    ctx = _ctx(xs)
    dt = result_dtype(*xs) if dtype is None else np.dtype(dtype)
    if dt.kind == "c":          # a traced value meets a complex constant
        from . import complex as CX
        return CX.elementwise(op, xs)
    if float_only and dt.kind not in "fc":
        # NumPy's unary loops take the smallest float that holds the integers (np.sin of
        # int8 is float16, of int16 float32); division and the rest float64
        dt = np.result_type(dt, 1.0) if op == "div" else np.promote_types(dt, np.float16)
    shape = _broadcast_shape(op, [_shape_of(x) for x in xs])
    args = [broadcast_to(lift(x, dt, ctx), shape) for x in xs]
    out = ctx.emit(op, args)
    if shape == () and all(_is_weak(x) for x in xs):
        out.ctx.weak.add(out.id)
    return out


# -- elementwise ------------------------------------------------------------------------------
def add(x, y): return _elementwise("add", [x, y])
def sub(x, y): return _elementwise("sub", [x, y])
def mul(x, y): return _elementwise("mul", [x, y])
def div(x, y): return _elementwise("div", [x, y], float_only=True)
def power(x, y): return _elementwise("pow", [x, y])
def maximum(x, y): return _elementwise("maximum", [x, y])
def minimum(x, y): return _elementwise("minimum", [x, y])
def neg(x):
    # -True of a Python bool is the int -1 (NumPy refuses - on boolean arrays)
    if isinstance(x, Tracer) and x.dtype == np.bool_ and _is_weak(x):
        x = cast(x, np.int64)
    return _elementwise("neg", [x])
def exp(x): return _elementwise("exp", [x], float_only=True)
def expm1(x): return _elementwise("expm1", [x], float_only=True)
def exp2(x): return _elementwise("exp2", [x], float_only=True)
def cbrt(x): return _elementwise("cbrt", [x], float_only=True)
def log(x): return _elementwise("log", [x], float_only=True)
def log1p(x): return _elementwise("log1p", [x], float_only=True)
def sin(x): return _elementwise("sin", [x], float_only=True)
def cos(x): return _elementwise("cos", [x], float_only=True)
def tan(x): return _elementwise("tan", [x], float_only=True)
def sinh(x): return _elementwise("sinh", [x], float_only=True)
def cosh(x): return _elementwise("cosh", [x], float_only=True)
def tanh(x): return _elementwise("tanh", [x], float_only=True)
def sqrt(x): return _elementwise("sqrt", [x], float_only=True)
def abs(x): return _elementwise("abs", [x])  # noqa: A001 - NumPy's name
def sign(x): return _elementwise("sign", [x])
def arctan(x): return _elementwise("arctan", [x], float_only=True)
def arcsin(x): return _elementwise("arcsin", [x], float_only=True)
def arccos(x): return _elementwise("arccos", [x], float_only=True)
def arcsinh(x): return _elementwise("arcsinh", [x], float_only=True)
def arccosh(x): return _elementwise("arccosh", [x], float_only=True)
def arctanh(x): return _elementwise("arctanh", [x], float_only=True)
def arctan2(y, x): return _elementwise("arctan2", [y, x], float_only=True)


def stop_gradient(x):
    """The same values, but no cotangent flows back through them (a pytree: each array)."""
    from . import pytree
    if isinstance(x, (list, tuple, dict)) or _traced_complex(x):
        leaves, tree, _ = pytree.flatten(x, "x")
        return pytree.unflatten(tree, [_stop_gradient(v) for v in leaves])
    return _stop_gradient(x)


@_resolving
def _stop_gradient(x):
    return _elementwise("stop_gradient", [x])


def _lists_as_arrays(xs):
    """[a, b] - m, [a, b] > m with a, b traced: NumPy makes a list operand an array first."""
    if not any(type(x) in (list, tuple) for x in xs):
        return xs
    from .numpy_api import _from_nested
    return [_from_nested(x, np.asarray) if type(x) in (list, tuple) else x for x in xs]


def _compare(op, x, y):
    x, y = _lists_as_arrays((x, y))
    if not any(isinstance(v, Tracer) for v in (x, y)):
        return OPS[op].numpy(x, y)
    ctx = _ctx([x, y])
    dt = result_dtype(x, y)
    if dt.kind in "iu" and any(_is_weak(v) and not isinstance(_dtype_part(v), bool)
                               for v in (x, y)):
        # a Python int compared with small integers: NumPy compares the values (x > 300 on
        # int8 is all False), so compare in int64 rather than wrap the number into the dtype
        dt = np.result_type(dt, np.int64) if dt != np.uint64 else dt
        if any(_weak(v) and not np.can_cast(np.min_scalar_type(v), dt) for v in (x, y)):
            dt = np.dtype(np.float64)
    shape = _broadcast_shape(op, [_shape_of(x), _shape_of(y)])
    out = ctx.emit(op, [broadcast_to(lift(v, dt, ctx), shape) for v in (x, y)])
    if shape == () and all(_is_weak(v) for v in (x, y)):
        ctx.weak.add(out.id)   # t > 1 of a Python number is a Python bool
    return out


def gt(x, y): return _compare("gt", x, y)
def ge(x, y): return _compare("ge", x, y)
def lt(x, y): return _compare("lt", x, y)
def le(x, y): return _compare("le", x, y)
def eq(x, y): return _compare("eq", x, y)
def ne(x, y): return _compare("ne", x, y)


@_resolving
def where(cond, x, y):
    """Elementwise choice `x if cond else y`, the traceable form of an `if` on array values.

    >>> import numpy as np, adjit
    >>> adjit.where(np.array([1.0, -2.0]) > 0, 1.0, 0.0)
    array([1., 0.])
    """
    if (_complex_operand(x) or _complex_operand(y)) and any(
            isinstance(v, Tracer) or _traced_complex(v) for v in (cond, x, y)):
        from . import complex as CX
        return CX.where_(cond, x, y)        # complex branches: a choice of each part
    cond, x, y = _lists_as_arrays((cond, x, y))
    if not any(isinstance(v, Tracer) for v in (cond, x, y)):
        return np.where(cond, x, y)
    ctx = _ctx([cond, x, y])
    dt = result_dtype(x, y)
    shape = _broadcast_shape("where", [_shape_of(cond), _shape_of(x), _shape_of(y)])
    if isinstance(cond, Tracer) and cond.dtype != np.bool_:
        cond = ne(cond, 0)
    c = broadcast_to(lift(cond, np.bool_, ctx), shape)
    return ctx.emit("where", [c] + [broadcast_to(lift(v, dt, ctx), shape) for v in (x, y)])


def strong(x):
    """x as a value that no longer stands for a Python number (a dtype= was asked for); x
    itself keeps its weak type for its other uses."""
    if isinstance(x, Tracer) and _is_weak(x):
        return x.ctx.emit("cast", [x], {"dtype": x.dtype})
    return x


def cast(x, dtype):
    dtype = np.dtype(dtype)
    if not isinstance(x, Tracer):
        return np.asarray(x).astype(dtype)
    if x.dtype == dtype:
        return x
    if dtype.kind == "c":   # x.astype(complex): a complex array of its parts (complex.py),
        from . import complex as CX      # a new array (writes into it leave x alone)
        part = cast(x, np.finfo(dtype).dtype)
        return CX.make(part.copy_() if part is x else part, None)
    out = x.ctx.emit("cast", [x], {"dtype": dtype})
    if x.shape == () and _is_weak(x):
        x.ctx.weak.add(out.id)  # float(t) of a Python int stays a Python number
    return out


# -- layout -----------------------------------------------------------------------------------
def broadcast_to(x, shape):
    shape = tuple(int(d) for d in shape)
    if not isinstance(x, Tracer):
        return np.broadcast_to(x, shape)
    if x.shape == shape:
        return x
    if _broadcast_shape("broadcast_to", [x.shape, shape]) != shape:
        raise ShapeError(f"broadcast_to: cannot broadcast {x.shape} to {shape}"
                         f"{_at(user_where())}")
    return x.ctx.emit("broadcast_to", [x], {"shape": shape})


def unbroadcast(g, shape):
    """Sum g down to `shape`: the VJP of broadcasting."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    lead = len(g.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                      if d == 1 and g.shape[lead + i] != 1)
    s = sum(g, axis=axes, keepdims=True) if axes else g
    return reshape(s, shape)


def reshape(x, *shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    if len(shape) == 1 and isinstance(shape[0], np.ndarray) and shape[0].ndim == 1:
        shape = shape[0].tolist()      # x.reshape(np.array([4, 2])), as NumPy
    if not isinstance(x, Tracer):
        return np.reshape(x, shape)
    shape = [int(d) for d in shape]
    if shape.count(-1) > 1:
        raise ShapeError(f"reshape: more than one -1 in {tuple(shape)}{_at(user_where())}")
    known = int(math.prod([d for d in shape if d != -1]))
    if -1 in shape:
        if known == 0 or x.size % known:
            raise ShapeError(f"reshape: cannot reshape {x.shape} (size {x.size}) into "
                             f"{tuple(shape)}{_at(user_where())}")
        shape[shape.index(-1)] = x.size // known
    shape = tuple(shape)
    if int(math.prod(shape)) != x.size:
        raise ShapeError(f"reshape: cannot reshape {x.shape} (size {x.size}) into {shape}"
                         f"{_at(user_where())}")
    if shape == x.shape:
        return x
    return x.ctx.emit("reshape", [x], {"shape": shape})


def _norm_axes(axes, ndim, what):
    out = []
    # array-valued axes (np.moveaxis(x, np.arange(1, 3), ...)) are their elements
    axes = [int(v) for a in axes for v in (
        np.ravel(a).tolist() if isinstance(a, np.ndarray) and a.ndim else [a])]
    for a in axes:
        a = int(a)
        if not -ndim <= a < builtins.max(ndim, 1):
            raise OutOfBoundsError(f"{what}: axis {a} is out of bounds for an array of dimension "
                             f"{ndim}{_at(user_where())}")
        out.append(a % builtins.max(ndim, 1))
    if len(set(out)) != len(out):
        raise ShapeError(f"{what}: duplicate value in axis {tuple(axes)}{_at(user_where())}")
    return tuple(out)


def transpose(x, axes=None, *more):
    if more:
        axes = (axes,) + more
    if not isinstance(x, Tracer):
        return np.transpose(x, axes)
    perm = tuple(reversed(range(x.ndim))) if axes is None else _norm_axes(axes, x.ndim,
                                                                          "transpose")
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(f"transpose: axes {axes} are not a permutation of {x.ndim} "
                         f"dimensions{_at(user_where())}")
    if perm == tuple(range(x.ndim)):
        return x
    return x.ctx.emit("transpose", [x], {"perm": perm})


def swap_last(x):
    perm = list(range(len(_shape_of(x))))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return transpose(x, perm)


def swapaxes(x, a, b):
    perm = list(range(len(_shape_of(x))))
    a, = _norm_axes((a,), len(perm), "swapaxes")
    b, = _norm_axes((b,), len(perm), "swapaxes")     # a == b: x itself (a view), as NumPy
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm)


def expand_dims(x, axis):
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    shape = list(_shape_of(x))
    nd = len(shape) + len(axes)
    for a in sorted(_norm_axes(axes, nd, "expand_dims")):
        shape.insert(a, 1)
    return reshape(x, tuple(shape))


def squeeze(x, axis=None):
    shape = _shape_of(x)
    if axis is None:
        axes = tuple(i for i, d in enumerate(shape) if d == 1)
    else:
        axes = _norm_axes(axis if isinstance(axis, (tuple, list)) else (axis,), len(shape),
                          "squeeze")
        if any(shape[a] != 1 for a in axes):
            raise ShapeError(f"squeeze: cannot squeeze axis of size != 1 in {shape}"
                             f"{_at(user_where())}")
    return reshape(x, tuple(d for i, d in enumerate(shape) if i not in axes))


def ravel(x):
    return reshape(x, (-1,))


def concatenate(xs, axis=0):
    xs = list(xs)
    if not any(isinstance(x, Tracer) for x in xs):
        return np.concatenate(xs, axis=axis)
    ctx = _ctx(xs)
    dt = result_dtype(*xs)
    xs = [lift(x, dt, ctx) for x in xs]
    nd = xs[0].ndim
    if nd == 0 or any(x.ndim != nd for x in xs):
        raise ShapeError(f"concatenate: arrays must have the same number (>0) of dimensions, "
                         f"got {[x.shape for x in xs]}{_at(user_where())}")
    ax = _norm_axes((axis,), nd, "concatenate")[0]
    for x in xs:
        if x.shape[:ax] + x.shape[ax + 1:] != xs[0].shape[:ax] + xs[0].shape[ax + 1:]:
            raise ShapeError(f"concatenate: shapes {[x.shape for x in xs]} differ outside "
                             f"axis {ax}{_at(user_where())}")
    if len(xs) == 1:
        return xs[0].copy_()    # a new array, as NumPy's (np.concatenate([z]) is not z)
    return ctx.emit("concatenate", xs, {"axis": ax})


def stack(xs, axis=0):
    xs = list(xs)
    nd = len(_shape_of(xs[0])) + 1
    ax = _norm_axes((axis,), nd, "stack")[0]
    return concatenate([expand_dims(x, ax) for x in xs], axis=ax)


def split_like(g, sizes, axis):
    out, start = [], 0
    for s in sizes:
        index = tuple([slice(None)] * axis + [slice(start, start + s)])
        out.append(slice_(g, index))
        start += s
    return out


# -- indexing ---------------------------------------------------------------------------------
def _norm_index(key, ndim):
    """Expand Ellipsis and check bounds; returns a tuple of slices, ints and None."""
    key = key if isinstance(key, tuple) else (key,)
    n_real = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if builtins.sum(1 for k in key if k is Ellipsis) > 1:
        raise ShapeError(f"an index can only have a single ellipsis{_at(user_where())}")
    out = []
    for k in key:
        if k is Ellipsis:
            out.extend([slice(None)] * (ndim - n_real))
        else:
            out.append(k)
    return tuple(out)


def _index_op(op, args, attrs):
    if not any(isinstance(a, Tracer) for a in args):
        return OPS[op].numpy(*[np.asarray(a) for a in args], **attrs)
    ctx = _ctx(args)
    args = [a if isinstance(a, Tracer) else lift(a, np.asarray(a).dtype, ctx) for a in args]
    return ctx.emit(op, args, attrs)


def slice_(x, index):
    return _index_op("slice", [x], {"index": index})


def unslice(g, index, shape):
    return _index_op("unslice", [g], {"index": index, "shape": tuple(shape)})


def gather(x, idx, key):
    return _index_op("gather", [x] + list(idx), {"key": key})


def scatter_add(g, idx, key, shape, unique=False):
    """Zeros of `shape` with g added at key; unique: no position repeats (then assigned)."""
    attrs = {"key": key, "shape": tuple(shape)}
    if unique:
        attrs["unique"] = True
    return _index_op("scatter_add", [g] + list(idx), attrs)


def getitem(x, key):
    """x[key]: basic indexing becomes a `slice` view, integer arrays a `gather`."""
    if isinstance(key, Buffer):          # an index array filled with traced positions
        key = resolve(key)
    elif isinstance(key, tuple) and any(isinstance(k, Buffer) for k in key):
        key = tuple(resolve(k) if isinstance(k, Buffer) else k for k in key)
    if not isinstance(x, Tracer):
        ctx = _ctx(key if isinstance(key, tuple) else (key,))
        if ctx is None:
            return np.asarray(x)[key]
        x = lift(x, np.asarray(x).dtype, ctx)
    raw = key if isinstance(key, tuple) else (key,)
    # x[i, j] naming every axis by an integer is a scalar: NumPy copies it, no view
    scalar = len(raw) == x.ndim and all(isinstance(k, (numbers.Integral, np.integer))
                                        and not isinstance(k, bool) for k in raw)
    if scalar:
        return _getitem(x, key).copy_()
    return _getitem(x, key)


def _plain_index(k) -> bool:
    """An index that holds no traced value (ints, slices, None, integer or bool arrays and
    lists of such)."""
    if k is None or isinstance(k, (int, np.integer, slice)):
        return True
    if isinstance(k, np.ndarray):
        return k.dtype.kind in "iub"
    return isinstance(k, list) and all(_plain_index(v) and not isinstance(v, slice)
                                       for v in k)


def _getitem(x, key):
    mask = traced_mask(x, key)
    if mask is not None:
        from .masked import Selection
        raw = key if isinstance(key, tuple) else (key,)
        # x[x > 0], x[m, ...]: the mask itself on the leading axes; else widened (masked.py)
        return Selection.of(x, mask, leading=bool(raw) and resolve(raw[0]) is mask)
    key = tuple(np.arange(k.start, k.stop, k.step) if isinstance(k, range) else k
                for k in _norm_index(_static_masks(key, x.shape), x.ndim))
    if any(isinstance(k, (Tracer, np.ndarray, list)) for k in key):
        if x._pending is not None and all(_plain_index(k) for k in key):
            # an element block of an array being filled (K[np.ix_(dofs, dofs)] += ke in an
            # assembly loop): read from the collected writes that hold it
            try:
                pos = key_positions(x.shape, key)
            except IndexError:
                pos = None          # out of bounds: the gather below says so
            nid = None if pos is None or pos.size == 0 else x.read_pending(pos)
            if nid is not None:
                return Tracer(x.ctx, nid)
        arrays, tkey = advanced_key(x, key)
        return gather(x, [a if isinstance(a, Tracer) else lift(a, a.dtype, x.ctx)
                          for a in arrays], tkey)
    key = tuple(k if k is None or isinstance(k, slice) else _static_int(k) for k in key)
    for k in key:
        if isinstance(k, slice):
            for v in (k.start, k.stop, k.step):
                if isinstance(v, Tracer):
                    v._concrete("an index or slice bound (x[:k] with a traced k; for a block "
                                "of fixed length at a traced start, x[i:i + 3] is "
                                "x[i + np.arange(3)])")
    nreal = builtins.sum(1 for k in key if k is not None)
    if nreal > x.ndim:
        raise ShapeError(f"too many indices ({nreal}) for an array of shape {x.shape}"
                         f"{_at(user_where())}")
    for k, d in zip([k for k in key if k is not None], x.shape):
        if isinstance(k, int) and not -d <= k < d:
            raise OutOfBoundsError(f"index {k} is out of bounds for axis of size {d} in an array "
                             f"of shape {x.shape}{_at(user_where())}")
    if all(_full_slice(k) for k in key):
        return x
    if x._pending is not None:
        # reading what a recent assignment wrote: take the written value itself; reading
        # only places no collected write touched (a border cell of a table filled cell by
        # cell): the value before those writes
        pos = flat_positions(x.shape)[key]
        nid = x.read_pending(pos)
        if nid is None and x.unwritten(pos):
            nid = x._node("slice", [x._pending[0]], {"index": key})
        if nid is not None:
            out = Tracer(x.ctx, nid)
            out.view_of(x, "slice", {"index": key})
            return out
    return slice_(x, key)


def basic_positions(shape, index):
    """The flat positions (C order) of the elements x[index] reads, for a basic index (ints,
    slices, None) of an array of this shape, in the order of the result: O(result), not
    O(x), so a slice of a large array costs what it reads."""
    shape = tuple(int(d) for d in shape)
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    index = tuple(index) + (slice(None),) * (len(shape) - len([k for k in index if k is not None]))
    offset, axes, dim = 0, [], 0
    for k in index:
        if k is None:
            axes.append(np.zeros(1, np.int64))
            continue
        if isinstance(k, slice):
            axes.append(np.arange(*k.indices(shape[dim]), dtype=np.int64) * strides[dim])
        else:
            offset += (int(k) % shape[dim]) * strides[dim]
        dim += 1
    pos = np.asarray(offset, np.int64)
    for i, a in enumerate(axes):
        pos = pos[..., None] + a.reshape((1,) * i + (-1,)) if i else pos + a
    return pos.reshape(-1)


def place_add(pieces, indices, shape):
    """Zeros of `shape` with each piece added at its basic index."""
    return _index_op("place_add", list(pieces), {"indices": tuple(tuple(ix) for ix in indices),
                                                "shape": tuple(shape)})


def key_positions(shape, key):
    """flat_positions(shape)[key] for a key of integer arrays and ints alone (np.ix_ blocks,
    x[rows, cols]) without the grid: an element block of a matrix of millions costs what the
    block holds. Other keys index the grid."""
    shape = tuple(int(d) for d in shape)
    if len(key) == len(shape) and int(math.prod(shape)) > _GRID_CACHED and all(
            isinstance(k, (int, np.integer)) or (isinstance(k, (np.ndarray, list)) and
                                                 np.asarray(k).dtype.kind in "iu")
            for k in key):
        arrays = [np.asarray(k, np.intp) for k in key]
        try:
            parts = np.broadcast_arrays(*arrays)
        except ValueError:
            raise IndexError("shape mismatch: indexing arrays could not be broadcast together "
                             f"with shapes {' '.join(str(a.shape) for a in arrays)}") from None
        for axis, (p, d) in enumerate(zip(parts, shape)):
            if p.size and (p.max() >= d or p.min() < -d):
                raise IndexError(f"index {int(p.max() if p.max() >= d else p.min())} is out "
                                 f"of bounds for axis {axis} with size {d}")
        return np.ravel_multi_index(tuple(p % d if d else p for p, d in zip(parts, shape)),
                                    shape)
    return flat_positions(shape)[key]


def flat_positions(shape):
    """Each element's flat position, for arrays of this shape (read-only; cached for the
    sizes loops assign into again and again, made anew for large ones)."""
    shape = tuple(int(d) for d in shape)
    if int(math.prod(shape)) > _GRID_CACHED:
        return np.arange(int(math.prod(shape))).reshape(shape)
    return _cached_grid(shape)


_GRID_CACHED = 1 << 20


@functools.lru_cache(maxsize=16)
def _cached_grid(shape):
    g = np.arange(int(math.prod(shape))).reshape(shape)
    g.flags.writeable = False
    return g



def _full_slice(k):
    """k is `:` (compared bound by bound: a traced bound must not be compared as a value)"""
    return isinstance(k, slice) and k.start is None and k.stop is None and k.step is None


def traced_mask(x, key):
    """The traced boolean mask when key holds one (x[mask], x[mask, ...]), else None. With
    other constant items beside it (x[m, 1], x[:, m]) the mask is widened to x's full shape:
    the elements the whole key selects."""
    raw = key if isinstance(key, tuple) else (key,)
    raw = tuple(resolve(k) if isinstance(k, Buffer) else k for k in raw)
    where_m = [i for i, k in enumerate(raw) if isinstance(k, Tracer) and k.dtype == np.bool_]
    if not where_m:
        return None
    if len(where_m) > 1:
        raise UnsupportedError(f"two traced boolean masks in one index{_at(user_where())}; "
                               "combine them first (m1[:, None] & m2[None, :]) or use adjit.where")
    i = where_m[0]
    m = raw[i]
    trimmed = raw
    while trimmed and (trimmed[-1] is Ellipsis or _full_slice(trimmed[-1])):
        trimmed = trimmed[:-1]
    if len(trimmed) == 1:
        if m.shape != x.shape[:m.ndim]:
            raise ShapeError(f"boolean index of shape {m.shape} does not match the array of "
                             f"shape {x.shape}{_at(user_where())}")
        return m
    others = raw[:i] + raw[i + 1:]
    if any(k is None or isinstance(k, (Tracer, list, np.ndarray)) for k in others):
        return None         # with index arrays or new axes: refused by the caller's checks
    # the axes before the mask: each item takes one, an Ellipsis the rest
    n_real = builtins.sum(1 for k in others if k is not Ellipsis) + m.ndim
    before = 0
    for k in raw[:i]:
        before += (x.ndim - n_real) if k is Ellipsis else 1
    if m.shape != tuple(x.shape[before:before + m.ndim]):
        raise ShapeError(f"boolean index of shape {m.shape} does not match the axes of shape "
                         f"{tuple(x.shape[before:before + m.ndim])} it indexes{_at(user_where())}")
    grid = np.zeros(x.shape, bool)
    grid[raw[:i] + (slice(None),) * m.ndim + raw[i + 1:]] = True
    wide = reshape(m, (1,) * before + m.shape + (1,) * (x.ndim - before - m.ndim))
    return where(broadcast_to(wide, x.shape), lift(grid, np.bool_, x.ctx), False)


def advanced_key(x, key):
    """(index arrays, key spec) of a normalized key holding integer arrays, as gather and
    scatter_add take them; the arrays stay Tracers or NumPy arrays."""
    arrays, tkey = [], []
    axis = 0
    for k in key:
        if k is not None:
            axis += 1
        if isinstance(k, (Tracer, np.ndarray, list)):
            k = k if isinstance(k, Tracer) else np.asarray(k)
            if k.size == 0 and not isinstance(k, Tracer) and k.dtype.kind == "f":
                k = k.astype(np.intp)        # x[[]]: NumPy takes an empty list as integers
            if k.dtype == np.bool_:
                raise UnsupportedError(
                    f"boolean mask indexing makes a shape that depends on the data"
                    f"{_at(user_where())}; use adjit.where(mask, x, 0) instead")
            if k.dtype.kind not in "iu":
                raise ShapeError(f"index arrays must be integers, got {k.dtype}"
                                 f"{_at(user_where())}")
            d = x.shape[axis - 1] if axis - 1 < x.ndim else None
            if not isinstance(k, Tracer) and k.size and d is not None and (
                    k.min() < -d or k.max() >= d):
                bad = k.max() if k.max() >= d else k.min()
                raise OutOfBoundsError(f"index {bad} is out of bounds for axis {axis - 1} with size "
                                 f"{d}{_at(user_where())}")
            tkey.append(("a", len(arrays)))
            arrays.append(k)
        elif k is None:
            tkey.append(("n",))
        elif isinstance(k, slice):
            tkey.append(("s", k))
        else:
            tkey.append(("i", _static_int(k)))
    return arrays, tuple(tkey)


def traced_positions(x, key):
    """For a key with traced integer arrays (labels): (arrays, key spec, shape of x[key],
    unique), where unique says whether the constant arrays alone already make every
    selected position distinct (x[np.arange(n), labels]), whatever the traced ones hold."""
    key = tuple(np.arange(k.start, k.stop, k.step) if isinstance(k, range) else k
                for k in _norm_index(_static_masks(key, x.shape), x.ndim))
    if not any(isinstance(k, Tracer) and k.dtype.kind in "iu" for k in key):
        return None
    arrays, tkey = advanced_key(x, key)
    shape = OPS["gather"].shape([x.shape] + [np.shape(a) for a in arrays], {"key": tkey})
    # each array's axis length: positions p and p - n are the same element (NumPy wraps
    # negative indices), so entries are distinct only as residues modulo it
    sizes, axis = {}, 0
    for item in tkey:
        if item[0] == "a":
            sizes[item[1]] = int(x.shape[axis])
        if item[0] != "n":
            axis += 1
    lengths = [sizes[k] for k in range(len(arrays))]
    consts = [(a, n) for a, n in zip(arrays, lengths) if not isinstance(a, Tracer)]
    bshape = np.broadcast_shapes(*[np.shape(a) for a in arrays])
    unique = int(math.prod(bshape)) <= 1  # x[np.argmax(x)] = 0: one position
    if len(arrays) == 1 and _is_permutation(arrays[0]):
        unique = True   # ranks[np.argsort(-s)] = np.arange(n): a permutation never repeats
    traced = [(a, n) for a, n in zip(arrays, lengths) if isinstance(a, Tracer)]
    if not unique and len(traced) == 1 and tuple(traced[0][0].shape) == tuple(bshape) and \
            _shifted_distinct(*traced[0]):
        unique = True   # J[k, 3 * i + np.arange(3)] = v: a block at a traced offset
    elif not unique and _rows_of_permutations(arrays, bshape):
        unique = True   # np.put_along_axis(z, np.argsort(x, axis=1), v, axis=1)
    elif not unique and traced and _open_mesh_distinct(arrays, lengths, bshape):
        unique = True   # y[np.ix_(i + np.arange(4), j + np.arange(5))] = p: a 2-d block
    if consts and not unique:
        rows = np.stack([np.broadcast_to(np.mod(c, n), bshape).reshape(-1) for c, n in consts],
                        axis=1)
        unique = len(np.unique(rows, axis=0)) == rows.shape[0]
    return arrays, tkey, tuple(int(d) for d in shape), unique


def _shifted_distinct(t, n):
    """Is t one traced number plus (or minus) a constant array of entries distinct modulo n,
    the length of the axis it indexes (3 * i + np.arange(3), a parameter block at a traced
    offset)? Its positions are then distinct, whatever the offset (NumPy wraps a negative
    one: i - 2 + np.arange(4) on 3 rows would write row 1 twice)."""
    g = t.ctx.graph
    d = g[t.id]
    if d["op"] not in ("add", "sub") or len(d["args"]) != 2:
        return False
    parts = []
    for a in d["args"]:
        while g[a]["op"] in ("broadcast_to", "reshape", "cast") and g[a]["op"] != "const":
            inner = g[a]["args"][0]
            if g[a]["op"] == "cast" and g[inner]["dtype"].kind not in "iu":
                break
            if g[a]["op"] != "cast" and int(math.prod(g[inner]["shape"])) not in (
                    1, int(math.prod(t.shape))):
                break
            a = inner
        parts.append(a)
    sizes = [int(math.prod(g[a]["shape"])) for a in parts]
    consts = [g[a]["op"] == "const" for a in parts]
    if sorted(consts) != [False, True] or sizes[consts.index(False)] != 1:
        return False
    c = np.asarray(g[parts[consts.index(True)]]["attrs"]["value"])
    return c.size == int(math.prod(t.shape)) and np.unique(np.mod(c, n)).size == c.size


def _open_mesh_distinct(arrays, lengths, bshape):
    """An open mesh (np.ix_, or i[:, None] with j): each array varies along its own axes of
    the key's shape, which no other array varies along, and holds entries distinct modulo
    its axis length (constant ones, or a traced offset plus such constants): every selected
    position is distinct."""
    owned = set()
    for a, n in zip(arrays, lengths):
        shape = tuple(np.shape(a))
        shape = (1,) * (len(bshape) - len(shape)) + shape
        axes = {i for i, d in enumerate(shape) if d > 1}
        if axes & owned:
            return False
        owned |= axes
        if not isinstance(a, Tracer):
            if np.unique(np.mod(np.asarray(a), n)).size != np.asarray(a).size:
                return False
            continue
        g, node = a.ctx.graph, a.id
        # (i + np.arange(4))[:, None] or a reshape of it: the same entries
        while g[node]["op"] == "reshape" or (g[node]["op"] == "slice" and all(
                k is None or k == slice(None) for k in g[node]["attrs"]["index"])):
            node = g.args(node)[0]
        if int(math.prod(a.shape)) > 1 and not _shifted_distinct(Tracer(a.ctx, node), n):
            return False
    return owned == {i for i, d in enumerate(bshape) if d > 1}


def _is_permutation(t):
    """Are t's entries distinct: an argsort of a 1-D array, or slices of one (p[::-1], the
    top k p[-k:])?"""
    if not isinstance(t, Tracer) or t.ndim != 1:
        return False
    g, n = t.ctx.graph, t.id
    while g[n]["op"] == "slice":
        idx = g[n]["attrs"]["index"]
        if len(idx) != 1 or not isinstance(idx[0], slice):
            return False
        n = g.args(n)[0]
    return g[n]["op"] == "argsort" and len(g[g.args(n)[0]]["shape"]) == 1


def _rows_of_permutations(arrays, bshape):
    """One traced array, an argsort along some axis of an array of the key's shape, and
    constant arrays that name the other axes' positions (the same along the argsort's axis,
    different between rows): every selected position is distinct."""
    traced = [a for a in arrays if isinstance(a, Tracer)]
    if len(traced) != 1 or tuple(traced[0].shape) != tuple(bshape):
        return False
    g, n = traced[0].ctx.graph, traced[0].id
    # through basic slices (the top k of each row, np.argsort(x, -1)[:, -k:]): a slice of
    # a row of distinct entries keeps them distinct, and the axes stay where they are
    while g[n]["op"] == "slice" and all(isinstance(k, slice) for k in g[n]["attrs"]["index"]):
        n = g.args(n)[0]
    if g[n]["op"] != "argsort" or len(g[n]["shape"]) != len(bshape):
        return False
    ax = g[n]["attrs"]["axis"]
    consts = [np.moveaxis(np.broadcast_to(a, bshape), ax, -1) for a in arrays
              if not isinstance(a, Tracer)]
    if not consts:   # one row only
        return int(math.prod([d for i, d in enumerate(bshape) if i != ax])) <= 1
    if any(not (c == c[..., :1]).all() for c in consts):
        return False
    rows = np.stack([c[..., 0].reshape(-1) for c in consts], axis=1)
    return len(np.unique(rows, axis=0)) == rows.shape[0]


def _static_masks(key, shape):
    """A constant boolean mask selects a known set of elements: its nonzero() index arrays.
    Its shape must equal the axes it covers, as in NumPy. A Python or NumPy bool alone (x[True])
    is a 0-d mask: True adds an axis of length 1."""
    key = key if isinstance(key, tuple) else (key,)

    def mask(k):
        if isinstance(k, (bool, np.bool_)):
            return np.asarray(k)
        if isinstance(k, (np.ndarray, list)) and not isinstance(k, Tracer):
            a = np.asarray(k)
            return a if a.dtype == np.bool_ else None
        return None
    # a tuple inside the index is a list of positions, as in NumPy (x[(0, 1),] is x[[0, 1]])
    key = tuple(list(k) if isinstance(k, tuple) else k for k in key)
    masks = [mask(k) for k in key]
    if all(m is None for m in masks):
        return key
    if any(m is not None and m.ndim == 0 and m for m in masks):
        key, masks = _drop_true(key, masks)
    spans = [0 if k is None or k is Ellipsis else m.ndim if m is not None else 1
             for k, m in zip(key, masks)]
    out, axis = [], 0
    for k, m, span in zip(key, masks, spans):
        if k is Ellipsis:
            axis += len(shape) - builtins.sum(spans)
        if m is None:
            out.append(k)
            axis += span
            continue
        covered = tuple(shape[axis:axis + m.ndim])
        if m.shape != covered:
            raise ShapeError(f"boolean index of shape {m.shape} does not match the axes of shape "
                             f"{covered} it indexes (array of shape {tuple(shape)})"
                             f"{_at(user_where())}")
        if m.ndim == 0:
            if not m:
                raise UnsupportedError(f"x[False] selects nothing{_at(user_where())}; "
                                       "leave the indexing out")
            out.append(None)
        else:
            out.extend(np.nonzero(m))
        axis += m.ndim
    return tuple(out)


def _drop_true(key, masks):
    """Beside index arrays, a scalar True is an advanced index of shape (1,) that takes no
    axis: it broadcasts away (x[True, [3, 0]] is x[[3, 0]]), so it is left out. It does count
    when NumPy decides whether the advanced indices are side by side."""
    def advanced(k, m):
        return (m is not None and m.ndim > 0) or (m is None and (
            isinstance(k, (list, np.ndarray)) or (isinstance(k, Tracer) and k.ndim > 0)))
    if not any(advanced(k, m) for k, m in zip(key, masks)):
        return key, masks       # alone, True adds an axis of length 1 (a new axis)
    true = [m is not None and m.ndim == 0 and bool(m) for m in masks]

    def side_by_side(items):
        at = [i for i, (k, m, t) in enumerate(items) if t or advanced(k, m) or (
            m is None and isinstance(k, (numbers.Integral, np.integer, Tracer)))]
        return at[-1] - at[0] + 1 == len(at)
    items = list(zip(key, masks, true))
    kept = [it for it in items if not it[2]]
    if side_by_side(items) != side_by_side(kept):
        raise UnsupportedError(f"a scalar True apart from the other index arrays{_at(user_where())}"
                               " moves NumPy's result axes to the front; leave the True out or "
                               "use np.moveaxis on the result")
    return tuple(k for k, _, _ in kept), [m for _, m, _ in kept]


def _static_int(k):
    if isinstance(k, Tracer):
        k._concrete("using a traced scalar as an index")
    if isinstance(k, (numbers.Integral, np.integer)):
        return int(k)
    raise UnsupportedError(f"unsupported index {type(k).__name__}{_at(user_where())}")


# -- assignment: x[key] = v as a new array (Tracer.assign rebinds x to it) -----------------------
def _value_for(v, target, x):
    """v cast to x's dtype (unsafe, as NumPy's setitem) and broadcast to the target shape."""
    val = cast(v, x.dtype) if isinstance(v, Tracer) else lift(v, x.dtype, x.ctx)
    while val.ndim > len(target) and val.shape[0] == 1:
        val = reshape(val, val.shape[1:])  # NumPy drops leading unit axes of the value
    try:
        ok = _broadcast_shape("assign", [val.shape, target]) == tuple(target)
    except ShapeError:
        ok = False
    if not ok:
        raise ShapeError(f"could not broadcast input array from shape {val.shape} into shape "
                         f"{tuple(target)}{_at(user_where())}")
    return broadcast_to(val, target)


def index_target(x, key, v, grid=None):
    """(positions, value) for `x[key] = v`: the flat positions key selects in `grid` (by
    default x's own positions) and v cast and broadcast to their shape."""
    key = tuple(np.arange(k.start, k.stop, k.step) if isinstance(k, range) else k
                for k in _norm_index(_static_masks(key, np.shape(grid) if grid is not None
                                                   else x.shape),
                                     np.ndim(grid) if grid is not None else x.ndim))
    for k in key:
        bounds = (k.start, k.stop, k.step) if isinstance(k, slice) else (k,)
        if any(isinstance(b, Tracer) for b in bounds):
            raise UnsupportedError(
                f"assigning at a position computed from traced values (x[i] = v with a traced "
                f"i){_at(user_where())} is not supported; write "
                "x = adjit.where(np.arange(len(x)) == i, v, x) instead, or for a block of fixed "
                "length at a traced start index it by an array: x[i + np.arange(3)] = v "
                "(x[k, i + np.arange(3)] = v in a row)")
    try:
        pos = np.asarray(key_positions(x.shape, key) if grid is None else grid[key])
    except IndexError as e:
        shown = np.shape(grid) if grid is not None else tuple(x.shape)
        raise ShapeError(f"{e} (array of shape {shown}){_at(user_where())}") from None
    return pos, _value_for(v, pos.shape, x)


def along_axis_key(x, indices, axis, what="take_along_axis"):
    """The index of np.take_along_axis / np.put_along_axis: `indices` on `axis`, broadcast
    aranges on the other axes."""
    nd = len(_shape_of(indices))
    if nd != x.ndim:
        raise ShapeError(
            f"{what}: indices have {nd} axes and the array {x.ndim}{_at(user_where())}; NumPy "
            "needs the same number (labels y of shape (n,) pick from (n, C) as y[:, None])")
    ax = _norm_axes((axis,), x.ndim, what)[0]
    key = []
    for i in range(x.ndim):
        if i == ax:
            key.append(indices)
        else:
            shape = [1] * x.ndim
            shape[i] = x.shape[i]
            key.append(np.arange(x.shape[i]).reshape(shape))
    return tuple(key)


def take_along_axis(x, indices, axis):
    """np.take_along_axis as a gather with broadcast aranges on the other axes."""
    if axis is None:                       # NumPy: of the flattened array
        x, axis = ravel(x), 0
    return getitem(x, along_axis_key(x, indices, axis))


@_resolving
def one_hot(labels, num_classes, dtype=np.float32):
    """Rows of the identity matrix picked by integer labels (no gradient).

    >>> import numpy as np, adjit
    >>> adjit.one_hot(np.array([2, 0]), 3)
    array([[0., 0., 1.],
           [1., 0., 0.]], dtype=float32)
    """
    if not isinstance(labels, Tracer):
        return OPS["one_hot"].numpy(np.asarray(labels), num_classes=num_classes, dtype=dtype)
    if labels.dtype.kind not in "iu":
        raise ShapeError(f"one_hot: labels must be integers, got {labels.dtype}"
                         f"{_at(user_where())}")
    return labels.ctx.emit("one_hot", [labels], {"num_classes": int(num_classes),
                                                 "dtype": np.dtype(dtype)})


# -- reductions -------------------------------------------------------------------------------
def _axes(x, axis):
    nd = len(_shape_of(x))
    if axis is None:
        return tuple(range(nd))
    if nd == 0 and not isinstance(axis, (tuple, list)) and axis in (0, -1):
        return ()                # axis 0 or -1 of a 0-d array: NumPy reduces nothing
    axes = tuple(sorted(set(_norm_axes(axis if isinstance(axis, (tuple, list)) else (axis,),
                                       nd, "reduction"))))
    return axes


def accumulator(dtype):
    """The dtype NumPy sums and multiplies booleans and integers in: int64, uint64 for
    unsigned ones."""
    return np.dtype(np.uint64 if np.dtype(dtype).kind == "u" else np.int64)


def sum(x, axis=None, keepdims=False, dtype=None):  # noqa: A001 - NumPy's name
    if not isinstance(x, Tracer):
        return np.sum(x, axis=axis, keepdims=keepdims, dtype=dtype)
    if dtype is not None:
        x = strong(cast(x, dtype))        # np.sum(2.0, dtype=np.float32) is an np.float32
        if x.dtype.kind in "bui" and x.dtype != accumulator(x.dtype):
            # NumPy adds in the small dtype, wrapping; the same as adding in int64 and
            # wrapping once (bool: any)
            return strong(cast(sum(x, axis, keepdims), x.dtype))
    elif x.dtype.kind in "bui":
        x = cast(x, accumulator(x.dtype))
    axes = _axes(x, axis)
    if not axes:
        return x
    return x.ctx.emit("sum", [x], {"axis": axes, "keepdims": bool(keepdims)})


def mean(x, axis=None, keepdims=False, dtype=None):
    if not isinstance(x, Tracer):
        return np.mean(x, axis=axis, keepdims=keepdims, dtype=dtype)
    if dtype is not None and np.dtype(dtype).kind in "bui":
        # NumPy: the sum in that dtype, divided, truncated back into it
        return strong(cast(mean(cast(x, dtype), axis, keepdims), dtype))
    if dtype is not None:
        x = strong(cast(x, dtype))
    if x.dtype.kind not in "fc":
        x = cast(x, np.float64 if dtype is None else dtype)
    axes = _axes(x, axis)
    n = int(math.prod([x.shape[a] for a in axes]))
    if dtype is None and x.dtype == np.float16:
        # NumPy adds float16 in float32 for a mean (a sum of 1000 halves of 200 is inf)
        return cast(div(sum(x, axes, keepdims, np.float32), n), np.float16)
    return div(sum(x, axes, keepdims, dtype), n)


def var(x, axis=None, keepdims=False, ddof=0):
    m = mean(x, axis, keepdims=True)
    d = sub(x, m)
    axes = _axes(x, axis)
    n = int(math.prod([_shape_of(x)[a] for a in axes]))
    return div(sum(mul(d, d), axes, keepdims), builtins.max(n - ddof, 0))  # NumPy: inf


def std(x, axis=None, keepdims=False, ddof=0):
    return sqrt_of_variance(var(x, axis, keepdims, ddof))


def sqrt_of_variance(v):
    """A standard deviation from its variance v, with derivative 0 where v is 0: a constant
    slice (a batch of one) has derivative 0, as in PyTorch, not sqrt's 0 * inf (the where
    keeps that cotangent 0; NaN stays NaN). np.std, np.nanstd, np.std(where=) share it."""
    return where(eq(v, 0), 0, sqrt(v))


def max(x, axis=None, keepdims=False):  # noqa: A001 - NumPy's name
    if not isinstance(x, Tracer):
        return np.max(x, axis=axis, keepdims=keepdims)
    return reduction("max", x, axis, keepdims)


def reduction(op, x, axis=None, keepdims=False):
    """The registry reduction `op` (max, nanmax, nanmin) over axis, which has no identity."""
    axes = _axes(x, axis)
    if any(_shape_of(x)[a] == 0 for a in axes):
        # NumPy: "zero-size array to reduction operation maximum which has no identity"
        raise ShapeError(f"max (or min) over an axis of length 0{_at(user_where())}: it has no "
                         "value (NumPy raises too); leave the empty case out")
    if not axes:
        return x
    return x.ctx.emit(op, [x], {"axis": axes, "keepdims": bool(keepdims)})


def min(x, axis=None, keepdims=False):  # noqa: A001 - NumPy's name
    if not isinstance(x, Tracer):
        return np.min(x, axis=axis, keepdims=keepdims)
    if x.dtype.kind == "b":
        return cast(min(cast(x, np.uint8), axis, keepdims), np.bool_)
    return reduction("min", x, axis, keepdims)


def cumsum(x, axis=None):
    if not isinstance(x, Tracer):
        return np.cumsum(x, axis=axis)
    if axis is None:
        x, axis = ravel(x), 0
    if x.dtype.kind in "bui":
        x = cast(x, accumulator(x.dtype))
    return x.ctx.emit("cumsum", [x], {"axis": _norm_axes((axis,), x.ndim, "cumsum")[0]})


def flip(x, axis=None):
    nd = len(_shape_of(x))
    axes = range(nd) if axis is None else _norm_axes(
        axis if isinstance(axis, (tuple, list)) else (axis,), nd, "flip")
    index = tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(nd))
    return slice_(x, index)


def argmax(x, axis=None):
    """Index of the largest value (an integer array: no gradient)."""
    if not isinstance(x, Tracer):
        return np.argmax(x, axis=axis)
    if axis is None:
        x, axis = ravel(x), 0
    return x.ctx.emit("argmax", [x], {"axis": _norm_axes((axis,), x.ndim, "argmax")[0]})


def argsort(x, axis=-1):
    """Indices that sort x along `axis` (stable; an integer array: no gradient)."""
    if not isinstance(x, Tracer):
        return np.argsort(x, axis=axis, kind="stable")
    if axis is None:
        x, axis = ravel(x), 0
    if x.ndim == 0:
        x = reshape(x, (1,))
    return x.ctx.emit("argsort", [x], {"axis": _norm_axes((axis,), x.ndim, "argsort")[0]})


def argmin(x, axis=None):
    return argmax(reversed_order(x), axis)


def reversed_order(a):
    """An array whose largest element is a's smallest (first ties first), with no overflow:
    -a for floats, but -1 - a for signed integers (-a wraps at the minimum), max - a for
    unsigned ones and not a for booleans."""
    dt = _dtype_of(a)
    if dt.kind == "b":
        return eq(a, False)
    if dt.kind == "i":
        return sub(np.array(-1, dt), a)
    if dt.kind == "u":
        return sub(np.array(np.iinfo(dt).max, dt), a)
    return neg(a)


def _rounding(op, x):
    if not isinstance(x, Tracer):
        return OPS[op].numpy(np.asarray(x))
    return x if x.dtype.kind in "biu" else x.ctx.emit(op, [x])


def floor(x): return _rounding("floor", x)
def ceil(x): return _rounding("ceil", x)


def round_(x, decimals=0):
    """np.round as NumPy computes it: rint(x * 10**d) / 10**d, and for negative d
    rint(x / 10**-d) * 10**-d (the power is exact, 0.001 is not); integers stay integers."""
    decimals = int(decimals)
    kind = _dtype_of(x).kind
    if kind in "biu":
        if decimals >= 0:
            return x
        f = 10.0 ** -decimals
        return cast(mul(_rounding("round", div(x, f)), f), _dtype_of(x))
    if decimals > 0:
        f = 10.0 ** decimals
        return div(_rounding("round", mul(x, f)), f)
    if decimals < 0:
        f = 10.0 ** -decimals
        return mul(_rounding("round", div(x, f)), f)
    return _rounding("round", x)


def diagonal(x, offset=0, axis1=0, axis2=1):
    """np.diagonal: the diagonal of axes (axis1, axis2), as the last axis of the result; a
    read-only view, as in NumPy (it shows later writes to x)."""
    shape = _shape_of(x)
    if len(shape) < 2:
        raise ShapeError(f"np.diagonal needs an array of at least two dimensions, got shape "
                         f"{tuple(shape)}{_at(user_where())}")
    a1, a2 = _norm_axes((axis1, axis2), len(shape), "diagonal")
    rest = [i for i in range(len(shape)) if i not in (a1, a2)]
    if rest + [a1, a2] != list(range(len(shape))):
        x = transpose(x, rest + [a1, a2])
    rows = np.arange(builtins.max(0, -offset), builtins.min(shape[a1], shape[a2] - offset))
    rows = rows if rows.size else np.zeros(0, np.int64)
    d = getitem(x, (Ellipsis, rows, rows + offset))
    if isinstance(d, Tracer):
        key = (("s", slice(None)),) * len(rest) + (("a", 0), ("a", 1))
        d.view_of(x, "gather", {"key": key}, (rows, rows + offset), writable=False)
    return d


def diag(x, k=0):
    shape = _shape_of(x)
    if len(shape) == 2:
        return diagonal(x, k)
    if len(shape) == 1:  # a scatter: v * eye would put inf * 0 = nan off the diagonal
        n, i = shape[0] + builtins.abs(k), np.arange(shape[0])
        return scatter_add(x, [i + builtins.max(0, -k), i + builtins.max(0, k)],
                           (("a", 0), ("a", 1)), (n, n))
    raise UnsupportedError(f"np.diag with k={k} on a {len(shape)}-d array{_at(user_where())}")


def trace_(x, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    if out is not None:
        raise UnsupportedError(f"np.trace with out={_at(user_where())}; use the result")
    r = sum(diagonal(x, offset, axis1, axis2), axis=-1)
    return cast(r, dtype) if dtype is not None else r


def tile(x, reps):
    reps = (reps,) if isinstance(reps, int) else tuple(reps)
    shape = tuple(_shape_of(x))
    nd = builtins.max(len(shape), len(reps))
    shape = (1,) * (nd - len(shape)) + shape
    reps = (1,) * (nd - len(reps)) + reps
    # tile = broadcast along a new axis in front of each axis, then merge the pairs
    inter = tuple(v for r, d in zip(reps, shape) for v in (1, d))
    full = tuple(v for r, d in zip(reps, shape) for v in (r, d))
    out = broadcast_to(reshape(x, inter), full)
    return reshape(out, tuple(r * d for r, d in zip(reps, shape)))


def repeat(x, repeats, axis=None):
    if isinstance(repeats, Tracer):
        repeats._concrete("using np.repeat's counts (they set the result's shape)")
    if isinstance(repeats, np.ndarray) and repeats.ndim == 0 and repeats.dtype.kind in "iu":
        repeats = int(repeats)             # np.repeat(x, np.array(2)): a 0-d count
    if np.ndim(repeats) == 0 and not isinstance(repeats, (int, np.integer)):
        raise ShapeError(f"np.repeat: counts must be integers, got {repeats!r}"
                         f"{_at(user_where())}")
    if axis is None:
        x, axis = ravel(x), 0
    shape = tuple(_shape_of(x))
    ax = _norm_axes((axis,), len(shape), "repeat")[0]
    if np.ndim(repeats) > 0:
        # per-element counts (constants): a gather of each index repeated
        counts = np.asarray(repeats)
        if counts.dtype.kind not in "iu" or counts.shape not in ((shape[ax],), (1,)) \
                or (counts < 0).any():
            raise ShapeError(f"np.repeat: counts {counts.tolist()!r} do not fit axis {ax} of "
                             f"length {shape[ax]}{_at(user_where())}")
        if counts.shape == (1,):
            return repeat(x, int(counts[0]), ax)
        idx = np.repeat(np.arange(shape[ax]), counts)
        return getitem(x, (slice(None),) * ax + (idx,))
    inter = shape[:ax + 1] + (1,) + shape[ax + 1:]
    full = shape[:ax + 1] + (int(repeats),) + shape[ax + 1:]
    out = broadcast_to(reshape(x, inter), full)
    return reshape(out, shape[:ax] + (shape[ax] * int(repeats),) + shape[ax + 1:])


def einsum(subscripts, *operands):
    """np.einsum for one or two operands, lowered to transposes, sums and one matmul."""
    from .einsum import einsum as _einsum
    return _einsum(subscripts, *operands)


# -- products ---------------------------------------------------------------------------------
def correlate(a, v, mode="valid"):
    """np.correlate(a, v, mode) of 1-d arrays with len(a) >= len(v) (registry op correlate:
    NumPy's own loop, which multiplies only overlapping elements, so an inf in v reaches only
    the outputs it overlaps; no window of a is materialised)."""
    if not any(isinstance(t, Tracer) for t in (a, v)):
        return np.correlate(a, v, mode)
    ctx = _ctx([a, v])
    dt = result_dtype(a, v)
    return ctx.emit("correlate", [lift(a, dt, ctx), lift(v, dt, ctx)], {"mode": mode})


def fft(x, axis, inverse=False, norm="backward"):
    """The DFT (inverse: the inverse DFT) along `axis` of the complex array whose parts x
    (..., 2) holds, answered as parts (registry op fft)."""
    if not isinstance(x, Tracer):
        return OPS["fft"].numpy(np.asarray(x), axis, inverse, norm)
    return x.ctx.emit("fft", [x], {"axis": int(axis), "inverse": bool(inverse), "norm": norm})


def rfft(x, axis, norm="backward"):
    """np.fft.rfft of the real array x along axis, as parts (..., 2) (registry op rfft).
    norm: np.fft's name, or a float scaling the unnormalized transform (the VJPs')."""
    if not isinstance(x, Tracer):
        return OPS["rfft"].numpy(np.asarray(x), axis, norm)
    return x.ctx.emit("rfft", [x], {"axis": int(axis), "norm": norm})


def irfft(x, axis, n, norm="backward"):
    """np.fft.irfft(z, n, axis) of the half spectrum z (n // 2 + 1 terms along axis) whose
    parts x (..., 2) holds: a real array (registry op irfft); norm as rfft's."""
    if not isinstance(x, Tracer):
        return OPS["irfft"].numpy(np.asarray(x), axis, n, norm)
    return x.ctx.emit("irfft", [x], {"axis": int(axis), "n": int(n), "norm": norm})


def matmul(x, y):
    if not any(isinstance(v, Tracer) for v in (x, y)):
        return np.matmul(x, y)
    ctx = _ctx([x, y])
    dt = result_dtype(x, y)
    a, b = lift(x, dt, ctx), lift(y, dt, ctx)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: operands must not be scalars (shapes {a.shape} @ {b.shape})"
                         f"{_at(user_where())}; use * to scale")
    va, vb = a.ndim == 1, b.ndim == 1
    if va:
        a = reshape(a, (1,) + a.shape)
    if vb:
        b = reshape(b, b.shape + (1,))
    if a.shape[-1] != b.shape[-2]:
        shown_a = x.shape if isinstance(x, Tracer) else np.shape(x)
        shown_b = y.shape if isinstance(y, Tracer) else np.shape(y)
        raise ShapeError(f"matmul: inner dimensions differ ({a.shape[-1]} vs {b.shape[-2]}) "
                         f"for shapes {tuple(shown_a)} @ {tuple(shown_b)}{_at(user_where())}")
    batch = _broadcast_shape("matmul", [a.shape[:-2], b.shape[:-2]])
    a = broadcast_to(a, batch + a.shape[-2:])
    b = broadcast_to(b, batch + b.shape[-2:])
    out = ctx.emit("matmul", [a, b])
    if va:
        out = reshape(out, out.shape[:-2] + out.shape[-1:])
    if vb:
        out = reshape(out, out.shape[:-1])
    return out


def dot(x, y):
    sx, sy = _shape_of(x), _shape_of(y)
    if len(sx) == 0 or len(sy) == 0:
        return strong_mul(x, y)
    if len(sx) <= 2 and len(sy) <= 2:
        return matmul(x, y)
    raise UnsupportedError(f"np.dot of arrays with more than 2 dimensions{_at(user_where())};"
                           " use np.matmul (batched) or np.einsum-free reshapes")


def strong_mul(x, y):
    """x * y as np.dot and np.inner of a 0-d operand: a Python number is an array there
    (np.dot(a32, 2.0) is float64), not the weak scalar of a ufunc."""
    if not any(_is_weak(v) for v in (x, y)):
        return mul(x, y)
    dt = np.result_type(*[np.asarray(v).dtype if _weak(v) else _dtype_of(v) for v in (x, y)])
    return mul(*[np.asarray(v, dt) if _weak(v) else cast(v, dt) if isinstance(v, Tracer)
                 else v for v in (x, y)])


def outer(x, y):
    return mul(reshape(x, (-1, 1)), reshape(y, (1, -1)))


def inner(x, y):
    from .composites import inner as _inner
    return _inner(x, y)


# -- constants --------------------------------------------------------------------------------
def zeros(shape, dtype=np.float64):
    if current() is None:
        return np.zeros(shape, dtype)
    return broadcast_to(const(np.zeros((), dtype)), shape)


def full_like(x, value, dtype=None):
    dtype = np.dtype(dtype or _dtype_of(x))
    if not isinstance(x, Tracer):
        return np.full_like(x, value, dtype=dtype)
    if dtype.kind == "c":   # np.zeros_like(x, dtype=complex): its parts (complex.py)
        from . import complex as CX
        re, im = CX.split(value)
        part = np.finfo(dtype).dtype
        return CX.make(full_like(x, re, part), full_like(x, 0.0 if im is None else im, part))
    return broadcast_to(lift(value, dtype, x.ctx), x.shape)


def zeros_like(x, dtype=None):
    return full_like(x, 0, dtype)


def ones_like(x, dtype=None):
    return full_like(x, 1, dtype)


def _dtype_of(x):
    return x.dtype if isinstance(x, Tracer) else np.asarray(x).dtype


# -- composites users reach for ---------------------------------------------------------------
@_resolving
def relu(x):
    """max(x, 0), with derivative 0 at 0 as in PyTorch.

    >>> import numpy as np, adjit
    >>> adjit.relu(np.array([-1.0, 2.0]))
    array([0., 2.])
    """
    return where(gt(x, 0), x, 0)


@_resolving
def sigmoid(x):
    """1 / (1 + exp(-x)) without overflow and with full relative precision for x < 0, where
    it is exp(x) / (1 + exp(x)) (scipy.special.expit); the derivative is out (1 - out).

    >>> import numpy as np, adjit
    >>> float(adjit.sigmoid(np.array(0.0)))
    0.5
    >>> float(adjit.sigmoid(np.array(-40.0)))
    4.248354255291589e-18
    """
    return _elementwise("sigmoid", [x], float_only=True)


@_resolving
def erf(x):
    """The error function 2/sqrt(pi) * integral of exp(-t^2) from 0 to x, as scipy.special.erf
    (which adjit also traces); its derivative is 2/sqrt(pi) exp(-x^2).

    >>> import numpy as np, adjit
    >>> round(float(adjit.erf(np.array(1.0))), 6)
    0.842701
    """
    return _elementwise("erf", [x], float_only=True)


def gammaln(x):
    """log |Gamma(x)|, as scipy.special.gammaln (which adjit traces); its derivative is
    digamma, polygamma(0, x)."""
    return _elementwise("gammaln", [x], float_only=True)


def polygamma(n, x):
    """psi^(n)(x), the n-th derivative of digamma (n = 0: digamma), n a constant."""
    if isinstance(n, Tracer) or not isinstance(n, (int, np.integer)) or n < 0:
        raise UnsupportedError(f"polygamma's order n must be a constant non-negative integer, "
                               f"got {n!r}{_at(user_where())}")
    if not isinstance(x, Tracer):
        return OPS["polygamma"].numpy(np.asarray(x), int(n))
    x = cast(x, x.dtype if x.dtype.kind == "f" else np.float64)
    return x.ctx.emit("polygamma", [x], {"n": int(n)})


@_resolving
def erfc(x):
    """1 - erf(x), accurate where erf(x) is near 1 (as scipy.special.erfc).

    >>> import numpy as np, adjit
    >>> float(adjit.erfc(np.array(10.0))) > 0
    True
    """
    return _elementwise("erfc", [x], float_only=True)


@_resolving
def softplus(x):
    """log(1 + exp(x)) without overflow: np.logaddexp(x, 0), whose derivative is sigmoid(x)
    (also the second at 0, where max(x, 0) + log1p(exp(-|x|)) has kinks).

    >>> import numpy as np, adjit
    >>> round(float(adjit.softplus(np.array(0.0))), 6)
    0.693147
    """
    from .composites import logaddexp
    return logaddexp(x, 0)


@_resolving
def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x))) shifted by the max so it never overflows.

    >>> import numpy as np, adjit
    >>> round(float(adjit.logsumexp(np.array([1000.0, 1000.0]))), 6)
    1000.693147
    """
    # the shift cancels mathematically, so no cotangent needs to flow through the max; an
    # infinite max is not subtracted (inf - inf), so the result is +-inf as NumPy's log(sum(exp))
    if isinstance(x, Tracer) and x.size == 0:
        # log(0) = -inf for each empty sum (SciPy and NumPy's log(sum(exp)))
        return log(sum(exp(x), axis=axis, keepdims=keepdims))
    m = _shift(x, axis)
    s = add(log(sum(exp(sub(x, m)), axis=axis, keepdims=True)), m)
    return s if keepdims else squeeze(s, _axes(x, axis))


def _shift(x, axis):
    """The max along axis (kept), without a gradient, 0 where it is infinite: the shift of
    logsumexp and the softmaxes, which cancels mathematically."""
    m = max(x, axis=axis, keepdims=True)
    return stop_gradient(where(eq(abs(m), np.inf), zeros_like(m), m))


@_resolving
def log_softmax(x, axis=-1):
    """x - logsumexp(x): log-probabilities along `axis`.

    >>> import numpy as np, adjit
    >>> np.round(np.exp(adjit.log_softmax(np.array([0.0, 0.0]))), 3)
    array([0.5, 0.5])
    """
    # (x - m) - log(sum(exp(x - m))): exact in the shift m, where x - (m + log(...)) would
    # round log(...) to the spacing of m (float32 logits near 1e3 lost four digits)
    xm = sub(x, _shift(x, axis))
    return sub(xm, log(sum(exp(xm), axis=axis, keepdims=True)))


@_resolving
def softmax(x, axis=-1):
    """exp(x - m) / sum(exp(x - m)) with m the max: probabilities along `axis`.

    >>> import numpy as np, adjit
    >>> adjit.softmax(np.array([0.0, 0.0]))
    array([0.5, 0.5])
    """
    # shifted by the max itself where it is +inf: the row is then NaN, as SciPy's and JAX's
    # (a zero shift gave [nan, 0, 0] for [inf, 0, 1]); an all -inf row is 0 / 0 either way
    m = max(x, axis=axis, keepdims=True)
    e = exp(sub(x, stop_gradient(where(eq(m, -np.inf), zeros_like(m), m))))
    return div(e, sum(e, axis=axis, keepdims=True))


def no_grad_error(what):
    raise GradError(what)


_ = _build_key
