"""NumPy dispatch for tracers: ufuncs, array functions, operators and methods.

`UFUNCS` and `FUNCTIONS` map NumPy callables to the functions in functions.py; anything not in
them raises UnsupportedError naming the NumPy function and the user's line.
"""
from __future__ import annotations

import numpy as np

from ..ir.errors import UnsupportedError
from . import functions as F
from .tracer import Tracer, _at, user_where

_LN2, _LN10 = float(np.log(2.0)), float(np.log(10.0))

UFUNCS = {
    np.add: F.add, np.subtract: F.sub, np.multiply: F.mul, np.divide: F.div,
    np.power: lambda x, y: _pow(x, y), np.float_power: lambda x, y: F.power(F.cast(x, np.float64), y),
    np.maximum: F.maximum, np.minimum: F.minimum, np.fmax: F.maximum, np.fmin: F.minimum,
    np.negative: F.neg, np.positive: lambda x: x, np.exp: F.exp, np.expm1: F.expm1,
    np.exp2: lambda x: F.exp(F.mul(x, _LN2)), np.log: F.log, np.log1p: F.log1p,
    np.log2: lambda x: F.div(F.log(x), _LN2), np.log10: lambda x: F.div(F.log(x), _LN10),
    np.sin: F.sin, np.cos: F.cos, np.tan: lambda x: F.div(F.sin(x), F.cos(x)),
    np.tanh: F.tanh, np.sinh: lambda x: F.mul(F.sub(F.exp(x), F.exp(F.neg(x))), 0.5),
    np.cosh: lambda x: F.mul(F.add(F.exp(x), F.exp(F.neg(x))), 0.5),
    np.sqrt: F.sqrt, np.square: lambda x: F.mul(x, x), np.abs: F.abs, np.fabs: F.abs,
    np.sign: F.sign, np.reciprocal: lambda x: F.div(1.0, x),
    np.greater: F.gt, np.greater_equal: F.ge, np.less: F.lt, np.less_equal: F.le,
    np.equal: F.eq, np.not_equal: F.ne, np.matmul: F.matmul,
    np.logaddexp: lambda x, y: F.add(F.maximum(x, y),
                                     F.log1p(F.exp(F.neg(F.abs(F.sub(x, y)))))),
    np.floor: F.floor, np.ceil: F.ceil, np.rint: F.round_,
    np.logical_not: lambda x: F.eq(x, False) if x.dtype == np.bool_ else F.eq(x, 0),
}
_REDUCE = {np.add: F.sum, np.maximum: F.max, np.minimum: F.min}


def _clip(x, a_min=None, a_max=None, **kw):
    lo, hi = kw.get("min", a_min), kw.get("max", a_max)
    if lo is not None:
        x = F.maximum(x, lo)
    if hi is not None:
        x = F.minimum(x, hi)
    return x


def _norm(x, ord=None, axis=None, keepdims=False):
    if ord not in (None, 2, "fro") or (ord == 2 and axis is None and len(F._shape_of(x)) > 1):
        raise UnsupportedError(f"np.linalg.norm with ord={ord!r}{_at(user_where())}; only the "
                               "Euclidean/Frobenius norm is supported")
    return F.sqrt(F.sum(F.mul(x, x), axis=axis, keepdims=keepdims))


def _average(a, axis=None, weights=None):
    if weights is None:
        return F.mean(a, axis)
    return F.div(F.sum(F.mul(a, weights), axis), F.sum(F.mul(F.ones_like(a), weights), axis))


FUNCTIONS = {
    np.sum: F.sum, np.mean: F.mean, np.max: F.max, np.amax: F.max, np.min: F.min,
    np.amin: F.min, np.var: F.var, np.std: F.std, np.dot: F.dot, np.matmul: F.matmul,
    np.vdot: lambda a, b: F.sum(F.mul(F.ravel(a), F.ravel(b))), np.outer: F.outer,
    np.inner: F.inner, np.transpose: F.transpose, np.reshape: F.reshape,
    np.where: F.where, np.clip: _clip, np.squeeze: F.squeeze, np.expand_dims: F.expand_dims,
    np.broadcast_to: F.broadcast_to, np.concatenate: F.concatenate, np.stack: F.stack,
    np.hstack: lambda xs: F.concatenate(xs, axis=0 if len(F._shape_of(xs[0])) == 1 else 1),
    np.vstack: lambda xs: F.concatenate([F.reshape(x, (1, -1)) if len(F._shape_of(x)) == 1
                                         else x for x in xs], axis=0),
    np.swapaxes: F.swapaxes, np.ravel: F.ravel, np.take_along_axis: F.take_along_axis,
    np.linalg.norm: _norm, np.zeros_like: F.zeros_like, np.ones_like: F.ones_like,
    np.full_like: F.full_like, np.average: _average,
    np.shape: lambda x: x.shape, np.ndim: lambda x: x.ndim, np.size: lambda x: x.size,
    np.result_type: lambda *xs: F.result_dtype(*xs),
    np.abs: F.abs, np.round: F.round_, np.around: F.round_, np.cumsum: F.cumsum,
    np.flip: F.flip, np.argmax: F.argmax, np.argmin: F.argmin, np.diag: F.diag,
    np.diagonal: F.diagonal, np.trace: F.trace_, np.tile: F.tile, np.repeat: F.repeat,
    np.einsum: F.einsum, np.fliplr: lambda x: F.flip(x, 1), np.flipud: lambda x: F.flip(x, 0),
}
if hasattr(np, "astype"):
    FUNCTIONS[np.astype] = lambda x, dtype, **kw: F.cast(x, dtype)
FUNCTIONS = {k: v for k, v in FUNCTIONS.items() if v is not None}


def _unsupported(name):
    raise UnsupportedError(
        f"np.{name} is not supported by adjit{_at(user_where())}. Write it with supported "
        "NumPy operations (see adjit.frontend.numpy_api.FUNCTIONS and UFUNCS), or with "
        "adjit.where for data-dependent choices.")


def array_ufunc(ufunc, method, inputs, kwargs):
    if kwargs.get("out") is not None:
        raise UnsupportedError(f"np.{ufunc.__name__}(..., out=...) writes in place, which a "
                               f"traced function cannot do{_at(user_where())}; assign the "
                               "result instead")
    if method == "__call__" and ufunc in UFUNCS:
        kwargs.pop("out", None)
        dtype = kwargs.pop("dtype", None)
        if kwargs:
            _unsupported(f"{ufunc.__name__} with arguments {sorted(kwargs)}")
        out = UFUNCS[ufunc](*inputs)
        return F.cast(out, dtype) if dtype is not None else out
    if method == "reduce" and ufunc in _REDUCE:
        axis = kwargs.get("axis", 0)
        return _REDUCE[ufunc](inputs[0], axis=axis, keepdims=kwargs.get("keepdims", False))
    _unsupported(ufunc.__name__ if method == "__call__" else f"{ufunc.__name__}.{method}")


def array_function(func, args, kwargs):
    fn = FUNCTIONS.get(func)
    if fn is None:
        mod = getattr(func, "__module__", "numpy") or "numpy"
        prefix = "linalg." if "linalg" in mod else ""
        _unsupported(prefix + func.__name__)
    return fn(*args, **kwargs)


# -- operators and methods on Tracer -----------------------------------------------------------
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
    T.__pow__ = lambda s, o: _pow(s, o)
    T.__rpow__ = lambda s, o: F.power(o, s)
    T.__matmul__ = lambda s, o: F.matmul(s, o)
    T.__rmatmul__ = lambda s, o: F.matmul(o, s)
    T.__neg__ = lambda s: F.neg(s)
    T.__pos__ = lambda s: s
    T.__abs__ = lambda s: F.abs(s)
    T.__gt__ = lambda s, o: F.gt(s, o)
    T.__ge__ = lambda s, o: F.ge(s, o)
    T.__lt__ = lambda s, o: F.lt(s, o)
    T.__le__ = lambda s, o: F.le(s, o)
    T.__eq__ = lambda s, o: F.eq(s, o)
    T.__ne__ = lambda s, o: F.ne(s, o)
    T.__getitem__ = lambda s, k: F.getitem(s, k)
    T.__setitem__ = _setitem
    T.__floordiv__ = lambda s, o: _unsupported("floor_divide (//)")
    T.__mod__ = lambda s, o: _unsupported("remainder (%)")
    T.reshape = lambda s, *shape, **kw: F.reshape(s, kw.get("shape", shape))
    T.transpose = lambda s, *axes: F.transpose(s, axes if axes else None) if len(axes) != 1 \
        else F.transpose(s, axes[0])
    T.sum = lambda s, axis=None, dtype=None, keepdims=False: F.sum(s, axis, keepdims, dtype)
    T.mean = lambda s, axis=None, dtype=None, keepdims=False: F.mean(s, axis, keepdims, dtype)
    T.max = lambda s, axis=None, keepdims=False: F.max(s, axis, keepdims)
    T.min = lambda s, axis=None, keepdims=False: F.min(s, axis, keepdims)
    T.var = lambda s, axis=None, ddof=0, keepdims=False: F.var(s, axis, keepdims, ddof)
    T.std = lambda s, axis=None, ddof=0, keepdims=False: F.std(s, axis, keepdims, ddof)
    T.astype = lambda s, dtype, **kw: F.cast(s, dtype)
    T.dot = lambda s, o: F.dot(s, o)
    T.clip = lambda s, a_min=None, a_max=None, **kw: _clip(s, a_min, a_max, **kw)
    T.squeeze = lambda s, axis=None: F.squeeze(s, axis)
    T.ravel = lambda s: F.ravel(s)
    T.flatten = lambda s: F.ravel(s)
    T.swapaxes = lambda s, a, b: F.swapaxes(s, a, b)
    T.cumsum = lambda s, axis=None: F.cumsum(s, axis)
    T.argmax = lambda s, axis=None: F.argmax(s, axis)
    T.argmin = lambda s, axis=None: F.argmin(s, axis)
    T.round = lambda s, decimals=0: F.round_(s, decimals)
    T.diagonal = lambda s, offset=0: F.diagonal(s, offset)
    T.trace = lambda s, offset=0: F.trace_(s, offset)


def _pow(x, p):
    # x ** 2 is the most common power in losses: a product is exact and cheaper than pow
    if isinstance(p, (int, float)) and not isinstance(p, bool):
        if p == 2:
            return F.mul(x, x)
        if p == 1:
            return x
        if p == 0.5:
            return F.sqrt(x)
    return F.power(x, p)


def _setitem(s, k, v):
    raise UnsupportedError(f"item assignment (x[...] = ...) changes an array in place, which a "
                           f"traced function cannot do{_at(user_where())}; build the result "
                           "with adjit.where or np.concatenate instead")


_install()
