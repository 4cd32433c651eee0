"""The op registry: one `OpDef` per elementary op holding everything about it.

Each entry gives the shape and dtype rules, the NumPy reference implementation (also used by the
NumPy backend), the VJP and JVP rules (built with the same frontend functions users call, so
the adjoint graph is ordinary IR), the scalar spellings for fused kernels, and a FLOP count.
"""
from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np


class _Lazy:
    """Module proxy: ops.py must not import the frontend at import time (it imports ir)."""

    def __init__(self, name):
        self._name, self._mod = name, None

    def __getattr__(self, attr):
        if self._mod is None:
            self._mod = importlib.import_module(self._name)
        return getattr(self._mod, attr)


F = _Lazy("adjit.frontend.functions")


@dataclass
class OpDef:
    """Everything the system knows about one op.

    kind: source | elementwise | reduction | view | matmul | index | layout
    shape(in_shapes, attrs) -> shape; dtype(in_dtypes, attrs) -> dtype
    numpy(*arrays, **attrs) -> array (reference semantics)
    vjp(g, out, *xs, **attrs) -> list of cotangents (None where an input has none)
    jvp(tangents, out, *xs, **attrs) -> tangent (tangents hold None for zero)
    code: NumPy expression template ({0}, {1} the arguments, {name} an attribute), or None to
      call the reference implementation. scalar / cuda: spellings inside fused kernels.
    """
    name: str
    arity: int | None
    kind: str
    shape: Callable
    dtype: Callable
    numpy: Callable
    vjp: Callable | None
    jvp: Callable | None
    code: str | None
    scalar: str | None = None
    cuda: str | None = None
    flops: Callable = field(default=lambda out, ins, a: 0)
    differentiable: bool = True
    doc: str = ""
    # simplification rules, read by passes/simplify.py:
    # identity(consts) -> index of the argument the result equals, given each argument's
    #   uniform constant value (or None); chain(inner_attrs, outer_attrs) -> attrs of one op
    #   equal to op(op(x)), or "identity"; noop(attrs, in_shape, in_dtype) -> bool
    identity: Callable | None = None
    chain: Callable | None = None
    noop: Callable | None = None
    # rewrite(emit, attrs, args) -> node id or None: a local rewrite that may emit new nodes;
    #   args are the argument nodes' attribute dicts with their "id"
    rewrite: Callable | None = None
    # fusion, read by passes/fusion.py and the kernel generators: "map" (elementwise, spelled
    #   by `scalar`/`cuda` per element), "broadcast" (its argument read with broadcast strides),
    #   "reduce" (`scalar` combines two partial results; reduce_init(dtype) is the identity),
    #   "source" (a scalar constant, written as a literal); None: never inside a kernel
    fusion: str | None = None
    reduce_init: Callable | None = None
    # show(attrs) -> text: a compact form of the attributes for the printed IR
    show: Callable | None = None
    # alias, read by the frontend's assignment (frontend/tracer.py): how NumPy's result of
    #   this op shares its first argument's memory. "view": always a view (writes go
    #   through); "view-or-copy": a view when NumPy can make one without copying (reshape of a
    #   strided view copies); "read-only": a view that cannot be written (np.broadcast_to);
    #   None: a new array
    alias: str | None = None
    # places(attrs) -> the flat positions in the result where the argument's elements go,
    #   for an op whose result is zeros elsewhere (unslice, the VJP of x[i]); read by
    #   passes/autodiff.py to place non-overlapping cotangent pieces side by side
    places: Callable | None = None
    # the where trap, read by passes/autodiff.py: selects=True for an op whose VJP gives an
    #   argument a cotangent that is exactly 0 where that argument was not selected (where);
    #   blows_up=True (or a function of the arguments' constant values, None where not
    #   constant) for an op whose result can be inf or nan from finite arguments (log at
    #   0, exp past overflow, x / 0, sqrt of a negative); guard=True for an op whose VJP
    #   scales the cotangent by something computed from its arguments (0 * inf is nan).
    #   Behind a selection of a branch that can blow up, guarded VJPs keep 0 where the
    #   incoming cotangent is 0, so np.where(x > 0, np.log(x), 0) has finite gradients (JAX
    #   and PyTorch give nan)
    selects: bool = False
    # keeps_zeros=True for an op whose VJP maps a cotangent's zeros to zeros although its kind
    #   mixes positions in general (a running maximum: each element's cotangent is the sum of
    #   those of the extremes it is); autodiff keeps a masked cotangent masked through it
    keeps_zeros: bool = False
    blows_up: bool | Callable = False
    guard: bool = False
    # skips_nan=True for an op that skips NaN elements as data (nanmax): its VJP gives them a
    # cotangent of exactly 0, which autodiff keeps masked through the VJPs before it, so a
    # NaN target (np.nanmax((p - y) ** 2) with missing y) leaves p's gradient finite
    skips_nan: bool = False
    # integers only (the bitwise operations; the frontend refuses floats, as NumPy does)
    integer_only: bool = False
    # reverse_only=True for an op whose VJP has no transpose to serve forward mode (a
    # custom_vjp's rule, which need not be linear in g): jacobian builds by rows through it
    reverse_only: bool = False
    # batch(n, xs, batched, attrs) -> the op applied to each of n stacked sets of arguments,
    #   stacked on a new leading axis: xs[i] carries that axis where batched[i] (the others are
    #   shared by all n). Read by frontend/batching.py (Jacobians and Hessians in one sweep);
    #   None: the op is applied n times and the results stacked
    batch: Callable | None = None
    # in_place=False: the NumPy backend never gives this op's ufunc its operand's buffer as
    #   out= (NumPy 2.4's np.sign(x, out=x) takes a branching scalar loop: 1.39 ms on 512 x 511
    #   float64 of mixed signs, where out= another array takes 0.15; of 49 ufuncs measured,
    #   only sign is slower in place)
    in_place: bool = True


OPS: dict[str, OpDef] = {}


def _register(op: OpDef):
    assert op.name not in OPS, op.name
    OPS[op.name] = op


def _numel(shape):
    return math.prod(int(d) for d in shape)


# -- shape and dtype rules --------------------------------------------------------------------
def same_shape(shapes, a):
    assert all(s == shapes[0] for s in shapes), f"elementwise shapes differ: {shapes}"
    return shapes[0]


def where_shape(shapes, a):
    return same_shape(shapes, a)


def first_dtype(dtypes, a):
    return dtypes[0]


def where_dtype(dtypes, a):
    return dtypes[1]


def bool_dtype(dtypes, a):
    return np.dtype(bool)


def attr_dtype(dtypes, a):
    return np.dtype(a["dtype"])


def reduce_shape(shapes, a):
    axis, s = a["axis"], shapes[0]
    if a["keepdims"]:
        return tuple(1 if i in axis else d for i, d in enumerate(s))
    return tuple(d for i, d in enumerate(s) if i not in axis)


def matmul_shape(shapes, a):
    x, y = shapes
    assert len(x) == len(y) >= 2 and x[:-2] == y[:-2] and x[-1] == y[-2], shapes
    return x[:-1] + (y[-1],)


def transpose_shape(shapes, a):
    return tuple(shapes[0][p] for p in a["perm"])


def _dummy(shape):
    # a zero-strided array has any shape without allocating it, so NumPy computes the shape
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.bool_), shape, [0] * len(shape))


def slice_shape(shapes, a):
    shape, index = shapes[0], a["index"]
    if len(index) <= len(shape) and all(type(k) in (int, slice) for k in index):
        # integers and slices, the common case, without an array (a loop's x[i] is many)
        out = []
        for k, n in zip(index, shape):
            if type(k) is slice:
                out.append(len(range(*k.indices(n))))
            elif not -n <= k < n:
                break                   # out of bounds: NumPy's error below
        else:
            return tuple(out) + tuple(shape[len(index):])
    return _dummy(shape)[index].shape


def gather_shape(shapes, a):
    idx = [np.zeros(s, np.intp) for s in shapes[1:]]
    return _dummy(shapes[0])[_build_key(a["key"], idx)].shape


def concat_shape(shapes, a):
    ax = a["axis"]
    out = list(shapes[0])
    out[ax] = sum(s[ax] for s in shapes)
    return tuple(out)


# -- reference implementations that NumPy lacks in one call ---------------------------------
def _build_key(key, arrays):
    """key: tuple of ('a', k) array position, ('s', slice), ('i', int), ('n',) newaxis."""
    out = []
    for item in key:
        tag = item[0]
        out.append(arrays[item[1]] if tag == "a" else item[1] if tag in "si" else None)
    return tuple(out)


_DISTINCT_MAX = 1 << 22     # elements up to which a gather's constant positions are checked


def _distinct(x, idx, key):
    """Are the positions of gather(x, idx, key) constant and all different (x[[3, 0, 2]], a
    row selection without repeats)? Then its VJP assigns instead of accumulating."""
    g = x.ctx.graph
    if any(g[i.id]["op"] != "const" for i in idx) or _numel(x.shape) > _DISTINCT_MAX:
        return False
    if any(_numel(i.shape) > _numel(x.shape) for i in idx) and len(idx) == 1:
        return False    # more positions than elements: some repeat (overlapping windows)
    arrays = [np.asarray(g[i.id]["attrs"]["value"]) for i in idx]
    pos = np.arange(_numel(x.shape)).reshape(x.shape)[_build_key(key, arrays)]
    if pos.size > _numel(x.shape):
        return False    # more positions than elements (im2col windows of several indices)
    # a sort and one comparison: np.unique's extra work was most of a compile (1.9 s for
    # 2.4M positions against 0.03 s)
    pos = np.sort(pos, axis=None)
    return not bool(np.any(pos[1:] == pos[:-1]))


def _gather(x, *idx, key):
    r = x[_build_key(key, idx)]
    # 0-d integer arrays index as Python ints do: NumPy answers with a view of x, which a
    # later out= would write through; a gather's result is always a new array
    return r.copy() if all(np.ndim(i) == 0 for i in idx) else r


def _scatter_add(g, *idx, key, shape, unique=False):
    z = np.zeros(shape, dtype=g.dtype)
    if unique:      # no position repeats (a permutation, constant distinct rows): assign
        z[_build_key(key, idx)] = g
    else:
        np.add.at(z, _build_key(key, idx), g)
    return z


def _unslice(g, index, shape):
    z = np.zeros(shape, dtype=g.dtype)
    z[index] = g
    return z


def _one_hot(labels, num_classes, dtype):
    return (labels[..., None] == np.arange(num_classes)).astype(dtype)


def _sum(x, axis, keepdims):
    return np.sum(x, axis=axis, keepdims=keepdims)


def _max(x, axis, keepdims):
    return np.max(x, axis=axis, keepdims=keepdims)


def _const(value):
    return value


def _input():
    raise AssertionError("input nodes have no implementation")


_UINT_OF = {2: np.int16, 4: np.int32, 8: np.int64}


def _where(c, x, y):
    """np.where, with an exact fast path for selecting against +0.0 (relu and its VJP).

    np.where on float arrays runs ~20x slower than arithmetic on NumPy 2.x; choosing between x
    and +0.0 is a bit mask (all ones or zeros) applied to x's bits, which gives identical
    results, NaN and infinities included.
    """
    if type(c) is np.ndarray and c.dtype == np.bool_ and c.flags.c_contiguous:
        if _plus_zero(y) and _maskable(x, c):
            return _bitmask(x, c, False)
        if _plus_zero(x) and _maskable(y, c):
            return _bitmask(y, c, True)
    return np.where(c, x, y)


def _plus_zero(v):
    return np.ndim(v) == 0 and v == 0 and not np.signbit(v)


def _maskable(x, c):
    return (type(x) is np.ndarray and x.shape == c.shape and x.dtype.kind == "f"
            and x.dtype.itemsize in _UINT_OF and x.flags.c_contiguous)


def _bitmask(x, c, invert):
    it = _UINT_OF[x.dtype.itemsize]
    m = c.view(np.int8).astype(it)
    if invert:
        m -= 1                      # c True -> 0, False -> all ones
    else:
        np.negative(m, out=m)       # c True -> all ones, False -> 0
    np.bitwise_and(x.view(it), m, out=m)
    return m.view(x.dtype)


_LN2, _LN10 = 0.6931471805599453, 2.302585092994046


# -- registration helpers ------------------------------------------------------------------
def unary(name, numpy, vjp, jvp, code, scalar, cuda, flops=1, differentiable=True, doc="",
          in_place=True):
    _register(OpDef(name, 1, "elementwise", same_shape, first_dtype, numpy, vjp, jvp, code,
                    scalar, cuda, lambda out, ins, a, f=flops: f * _numel(out),
                    differentiable, doc, fusion="map", in_place=in_place))


def binary(name, numpy, vjp, jvp, code, scalar, cuda, dtype=first_dtype, flops=1,
           differentiable=True):
    _register(OpDef(name, 2, "elementwise", same_shape, dtype, numpy, vjp, jvp, code,
                    scalar, cuda, lambda out, ins, a, f=flops: f * _numel(out), differentiable,
                    fusion="map"))


def _sum_t(ts):
    live = [t for t in ts if t is not None]
    if not live:
        return None
    out = live[0]
    for t in live[1:]:
        out = F.add(out, t)
    return out


# -- sources ----------------------------------------------------------------------------------
_register(OpDef("input", 0, "source", lambda s, a: a["shape"], attr_dtype, _input,
                None, None, None, differentiable=True))
_register(OpDef("const", 0, "source", lambda s, a: np.shape(a["value"]), attr_dtype, _const,
                None, None, None, differentiable=False, fusion="source"))

# -- unary elementwise ------------------------------------------------------------------------
unary("neg", np.negative, lambda g, out, x: [F.neg(g)], lambda t, out, x: F.neg(t[0]),
      "-{0}", "(-{0})", "(-{0})")
unary("exp", np.exp, lambda g, out, x: [F.mul(g, out)], lambda t, out, x: F.mul(t[0], out),
      "np.exp({0})", "_rt_exp({0})", "exp({0})", flops=4)
# expm1' = exp(x), not out + 1: that cancels below x = -20 and is 0 below -37.4 (sweep 28)
unary("expm1", np.expm1, lambda g, out, x: [F.mul(g, F.exp(x))],
      lambda t, out, x: F.mul(t[0], F.exp(x)),
      "np.expm1({0})", "_rt_expm1({0})", "expm1({0})", flops=4)
# exp2 and cbrt have their own C library functions: exp(x ln 2) is 300 ulps off at x = 1000
# and not exact at integers, pow(|x|, 1/3) 10 ulps off (NumPy, numba and CUDA call exp2, cbrt)
unary("exp2", np.exp2, lambda g, out, x: [F.mul(g, F.mul(out, _LN2))],
      lambda t, out, x: F.mul(t[0], F.mul(out, _LN2)),
      "np.exp2({0})", "np.exp2({0})", "exp2({0})", flops=4)
unary("cbrt", np.cbrt, lambda g, out, x: [F.div(g, F.mul(F.mul(out, out), 3.0))],
      lambda t, out, x: F.div(t[0], F.mul(F.mul(out, out), 3.0)),
      "np.cbrt({0})", "np.cbrt({0})", "cbrt({0})", flops=4)
unary("log", np.log, lambda g, out, x: [F.div(g, x)], lambda t, out, x: F.div(t[0], x),
      "np.log({0})", "_rt_log({0})", "log({0})", flops=4)
# log2 and log10 are their own library calls: log(x) / log(10) is not exact at powers (NumPy's
# floor(log10(1000)) is 3)
unary("log2", np.log2, lambda g, out, x: [F.div(g, F.mul(x, _LN2))],
      lambda t, out, x: F.div(t[0], F.mul(x, _LN2)),
      "np.log2({0})", "math.log2({0})", "log2({0})", flops=4)
unary("log10", np.log10, lambda g, out, x: [F.div(g, F.mul(x, _LN10))],
      lambda t, out, x: F.div(t[0], F.mul(x, _LN10)),
      "np.log10({0})", "math.log10({0})", "log10({0})", flops=4)
# log1p keeps precision near 0, where log(1 + x) rounds 1 + x first
unary("log1p", np.log1p, lambda g, out, x: [F.div(g, F.add(x, 1))],
      lambda t, out, x: F.div(t[0], F.add(x, 1)),
      "np.log1p({0})", "_rt_log1p({0})", "log1p({0})", flops=4)
unary("sin", np.sin, lambda g, out, x: [F.mul(g, F.cos(x))],
      lambda t, out, x: F.mul(t[0], F.cos(x)), "np.sin({0})", "math.sin({0})", "sin({0})", 4)
unary("cos", np.cos, lambda g, out, x: [F.neg(F.mul(g, F.sin(x)))],
      lambda t, out, x: F.neg(F.mul(t[0], F.sin(x))),
      "np.cos({0})", "math.cos({0})", "cos({0})", 4)
# tan' = 1 + out^2 reuses the forward result; NumPy's np.tan is one SIMD loop (sin / cos
# was two calls and a division, 16-40x slower than eager)
unary("tan", np.tan, lambda g, out, x: [F.mul(g, F.add(1, F.mul(out, out)))],
      lambda t, out, x: F.mul(t[0], F.add(1, F.mul(out, out))),
      "np.tan({0})", "math.tan({0})", "tan({0})", 8)
# sinh and cosh are the C library's: exp(|x| - ln 2) forms overflow early in float32, and
# NumPy's are one SIMD call
unary("sinh", np.sinh, lambda g, out, x: [F.mul(g, F.cosh(x))],
      lambda t, out, x: F.mul(t[0], F.cosh(x)),
      "np.sinh({0})", "math.sinh({0})", "sinh({0})", 4)
unary("cosh", np.cosh, lambda g, out, x: [F.mul(g, F.sinh(x))],
      lambda t, out, x: F.mul(t[0], F.sinh(x)),
      "np.cosh({0})", "math.cosh({0})", "cosh({0})", 4)
# tanh' = 1 - tanh^2 reuses the forward result instead of recomputing cosh
unary("tanh", np.tanh, lambda g, out, x: [F.mul(g, F.sub(1, F.mul(out, out)))],
      lambda t, out, x: F.mul(t[0], F.sub(1, F.mul(out, out))),
      "np.tanh({0})", "_rt_tanh({0})", "tanh({0})", 6)
unary("sqrt", np.sqrt, lambda g, out, x: [F.div(g, F.mul(out, 2))],
      lambda t, out, x: F.div(t[0], F.mul(out, 2)),
      "np.sqrt({0})", "math.sqrt({0})", "sqrt({0})", 2)
unary("abs", np.abs, lambda g, out, x: [F.mul(g, F.sign(x))],
      lambda t, out, x: F.mul(t[0], F.sign(x)), "np.abs({0})", "abs({0})", "_rt_abs({0})")
# inverse trigonometric and hyperbolic functions; derivatives from the textbook identities
_INVERSE = [
    ("arctan", np.arctan, lambda x: F.div(1.0, F.add(F.mul(x, x), 1)), "atan"),
    ("arcsin", np.arcsin, lambda x: F.div(1.0, F.sqrt(F.sub(1, F.mul(x, x)))), "asin"),
    ("arccos", np.arccos, lambda x: F.div(-1.0, F.sqrt(F.sub(1, F.mul(x, x)))), "acos"),
    ("arcsinh", np.arcsinh, lambda x: F.div(1.0, F.sqrt(F.add(F.mul(x, x), 1))), "asinh"),
    ("arccosh", np.arccosh, lambda x: F.div(1.0, F.sqrt(F.sub(F.mul(x, x), 1))), "acosh"),
    ("arctanh", np.arctanh, lambda x: F.div(1.0, F.sub(1, F.mul(x, x))), "atanh"),
]
for _name, _fn, _deriv, _c in _INVERSE:
    unary(_name, _fn, lambda g, out, x, d=_deriv: [F.mul(g, d(x))],
          lambda t, out, x, d=_deriv: F.mul(t[0], d(x)), f"np.{_name}({{0}})",
          f"math.{_c}({{0}})", f"{_c}({{0}})", flops=8)
# the error function: SciPy's ufuncs where SciPy is installed (it is not a dependency: a user
# reaches these through scipy.special or adjit.erf), else math's element by element
def _erf_d(x):
    """erf'(x) = 2 / sqrt(pi) exp(-x^2)"""
    return F.mul(F.exp(F.neg(F.mul(x, x))), 2.0 / math.sqrt(math.pi))


# sigmoid' = out (1 - out) reuses the forward result, as tanh's does
unary("sigmoid", lambda x: _SPECIAL_FNS.expit(x), lambda g, out, x: [F.mul(g, F.mul(out, F.sub(1, out)))],
      lambda t, out, x: F.mul(t[0], F.mul(out, F.sub(1, out))), None, "_rt_sigmoid({0})",
      "_rt_sigmoid({0})", 8, doc="the logistic function (scipy.special.expit)")
unary("erf", lambda x: _SPECIAL_FNS.erf(x), lambda g, out, x: [F.mul(g, _erf_d(x))],
      lambda t, out, x: F.mul(t[0], _erf_d(x)), None, "math.erf({0})", "erf({0})", 20)
unary("erfc", lambda x: _SPECIAL_FNS.erfc(x), lambda g, out, x: [F.neg(F.mul(g, _erf_d(x)))],
      lambda t, out, x: F.neg(F.mul(t[0], _erf_d(x))), None, "math.erfc({0})", "erfc({0})",
      20)
# the log-gamma family (ir/special.py): gammaln' = digamma = polygamma(0, .), and
# polygamma(n, .)' = polygamma(n + 1, .), so derivatives of every order exist
def _polygamma(x, n):
    return _SPECIAL_FNS.polygamma(x, n)


unary("gammaln", lambda x: _SPECIAL_FNS.gammaln(x),
      lambda g, out, x: [F.mul(g, F.polygamma(0, x))],
      lambda t, out, x: F.mul(t[0], F.polygamma(0, x)), None, "_rt_gammaln({0})",
      "_rt_gammaln({0})", 30, doc="log |Gamma(x)| (scipy.special.gammaln)")
_register(OpDef(
    "polygamma", 1, "elementwise", same_shape, first_dtype, _polygamma,
    lambda g, out, x, n: [F.mul(g, F.polygamma(n + 1, x))],
    lambda t, out, x, n: F.mul(t[0], F.polygamma(n + 1, x)), None,
    "_rt_polygamma({n}, {0})", "_rt_polygamma({n}, {0})", lambda out, ins, a: 60 * _numel(out),
    doc="the n-th derivative of digamma (n = 0: digamma), scipy.special.polygamma",
    fusion="map"))
unary("sign", np.sign, lambda g, out, x: [None], lambda t, out, x: None,
      "np.sign({0})", "_rt_sign({0})", "_rt_sign({0})", differentiable=False, in_place=False)
unary("stop_gradient", np.positive, lambda g, out, x: [None], lambda t, out, x: None,
      "{0}", "{0}", "{0}", flops=0, differentiable=False,
      doc="identity whose cotangent is not propagated")


def _where_ge(x, y):
    # balanced at ties as in JAX: each side gets half, so maximum(x, x) has derivative 1;
    # (x > y) + 0.5 (x == y) in x's dtype: exact, and casts and products run at arithmetic
    # speed where NumPy 2's np.where of constants does not (a relu's gradient)
    dt = F._dtype_of(x)
    return F.add(F.cast(F.gt(x, y), dt), F.mul(F.cast(F.eq(x, y), dt), 0.5))


def _known(t):
    """The value of t when it is a constant (possibly broadcast) with one value, else None."""
    graph = t.ctx.graph
    n = t.id
    while graph[n]["op"] == "broadcast_to":
        n = graph.args(n)[0]
    if graph[n]["op"] != "const":
        return None
    v = np.asarray(graph[n]["attrs"]["value"])
    return v.flat[0] if v.size and np.all(v == v.flat[0]) else None


# At the edges JAX's conventions: d(x**y)/dx is 0 where y == 0 (not 0 * x**-1, nan at x = 0),
# and d(x**y)/dy is 0 where x == 0 (x**y * log(x) would be 0 * -inf). A known nonzero
# constant needs no guard, so x ** 2 stays one multiplication.
def _pow_dx(out, x, y):
    d = F.mul(y, F.power(x, F.sub(y, 1)))
    k = _known(y)
    if k is not None and k != 0:
        return d
    # x ** 0 is 1 (also 0 ** 0): d/dx is 0, where y x^(y-1) is 0 * inf at x = 0. Only there:
    # elsewhere d itself, whose derivative in y (x^(y-1) at y = 0) second derivatives need
    return F.where(F.where(F.eq(y, 0), F.eq(x, 0), False), F.zeros_like(d), d)


def _pow_dy(out, x, y):
    k = _known(x)
    safe = x if k is not None and k != 0 else F.where(F.eq(x, 0), F.full_like(x, 1.0), x)
    return F.mul(out, F.log(safe))


def _pow_vjp(g, out, x, y):
    return [F.mul(g, _pow_dx(out, x, y)), F.mul(g, _pow_dy(out, x, y))]


def _pow_jvp(t, out, x, y):
    parts = [None if t[0] is None else F.mul(t[0], _pow_dx(out, x, y)),
             None if t[1] is None else F.mul(t[1], _pow_dy(out, x, y))]
    return _sum_t(parts)


def whole_power(e):
    """The exponent as an int when it is a scalar whole number from 3 to 8 in magnitude, which
    the backends compute with products (square and multiply, as jax.lax.integer_pow); else
    None. NumPy's float power calls the C library's pow per element for every exponent but 2,
    0.5 and -1: x ** 3.0 took 30 ms on 512k float64 elements, x * x * x 0.23 ms (sweep 30)."""
    if np.ndim(e) != 0 or isinstance(e, (bool, np.bool_)):
        return None
    try:
        v = float(e)
    except (TypeError, ValueError):
        return None
    return int(v) if v == round(v) and 3 <= abs(v) <= 8 else None


def _power(x, e, out=None):
    """np.power(x, e, out=out); a float array to a whole power from 3 to 8 by products, in one
    buffer (the result's: no temporary the schedule does not count), left to right over the
    exponent's bits (x^7 = ((x^2 x)^2) x), as the numba kernels write it
    (backends/numba_kernels._power): the same bits on both backends."""
    k = whole_power(e)
    # float16 keeps NumPy's power (computed in float32): products in float16 round each step
    if k is None or not isinstance(x, np.ndarray) or x.dtype.kind not in "fc" or \
            x.dtype == np.float16 or np.result_type(x, e) != x.dtype:
        return np.power(x, e, out=out)
    bits = bin(abs(k))[3:]                 # after the leading 1
    if out is not None and "1" in bits and np.shares_memory(out, x):
        x = x.copy()        # x is read again after out is written (the schedule avoids this)
    if x.ndim == 0 and out is None:     # a 0-d value: NumPy scalars, no buffer to reuse
        r = x
        for bit in bits:
            r = r * r * x if bit == "1" else r * r
        return 1.0 / r if k < 0 else r
    r = None
    for bit in bits:
        r = np.multiply(x, x, out=out) if r is None else np.multiply(r, r, out=r)
        if bit == "1":
            np.multiply(r, x, out=r)
    return np.divide(1.0, r, out=r) if k < 0 else r


def _whole_literal(src):
    """Is the argument source a literal whole exponent from 3 to 8 (np.float64(3.0))?"""
    if src.startswith("np.") and src.endswith(")") and "(" in src:
        src = src[src.index("(") + 1:-1]
    try:
        return whole_power(float(src)) is not None
    except ValueError:
        return False


# fused NumPy code calls a ufunc with out=: np.power, or this ufunc-like reference for whole
# powers (given the argument sources). It reads x again after writing out, so it is never
# computed into an operand's buffer (backends/fused_numpy.ufunc_name, in_place_ok)
_power.ufunc_source = lambda args: "_rt_ops['pow']" if _whole_literal(args[1]) else "np.power"


def _pow_code(args, attrs):
    """`x ** y`; `_rt_ops['pow'](x, 3.0)` for a whole exponent from 3 to 8 written as a
    literal (np.float64(3.0)), which the reference computes by products (args come
    parenthesized where they need it: numpy_backend.op_expression)."""
    if _whole_literal(args[1]):
        return f"_rt_ops['pow']({args[0]}, {args[1]})"
    return f"{args[0]} ** {args[1]}"


binary("add", np.add, lambda g, out, x, y: [g, g], lambda t, out, x, y: _sum_t(t),
       "{0} + {1}", "({0} + {1})", "({0} + {1})")
binary("sub", np.subtract, lambda g, out, x, y: [g, F.neg(g)],
       lambda t, out, x, y: _sum_t([t[0], None if t[1] is None else F.neg(t[1])]),
       "{0} - {1}", "({0} - {1})", "({0} - {1})")
binary("mul", np.multiply, lambda g, out, x, y: [F.mul(g, y), F.mul(g, x)],
       lambda t, out, x, y: _sum_t([None if t[0] is None else F.mul(t[0], y),
                                    None if t[1] is None else F.mul(x, t[1])]),
       "{0} * {1}", "({0} * {1})", "({0} * {1})")
binary("div", np.divide, lambda g, out, x, y: [F.div(g, y), F.neg(F.mul(F.div(g, y), out))],
       lambda t, out, x, y: _sum_t([None if t[0] is None else F.div(t[0], y),
                                    None if t[1] is None
                                    else F.neg(F.mul(F.div(t[1], y), out))]),
       "{0} / {1}", "({0} / {1})", "({0} / {1})", flops=4)
binary("pow", _power, _pow_vjp, _pow_jvp, _pow_code, "({0} ** {1})", "_rt_pow({0}, {1})",
       flops=8)
binary("maximum", np.maximum,
       lambda g, out, x, y: [F.mul(g, _where_ge(x, y)), F.mul(g, _where_ge(y, x))],
       lambda t, out, x, y: _sum_t([None if t[0] is None else F.mul(t[0], _where_ge(x, y)),
                                    None if t[1] is None else F.mul(t[1], _where_ge(y, x))]),
       "np.maximum({0}, {1})", "_rt_maximum({0}, {1})", "_rt_maximum({0}, {1})")
def _lae_weights(x, y, scale):
    """The shares of x and y in logaddexp(x, y): sigmoid(+-(x - y) * scale), each smooth, so
    second derivatives keep the curvature at a tie (1/4 at x == y, where max and |x - y| of
    the forward formula have kinks); equal infinities split evenly instead of inf - inf."""
    both_inf = F.where(F.eq(x, y), F.eq(F.abs(x), np.inf), False)
    d = F.where(both_inf, F.zeros_like(x), F.sub(x, y))
    if scale != 1:
        d = F.mul(d, scale)
    return F.sigmoid(d), F.sigmoid(F.neg(d))


def _lae_rule(scale):
    def vjp(g, out, x, y):
        wx, wy = _lae_weights(x, y, scale)
        return [F.mul(g, wx), F.mul(g, wy)]

    def jvp(t, out, x, y):
        wx, wy = _lae_weights(x, y, scale)
        return _sum_t([None if t[0] is None else F.mul(t[0], wx),
                       None if t[1] is None else F.mul(t[1], wy)])
    return vjp, jvp


# log(exp(x) + exp(y)) (softplus, log-likelihoods of mixtures) and its base-2 form, as NumPy
# computes them: x + log1p(exp(y - x)) from the larger argument
binary("logaddexp", np.logaddexp, *_lae_rule(1), "np.logaddexp({0}, {1})",
       "_rt_logaddexp({0}, {1})", "_rt_logaddexp({0}, {1})", flops=10)
binary("logaddexp2", np.logaddexp2, *_lae_rule(math.log(2.0)), "np.logaddexp2({0}, {1})",
       "_rt_logaddexp2({0}, {1})", "_rt_logaddexp2({0}, {1})", flops=10)
def _hypot_share(x, out):
    """d hypot / dx = x / hypot: 0 at the origin (as abs'(0)), sign(x) where x is infinite
    (inf / inf would be nan), else the quotient, whose own derivative is then smooth."""
    inf = F.eq(F.abs(out), np.inf)
    safe = F.where(F.where(F.eq(out, 0), True, inf), F.ones_like(out), out)
    share = F.div(x, safe)
    return F.where(inf, F.where(F.eq(F.abs(x), np.inf), F.sign(x), F.zeros_like(x)), share)


# sqrt(x^2 + y^2) without overflow or underflow (the C library's)
binary("hypot", np.hypot,
       lambda g, out, x, y: [F.mul(g, _hypot_share(x, out)), F.mul(g, _hypot_share(y, out))],
       lambda t, out, x, y: _sum_t([None if t[0] is None else F.mul(t[0], _hypot_share(x, out)),
                                    None if t[1] is None else F.mul(t[1], _hypot_share(y, out))]),
       "np.hypot({0}, {1})", "math.hypot({0}, {1})", "hypot({0}, {1})", flops=8)
binary("minimum", np.minimum,
       lambda g, out, x, y: [F.mul(g, _where_ge(y, x)), F.mul(g, _where_ge(x, y))],
       lambda t, out, x, y: _sum_t([None if t[0] is None else F.mul(t[0], _where_ge(y, x)),
                                    None if t[1] is None else F.mul(t[1], _where_ge(x, y))]),
       "np.minimum({0}, {1})", "_rt_minimum({0}, {1})", "_rt_minimum({0}, {1})")
def _fshare(x, y, ge):
    """x's share of the cotangent of fmax (ge = _where_ge) or fmin: all of it where y is NaN,
    none where only x is, else as maximum / minimum (ties split)."""
    isnan = _COMPOSITES.isnan
    return F.where(isnan(y), 1.0, F.where(isnan(x), 0.0, ge(x, y)))


for _name, _fn, _ge in [("fmax", np.fmax, lambda x, y: _where_ge(x, y)),
                        ("fmin", np.fmin, lambda x, y: _where_ge(y, x))]:
    binary(_name, _fn,
           lambda g, out, x, y, ge=_ge: [F.mul(g, _fshare(x, y, ge)), F.mul(g, _fshare(y, x, ge))],
           lambda t, out, x, y, ge=_ge: _sum_t([
               None if t[0] is None else F.mul(t[0], _fshare(x, y, ge)),
               None if t[1] is None else F.mul(t[1], _fshare(y, x, ge))]),
           f"np.{_name}({{0}}, {{1}})", f"np.{_name}({{0}}, {{1}})", f"{_name}({{0}}, {{1}})")


def _atan2_parts(g, y, x):
    r2 = F.add(F.mul(x, x), F.mul(y, y))
    return [F.mul(g, F.div(x, r2)), F.neg(F.mul(g, F.div(y, r2)))]


binary("arctan2", np.arctan2, lambda g, out, y, x: _atan2_parts(g, y, x),
       lambda t, out, y, x: _sum_t([None if t[i] is None else _atan2_parts(t[i], y, x)[i]
                                    for i in (0, 1)]),
       "np.arctan2({0}, {1})", "math.atan2({0}, {1})", "atan2({0}, {1})", flops=8)


# fmod(x, y) = x - trunc(x / y) y, exact (C's fmod). trunc(x / y) is recovered from the result:
# x - out is a whole multiple of y, so rounding (x - out) / y gives it even where x / y itself
# rounds to a whole number
def _fmod_dy(out, x, y):
    return F.neg(F.round_(F.div(F.sub(x, out), y)))


binary("fmod", np.fmod, lambda g, out, x, y: [g, F.mul(g, _fmod_dy(out, x, y))],
       lambda t, out, x, y: _sum_t([t[0], None if t[1] is None
                                    else F.mul(t[1], _fmod_dy(out, x, y))]),
       "np.fmod({0}, {1})", "np.fmod({0}, {1})", "fmod({0}, {1})", flops=8)

for _name, _fn, _sym in [("gt", np.greater, ">"), ("ge", np.greater_equal, ">="),
                         ("lt", np.less, "<"), ("le", np.less_equal, "<="),
                         ("eq", np.equal, "=="), ("ne", np.not_equal, "!=")]:
    binary(_name, _fn, lambda g, out, x, y: [None, None], lambda t, out, x, y: None,
           "{0} %s {1}" % _sym, "({0} %s {1})" % _sym, "({0} %s {1})" % _sym,
           dtype=bool_dtype, differentiable=False)

_register(OpDef(
    "signbit", 1, "elementwise", same_shape, bool_dtype, np.signbit,
    lambda g, out, x: [None], lambda t, out, x: None,
    "np.signbit({0})", "(math.copysign(1.0, {0}) < 0.0)", "signbit({0})",
    lambda out, ins, a: _numel(out), differentiable=False, fusion="map",
    doc="the sign bit of a float: also -0.0's and a negative NaN's"))

# bitwise operations of integers (boolean masks use the logical ops); no derivatives
for _name, _fn, _sym in [("bitand", np.bitwise_and, "&"), ("bitor", np.bitwise_or, "|"),
                         ("bitxor", np.bitwise_xor, "^"), ("lshift", np.left_shift, "<<"),
                         ("rshift", np.right_shift, ">>")]:
    binary(_name, _fn, lambda g, out, x, y: [None, None], lambda t, out, x, y: None,
           "{0} %s {1}" % _sym, "({0} %s {1})" % _sym, "({0} %s {1})" % _sym,
           differentiable=False)
unary("invert", np.invert, lambda g, out, x: [None], lambda t, out, x: None,
      "~{0}", "(~{0})", "(~{0})", differentiable=False)
for _name in ("bitand", "bitor", "bitxor", "lshift", "rshift", "invert"):
    OPS[_name].integer_only = True

_register(OpDef(
    "where", 3, "elementwise", where_shape, where_dtype, _where,
    lambda g, out, c, x, y: [None, F.where(c, g, 0.0), F.where(c, 0.0, g)],
    lambda t, out, c, x, y: None if t[1] is None and t[2] is None else F.where(
        c, 0.0 if t[1] is None else t[1], 0.0 if t[2] is None else t[2]),
    None, "({1} if {0} else {2})", "({0} ? {1} : {2})",
    lambda out, ins, a: _numel(out), fusion="map"))
_register(OpDef(
    "cast", 1, "elementwise", same_shape, attr_dtype, lambda x, dtype: x.astype(dtype),
    lambda g, out, x, dtype: [F.cast(g, x.dtype) if x.dtype.kind == "f" else None],
    lambda t, out, x, dtype: F.cast(t[0], dtype) if np.dtype(dtype).kind == "f" else None,
    "{0}.astype({dtype})", "{dtype}({0})", "(({ctype}){0})",
    lambda out, ins, a: 0, fusion="map"))

# -- layout: broadcasting, reshapes, transposes, slices (views in NumPy) ----------------------
_register(OpDef(
    "broadcast_to", 1, "view", lambda s, a: tuple(a["shape"]), first_dtype,
    lambda x, shape: np.broadcast_to(x, shape),
    lambda g, out, x, shape: [F.unbroadcast(g, x.shape)],
    lambda t, out, x, shape: F.broadcast_to(t[0], shape),
    "np.broadcast_to({0}, {shape})", "{0}", "{0}", fusion="broadcast", alias="read-only"))
_register(OpDef(
    "reshape", 1, "view", lambda s, a: tuple(a["shape"]), first_dtype,
    lambda x, shape: np.reshape(x, shape),
    lambda g, out, x, shape: [F.reshape(g, x.shape)],
    lambda t, out, x, shape: F.reshape(t[0], shape),
    "np.reshape({0}, {shape})", alias="view-or-copy"))
_register(OpDef(
    "transpose", 1, "view", transpose_shape, first_dtype,
    lambda x, perm: np.transpose(x, perm),
    lambda g, out, x, perm: [F.transpose(g, tuple(int(i) for i in np.argsort(perm)))],
    lambda t, out, x, perm: F.transpose(t[0], perm),
    lambda args, a: f"{args[0]}.T" if tuple(a["perm"]) == tuple(reversed(range(len(
        a["perm"])))) else f"np.transpose({args[0]}, {a['perm']})", alias="view"))
_register(OpDef(
    "slice", 1, "view", slice_shape, first_dtype, lambda x, index: x[index],
    lambda g, out, x, index: [F.unslice(g, index, x.shape)],
    lambda t, out, x, index: F.slice_(t[0], index),
    "{0}[{index_code}]", alias="view"))
_register(OpDef(
    "unslice", 1, "layout", lambda s, a: tuple(a["shape"]), first_dtype, _unslice,
    lambda g, out, x, index, shape: [F.slice_(g, index)],
    lambda t, out, x, index, shape: F.unslice(t[0], index, shape), None,
    doc="zeros of `shape` with the argument written at `index` (the VJP of slice)",
    places=lambda a: F.basic_positions(a["shape"], a["index"])))
def _place_add(*pieces, indices, shape):
    z = np.zeros_like(pieces[0], shape=shape)       # a CuPy piece makes a CuPy array
    for p, index in zip(pieces, indices):
        z[index] += p
    return z


def _place_add_jvp(t, out, *xs, indices, shape):
    kept = [(ti, ix) for ti, ix in zip(t, indices) if ti is not None]
    if not kept:
        return None
    return F.place_add([ti for ti, _ in kept], [ix for _, ix in kept], shape)


_register(OpDef(
    "place_add", None, "layout", lambda s, a: tuple(a["shape"]), first_dtype, _place_add,
    lambda g, out, *xs, indices, shape: [F.slice_(g, ix) for ix in indices],
    _place_add_jvp, None, flops=lambda out, ins, a: sum(_numel(s) for s in ins),
    doc="zeros of `shape` with each argument added at its index (the cotangent of several "
        "slices of one array that overlap: x[1:] and x[:-1])"))
_register(OpDef(
    "concatenate", None, "layout", concat_shape, first_dtype,
    lambda *xs, axis: np.concatenate(xs, axis=axis),
    lambda g, out, *xs, axis: F.split_like(g, [x.shape[axis] for x in xs], axis),
    lambda t, out, *xs, axis: F.concatenate(
        [F.zeros(x.shape, x.dtype) if ti is None else ti for ti, x in zip(t, xs)], axis),
    lambda args, a: f"np.concatenate(({', '.join(args)},), axis={a['axis']})"))

# -- indexing by integer arrays (class labels) ------------------------------------------------
_register(OpDef(
    "gather", None, "index", gather_shape, first_dtype, _gather,
    lambda g, out, x, *idx, key: [F.scatter_add(g, idx, key, x.shape,
                                                unique=_distinct(x, idx, key))] +
    [None] * len(idx),
    lambda t, out, x, *idx, key: None if t[0] is None else F.gather(t[0], idx, key), None,
    doc="x[key] where key mixes integer index arrays (the extra arguments) and slices"))
_register(OpDef(
    "scatter_add", None, "index", lambda s, a: tuple(a["shape"]), first_dtype, _scatter_add,
    lambda g, out, x, *idx, key, shape, unique=False: [F.gather(g, idx, key)] + [None] * len(idx),
    lambda t, out, x, *idx, key, shape, unique=False: None if t[0] is None
    else F.scatter_add(t[0], idx, key, shape, unique), None,
    doc="zeros of `shape` with the first argument added at key (the VJP of gather); with "
        "unique, no position repeats and the values are assigned (np.add.at is slow)"))
_register(OpDef(
    "one_hot", 1, "index", lambda s, a: tuple(s[0]) + (a["num_classes"],), attr_dtype,
    _one_hot, lambda g, out, x, num_classes, dtype: [None], lambda t, out, x, **a: None, None,
    differentiable=False))


# -- reductions -------------------------------------------------------------------------------
def _lowest(dtype):
    dt = np.dtype(dtype)
    return -math.inf if dt.kind == "f" else np.iinfo(dt).min if dt.kind in "iu" else False


def _highest(dtype):
    dt = np.dtype(dtype)
    return math.inf if dt.kind == "f" else np.iinfo(dt).max if dt.kind in "iu" else True


def _sum_vjp(g, out, x, axis, keepdims):
    if not keepdims:
        g = F.reshape(g, reduce_shape([x.shape], {"axis": axis, "keepdims": True}))
    return [F.broadcast_to(g, x.shape)]


def _max_vjp(g, out, x, axis, keepdims, skip_nan=False):
    # the cotangent is shared equally among tied maxima, so the VJP is the same as JAX's.
    # skip_nan (nanmax, nanmin): NaN is never equal to the result, and a slice of NaN only
    # (result NaN) has no element equal to it: its count is taken as 1, its cotangent 0
    kept = {"axis": axis, "keepdims": True}
    if not keepdims:
        g = F.reshape(g, reduce_shape([x.shape], kept))
        out = F.reshape(out, reduce_shape([x.shape], kept))
    mask = F.cast(F.eq(x, F.broadcast_to(out, x.shape)), x.dtype)
    count = F.sum(mask, axis=axis, keepdims=True)
    count = F.maximum(count, 1.0) if skip_nan else count
    return [F.mul(mask, F.broadcast_to(F.div(g, count), x.shape))]


def _max_jvp(t, out, x, axis, keepdims, skip_nan=False):
    kept = {"axis": axis, "keepdims": True}
    o = out if keepdims else F.reshape(out, reduce_shape([x.shape], kept))
    mask = F.cast(F.eq(x, F.broadcast_to(o, x.shape)), x.dtype)
    count = F.sum(mask, axis=axis, keepdims=keepdims)
    return F.div(F.sum(F.mul(mask, t[0]), axis=axis, keepdims=keepdims),
                 F.maximum(count, 1.0) if skip_nan else count)


_register(OpDef(
    "sum", 1, "reduction", reduce_shape, first_dtype, _sum, _sum_vjp,
    lambda t, out, x, axis, keepdims: F.sum(t[0], axis=axis, keepdims=keepdims),
    "np.sum({0}, axis={axis}, keepdims={keepdims})", "({0} + {1})", "({0} + {1})",
    lambda out, ins, a: _numel(ins[0]), fusion="reduce", reduce_init=lambda dt: 0))
_register(OpDef(
    "max", 1, "reduction", reduce_shape, first_dtype, _max, _max_vjp, _max_jvp,
    "np.max({0}, axis={axis}, keepdims={keepdims})", "_rt_maximum({0}, {1})",
    "_rt_maximum({0}, {1})",
    lambda out, ins, a: _numel(ins[0]), fusion="reduce", reduce_init=_lowest))


_register(OpDef(
    "min", 1, "reduction", reduce_shape, first_dtype,
    lambda x, axis, keepdims: np.min(x, axis=axis, keepdims=keepdims), _max_vjp, _max_jvp,
    "np.min({0}, axis={axis}, keepdims={keepdims})", "_rt_minimum({0}, {1})",
    "_rt_minimum({0}, {1})",
    lambda out, ins, a: _numel(ins[0]), fusion="reduce", reduce_init=_highest,
    doc="np.min: NumPy's own loop (as -max(-x) it was two extra passes, and 10x slower in "
        "numba kernels); the cotangent shared among tied minima, as max's"))


for _name, _uf in (("nanmax", "fmax"), ("nanmin", "fmin")):
    _register(OpDef(
        _name, 1, "reduction", reduce_shape, first_dtype,
        lambda x, axis, keepdims, uf=getattr(np, _uf): uf.reduce(x, axis=axis,
                                                                  keepdims=keepdims),
        lambda g, out, x, axis, keepdims: _max_vjp(g, out, x, axis, keepdims, skip_nan=True),
        lambda t, out, x, axis, keepdims: _max_jvp(t, out, x, axis, keepdims, skip_nan=True),
        # a call of the reference (CuPy's runtime puts cupy.nanmax / nanmin there)
        lambda args, a, name=_name: f"_rt_ops[{name!r}]({args[0]}, axis={tuple(a['axis'])}, "
                                    f"keepdims={bool(a['keepdims'])})",
        flops=lambda out, ins, a: _numel(ins[0]),
        skips_nan=True,
        doc=f"np.{_name} of floats: np.{_uf}.reduce, one pass (NaN skipped; NaN where a slice "
            f"holds nothing else); the cotangent shared among tied extremes, as max's"))

# -- matrix products --------------------------------------------------------------------------
_register(OpDef(
    "matmul", 2, "matmul", matmul_shape, first_dtype, np.matmul,
    lambda g, out, x, y: [F.matmul(g, F.swap_last(y)), F.matmul(F.swap_last(x), g)],
    lambda t, out, x, y: _sum_t([None if t[0] is None else F.matmul(t[0], y),
                                 None if t[1] is None else F.matmul(x, t[1])]),
    "{0} @ {1}", flops=lambda out, ins, a: 2 * _numel(out) * ins[0][-1]))


_CORRELATE_PAD = {"valid": lambda m: (0, 0), "full": lambda m: (m - 1, m - 1),
                  "same": lambda m: (m // 2, (m - 1) // 2)}


def _correlate_shape(shapes, a):
    (n,), (m,) = shapes
    lo, hi = _CORRELATE_PAD[a.get("mode", "valid")](m)
    return (n + lo + hi - m + 1,)


def _correlate_vjp(g, out, a, v, mode="valid"):
    # out[k] = sum_j ap[k + j] v[j], ap = a padded by (lo, hi) zeros for the mode: a's
    # cotangent is g convolved with v (g padded by m - 1 zeros on both sides, correlated
    # with v reversed), cut back to a's range; v's is ap correlated with g
    n, m, n_out = a.shape[0], v.shape[0], g.shape[0]
    lo, hi = _CORRELATE_PAD[mode](m)
    padded = F.unslice(g, (slice(m - 1, m - 1 + n_out),), (n_out + 2 * (m - 1),))
    ga = F.correlate(padded, F.flip(v))
    ap = a if lo == hi == 0 else F.unslice(a, (slice(lo, lo + n),), (n + lo + hi,))
    return [ga if lo == hi == 0 else F.slice_(ga, (slice(lo, lo + n),)), F.correlate(ap, g)]


_register(OpDef(
    "correlate", 2, "matmul", _correlate_shape, first_dtype,
    lambda a, v, mode="valid": np.correlate(a, v, mode), _correlate_vjp,
    lambda t, out, a, v, mode="valid": _sum_t([
        None if t[0] is None else F.correlate(t[0], v, mode),
        None if t[1] is None else F.correlate(a, t[1], mode)]),
    # mode is 'valid', 'full' or 'same' (the frontend checks): written as its literal
    lambda args, a: f"np.correlate({args[0]}, {args[1]}, {a.get('mode', 'valid')!r})",
    flops=lambda out, ins, a: 2 * _numel(out) * ins[1][0],
    show=lambda a: a.get("mode", "valid"),
    doc="np.correlate(a, v, mode) of 1-d a and v, len(a) >= len(v): the frontend's "
        "np.convolve and np.correlate in every mode"))


# -- discrete Fourier transforms of complex arrays held as their parts (..., 2) -----------------
# The IR is real: a complex array z is the real array of its parts interleaved along a last axis
# of length 2 (NumPy's memory layout of complex numbers, so a transform's result is viewed as
# parts without a copy); frontend/complex.py keeps z's real and imaginary parts apart and
# stacks them for a transform. `axis` counts in z. fft along one axis is linear, and its
# adjoint under the real inner product is the complex adjoint: the conjugate DFT, i.e. the
# transform the other way with the scaling on the other side ("backward" <-> "forward";
# "ortho" is unitary).
_FFT_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


# xp: the array module (NumPy's here; CuPy's runtime passes cupy for its device ops)
def as_complex(x, xp=np):
    """The complex array whose parts x (..., 2) holds (a view where x is contiguous)."""
    return xp.ascontiguousarray(x).view(np.result_type(x.dtype, np.complex64))[..., 0]


def as_parts(z, dtype, xp=np):
    """The parts (..., 2) of the complex array z, in dtype (a view of a contiguous z)."""
    z = xp.ascontiguousarray(z)
    parts = z.view(z.real.dtype).reshape(z.shape + (2,))
    return parts if parts.dtype == dtype else parts.astype(dtype)


def _fft(x, axis, inverse=False, norm="backward", xp=np):
    z = (xp.fft.ifft if inverse else xp.fft.fft)(as_complex(x, xp), axis=axis, norm=norm)
    return as_parts(z, x.dtype, xp)


_register(OpDef(
    "fft", 1, "matmul", lambda s, a: tuple(s[0]), first_dtype, _fft,
    lambda g, out, x, axis, inverse=False, norm="backward": [
        F.fft(g, axis, not inverse, _FFT_SWAP[norm])],
    lambda t, out, x, axis, inverse=False, norm="backward": F.fft(t[0], axis, inverse, norm),
    # the attributes are an int, a bool and one of three names (frontend/complex.py checks)
    lambda args, a: f"_rt_ops['fft']({args[0]}, axis={int(a['axis'])}, "
                    f"inverse={bool(a.get('inverse'))}, norm={a.get('norm', 'backward')!r})",
    # n log2 n butterflies of complex multiply-adds along the axis, for every other index
    flops=lambda out, ins, a: 5 * _numel(out) // 2 * max(1, int(ins[0][a["axis"]]).bit_length()),
    show=lambda a: f"axis={a['axis']}{' inverse' if a.get('inverse') else ''}"
                   f"{'' if a.get('norm', 'backward') == 'backward' else ' ' + a['norm']}",
    doc="np.fft.fft (inverse: np.fft.ifft) along axis of the complex array whose parts x "
        "(..., 2) holds, answered as parts: the frontend's np.fft functions and complex "
        "arrays (frontend/complex.py)"))


# np.fft.rfft of a real array -> the parts (..., n // 2 + 1, ..., 2) of its half spectrum, and
# np.fft.irfft back. With U the unnormalized transforms and s the norm's scale (1, 1/sqrt(n) or
# 1/n), rfft = s U_r2c and irfft = s' U_c2r, where U_c2r(c)_j = Re c_0 + 2 sum_{0<k<n/2}
# Re(c_k e^{2 pi i kj/n}) + Re c_{n/2} (-1)^j. Their adjoints are each other with the half
# spectrum weighted: rfft's cotangent c gives s U_c2r(c w_half) (w_half = 1/2 except at the
# zero and Nyquist terms, which U_c2r counts once), irfft's cotangent y gives
# s' w_double U_r2c(y) (w_double = 2 except there); the imaginary parts irfft ignores get 0.
# `norm` is np.fft's name, or a number: the scale on the unnormalized transform (the VJPs').
def _half_weights(n, m, axis, ndim, dtype, double):
    """The weights over the m terms along axis of parts with ndim dimensions (the last the
    parts' 2)."""
    w = np.full(m, 2.0 if double else 0.5, dtype)
    w[0] = 1.0
    if n % 2 == 0 and m > 1:
        w[-1] = 1.0
    return w.reshape((m,) + (1,) * (ndim - 1 - axis))


def _unnormed(norm, n, inverse):
    """The scale a transform with `norm` puts on the unnormalized one (np.fft's convention:
    "backward" scales the inverse by 1/n, "forward" the forward one, "ortho" both by n**-0.5;
    a number is that scale, the VJPs' own transforms)."""
    if not isinstance(norm, str):
        return float(norm)
    if norm == "ortho":
        return n ** -0.5
    return 1.0 / n if (norm == "backward") == inverse else 1.0


def _rfft(x, axis, norm="backward", xp=np):
    if isinstance(norm, str):
        return as_parts(xp.fft.rfft(x, axis=axis, norm=norm), x.dtype, xp)
    return as_parts(xp.fft.rfft(x, axis=axis), x.dtype, xp) * x.dtype.type(norm)


def _irfft(x, axis, n, norm="backward", xp=np):
    if isinstance(norm, str):
        y = xp.fft.irfft(as_complex(x, xp), n, axis=axis, norm=norm)
    else:
        y = xp.fft.irfft(as_complex(x, xp), n, axis=axis, norm="forward") * x.dtype.type(norm)
    return y.astype(x.dtype, copy=False)


def _cabs(x, xp=np):
    return xp.abs(as_complex(x, xp))


def _rfft_vjp(g, out, x, axis, norm="backward"):
    n = x.shape[axis]
    w = _half_weights(n, g.shape[axis], axis, g.ndim, x.dtype, False)
    return [F.irfft(F.mul(g, w), axis, n, float(_unnormed(norm, n, False)))]


def _irfft_vjp(g, out, c, axis, n, norm="backward"):
    w = _half_weights(n, c.shape[axis], axis, c.ndim, g.dtype, True)
    return [F.mul(F.rfft(g, axis, float(_unnormed(norm, n, True))), w)]


def _cabs_share(x, out):
    out = F.reshape(out, tuple(out.shape) + (1,))
    return _hypot_share(x, F.broadcast_to(out, x.shape))


_register(OpDef(
    "cabs", 1, "matmul", lambda s, a: tuple(s[0][:-1]), first_dtype,
    _cabs,
    lambda g, out, x: [F.mul(F.broadcast_to(F.reshape(g, tuple(g.shape) + (1,)), x.shape),
                             _cabs_share(x, out))],
    lambda t, out, x: F.sum(F.mul(t[0], _cabs_share(x, out)), axis=-1),
    "_rt_ops['cabs']({0})",
    flops=lambda out, ins, a: 8 * _numel(out), guard=True,
    doc="np.abs of the complex array whose parts x (..., 2) holds: np.hypot of the parts, "
        "computed by NumPy's vectorized complex absolute (np.hypot calls the C library per "
        "element, 20x slower); the gradient is hypot's"))


def _norm_literal(norm):
    # one of np.fft's three names or a float: written as a Python literal
    return repr(norm) if isinstance(norm, str) else repr(float(norm))


_register(OpDef(
    "rfft", 1, "matmul", lambda s, a: tuple(s[0][:a["axis"]]) + (
        s[0][a["axis"]] // 2 + 1,) + tuple(s[0][a["axis"] + 1:]) + (2,), first_dtype,
    _rfft, _rfft_vjp,
    lambda t, out, x, axis, norm="backward": F.rfft(t[0], axis, norm),
    lambda args, a: f"_rt_ops['rfft']({args[0]}, axis={int(a['axis'])}, "
                    f"norm={_norm_literal(a.get('norm', 'backward'))})",
    flops=lambda out, ins, a: 5 * _numel(ins[0]) // 2 * max(
        1, int(ins[0][a["axis"]]).bit_length()),
    show=lambda a: f"axis={a['axis']} {a.get('norm', 'backward')}",
    doc="np.fft.rfft of a real array along axis, answered as parts (..., 2)"))
_register(OpDef(
    "irfft", 1, "matmul", lambda s, a: tuple(s[0][:a["axis"]]) + (a["n"],) + tuple(
        s[0][a["axis"] + 1:-1]), first_dtype,
    _irfft, _irfft_vjp,
    lambda t, out, x, axis, n, norm="backward": F.irfft(t[0], axis, n, norm),
    lambda args, a: f"_rt_ops['irfft']({args[0]}, axis={int(a['axis'])}, n={int(a['n'])}, "
                    f"norm={_norm_literal(a.get('norm', 'backward'))})",
    flops=lambda out, ins, a: 5 * _numel(out) // 2 * max(1, int(a["n"]).bit_length()),
    show=lambda a: f"axis={a['axis']} n={a['n']} {a.get('norm', 'backward')}",
    doc="np.fft.irfft(z, n, axis) of the half spectrum z (n // 2 + 1 terms along axis) whose "
        "parts x (..., 2) holds: a real array"))


# -- linear algebra on stacks of (..., n, n) matrices (frontend/linalg.py builds them) --------
# Reverse-mode rules from Giles 2008, "An extended collection of matrix derivative results";
# cholesky and eigh read only the lower triangle, as NumPy does, so their cotangents lie there.
LA = _Lazy("adjit.frontend.linalg")
_SPECIAL_FNS = _Lazy("adjit.ir.special")


def square_shape(shapes, a):
    (s,) = shapes
    assert len(s) >= 2 and s[-1] == s[-2], f"expected (..., n, n), got {s}"
    return s


def solve_shape(shapes, a):
    s, b = square_shape(shapes[:1], a), shapes[1]
    assert len(b) == len(s) and b[:-1] == s[:-1], f"solve: a {s} and b {b} do not fit"
    return b


def _cubes(k):
    """FLOPs: k n^3 per matrix of the first argument (LAPACK's leading terms)."""
    return lambda out, ins, a: int(k * _numel(ins[0][:-2]) * ins[0][-1] ** 3)


def _part(name, parts):
    return lambda args, a: f"np.linalg.{name}({args[0]})[{parts.index(a['part'])}]"


def _solve_vjp(g, out, a, b):
    gb = LA.solve(F.swap_last(a), g)
    return [F.neg(F.matmul(gb, F.swap_last(out))), gb]


def _solve_jvp(t, out, a, b):
    rhs = _sum_t([t[1], None if t[0] is None else F.neg(F.matmul(t[0], out))])
    return LA.solve(a, rhs)


def _cholesky_vjp(g, out, a):
    # Murray 2016, eq. 10: a_bar = L^-T Phi(L^T L_bar) L^-1, folded onto the lower triangle;
    # by two triangular solves (L^-T P, then (L^-T (L^-T P)^T)^T), not an inverse
    lt = F.swap_last(out)
    p = LA.phi(F.matmul(lt, g))
    y = LA.solve_triangular(lt, p, False)
    return [LA.to_lower(F.swap_last(LA.solve_triangular(lt, F.swap_last(y), False)))]


def _cholesky_jvp(t, out, a):
    # dL = L Phi(L^-1 dA L^-T)
    z = LA.solve_triangular(out, LA.from_lower(t[0]), True)
    w = F.swap_last(LA.solve_triangular(out, F.swap_last(z), True))
    return F.matmul(out, LA.phi(w))


def _eigh_vjp(g, out, a, part, uplo="L"):
    # a = V diag(w) V^T: a_bar = V (diag(w_bar) + F o (V^T V_bar)) V^T (Giles 2008, 3.1)
    v = out if part == "eigenvectors" else LA.eigh(a, uplo).eigenvectors
    if part == "eigenvalues":
        inner = F.mul(F.reshape(g, g.shape[:-1] + (1, g.shape[-1])), v)
    else:
        gaps = LA.eigh_gaps(LA.eigvalsh(a, uplo))
        inner = F.matmul(v, F.mul(gaps, F.matmul(F.swap_last(v), g)))
    s = F.matmul(inner, F.swap_last(v))
    # folded onto the triangle the op reads
    return [LA.to_lower(s) if uplo == "L" else F.swap_last(LA.to_lower(F.swap_last(s)))]


def _eigh_jvp(t, out, a, part, uplo="L"):
    w, v = LA.eigh(a, uplo)
    ta = LA.from_lower(t[0] if uplo == "L" else F.swap_last(t[0]))
    vdv = F.matmul(F.swap_last(v), F.matmul(ta, v))
    if part == "eigenvalues":
        return F.sum(F.mul(vdv, F.lift(np.eye(v.shape[-1]), v.dtype, v.ctx)), axis=-1)
    return F.matmul(v, F.mul(LA.eigh_gaps(w), vdv))


_register(OpDef(
    "inv", 1, "linalg", square_shape, first_dtype, np.linalg.inv,
    lambda g, out, a: [F.neg(F.matmul(F.matmul(F.swap_last(out), g), F.swap_last(out)))],
    lambda t, out, a: F.neg(F.matmul(F.matmul(out, t[0]), out)),
    "np.linalg.inv({0})", flops=_cubes(2), doc="inverse of each (..., n, n) matrix"))
_register(OpDef(
    "solve", 2, "linalg", solve_shape, first_dtype, np.linalg.solve, _solve_vjp, _solve_jvp,
    "np.linalg.solve({0}, {1})",
    flops=lambda out, ins, a: _cubes(2 / 3)(out, ins, a) + 2 * _numel(out) * ins[0][-1],
    doc="x with a @ x = b for a (..., n, n) and b (..., n, k) of the same batch shape"))
_TRI_BLOCK = 64     # diagonal blocks a blocked triangular solve factorizes


def _solve_triangular(a, b, lower):
    """x with tri(a) @ x = b, reading only a's lower (upper) triangle: substitution by
    blocks, each a small dense solve of the diagonal block plus one matrix product with the
    rows done, so O(n^2 k) work where np.linalg.solve's LU takes O(n^3). NumPy has no
    triangular solver; written with np.* calls only, CuPy arrays run it on the GPU."""
    n = a.shape[-1]
    tri = np.tril if lower else np.triu
    if n <= _TRI_BLOCK:
        return np.linalg.solve(tri(a), b)
    x = np.empty_like(b, dtype=np.result_type(a, b))
    starts = list(range(0, n, _TRI_BLOCK))
    for i in (starts if lower else starts[::-1]):
        j = min(i + _TRI_BLOCK, n)
        rhs = b[..., i:j, :]
        if lower and i:
            rhs = rhs - a[..., i:j, :i] @ x[..., :i, :]
        elif not lower and j < n:
            rhs = rhs - a[..., i:j, j:] @ x[..., j:, :]
        x[..., i:j, :] = np.linalg.solve(tri(a[..., i:j, i:j]), rhs)
    return x


def _tri(x, lower):
    return LA.tril(x) if lower else F.swap_last(LA.tril(F.swap_last(x)))


def _solve_triangular_vjp(g, out, a, b, lower):
    gb = LA.solve_triangular(F.swap_last(a), g, not lower)
    return [F.neg(_tri(F.matmul(gb, F.swap_last(out)), lower)), gb]


def _solve_triangular_jvp(t, out, a, b, lower):
    rhs = _sum_t([t[1], None if t[0] is None else F.neg(F.matmul(_tri(t[0], lower), out))])
    return LA.solve_triangular(a, rhs, lower)


_register(OpDef(
    "solve_triangular", 2, "linalg", solve_shape, first_dtype, _solve_triangular,
    _solve_triangular_vjp, _solve_triangular_jvp, None,
    flops=lambda out, ins, a: _numel(out) * ins[0][-1], show=lambda a: "lower" if a["lower"]
    else "upper",
    doc="x with tri(a) @ x = b, a (..., n, n) read in its lower (upper) triangle only: the "
        "frontend's solve where a is a Cholesky factor or its transpose"))


def _cofactor(a):
    """det(a) inv(a).T, also for singular matrices: with a = U diag(s) V^T it is
    det(U) det(V) U diag(c) V^T, c_i the product of the other singular values (prefix times
    suffix products, no division)."""
    n = a.shape[-1]
    if n == 0:
        return np.zeros_like(a)
    u, s, vt = np.linalg.svd(a)
    ones = np.ones_like(s[..., :1])     # (the *_like forms also make CuPy arrays)
    pre = np.cumprod(np.concatenate([ones, s[..., :-1]], -1), -1)
    suf = np.cumprod(np.concatenate([ones, s[..., :0:-1]], -1), -1)[..., ::-1]
    sign = np.linalg.det(u) * np.linalg.det(vt)
    return (sign[..., None, None] * (u * (pre * suf)[..., None, :]) @ vt).astype(a.dtype)


def _cofactor_vjp(g, out, a):
    # out = d X with d = det(a), X = inv(a).T: <g, X> out - d X g^T X (this derivative needs
    # inv(a): a second derivative at a singular matrix is not finite)
    x = LA.inv_t(a)
    d = LA.det(a)
    first = LA.matrix_scale(LA.trace_of(g, x), out)
    second = LA.matrix_scale(d, F.matmul(F.matmul(x, F.swap_last(g)), x))
    return [F.sub(first, second)]


_register(OpDef(
    "cofactor", 1, "linalg", square_shape, first_dtype, _cofactor, _cofactor_vjp,
    lambda t, out, a: _cofactor_vjp_jvp(t[0], out, a), None, flops=_cubes(4),
    doc="the cofactor matrix det(a) inv(a).T of each (..., n, n) matrix, singular ones too"))


def _cofactor_vjp_jvp(t, out, a):
    # d(d X) = d tr(inv(a) t) X - d X t^T X
    x = LA.inv_t(a)
    d = LA.det(a)
    first = LA.matrix_scale(LA.trace_of(x, t), out)
    second = LA.matrix_scale(d, F.matmul(F.matmul(x, F.swap_last(t)), x))
    return F.sub(first, second)


_register(OpDef(
    "det", 1, "linalg", lambda s, a: tuple(square_shape(s, a)[:-2]), first_dtype,
    np.linalg.det,
    # the cofactor matrix, not det * inv(a).T: finite at singular matrices (as JAX)
    lambda g, out, a: [LA.matrix_scale(g, LA.cofactor(a))],
    lambda t, out, a: LA.trace_of(LA.cofactor(a), t[0]),
    "np.linalg.det({0})", flops=_cubes(2 / 3)))
_register(OpDef(
    "slogdet", 1, "linalg", lambda s, a: tuple(square_shape(s, a)[:-2]), first_dtype,
    lambda a, part: np.linalg.slogdet(a)[("sign", "logabsdet").index(part)],
    lambda g, out, a, part: [None if part == "sign" else LA.matrix_scale(g, LA.inv_t(a))],
    lambda t, out, a, part: None if part == "sign" else LA.trace_of(LA.inv_t(a), t[0]),
    _part("slogdet", ("sign", "logabsdet")), flops=_cubes(2 / 3),
    doc="part 'sign' (no gradient) or 'logabsdet' of np.linalg.slogdet"))
_register(OpDef(
    "cholesky", 1, "linalg", square_shape, first_dtype, np.linalg.cholesky,
    _cholesky_vjp, _cholesky_jvp, "np.linalg.cholesky({0})", flops=_cubes(1 / 3),
    doc="lower factor L of a = L @ L.T, reading the lower triangle of a"))
_register(OpDef(
    "eigh", 1, "linalg",
    lambda s, a: tuple(square_shape(s, a)[:-1 if a["part"] == "eigenvalues" else None]),
    first_dtype,
    lambda a, part, uplo="L": np.linalg.eigvalsh(a, uplo) if part == "eigenvalues"
    else np.linalg.eigh(a, uplo)[1],
    _eigh_vjp, _eigh_jvp,
    lambda args, a: ("np.linalg.eigvalsh({0}{1})" if a["part"] == "eigenvalues" else
                     "np.linalg.eigh({0}{1})[1]").format(
                         args[0], ", 'U'" if a.get("uplo", "L") == "U" else ""),
    flops=lambda out, ins, a: _cubes(4 / 3 if a["part"] == "eigenvalues" else 9)(out, ins, a),
    doc="part 'eigenvalues' (ascending) or 'eigenvectors' (columns) of a symmetric matrix, "
        "reading its lower triangle (its upper one where uplo is 'U', as LAPACK, whose "
        "eigenvector signs differ); gradients need distinct eigenvalues"))

# svd, qr and pinv of (..., m, n) stacks; their rules live in frontend/decompositions.py
LD = _Lazy("adjit.frontend.decompositions")
_SVD_PARTS = ("U", "S", "Vh")


def svd_shape(shapes, a):
    (s,) = shapes
    assert len(s) >= 2, f"expected (..., m, n), got {s}"
    m, n = s[-2:]
    k = min(m, n)
    return tuple(s[:-2]) + {"U": (m, k), "S": (k,), "Vh": (k, n), "Ufull": (m, m),
                            "Vhfull": (n, n)}[a["part"]]


def qr_shape(shapes, a):
    (s,) = shapes
    assert len(s) >= 2 and s[-2] >= s[-1], f"expected (..., m, n) with m >= n, got {s}"
    return tuple(s) if a["part"] == "Q" else tuple(s[:-2]) + (s[-1], s[-1])


def _mnk(k):
    """FLOPs: k m n min(m, n) per matrix of the first argument (LAPACK's leading terms)."""
    return lambda out, ins, a: int(k * _numel(ins[0][:-2]) * ins[0][-2] * ins[0][-1]
                                   * min(ins[0][-2:]))


def _svd_code(args, a):
    herm = ", hermitian=True" if a.get("hermitian") else ""
    if a["part"] == "S":
        return f"np.linalg.svd({args[0]}, compute_uv=False{herm})"
    full = a["part"].endswith("full")
    return f"np.linalg.svd({args[0]}, full_matrices={full}{herm})[{_svd_index(a['part'])}]"


def _svd_index(part):
    return _SVD_PARTS.index(part[:-4] if part.endswith("full") else part)


def _svd_numpy(a, part, hermitian=False):
    if hermitian:
        return _svd_hermitian(a, part)
    if part == "S":
        return np.linalg.svd(a, compute_uv=False)
    return np.linalg.svd(a, full_matrices=part.endswith("full"))[_svd_index(part)]


def _svd_hermitian(a, part):
    """NumPy's svd(a, hermitian=True) through eigh, spelled so CuPy arrays dispatch too (CuPy's
    svd has no hermitian=): |eigenvalues| descending, their signs moved into Vh."""
    w, u = np.linalg.eigh(a)
    order = np.argsort(np.abs(w), axis=-1)[..., ::-1]
    w = np.take_along_axis(w, order, axis=-1)
    if part == "S":
        return np.abs(w)
    u = np.take_along_axis(u, order[..., None, :], axis=-1)
    if part.startswith("U"):
        return u
    return np.swapaxes(u * np.sign(w)[..., None, :], -1, -2)


_register(OpDef(
    "svd", 1, "linalg", svd_shape, first_dtype,
    _svd_numpy,
    lambda g, out, a, part, hermitian=False: LD.svd_vjp(g, out, a, part, hermitian),
    lambda t, out, a, part, hermitian=False: LD.svd_jvp(t, out, a, part, hermitian),
    _svd_code,
    flops=lambda out, ins, a: _mnk(4 if a["part"] == "S" else 12)(out, ins, a),
    doc="part 'U', 'S' (descending) or 'Vh' of the reduced SVD a = U S Vh; gradients of U "
        "and Vh need distinct, nonzero singular values. 'Ufull' and 'Vhfull': the square "
        "factors of the full SVD (values only: their extra vectors are not determined by a)"))
_register(OpDef(
    "qr", 1, "linalg", qr_shape, first_dtype,
    lambda a, part: np.linalg.qr(a)[("Q", "R").index(part)],
    lambda g, out, a, part: LD.qr_vjp(g, out, a, part),
    lambda t, out, a, part: LD.qr_jvp(t, out, a, part), _part("qr", ("Q", "R")),
    flops=lambda out, ins, a: _mnk(4 if a["part"] == "Q" else 2)(out, ins, a),
    doc="part 'Q' or 'R' of the reduced QR decomposition of (..., m, n) with m >= n "
        "(frontend/decompositions.py reduces m < n to it); gradients need rank n"))
_register(OpDef(
    "pinv", 1, "linalg",
    lambda s, a: tuple(s[0][:-2]) + (s[0][-1], s[0][-2]), first_dtype,
    lambda a, rcond: np.linalg.pinv(a, rcond=rcond),
    lambda g, out, a, rcond: LD.pinv_vjp(g, out, a, rcond),
    lambda t, out, a, rcond: LD.pinv_jvp(t, out, a, rcond),
    lambda args, a: f"np.linalg.pinv({args[0]}, rcond={float(a['rcond'])!r})",
    flops=_mnk(16),
    doc="Moore-Penrose pseudo-inverse, singular values <= rcond * max(s) taken as 0; the "
        "gradient holds where the rank is constant (Golub and Pereyra 1973)"))

# -- scans, rounding and arg-reductions (no or simple gradients) ------------------------------
_register(OpDef(
    "cumsum", 1, "scan", same_shape, first_dtype, lambda x, axis: np.cumsum(x, axis=axis),
    lambda g, out, x, axis: [F.flip(F.cumsum(F.flip(g, axis), axis), axis)],
    lambda t, out, x, axis: F.cumsum(t[0], axis), "np.cumsum({0}, axis={axis})",
    flops=lambda out, ins, a: _numel(out)))
_COMPOSITES = _Lazy("adjit.frontend.composites")
_register(OpDef(
    "cumprod", 1, "scan", same_shape, first_dtype, lambda x, axis: np.cumprod(x, axis=axis),
    lambda g, out, x, axis: [_COMPOSITES.cumprod_vjp(g, out, x, axis)],
    lambda t, out, x, axis: _COMPOSITES.cumprod_jvp(t[0], out, x, axis),
    "np.cumprod({0}, axis={axis})", flops=lambda out, ins, a: _numel(out),
    doc="running product; its rules are linear recurrences, exact where x holds zeros"))
_EXTREMES = ("maximum", "minimum", "fmax", "fmin")
_register(OpDef(
    "accumulate", 1, "scan", same_shape, first_dtype,
    lambda x, ufunc, axis: getattr(np, ufunc).accumulate(x, axis=axis),
    lambda g, out, x, ufunc, axis: [_COMPOSITES.cumulative_extreme_vjp(g, out, x, ufunc, axis)],
    lambda t, out, x, ufunc, axis: _COMPOSITES.cumulative_extreme_jvp(t[0], out, x, ufunc, axis),
    # ufunc is one of _EXTREMES (the frontend checks): written as that literal name
    lambda args, a: f"np.{_EXTREMES[_EXTREMES.index(a['ufunc'])]}.accumulate({args[0]}, "
                    f"axis={int(a['axis'])})",
    show=lambda a: f"{a['ufunc']} axis={a['axis']}", flops=lambda out, ins, a: _numel(out),
    doc="np.maximum/minimum/fmax/fmin.accumulate; the cotangent goes to the position of each "
        "running extreme, the last element equal to it (as torch.cummax)"))
def _extreme_at(a, v, idx, ufunc):
    z = a.copy()
    getattr(np, _EXTREMES[_EXTREMES.index(ufunc)]).at(z, idx, v)
    return z


_register(OpDef(
    "extreme_at", 3, "index", lambda s, a: s[0], first_dtype, _extreme_at,
    lambda g, out, a, v, idx, ufunc: _COMPOSITES.extreme_at_vjp(g, out, a, v, idx),
    lambda t, out, a, v, idx, ufunc: _COMPOSITES.extreme_at_jvp(t, out, a, v, idx), None,
    show=lambda a: a["ufunc"], flops=lambda out, ins, a: _numel(ins[1]),
    doc="np.maximum.at(a.copy(), idx, v) (minimum, fmax, fmin); the cotangent of each result "
        "goes to the elements of a and v equal to it, ties split evenly (as JAX)"))
unary("floor", np.floor, lambda g, out, x: [None], lambda t, out, x: None, "np.floor({0})",
      "np.floor({0})", "floor({0})", differentiable=False)
unary("ceil", np.ceil, lambda g, out, x: [None], lambda t, out, x: None, "np.ceil({0})",
      "np.ceil({0})", "ceil({0})", differentiable=False)
unary("trunc", np.trunc, lambda g, out, x: [None], lambda t, out, x: None, "np.trunc({0})",
      "np.trunc({0})", "trunc({0})", differentiable=False, doc="round towards zero")
# copysign(x, y) = |x| with y's sign bit: derivative +-1 in x (the signs of x and y agree or
# not), none in y
def _copysign_dx(x, y):
    one = _COMPOSITES.copysign
    return F.mul(one(1.0, x), one(1.0, y))


binary("copysign", np.copysign, lambda g, out, x, y: [F.mul(g, _copysign_dx(x, y)), None],
       lambda t, out, x, y: None if t[0] is None else F.mul(t[0], _copysign_dx(x, y)),
       "np.copysign({0}, {1})", "math.copysign({0}, {1})", "copysign({0}, {1})")
unary("round", np.rint, lambda g, out, x: [None], lambda t, out, x: None, "np.rint({0})",
      "np.rint({0})", "rint({0})", differentiable=False, doc="round half to even, as np.round")
_register(OpDef(
    "argmax", 1, "index", lambda s, a: tuple(d for i, d in enumerate(s[0]) if i != a["axis"]),
    lambda d, a: np.dtype(np.int64), lambda x, axis: np.argmax(x, axis=axis),
    lambda g, out, x, axis: [None], lambda t, out, x, axis: None,
    "np.argmax({0}, axis={axis})", differentiable=False))

def _stable_argsort(x, axis):
    """np.argsort(x, kind="stable"); for floats by NumPy's faster unstable sort where no two
    values tie (both orders are then the same, and float data rarely ties): a stable float
    sort runs about 7x slower. NaNs count as ties of each other."""
    if x.dtype.kind not in "fc" or x.shape[axis] < 2:
        return np.argsort(x, axis=axis, kind="stable").astype(np.int64, copy=False)
    p = np.argsort(x, axis=axis)
    s = np.take_along_axis(x, p, axis)
    lead = (slice(None),) * (axis % x.ndim)
    a, b = s[lead + (slice(1, None),)], s[lead + (slice(None, -1),)]
    if (a == b).any() or (np.isnan(a) & np.isnan(b)).any():
        p = np.argsort(x, axis=axis, kind="stable")
    return p.astype(np.int64, copy=False)


_register(OpDef(
    "argsort", 1, "index", same_shape, lambda d, a: np.dtype(np.int64), _stable_argsort,
    lambda g, out, x, axis: [None], lambda t, out, x, axis: None,
    None, differentiable=False,
    doc="indices that sort along `axis` (stable); np.sort gathers with them"))

_register(OpDef(
    "searchsorted", 2, "index", lambda s, a: s[1], lambda d, a: np.dtype(np.int64),
    lambda a, v, side: np.searchsorted(a, v, side=side).astype(np.int64),
    lambda g, out, a, v, side: [None, None], lambda t, out, a, v, side: None,
    # side is 'left' or 'right' (the frontend checks): written as one of those two literals
    lambda args, a: f"np.searchsorted({args[0]}, {args[1]}, "
                    f"side={'right' if a['side'] == 'right' else 'left'!r}).astype(np.int64)",
    differentiable=False,
    show=lambda a: a["side"],
    doc="insertion positions of v in the sorted 1-d a (binary search; NaN sorts last)"))


def _sort_perm_key(x, axis):
    """The gather key of take_along_axis(x, argsort(x, axis), axis) (stable: ties in order)."""
    key = F.along_axis_key(x, F.argsort(x, axis), axis)
    arrays, tkey = F.advanced_key(x, key)
    return [a if isinstance(a, F.Tracer) else F.lift(a, a.dtype, x.ctx) for a in arrays], tkey


def _sort_vjp(g, out, x, axis):
    idx, key = _sort_perm_key(x, axis)
    return [F.scatter_add(g, idx, key, x.shape, unique=True)]   # a permutation


def _sort_jvp(t, out, x, axis):
    return F.take_along_axis(t[0], F.argsort(x, axis), axis)


_register(OpDef(
    "sort", 1, "index", same_shape, first_dtype, lambda x, axis: np.sort(x, axis=axis),
    _sort_vjp, _sort_jvp, "np.sort({0}, axis={axis})",
    doc="the values sorted along `axis`, as np.sort (NaN last); the cotangent goes back "
        "through the stable argsort's permutation"))

# -- algebraic identities (simplify) ----------------------------------------------------------
def _is(v, k):
    return v is not None and v == k


def _adds_nothing(v):
    """x + v is x for every x: v is an integer 0 or -0.0 (x + 0.0 turns -0.0 into +0.0, as
    NumPy computes it: 1 / (0.0 + x) at x = -0.0 is +inf)."""
    return v is not None and v == 0 and (isinstance(v, (bool, int, np.integer)) or (
        not isinstance(v, complex) and math.copysign(1, float(v)) < 0))


OPS["add"].identity = lambda c: 0 if _adds_nothing(c[1]) else 1 if _adds_nothing(c[0]) \
    else None
# x - 0.0 is x for every x, x - (-0.0) is not (it is x + 0.0)
OPS["sub"].identity = lambda c: 0 if _is(c[1], 0) and (
    isinstance(c[1], (bool, int, np.integer)) or (
        not isinstance(c[1], complex) and math.copysign(1, float(c[1])) > 0)) else None
OPS["mul"].identity = lambda c: 0 if _is(c[1], 1) else 1 if _is(c[0], 1) else None
OPS["div"].identity = lambda c: 0 if _is(c[1], 1) else None
OPS["pow"].identity = lambda c: 0 if _is(c[1], 1) else None
OPS["neg"].chain = lambda inner, outer: "identity"


def _same_value(a, b):
    """Equal constants, -0.0 and 0.0 apart (x / where(c, 0.0, -0.0) tells them apart)."""
    return a is not None and b is not None and a == b and (
        not isinstance(a, float) or math.copysign(1.0, a) == math.copysign(1.0, b))


# where with a constant condition picks its branch; with equal constant branches it is that
# constant (the VJP of np.logaddexp(0, z) left where(z == 0, 0.0, 0.0) passes behind)
OPS["where"].identity = lambda c: 1 if c[0] is True else 2 if c[0] is False else \
    1 if _same_value(c[1], c[2]) else None
def _where_rewrite(emit, attrs, args):
    """where(c, x, x) is x; where(c, 1, 0) is c cast (one pass, where NumPy's where of a
    broadcast constant takes its slow path: the VJP of a where under a sum), where(c, 0, 1)
    is 1 minus it."""
    c, a, b = args
    if a["id"] == b["id"]:
        return a["id"]
    if c["dtype"] != np.bool_ or emit.d["dtype"].kind not in "iuf":
        return None
    from ..passes.simplify import uniform_value
    va, vb = uniform_value(emit.new, a["id"]), uniform_value(emit.new, b["id"])
    if _same_value(va, 1.0) and _same_value(vb, 0.0):
        return emit("cast", [c["id"]], {"dtype": emit.d["dtype"]})
    if _same_value(va, 0.0) and _same_value(vb, 1.0):
        return emit("sub", [b["id"], emit("cast", [c["id"]], {"dtype": emit.d["dtype"]})], {})
    return None


OPS["where"].rewrite = _where_rewrite


def _matmul_rewrite(emit, attrs, args):
    """[[1.]] @ x and x @ [[1.]] are x (the seed of a vector-matrix-vector product's VJP)."""
    from ..passes.simplify import uniform_value
    for k in (0, 1):
        one, other = args[k], args[1 - k]
        if tuple(one["shape"])[-2:] == (1, 1) and len(one["shape"]) <= len(other["shape"]) and \
                _same_value(uniform_value(emit.new, one["id"]), 1.0) and \
                tuple(other["shape"]) == tuple(emit.d["shape"]) and \
                other["dtype"] == emit.d["dtype"]:
            return other["id"]
    return None


OPS["matmul"].rewrite = _matmul_rewrite
# stop_gradient only matters to autodiff, which has run before simplification
OPS["stop_gradient"].noop = lambda a, shape, dtype: True
# custom rules (frontend/custom.py): the node's first argument is the primal result, the
# others the traced leaves of the arguments; the user's rules, held in the `rule` attribute,
# give the VJP and JVP. Its forward is its first argument, so after autodiff simplification
# drops it (identity) and no backend sees it.
def _safe_name(s):
    from .printer import safe_text
    return safe_text(s)


for _name in ("custom_vjp", "custom_jvp"):
    _register(OpDef(
        _name, None, "custom", lambda shapes, a: shapes[0], first_dtype,
        lambda y, *rest, rule: y,
        lambda g, out, y, *xs, rule: rule.vjp(g, list(xs)),
        lambda ts, out, y, *xs, rule: rule.jvp(ts, list(xs)), None,
        identity=lambda consts: 0, show=lambda a: _safe_name(a["rule"].name),
        reverse_only=_name == "custom_vjp",
        doc="a function with the user's derivative rule (adjit.custom_vjp / custom_jvp)"))


OPS["transpose"].chain = lambda inner, outer: {
    "perm": tuple(inner["perm"][p] for p in outer["perm"])}
OPS["reshape"].chain = lambda inner, outer: dict(outer)
OPS["broadcast_to"].chain = lambda inner, outer: dict(outer)


def _transpose_of_matmul(emit, attrs, args):
    # (a @ b).T = b.T @ a.T: the VJP of x @ W.T then yields a contiguous dW, not a view
    (x,) = args
    nd = len(x["shape"])
    swap = tuple(range(nd - 2)) + (nd - 1, nd - 2)
    if x["op"] != "matmul" or tuple(attrs["perm"]) != swap or emit.users(x["id"]) != 1:
        return None
    a, b = x["args"]
    return emit("matmul", [emit("transpose", [b], {"perm": swap}),
                           emit("transpose", [a], {"perm": swap})], {})


OPS["transpose"].rewrite = _transpose_of_matmul


def _cast_of_broadcast(emit, attrs, args):
    # cast(broadcast_to(x)) = broadcast_to(cast(x)): fewer elements converted, and NumPy's
    # astype of a broadcast view lays out its result unlike a ufunc would (stride-0 axes
    # innermost), so sums over it would add in another order than the fused program's
    (x,) = args
    if x["op"] != "broadcast_to":
        return None
    return emit("broadcast_to", [emit("cast", [x["args"][0]], dict(attrs))], dict(x["attrs"]))


OPS["cast"].rewrite = _cast_of_broadcast


def _leading_positions(emit, key, args, index, shape):
    """For x[pos][index] (a gather by one constant array of positions, pos, on x's first axis)
    whose index selects only along pos's axes: pos[index], so the gather builds only the
    selected rows (sliding_window_view(x, n)[::hop] takes its frames, not every window)."""
    if tuple(key) != (("a", 0),) or len(args) != 2 or emit.new[args[1]]["op"] != "const":
        return None
    pos = np.asarray(emit.new[args[1]]["attrs"]["value"])
    if any(k is None or k is Ellipsis for k in index) or len(index) > len(shape):
        return None
    head, tail = index[:pos.ndim], index[pos.ndim:]
    if not all(isinstance(k, slice) and range(*k.indices(d)) == range(d)
               for k, d in zip(tail, shape[pos.ndim:])):
        return None
    return np.array(pos[tuple(head)])     # (ascontiguousarray would make a 0-d array 1-d)


def _scatter_of_unslice(emit, attrs, args):
    # the VJP of x[pos][index]: zeros outside index scattered at pos are the selected
    # cotangents scattered at pos[index] (the backward of sliding windows taken with a hop)
    g = args[0]
    if g["op"] != "unslice" or emit.users(g["id"]) != 1:
        return None
    pos = _leading_positions(emit, attrs["key"], [a["id"] for a in args], g["attrs"]["index"],
                             g["shape"])
    if pos is None:
        return None
    return emit("scatter_add", [g["args"][0], emit("const", [], {"value": pos,
                                                                "dtype": pos.dtype})],
                dict(attrs))


OPS["scatter_add"].rewrite = _scatter_of_unslice


def _slice_rewrite(emit, attrs, args):
    # x[0] of np.array([a, b]) is a (a slice of one concatenated part), and a slice keeping
    # every element (x[0] of a (1, n) array) a reshape: simulation code that packs a state
    # with np.array and unpacks it by indexing keeps its scalars
    (x,) = args
    index, shape = attrs["index"], x["shape"]
    if any(k is None for k in index):
        return None
    ranges = [range(*k.indices(d)) if isinstance(k, slice) else None
              for k, d in zip(index, shape)]
    if all(r == range(d) if r is not None else d == 1 for r, d in zip(ranges, shape)):
        kept = tuple(d for k, d in zip(index, shape) if isinstance(k, slice))
        return emit("reshape", [x["id"]], {"shape": kept + tuple(shape[len(index):])})
    if x["op"] == "gather" and emit.users(x["id"]) == 1:
        pos = _leading_positions(emit, x["attrs"]["key"], x["args"], index, x["shape"])
        if pos is not None:
            return emit("gather", [x["args"][0], emit("const", [], {"value": pos,
                                                                   "dtype": pos.dtype})],
                        dict(x["attrs"]))
    axis = x["attrs"].get("axis", 0) % len(shape) if x["op"] == "concatenate" else None
    if axis is None or axis >= len(index):
        return None
    k, r, off = index[axis], ranges[axis], 0
    if r is not None and (r.step != 1 or not r):
        return None
    first, last = (k % shape[axis],) * 2 if r is None else (r.start, r.stop - 1)
    spanned = []
    for part in x["args"]:
        n = emit.new[part]["shape"][axis]
        if off <= first and last < off + n:
            inner = first - off if r is None else slice(first - off, last + 1 - off)
            return emit("slice", [part], {"index": index[:axis] + (inner,) + index[axis + 1:]})
        if off <= last and first < off + n:
            spanned.append((part, max(first - off, 0), min(last + 1 - off, n), n))
        off += n
    # a range over several parts, every other axis whole (the elements a loop wrote, read
    # back as y[1:]): the concatenation of the parts' pieces
    if r is None or not all(i == axis or (rr is not None and rr == range(d))
                            for i, (rr, d) in enumerate(zip(ranges, shape))):
        return None
    pieces = [part if (a, b) == (0, n) else emit(
        "slice", [part], {"index": (slice(None),) * axis + (slice(a, b),)})
        for part, a, b, n in spanned]
    return emit("concatenate", pieces, {"axis": axis})


OPS["slice"].rewrite = _slice_rewrite


def _flat_concatenate(emit, attrs, args):
    # a concatenation of concatenations along the same axis (read by nothing else) is one
    axis = attrs["axis"]
    nd = len(args[0]["shape"])
    if not any(a["op"] == "concatenate" and a["attrs"]["axis"] % nd == axis % nd and
               emit.users(a["id"]) == 1 for a in args):
        return None
    flat = []
    for a in args:
        if a["op"] == "concatenate" and a["attrs"]["axis"] % nd == axis % nd and \
                emit.users(a["id"]) == 1:
            flat.extend(a["args"])
        else:
            flat.append(a["id"])
    return emit("concatenate", flat, {"axis": axis})


OPS["concatenate"].rewrite = _flat_concatenate


def _outer_product(emit, attrs, args):
    # (..., m, 1) @ (..., 1, n) is a broadcast product: NumPy's matmul of a stack of outer
    # products (per-example weight gradients) runs 1.7x slower than the multiply
    x, y = args
    if x["shape"][-1] != 1:
        return None
    shape = tuple(x["shape"][:-1]) + (y["shape"][-1],)
    return emit("mul", [emit("broadcast_to", [x["id"]], {"shape": shape}),
                        emit("broadcast_to", [y["id"]], {"shape": shape})], {})


OPS["matmul"].rewrite = _outer_product


def _reshape_of_slice(emit, attrs, args):
    # x[i:i+1].reshape(()) is x[i]: the VJP of np.array([a, b, ...]) of scalars unstacks its
    # cotangent into one indexing per element instead of a slice and a reshape
    (x,) = args
    if x["op"] != "slice":
        return None
    index = x["attrs"]["index"]
    if any(k is None or k is Ellipsis for k in index):
        return None
    src = emit.new[x["args"][0]]["shape"]
    unit, out_axis = [], 0
    for k, d in zip(index, src):
        if isinstance(k, slice):
            if len(range(*k.indices(d))) == 1:
                unit.append(out_axis)
            out_axis += 1
    shape = tuple(x["shape"])
    kept = tuple(d for i, d in enumerate(shape) if i not in unit)
    if not unit or tuple(attrs["shape"]) != kept:
        return None
    new, out_axis = [], 0
    for k, d in zip(index, src):
        if isinstance(k, slice):
            new.append(range(*k.indices(d))[0] if out_axis in unit else k)
            out_axis += 1
        else:
            new.append(k)
    return emit("slice", [x["args"][0]], {"index": tuple(new) + tuple(index[len(new):])})


OPS["reshape"].rewrite = _reshape_of_slice
# ops whose VJP gives the positions they drop a cotangent of exactly 0: where's other
# branch, a gather's or a slice's unread elements (x[i] = v overwrites through concatenate +
# gather), the non-maximal elements of a max
for _name in ("where", "gather", "slice", "max", "min", "extreme_at", "accumulate"):
    OPS[_name].selects = True
OPS["accumulate"].keeps_zeros = True
for _name in ("exp", "exp2", "sinh", "cosh", "cbrt", "expm1", "log", "log1p", "log10", "log2",
              "sqrt", "div", "pow", "fmod",
              "arcsin", "arccos", "arctanh", "arccosh", "arctan2", "gammaln", "polygamma"):
    OPS[_name].blows_up = True
# by a constant, a division is a product (x / 3.0 only overflows, as x * 3.0), and a power with
# whole non-negative exponents one too (x ** 2); the argument is None where not constant
OPS["div"].blows_up = lambda x, y: y is None or not (np.isfinite(y).all() and (y != 0).all())
OPS["fmod"].blows_up = lambda x, y: y is None or not (y != 0).all()
OPS["pow"].blows_up = lambda x, y: y is None or not ((y >= 0).all() and (y == np.round(y)).all())
# every elementwise op but those passing the cotangent on unscaled: sin(log(0)) would
# evaluate cos(-inf) in sin's VJP
for _name, _op in OPS.items():
    _op.guard = _op.kind == "elementwise" and _op.differentiable and _name not in (
        "add", "sub", "neg", "where", "cast", "broadcast_to", "stop_gradient")
OPS["transpose"].noop = lambda a, shape, dtype: tuple(a["perm"]) == tuple(range(len(shape)))
OPS["reshape"].noop = lambda a, shape, dtype: tuple(a["shape"]) == tuple(shape)
OPS["broadcast_to"].noop = lambda a, shape, dtype: tuple(a["shape"]) == tuple(shape)
OPS["cast"].noop = lambda a, shape, dtype: np.dtype(a["dtype"]) == np.dtype(dtype)

SCALAR_HELPERS = {
    # scalar helpers the kernels' spellings refer to; defined once per backend
    "_rt_sign": "sign, NaN staying NaN",
    "_rt_exp": "exp (a backend may use a vectorisable form within 2 ulp)",
    "_rt_expm1": "expm1 (likewise)",
    "_rt_log": "log (likewise)",
    "_rt_log1p": "log1p (likewise)",
    "_rt_tanh": "tanh (a backend may use a faster form where its dtype allows)",
    "_rt_sigmoid": "1 / (1 + exp(-x)), as exp(x) / (1 + exp(x)) for x < 0",
    "_rt_logaddexp": "log(exp(x) + exp(y)) as NumPy's npy_logaddexp",
    "_rt_logaddexp2": "log2(2**x + 2**y) as NumPy's npy_logaddexp2",
    "_rt_polygamma": "psi^(n)(x) by recurrence and asymptotic series (ir/special.py)",
    "_rt_gammaln": "log |Gamma(x)| with SciPy's value -inf at -inf (C's lgamma: +inf)",
    "_rt_maximum": "maximum propagating NaN, as np.maximum",
    "_rt_minimum": "minimum propagating NaN, as np.minimum",
}

# -- batching rules (read by frontend/batching.py) --------------------------------------------
# Each gives the op on arguments stacked along a new axis 0 of size n, as one node where NumPy's
# op takes the extra axis (an elementwise op, a reduction over shifted axes, a matrix product
# with the stack folded into its rows), so a Jacobian or Hessian is one sweep of arrays n times
# larger rather than n sweeps (jax.vmap's batching rules, for adjit's op set)
def _emit(op, xs, attrs):
    return xs[0].ctx.emit(op, list(xs), attrs)


def with_stack(n, x, b):
    """x with the leading stack axis of n (b: it has it): a shared one is read n times (a
    broadcast view). Also the stacked form of a result the same for all n (frontend/api.py)."""
    return x if b else F.broadcast_to(x, (n,) + tuple(x.shape))


def _batch_map(op):
    def rule(n, xs, batched, attrs):        # elementwise arguments share one shape
        return _emit(op, [with_stack(n, x, b) for x, b in zip(xs, batched)], attrs)
    return rule


def _batch_axis_attr(op, key="axis"):
    def up(i):      # a negative axis counts from the end: the new first axis leaves it
        return int(i) + 1 if int(i) >= 0 else int(i)

    def rule(n, xs, batched, attrs):        # the arguments' axes move up by one
        a = dict(attrs)
        ax = a[key]
        a[key] = tuple(up(i) for i in ax) if isinstance(ax, (tuple, list)) else up(ax)
        return _emit(op, [with_stack(n, x, b) for x, b in zip(xs, batched)], a)
    return rule


def _lead(index):
    return (slice(None),) + (tuple(index) if isinstance(index, tuple) else (index,))


def _batch_broadcast_to(n, xs, batched, attrs):
    (x,), shape = xs, tuple(attrs["shape"])
    x = F.reshape(x, (n,) + (1,) * (len(shape) + 1 - x.ndim) + tuple(x.shape[1:]))
    return _emit("broadcast_to", [x], {"shape": (n,) + shape})


def _fold_right(op, n, x, y, attrs):
    """op(x, y) for a shared x and y stacked (n, ..., k, p): the stack folded into y's
    columns, (..., k, n * p), where op acts on each column alike (a matrix product, a
    solve), so the shared operand is read (or factored) once."""
    r = x.ndim
    k, p = y.shape[-2:]
    yf = F.reshape(F.transpose(y, tuple(range(1, r - 1)) + (r - 1, 0, r)),
                   tuple(y.shape[1:-2]) + (k, n * p))
    out = _emit(op, [x, yf], attrs)               # (..., m, n * p)
    out = F.reshape(out, tuple(out.shape[:-1]) + (n, p))
    return F.transpose(out, (r - 1,) + tuple(range(r - 1)) + (r,))


def _batch_matmul(n, xs, batched, attrs):
    """Same-rank operands (..., m, k) @ (..., k, p). One stacked operand folds the stack into
    its rows (left) or columns (right), so a shared matrix is read once, as BLAS prefers;
    both stacked: the stack is one more batch axis."""
    x, y = xs
    if all(batched):
        return _emit("matmul", [x, y], attrs)
    if batched[1]:
        return _fold_right("matmul", n, x, y, attrs)
    r = y.ndim          # (n, ..., m, k) -> (..., n * m, k) @ y
    m, k = x.shape[-2:]
    xf = F.reshape(F.transpose(x, tuple(range(1, r - 1)) + (0, r - 1, r)),
                   tuple(x.shape[1:-2]) + (n * m, k))
    out = _emit("matmul", [xf, y], attrs)         # (..., n * m, p)
    out = F.reshape(out, tuple(x.shape[1:-2]) + (n, m, y.shape[-1]))
    return F.transpose(out, (r - 2,) + tuple(range(r - 2)) + (r - 1, r))


def _batch_solve(op):
    def rule(n, xs, batched, attrs):    # a (..., m, m), b (..., m, k)
        a, b = xs
        if batched[0]:
            return _emit(op, [a, with_stack(n, b, batched[1])], attrs)
        return _fold_right(op, n, a, b, attrs)
    return rule


def _stack_position(shape, key, n_idx_shapes, n):
    """Where x[(:,) + key] puts the stack axis of x (n, *shape): NumPy moves the indexed
    axes to the front when integer arrays are not side by side (x[i, :, j])."""
    big = 1 + max([int(n)] + [int(d) for d in shape] + [int(d) for s in n_idx_shapes for d in s])
    idx = [np.zeros(s, np.intp) for s in n_idx_shapes]
    out = _dummy((big,) + tuple(shape))[_build_key((("s", slice(None)),) + tuple(key), idx)]
    return out.shape.index(big)


def _to_front(x, p):
    return x if p == 0 else F.transpose(x, (p,) + tuple(i for i in range(x.ndim) if i != p))


def _stacked_key(n, key, idx, batched):
    """For stacked positions: the key with a leading arange(n) index (x[arange(n)[:, None],
    i] for x[i]), the index arrays with the stack axis (shared ones broadcast), and the axes
    of its result in the order the stacked per-element results have them."""
    arrays = [i if b else F.broadcast_to(i, (n,) + tuple(i.shape)) for i, b in zip(idx, batched)]
    ranks = [len(i.shape) - 1 for i in arrays]
    nd = max(ranks + [0])
    arrays = [F.reshape(i, (n,) + (1,) * (nd - r) + tuple(i.shape[1:]))
              for i, r in zip(arrays, ranks)]
    rows = F.lift(np.arange(n, dtype=np.intp).reshape((n,) + (1,) * nd), np.dtype(np.intp),
                  arrays[0].ctx)
    new = (("a", len(arrays)),) + tuple(key)
    # per element, NumPy puts the indexed axes where they stand when the index arrays (and
    # ints) are side by side, else first; with arange(n) first they always come first
    adv = [k for k, item in enumerate(key) if item[0] in "ai"]
    side_by_side = adv == list(range(adv[0], adv[-1] + 1))
    before = sum(1 for item in key[:adv[0]] if item[0] in "sn") if side_by_side else 0
    return new, arrays + [rows], nd, before


def _batch_gather(n, xs, batched, attrs):
    x, idx = xs[0], xs[1:]
    if not any(batched[1:]):    # shared positions: x[:, key]
        key = (("s", slice(None)),) + tuple(attrs["key"])
        p = _stack_position(x.shape[1:], attrs["key"], [i.shape for i in idx], n)
        return _to_front(_emit("gather", [x] + list(idx), {**attrs, "key": key}), p)
    key, arrays, nd, before = _stacked_key(n, attrs["key"], idx, batched[1:])
    out = _emit("gather", [with_stack(n, x, batched[0])] + arrays, {**attrs, "key": key})
    if before:      # (n, *indexed, *before, ...) -> (n, *before, *indexed, ...)
        perm = (0,) + tuple(range(1 + nd, 1 + nd + before)) + tuple(range(1, 1 + nd))
        out = F.transpose(out, perm + tuple(range(len(perm), out.ndim)))
    return out


def _batch_scatter_add(n, xs, batched, attrs):
    g, idx = xs[0], xs[1:]
    g = with_stack(n, g, batched[0])
    if not any(batched[1:]):
        p = _stack_position(attrs["shape"], attrs["key"], [i.shape for i in idx], n)
        if p:       # g's stack axis where the key's result has it
            g = F.transpose(g, tuple(range(1, p + 1)) + (0,) + tuple(range(p + 1, g.ndim)))
        return _emit("scatter_add", [g] + list(idx), {
            **attrs, "key": (("s", slice(None)),) + tuple(attrs["key"]),
            "shape": (n,) + tuple(attrs["shape"])})
    key, arrays, nd, before = _stacked_key(n, attrs["key"], idx, batched[1:])
    if before:      # g (n, *before, *indexed, ...) in the key's order (n, *indexed, *before)
        perm = (0,) + tuple(range(1 + before, 1 + before + nd)) + tuple(range(1, 1 + before))
        g = F.transpose(g, perm + tuple(range(len(perm), g.ndim)))
    return _emit("scatter_add", [g] + arrays, {**attrs, "key": key,
                                               "shape": (n,) + tuple(attrs["shape"])})


# a kernel of at most this many taps is correlated as a sum of shifted slices (one fused pass);
# a longer one as a product of the windows with the kernel
_SHIFTED_TAPS = 16


def _batch_correlate(n, xs, batched, attrs):
    """np.correlate of stacked 1-d signals and/or kernels: out[b, k] = sum_j ap[b, k + j]
    v[b, j] with ap the signal padded for the mode."""
    a, v = xs
    ba, bv = batched
    mode = attrs.get("mode", "valid")
    size, m = a.shape[-1], v.shape[-1]
    lo, hi = _CORRELATE_PAD[mode](m)
    length = size + lo + hi - m + 1
    lead = (slice(None),) if ba else ()
    ap = F.unslice(a, lead + (slice(lo, lo + size),), tuple(a.shape[:-1]) + (
        size + lo + hi,)) if lo or hi else a
    if m <= _SHIFTED_TAPS:
        out = None
        for j in range(m):
            tap = F.slice_(v, ((slice(None),) if bv else ()) + (slice(j, j + 1),))
            term = F.mul(F.slice_(ap, lead + (slice(j, j + length),)), tap)
            out = term if out is None else F.add(out, term)
        return out
    windows = F.getitem(ap, lead + (np.arange(length)[:, None] + np.arange(m),))
    if not ba:                                      # (n, m) @ (m, length)
        return F.matmul(v, F.transpose(windows))
    if not bv:                                      # (n, length, m) @ (m,)
        return F.matmul(windows, v)
    return F.reshape(F.matmul(windows, F.reshape(v, (n, m, 1))), (n, length))


def _batch_extreme_at(n, xs, batched, attrs):
    """np.maximum.at & co. into stacked 1-d arrays: one call on the stack laid end to end,
    each element's positions moved into its own stretch. A position out of range stays out of
    range (NumPy's IndexError), never landing in the next element's stretch."""
    a, v, idx = (with_stack(n, x, b) for x, b in zip(xs, batched))
    k = a.shape[1]
    m = idx.shape[1]
    pos = F.where(F.lt(idx, 0), F.add(idx, k), idx)
    bad = _COMPOSITES.logical_or(F.lt(pos, 0), F.ge(pos, k))
    pos = F.add(pos, (np.arange(n) * k).astype(idx.dtype)[:, None])
    pos = F.where(bad, np.asarray(n * k, idx.dtype), pos)
    out = _emit("extreme_at", [F.reshape(a, (n * k,)), F.reshape(v, (n * m,)),
                               F.reshape(pos, (n * m,))], attrs)
    return F.reshape(out, (n, k))


for _name, _op in OPS.items():
    if _op.kind == "elementwise":
        _op.batch = _batch_map(_name)
OPS["correlate"].batch = _batch_correlate
OPS["extreme_at"].batch = _batch_extreme_at
for _name in ("sum", "max", "min", "nanmax", "nanmin", "cumsum", "cumprod", "accumulate",
              "argmax", "argsort", "sort", "concatenate"):
    OPS[_name].batch = _batch_axis_attr(_name)
# ops that already act on stacks of their last axes: the stack is one more leading axis
for _name in ("one_hot", "cabs", "inv", "cofactor", "det", "slogdet", "cholesky", "eigh",
              "svd", "qr", "pinv"):
    OPS[_name].batch = _batch_map(_name)
for _name in ("fft", "rfft", "irfft"):
    OPS[_name].batch = _batch_axis_attr(_name)
for _name in ("solve", "solve_triangular"):
    OPS[_name].batch = _batch_solve(_name)
OPS["reshape"].batch = lambda n, xs, b, a: _emit("reshape", xs, {"shape": (n,) + tuple(
    a["shape"])})
OPS["transpose"].batch = lambda n, xs, b, a: _emit("transpose", xs, {"perm": (0,) + tuple(
    int(p) + 1 for p in a["perm"])})
OPS["broadcast_to"].batch = _batch_broadcast_to
OPS["slice"].batch = lambda n, xs, b, a: _emit("slice", xs, {"index": _lead(a["index"])})
OPS["unslice"].batch = lambda n, xs, b, a: _emit("unslice", xs, {
    "index": _lead(a["index"]), "shape": (n,) + tuple(a["shape"])})
OPS["place_add"].batch = lambda n, xs, b, a: _emit(
    "place_add", [with_stack(n, x, bi) for x, bi in zip(xs, b)],
    {"indices": tuple(_lead(ix) for ix in a["indices"]), "shape": (n,) + tuple(a["shape"])})
OPS["matmul"].batch = _batch_matmul
# positions of stacked values in one shared sorted array (np.interp, np.digitize in a vmap);
# a stacked sorted array is searched once per element
OPS["searchsorted"].batch = lambda n, xs, b, a: None if b[0] else _emit("searchsorted", xs, a)
OPS["gather"].batch = _batch_gather
OPS["scatter_add"].batch = _batch_scatter_add

# -- fused groups (made by passes/fusion.py after autodiff; see ir/fused.py) -----------------
from . import fused as _fused  # noqa: E402 - it reads OPS, so it comes after the table

_register(OpDef(
    "fused", None, "fused", _fused.fused_shape, _fused.fused_dtype, _fused.fused_numpy,
    _fused.no_rule, _fused.no_rule, None, flops=_fused.fused_flops, show=_fused.show,
    doc="one output of a fused group of elementwise nodes, optionally reduced"))

del _name, _fn, _sym, _deriv, _c
