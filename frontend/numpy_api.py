"""NumPy dispatch for tracers: ufuncs, array functions, operators and methods.

`UFUNCS` and `FUNCTIONS` map NumPy callables to the functions in functions.py; anything not in
them raises UnsupportedError naming the NumPy function and the user's line.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import math
import os
import sys
import sysconfig
import threading
import warnings

import numpy as np

from ..ir.errors import AdjitWarning, ShapeError, TraceError, UnsupportedError
from . import buffer as B
from . import composites as C
from .masked import Selection, same_mask
from . import functions as F
from . import linalg as LA
from . import numeric as N
from . import statistics as S
from . import decompositions as LD
from . import complex as CX
from . import scipy_stats as SS
from .tracer import _scalar, Tracer, _at, _at_lib, current, user_where


UFUNCS = {
    np.add: F.add, np.subtract: F.sub, np.multiply: F.mul, np.divide: F.div,
    np.power: lambda x, y: _pow(x, y), np.float_power: lambda x, y: F.power(F.cast(x, np.float64), y),
    np.maximum: F.maximum, np.minimum: F.minimum, np.fmax: N.fmax, np.fmin: N.fmin,
    np.negative: F.neg, np.positive: lambda x: x, np.exp: F.exp, np.expm1: F.expm1,
    np.exp2: F.exp2, np.log: F.log, np.log1p: F.log1p,
    np.log2: lambda x: F._elementwise("log2", [x], float_only=True),
    np.log10: lambda x: F._elementwise("log10", [x], float_only=True),
    np.sin: F.sin, np.cos: F.cos, np.tan: F.tan,
    np.tanh: F.tanh, np.sinh: F.sinh, np.cosh: F.cosh,
    np.arctan: F.arctan, np.arcsin: F.arcsin, np.arccos: F.arccos, np.arcsinh: F.arcsinh,
    np.arccosh: F.arccosh, np.arctanh: F.arctanh, np.arctan2: F.arctan2, np.hypot: C.hypot,
    np.ldexp: C.ldexp,
    np.cbrt: F.cbrt, np.deg2rad: lambda x: F.mul(x, math.pi / 180),
    np.radians: lambda x: F.mul(x, math.pi / 180), np.rad2deg: lambda x: F.mul(x, 180 / math.pi),
    np.degrees: lambda x: F.mul(x, 180 / math.pi), np.logaddexp2: C.logaddexp2,
    np.copysign: C.copysign, np.heaviside: C.heaviside, np.isnan: C.isnan, np.isinf: C.isinf,
    np.isfinite: C.isfinite, np.signbit: C.signbit, np.modf: C.modf,
    np.logical_and: C.logical_and, np.logical_or: C.logical_or,
    np.logical_xor: C.logical_xor, np.conjugate: lambda x: x,
    np.bitwise_and: lambda x, y: _bitwise("&", C.logical_and, x, y),
    np.bitwise_or: lambda x, y: _bitwise("|", C.logical_or, x, y),
    np.bitwise_xor: lambda x, y: _bitwise("^", C.logical_xor, x, y),
    np.invert: lambda x: _bitwise("~", lambda a, b: C.logical_not(a), x),
    np.left_shift: lambda x, y: _bitwise("<<", None, x, y),
    np.right_shift: lambda x, y: _bitwise(">>", None, x, y),
    np.sqrt: F.sqrt, np.square: lambda x: F.mul(x, x), np.abs: F.abs, np.fabs: F.abs,
    np.sign: F.sign, np.reciprocal: lambda x: F.div(1.0, x),
    np.greater: F.gt, np.greater_equal: F.ge, np.less: F.lt, np.less_equal: F.le,
    np.equal: F.eq, np.not_equal: F.ne, np.matmul: F.matmul,
    np.logaddexp: C.logaddexp,
    np.floor: F.floor, np.ceil: F.ceil, np.rint: F.round_, np.trunc: N.trunc,
    np.logical_not: C.logical_not,
    np.remainder: N.remainder, np.fmod: N.fmod, np.floor_divide: N.floor_divide,
    np.divmod: N.divmod_,
}
_REDUCE = {np.add: F.sum, np.maximum: F.max, np.minimum: F.min, np.multiply: C.prod,
           # NaN-skipping extremes: nanmax / nanmin (ties share the cotangent equally)
           np.fmax: C.nanmax, np.fmin: C.nanmin}
_ACCUMULATE = {np.add: F.cumsum, np.multiply: C.cumprod}
_IDENTITY = {np.add: 0, np.multiply: 1, np.logical_or: False, np.logical_and: True,
             np.logical_xor: False, np.logaddexp: -np.inf, np.logaddexp2: -np.inf,
             np.hypot: 0}
# associative and commutative binary ufuncs: .reduce folds pairwise, .accumulate scans
_ASSOCIATIVE = {np.maximum, np.minimum, np.fmax, np.fmin, np.logaddexp, np.logaddexp2,
                np.hypot, np.logical_and, np.logical_or, np.logical_xor}


_BITWISE = {"&": ("bitand", "bitwise_and"), "|": ("bitor", "bitwise_or"),
            "^": ("bitxor", "bitwise_xor"), "<<": ("lshift", "left_shift"),
            ">>": ("rshift", "right_shift"), "~": ("invert", "invert")}


def _bitwise(sym, logical, x, *y):
    """&, |, ^ and ~ of boolean masks are the logical operations; of integers (and the
    shifts) the bitwise ones, in NumPy's promoted integer dtype (booleans shift as int8)."""
    op, ufunc = _BITWISE[sym]
    xs = (x, *y)
    dts = [F._dtype_of(v) for v in xs]
    if logical is not None and all(d == np.bool_ for d in dts):
        return logical(*xs) if y else logical(x, False)
    if any(d.kind not in "biu" for d in dts):
        raise UnsupportedError(f"np.{ufunc} of {', '.join(str(d) for d in dts)}"
                               f"{_at(user_where())}: as in NumPy, bitwise operations take "
                               "integers and booleans only")
    if all(d == np.bool_ for d in dts):            # shifts of booleans: NumPy's int8 loop
        xs = tuple(F.cast(v, np.int8) for v in xs)
    return F._elementwise(op, list(xs))


_no_out = C._no_out


# -- reductions with NumPy's signatures (shared by the functions and the methods) -----------
def _masked(a, where, fill):
    return a if where is None else F.where(where, a, F.full_like(a, fill))


def _sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    _no_out("sum", out)
    return C.join_initial(F.sum(_masked(a, where, 0), axis, keepdims, dtype), initial)


def _any_all(reduce, a, axis, out, keepdims, where):
    _no_out(reduce.__name__.rstrip("_"), out)
    if where is not True:     # the elements outside the mask count as the identity
        a = C.logical_and(a, where) if reduce is C.any_ else \
            C.logical_or(a, C.logical_not(where))
    return reduce(a, axis, keepdims)


def _prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    _no_out("prod", out)
    return C.prod(_masked(a, where, 1), axis, keepdims, dtype, initial)


def _mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    _no_out("mean", out)
    if where is None:
        return F.mean(a, axis, keepdims, dtype)
    a = F.cast(a, dtype) if dtype is not None else a
    count = F.sum(F.broadcast_to(F.cast(where, F.result_dtype(a, 1.0)), F._shape_of(a)),
                  axis, keepdims)
    return F.div(_sum(a, axis, None, None, keepdims, None, where), count)


def _extreme(name, reduce, combine):
    def fn(a, axis=None, out=None, keepdims=False, initial=None, where=None):
        _no_out(name, out)
        if initial is not None and not isinstance(B.resolve(initial), Tracer):
            C.cast_initial(initial, F._dtype_of(B.resolve(a)))   # NumPy's OverflowError
        if where is not None:
            if initial is None:
                raise UnsupportedError(f"np.{name}(..., where=...) needs initial=..., as in "
                                       f"NumPy{_at(user_where())}")
            a = _masked(a, where, initial)
        shape = F._shape_of(a)
        if initial is not None and any(shape[k] == 0 for k in F._axes(a, axis)):
            # nothing to reduce: NumPy gives initial (max over an empty axis raises without)
            out = np.max(np.empty(shape, F._dtype_of(a)), axis=axis, keepdims=keepdims,
                         initial=0)
            return F.full_like(out, initial) if not isinstance(a, Tracer) else \
                F.broadcast_to(F.cast(F.lift(initial, F._dtype_of(a), a.ctx), F._dtype_of(a)),
                               out.shape).copy_()
        r = reduce(a, axis, keepdims)
        if initial is None:
            return r
        # NumPy casts initial to the array's dtype (a bool mask's max stays bool)
        return combine(r, C.cast_initial(initial, F._dtype_of(r)))
    return fn


_max = _extreme("max", F.max, F.maximum)
_min = _extreme("min", F.min, F.minimum)


def _moment(name, fn):
    def moment(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None,
               mean=None, correction=None):
        _no_out(name, out)
        a = F.cast(a, dtype) if dtype is not None else a
        ddof = ddof if correction is None else correction
        if where is None and mean is None:
            return fn(a, axis, keepdims, ddof)
        # NumPy's where= (the selected entries only) and mean= (a precomputed mean, kept dims)
        if F._dtype_of(a).kind not in "fc":
            a = F.cast(a, np.float64)
        m = mean if mean is not None else _mean(a, axis, None, None, True, where=where)
        d = F.sub(a, m)
        sq = _sum(F.mul(d, d), axis, None, None, keepdims, None, where)
        ones = F.ones_like(a) if where is None else F.cast(where, F._dtype_of(a))
        count = F.sum(F.broadcast_to(ones, F._shape_of(a)), axis, keepdims)
        r = F.div(sq, F.maximum(F.sub(count, ddof), 0.0))
        return F.sqrt_of_variance(r) if name == "std" else r
    return moment


_var, _std = _moment("var", F.var), _moment("std", F.std)


def _zero_d_as_1d(a, axis):
    """np.cumsum(x0d, axis=0 or -1) as NumPy: the 0-d array taken as a 1-element vector."""
    if axis is not None and len(F._shape_of(a)) == 0 and axis in (0, -1):
        return F.reshape(a, (1,)), None
    return a, axis


def _cumsum(a, axis=None, dtype=None, out=None):
    _no_out("cumsum", out)
    a, axis = _zero_d_as_1d(a, axis)
    if dtype is None:
        return F.cumsum(a, axis)
    # in a small integer dtype NumPy wraps at each step: the same as wrapping once
    a = F.cast(a, dtype)
    return F.cast(F.cumsum(a, axis), dtype)


def _cumprod(a, axis=None, dtype=None, out=None):
    _no_out("cumprod", out)
    a, axis = _zero_d_as_1d(a, axis)
    return C.cumprod(a, axis, dtype)


def _argmax(a, axis=None, out=None, *, keepdims=False, neg=False):
    _no_out("argmax", out)
    if axis in (0, -1) and not F._shape_of(a):
        axis = None    # a 0-d array's only axis, as NumPy takes it
    r = (F.argmin if neg else F.argmax)(a, axis)
    if keepdims:
        shape = F._shape_of(a)
        r = F.reshape(r, tuple(1 if axis is None or i == axis % len(shape) else d
                               for i, d in enumerate(shape)))
    return r


def _layout_known(t) -> bool:
    """Is t's memory layout the one NumPy's array has: an argument (or a copy laid out as
    asked, np.copy(x, order="F")), or a view of one? Not an array computed inside, which
    adjit counts as C-ordered where NumPy may keep an argument's Fortran order (x * 2), nor
    an argument of an inner trace standing for such an array."""
    root = t.base if t.base is not None else t
    if root.arg_strides is not None:
        return True
    d = root.ctx.graph[root.id]
    return d["op"] == "input" and not d["attrs"].get("fortran")


def _reshape(a, *shape, order="C", **kw):
    shape = kw.get("shape", kw.get("newshape", shape))
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    # 'A' is Fortran order only for Fortran-contiguous arrays, 'K' the memory order: adjit's
    # arrays are C-ordered unless a transpose made them (NumPy keeps the order of a transposed
    # array through elementwise work: np.exp(x.T).ravel('K') reads x's order)
    if order in ("A", "K") and isinstance(a, Tracer) and _layout_known(a):
        # an argument, or a view of one (x.T, x[:, ::2]): its layout is known (one program
        # per layout); contiguous in either order, that order is what NumPy reads
        probe = a.layout_probe()
        flags = probe.flags
        strides = [s for s, d in zip(probe.strides, probe.shape) if d > 1]
        if flags.c_contiguous or flags.f_contiguous:
            order = "C" if flags.c_contiguous else "F"
        elif order == "A" or (all(s > 0 for s in strides) and
                              all(x >= y for x, y in zip(strides, strides[1:]))):
            # 'A' is Fortran order only for a Fortran-contiguous array; 'K' reads by
            # decreasing stride, C order for a C-like view (x[:, ::2])
            order = "C"
        else:
            raise UnsupportedError(
                f"reshape or ravel with order='K' of a strided view{_at(user_where())}: it "
                "reads the elements in the order of their addresses, a memory layout adjit "
                "does not follow for a view contiguous in neither order whose strides do not "
                "decrease (every other column of a Fortran array, permuted axes, a reversed "
                "axis); write order='C' or order='F'")
    if order in ("A", "K") and isinstance(a, Tracer) and _transposed_upstream(a):
        raise UnsupportedError(
            f"reshape or ravel with order={order!r} of an array computed from a transposed or "
            f"Fortran-ordered one"
            f"{_at(user_where())}: the result depends on the memory layout, which adjit does "
            "not follow; write order='C' or order='F' (the layout NumPy would have)")
    if order == "F" and F._shape_of(a) and F._shape_of(a) != shape:
        # Fortran order: the C-order reshape of the reversed axes, reversed back
        r = F.reshape(F.transpose(a), tuple(reversed(shape)))
        return F.transpose(r) if len(shape) > 1 else r
    if order not in ("C", "F", "A", "K"):
        raise UnsupportedError(f"reshape with order={order!r}{_at(user_where())}")
    r = F.reshape(a, shape)
    return r.copy_() if kw.get("copy") and isinstance(r, Tracer) else r


def _ravel(a, order="C"):
    """np.ravel: a view of an array contiguous in that order, else a copy (unlike reshape,
    which returns a view of a column z[:, 1] or of z[:, ::2])."""
    r = _reshape(a, -1, order=order)
    return r.copy_() if _strided(a, order) and isinstance(r, Tracer) and (
        r.base is not None or r is a) else r


def _keeps_layout(flags, order) -> bool:
    """Does np.asarray(a, order=order) return a itself, for an array with these flags?"""
    return order in (None, "K", "A") or (order == "C" and flags.c_contiguous) or (
        order == "F" and flags.f_contiguous)


def _fortran_copy(t):
    """A Fortran-ordered copy of t: the transpose of a C-ordered copy of t's transpose (the
    same memory layout), so later order='A'/'K' reads and views see Fortran order."""
    if t.ndim < 2:
        return t.copy_()
    return F.transpose(F.transpose(t).copy_())


def _like_layout(r, a, order):
    """np.zeros_like & co. lay the result out as the prototype (order 'K', 'A') or as asked:
    a Fortran-ordered one is represented as _fortran_copy makes it."""
    if not isinstance(r, Tracer) or r.ndim < 2 or not isinstance(a, Tracer):
        return r
    if order == "F" or (order in ("A", "K") and _f_contiguous(a) and not _c_contiguous(a)):
        return _fortran_copy(r)
    return r


def _c_contiguous(t) -> bool:
    return not _strided(t, "C")


def _f_contiguous(t) -> bool:
    """Is t laid out in Fortran order (K.T of a C-ordered K): np.asfortranarray returns it
    itself, a view of what it views."""
    if t.base is None and t.arg_strides is None:
        return sum(1 for d in t.shape if d > 1) <= 1
    return bool(t.layout_probe().flags.f_contiguous)


def _strided(t, order="C"):
    """Is t a view of another array that is not contiguous in `order` (z.T, x[:, ::2]), or an
    argument laid out so?"""
    if not isinstance(t, Tracer):
        return False
    if t.base is None:
        if t.arg_strides is None:
            return False
        flags = t.layout_probe().flags
        return not (flags.f_contiguous if order == "F" else flags.c_contiguous)
    flags = t.layout_probe().flags
    return not (flags.f_contiguous if order == "F" else flags.c_contiguous)


def _transposed_upstream(t):
    """Is a transpose (or a reversing slice) among the values t is computed from? Not behind
    a matrix product, whose result NumPy always lays out in C order (X @ H.T). Answers are
    kept per node of the trace, so asking for each argument of many nested grads in a loop
    walks each node once."""
    g = t.ctx.graph
    memo = g.__dict__.setdefault("_transposed_memo", {})
    fortran = g.meta.get("fortran_nodes", ())     # arrays made Fortran-ordered (buffer.py)
    stack = [t.id]
    while stack:
        n = stack[-1]
        if n in memo:
            stack.pop()
            continue
        d = g[n]
        if (d["op"] == "input" and d["attrs"].get("fortran")) or n in fortran or (
                d["op"] == "transpose" and tuple(d["attrs"]["perm"]) != tuple(
                    range(len(d["attrs"]["perm"])))) or (
                d["op"] == "slice" and any(isinstance(k, slice) and (k.step or 1) < 0
                                           for k in d["attrs"]["index"])):
            memo[n] = True
        elif d["op"] == "matmul":
            memo[n] = False
        else:
            todo = [a for a in g.args(n) if a not in memo]
            if todo:
                stack.extend(todo)
                continue
            memo[n] = any(memo[a] for a in g.args(n))
        stack.pop()
    return memo[t.id]


def _kept_by_where(r, where, out, casting, what):
    """A ufunc's result r under where=: out's values where the mask is False (zeros without
    out=; NumPy leaves those entries uninitialized), r cast to out's dtype first
    (np.greater(a, b, out=float_array, where=m) keeps out's floats)."""
    target = out[0] if isinstance(out, tuple) and len(out) == 1 else out
    if target is None:
        return F.where(where, r, F.zeros_like(r))
    value = B.resolve(target)
    if F._dtype_of(value) != F._dtype_of(r):
        _check_cast(r, value, casting, what)
        r = F.cast(r, F._dtype_of(value))
    rest = value if isinstance(value, Tracer) else np.asarray(value, F._dtype_of(r))
    return F.where(where, r, rest)


_NP_CLIP = np.clip     # NumPy's own (np.clip is patched while tracing: _taking_lists)


def _clip(x, a_min=None, a_max=None, out=None, **kw):
    """np.clip, NumPy's ufunc: where= keeps out's values (zeros without out=) where the mask
    is False, dtype= computes in that dtype (its inputs cast same_kind)."""
    where, dtype = kw.pop("where", True), kw.pop("dtype", None)
    casting = kw.get("casting", "same_kind")
    if where is not True:
        r = _kept_by_where(_clip(x, a_min, a_max, dtype=dtype, **kw), where, out, casting,
                           "np.clip(..., out=x)")
        if out is None:
            return r
        _store_out(out, r, "np.clip", casting)
        return out
    if out is not None:
        _store_out(out, _clip(x, a_min, a_max, dtype=dtype, **kw), "np.clip", casting)
        return out
    lo, hi = kw.get("min", a_min), kw.get("max", a_max)
    if isinstance(x, (int, float)) and not isinstance(x, np.generic):
        x = np.asarray(x)    # NumPy makes the clipped value an array: strong, not weak
    if dtype is not None:
        dt = np.dtype(dtype)
        for v in (x, lo, hi):
            if v is not None:
                _check_cast(v, np.empty(0, dt), casting, f"np.clip(..., dtype={dt})")
        x = F.cast(x, dt) if isinstance(B.resolve(x), Tracer) else np.asarray(x, dt)
        lo = lo if lo is None or _weak_number(lo) else (
            F.cast(lo, dt) if isinstance(B.resolve(lo), Tracer) else np.asarray(lo, dt))
        hi = hi if hi is None or _weak_number(hi) else (
            F.cast(hi, dt) if isinstance(B.resolve(hi), Tracer) else np.asarray(hi, dt))
    dt = F._dtype_of(B.resolve(x))
    if dt.kind in "iu":
        # NumPy 2 clips int8 values to Python-int bounds beyond int8's range (as the range)
        info = np.iinfo(dt)
        lo, hi = (min(max(b, info.min), info.max) if type(b) is int else b for b in (lo, hi))
    if lo is not None:
        x = F.maximum(x, lo)
    if hi is not None:
        x = F.minimum(x, hi)
    return x


def _norm(x, ord=None, axis=None, keepdims=False):
    """np.linalg.norm: vector p-norms, and the Frobenius, 1, inf, 2, -2 and nuclear norms of
    matrices (the last three from the singular values)."""
    _static_ord(ord)
    if F._dtype_of(x).kind in "biu":
        x = F.cast(x, np.float64)      # as NumPy: squares of uint8 pixels do not wrap
    nd = len(F._shape_of(x))
    axes = F._axes(x, axis) if axis is not None else tuple(range(nd))
    if ord is None or (ord == "fro" and len(axes) == 2) or (ord == 2 and len(axes) == 1):
        # 0 at x = 0 with derivative 0 there, as in PyTorch (a pairwise distance matrix's
        # diagonal), not sqrt's 0 * inf
        s = F.sum(F.mul(x, x), axis=axes, keepdims=keepdims)
        return F.where(F.eq(s, 0), 0, F.sqrt(s))
    a = F.abs(x)
    if len(axes) == 2 and ord in (1, -1, math.inf, -math.inf):
        r, c = F._norm_axes(axis, nd, "norm") if axis is not None else axes
        s = F.sum(a, axis=r if ord in (1, -1) else c, keepdims=True)
        pick = F.max if ord in (1, math.inf) else F.min
        return pick(s, axis=(r, c), keepdims=keepdims)
    if len(axes) == 2 and ord in (2, -2, "nuc"):
        rc = F._norm_axes(axis, nd, "norm") if axis is not None else axes
        return LD.singular_value_norm(x, ord, rc, keepdims)
    if len(axes) != 1 or isinstance(ord, str):
        raise UnsupportedError(f"np.linalg.norm with ord={ord!r} over {len(axes)} axes"
                               f"{_at(user_where())}; supported: vector p-norms and the "
                               "matrix norms None, 'fro', 'nuc', 1, -1, 2, -2, inf, -inf")
    if ord == math.inf:
        return F.max(a, axis=axes, keepdims=keepdims)
    if ord == -math.inf:
        return F.min(a, axis=axes, keepdims=keepdims)
    if ord == 0:
        return F.cast(C.count_nonzero(x, axes, keepdims), F.result_dtype(x, 1.0))
    if ord == 1:
        return F.sum(a, axis=axes, keepdims=keepdims)
    return F.power(F.sum(F.power(a, ord), axis=axes, keepdims=keepdims), 1.0 / ord)


def _average(a, axis=None, weights=None, returned=False, keepdims=False):
    """np.average, with returned= (the average and the sum of the weights, broadcast to its
    shape) and keepdims="""
    if F._dtype_of(a).kind not in "fc":
        a = F.cast(a, np.float64)
    r, scl = _weighted_average(a, axis, weights)
    if keepdims:
        shape = F._shape_of(a)
        axes = F._axes(a, axis)
        kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
        r = F.reshape(r, kept)
        scl = F.reshape(scl, kept) if F._shape_of(scl) else scl
    if not returned:
        return r
    scl = F.broadcast_to(F.cast(scl, F._dtype_of(r)) if isinstance(scl, Tracer) else
                         np.asarray(scl, F._dtype_of(r)), F._shape_of(r))
    return r, F.mul(scl, 1) if isinstance(scl, Tracer) else np.array(scl)


def _weighted_average(a, axis, weights):
    """(average, sum of the weights)"""
    if weights is None:
        r = F.mean(a, axis)
        n = int(math.prod([F._shape_of(a)[i] for i in F._axes(a, axis)]))
        return r, np.asarray(n, F._dtype_of(r))
    wshape = tuple(np.shape(weights)) if not hasattr(weights, "shape") else tuple(weights.shape)
    ashape = tuple(np.shape(a)) if not hasattr(a, "shape") else tuple(a.shape)
    if wshape != ashape:
        # as NumPy: 1-D weights of the length of `axis` weigh along that axis
        if axis is None:
            raise ShapeError("np.average: weights differ in shape from the array; give axis")
        axes = tuple(axis) if isinstance(axis, (tuple, list)) else (int(axis),)
        axes = tuple(ax % len(ashape) for ax in axes)
        if wshape != tuple(ashape[ax] for ax in axes):
            raise ShapeError(f"np.average: weights of shape {wshape} do not fit axis {axis} "
                             f"of an array of shape {ashape}")
        order = sorted(range(len(axes)), key=lambda k: axes[k])
        if order != list(range(len(axes))):
            weights = F.transpose(weights, tuple(order))
        weights = F.reshape(weights, tuple(d if k in axes else 1
                                           for k, d in enumerate(ashape)))
    scl = F.sum(F.mul(F.ones_like(a), weights), axis)
    w = B.resolve(weights)
    if not isinstance(w, Tracer) and np.any(np.sum(
            np.broadcast_to(np.asarray(w), F._shape_of(a)), axis=axis) == 0):
        raise ZeroDivisionError(f"Weights sum to zero, can't be normalized{_at(user_where())} "
                                "(np.average, as NumPy)")
    return F.div(F.sum(F.mul(a, weights), axis), scl), scl


def _concatenate(arrays, axis=0, out=None, dtype=None, casting=None):
    _no_out("concatenate", out)
    if axis is None:
        arrays, axis = [F.ravel(a) for a in arrays], 0
    r = F.concatenate(arrays, axis)
    return F.cast(r, dtype) if dtype is not None else r


def _stack(arrays, axis=0, out=None, dtype=None, casting=None):
    _no_out("stack", out)
    r = F.stack(arrays, axis)
    return F.cast(r, dtype) if dtype is not None else r


def _where(condition, *xy):
    if len(xy) != 2:
        _data_dependent("np.where(condition) with one argument")
    return F.where(condition, *xy)


def _data_dependent(what):
    raise UnsupportedError(
        f"{what} returns indices whose number depends on the data{_at(user_where())}: adjit "
        "traces arrays of known shapes. Use np.where(condition, x, y) to select elementwise, "
        "or np.sum(np.where(condition, x, 0)) (np.mean: divided by np.sum(condition)) to "
        "reduce over the selected elements")


def _einsum(subscripts, *operands, optimize=False, **kw):
    _no_out("einsum", kw.pop("out", None))
    dtype, casting = kw.pop("dtype", None), kw.pop("casting", "safe")
    kw.pop("order", None)             # layouts are free
    if kw:
        _unsupported(f"einsum with arguments {sorted(kw)}")
    if not isinstance(subscripts, str):
        subscripts, operands = _interleaved((subscripts,) + operands)
    if dtype is not None:             # NumPy computes in dtype, its operands cast by casting=
        dt = np.dtype(dtype)
        for op in operands:
            _check_cast(op, np.empty(0, dt), casting, "np.einsum(..., dtype=)")
        operands = tuple(F.cast(op, dt) if isinstance(B.resolve(op), Tracer)
                         else np.asarray(op, dt) for op in operands)
    return F.einsum(subscripts, *operands)


def _interleaved(args):
    """np.einsum(a, [0, 1], b, [1, 2], [0, 2]): the subscript string and the operands."""
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

    def sub(lst):
        try:
            return "".join("..." if k is Ellipsis else letters[int(k)] for k in lst)
        except (TypeError, ValueError, IndexError):
            raise ShapeError(f"np.einsum: subscripts must be integers in [0, 52) or Ellipsis, "
                             f"got {lst!r}{_at(user_where())}") from None
    ops, subs = list(args[0::2]), list(args[1::2])
    out = None
    if len(ops) > len(subs):          # a trailing output list
        out = sub(ops.pop())
    if len(ops) != len(subs):
        raise ShapeError(f"np.einsum: operands and subscript lists must alternate"
                         f"{_at(user_where())}")
    spec = ",".join(sub(s) for s in subs) + ("->" + out if out is not None else "")
    return spec, tuple(ops)


def _require(a, dtype=None, requirements=None, *, like=None):
    """np.require: a in dtype; the layout flags ('C', 'F', 'A', 'W', 'O', 'E') ask nothing of
    a traced value but 'O' and 'E', a new array, as in NumPy."""
    r = F.cast(a, dtype) if dtype is not None else a
    req = {str(q).upper()[:1] for q in ((requirements,) if isinstance(requirements, str)
                                        else requirements or ())}
    if r is a and isinstance(r, Tracer) and (
            req & {"O", "E"} or ("F" in req and r.ndim > 1 and not _f_contiguous(r)) or
            ("C" in req and _strided(r))):
        r = r.copy_()       # NumPy copies to give the layout asked for
    return r


def _nditer(orig):
    """np.nditer(x) of an array made inside the function (or a traced one): its elements as
    0-d values in NumPy's memory order, read when iterated (traced writes made meanwhile are
    seen, as NumPy's iterator reads memory then); other uses go to NumPy."""
    def nditer(op, *args, **kwargs):
        if args or kwargs or not isinstance(op, (B.Buffer, Tracer)):
            return orig(op, *args, **kwargs)
        shape = tuple(op.shape)
        plain = np.ndarray.view(op, np.ndarray) if isinstance(op, B.Buffer) else \
            np.empty(shape, np.int8)
        idx = np.empty_like(plain, dtype=np.intp)       # op's layout, C-order positions in it
        idx[...] = np.arange(idx.size).reshape(shape)
        order = [int(i) for i in orig(idx)]
        return (op.reshape(-1)[i] for i in order)
    return nditer


def _as_strided(orig):
    """as_strided of an array made inside the function: a view of it that sees later traced
    writes (NumPy's would read the memory behind adjit's back)."""
    @functools.wraps(orig)
    def as_strided(x, *args, **kwargs):
        r = orig(x, *args, **kwargs)
        views = B.views_of_buffers(r, x) if isinstance(x, B.Buffer) else None
        return views if views is not None else r
    return as_strided


def _requiring(orig):
    @functools.wraps(orig)
    def require(a, dtype=None, requirements=None, *, like=None):
        if _holds_tracer(a):
            return _require(B.resolve(a), dtype, requirements)
        return orig(a, dtype, requirements, like=like)
    return require


def _apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """np.apply_along_axis of a traced array: func1d is called on each 1-d slice, as NumPy
    does, and the results are stacked where the axis was (up to _VECTORIZE_MAX calls)."""
    arr = B.resolve(arr)
    shape = tuple(F._shape_of(arr))
    where = _at(user_where())
    if not -len(shape) <= axis < len(shape):
        raise ShapeError(f"np.apply_along_axis: axis {axis} is out of bounds for an array of "
                         f"{len(shape)} dimensions{where}")
    axis %= len(shape)
    outer = shape[:axis] + shape[axis + 1:]
    n = int(math.prod(outer))
    if n == 0:
        raise ShapeError(f"np.apply_along_axis over an array of shape {shape}{where}: NumPy "
                         "cannot apply it when an iteration dimension is 0")
    if n > _VECTORIZE_MAX:
        raise UnsupportedError(
            f"np.apply_along_axis over {n} slices of a traced array{where}: adjit unrolls it "
            f"into one call per slice, up to {_VECTORIZE_MAX}. Write the function on the "
            "whole array with axis= arguments instead (NumPy's reductions take axis)")
    moved = C.moveaxis(arr, axis, -1)
    res = [_strong_array(func1d(moved[idx], *args, **kwargs)) for idx in np.ndindex(*outer)]
    rshape = tuple(F._shape_of(res[0]))
    if any(tuple(F._shape_of(r)) != rshape for r in res):
        raise ShapeError(f"np.apply_along_axis{where}: the function returned results of "
                         "different shapes for different slices")
    out = F.reshape(F.stack(res, 0), outer + rshape)
    k = len(rshape)
    if k:       # the result's own axes take the place of the axis applied along
        m = len(outer)
        out = F.transpose(out, tuple(range(axis)) + tuple(range(m, m + k)) +
                          tuple(range(axis, m)))
    return out


def _ix(*args):
    """np.ix_ with traced index vectors (K[np.ix_(tr, tr)] with tr an integer argument):
    each reshaped to its own axis, as NumPy's; a traced boolean vector has no static size."""
    out, nd = [], len(args)
    for k, a in enumerate(args):
        a = B.resolve(a)
        if isinstance(a, Tracer):
            if a.ndim != 1:
                raise ValueError("Cross index must be 1 dimensional")
            if a.dtype == np.bool_:
                raise UnsupportedError(f"np.ix_ of a traced boolean mask{_at(user_where())}: "
                                       "the number of positions it keeps depends on its "
                                       "values; pass integer positions")
            out.append(F.reshape(a, (1,) * k + (-1,) + (1,) * (nd - k - 1)))
        else:       # NumPy's own for one vector (booleans, empty lists), on axis k
            out.append(np.ix_(a)[0].reshape((1,) * k + (-1,) + (1,) * (nd - k - 1)))
    return tuple(out)


def _bincount(x, weights=None, minlength=0):
    """np.bincount(labels, weights=w) with traced weights: a scatter-add of w into
    max(labels) + 1 bins (float64, as NumPy). Traced labels have no static length."""
    if _holds_tracer(x):
        raise UnsupportedError(
            f"np.bincount of traced integers{_at(user_where())}: its length, max(x) + 1, "
            "depends on their values (minlength only bounds it from below). Give the length "
            "yourself: counts = np.zeros(n); np.add.at(counts, x, weights) (or 1 for plain "
            "counts)")
    x = np.asarray(x)
    n = len(np.bincount(x, minlength=minlength))    # NumPy's own checks of the labels
    if weights is None:
        return np.bincount(x, minlength=minlength)
    w = B.resolve(weights)
    if tuple(F._shape_of(w)) != x.shape:
        raise ShapeError(f"np.bincount: the weights have shape {tuple(F._shape_of(w))}, the "
                         f"labels {x.shape}; they must be equal{_at(user_where())}")
    w = F.cast(w, np.float64) if isinstance(w, Tracer) else np.asarray(w, np.float64)
    return F.scatter_add(F.reshape(w, (-1,)), [x.astype(np.intp)], (("a", 0),), (n,))


def _matvec(x1, x2):
    """np.matvec: (..., m, n) times (..., n) -> (..., m)."""
    return F.squeeze(F.matmul(x1, F.expand_dims(x2, -1)), -1)


def _vecmat(x1, x2):
    """np.vecmat: (..., n) times (..., n, m) -> (..., m) (real arrays: no conjugate)."""
    return F.squeeze(F.matmul(F.expand_dims(x1, -2), x2), -2)


def _poly_pair(a1, a2, what):
    """The coefficient vectors of np.polyadd / polysub, the shorter padded with leading 0s."""
    a1, a2 = (B.resolve(a) if _holds_tracer(a) else np.asarray(a) for a in (a1, a2))
    if len(F._shape_of(a1)) != 1 or len(F._shape_of(a2)) != 1:
        _unsupported(f"{what} of coefficient arrays that are not 1-d")
    n1, n2 = F._shape_of(a1)[0], F._shape_of(a2)[0]
    n = max(n1, n2)
    return C.pad(a1, (n - n1, 0)), C.pad(a2, (n - n2, 0))


def _polyadd(a1, a2):
    return F.add(*_poly_pair(a1, a2, "polyadd"))


def _polysub(a1, a2):
    return F.sub(*_poly_pair(a1, a2, "polysub"))


def _polymul(a1, a2):
    a1, a2 = (B.resolve(a) if _holds_tracer(a) else np.asarray(a) for a in (a1, a2))
    if len(F._shape_of(a1)) != 1 or len(F._shape_of(a2)) != 1:
        _unsupported("polymul of coefficient arrays that are not 1-d")
    return C.convolve(a1, a2)


def _apply_over_axes(func, a, axes):
    """np.apply_over_axes: func(a, axis) for each axis in turn, the axis kept."""
    a = B.resolve(a)
    nd = len(F._shape_of(a))
    for axis in np.atleast_1d(np.asarray(axes)).tolist():
        axis = axis + nd if axis < 0 else axis
        r = func(a, axis)
        if len(F._shape_of(r)) == nd:
            a = r
        elif len(F._shape_of(r)) == nd - 1:
            a = F.expand_dims(r, axis)
        else:
            raise ValueError("function is not returning an array of the correct shape")
    return a


def _dot(a, b, out=None):
    _no_out("dot", out)
    na, nb = len(F._shape_of(a)), len(F._shape_of(b))
    if (na > 2 or nb > 2) and na and nb:
        # np.dot of N-d arrays sums over a's last axis and b's second-to-last
        return C.tensordot(a, b, ([-1], [-2 if len(F._shape_of(b)) > 1 else -1]))
    return F.dot(a, b)


def _rot90(m, k=1, axes=(0, 1)):
    k %= 4
    a0, a1 = axes
    if k == 0:
        return m
    if k == 2:
        return F.flip(F.flip(m, a0), a1)
    return F.flip(F.swapaxes(m, a0, a1), a0) if k == 1 else F.swapaxes(F.flip(m, a0), a0, a1)


def _append(arr, values, axis=None):
    if axis is None:
        return F.concatenate([F.ravel(arr), F.ravel(values)], 0)
    return F.concatenate([arr, values], axis)


def _median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """np.median; overwrite_input lets NumPy sort in place, the median is the same (out= is
    stored by array_function)."""
    if out is not None:
        raise UnsupportedError(f"np.median with a positional out{_at(user_where())}: pass "
                               "out=... by keyword, or assign the result")
    return C.median(a, axis, keepdims)


FUNCTIONS = {
    np.sum: _sum, np.mean: _mean, np.max: _max, np.amax: _max, np.min: _min,
    np.amin: _min, np.var: _var, np.std: _std, np.dot: _dot, np.matmul: F.matmul,
    np.vdot: lambda a, b: F.sum(F.mul(F.ravel(a), F.ravel(b))), np.outer: F.outer,
    np.inner: C.inner, np.transpose: F.transpose, np.reshape: _reshape,
    np.where: _where, np.nonzero: lambda a: _data_dependent("np.nonzero"),
    np.argwhere: lambda a: _data_dependent("np.argwhere"),
    np.flatnonzero: lambda a: _data_dependent("np.flatnonzero"), np.clip: _clip, np.squeeze: F.squeeze, np.expand_dims: F.expand_dims,
    np.broadcast_to: F.broadcast_to, np.concatenate: _concatenate, np.stack: _stack,
    np.hstack: C.hstack, np.vstack: C.vstack, np.dstack: C.dstack,
    np.column_stack: C.column_stack, np.atleast_1d: C.atleast_1d, np.atleast_2d: C.atleast_2d,
    np.atleast_3d: C.atleast_3d, np.split: C.split, np.array_split: C.array_split,
    np.hsplit: C.hsplit, np.vsplit: C.vsplit, np.dsplit: C.dsplit, np.moveaxis: C.moveaxis,
    np.rollaxis: C.rollaxis,
    np.ediff1d: C.ediff1d, np.choose: C.choose, np.resize: C.resize,
    np.swapaxes: F.swapaxes, np.ravel: lambda a, order="C": _ravel(a, order),
    np.take_along_axis: F.take_along_axis,
    np.linalg.norm: _norm, np.zeros_like: F.zeros_like, np.ones_like: F.ones_like,
    np.empty_like: F.zeros_like, np.full_like: F.full_like, np.average: _average,
    np.shape: lambda x: x.shape, np.ndim: lambda x: x.ndim, np.size: lambda x: x.size,
    np.result_type: lambda *xs: F.result_dtype(*xs),
    np.abs: F.abs, np.round: F.round_, np.around: F.round_, np.cumsum: _cumsum,
    np.cumprod: _cumprod, np.prod: _prod, np.sort: C.sort, np.argsort: F.argsort,
    # overwrite_input lets NumPy sort in place: the median is the same (no input is changed
    # in a traced program)
    np.median: _median, np.ptp: C.ptp, np.roll: N.roll, np.pad: C.pad, np.take: C.take,
    np.diff: C.diff, np.tensordot: C.tensordot, np.kron: C.kron, np.triu: C.triu,
    np.tril: C.tril, np.linalg.matrix_power: C.matrix_power, np.convolve: C.convolve,
    np.correlate: C.correlate, np.nansum: C.nansum, np.nanmean: C.nanmean,
    np.nanmax: C.nanmax, np.nanmin: C.nanmin, np.count_nonzero: C.count_nonzero,
    np.any: lambda a, axis=None, out=None, keepdims=False, *, where=True: _any_all(
        C.any_, a, axis, out, keepdims, where),
    np.all: lambda a, axis=None, out=None, keepdims=False, *, where=True: _any_all(
        C.all_, a, axis, out, keepdims, where), np.copy: lambda a, order="K", subok=False: a.copy(order),
    np.append: _append,
    np.rot90: _rot90,
    np.flip: F.flip, np.argmax: _argmax, np.argmin: functools.partial(_argmax, neg=True),
    np.diag: F.diag, np.diagonal: F.diagonal, np.trace: F.trace_, np.tile: F.tile,
    np.ix_: _ix, np.repeat: F.repeat, np.einsum: _einsum, np.fliplr: lambda x: F.flip(x, 1),
    np.flipud: lambda x: F.flip(x, 0),
}
FUNCTIONS.update({np.polyval: C.polyval, np.cross: C.cross,
                  np.apply_along_axis: _apply_along_axis, np.bincount: _bincount,
                  np.polyadd: _polyadd, np.polysub: _polysub, np.polymul: _polymul,
                  np.apply_over_axes: _apply_over_axes})


def _full_shape(a, value, dtype, shape):
    """np.full_like(a, value, shape=shape): a new array of that shape with a's dtype."""
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    dtype = np.dtype(dtype or F._dtype_of(a))
    if isinstance(value, Tracer):
        return F.broadcast_to(F.cast(value, dtype), shape).copy_()
    return B.Buffer(np.full(shape, value, dtype))


def _argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    if order is not None:
        raise UnsupportedError(f"np.argsort with order={order!r}{_at(user_where())}")
    return F.argsort(a, axis)   # always stable, which every kind= allows


# NumPy's own parameter names and positions (np.size(x, 1), np.full_like(x, fill_value=0))
FUNCTIONS.update({
    np.size: lambda a, axis=None: a.size if axis is None else F._shape_of(a)[axis],
    np.full_like: lambda a, fill_value, dtype=None, order="K", subok=True, shape=None:
        _like_layout(F.full_like(a, fill_value, dtype), a, order) if shape is None
        else _full_shape(a, fill_value, dtype, shape),
    np.zeros_like: lambda a, dtype=None, order="K", subok=True, shape=None:
        _like_layout(F.zeros_like(a, dtype), a, order) if shape is None
        else _full_shape(a, 0, dtype, shape),
    np.ones_like: lambda a, dtype=None, order="K", subok=True, shape=None:
        _like_layout(F.ones_like(a, dtype), a, order) if shape is None
        else _full_shape(a, 1, dtype, shape),
    np.swapaxes: lambda a, axis1, axis2: F.swapaxes(a, axis1, axis2),
    np.argsort: _argsort, np.sort: lambda a, axis=-1, kind=None, order=None, *, stable=None:
        C.sort(a, axis, kind, order),
    np.broadcast_to: lambda array, shape, subok=False: F.broadcast_to(array, shape),
    np.shape: lambda a: F._shape_of(a), np.ndim: lambda a: len(F._shape_of(a)),
})
FUNCTIONS[np.empty_like] = FUNCTIONS[np.zeros_like]


def _isin(element, test_elements, assume_unique=False, invert=False, *, kind=None):
    """np.isin with traced values (a mask, no gradient): against constant test elements by a
    binary search of their sorted distinct values (O(n log m)), against traced ones by
    comparing every pair. NaN is in nothing, as in NumPy."""
    x = B.resolve(element)
    t = B.resolve(test_elements)
    if isinstance(t, Tracer) or (isinstance(t, (list, tuple)) and _holds_tracer(t)):
        tt = np.reshape(np.array(t), (-1,))
        hit = np.any(np.equal(np.expand_dims(x, -1), tt), axis=-1)
    else:
        table = np.unique(_originals.get("asarray", np.asarray)(t).ravel())
        if table.size == 0:
            hit = np.zeros(np.shape(x), bool)
        else:
            at = np.minimum(np.searchsorted(table, x), table.size - 1)
            hit = np.equal(F.lift(table, table.dtype, at.ctx)[at], x)
    return np.logical_not(hit) if invert else hit


FUNCTIONS[np.isin] = _isin


def _indices_from(name, make):
    def fn(arr, *args, **kwargs):
        shape = F._shape_of(arr)
        if len(shape) < 2 or (name == "diag_indices_from" and len(set(shape)) != 1) or \
                (name != "diag_indices_from" and len(shape) != 2):
            raise ShapeError(f"np.{name}: the array of shape {tuple(shape)} is not a square "
                             f"{'' if name == 'diag_indices_from' else '2-d '}array"
                             f"{_at(user_where())}")
        return make(shape, *args, **kwargs)
    return fn


# positions that depend on the shape alone (K[np.diag_indices_from(K)] += s ** 2)
FUNCTIONS.update({
    np.diag_indices_from: _indices_from("diag_indices_from",
                                        lambda sh: np.diag_indices(sh[0], len(sh))),
    np.triu_indices_from: _indices_from("triu_indices_from",
                                        lambda sh, k=0: np.triu_indices(sh[-2], k, sh[-1])),
    np.tril_indices_from: _indices_from("tril_indices_from",
                                        lambda sh, k=0: np.tril_indices(sh[-2], k, sh[-1])),
})
# adjit's arrays are real (complex arguments are refused): the real part is the array, as
# NumPy's np.real of a real array is a view of it, and the imaginary part is zero
FUNCTIONS.update({np.real: lambda x: x, np.imag: F.zeros_like,
                  np.iscomplexobj: lambda x: False, np.isrealobj: lambda x: True,
                  np.isposinf: lambda x, out=None: F.eq(x, np.inf),
                  np.isneginf: lambda x, out=None: F.eq(x, -np.inf),
                  np.isreal: lambda x: F.ones_like(x, dtype=np.bool_),
                  np.iscomplex: lambda x: F.zeros_like(x, dtype=np.bool_),
                  # numpy.polynomial's classes take their coefficients' type with it
                  np.common_type: lambda *arrays: np.common_type(*[
                      np.empty(0, a.dtype) if hasattr(a, "dtype") else a for a in arrays])})
FUNCTIONS.update({
    np.cov: S.cov, np.corrcoef: S.corrcoef, np.quantile: S.quantile,
    np.percentile: S.percentile, np.nanvar: S.nanvar, np.nanstd: S.nanstd,
    np.nanargmax: S.nanargmax, np.nanargmin: S.nanargmin,
    np.nanquantile: S.nanquantile,
    np.nanpercentile: S.nanpercentile,
    np.interp: N.interp, np.sinc: N.sinc, np.nan_to_num: N.nan_to_num,
    np.select: N.select,
    np.piecewise: N.piecewise, np.meshgrid: N.meshgrid, np.linalg.multi_dot: N.multi_dot,
    np.isclose: N.isclose, np.allclose: N.refuse_python_bool("allclose"),
    np.fix: N.fix, np.linspace: N.linspace, np.searchsorted: N.searchsorted,
    np.digitize: N.digitize,
    np.gradient: N.gradient, np.vander: N.vander,
    np.unravel_index: N.unravel_index,
    # a full sort meets partition's contract (the k-th element in place, none larger before
    # it): np.partition(x, k)[k] and sums of [:k] equal NumPy's, the order within may differ
    np.partition: lambda a, kth, axis=-1, kind=None, order=None: C.sort(a, axis),
    np.argpartition: lambda a, kth, axis=-1, kind=None, order=None: F.argsort(a, axis),
    np.lib.stride_tricks.sliding_window_view: N.sliding_window_view, np.nanprod: N.nanprod, np.nancumsum: N.nancumsum,
    np.nancumprod: N.nancumprod, np.broadcast_arrays: N.broadcast_arrays,
    np.diagflat: N.diagflat, np.delete: N.delete, np.insert: N.insert, np.block: N.block,
    np.nanmedian: S.nanmedian,
    np.logspace: N.logspace, np.geomspace: N.geomspace, np.polyder: N.polyder,
    np.polyint: N.polyint, np.polyfit: N.polyfit, np.i0: N.i0, np.unwrap: N.unwrap,
    np.extract: N.extract, np.real_if_close: N.real_if_close, np.angle: N.angle,
    np.histogram: N.histogram, np.histogram2d: N.histogram2d,
    np.histogramdd: N.histogramdd, np.linalg.tensorsolve: N.tensorsolve,
    np.linalg.tensorinv: N.tensorinv,
    np.linalg.cross: lambda x1, x2, /, *, axis=-1: C.cross(x1, x2, axis=axis),
    np.array_equal: N.refuse_python_bool("array_equal"),
    np.array_equiv: N.refuse_python_bool("array_equiv"),
})
FUNCTIONS.update({np.linalg.inv: LA.inv, np.linalg.solve: LA.solve, np.linalg.det: LA.det,
                  np.linalg.slogdet: LA.slogdet, np.linalg.cholesky: LA.cholesky,
                  np.linalg.eigh: LA.eigh, np.linalg.eigvalsh: LA.eigvalsh})
FUNCTIONS.update({np.linalg.svd: LD.svd, np.linalg.qr: LD.qr, np.linalg.pinv: LD.pinv,
                  np.linalg.lstsq: LD.lstsq, np.linalg.matrix_rank: LD.matrix_rank,
                  np.linalg.cond: LD.cond, np.linalg.eig: LD.eig, np.linalg.eigvals: LD.eigvals,
                  getattr(np.linalg, "svdvals", None): LD.svdvals,
                  # NumPy 2's array-API spelling (positional axes: its signature's own)
                  getattr(np.linalg, "tensordot", None): C.tensordot})


def _float_norm_input(x):
    """Norms of integer arrays are float64, as in NumPy."""
    return F.cast(x, np.float64) if F._dtype_of(x).kind in "biu" else x


def _static_ord(ord):
    if isinstance(B.resolve(ord), Tracer):
        B.resolve(ord)._concrete("the norm's ord= (which norm to take)")


def _vector_norm(x, axis=None, keepdims=False, ord=2):
    """np.linalg.vector_norm: the axes (all by default, or a tuple) taken as one vector."""
    _static_ord(ord)
    x = _float_norm_input(x)
    shape = F._shape_of(x)
    axes = tuple(range(len(shape))) if axis is None else F._axes(x, axis)
    rest = tuple(i for i in range(len(shape)) if i not in axes)
    if len(axes) != 1:
        # the axes moved to the end and flattened: one vector per remaining index
        x = F.reshape(F.transpose(x, rest + axes), tuple(shape[i] for i in rest) + (-1,))
    r = _norm(x, ord, -1 if len(axes) != 1 else axes[0])
    if keepdims:
        r = F.reshape(r, tuple(1 if i in axes else d for i, d in enumerate(shape)))
    return r


def _cumulative(fn):
    def cumulative(x, axis=None, dtype=None, out=None, include_initial=False):
        _no_out(fn.__name__, out)
        r = fn(x, axis=axis, dtype=dtype)
        if include_initial:
            ax = (axis if axis is not None else 0) % len(F._shape_of(r))
            shape = list(F._shape_of(r))
            shape[ax] = 1
            first = F.zeros_like(r) if fn is _cumsum else F.ones_like(r)
            r = F.concatenate([F.slice_(first, tuple(slice(0, 1) if i == ax else slice(None)
                                                       for i in range(len(shape)))), r], ax)
        return r
    return cumulative


# names that come and go between NumPy versions
for _name, _fn in [("row_stack", C.vstack), ("trapezoid", C.trapezoid), ("trapz", C.trapezoid),
                   ("vecdot", lambda x1, x2, axis=-1: F.sum(F.mul(x1, x2), axis)),
                   ("matrix_transpose", F.swap_last), ("permute_dims", F.transpose),
                   ("cumulative_sum", _cumulative(_cumsum)),
                   ("cumulative_prod", _cumulative(_cumprod)), ("unstack", N.unstack),
                   ("matvec", _matvec), ("vecmat", _vecmat)]:
    if hasattr(np, _name):
        # np.vecdot is a ufunc in NumPy 2: it dispatches through __array_ufunc__
        table = UFUNCS if isinstance(getattr(np, _name), np.ufunc) else FUNCTIONS
        table[getattr(np, _name)] = _fn
for _name, _fn in [("vector_norm", _vector_norm),
                   ("matrix_norm", lambda x, keepdims=False, ord="fro": _norm(
                       _float_norm_input(x), ord, (-2, -1), keepdims)),
                   ("vecdot", lambda x1, x2, axis=-1: F.sum(F.mul(x1, x2), axis)),
                   ("matrix_transpose", F.swap_last), ("outer", F.outer),
                   ("matmul", F.matmul),
                   # the array API's linalg.trace and linalg.diagonal work on the last two axes
                   ("trace", lambda x, offset=0, dtype=None: F.trace_(x, offset, -2, -1, dtype)),
                   ("diagonal", lambda x, offset=0: F.diagonal(x, offset, -2, -1))]:
    if hasattr(np.linalg, _name):
        FUNCTIONS[getattr(np.linalg, _name)] = _fn
if hasattr(np, "astype"):
    FUNCTIONS[np.astype] = lambda x, dtype, **kw: F.cast(x, dtype)
FUNCTIONS = {k: v for k, v in FUNCTIONS.items() if v is not None}


def _loop_of(ufunc, dt):
    """Does ufunc have a loop computing in dt throughout (inputs and output of dtype dt)?"""
    c = dt.char
    return any(t == c * ufunc.nin + "->" + c * ufunc.nout for t in ufunc.types)


def _weak_number(x):
    return isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)


# why some NumPy functions cannot take traced arrays, and what to write instead
_UNSUPPORTED_WHY = {
    "unique": ": its result's length depends on the values (the number of distinct ones), "
              "which are not known while tracing. For a group-by over labels, compute "
              "u, inv = np.unique(labels, return_inverse=True) outside the function, pass inv "
              "in and sum by group with s = np.zeros(k); np.add.at(s, inv, x) (k = len(u): a "
              "static argument or a constant), or close over the labels (a global or closure "
              "NumPy array is a constant: np.unique of it is NumPy's); np.sort keeps every "
              "element",
}


def _unsupported(name):
    why = _UNSUPPORTED_WHY.get(name)
    if why is not None:
        raise UnsupportedError(f"np.{name} of a traced array{_at_lib(user_where())}{why}")
    raise UnsupportedError(
        f"np.{name} is not supported by adjit{_at_lib(user_where())}. Write it with supported "
        "NumPy operations (see adjit.frontend.numpy_api.FUNCTIONS and UFUNCS), or with "
        "adjit.where for data-dependent choices.")


def _loop_dtypes(ufunc, inputs):
    """(input dtypes..., output dtype) of the NumPy loop for these arguments (Python numbers
    and adjit's Python-number arguments weak), or None where NumPy cannot say."""
    from .functions import _is_weak
    if ufunc.nout != 1:
        return None
    spec = []
    for x in inputs:
        x = B.resolve(x) if isinstance(x, B.Buffer) else x
        if isinstance(x, Tracer):
            spec.append(type(_weak_value(x)) if _is_weak(x) else x.dtype)
        elif isinstance(x, bool):
            spec.append(np.dtype(bool))
        elif isinstance(x, (int, float, complex)) and not isinstance(x, np.generic):
            spec.append(type(x))
        elif isinstance(x, (np.ndarray, np.generic)):
            spec.append(x.dtype)
        else:
            return None
    try:
        loop = ufunc.resolve_dtypes(tuple(spec) + (None,))
    except (TypeError, ValueError, np.exceptions.DTypePromotionError):
        return None
    if any(dt.kind not in "biuf" for dt in loop):
        return None
    return loop


def _weak_value(t):
    """A Python number of the kind of weak tracer t (its dtype's kind)."""
    return {"b": True, "i": 0, "u": 0, "f": 0.0, "c": 0j}[t.dtype.kind]


def array_ufunc(ufunc, method, inputs, kwargs):
    if CX.involves(inputs):
        return CX.array_ufunc(ufunc, method, inputs, kwargs)
    # checked where results are stored; NumPy's reductions and accumulations store into out=
    # unsafely (np.add.reduce(x, out=an_int_array) truncates)
    casting = kwargs.pop("casting", "unsafe" if method in ("reduce", "accumulate")
                         else "same_kind")
    for k in ("order", "subok"):
        kwargs.pop(k, None)   # layouts are free
    where = kwargs.pop("where", True)
    if method == "reduce" and (where is not True or kwargs.get("initial") is not None):
        # NumPy's where= selects the reduced elements (the rest count as the identity, or as
        # initial= where the ufunc has none); initial= also joins the reduction
        initial = kwargs.pop("initial", None)
        fill = _IDENTITY.get(ufunc, initial)
        if fill is None:
            raise UnsupportedError(f"np.{ufunc.__name__}.reduce(..., where=...) needs "
                                   f"initial=..., as in NumPy{_at(user_where())}")
        x = inputs[0]
        if where is not True:
            x = F.where(where, x, fill)
        r = array_ufunc(ufunc, method, (x,), kwargs)
        if initial is None:
            return r
        # NumPy casts initial to the reduction's dtype (np.add.reduce(ints, initial=0.5))
        return C.join_initial(r, initial,
                              lambda a, b: array_ufunc(ufunc, "__call__", (a, b), {}))
    if where is not True and method != "__call__":
        _unsupported(f"{ufunc.__name__}.{method} with where=")
    if where is not True:
        # np.divide(1, x, out=z, where=x != 0): z where the mask is False (zeros without out=;
        # NumPy leaves those entries uninitialized)
        out = kwargs.pop("out", None)
        r = _kept_by_where(array_ufunc(ufunc, method, inputs, kwargs), where, out, casting,
                           f"np.{ufunc.__name__}(..., out=x)")
        if out is None:
            return r
        target = out[0] if isinstance(out, tuple) and len(out) == 1 else out
        _store_out(target, r, f"np.{ufunc.__name__}", casting)
        return target
    out = kwargs.pop("out", None)
    if isinstance(out, tuple) and len(out) > 1 and method == "__call__":
        # np.divmod(x, y, out=(q, r)), np.modf(x, out=(f, i)): each result into its array
        rs = array_ufunc(ufunc, method, inputs, dict(kwargs, casting=casting))
        for target, r in reversed(list(zip(out, rs))):   # the first result last: NumPy's
            if target is not None:                        # when two outputs share memory
                _store_out(target, r, f"np.{ufunc.__name__}", casting)
        return tuple(r if t is None else t for t, r in zip(out, rs))
    if out is not None:
        # np.add(a, b, out=a), and a += b on a NumPy array a: stored as x[...] = result
        target = out[0] if isinstance(out, tuple) and len(out) == 1 else out
        if isinstance(target, B.Buffer) and method in ("__call__", "reduce", "accumulate",
                                                       "outer", "reduceat"):
            r = array_ufunc(ufunc, method, inputs, dict(kwargs, casting=casting))
            _check_cast(r, target, casting, f"np.{ufunc.__name__}(..., out=x)")
            target[...] = r
            return target
        if not isinstance(target, Tracer):
            raise UnsupportedError(
                f"np.{ufunc.__name__}(..., out=a) would write traced values into the NumPy "
                f"array a{_at(user_where())} (also what a += traced does when a is a NumPy "
                "array); write a = a + ... instead, or create a inside the function (np.zeros, "
                "np.array(x) or np.copy(x) of a NumPy x: adjit follows those, not x.copy() "
                "of a NumPy array, whose views then also see the writes)")
        if method not in ("__call__", "reduce", "accumulate", "outer", "reduceat"):
            _unsupported(f"{ufunc.__name__}.{method} with out=")
        # np.minimum.accumulate(u, out=u): computed whole (NumPy's buffering gives the same
        # result for these), then stored
        return _store(target, array_ufunc(ufunc, method, inputs, dict(kwargs, casting=casting)),
                      f"np.{ufunc.__name__}.{method}(..., out=x)" if method != "__call__"
                      else f"np.{ufunc.__name__}(..., out=x)", casting)
    if method == "__call__" and ufunc in UFUNCS:
        dtype = kwargs.pop("dtype", None)
        if getattr(np, "vecdot", None) is ufunc and set(kwargs) <= {"axis"}:
            return UFUNCS[ufunc](*inputs, **kwargs)
        if kwargs:
            _unsupported(f"{ufunc.__name__} with arguments {sorted(kwargs)}")
        if dtype is not None and not any(t.endswith(np.dtype(dtype).char * ufunc.nout)
                                         for t in ufunc.types):
            raise TypeError(f"No loop matching the specified signature and casting was found "
                            f"for ufunc {ufunc.__name__}: dtype={np.dtype(dtype)}"
                            f"{_at(user_where())} (as NumPy)")
        if dtype is not None and np.dtype(dtype).kind != "b" and \
                _loop_of(ufunc, np.dtype(dtype)):
            for x in inputs:     # np.add(x, 1.5, dtype=int): NumPy casts inputs same_kind
                _check_cast(x, np.empty(0, np.dtype(dtype)), casting,
                            f"np.{ufunc.__name__}(..., dtype={np.dtype(dtype)})")
            # computed in that dtype, as NumPy does (np.exp(x32, dtype=np.float64), the signed
            # difference np.subtract(a8, b8, dtype=np.int16) of two uint8 images)
            dt = np.dtype(dtype)
            inputs = tuple(F.cast(x, dt) if isinstance(x, Tracer) else
                           x if _weak_number(x) else np.asarray(x).astype(dt) for x in inputs)
        loop = _loop_dtypes(ufunc, inputs) if dtype is None else None
        if loop is not None:
            # the loop NumPy picks for these dtypes: np.fabs(uint16) is float32, square(bool)
            # int8, rint(int) float64, copysign(3, int8) float16
            inputs = tuple(F.cast(x, dt) if isinstance(x, Tracer) and x.dtype != dt else x
                           for x, dt in zip(inputs, loop))
        r = UFUNCS[ufunc](*inputs)
        r = F.cast(r, dtype) if dtype is not None else r
        if loop is not None and isinstance(r, Tracer) and r.dtype != loop[-1]:
            r = F.cast(r, loop[-1])
        if isinstance(r, Tracer):
            r.ctx.weak.discard(r.id)  # np.exp(t) of a Python number is a (strong) np.float64
        # a ufunc always returns a new array
        return r.copy_() if any(r is x for x in inputs) or (
            isinstance(r, Tracer) and r.base is not None) else r
    if method == "at" and len(inputs) > 1:
        # a list of traced positions ([i, j], or one per axis in a tuple) is one index array
        lists = lambda k: B.resolve(_from_nested(k, _originals["asarray"])) \
            if type(k) is list and _holds_tracer(k) else k      # noqa: E731
        k = inputs[1]
        inputs = (inputs[0], tuple(lists(i) for i in k) if type(k) is tuple else lists(k)) + \
            tuple(inputs[2:])
    if method == "at" and ufunc in (np.add, np.subtract):
        return _ufunc_at(ufunc, *inputs)
    if method == "at" and ufunc in UFUNCS and not kwargs and ufunc.nin in (1, 2) and \
            ufunc.nout == 1:
        return _ufunc_at_rounds(ufunc, *inputs)
    if (method == "__call__" and not kwargs and ufunc.__name__ in _SCIPY_SPECIAL
            and getattr(np, ufunc.__name__, None) is not ufunc):
        # the dtype SciPy's own loop search gives these dtypes (its first loop the inputs
        # cast to: beta(x32, 2.0) is float64, huber(1.0, x32) float32); computed in it
        want = _scipy_result_dtype(ufunc, inputs)
        r = _SCIPY_SPECIAL[ufunc.__name__](*[
            F.cast(x, want) if isinstance(x, Tracer) and x.dtype != want and not F._is_weak(x)
            else x for x in inputs])
        return F.cast(r, want) if isinstance(r, Tracer) and r.dtype != want else r
    if ufunc.__name__.endswith("(vectorized)"):
        raise UnsupportedError(
            f"a ufunc made by np.frompyfunc called on traced arrays{_at(user_where())}: use "
            "np.vectorize(f) instead (adjit calls f once per element), or write f with NumPy "
            "operations on whole arrays")
    if getattr(np, ufunc.__name__, None) is not ufunc:
        _unsupported_other(f"the ufunc {ufunc.__name__} (not NumPy's: from scipy.special or "
                           "another library)")
    if method == "reduce" and (ufunc in _REDUCE or ufunc in _ASSOCIATIVE) and \
            set(kwargs) <= {"axis", "keepdims", "dtype"}:
        axis, keepdims = kwargs.get("axis", 0), kwargs.get("keepdims", False)
        x = inputs[0]
        if kwargs.get("dtype") is not None:
            x = F.cast(x, kwargs["dtype"])
            if ufunc in _REDUCE:   # np.add.reduce(a, dtype=np.int8) wraps in int8 as np.sum
                return F.cast(_REDUCE[ufunc](x, axis=axis, keepdims=keepdims), x.dtype)
        if ufunc in _REDUCE:
            return _REDUCE[ufunc](x, axis=axis, keepdims=keepdims)
        return C.fold(UFUNCS[ufunc], x, axis, keepdims, f"np.{ufunc.__name__}.reduce")
    if method == "accumulate" and (ufunc in _ACCUMULATE or ufunc in _ASSOCIATIVE or
                                   ufunc is np.subtract) and \
            set(kwargs) <= {"axis", "dtype"}:
        x, axis = inputs[0], kwargs.get("axis", 0)
        if kwargs.get("dtype") is not None:
            x = F.cast(x, kwargs["dtype"])
            if ufunc in _ACCUMULATE:
                return F.cast(_ACCUMULATE[ufunc](x, axis=axis), x.dtype)
        if ufunc in _ACCUMULATE:
            return _ACCUMULATE[ufunc](x, axis=axis)
        if ufunc is np.subtract:
            if F._dtype_of(x).kind not in "fi":
                _unsupported(f"subtract.accumulate of {F._dtype_of(x)} arrays")
            # ((x0 - x1) - x2) ...: the running sum of x0, -x1, -x2, ... (a - b is a + -b)
            ax = F._norm_axes((axis,), len(F._shape_of(x)), "np.subtract.accumulate")[0]
            n = F._shape_of(x)[ax]
            sign = np.where(np.arange(n) == 0, 1.0, -1.0).astype(F._dtype_of(x)).reshape(
                (-1,) + (1,) * (len(F._shape_of(x)) - ax - 1))
            return F.cumsum(F.mul(x, sign), axis=ax)
        if ufunc in (np.maximum, np.minimum, np.fmax, np.fmin):
            return C.cumulative_extreme(ufunc.__name__, x, axis,
                                        f"np.{ufunc.__name__}.accumulate")
        return C.scan(UFUNCS[ufunc], x, axis, f"np.{ufunc.__name__}.accumulate")
    if method == "reduceat" and (ufunc in _REDUCE or ufunc in _ASSOCIATIVE) and \
            set(kwargs) <= {"axis", "dtype"}:
        return _reduceat(ufunc, *inputs, **kwargs)
    if method == "outer" and ufunc in UFUNCS and ufunc.nin == 2:
        a, b = inputs   # np.add.outer(a, b): a's axes first, then b's
        a = F.reshape(a, tuple(F._shape_of(a)) + (1,) * len(F._shape_of(b)))
        return array_ufunc(ufunc, "__call__", (a, b), kwargs)
    _unsupported(ufunc.__name__ if method == "__call__" else f"{ufunc.__name__}.{method}")


def _reduceat(ufunc, x, indices, axis=0, dtype=None):
    """np.add.reduceat(x, indices, axis) & co. at constant indices: output i reduces
    x[indices[i]:indices[i + 1]] along axis, or is x[indices[i]] where the next index is not
    larger, as NumPy. np.add is one gather and one scatter-add; other ufuncs reduce each
    segment."""
    name = f"np.{ufunc.__name__}.reduceat"
    if _holds_tracer(indices):
        raise UnsupportedError(f"{name} at traced indices{_at(user_where())}: the segments "
                               "must be known when tracing (use np.add.at with labels)")
    x = B.resolve(x)
    if not isinstance(x, Tracer):
        return ufunc.reduceat(np.asarray(x), indices, axis=axis, dtype=dtype)
    if dtype is None:
        # NumPy's loop: np.add of bools and small integers accumulates in int64 (uint64)
        dtype = ufunc.reduceat(np.zeros(1, x.dtype), [0]).dtype
    x = F.cast(x, dtype)
    nd = len(F._shape_of(x))
    ax = F._norm_axes((axis,), nd, name)[0]
    n = F._shape_of(x)[ax]
    idx = np.asarray(indices)
    if idx.ndim != 1 or idx.dtype.kind not in "iu" or not idx.size:
        raise TypeError(f"{name}: indices must be a non-empty 1-d integer array"
                        f"{_at(user_where())}")
    if np.any((idx < 0) | (idx >= n)):
        raise IndexError(f"index {idx[(idx < 0) | (idx >= n)][0]} out-of-bounds in {name} "
                         f"[0, {n}){_at(user_where())} (as NumPy)")
    ends = np.append(idx[1:], n)
    ends = np.where(ends > idx, ends, idx + 1)   # a non-increasing pair takes x[indices[i]]
    pos = np.concatenate([np.arange(a, b) for a, b in zip(idx, ends)]).astype(np.intp)
    seg = np.repeat(np.arange(len(idx)), ends - idx)
    if ufunc is np.add:
        moved = C.moveaxis(x, ax, 0)
        rest = tuple(F._shape_of(moved))[1:]
        r = int(np.prod(rest))
        gathered = F.reshape(F.getitem(moved, pos), (-1,))
        flat = (seg[:, None] * r + np.arange(r)[None, :]).reshape(-1).astype(np.intp)
        out = F.reshape(F.scatter_add(gathered, [flat], (("a", 0),), (len(idx) * r,)),
                        (len(idx),) + rest)
        return C.moveaxis(out, 0, ax)
    if ufunc in (np.maximum, np.minimum, np.fmax, np.fmin):
        # a segment extreme: each segment's first element, then NumPy's own ufunc.at of the
        # rest (registry op extreme_at; ties split as np.maximum.at's)
        moved = C.moveaxis(x, ax, 0)
        rest = tuple(F._shape_of(moved))[1:]
        r = int(np.prod(rest))
        first = F.reshape(F.getitem(moved, idx.astype(np.intp)), (-1,))
        tail = np.ones(pos.size, bool)
        tail[np.r_[0, np.cumsum(ends - idx)[:-1]]] = False
        vals = F.reshape(F.getitem(moved, pos[tail]), (-1,))
        flat = (seg[tail][:, None] * r + np.arange(r)[None, :]).reshape(-1).astype(np.intp)
        out = _extreme_at(ufunc.__name__, first, flat, F.cast(vals, first.dtype)) if \
            flat.size else first
        return C.moveaxis(F.reshape(out, (len(idx),) + rest), 0, ax)
    longest = int((ends - idx).max())
    if len(idx) > _AT_ROUNDS * 4 and ufunc in _IDENTITY and \
            len(idx) * longest <= 4 * max(pos.size, 1):
        # many segments of similar lengths (windows): one (segments, longest) table of them,
        # padded with the ufunc's identity, reduced along its rows
        moved = C.moveaxis(x, ax, 0)
        rest = tuple(F._shape_of(moved))[1:]
        slot = np.arange(pos.size) - np.repeat(np.r_[0, np.cumsum(ends - idx)[:-1]], ends - idx)
        table = np.full((len(idx), longest), pos.size, np.intp)    # pos.size: the identity
        table[seg, slot] = np.arange(pos.size)
        rows = F.getitem(moved, pos)
        ident = F.full_like(F.getitem(rows, slice(0, 1)), _IDENTITY[ufunc])
        padded = F.getitem(F.concatenate([rows, ident], 0), table)
        out = array_ufunc(ufunc, "reduce", (padded,), {"axis": 1})
        return C.moveaxis(F.reshape(out, (len(idx),) + rest), 0, ax)
    if len(idx) > _AT_ROUNDS * 4:
        _unsupported(f"{ufunc.__name__}.reduceat of more than {_AT_ROUNDS * 4} segments of "
                     "lengths this uneven")
    sl = [slice(None)] * nd
    parts = []
    for a, b in zip(idx, ends):
        sl[ax] = slice(int(a), int(b))
        parts.append(array_ufunc(ufunc, "reduce", (F.getitem(x, tuple(sl)),),
                                 {"axis": ax, "keepdims": True}))
    return F.concatenate(parts, ax)


def _ufunc_at(ufunc, a, indices, b=None):
    """np.add.at(a, indices, b): unbuffered, so repeated indices accumulate."""
    if b is None:
        raise UnsupportedError(f"np.{ufunc.__name__}.at needs a value{_at(user_where())}")
    if not isinstance(a, Tracer):
        raise UnsupportedError(
            f"np.{ufunc.__name__}.at(a, ...) would write traced values into the NumPy array a"
            f"{_at(user_where())}; create a inside the function (np.zeros...) or use a + ...")
    traced = F.traced_positions(a, indices)
    if traced is not None:  # labels: np.add.at(counts, y, 1) accumulates, as scatter_add
        arrays, tkey, shape, _ = traced
        val = F._value_for(b, shape, a)
        summed = F.scatter_add(F.neg(val) if ufunc is np.subtract else val, arrays, tkey,
                               a.shape)
        _store(a, F.add(a, summed), f"np.{ufunc.__name__}.at")
        return
    pos, val = F.index_target(a, indices, b)
    flat = pos.reshape(-1)
    if ufunc is np.subtract:
        val = F.neg(val)
    val = F.reshape(val, (-1,))
    if flat.size == 0:
        return
    distinct, inverse = np.unique(flat, return_inverse=True)
    if 4 * distinct.size > a.size or distinct.size > 4096:
        summed = F.scatter_add(val, [flat], (("a", 0),), (a.size,))
        _store(a, F.add(a, F.reshape(summed, a.shape)), f"np.{ufunc.__name__}.at")
        return
    # a few positions of a large array (an element's entries in an assembly loop; one
    # vectorized call with many entries is one scatter_add above): repeats
    # summed first, then those positions read, added to and written like a[key] += v, so a
    # loop of calls writes O(entries) each rather than a full-size array per call
    if distinct.size != flat.size or not np.array_equal(distinct, flat):
        val = F.scatter_add(val, [inverse.reshape(-1)], (("a", 0),), (distinct.size,),
                            unique=distinct.size == flat.size)
    key = np.unravel_index(distinct, a.shape)
    a[key] = a[key] + F.reshape(val, distinct.shape)


_AT_ROUNDS = 64     # rounds (occurrences of one position) ufunc.at unrolls for other ufuncs


def _extreme_at(name, a, pos, v):
    """np.maximum.at(a, pos, v) & co. on flat a: NumPy's own loop (registry op extreme_at)."""
    idx = pos if isinstance(pos, Tracer) else F.lift(np.asarray(pos, np.intp),
                                                     np.dtype(np.intp), a.ctx)
    if not isinstance(v, Tracer):       # a constant value (np.maximum.at(a, labels, 2.0))
        v = F.lift(np.asarray(v, a.dtype), a.dtype, a.ctx)
    return a.ctx.emit("extreme_at", [a, v, idx], {"ufunc": name})


def _ufunc_at_rounds(ufunc, a, indices, b=None):
    """np.maximum.at(a, idx, b) & co. (any other ufunc) at constant positions: unbuffered, as
    NumPy, so a position named k times is updated k times in order. Round r applies the r-th
    occurrence of every position at once (no position repeats within a round)."""
    name = f"np.{ufunc.__name__}.at"
    if not isinstance(a, Tracer):
        raise UnsupportedError(
            f"{name}(a, ...) would write traced values into the NumPy array a"
            f"{_at(user_where())}; create a inside the function (np.zeros...)")
    if (b is None) != (ufunc.nin == 1):
        raise TypeError(f"{name}: {'no' if ufunc.nin == 1 else 'a'} value is expected"
                        f"{_at(user_where())}")
    if F.traced_positions(a, indices) is not None:
        labels = B.resolve(indices)
        if ufunc in (np.maximum, np.minimum, np.fmax, np.fmin) and b is not None and \
                a.ndim == 1 and isinstance(labels, Tracer) and labels.dtype.kind in "iu":
            # a segment max over traced labels (per-class maxima): NumPy's loop takes them
            idx = F.reshape(labels, (-1,))
            vals = F.reshape(F.cast(F.broadcast_to(B.resolve(b), labels.shape), a.dtype),
                             (-1,))
            _store(a, _extreme_at(ufunc.__name__, a, idx, vals), name)
            return
        raise UnsupportedError(
            f"{name} at positions computed from traced values{_at(user_where())}: only "
            "np.add.at and np.subtract.at accumulate at traced labels (and np.maximum.at & "
            "co. at 1-d integer labels into a 1-d array); give constant positions")
    pos, val = F.index_target(a, indices, b if b is not None else 0)
    flat_pos = pos.reshape(-1)
    vals = F.reshape(val, (-1,)) if b is not None else None
    if ufunc in (np.maximum, np.minimum, np.fmax, np.fmin):
        # order-free: one NumPy ufunc.at, however often a position repeats (a segment max)
        _store(a, F.reshape(_extreme_at(ufunc.__name__, F.reshape(a, (-1,)), flat_pos,
                                        F.cast(vals, a.dtype)), a.shape), name)
        return
    # the occurrence number of each entry among the entries naming its position
    order = np.argsort(flat_pos, kind="stable")
    sorted_pos = flat_pos[order]
    first = np.r_[0, np.flatnonzero(np.diff(sorted_pos)) + 1] if sorted_pos.size else \
        np.zeros(0, np.intp)
    occ_sorted = np.arange(sorted_pos.size) - np.repeat(first, np.diff(np.r_[first,
                                                                            sorted_pos.size]))
    occ = np.empty_like(occ_sorted)
    occ[order] = occ_sorted
    rounds = int(occ.max()) + 1 if occ.size else 0
    if rounds > _AT_ROUNDS:
        raise UnsupportedError(
            f"{name} with a position named {rounds} times{_at(user_where())}: adjit applies "
            f"the occurrences of a position one round each, up to {_AT_ROUNDS}. Reduce each "
            "segment first (np.multiply.reduce over a sorted or padded layout), or use "
            "np.add.at, np.maximum.at or np.minimum.at, which take any number")
    flat = F.reshape(a, (-1,))
    for r in range(rounds):
        sel = np.flatnonzero(occ == r)
        tgt = flat_pos[sel]
        cur = F.getitem(flat, tgt)
        new = ufunc(cur) if b is None else ufunc(cur, F.getitem(vals, sel))
        if F._dtype_of(new) != a.dtype:
            if not np.can_cast(F._dtype_of(new), a.dtype, "same_kind"):
                raise TypeError(f"{name}: cannot cast {F._dtype_of(new)} to {a.dtype} "
                                f"according to the rule 'same_kind'{_at(user_where())} (as "
                                "NumPy)")
            new = F.cast(new, a.dtype)
        placed = F.scatter_add(new, [tgt], (("a", 0),), (a.size,))
        mask = np.zeros(a.size, bool)
        mask[tgt] = True
        flat = F.where(mask, placed, flat)
    _store(a, F.reshape(flat, a.shape), name)


def _entr(x):
    """-x log x for x > 0, 0 at 0, -inf below, NaN at NaN (scipy.special.entr)"""
    pos, safe = F.gt(x, 0), F.where(F.gt(x, 0), x, 1.0)
    # at 0 the value 0 with the derivative +inf (-log x - 1), as JAX and PyTorch: sqrt(x)
    return F.where(pos, F.neg(F.mul(x, F.log(safe))),
                   F.where(F.eq(x, 0), F.sqrt(x),
                           F.where(C.isnan(x), x, F.full_like(safe, -np.inf))))


def _rel_entr(x, y):
    """x log(x / y) for x, y > 0, 0 where x == 0 and y >= 0, inf elsewhere
    (scipy.special.rel_entr)"""
    dt = F.result_dtype(x, y, 1.0)      # Python numbers weak: float32 stays float32
    x, y = F.cast(x, dt) if isinstance(x, Tracer) else np.asarray(x, dt), \
        F.cast(y, dt) if isinstance(y, Tracer) else np.asarray(y, dt)
    ok = C.logical_and(F.gt(x, 0), F.gt(y, 0))
    sx, sy = F.where(ok, x, 1.0), F.where(ok, y, 1.0)
    zero = C.logical_and(F.eq(x, 0), F.ge(y, 0))
    # as SciPy's (xsf): log1p near a ratio of 1, log(x) - log(y) where the ratio over- or
    # underflows (a probability that underflowed to a subnormal), else log(x / y)
    ratio = F.div(sx, sy)
    near = C.logical_and(F.gt(ratio, 0.5), F.lt(ratio, 2.0))
    normal = C.logical_and(F.gt(ratio, np.finfo(dt).tiny), F.lt(ratio, np.inf))
    log_ratio = F.where(near, F.log1p(F.div(F.sub(sx, sy), sy)),
                        F.where(normal, F.log(ratio), F.sub(F.log(sx), F.log(sy))))
    r = F.mul(x, log_ratio)
    nan = C.logical_or(C.isnan(x), C.isnan(y))
    return F.where(ok, r, F.where(zero, F.zeros_like(r),
                                  F.where(nan, F.full_like(r, np.nan), F.full_like(r, np.inf))))


def _xlogy(log):
    def xlogy(x, y):
        """x * log(y), 0 where x == 0 unless y is NaN (scipy.special.xlogy). Its derivative in
        x is log(y) at x == 0 too (JAX, PyTorch): only an infinite log(y) is replaced there,
        so the product is 0 and not NaN; so is the NaN of a negative y (SciPy's 0 too)."""
        ly = log(y)
        bad = C.logical_and(C.logical_not(C.isfinite(ly)), C.logical_not(C.isnan(y)))
        return F.mul(x, F.where(C.logical_and(F.eq(x, 0), bad), 0.0, ly))
    return xlogy


def _in_float64(fn):
    """fn computed in float64 for float32 (and smaller) inputs, then cast back, as SciPy's
    float32 loops do: the float32 forms lose tens of ulps (ndtr's tail, logit, betaln)."""
    def wrapped(*xs):
        dt = F.result_dtype(*xs, 1.0)
        if dt.itemsize >= 8:
            return fn(*xs)
        return F.cast(fn(*[F.cast(x, np.float64) if isinstance(x, Tracer) else
                           np.asarray(x, np.float64) for x in xs]), dt)
    return wrapped


def _logit(p):
    """log(p / (1 - p)); above 1/4, log1p((2p - 1) / (1 - p)), whose 2p - 1 and 1 - p are
    exact, keeps precision near 1/2 where log(p) - log1p(-p) cancels"""
    mid = F.gt(p, 0.25)
    sp = F.where(mid, p, 0.5)
    near = F.log1p(F.div(F.sub(F.mul(sp, 2.0), 1.0), F.sub(1.0, sp)))
    lp = F.where(mid, 0.25, p)
    # at 1, inf with the derivative 1 / (p (1 - p)) = inf: 1 / (1 - p) (log1p's is 0 there)
    near = F.where(F.eq(p, 1.0), F.div(1.0, F.sub(1.0, p)), near)
    return F.where(mid, near, F.sub(F.log(lp), F.log1p(F.neg(lp))))


def _stirling_rest(x):
    # lgamma(x) - ((x - 1/2) log x - x + log(2 pi) / 2) for x >= 20 (error below 1e-13)
    r = F.div(1.0, x)
    r2 = F.mul(r, r)
    return F.mul(r, F.add(1.0 / 12, F.mul(r2, F.add(-1.0 / 360, F.mul(r2, 1.0 / 1260)))))


def _betaln(a, b):
    """log B(a, b) = gammaln(a) + gammaln(b) - gammaln(a + b); where the larger argument is
    20 or more, its two gammalns are taken together by Stirling's series (they cancel: at
    a = 1e15 the difference keeps no digits otherwise)."""
    big, small = F.maximum(a, b), F.minimum(a, b)
    far = F.ge(big, 20.0)
    bg, sm = F.where(far, big, 20.0), F.where(far, small, 1.0)
    # gammaln(b) - (a - 1/2) log1p(b / a) - b log(a + b) + b + rest(a) - rest(a + b)
    terms = [F.gammaln(sm), F.neg(F.mul(F.sub(bg, 0.5), F.log1p(F.div(sm, bg)))),
             F.neg(F.mul(sm, F.log(F.add(bg, sm)))), sm,
             F.sub(_stirling_rest(bg), _stirling_rest(F.add(bg, sm)))]
    asym = terms[0]
    for t in terms[1:]:
        asym = F.add(asym, t)
    plain = F.sub(F.add(F.gammaln(a), F.gammaln(b)), F.gammaln(F.add(a, b)))
    # SciPy's limits at an infinite argument: B -> 0 (log -inf) beside a positive one, inf
    # beside 0 or a negative one, NaN beside inf (the series reads inf * 0 there); inf at -inf
    at_inf = F.where(F.eq(small, np.inf), np.nan, F.where(F.gt(small, 0), -np.inf, np.inf))
    return F.where(F.eq(small, -np.inf), np.inf,
                   F.where(F.eq(big, np.inf), at_inf, F.where(far, asym, plain)))


def _zeta(s, q):
    """Hurwitz zeta(s, q) for a constant integer s >= 1 (how scipy.special.polygamma calls it):
    (-1)^s psi^(s-1)(q) / (s-1)!; zeta(1, q) is the pole, inf."""
    if isinstance(B.resolve(s), Tracer) or np.any(np.asarray(s) != np.round(s)) or \
            np.any(np.asarray(s) < 1):
        e = UnsupportedError(f"scipy.special.zeta(s, q) with s not constant positive integers"
                             f"{_at(user_where())} (scipy.special.polygamma(n, x) calls it "
                             "with s = n + 1): adjit has zeta(n + 1, q) through polygamma, "
                             "with n constant (a literal, or a static argument)")
        e._adjit_library = True      # adjit's own message, not "SciPy needs concrete arrays"
        raise e
    if np.ndim(s):         # polygamma(np.array([0, 1, 2]), x): one order per element
        out = None
        for k in np.unique(s):
            zk = _zeta(int(k), q)
            out = zk if out is None else F.where(np.asarray(s) == k, zk, out)
        return F.broadcast_to(out, F._broadcast_shape("zeta", [np.shape(s), F._shape_of(q)]))
    n = int(s)
    if n == 1:
        return F.add(F.mul(q, 0.0), np.inf)
    return F.mul(F.polygamma(n - 1, q), (-1.0) ** n / math.factorial(n - 1))


def _gamma_sign(x):
    """The sign of Gamma(x): +1 for x > 0, (-1)^floor(x) between the poles below 0."""
    return F.where(F.gt(x, 0), 1.0, F.where(F.eq(N.remainder(F.floor(x), 2.0), 1.0), -1.0, 1.0))


def _gamma(x):
    """scipy.special.gamma: sign * exp(gammaln(x)); +-inf at +-0, nan at the poles below 0
    and at -inf (about |gammaln(x)| ulps off where NumPy has no gamma to call)."""
    pole = C.logical_and(F.lt(x, 0), F.eq(F.floor(x), x))
    r = F.mul(_gamma_sign(x), F.exp(F.gammaln(x)))
    return F.where(F.eq(x, 0), C.copysign(np.inf, x), F.where(pole, np.nan, r))


def _beta(a, b):
    """scipy.special.beta: exp(betaln(a, b)) with the signs of the three Gammas."""
    sign = F.mul(F.mul(_gamma_sign(a), _gamma_sign(b)), _gamma_sign(F.add(a, b)))
    return F.mul(sign, F.exp(_betaln(a, b)))


def _kl_div(x, y):
    """x log(x / y) - x + y (scipy.special.kl_div): rel_entr's domain, y where x == 0 and
    y >= 0, inf outside (also for y = -inf), nan where either is nan."""
    r = _rel_entr(x, y)
    return F.where(F.eq(r, np.inf), r, F.add(F.sub(r, x), y))


def _huber(delta, r):
    """scipy.special.huber: r**2 / 2 where |r| <= delta, delta (|r| - delta / 2) beyond, inf
    for delta < 0."""
    a = F.abs(r)
    inside = F.mul(F.mul(r, r), 0.5)
    outside = F.mul(delta, F.sub(a, F.mul(delta, 0.5)))
    return F.where(F.lt(delta, 0), np.inf, F.where(F.le(a, delta), inside, outside))


def _pseudo_huber(delta, r):
    """scipy.special.pseudo_huber: delta**2 (sqrt(1 + (r / delta)**2) - 1), written
    |r| (|r| / (hypot(1, r / delta) + 1)): no cancellation at small r, no overflow of delta**2
    or r**2; 0 where delta is 0, inf for delta < 0 or infinite r."""
    zero = F.eq(delta, 0)
    d = F.where(zero, 1.0, delta)
    v = F.div(r, d)
    # |r| (|r| / (hypot + 1)): no overflow of r**2 either; |r| as a select, whose derivative
    # at 0 is 1 (abs's is 0), so the curvature at r = 0 stays 1
    a = F.where(F.ge(r, 0), r, F.neg(r))
    val = F.where(C.isinf(r), np.inf, F.mul(a, F.div(a, F.add(C.hypot(1.0, v), 1.0))))
    return F.where(F.lt(delta, 0), np.inf, F.where(zero, 0.0, val))


_SQRT_HALF = 1.0 / math.sqrt(2.0)


def _ndtr(x):
    """The standard normal CDF, 0.5 erfc(-x / sqrt 2)."""
    return F.mul(F.erfc(F.mul(x, -_SQRT_HALF)), 0.5)


def _log_ndtr(x):
    """log of the standard normal CDF (scipy.special.log_ndtr): log1p(-ndtr(-x)) above -1, as
    SciPy (log(ndtr(x)) would cancel where ndtr(x) is near 1); log(ndtr(x)) from -20 to -1;
    below -20 the asymptotic series -x**2 / 2 - log(-x) - log(2 pi) / 2 + log(1 - 1/x**2 +
    3/x**4 - ...) (8 terms: error below 1e-15), where ndtr(x) would underflow."""
    high, low = F.gt(x, -1.0), F.lt(x, -20.0)
    xh = F.where(high, x, 0.0)
    upper = F.log1p(F.neg(_ndtr(F.neg(xh))))
    xl = F.where(low, x, -21.0)
    r2 = F.div(1.0, F.mul(xl, xl))
    series, term = 1.0, 1.0
    for k in range(1, 9):
        term = F.mul(F.mul(term, r2), -(2 * k - 1.0))
        series = F.add(series, term)
    tail = F.sub(F.sub(F.mul(F.mul(xl, xl), -0.5), F.log(F.neg(xl))),
                 0.5 * math.log(2 * math.pi))
    tail = F.add(tail, F.log(series))
    xm = F.where(C.logical_or(high, low), -2.0, x)
    mid = F.log(_ndtr(xm))
    return F.where(high, upper, F.where(low, tail, mid))


_ACKLAM = ([-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
            1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00],
           [-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
            6.680131188771972e+01, -1.328068155288572e+01, 1.0],
           [-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
            -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00],
           [7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
            3.754408661907416e+00, 1.0])


def _horner(x, coefs):
    r = coefs[0]
    for c in coefs[1:]:
        r = F.add(F.mul(r, x), c)
    return r


_INVERSE_ORDERS = 2     # derivatives of ndtri and erfinv exact up to this order


def _ndtri_lower(q):
    """x with ndtr(x) = q for 0 < q <= 1/2: Acklam's rational approximation (1e-9), one
    Halley step on 0.5 erfc(-x / sqrt 2) - q (full precision), then one Newton step that
    carries the derivative, 1 / pdf(x)."""
    a, b, c, d = _ACKLAM
    tail = F.lt(q, 0.02425)
    qt = F.where(tail, q, 0.01)
    t = F.sqrt(F.mul(F.log(qt), -2.0))
    x_tail = F.div(_horner(t, c), _horner(t, d))
    qc = F.where(tail, 0.3, q)
    u = F.sub(qc, 0.5)
    r = F.mul(u, u)
    x_mid = F.div(F.mul(_horner(r, a), u), _horner(r, b))
    x0 = F.stop_gradient(F.where(tail, x_tail, x_mid))
    # the residual ndtr(x) - q: near the centre as erf(x / sqrt 2) / 2 - (q - 1/2), whose
    # q - 1/2 is exact for q >= 1/4 (erfc(-x / sqrt 2) would round near 1)
    centre = F.ge(q, 0.25)

    def residual(x):
        near = F.sub(F.mul(F.erf(F.mul(x, _SQRT_HALF)), 0.5), F.sub(q, 0.5))
        return F.where(centre, near, F.sub(_ndtr(x), q))

    def pdf(x):
        return F.mul(F.exp(F.mul(F.mul(x, x), -0.5)), 1.0 / math.sqrt(2.0 * math.pi))
    h = F.div(residual(x0), pdf(x0))
    x = F.stop_gradient(F.sub(x0, F.div(h, F.add(F.mul(F.mul(x0, h), 0.5), 1.0))))
    # Newton steps that carry derivatives: at the root each leaves the value as it is, and k
    # of them give the first k derivatives of the inverse (1 / pdf, then -pdf' / pdf**3, ...)
    for _ in range(_INVERSE_ORDERS):
        x = F.sub(x, F.div(residual(x), pdf(x)))
    # below 1e-305 the density nears underflow: the approximation (1e-9) as it is, its
    # derivative taken as 0
    return F.where(F.lt(q, 1e-305), F.add(x0, F.mul(q, 0.0)), x)


def _ndtri(p):
    """scipy.special.ndtri, the standard normal quantile: -ndtri(1 - p) above 1/2, where
    1 - p is exact; -inf at 0, inf at 1, nan outside [0, 1]."""
    upper = F.gt(p, 0.5)
    q = F.where(upper, F.sub(1.0, p), p)
    inside = C.logical_and(F.gt(q, 0), F.le(q, 0.5))
    x = _ndtri_lower(F.where(inside, q, 0.25))
    x = F.where(upper, F.neg(x), x)
    # -inf at 0 and inf at 1 with the derivative inf (1 / pdf): -1 / p and 1 / (1 - p) there
    # (p + 0.0: -inf at -0.0 too)
    return F.where(inside, x, F.where(F.eq(p, 0), F.div(-1.0, F.add(p, 0.0)),
                                      F.where(F.eq(p, 1), F.div(1.0, F.sub(1.0, p)), np.nan)))


def _erfinv(y):
    """scipy.special.erfinv: -ndtri((1 - |y|) / 2) / sqrt 2 with y's sign, one ndtri for
    all (1 - |y| is exact for |y| >= 1/2, where that is the result); within, Newton steps on
    erf from it, so tiny y keep their digits. +-inf at +-1, nan beyond."""
    a = F.abs(y)
    big, inside = F.gt(a, 0.5), F.lt(a, 1.0)
    q = F.mul(F.sub(1.0, F.where(inside, a, 0.5)), 0.5)
    t = F.mul(F.mul(_ndtri_lower(q), -_SQRT_HALF), F.sign(y))
    ys = F.where(big, 0.0, y)
    x = F.stop_gradient(F.where(big, 0.0, t))
    slope = 2.0 / math.sqrt(math.pi)

    def newton(x):
        return F.sub(x, F.div(F.sub(F.erf(x), ys), F.mul(F.exp(F.neg(F.mul(x, x))), slope)))
    x = F.stop_gradient(newton(x))
    for _ in range(_INVERSE_ORDERS):     # derivatives up to that order, as ndtri's
        x = newton(x)
    r = F.where(big, t, x)
    # +-inf at +-1 with the derivative inf: sign(y) / (1 - |y|) there
    return F.where(inside, r, F.where(F.eq(a, 1.0), F.div(F.sign(y), F.sub(1.0, a)), np.nan))


def _i0e(x):
    """exp(-|x|) I0(x) (scipy.special.i0e)."""
    return N.i0_scaled(F.abs(x))


# scipy.special ufuncs that are compositions of adjit's ops (by name; SciPy is not required)
_SCIPY_SPECIAL = {
    "expit": F.sigmoid, "log_expit": lambda x: F.neg(F.softplus(F.neg(x))),
    "logit": _in_float64(_logit),
    "xlogy": _xlogy(F.log), "xlog1py": _xlogy(F.log1p),
    "erf": F.erf, "erfc": F.erfc, "entr": _entr, "rel_entr": _in_float64(_rel_entr),
    "gammaln": F.gammaln, "digamma": lambda x: F.polygamma(0, x),
    "psi": lambda x: F.polygamma(0, x), "zeta": _zeta, "_zeta": _zeta,
    "betaln": _in_float64(_betaln),
    # the standard normal CDF
    "ndtr": _in_float64(_ndtr), "log_ndtr": _in_float64(_log_ndtr),
    "gamma": _in_float64(_gamma), "beta": _in_float64(_beta), "kl_div": _in_float64(_kl_div),
    "huber": _huber, "pseudo_huber": _pseudo_huber, "i0": N.i0, "i0e": _i0e,
    "ndtri": _in_float64(_ndtri), "erfinv": _in_float64(_erfinv),
    # SciPy's spellings of NumPy's functions (its loops are float ones, as NumPy's)
    "expm1": F.expm1, "log1p": F.log1p, "cbrt": F.cbrt, "exp2": F.exp2,
    "exp10": lambda x: F.power(10.0, x),
    # cos(x) - 1 without the cancellation near 0: -2 sin(x / 2)^2 (its derivative -sin x)
    "cosm1": lambda x: F.mul(F.power(F.sin(F.mul(x, 0.5)), 2), -2.0),
    # real loggamma: log Gamma(x) for x >= 0, NaN below (gammaln is log |Gamma(x)|)
    "loggamma": lambda x: F.where(F.lt(x, 0), math.nan, F.gammaln(x)),
}


def _scipy_result_dtype(ufunc, inputs):
    """The result dtype of a scipy.special ufunc for these inputs' dtypes (Python numbers
    weak), from the ufunc itself on one-element arrays."""
    dummies = [x if _weak_number(x) else
               (1.0 if F._is_weak(x) and x.dtype.kind == "f" else
                np.ones(1, F._dtype_of(x) if isinstance(x, Tracer) else np.asarray(x).dtype))
               for x in (B.resolve(v) for v in inputs)]
    with np.errstate(all="ignore"):
        r = ufunc(*dummies)
    r = r[0] if isinstance(r, tuple) else r
    dt = np.asarray(r).dtype
    return dt if dt.kind == "f" else np.dtype(np.float64)


def _unsupported_other(what):
    raise UnsupportedError(f"{what} is not supported by adjit{_at_lib(user_where())}. Write it "
                           "with the NumPy functions adjit supports (see "
                           "adjit.frontend.numpy_api.FUNCTIONS and UFUNCS).")


def _np_name(func):
    mod = getattr(func, "__module__", "numpy") or "numpy"
    sub = next((m for m in ("linalg", "fft", "random", "polynomial", "ma") if
                m in mod.split(".")), None)
    return (f"{sub}." if sub else "") + func.__name__


@functools.lru_cache(maxsize=None)
def _signature(fn):
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def array_function(func, args, kwargs):
    if func in CX.FFT or CX.involves(args):
        return CX.array_function(func, args, kwargs)
    out = kwargs.get("out")
    if out is not None and func in FUNCTIONS and func is not _NP_CLIP:   # its where= reads out
        # np.clip(x, lo, hi, out=x) and the like: computed, then stored like x[...] = result
        kwargs = {k: v for k, v in kwargs.items() if k != "out"}
        _store_out(out, array_function(func, args, kwargs), f"np.{_np_name(func)}",
                   out_casting(func, kwargs))
        return out
    fn = FUNCTIONS.get(func)
    if fn is None and getattr(func, "__module__", "") == "numpy.polynomial.polynomial" and \
            hasattr(func, "_implementation"):
        # polyval2d, polygrid2d: NumPy's Python code, on the polynomial evaluation that
        # takes traced points (_tensor_values)
        return func._implementation(*args, **kwargs)
    if fn is None:
        mod = getattr(func, "__module__", None) or "numpy"
        if not mod.startswith("numpy"):
            _unsupported_other(f"{mod}.{getattr(func, '__name__', func)}")
        _unsupported(_np_name(func))
    sig = _signature(fn)
    if sig is not None:
        try:
            sig.bind(*args, **kwargs)
        except TypeError as e:
            raise UnsupportedError(f"np.{_np_name(func)} is called with arguments adjit does "
                                   f"not support{_at(user_where())}: {e}") from None
    r = fn(*args, **kwargs)
    if func in _VIEWS or not isinstance(r, Tracer) or (r.base is None and not any(
            r is a for a in args)):
        return r
    return r.copy_()  # NumPy answers with a new array: it must not alias an argument


# -- NumPy's in-place functions: stores into their first argument (a Tracer here) -----------
def _select_into(dst, mask, values):
    """dst[...] = where(mask, values, dst), values taking dst's dtype."""
    values = B.resolve(values)
    values = F.cast(values, dst.dtype) if isinstance(values, Tracer) else \
        np.asarray(values, dst.dtype)
    _setitem(dst, Ellipsis, F.where(mask, values, dst))


def _nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    r = N.nan_to_num(x, copy, nan, posinf, neginf)
    if copy is False and r is not x and isinstance(x, (Tracer, B.Buffer)):
        _setitem(x, Ellipsis, r)      # NumPy's copy=False replaces the values in place
        return x
    return r


def _check_cast(src, dst, casting, what):
    """NumPy's casting rule for writing src into dst (np.copyto's same_kind, putmask's safe);
    Python numbers are weak and cast, as in NumPy."""
    if isinstance(src, (bool, int, float)) and not isinstance(src, np.generic) or (
            isinstance(src, Tracer) and F._is_weak(src)):
        return
    src_dt = F._dtype_of(B.resolve(src)) if _holds_tracer(src) else np.asarray(src).dtype
    dst_dt = F._dtype_of(B.resolve(dst)) if _holds_tracer(dst) else np.asarray(dst).dtype
    if not np.can_cast(src_dt, dst_dt, casting):
        raise TypeError(f"{what}: cannot cast {src_dt} to {dst_dt} according to the rule "
                        f"{casting!r}{_at(user_where())} (as NumPy)")


def _copyto(dst, src, casting="same_kind", where=True):
    _check_cast(src, dst, casting, "np.copyto")
    if where is True:
        _setitem(dst, Ellipsis, src)
    else:
        _select_into(dst, where, src)


def _put(a, ind, v, mode="raise"):
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(f"clipmode must be one of 'clip', 'raise', or 'wrap' (got {mode!r})")
    if mode != "raise":
        if isinstance(B.resolve(ind), Tracer):
            _unsupported(f"put with mode={mode!r} at traced positions")
        n = int(math.prod(a.shape))
        ind = np.asarray(ind)      # constant positions mapped into range, as NumPy does
        ind = np.mod(ind, n) if mode == "wrap" else np.clip(ind, 0, n - 1)
    flat = _reshape(a, -1)
    if flat is not a and flat.base is None:
        _unsupported("put into a non-contiguous view")
    ind = np.asarray(ind) if not isinstance(ind, Tracer) else ind
    _setitem(flat, ind, v)


def _putmask(a, mask, values):
    _check_cast(values, a, "safe", "np.putmask")
    if int(math.prod(F._shape_of(values))) != 1 and \
            F._shape_of(values) != a.shape:
        _unsupported("putmask with values that repeat to fill the mask (give one value or "
                     "an array of a's shape)")
    _select_into(a, mask, values)


def _put_along_axis(arr, indices, values, axis):
    if axis is None:                       # NumPy: into the flattened array
        arr, axis = F.ravel(arr), 0
    _setitem(arr, F.along_axis_key(arr, indices, axis, "put_along_axis"), values)


def _fill_diagonal(a, val, wrap=False):
    if a.ndim != 2 and len(set(a.shape)) != 1:
        _unsupported("fill_diagonal of a non-square array with more than 2 axes")
    n = min(a.shape) if a.ndim == 2 else a.shape[0]
    i = np.arange(n)
    if wrap and a.ndim == 2 and a.shape[0] > a.shape[1] + 1:
        _unsupported("fill_diagonal with wrap=True")
    _setitem(a, (i,) * a.ndim, val)


def _compress(condition, a, axis=None, out=None):
    _no_out("compress", out)
    if isinstance(B.resolve(condition), Tracer):
        _unsupported("compress with a traced condition (how many values are kept depends "
                     "on the data; np.where(condition, a, 0) keeps the shape)")
    keep = np.nonzero(np.asarray(condition, dtype=bool).reshape(-1))[0]
    if axis is None:
        a, axis = F.ravel(a), 0
    return C.take(a, keep, axis)


FUNCTIONS.update({np.compress: _compress, np.nan_to_num: _nan_to_num})
FUNCTIONS.update({np.copyto: _copyto, np.put: _put, np.putmask: _putmask,
                  np.put_along_axis: _put_along_axis, np.fill_diagonal: _fill_diagonal})
INPLACE = {np.copyto, np.put, np.putmask, np.put_along_axis, np.fill_diagonal}


# the functions that NumPy answers with a view of their argument (writes go through to it)
_VIEWS = {np.reshape, np.ravel, np.transpose, np.swapaxes, np.moveaxis, np.rollaxis, np.squeeze,
          np.expand_dims, np.atleast_1d, np.atleast_2d, np.atleast_3d, np.broadcast_to,
          np.diagonal, np.rot90, np.flip, np.fliplr, np.flipud, np.split, np.array_split,
          np.hsplit, np.vsplit, np.dsplit, np.asarray, np.asanyarray, np.real, np.diag,
          np.einsum, np.asfortranarray, np.lib.stride_tricks.sliding_window_view}
_VIEWS |= {getattr(m, n) for m in (np, np.linalg) for n in ("matrix_transpose", "permute_dims")
           if hasattr(m, n)}


# -- operators and methods on Tracer -----------------------------------------------------------
def _defer_to_selection(op):
    def f(s, o):
        if type(o) is Selection:
            return NotImplemented
        return op(s, o)
    f.__name__ = getattr(op, "__name__", "op")
    return f


def _install():
    T = Tracer
    T.__add__ = lambda s, o: F.add(s, o)
    T.__radd__ = lambda s, o: F.add(o, s)
    T.__sub__ = lambda s, o: F.sub(s, o)
    T.__rsub__ = lambda s, o: F.sub(o, s)
    T.__mul__ = lambda s, o: F.mul(s, o)
    T.__rmul__ = lambda s, o: F.mul(o, s)
    T.__truediv__ = lambda s, o: F.div(s, o)
    T.__rtruediv__ = lambda s, o: F.div(o, s)
    # NumPy's operator takes np.square for ** 2, whose smallest loop is int8: mask ** 2
    T.__pow__ = lambda s, o: _pow(F.cast(s, np.int8) if s.dtype == np.bool_ and
                                  type(o) is int and o == 2 else s, o)
    T.__rpow__ = lambda s, o: F.power(o, s)
    T.__matmul__ = lambda s, o: CX.bilinear(np.matmul, s, o) if CX.is_complex(o) else \
        F.matmul(s, o)
    T.__rmatmul__ = lambda s, o: CX.bilinear(np.matmul, o, s) if CX.is_complex(o) else \
        F.matmul(o, s)
    T.__neg__ = lambda s: F.neg(s)
    T.__abs__ = lambda s: F.abs(s)
    T.__gt__ = lambda s, o: F.gt(s, o)
    T.__ge__ = lambda s, o: F.ge(s, o)
    T.__lt__ = lambda s, o: F.lt(s, o)
    T.__le__ = lambda s, o: F.le(s, o)
    T.__eq__ = lambda s, o: F.eq(s, o)
    T.__ne__ = lambda s, o: F.ne(s, o)
    T.__getitem__ = lambda s, k: F.getitem(s, k)
    T.__setitem__ = _setitem
    T.__floordiv__ = lambda s, o: _python_op(N.floor_divide, s, o)
    T.__rfloordiv__ = lambda s, o: _python_op(N.floor_divide, o, s)
    T.__mod__ = lambda s, o: _python_op(N.remainder, s, o)
    T.__rmod__ = lambda s, o: _python_op(N.remainder, o, s)
    T.__divmod__ = lambda s, o: _python_op(N.divmod_, s, o)
    T.__rdivmod__ = lambda s, o: _python_op(N.divmod_, o, s)
    T.__and__ = lambda s, o: _bitwise("&", C.logical_and, s, o)
    T.__rand__ = lambda s, o: _bitwise("&", C.logical_and, o, s)
    T.__or__ = lambda s, o: _bitwise("|", C.logical_or, s, o)
    T.__ror__ = lambda s, o: _bitwise("|", C.logical_or, o, s)
    T.__xor__ = lambda s, o: _bitwise("^", C.logical_xor, s, o)
    T.__rxor__ = lambda s, o: _bitwise("^", C.logical_xor, o, s)
    T.__invert__ = lambda s: _bitwise("~", lambda a, b: C.logical_not(a), s)
    T.__lshift__ = lambda s, o: _python_op(lambda a, b: _bitwise("<<", None, a, b), s, o)
    T.__rlshift__ = lambda s, o: _python_op(lambda a, b: _bitwise("<<", None, a, b), o, s)
    T.__rshift__ = lambda s, o: _python_op(lambda a, b: _bitwise(">>", None, a, b), s, o)
    T.__rrshift__ = lambda s, o: _python_op(lambda a, b: _bitwise(">>", None, a, b), o, s)
    T.reshape = _reshape
    T.transpose = lambda s, *axes: F.transpose(s, axes if axes else None) if len(axes) != 1 \
        else F.transpose(s, axes[0])
    T.sum, T.prod, T.mean, T.max, T.min = _sum, _prod, _mean, _max, _min
    T.var, T.std, T.cumsum, T.cumprod = _var, _std, _cumsum, _cumprod
    T.argmax = _argmax
    T.argmin = lambda s, *args, **kwargs: _argmax(s, *args, neg=True, **kwargs)
    T.astype = _astype
    T.dot = lambda s, o: _dot(s, o)
    T.clip = lambda s, a_min=None, a_max=None, **kw: _clip(s, a_min, a_max, **kw)
    T.squeeze = lambda s, axis=None: F.squeeze(s, axis)
    T.ravel = lambda s, order="C": _ravel(s, order)
    T.flatten = lambda s, order="C": _reshape(s, -1, order=order)
    T.swapaxes = lambda s, a, b: F.swapaxes(s, a, b)
    T.round = lambda s, decimals=0: F.round_(s, decimals)
    T.diagonal = lambda s, offset=0, axis1=0, axis2=1: F.diagonal(s, offset, axis1, axis2)
    T.trace = lambda s, offset=0, axis1=0, axis2=1, dtype=None, out=None: F.trace_(
        s, offset, axis1, axis2, dtype, out)
    T.repeat = lambda s, repeats, axis=None: F.repeat(s, repeats, axis)
    T.take = lambda s, indices, axis=None, out=None, mode="raise": C.take(s, indices, axis, out,
                                                                          mode)
    T.ptp = lambda s, axis=None, keepdims=False: C.ptp(s, axis, keepdims)
    T.searchsorted = lambda s, v, side="left", sorter=None: N.searchsorted(s, v, side, sorter)
    # the methods with NumPy's whole signature go through the functions (where=, out=,
    # stable=: supported or refused naming the line there)
    own = {n: getattr(np, n) for n in ("any", "all", "argsort", "sort")}   # not the patches
    T.any = lambda s, *a, **k: array_function(own["any"], (s,) + a, k)
    T.all = lambda s, *a, **k: array_function(own["all"], (s,) + a, k)
    T.argsort = lambda s, *a, **k: array_function(own["argsort"], (s,) + a, k)
    T.compress = lambda s, condition, axis=None, out=None: _compress(condition, s, axis, out)
    # t - x[mask] with a traced t: x[mask]'s own reflected operator takes it (masked.py)
    for name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
                 "__truediv__", "__rtruediv__", "__pow__", "__rpow__", "__floordiv__",
                 "__rfloordiv__", "__mod__", "__rmod__", "__lt__", "__le__", "__gt__",
                 "__ge__", "__eq__", "__ne__"):
        setattr(T, name, _defer_to_selection(getattr(T, name)))
    T.put = lambda s, indices, values, mode="raise": _put(s, indices, values, mode)
    # a sort is a valid partition (np.partition is C.sort too)
    T.partition = lambda s, kth, axis=-1, kind=None, order=None: s.sort(axis)
    T.argpartition = lambda s, kth, axis=-1, kind=None, order=None: F.argsort(s, axis)
    T.copy = lambda s, order="C": _fortran_copy(s) if order == "F" or (
        order in ("A", "K") and s.ndim > 1 and _f_contiguous(s) and not _c_contiguous(s)) \
        else s.copy_()
    T.conj = T.conjugate = lambda s: s     # of a real array: the array itself, as in NumPy
    for name, sym, fn in [("add", "+", F.add), ("sub", "-", F.sub), ("mul", "*", F.mul),
                          ("truediv", "/", F.div), ("pow", "**", _pow),
                          ("matmul", "@", F.matmul), ("and", "&", T.__and__),
                          ("or", "|", T.__or__), ("xor", "^", T.__xor__),
                          ("floordiv", "//", T.__floordiv__), ("mod", "%", T.__mod__)]:
        setattr(T, f"__i{name}__", _augmented(sym, fn))
    T.__pos__ = lambda s: s.copy_()
    for name in ("clip", "flatten", "round", "sum", "prod", "mean", "max", "min",
                 "cumsum", "cumprod", "repeat", "take", "dot"):
        setattr(T, name, _copied(getattr(T, name)))
    for name in ("sum", "prod", "mean", "max", "min", "std", "var", "cumsum", "cumprod",
                 "round", "dot", "clip", "argmax", "argmin"):
        setattr(T, name, _method_out(name, getattr(T, name)))
    T.sort = lambda s, *a, **k: _setitem(s, Ellipsis, array_function(own["sort"], (s,) + a, k))
    T.fill = lambda s, value: _setitem(s, Ellipsis, value)
    # adjit's arrays are real: NumPy's .real is the array (y.real = v writes it), .imag zeros
    T.real = property(lambda s: s, lambda s, v: _setitem(s, Ellipsis, v))
    T.imag = property(lambda s: F.zeros_like(s), _set_imag_of_real)
    T.flat = property(_flat, _set_flat)
    T.view = _view
    T.nonzero = lambda s: _data_dependent("x.nonzero()")
    T.nbytes = property(lambda s: s.size * s.dtype.itemsize)
    T.itemsize = property(lambda s: s.dtype.itemsize)


def _set_imag_of_real(s, v):
    raise TypeError(f"array does not have imaginary part to set{_at(user_where())} (as NumPy); "
                    "make it complex first (z = x + 0j)")


def _method_out(name, fn):
    """x.sum(axis, out=c) as np.sum(x, axis, out=c): the result stored into c."""
    np_fn = getattr(np, name)

    @functools.wraps(fn)
    def method(s, *args, **kwargs):
        if kwargs.get("out") is not None:
            return array_function(np_fn, (s,) + args, kwargs)
        return fn(s, *args, **kwargs)
    return method


def _flat(s):
    """x.flat: writes x.flat[i] = v go to x's elements in C order (a view's too), reads are
    copies of its current values, as in NumPy."""
    return B.FlatIter(lambda: _reshape(s, -1), s.shape, s)


def _set_flat(s, value):
    """x.flat = v: every element of x, v repeated as NumPy's flatiter repeats it."""
    B.FlatIter(lambda: _reshape(s, -1), s.shape, s)[...] = value


def _python_op(fn, x, y):
    """x % y, x // y, divmod: between Python numbers (weak arguments) the result stays a
    Python number, as with + - * /."""
    r = fn(x, y)
    if F._is_weak(x) and F._is_weak(y):
        for t in (r if isinstance(r, tuple) else (r,)):
            if isinstance(t, Tracer) and t.shape == ():
                t.ctx.weak.add(t.id)
    return r


def _view(s, *args, **kw):
    """x.view() is x; a view as another dtype reinterprets bytes (refused), and a view as an
    np.ma.MaskedArray or np.matrix is how those classes take a traced operand (MA + x)."""
    if not args and not kw:
        return s
    cls = kw.get("type", args[0] if args else None)
    if isinstance(cls, type) and issubclass(cls, (np.ma.MaskedArray, np.matrix)):
        F._refuse_special_array(cls)
    _unsupported("ndarray.view with a dtype (reinterpreting the bytes)")


def _astype(s, dtype, order="K", casting="unsafe", subok=True, copy=True):
    """x.astype: a new array, unless copy=False and the dtype is already right (as NumPy)."""
    if s.dtype == np.dtype(dtype):
        return s.copy(order) if copy else s
    if np.dtype(dtype).kind not in "biufc":
        raise UnsupportedError(
            f"x.astype({np.dtype(dtype)}) of a traced array{_at(user_where())}: adjit traces "
            "numbers (bool, integer, float and complex dtypes); keep the values numeric and "
            "convert outside the function")
    if s.ndim > 1 and (order == "F" or (order in ("A", "K") and _f_contiguous(s) and
                                        not _c_contiguous(s))):
        # a Fortran-ordered result (as x.copy(order="F")): the transpose of the C-ordered
        # cast of the transpose, so a later order='A'/'K' read sees Fortran order
        return F.transpose(F.cast(F.transpose(s), dtype))
    return F.cast(s, dtype)


# -- np.array and friends -------------------------------------------------------------------
# np.array([t0, t1]) never reaches __array_function__: NumPy asks each element for __array__.
# While any trace is active, numpy.array/asarray/... are wrapped so that sequences holding
# tracers are stacked into the trace; everything else goes to NumPy unchanged.
_CONSTRUCTORS = ("array", "asarray", "asanyarray", "ascontiguousarray", "asfortranarray")
_patch_lock = threading.Lock()
_patch_depth = [0]
_originals = {}


def _holds_tracer(obj):
    if isinstance(obj, Tracer) or (isinstance(obj, B.Buffer) and B.traced_value(obj) is not None):
        return True
    return isinstance(obj, (list, tuple)) and any(_holds_tracer(v) for v in obj)


def _from_nested(obj, orig):
    if isinstance(obj, (Tracer, B.Buffer)):
        return B.resolve(obj)
    if isinstance(obj, (list, tuple)) and _holds_tracer(obj):
        if not obj:
            return orig(obj)
        items = [_from_nested(v, orig) for v in obj]
        shapes = [tuple(F._shape_of(v)) for v in items]
        if len(set(shapes)) > 1:
            shown = ", ".join(str(sh) for sh in shapes[:6]) + (", ..." if len(shapes) > 6
                                                                else "")
            raise ShapeError(f"a list whose entries have different shapes ({shown}) made into "
                             f"an array{_at(user_where())}: NumPy refuses such a ragged list "
                             "too (inhomogeneous shape). Broadcast the entries first "
                             "(np.broadcast_to) or keep them apart")
        return F.stack(items, axis=0)
    return orig(obj)


def _forces_copy(copy) -> bool:
    """np.array's copy=: True (or np._CopyMode.ALWAYS) copies; None, False, IF_NEEDED not."""
    mode = getattr(np, "_CopyMode", None)
    return copy is True or (mode is not None and copy is mode.ALWAYS)


def _array_of_wrapper(obj):
    """The traced array a user's array-like object gives from __array__ (a Param class
    wrapping its values: np.asarray(Param(w)) is w), None for anything else; NumPy refuses
    an __array__ that does not return an ndarray."""
    method = getattr(type(obj), "__array__", None)
    if method is None or isinstance(obj, (np.ndarray, Tracer)):
        return None
    try:
        inner = obj.__array__()
    except Exception:  # noqa: BLE001 - NumPy's own error stands
        return None
    return inner if isinstance(B.resolve(inner), Tracer) else None


def _accepting(orig):
    @functools.wraps(orig)
    def constructor(obj, *args, **kwargs):
        if isinstance(obj, B.FlatIter):
            obj = obj.copy()          # np.array(x.flat): x's values, flattened
        if (orig.__name__ in ("asarray", "asanyarray") and isinstance(obj, B.Buffer)
                and not args and set(kwargs) <= {"order"} and _keeps_layout(
                    np.ndarray.__getattribute__(obj, "flags"), kwargs.get("order"))):
            return obj   # the same array, as np.asarray(ndarray): writes reach it
        if CX.holds(obj):      # traced complex values (and lists of them)
            out = CX.from_nested(obj)
            dtype = kwargs.get("dtype", args[0] if args else None)
            copy = kwargs.get("copy", True if orig.__name__ == "array" else None)
            if dtype is not None and np.dtype(dtype) != out.dtype:
                out = out.astype(dtype)
            elif _forces_copy(copy) and out is B.resolve(obj):
                out = out.copy()    # np.asarray(u, dtype=u.dtype) is u itself, as in NumPy
            elif out is B.resolve(obj) and out.ndim > 1 and isinstance(out.re, Tracer) and (
                    (orig.__name__ == "asfortranarray" or kwargs.get("order") == "F") and
                    not _f_contiguous(out.re) or
                    (orig.__name__ == "ascontiguousarray" or kwargs.get("order") == "C") and
                    _strided(out.re)):
                out = out.copy()    # the layout asked for needs a copy, as in NumPy
            ndmin = kwargs.get("ndmin", args[4] if len(args) > 4 else 0)
            if orig.__name__ == "array" and ndmin and out.ndim < ndmin:
                out = out.reshape((1,) * (ndmin - out.ndim) + out.shape)
            return out
        if not _holds_tracer(obj):
            try:
                r = orig(obj, *args, **kwargs)
            except ValueError:
                inner = _array_of_wrapper(obj)
                if inner is None:
                    raise
                return constructor(inner, *args, **kwargs)
            if isinstance(obj, Table) and type(r) is np.ndarray and \
                    r.__array_interface__["data"][0] == obj.__array_interface__["data"][0] \
                    and r.shape == obj.shape and r.strides == obj.strides and \
                    r.dtype == obj.dtype:
                return obj      # np.asarray(table) is the table itself, as in NumPy
            views = B.views_of_buffers(r, obj) if isinstance(obj, B.Buffer) else None
            if views is not None:
                return views    # np.array(b, copy=None), np.asarray(b, dtype=...): b's memory
            made = orig.__name__ == "array" or (isinstance(obj, (list, tuple)) and
                                                orig.__name__ in ("asarray", "asanyarray")) \
                or (isinstance(obj, B.Buffer) and type(r) is np.ndarray and
                    not np.may_share_memory(r, np.ndarray.view(obj, np.ndarray)))
            # (the copy np.ascontiguousarray(b.T) makes of an array made inside: made there)
            if made and type(r) is np.ndarray and r.dtype.kind in "biufc" and B._from_user():
                return B.Buffer(r)  # np.array([0.0, 0.0]) may receive traced values
            return r
        dtype = kwargs.get("dtype", args[0] if args else None)
        out = _from_nested(obj, orig)
        out = F.cast(out, dtype) if dtype is not None else out
        ndmin = kwargs.get("ndmin", args[4] if len(args) > 4 else 0)
        if orig.__name__ == "array" and ndmin and out.ndim < ndmin:
            # np.array(x, ndmin=2): leading axes of length 1 (a row vector), a new array; a
            # view of x with copy=None or False, as NumPy
            if out is B.resolve(obj) and _forces_copy(kwargs.get("copy", True)):
                out = out.copy_()
            return np.reshape(out, (1,) * (ndmin - out.ndim) + tuple(out.shape))
        if out is B.resolve(obj) and (
                (orig.__name__ == "array" and _forces_copy(kwargs.get("copy", True))) or
                (orig.__name__ in ("asarray", "asanyarray") and _forces_copy(
                    kwargs.get("copy")))):
            # np.array copies unless told not to; asarray(copy=True) too (in the order asked)
            return _fortran_copy(out) if kwargs.get("order") == "F" else out.copy_()
        order = kwargs.get("order")
        if (orig.__name__ == "asfortranarray" or (
                orig.__name__ in ("asarray", "asanyarray", "array") and order == "F")) and \
                out is B.resolve(obj) and out.ndim >= 1 and not _f_contiguous(out):
            if orig.__name__ == "array" and kwargs.get("copy", True) is False:
                raise ValueError("Unable to avoid copy while creating an array as requested.")
            return _fortran_copy(out)   # a Fortran-ordered copy: same values
        if orig.__name__ in ("asarray", "asanyarray", "array") and order == "C" and \
                out is B.resolve(obj) and _strided(out):
            return out.copy_()  # a C-ordered copy of a strided view
        if orig.__name__ == "ascontiguousarray" and out is B.resolve(obj) and _strided(out):
            return out.copy_()  # of a strided view (z.T, x[::2]) NumPy makes a copy
        return out
    return constructor


# np.sum([a, b]) never reaches __array_function__ either (NumPy dispatches on the list, not on
# what it holds): while a trace is active these take a list holding tracers as np.stack of it
_LIST_TAKERS = tuple((np, n) for n in ("sum", "mean", "max", "min", "prod", "amax", "amin",
                                       "std", "var", "median", "average", "ptp", "cumsum",
                                       "cumprod", "sort", "diff", "any", "all", "argmax",
                                       "argmin", "clip", "abs", "dot", "trapezoid", "interp",
                                       "convolve", "correlate", "polyval", "roll", "outer",
                                       "inner", "cross", "gradient", "nansum", "nanmean",
                                       "cov", "quantile", "percentile", "ravel", "reshape",
                                       "transpose", "flip", "tile", "repeat", "pad",
                                       "nanmax", "nanmin", "nanprod", "nanstd", "nanvar",
                                       "nanmedian", "nanargmax", "nanargmin", "nancumsum",
                                       "nancumprod", "nanquantile", "nanpercentile",
                                       "ediff1d", "cumulative_sum", "cumulative_prod",
                                       "trace", "diag", "diagonal", "count_nonzero",
                                       "squeeze", "expand_dims", "searchsorted", "einsum",
                                       "where", "atleast_1d", "atleast_2d", "flipud",
                                       "fliplr", "rot90", "append", "nonzero",
                                       "argwhere", "flatnonzero", "round", "around", "triu",
                                       "tril", "kron", "tensordot", "vdot", "take",
                                       "take_along_axis", "polyder")
                     if hasattr(np, n)) + ((np.linalg, "norm"),) + tuple(
    (np.fft, n) for n in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2",
                          "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn", "fftshift",
                          "ifftshift"))
assert len(set(_LIST_TAKERS)) == len(_LIST_TAKERS)


def _taking_lists(orig):
    """orig with positional arguments that are lists holding traced values stacked first
    (np.dot([a, b], w), np.trapezoid(energies, dx=dt))."""
    @functools.wraps(orig)
    def fn(*args, **kwargs):
        args = [CX.from_nested(a) if isinstance(a, (list, tuple)) and CX.holds(a) else
                _from_nested(a, _originals["asarray"])
                if isinstance(a, (list, tuple)) and _holds_tracer(a) else a for a in args]
        return orig(*args, **kwargs)
    return fn


class _Concatenator:
    """np.r_ / np.c_ while tracing: items holding traced values are stacked into the trace
    (np.r_[0.0, u, 0.0] for boundary values); anything else goes to NumPy's object."""

    def __init__(self, orig, column):
        self.orig, self.column = orig, column

    def __getitem__(self, key):
        items = key if isinstance(key, tuple) else (key,)
        if not any(_holds_tracer(i) for i in items):
            return self.orig[key]
        name = "np.c_" if self.column else "np.r_"
        parts, like = [], []
        for item in items:
            it = item
            if isinstance(it, str):
                raise UnsupportedError(f"{name} with a directive string {it!r}"
                                       f"{_at(user_where())}; use np.concatenate or np.stack")
            if isinstance(it, slice):
                it = self.orig[it]            # a range: NumPy makes it
            if isinstance(it, (list, tuple, B.Buffer)):
                it = B.resolve(_from_nested(it, _originals["asarray"])) if \
                    _holds_tracer(it) else np.asarray(it)
            nd = len(F._shape_of(it))
            if nd == 0:
                it = F.reshape(it, (1,)) if isinstance(it, Tracer) else np.asarray([it])
            if self.column and len(F._shape_of(it)) == 1:
                it = F.reshape(it, (-1, 1)) if isinstance(it, Tracer) else it.reshape(-1, 1)
            parts.append(it)
            # what NumPy's own np.r_ gets, for its result dtype: Python numbers stay weak
            like.append(item if not nd and _weak_number(item) else
                        np.zeros(F._shape_of(it), F._dtype_of(it)))
        dt = self.orig[tuple(like) if len(like) > 1 else like[0]].dtype
        r = F.concatenate(parts, -1 if self.column else 0)
        return F.cast(r, dt) if F._dtype_of(r) != dt else r


def _weak_number(v):
    return isinstance(v, (int, float, bool)) and not isinstance(v, np.generic)


_RANDOM = ("rand", "randn", "random", "random_sample", "uniform", "normal", "choice",
           "permutation", "shuffle", "binomial", "poisson", "randint", "standard_normal",
           "exponential", "beta", "gamma", "default_rng", "seed")


def _warning_random(orig, name):
    @functools.wraps(orig)
    def fn(*args, **kwargs):
        if name in ("shuffle", "permutation") and len(args) == 1 and not kwargs and \
                isinstance(args[0], (Tracer, B.Buffer)) and len(F._shape_of(args[0])):
            return _permuting(args[0], name)
        if any(_holds_tracer(a) for a in (*args, *kwargs.values())):
            hint = ("; to sample from traced probabilities p, pass uniform noise u in and take "
                    "np.argmax(np.log(p) - np.log(-np.log(u))) (Gumbel-max), or "
                    "np.searchsorted(np.cumsum(p), u) (inverse CDF)"
                    if name == "choice" else "")
            raise TraceError(f"np.random.{name} of a traced value{_at(user_where())}: adjit "
                             "draws random numbers only while tracing, so traced parameters "
                             "(probabilities, means, a seed, a size) cannot be used. Draw the "
                             f"noise outside the function and pass it in as an argument{hint}")
        warnings.warn(f"np.random.{name} inside a traced function{_at(user_where())} draws "
                      "once, while adjit traces: every call of the compiled function reuses "
                      "those numbers (as in JAX). Pass random numbers (a dropout mask, noise) "
                      "in as arguments", AdjitWarning, stacklevel=2)
        return orig(*args, **kwargs)
    return fn


def _permuting(x, name):
    """np.random.shuffle(x) / np.random.permutation(x) of a traced array: the order is drawn
    now (the draws NumPy makes for an array of len(x) rows) and baked in, as every draw while
    tracing is; the rows of x are then gathered in that order (shuffle writes them back)."""
    warnings.warn(f"np.random.{name} inside a traced function{_at(user_where())} draws its "
                  "order once, while adjit traces: every call of the compiled function "
                  "reuses it (as in JAX). Pass the permutation in as an argument",
                  AdjitWarning, stacklevel=3)
    order = _originals[("random", "permutation")](len(x))
    rows = B.resolve(x)[order]
    if name == "permutation":
        return rows
    x[...] = rows
    return None


_SHUFFLE_WARNING = r"you are shuffling a '(Tracer|Buffer)' object"


def _generic_shuffle(e, frames):
    """A TraceError for rng.shuffle(x) of a traced x (a Generator's method, which adjit cannot
    wrap): NumPy shuffles only its own arrays in place correctly; on any other array its row
    swaps go through views and repeat rows. `e` is NumPy's warning raised as an error (see
    constructors_accept_tracers), `frames` the traceback's, innermost last."""
    frames = [f for f in frames if not f.f_code.co_filename.endswith(".pyx")]   # Cython's
    where = user_where(frames[-1]) if frames else None
    return TraceError(f"rng.shuffle of a traced array{_at(where)}: NumPy shuffles its own "
                      "arrays in place, and on any other array its row swaps repeat rows. "
                      "Write x = rng.permutation(x) (the same draws; the order is drawn once, "
                      "while adjit traces), or pass the permutation in as an argument")


_VECTORIZE_MAX = 1024     # elements np.vectorize unrolls to (one call of f per element)


def _vectorize_call(orig):
    """np.vectorize(f)(x) with traced x: f is called on each element, as NumPy does, and
    the results are stacked (f may branch only on what adjit can trace)."""
    @functools.wraps(orig)
    def call(self, *args, **kwargs):
        if not any(_holds_tracer(a) for a in (*args, *kwargs.values())):
            return orig(self, *args, **kwargs)
        where = _at(user_where())
        if self.signature is not None or self.excluded or kwargs:
            raise UnsupportedError(f"np.vectorize with signature=, excluded= or keyword "
                                   f"arguments on traced arrays{where}; call the function "
                                   "on the whole arrays (NumPy's functions broadcast)")
        args = [B.resolve(a) for a in args]
        shape = np.broadcast_shapes(*(tuple(F._shape_of(a)) for a in args))
        n = int(math.prod(shape))
        if n == 0 or n > _VECTORIZE_MAX:
            raise UnsupportedError(
                f"np.vectorize of traced arrays of {n} elements{where}: adjit unrolls it into "
                f"one call per element, up to {_VECTORIZE_MAX}. Call the function on the "
                "whole array instead (np.where for its branches; NumPy's functions broadcast)")
        flat = [F.reshape(F.broadcast_to(a, shape), (-1,)) for a in args]
        outs = [self.pyfunc(*(a[i] for a in flat)) for i in range(n)]
        many = isinstance(outs[0], tuple)
        cols = list(zip(*outs)) if many else [outs]
        res = []
        for k, col in enumerate(cols):
            r = F.reshape(F.stack([_strong_array(c) for c in col], 0), shape)
            if self.otypes:
                r = F.cast(r, np.dtype(self.otypes[k]))
            res.append(r)
        return tuple(res) if many else res[0]
    return call


def _strong_array(v):
    """An element's result as NumPy's vectorize stores it: an array value, not a Python
    number (its dtype is the element's own)."""
    return v if isinstance(v, Tracer) else np.asarray(v)


_wrappers = {}
_POLY_FAMILIES = (("polynomial", "poly"), ("chebyshev", "cheb"), ("legendre", "leg"),
                  ("hermite", "herm"), ("hermite_e", "herme"), ("laguerre", "lag"))


def _result_type(orig):
    """np.result_type with traced arrays among its arguments: their dtypes (a traced Python
    number stays weak), as NumPy's for the arrays they stand for."""
    @functools.wraps(orig)
    def result_type(*xs):
        if not any(isinstance(B.resolve(x), Tracer) or CX.holds(x) for x in xs):
            return orig(*xs)
        return orig(*[F._dtype_part(B.resolve(x)) if isinstance(B.resolve(x), Tracer) else
                      x.dtype if CX.holds(x) else x for x in xs])
    return result_type


def _tensor_values(orig):
    """numpy.polynomial's chebval(x, c) & co. (and polyvalfromroots): they give c one axis
    per axis of x when `isinstance(x, np.ndarray)`, which a traced x is not; done here, then
    evaluated elementwise (tensor=False), so several polynomials and the 2-d/3-d and grid
    forms built on these get NumPy's shapes and values."""
    @functools.wraps(orig)
    def values(x, c, tensor=True):
        if tensor and B._is_traced(x):
            nd = len(getattr(B.resolve(x), "shape", ()))
            if nd:
                c = np.array(c, ndmin=1)    # (the tracing np.array: lists of traced values too)
                c = np.reshape(c, tuple(np.shape(c)) + (1,) * nd)
            return orig(x, c, tensor=False)
        return orig(x, c, tensor)
    return values


def _made(wrap, orig):
    """wrap(orig), made once: a trace starts without rebuilding some 150 wrappers."""
    key = (wrap, orig)
    w = _wrappers.get(key)
    if w is None:
        w = _wrappers[key] = wrap(orig)
    return w


# SciPy's submodules that adjit follows and SciPy loads on first attribute access: loaded
# before the patches are made when SciPy is imported (`import scipy`, then scipy.stats.norm
# inside the traced function was refused on the first call: the submodule came in after the
# patching, and its import code called the patched np.random, 45 warnings; sweep 32)
_LAZY_SCIPY = ("scipy.special", "scipy.stats", "scipy.fft", "scipy.linalg")


def _load_lazy_scipy():
    if "scipy" not in sys.modules:
        return
    for name in _LAZY_SCIPY:
        if name not in sys.modules:
            try:
                importlib.import_module(name)
            except ImportError:     # a partial SciPy install: that submodule stays refused
                pass


def constructors_accept_tracers():
    """Wrap np.array & co. until the returned function is called (nests; thread-safe)."""
    with _patch_lock:
        if _patch_depth[0] == 0:
            _load_lazy_scipy()
            for name in _CONSTRUCTORS:
                _originals[name] = getattr(np, name)
                setattr(np, name, _made(_accepting, _originals[name]))
            for name in B._MAKERS:
                _originals[name] = getattr(np, name)
                setattr(np, name, _made(B.making_buffers, _originals[name]))
            for mod, name in _LIST_TAKERS:
                _originals[(mod, name)] = getattr(mod, name)
                setattr(mod, name, _made(_taking_lists, _originals[(mod, name)]))
            for name, column in (("r_", False), ("c_", True)):
                _originals[name] = getattr(np, name)
                setattr(np, name, _Concatenator(_originals[name], column))
            _originals["require"] = np.require    # no __array_function__ dispatch
            np.require = _requiring(np.require)
            _originals["nditer"] = np.nditer
            np.nditer = _nditer(np.nditer)
            _originals["kaiser"] = np.kaiser      # no __array_function__ dispatch either
            np.kaiser = _kaiser(np.kaiser)
            _originals["result_type"] = np.result_type    # nor this (a tracer was `object`)
            np.result_type = _made(_result_type, np.result_type)
            _originals["polyint"] = np.polyint    # dispatches on p alone, not on k
            np.polyint = _traced_anywhere(np.polyint)
            _originals["fromiter"] = np.fromiter
            np.fromiter = _fromiter(np.fromiter)
            st = np.lib.stride_tricks
            _originals["as_strided"] = st.as_strided
            st.as_strided = _as_strided(st.as_strided)
            _originals["vectorize"] = np.vectorize.__call__
            np.vectorize.__call__ = _vectorize_call(np.vectorize.__call__)
            for name in _RANDOM:
                _originals[("random", name)] = getattr(np.random, name)
                setattr(np.random, name, _warning_random(_originals[("random", name)], name))
            # a Generator's shuffle of a traced array would repeat rows (NumPy's generic path
            # swaps views): its warning becomes an error, which trace.py names
            warnings.filterwarnings("error", _SHUFFLE_WARNING, UserWarning)
            _originals["shuffle_filter"] = warnings.filters[0]
            basic = sys.modules.get("scipy.special._basic")
            if basic is not None and getattr(basic, "asarray", None) is _originals["asarray"]:
                # scipy.special.polygamma & co. take asarray(x) first: let a tracer through
                _originals["scipy_basic_asarray"] = basic
                basic.asarray = np.asarray
            # scipy.stats' distributions: methods on their classes, so a frozen
            # distribution (a new instance inside, norm(loc, scale)) has them too
            _originals["scipy_classes"] = patched = []
            for cls, wraps in _scipy_stats_wraps():
                patched.append((cls, {k: cls.__dict__.get(k) for k in wraps}))
                for kind, wrap in wraps.items():
                    setattr(cls, kind, _made(wrap, getattr(cls, kind)))
            # SciPy's helpers, in their home module and where other modules imported them
            _originals["scipy_helpers"] = helpers = []
            for home, name, also, wrap in _SCIPY_HELPERS:
                orig = getattr(sys.modules.get(home), name, None)
                if orig is None:
                    continue
                for m in (sys.modules.get(n) for n in (home,) + also):
                    if getattr(m, name, None) is orig:
                        helpers.append((m, name, orig))
                        setattr(m, name, _made(wrap, orig))
            lse = sys.modules.get("scipy.special._logsumexp")
            if lse is not None and hasattr(lse, "_logsumexp"):
                _originals["scipy_logsumexp"] = (lse, lse._logsumexp)
                lse._logsumexp = _scipy_logsumexp_core(lse._logsumexp)
            sfft = sys.modules.get("scipy.fft")
            if sfft is not None:
                # scipy.fft's transforms (uarray-dispatched, so never reaching adjit) are
                # np.fft's for traced arrays: same arguments first, same pocketfft results
                _originals["scipy_fft"] = {name: getattr(sfft, name) for name in _SCIPY_FFT
                                           if hasattr(sfft, name)}
                for name, orig in _originals["scipy_fft"].items():
                    setattr(sfft, name, _scipy_fft(orig, getattr(np.fft, name)))
            _originals["polynomial"] = []
            for mod_name, prefix in _POLY_FAMILIES:
                mod = sys.modules.get(f"numpy.polynomial.{mod_name}")
                for name in (f"{prefix}val", "polyvalfromroots"):
                    if mod is not None and hasattr(mod, name):
                        orig = getattr(mod, name)
                        _originals["polynomial"].append((mod, name, orig))
                        setattr(mod, name, _made(_tensor_values, orig))
            _originals["user_globals"] = _patch_user_globals()
            if tables_on():
                _originals["table_modules"] = [
                    m.__dict__ for name, m in list(sys.modules.items())
                    if _module_kinds.get(name, (None, False))[1] and
                    isinstance(getattr(m, "__dict__", None), dict)]
        _patch_depth[0] += 1
    done = []

    def restore():
        with _patch_lock:
            if done:
                return
            done.append(True)
            _patch_depth[0] -= 1
            if _patch_depth[0] == 0:
                if "scipy_basic_asarray" in _originals:
                    _originals.pop("scipy_basic_asarray").asarray = _originals["asarray"]
                for cls, own in _originals.pop("scipy_classes"):
                    for kind, method in own.items():
                        if method is None:
                            delattr(cls, kind)
                        else:
                            setattr(cls, kind, method)
                for name in _CONSTRUCTORS + B._MAKERS + ("r_", "c_"):
                    setattr(np, name, _originals.pop(name))
                np.vectorize.__call__ = _originals.pop("vectorize")
                np.require = _originals.pop("require")
                np.nditer = _originals.pop("nditer")
                np.kaiser = _originals.pop("kaiser")
                np.result_type = _originals.pop("result_type")
                np.polyint = _originals.pop("polyint")
                np.fromiter = _originals.pop("fromiter")
                np.lib.stride_tricks.as_strided = _originals.pop("as_strided")
                for name in _RANDOM:
                    setattr(np.random, name, _originals.pop(("random", name)))
                with contextlib.suppress(ValueError):      # the user may have reset them
                    warnings.filters.remove(_originals.pop("shuffle_filter"))
                for mod, name in _LIST_TAKERS:
                    setattr(mod, name, _originals.pop((mod, name)))
                if "scipy_fft" in _originals:
                    sfft = sys.modules.get("scipy.fft")
                    for name, orig in _originals.pop("scipy_fft").items():
                        setattr(sfft, name, orig)
                for m, name, orig in _originals.pop("scipy_helpers"):
                    setattr(m, name, orig)
                if "scipy_logsumexp" in _originals:
                    lse, core = _originals.pop("scipy_logsumexp")
                    lse._logsumexp = core
                for mod, name, orig in _originals.pop("polynomial"):
                    setattr(mod, name, orig)
                for d, key, orig, new in _originals.pop("user_globals"):
                    _unswap((d, key, orig, new, 0))
                modules = _originals.pop("table_modules", ())
                originals = {id(t): plain for plain, t in _views.values()}
                for d in modules:        # stand-ins and their views stored by the function
                    for key, value in list(d.items()):
                        if type(value) is Table:
                            d[key] = originals.get(id(value),
                                                   np.ndarray.view(value, np.ndarray))
                        elif not key.startswith("__"):
                            _plain_tables(value, (), originals)
    return restore


_LIBRARY_DIRS = tuple(sorted({os.path.realpath(p) + os.sep for key in ("stdlib", "platstdlib",
                                                                       "purelib", "platlib")
                              for p in [sysconfig.get_paths().get(key)] if p}))
_module_kinds = {}     # name -> (the module, whether it is the user's)


def _is_user_module(mod) -> bool:
    """A module of the user's own code: a script or a module outside the standard library,
    site-packages and adjit (where `from numpy import zeros` is the user's)."""
    try:
        f = getattr(mod, "__file__", None)
        name = getattr(mod, "__name__", "")
    except Exception:  # noqa: BLE001 - a lazy module placeholder: not the user's code
        return False
    if not isinstance(name, str):
        return False
    if not isinstance(f, str):
        return name == "__main__"
    real = os.path.realpath(f)
    return not (real.startswith(_LIBRARY_DIRS) or "site-packages" in real or
                "dist-packages" in real or name.split(".")[0] in ("adjit", "numpy", "scipy"))


class Table(np.ndarray):
    """A NumPy array held by the user's module or the traced function's closure, as the
    function sees it in a second trace (trace.trace: the first failed because NumPy asked a
    traced value for its numbers): a view of the same memory whose indexing takes traced
    positions (class_weights[labels], table[np.searchsorted(edges, x)]) and whose NumPy
    functions and take() take traced arguments NumPy does not dispatch on (np.take(table,
    idx)). NumPy asks no one when a plain array is indexed by a foreign object. Views of it
    (table[1:], table.T) are Tables too; new arrays computed from it are plain, or Buffers
    (which may receive traced values) when the user's code made them. The names are restored
    when the trace ends."""

    def __getitem__(self, key):
        if _holds_tracer(key) or CX.holds(key) or (isinstance(key, tuple) and any(
                CX.holds(k) for k in key)):
            return self._lifted()[key]
        return np.ndarray.__getitem__(self, key)

    def _lifted(self):
        """This array as a constant of the active trace, one per memory layout and trace
        (an embedding table indexed forty times is one constant, not forty copies)."""
        ctx = current()
        cache = ctx.tables
        plain = np.ndarray.view(self, np.ndarray)
        key = (plain.__array_interface__["data"][0], plain.shape, plain.strides,
               plain.dtype.str)
        got = cache.get(key)
        owner = self.base if self.base is not None else self
        # the same array, holding the same numbers (it may be written between two reads)
        if got is None or got[0] is not owner or not np.array_equal(got[2], plain,
                                                                    equal_nan=True):
            t = B._lifted(plain)
            value = (ctx.graph[t.id]["attrs"]["value"] if isinstance(t, Tracer)
                     else plain.copy())
            got = cache[key] = (owner, t, value)
        return got[1]

    def take(self, indices, axis=None, out=None, mode="raise"):
        if _holds_tracer(indices) or _holds_tracer(out):
            return np.take(self, indices, axis=axis, out=out, mode=mode)
        return np.ndarray.take(self, indices, axis=axis, out=out, mode=mode)

    def __array_function__(self, func, types, args, kwargs):
        if _holds_tracer(list(args) + list(kwargs.values())) or CX.involves(args):
            # the tables as the plain arrays they are (constants: np.histogram's samples, an
            # interpolation's xp); a complex one as its two parts, traced, which the complex
            # functions take
            def lifted(a):
                if isinstance(a, Table):
                    return a._lifted() if a.dtype.kind == "c" else a.view(np.ndarray)
                if isinstance(a, (list, tuple)) and any(isinstance(x, Table) for x in a):
                    return type(a)(lifted(x) for x in a)
                return a
            return array_function(func, tuple(lifted(a) for a in args),
                                  {k: lifted(v) for k, v in kwargs.items()})
        if any(issubclass(t, B.Buffer) for t in types):
            return NotImplemented       # a Buffer beside it answers (B.Buffer's rules)
        r = super().__array_function__(func, types, args, kwargs)
        if isinstance(r, Table) and not np.may_share_memory(r, self):
            r = r.view(np.ndarray)       # a new array: plain, or a Buffer below
        return B._made_here(r, list(B._leaves(args))) if isinstance(r, np.ndarray) else r

    def __array_wrap__(self, arr, context=None, return_scalar=False):
        if arr is self:
            return self                  # an in-place update (W += 1): the same array
        arr = arr.view(np.ndarray)
        return arr[()] if return_scalar else arr

    def __repr__(self):
        return repr(np.ndarray.view(self, np.ndarray))

    __str__ = __repr__

    def __reduce__(self):           # pickles and deep-copies as the plain array
        return np.ndarray.view(self, np.ndarray).__reduce__()

    def copy(self, order="C"):
        """A new array made in the traced function, which may receive traced values."""
        r = np.ndarray.copy(np.ndarray.view(self, np.ndarray), order)
        return B.Buffer(r) if current() is not None and r.flags.c_contiguous else r


B.PLAIN_TYPES = (np.ndarray, Table)
_tables = [0]           # traces (and threads) that see the user's arrays as Tables now
_cells = {}             # id(cell) -> [cell, plain array, its Table, count]
_slots = {}             # (id(container), key) -> [container, key, plain array, its Table, count]


def _user_instance(v) -> bool:
    """An object of a class from the user's code (a model, a loss with its class weights) or
    a SimpleNamespace: its attributes may hold the arrays a traced function indexes."""
    import types
    if isinstance(v, types.SimpleNamespace):
        return True
    if isinstance(v, type):
        return False
    return _defined_by_user(type(v))


def _defined_by_user(cls) -> bool:
    """Is cls defined in a module of the user's code?"""
    mod = sys.modules.get(getattr(cls, "__module__", None) or "")
    return mod is not None and _user_module(mod.__name__, mod)


def _user_module(name, mod) -> bool:
    """_is_user_module(mod), kept per module name (sys.modules[name] is mod)."""
    kind = _module_kinds.get(name)
    if kind is None or kind[0] is not mod:
        kind = _module_kinds[name] = (mod, _is_user_module(mod))
    return kind[1]


class _ClassAttributes:
    """A user class's own attributes as a container Tables may be swapped into: an array set
    in the class body (class Loss: weights = np.array([...])) read as self.weights[labels]
    or Loss.weights[labels]. One per class (_class_attributes), so that the traces of two
    threads count their swaps on the same container."""

    def __init__(self, cls):
        self.cls = cls

    def items(self):
        return list(vars(self.cls).items())

    def __getitem__(self, key):
        return vars(self.cls)[key]

    def __setitem__(self, key, value):
        setattr(self.cls, key, value)


_class_attributes = {}      # id(user class) -> its _ClassAttributes


def _user_classes(v):
    """The classes of the user's code whose attributes v reads: v itself when it is such a
    class, else the user's classes in the method resolution order of v's type."""
    if isinstance(v, type):
        found = [v] if _user_module_of(v) else []
    elif _user_instance(v):
        found = [c for c in type(v).__mro__ if c is not object and _user_module_of(c)]
    else:
        return []
    out = []
    for cls in found:
        got = _class_attributes.get(id(cls))
        if got is None or got.cls is not cls:
            got = _class_attributes[id(cls)] = _ClassAttributes(cls)
        out.append(got)
    return out


def _user_module_of(cls) -> bool:
    # (a class with an Enum's or an ABC's metaclass: not a container of ours)
    return type(cls) is type and _defined_by_user(cls)


def _table_container(v):
    """The dict or list one level into v that Tables may be swapped into: v itself (a dict,
    an OrderedDict, a list) or a user object's __dict__; None for anything else (a user
    class's attributes are _user_classes')."""
    import collections
    if type(v) in (dict, list, collections.OrderedDict, collections.defaultdict):
        return v
    if _user_instance(v):
        c = getattr(v, "__dict__", None)
        return c if type(c) is dict else None
    return None


def _containers(v):
    """v's container (_table_container) and the attributes of the user's classes it reads."""
    c = _table_container(v)
    return ([c] if c is not None else []) + _user_classes(v)


def _table_slots(v, depth=2, seen=None):
    """(container, key, plain array) up to two levels into v: a dict's values, a list's
    items, the attributes of a user object (self.class_weights[labels], TABLES["a"][idx],
    self.params["cw"][labels])."""
    seen = set() if seen is None else seen
    out = []
    if depth == 0:
        return out
    for c, k, x in _contained(v, seen):
        if isinstance(k, str) and k.startswith("__"):
            continue
        if type(x) is np.ndarray:
            out.append((c, k, x))
        else:
            out.extend(_table_slots(x, depth - 1, seen))
    return out


def _contained(v, seen):
    """(container, key, value) of each container of v (_containers) not yet in seen."""
    for c in _containers(v):
        if id(c) in seen:
            continue
        seen.add(id(c))
        items = enumerate(c) if isinstance(c, list) else c.items()
        for k, x in list(items):
            yield c, k, x


def _plain_tables(v, keep=(), originals=None, depth=2, seen=None):
    """Tables that the traced function stored up to two levels into v (self.wT = self.w.T,
    CFG["cache"]["head"] = CFG["w"][:2], HIST.append(W)) made NumPy's again: a stand-in for
    a user's array (in originals) that array itself, a view of one a plain view of the same
    memory; the stand-ins with ids in keep are left to their own restoring."""
    seen = set() if seen is None else seen
    if depth == 0:
        return
    for c, k, x in _contained(v, seen):
        if type(x) is Table:
            if id(x) not in keep:
                plain = (originals or {}).get(id(x))
                c[k] = plain if plain is not None else np.ndarray.view(x, np.ndarray)
        else:
            _plain_tables(x, keep, originals, depth - 1, seen)


def _swap_slot(c, k, x, counted):
    """c[k] = x's Table; with counted, shared by the traces (threads) that swap it."""
    t = _as_table(x)
    if t is None:
        return None
    if counted:
        entry = _slots.get((id(c), k))
        if entry is not None and entry[0] is c and entry[2] is x and c[k] is entry[3]:
            entry[4] += 1
            return entry
        entry = _slots[(id(c), k)] = [c, k, x, t, 1]
    else:
        entry = [c, k, x, t, 1]
    try:
        c[k] = t
    except (AttributeError, TypeError):     # a class that refuses new attributes
        if counted:
            del _slots[(id(c), k)]
        return None
    return entry


def _unswap(entry):
    c, k, x, t, _ = entry
    try:
        if c[k] is t:
            c[k] = x
    except (IndexError, KeyError):
        pass


def tables_on() -> bool:
    return _tables[0] > 0


class seeing_tables:
    """The traces started inside see the user's module and closure arrays as Tables."""

    def __enter__(self):
        with _patch_lock:
            _tables[0] += 1

    def __exit__(self, *exc):
        with _patch_lock:
            _tables[0] -= 1
            if not _tables[0]:
                _views.clear()


_views = {}     # id(plain array) -> (it, its Table) while Tables are seen: one view per array


def _as_table(value):
    """The Table view of a plain numeric array (None for anything else): the same one for
    every name that holds the array (W_alias = W stays `is` W)."""
    if type(value) is np.ndarray and value.dtype.kind in "biufc" and value.ndim:
        got = _views.get(id(value))
        if got is None or got[0] is not value:
            got = _views[id(value)] = (value, value.view(Table))
        return got[1]
    return None


def closure_tables(fn):
    """When Tables are seen: the plain arrays in fn's closure cells (and in those of the
    functions it closes over, one level, and of the user's functions that adjit's wrappers
    close over), and one level into the dicts, lists and user objects there (a callable
    loss object's self.w, a bound method's object), swapped for Table views, counted per
    cell so that traces in two threads share them; returns a function restoring them."""
    if not tables_on():
        return lambda: None
    import inspect
    fn = inspect.unwrap(fn) if callable(fn) else fn
    done, seen = [], set()

    def visit(f, depth):
        if id(f) in seen:
            return
        seen.add(id(f))
        swap(getattr(f, "__self__", None))      # a bound method's object
        if not hasattr(getattr(f, "__func__", f), "__code__"):
            swap(f)                             # a callable object (a loss with weights)
        f = getattr(f, "__func__", f)
        ours = str(getattr(f, "__module__", "")).startswith("adjit.")
        if depth > 1 and ours:
            return
        for cell in getattr(f, "__closure__", None) or ():
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            entry = _cells.get(id(cell))
            if entry is not None and entry[0] is cell and v is entry[2]:
                entry[3] += 1
                done.append(entry)
                continue
            t = _as_table(v)
            if t is not None:
                entry = _cells[id(cell)] = [cell, v, t, 1]
                cell.cell_contents = t
                done.append(entry)
            elif callable(v) and hasattr(v, "__closure__"):
                # the user's function inside adjit's wrappers (named -> traced -> fn)
                if depth < 1 or (ours and depth < 3):
                    visit(v, depth + 1)
            else:
                swap(v)              # a dict, a list or a user object: one level in

    def swap(v):
        if _containers(v):
            touched.append(v)
        for c, k, x in _table_slots(v):
            entry = _swap_slot(c, k, x, counted=True)
            if entry is not None:
                slots.append(entry)
    slots, touched = [], []
    with _patch_lock:
        try:
            visit(fn, 0)
        except Exception:  # noqa: BLE001 - a helper for user code: never fail a trace for it
            pass

    def restore():
        with _patch_lock:
            for entry in slots:
                entry[4] -= 1
                if entry[4] <= 0:
                    if _slots.get((id(entry[0]), entry[1])) is entry:
                        del _slots[(id(entry[0]), entry[1])]
                    _unswap(entry)
            if not _tables[0] or all(e[4] <= 0 for e in slots):
                keep = {id(t) for _, t in _views.values()}
                for v in touched:
                    _plain_tables(v, keep)    # views of Tables the function stored there
            for entry in done:
                cell, v, t, _ = entry
                entry[3] -= 1
                if entry[3] > 0:
                    continue
                _cells.pop(id(cell), None)
                try:
                    if cell.cell_contents is t:
                        cell.cell_contents = v
                except ValueError:
                    pass
    return restore


def _patch_user_globals():
    """NumPy functions the user's modules imported by name (`from numpy import zeros, r_`)
    take the tracing versions too, as np.zeros does: np.zeros is looked up when called, a
    name imported before tracing is the original. Returns what to restore."""
    # (the array makers and numpy.polynomial's evaluators only: a function compared by
    # identity, `how is max` or a dict keyed by np.mean, must stay NumPy's own)
    patched = {}
    for name in _CONSTRUCTORS + B._MAKERS + ("r_", "c_"):
        patched[id(_originals[name])] = (_originals[name], getattr(np, name))
    for mod, name, orig in _originals["polynomial"]:
        patched[id(orig)] = (orig, getattr(mod, name))
    for m, name, orig in _originals["scipy_helpers"]:
        if name == "multigammaln":       # from scipy.special import multigammaln
            patched[id(orig)] = (orig, getattr(m, name))
    done = []
    tables = tables_on()
    for name, mod in list(sys.modules.items()):
        d = getattr(mod, "__dict__", None) if _user_module(name, mod) else None
        if not isinstance(d, dict):
            continue
        for key, value in list(d.items()):
            hit = patched.get(id(value))
            if hit is not None and hit[0] is value and not key.startswith("__"):
                d[key] = hit[1]
                done.append((d, key, value, hit[1]))
            elif tables and type(value) is np.ndarray and not key.startswith("__"):
                t = _as_table(value)   # a module's array: indexable by traced positions
                if t is not None:
                    d[key] = t
                    done.append((d, key, value, t))
            elif tables and not key.startswith("__"):
                # one level into a module's dicts, lists and objects (CONFIG["w"][labels])
                for c, k, x in _table_slots(value):
                    entry = _swap_slot(c, k, x, counted=False)
                    if entry is not None:
                        done.append((c, k, x, entry[3]))
    return done


def _fromiter(orig):
    """np.fromiter of an iterable yielding traced values: their stack, in dtype."""
    @functools.wraps(orig)
    def fromiter(iterable, dtype, count=-1, **kw):
        items = list(iterable) if count < 0 else [v for _, v in zip(range(count), iterable)]
        if not any(_holds_tracer(v) for v in items):
            return orig(items, dtype, count=len(items), **kw)
        if count >= 0 and len(items) < count:
            raise ValueError(f"iterator too short: Expected {count} but iterator had only "
                             f"{len(items)} items.")
        dt = np.dtype(dtype)
        return F.stack([F.cast(B.resolve(v), dt) if isinstance(B.resolve(v), Tracer) else
                        np.asarray(v, dt) for v in items], 0)
    return fromiter


def _traced_anywhere(orig):
    """orig with a traced value in an argument NumPy does not dispatch on (np.polyint's k):
    adjit's implementation, as if NumPy had dispatched."""
    @functools.wraps(orig)
    def fn(*args, **kwargs):
        if not _holds_tracer(list(args) + list(kwargs.values())):
            return orig(*args, **kwargs)
        return array_function(orig, args, kwargs)
    return fn


def _kaiser(orig):
    """np.kaiser(M, beta) with a traced beta (a learnable window): NumPy's formula,
    i0(beta sqrt(1 - ((n - alpha) / alpha)**2)) / i0(beta), with adjit's np.i0."""
    @functools.wraps(orig)
    def kaiser(M, beta):
        beta = B.resolve(beta)
        if not isinstance(beta, Tracer) or isinstance(M, Tracer):
            return orig(M, beta)
        M = int(M)
        if M < 1:
            return np.array([], dtype=np.float64)
        if M == 1:
            return np.ones(1, dtype=np.float64)
        n = np.arange(0, M, dtype=np.float64)
        alpha = (M - 1) / 2.0
        beta = F.cast(beta, np.float64)
        arg = F.mul(beta, np.sqrt(np.maximum(1 - ((n - alpha) / alpha) ** 2.0, 0.0)))
        return F.div(N.i0(arg), N.i0(beta))
    return kaiser


_NORM_METHODS = ("pdf", "logpdf", "cdf", "logcdf", "sf", "logsf", "ppf", "isf")


def _norm_method(kind, orig):
    """scipy.stats.norm.pdf & co. of traced arguments, written with adjit's ops (SciPy's own
    code needs concrete arrays); float64 as SciPy; logcdf and logsf are log_ndtr's, finite
    far into the tails as SciPy's; ppf and isf are loc +- scale ndtri(q), as SciPy's; NaN
    where scale <= 0, as SciPy."""
    first = _first_parameter(orig)

    @functools.wraps(orig)
    def fn(self, *args, **kw):
        split = _split_first(first, args, kw)
        if split is None:
            return orig(self, *args, **kw)          # SciPy's own error
        x, rest, others = split
        try:
            (loc, scale), others = _bind(rest, others, ("loc", "scale"), (0, 1))
        except TypeError:
            return orig(self, *args, **kw)          # SciPy's own error
        if others or not any(_holds_tracer(a) for a in (x, loc, scale)):
            return orig(self, *args, **kw)
        x, loc, scale = (F.cast(B.resolve(a), np.float64) if _holds_tracer(a) else
                         np.asarray(a, np.float64) for a in (x, loc, scale))
        r = _norm_value(kind, x, loc, scale)
        if isinstance(scale, Tracer) or np.any(scale <= 0):
            r = F.where(F.gt(scale, 0), r, np.nan)
        return r
    return fn


def _norm_value(kind, x, loc, scale):
    if kind in ("ppf", "isf"):
        step = F.mul(scale, _SCIPY_SPECIAL["ndtri"](x))
        return F.add(loc, step) if kind == "ppf" else F.sub(loc, step)
    z = F.div(F.sub(x, loc), scale)
    if kind in ("pdf", "logpdf"):
        log_p = F.sub(F.mul(F.mul(z, z), -0.5), F.add(F.log(scale),
                                                      0.5 * math.log(2 * math.pi)))
        return F.exp(log_p) if kind == "pdf" else log_p
    z = z if kind in ("cdf", "logcdf") else F.neg(z)
    return _SCIPY_SPECIAL["log_ndtr" if kind.startswith("log") else "ndtr"](z)


_NORM_WRAPS = {kind: functools.partial(_norm_method, kind) for kind in _NORM_METHODS}


def _first_parameter(method):
    """The name of a distribution method's first argument after self: x, q (ppf, isf) or k
    (a discrete distribution's), which users may pass by keyword (st.expon.ppf(q=0.3))."""
    while hasattr(method, "__wrapped__"):
        method = method.__wrapped__
    return list(inspect.signature(method).parameters)[1]


def _split_first(first, args, kwds):
    """(the first argument, the other positional ones, the other keywords), or None."""
    if args:
        return args[0], args[1:], kwds
    if first in kwds:
        kwds = dict(kwds)
        return kwds.pop(first), (), kwds
    return None


def _bind(args, kwds, names, defaults):
    """names bound from the positional args then the keywords (the rest of kwds returned)."""
    if len(args) > len(names):
        raise TypeError("too many arguments")
    kwds = dict(kwds)
    values = list(args) + [kwds.pop(n, d) for n, d in zip(names[len(args):],
                                                         defaults[len(args):])]
    if any(n in kwds for n in names[:len(args)]):
        raise TypeError("an argument given twice")
    return values, kwds


def _stats_method(family, kind, orig):
    """A scipy.stats distribution's public method that does its work in scipy_stats.py when
    an argument is traced."""
    first = _first_parameter(orig)

    @functools.wraps(orig)
    def fn(self, *args, **kwds):
        split = _split_first(first, args, kwds)
        if split is None or not SS.traced(args + tuple(kwds.values())):
            return orig(self, *args, **kwds)
        x, args, kwds = split
        with np.errstate(all="ignore"):     # constant parts at SciPy's edge values, as SciPy
            return family(kind, self, x, args, kwds)
    return fn


def _summary_method(kind, orig):
    """A distribution's entropy, mean, var or std with traced parameters (scipy_stats.py)."""
    @functools.wraps(orig)
    def fn(self, *args, **kwds):
        if not SS.traced(args + tuple(kwds.values())):
            return orig(self, *args, **kwds)
        with np.errstate(all="ignore"):
            return SS.refusing(SS.summary)(kind, self, args, kwds)
    return fn


def _multivariate_method(family, kind, orig):
    @functools.wraps(orig)
    def fn(self, *args, **kwds):
        if not SS.traced(args + tuple(kwds.values())):
            return orig(self, *args, **kwds)
        return family(kind, *args, **kwds)
    return fn


def _frozen_method(family, kind, orig):
    @functools.wraps(orig)
    def fn(self, x):
        if not SS.traced([x]):
            return orig(self, x)
        return family(kind, self, x)
    return fn


def _frozen_maker(frozen, orig):
    """multivariate_normal(mean, cov) & co. of traced parameters: adjit's frozen form."""
    return _multivariate_method(lambda _kind, *args, **kwds: frozen(*args, **kwds), None, orig)


def _apply_where(orig):
    """SciPy's apply_where(cond, args, f1, f2) (f1 where cond, else f2 or fill_value) with
    traced arguments: both branches everywhere, chosen by np.where (whose gradient reaches
    only the chosen branch, so a branch's NaN off its domain stays out of it)."""
    @functools.wraps(orig)
    def fn(cond, args, f1, f2=None, /, *, fill_value=None, xp=None):
        tup = args if isinstance(args, tuple) else (args,)
        if not _holds_tracer(list(tup) + [cond, fill_value]):
            return orig(cond, args, f1, f2, fill_value=fill_value, xp=xp)
        shape = F._broadcast_shape("apply_where", [F._shape_of(a) for a in (cond,) + tup])
        tup = tuple(F.broadcast_to(B.resolve(a), shape) if _holds_tracer(a) else
                    np.broadcast_to(a, shape) for a in tup)
        other = f2(*tup) if f2 is not None else fill_value
        return F.where(B.resolve(cond) if _holds_tracer(cond) else np.asarray(cond),
                       f1(*tup), other)
    return fn


def _lazyselect(orig):
    """SciPy's _lazyselect(condlist, choicelist, arrays, default) with traced arguments: each
    function on all of the arrays, placed where its condition holds (a later one over an
    earlier, as SciPy's np.place in turn)."""
    @functools.wraps(orig)
    def fn(condlist, choicelist, arrays, default=0):
        if not _holds_tracer(list(condlist) + list(arrays) + [default]):
            return orig(condlist, choicelist, arrays, default)
        arrays = [B.resolve(a) if _holds_tracer(a) else np.asarray(a) for a in arrays]
        shape = F._broadcast_shape("_lazyselect", [F._shape_of(a) for a in arrays])
        # 1-d copies, as SciPy's np.extract gives them (its functions may write into them)
        flat = [F.reshape(F.broadcast_to(a, shape), (-1,)) if isinstance(a, Tracer) else
                np.array(np.broadcast_to(a, shape)).reshape(-1) for a in arrays]
        out = F.broadcast_to(F.cast(B.resolve(default), np.float64)
                             if _holds_tracer(default) else np.asarray(default, np.float64),
                             shape)
        for cond, f in zip(condlist, choicelist):
            cond = B.resolve(cond) if _holds_tracer(cond) else np.asarray(cond)
            if not isinstance(cond, Tracer) and not np.any(cond):
                continue
            got = f(*[a.copy() if isinstance(a, np.ndarray) else a for a in flat])
            out = F.where(cond, F.reshape(B.resolve(got) if _holds_tracer(got) else
                                          np.asarray(got), shape), out)
        return out
    return fn


def _multigammaln(orig):
    """scipy.special.multigammaln(a, d) of a traced a: d (d - 1) / 4 log(pi) + the sum of
    gammaln(a - (j - 1) / 2), j = 1..d; NaN where a <= (d - 1) / 2 (SciPy raises there)."""
    @functools.wraps(orig)
    def fn(a, d):
        if not _holds_tracer([a]) or _holds_tracer([d]):
            return orig(a, d)
        d = np.asarray(d)[()]
        if not np.isscalar(d) or np.floor(d) != d:
            raise ValueError("d should be a positive integer (dimension)")
        a = B.resolve(_from_nested(a, _originals["asarray"]))
        a = F.cast(a, np.float64) if F._dtype_of(a).kind != "f" else a
        res = d * (d - 1) * 0.25 * math.log(math.pi)
        for j in range(1, int(d) + 1):
            res = F.add(res, F.gammaln(F.sub(a, (j - 1.0) / 2)))
        return F.where(F.gt(a, 0.5 * (d - 1)), res, np.nan)
    return fn


# (home module, name, other modules that import it, wrapper maker): SciPy's helpers traced
_SCIPY_HELPERS = (
    # two-branch formulas (cauchy._logpdf, t's df = inf case)
    ("scipy._lib.array_api_extra", "apply_where", (), _apply_where),
    # branch selection in formulas (beta._entropy, kappa4)
    ("scipy._lib._util", "_lazyselect", ("scipy.stats._continuous_distns",
                                         "scipy.stats._discrete_distns"), _lazyselect),
    # a Wishart's normalizer: a sum of gammalns
    ("scipy.special._spfun_stats", "multigammaln", ("scipy.special",), _multigammaln))

_STATS_WRAPS = {}


def _scipy_stats_wraps():
    """(class, {method name: wrapper maker}) for the scipy.stats classes imported so far."""
    distns = sys.modules.get("scipy.stats._continuous_distns")
    if distns is None:
        return ()
    if not _STATS_WRAPS:
        from scipy.stats import _distn_infrastructure as di, _multivariate as mv
        P = functools.partial
        _STATS_WRAPS.update({
            di.rv_generic: {k: P(_summary_method, k) for k in SS.SUMMARIES},
            di.rv_continuous: {k: P(_stats_method, SS.refusing(SS.continuous), k)
                               for k in SS.CONTINUOUS},
            di.rv_discrete: {k: P(_stats_method, SS.refusing(SS.discrete), k)
                             for k in SS.DISCRETE},
            type(distns.norm): _NORM_WRAPS,
            mv.multivariate_normal_gen: dict(
                {k: P(_multivariate_method, SS.mvn, k) for k in SS.MULTIVARIATE},
                __call__=P(_frozen_maker, SS.FrozenMVN)),
            # a frozen one of constant parameters (a Covariance object's among them) at
            # traced points
            mv.multivariate_normal_frozen: {
                k: P(_frozen_method, lambda kind, self, x: SS.mvn(
                    kind, x, self.mean, self.cov_object, self.allow_singular), k)
                for k in SS.MULTIVARIATE},
            mv.multinomial_gen: dict(
                {k: P(_multivariate_method, SS.multinomial, k) for k in ("pmf", "logpmf")},
                __call__=P(_frozen_maker, SS.FrozenMultinomial)),
            mv.dirichlet_gen: dict(
                {k: P(_multivariate_method, SS.dirichlet, k) for k in SS.MULTIVARIATE},
                __call__=P(_frozen_maker, SS.FrozenDirichlet))})
    return _STATS_WRAPS.items()


_SCIPY_FFT = ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2",
              "irfft2", "fftn", "ifftn", "rfftn", "irfftn", "fftshift", "ifftshift")


def _scipy_fft(orig, numpy_fn):
    """scipy.fft.<name> that sends traced arrays to np.fft.<name> (scipy's extra keywords,
    overwrite_x and workers, change nothing in a trace; plan= is refused by NumPy's
    signature)."""
    @functools.wraps(orig)
    def fn(x, *args, overwrite_x=False, workers=None, **kwargs):
        if not (_holds_tracer(x) or CX.holds(x)):
            return orig(x, *args, overwrite_x=overwrite_x, workers=workers, **kwargs) \
                if "shift" not in orig.__name__ else orig(x, *args, **kwargs)
        return numpy_fn(x, *args, **kwargs)
    return fn


def _scipy_logsumexp_core(core):
    """SciPy's logsumexp core (however the user imported logsumexp) while tracing: SciPy
    takes every tied maximum out of the sum together and gives the group its gradient
    through max, which splits it evenly, not in proportion to the weights b; here the max
    is only a shift (no gradient flows through it), as in adjit.logsumexp."""
    @functools.wraps(core)
    def fn(a, b, *, axis, return_sign, xp):
        if not any(isinstance(B.resolve(x), Tracer) for x in (a, b) if x is not None) or \
                F._dtype_of(a).kind == "c":
            return core(a, b, axis=axis, return_sign=return_sign, xp=xp)
        if b is not None:
            a = F.where(F.eq(b, 0), -np.inf, a)       # a zero weight drops its term, as SciPy
        m = F.max(a, axis, keepdims=True)
        m = F.stop_gradient(F.where(F.lt(F.abs(m), np.inf), m, F.zeros_like(m)))
        e = F.exp(F.sub(a, m))
        s = F.sum(e if b is None else F.mul(b, e), axis, keepdims=True)
        sgn = F.sign(s)
        out = F.add(F.log(F.abs(s)), m)
        if not return_sign:
            out = F.where(F.lt(sgn, 0), np.nan, out)
        return out, sgn
    return fn


def _pow(x, p):
    # x ** 2 is the most common power in losses: a product is exact and cheaper than pow
    if isinstance(p, (int, float)) and not isinstance(p, bool):
        dt = F.result_dtype(x, p)
        if isinstance(x, Tracer) and x.dtype != dt:
            x = F.cast(x, dt)  # int ** 2.0 is float, as in NumPy
        if p == 2:
            return F.mul(x, x)
        if p == 1:
            return x.copy_() if isinstance(x, Tracer) else x   # a new array, as NumPy's
        if p == 0.5:
            return F.sqrt(x)
    return F.power(x, p)


# -- assignment ---------------------------------------------------------------------------------
def _writable(s):
    if isinstance(s, np.ndarray):       # np.copyto(z, v) & co. into a NumPy array (sweep 30)
        raise UnsupportedError(
            f"writing traced values into a NumPy array{_at(user_where())}: adjit follows the "
            "arrays NumPy functions create inside the traced function (np.zeros, np.array, "
            "np.copy(X)), but a global array and X.copy() stay NumPy arrays, which cannot hold "
            "traced values; create the array with np.copy(X) or np.zeros, or compute a new "
            "one (np.where(mask, v, z))")
    if current() is None:
        raise UnsupportedError(
            f"assigning into an array traced inside a function, after its trace ended"
            f"{_at(user_where())}: a traced value escaped (stored in an object or a global). "
            "Return the values you need from the traced function and use those.")
    if current() is not s.ctx:
        raise UnsupportedError(
            f"assigning into an array of an enclosing traced function{_at(user_where())}: "
            "inside adjit.grad/jacobian/... of a closure, compute a new array instead")


def _setitem(s, k, v):
    """x[k] = v: x (and its views, and the array it views) now hold the new values."""
    _writable(s)
    if type(k) is list and _holds_tracer(k):     # Y[[i, j]] = ... with traced i, j
        k = _from_nested(k, _originals.get("asarray", np.asarray))
    elif type(k) is tuple and any(type(part) in (list, tuple) and _holds_tracer(part)
                                  for part in k):
        k = tuple(_from_nested(part, _originals.get("asarray", np.asarray))      # A[[i, j], :]
                  if type(part) in (list, tuple) and _holds_tracer(part) else part for part in k)
    mask = F.traced_mask(s, k)
    if mask is not None:
        # x[x > t] = v: a select when v is one value (more values would need the count),
        # or x[m] = f(x[m]) with the same mask (a Selection, see masked.py)
        m = F.reshape(mask, mask.shape + (1,) * (s.ndim - mask.ndim))
        if isinstance(v, Selection):
            if not same_mask(v.mask, mask):
                v._refuse("x[mask] = y[other_mask]")
            s.assign(F.cast(F.where(m, F.cast(v.full, s.dtype), s), s.dtype))
            return
        v = B.resolve(v)
        # one value, or one row for each selected place (h[done] = h0 with done of shape
        # (n,) and h0 of h's row shape): no count needed
        vs, rest = tuple(F._shape_of(v)), tuple(s.shape[mask.ndim:])
        while vs and vs[0] == 1 and len(vs) > len(rest):
            vs = vs[1:]
        try:
            fits = len(vs) <= len(rest) and np.broadcast_shapes(vs, rest) == rest
        except ValueError:
            fits = False
        if not fits:
            raise UnsupportedError(
                f"x[mask] = values with a traced mask{_at(user_where())}: how many values are "
                "taken depends on the data; write x = np.where(mask, new_values, x) instead")
        v = F.reshape(v, vs) if isinstance(v, Tracer) else np.asarray(v).reshape(vs)
        s.assign(F.cast(F.where(m, F.cast(v, s.dtype), s), s.dtype))
        return
    traced = F.traced_positions(s, k)
    if traced is not None:
        # positions from traced labels: exact when the constant index arrays alone make
        # them distinct (one-hot rows t[np.arange(n), y] = 1), as there is then no
        # last-write-wins order to follow
        arrays, tkey, shape, unique = traced
        if not unique and _sequential_writes(s, k, v):
            return
        if not unique:
            raise UnsupportedError(
                f"assigning at positions computed from traced values{_at(user_where())}: "
                "they may repeat, and which write wins then depends on the data. Use "
                "np.add.at(x, idx, v) to accumulate, or adjit.where(...) / adjit.one_hot")
        val = F._value_for(v, shape, s)
        hit = F.scatter_add(F.full_like(val, 1), arrays, tkey, s.shape)
        put = F.scatter_add(val, arrays, tkey, s.shape)
        s.assign(F.where(F.ne(hit, 0), put, s))
        return
    s.assign_at(*F.index_target(s, k, v))


_SEQUENTIAL_MAX = 64


def _sequential_writes(s, k, v):
    """x[idx] = v with a few traced positions idx (one 1-d index among slices and ints) that
    may repeat, as a row swap A[[k, p], :] = A[[p, k], :] with p from argmax: one write per
    position in order, so a repeated position takes the last value as NumPy's loop does.
    -> whether it was done."""
    key = list(k) if isinstance(k, tuple) else [k]
    if sum(part is Ellipsis for part in key) > 1:
        return False
    if any(part is Ellipsis for part in key):
        at = next(i for i, part in enumerate(key) if part is Ellipsis)
        key[at:at + 1] = [slice(None)] * (s.ndim - len(key) + 1)
    key = [B.resolve(part) for part in key]     # lists of traced values: stacked by _setitem
    traced = [i for i, part in enumerate(key) if isinstance(part, Tracer)]
    if len(traced) != 1:
        return False
    p = traced[0]
    idx = key[p]
    if idx.ndim != 1 or idx.dtype.kind not in "iu" or not 0 < idx.shape[0] <= _SEQUENTIAL_MAX \
            or any(not isinstance(part, (slice, int, np.integer))
                   for i, part in enumerate(key) if i != p):
        return False
    probe = list(key)
    probe[p] = np.zeros(idx.shape[0], np.intp)
    target_shape = np.empty(s.shape)[tuple(probe)].shape
    # NumPy's advanced indexing: integers beside an index array are advanced indices too;
    # their axis stands where they do when they are adjacent (after the sliced axes before
    # them), else first (T[1, :, [k, 2]])
    adv = [i for i, part in enumerate(key) if not isinstance(part, slice)]
    axis = sum(isinstance(part, slice) for part in key[:adv[0]]) \
        if adv == list(range(adv[0], adv[-1] + 1)) else 0
    val = B.resolve(v)
    val = F.broadcast_to(val, target_shape) if isinstance(val, Tracer) else \
        np.broadcast_to(np.asarray(val), target_shape)
    for i in range(idx.shape[0]):
        one = list(key)
        one[p] = idx[i]
        _setitem(s, tuple(one), val[(slice(None),) * axis + (i,)])
    return True


def _store(s, r, what, casting="same_kind"):
    """Write r into s as NumPy's in-place ufuncs do (same shape, same_kind casting)."""
    _writable(s)
    if not isinstance(r, Tracer):
        r = F.lift(r, s.dtype, s.ctx)
    if r.shape != s.shape:
        raise ShapeError(f"{what}: the result has shape {r.shape} but the array written to has "
                         f"shape {s.shape}{_at(user_where())}; NumPy cannot store it there")
    if r.dtype != s.dtype:
        if not np.can_cast(r.dtype, s.dtype, casting):
            raise UnsupportedError(
                f"{what}: a {r.dtype} result cannot be stored in a {s.dtype} array (NumPy's "
                f"{casting} casting){_at(user_where())}; assign x = x ... instead")
        r = F.cast(r, s.dtype)
    s.assign(r)
    return s


# NumPy functions whose out= is written by a ufunc (same_kind casting); reductions and
# np.cumsum, np.take & co. store unsafely
_SAME_KIND_OUT = frozenset(("clip", "round", "around", "matmul", "fix", "std", "ptp",
                            "nanstd"))


def out_casting(func, kwargs):
    """The casting rule for func(..., out=a): the user's casting= where func takes one."""
    if getattr(func, "__name__", "") not in _SAME_KIND_OUT:
        return "unsafe"
    return kwargs.get("casting", "same_kind")


def _store_out(out, r, what, casting="unsafe"):
    """out= of a NumPy function (np.sum, np.cumsum: stored unsafely, as NumPy's reductions;
    np.clip, a ufunc: same_kind)."""
    target = out[0] if isinstance(out, tuple) and len(out) == 1 else out
    if isinstance(target, B.Buffer):
        _check_cast(r, target, casting, f"{what}(..., out=x)")
        target[...] = r
    elif isinstance(target, Tracer):
        _store(target, r, f"{what}(..., out=x)", casting)
    else:
        raise UnsupportedError(
            f"{what}(..., out=a) would write traced values into the NumPy array a"
            f"{_at(user_where())}; write a = ... instead, or create a inside the function")


def _augmented(sym, fn):
    def op(s, o):
        if _scalar(s):
            # a NumPy scalar is immutable: acc += v rebinds acc, other names keep the old value
            r = fn(s, o)
            return r.copy_() if r is s else r
        return _store(s, fn(s, o), f"x {sym}= y")
    return op


def _copied(fn):
    """A method NumPy answers with a new array: never the same tracer object back."""
    @functools.wraps(fn)
    def method(s, *args, **kwargs):
        r = fn(s, *args, **kwargs)
        return r.copy_() if isinstance(r, Tracer) and (r is s or r.base is not None) else r
    return method


_install()
