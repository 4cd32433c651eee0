"""Elementwise and selection functions built from the elementary ones: the modulo family
(remainder, fmod, floor_divide, divmod), sinc, nan_to_num, isclose, select, piecewise, interp,
meshgrid and np.linalg.multi_dot; spacings (linspace, logspace, geomspace), polynomials
(vander, polyder, polyint, polyfit), np.i0, unwrap, histogram with weights, tensorsolve and
tensorinv, and np.roll by a traced shift.

Each takes Tracers, NumPy arrays or Python scalars and returns what NumPy would, with NumPy's
dtypes and sign conventions; the result is ordinary IR, so gradients come from the parts.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..ir.errors import ShapeError, UnsupportedError
from ..ir.ops import OPS
from . import buffer as B
from . import composites as C
from . import functions as F
from .tracer import Tracer, _at, user_where

_shape_of, _dtype_of = F._shape_of, F._dtype_of


# -- the modulo family ---------------------------------------------------------------------------
def _division(x, y, trunc):
    """(quotient, remainder) of x / y rounded to floor (or towards zero with trunc)."""
    dt = F.result_dtype(x, y)
    if dt.kind in "biu":
        return _int_division(x, y, np.dtype(np.int8) if dt.kind == "b" else dt, trunc)
    if trunc:
        return None, _fmod(x, y)
    return _float_divmod(x, y)


def _fmod(x, y):
    """C's fmod as one exact op (the fmod op of ir/ops.py), in the promoted float dtype."""
    return F._elementwise("fmod", [x, y], float_only=True)


def _held(v):
    return F.stop_gradient(v) if isinstance(v, Tracer) else v


def _float_divmod(x, y):
    """(x // y, x % y) for floats, step for step as NumPy's npy_divmod (npy_math_internal.h):

        mod = fmod(a, b)
        if !b: return a / b, mod                      (floor_divide and remainder alike)
        div = (a - mod) / b                           (very nearly a whole number)
        if mod: if (b < 0) != (mod < 0): mod += b; div -= 1
        else:   mod = copysign(0, b)
        if div: floordiv = floor(div); if div - floordiv > 0.5: floordiv += 1
        else:   floordiv = copysign(0, a / b)

    so the results are NumPy's bit for bit, signed zeros, infinities and NaNs included. The
    remainder's derivative is 1 in x and -floor(x / y) in y (fmod's -trunc(x / y), plus one
    where y was added); the quotient is piecewise constant and carries no gradient.
    """
    mod = _fmod(x, y)
    y_neg = F.lt(y, 0)
    fix = C.logical_and(F.ne(mod, 0), F.ne(y_neg, F.lt(mod, 0)))
    zero = F.eq(mod, 0)
    # a zero remainder takes the sign of the divisor; its derivative in x stays 1
    rem = F.where(zero, _signed_zero(mod, y_neg), F.where(fix, F.add(mod, y), mod))
    # the quotient, from values held constant
    xh, yh, mh = _held(x), _held(y), _held(mod)
    div = F.div(F.sub(xh, mh), yh)
    div = F.where(fix, F.sub(div, 1), div)
    fl = F.floor(div)
    fl = F.where(F.gt(F.sub(div, fl), 0.5), F.add(fl, 1), fl)
    quot = F.div(xh, yh)
    q = F.where(F.ne(div, 0), fl, C.copysign(F.zeros_like(div), quot))
    q = F.where(F.eq(yh, 0), quot, q)
    return q, rem


def _signed_zero(r, neg):
    """A zero, negative where `neg`, for r = +-0, whose derivative in r is still 1, so the
    remainder's gradient flows at exact multiples (a constant zero would cut it).

    s (|r| + (r - r) s), with |r| and the subtracted r held constant: the sum is +0 whatever
    r's sign (both terms come from r: the simplifier would drop a constant `+ 0`) and s then
    signs it; the derivative is s * s = 1.
    """
    one = F.ones_like(r)
    s = F.where(neg, F.neg(one), one)
    held = F.stop_gradient(r)
    return F.mul(F.add(F.abs(held), F.mul(F.sub(r, held), s)), s)


def _int_division(x, y, dt, trunc):
    """Integer division through float64, exact: below 2**53 the float quotient rounds to the
    right whole number; 64-bit integers then get a correction step in integer arithmetic
    (whose wrapping is harmless: the exact remainder is small). A zero divisor gives 0, 0,
    as NumPy (which also warns); the minimum int64 // -1 wraps to itself, as in NumPy."""
    ok = F.ne(y, 0)
    xi, yi = F.cast(x, dt), F.where(ok, F.cast(y, dt), np.ones((), dt))
    xf, yf = F.cast(xi, np.float64), F.cast(yi, np.float64)
    q = F.floor(F.div(xf, yf))
    if dt.itemsize < 8:   # through int64, which wraps (min // -1) as NumPy does
        q = F.cast(F.cast(q, np.int64), dt)
        r = F.sub(xi, F.mul(yi, q))
    else:
        q, r = _refine_division(xi, yi, yf, q, dt)
    if trunc and dt.kind == "i":   # floor -> towards zero: one step back where signs differ
        back = C.logical_and(F.ne(r, 0), F.ne(F.lt(xi, 0), F.lt(yi, 0)))
        q = F.where(back, F.add(q, np.ones((), dt)), q)
        r = F.where(back, F.sub(r, yi), r)
    zero = np.zeros((), dt)
    return F.where(ok, q, zero), F.where(ok, r, zero)


def _refine_division(xi, yi, yf, q, dt):
    """floor(x / y) and its remainder, exact for int64 and uint64 from q, the floor of the
    float64 quotient (off by a few units at most, from x's rounding to float64)."""
    info = np.iinfo(dt)
    # in range before the cast (the largest float64 values below 2**63 and 2**64)
    q = F.minimum(F.maximum(q, float(info.min)), float(info.max - (info.max >> 52)))
    q = F.cast(q, dt)
    r = F.sub(xi, F.mul(yi, q))           # exact modulo 2**64, and small
    rs = F.cast(r, np.int64)              # its value, for uint64 too
    k = F.cast(F.cast(F.floor(F.div(F.cast(rs, np.float64), yf)), np.int64), dt)
    q, r = F.add(q, k), F.sub(r, F.mul(yi, k))
    # the float step can leave r one y outside [0, y) (or (y, 0] for y < 0)
    one = np.ones((), dt)
    rs = F.cast(r, np.int64)
    if dt.kind == "u":
        # y > 0 and r in [-y, 2y), which do not overlap modulo 2**64 for y < 2**62
        low = F.gt(r, F.sub(np.array(info.max, dt), yi))
        high = C.logical_and(C.logical_not(low), F.ge(r, yi))
    else:
        neg = F.lt(yi, 0)
        low = F.where(neg, F.gt(r, 0), F.lt(r, 0))
        high = F.where(neg, F.le(r, yi), F.ge(r, yi))
    q = F.where(low, F.sub(q, one), F.where(high, F.add(q, one), q))
    r = F.where(low, F.add(r, yi), F.where(high, F.sub(r, yi), r))
    if dt.kind == "u":    # y >= 2**62: a quotient of at most 3, by subtracting y
        big = F.ge(yi, np.array(1 << 62, dt))
        qb, rb = F.zeros_like(q), xi
        for _ in range(3):
            more = F.ge(rb, yi)
            qb = F.where(more, F.add(qb, one), qb)
            rb = F.where(more, F.sub(rb, yi), rb)
        q, r = F.where(big, qb, q), F.where(big, rb, r)
    return q, r


def remainder(x, y):
    """x - floor(x / y) y, with the sign of y, as np.remainder (np.mod, `%`); its derivative
    is 1 in x and -floor(x / y) in y.

    >>> import numpy as np, adjit
    >>> adjit.compile(lambda x: x % 1.5, backend="numpy")(np.array([-1.0, 2.0, 3.0]))
    array([0.5, 0.5, 0. ])
    """
    return _division(x, y, trunc=False)[1]


def fmod(x, y):
    """x - trunc(x / y) y, with the sign of x, as np.fmod (C's fmod).

    >>> import numpy as np, adjit
    >>> adjit.compile(lambda x: np.fmod(x, 1.5), backend="numpy")(np.array([-1.0, 2.0]))
    array([-1. ,  0.5])
    """
    return _division(x, y, trunc=True)[1]


def floor_divide(x, y):
    """floor(x / y), as np.floor_divide (`//`); piecewise constant, so its derivative is 0.

    >>> import numpy as np, adjit
    >>> adjit.compile(lambda x: x // 1.5, backend="numpy")(np.array([-1.0, 2.0, 3.0]))
    array([-1.,  1.,  2.])
    """
    return _division(x, y, trunc=False)[0]


def divmod_(x, y):
    """(x // y, x % y), as np.divmod and divmod().

    >>> import numpy as np, adjit
    >>> adjit.compile(lambda x: divmod(x, 1.5), backend="numpy")(np.array([-1.0, 2.0]))
    (array([-1.,  1.]), array([0.5, 0.5]))
    """
    return _division(x, y, trunc=False)


# -- elementwise functions ---------------------------------------------------------------------
def sinc(x):
    """sin(pi x) / (pi x), 1 at x = 0, as np.sinc. Near 0 (|pi x| < 0.1) a Taylor polynomial
    to (pi x)^8 takes over: the quotient's derivatives cancel there (its gradient at 1e-8
    lost all digits), the polynomial's do not, and the gradient at 0 is 0 (not NaN).

    >>> import numpy as np, adjit
    >>> adjit.grad(lambda x: np.sum(np.sinc(x)), backend="numpy")(np.array([0.0, 0.5]))
    array([ 0.        , -1.27323954])
    """
    far = F.ge(F.abs(x), 0.1 / math.pi)
    y = F.mul(F.where(far, x, 1.0), math.pi)
    t = F.where(far, 0.0, x)      # x near 0 (its derivative there too), 0 elsewhere
    z = F.mul(F.mul(t, t), math.pi ** 2)
    taylor = 1.0 / 362880.0       # sum (-z)^k / (2k + 1)!, k <= 4: error below 1e-17
    for k in (3, 2, 1, 0):
        taylor = F.add(F.mul(F.neg(z), taylor), 1.0 / math.factorial(2 * k + 1))
    return F.where(far, F.div(F.sin(y), y), taylor)


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """NaN, +inf and -inf replaced by nan, posinf and neginf (the largest finite values by
    default), as np.nan_to_num; the gradient passes where x is finite.

    >>> import numpy as np, adjit
    >>> adjit.compile(np.nan_to_num, backend="numpy")(np.array([np.nan, 1.0, -np.inf]))
    array([ 0.00000000e+000,  1.00000000e+000, -1.79769313e+308])
    """
    dt = _dtype_of(x)
    if dt.kind == "c":
        raise UnsupportedError(f"np.nan_to_num of complex arrays{_at(user_where())}")
    if dt.kind != "f":
        return x
    info = np.finfo(dt)
    with np.errstate(over="ignore"):
        fill = [np.asarray(info.max if posinf is None else posinf).astype(dt),
                np.asarray(info.min if neginf is None else neginf).astype(dt),
                np.asarray(nan).astype(dt)]
    r = F.where(F.eq(x, math.inf), fill[0], x)
    r = F.where(F.eq(x, -math.inf), fill[1], r)
    return F.where(C.isnan(x), fill[2], r)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol |b| (or a == b), as np.isclose: a boolean array, no gradient.

    >>> import numpy as np, adjit
    >>> adjit.compile(lambda x: np.isclose(x, 1.0), backend="numpy")(np.array([1.0, 1.1]))
    array([ True, False])
    """
    y = b
    if type(b) is int:
        y = float(b)
    elif type(b) not in (float, complex) and _dtype_of(b).kind != "m":
        y = F.cast(b, np.result_type(_dtype_of(b), 1.0))

    def py(v):
        return type(v) in (int, float, complex)
    # Python numbers stay Python numbers, so they stay weak in the comparison, as in NumPy
    ay = abs(y) if py(y) else F.abs(y)
    scaled = rtol * ay if py(rtol) and py(ay) else F.mul(rtol, ay)
    tol = atol + scaled if py(atol) and py(scaled) else F.add(atol, scaled)
    near = F.le(F.abs(F.sub(a, y)), tol)
    r = C.logical_or(C.logical_and(near, C.isfinite(y)), F.eq(a, y))
    return C.logical_or(r, C.logical_and(C.isnan(a), C.isnan(y))) if equal_nan else r


def refuse_python_bool(name):
    """np.allclose & co. answer with a Python bool, which a trace cannot give."""
    def refuse(*args, **kwargs):
        raise UnsupportedError(
            f"np.{name} returns a Python bool, which needs concrete values, but it was called "
            f"on traced arrays{_at(user_where())}; pass that argument in static_argnums, "
            f"compute it outside the traced function, or keep a traced boolean array "
            f"(np.all(np.isclose(a, b)), np.all(a == b)) and use it with np.where")
    return refuse


# -- choosing between values -------------------------------------------------------------------
def _cond(c, what, i):
    c = c if isinstance(c, Tracer) else np.asarray(c)
    if _dtype_of(c) != np.bool_:
        raise ShapeError(f"np.{what}: condition {i} should be a boolean array, got "
                         f"{_dtype_of(c)}{_at(user_where())}")
    return c


def select(condlist, choicelist, default=0):
    """The first choice whose condition holds, else default, as np.select.

    >>> import numpy as np, adjit
    >>> adjit.compile(lambda x: np.select([x < 0, x > 1], [-x, x ** 2], 0.5),
    ...               backend="numpy")(np.array([-2.0, 0.5, 3.0]))
    array([2. , 0.5, 9. ])
    """
    if len(condlist) != len(choicelist) or not len(condlist):
        raise ShapeError(f"np.select: the lists of conditions and of choices must have the same "
                         f"length, and not be empty{_at(user_where())}")
    conds = [_cond(c, "select", i) for i, c in enumerate(condlist)]
    choices = [c if type(c) in (int, float, complex) or isinstance(c, Tracer) else np.asarray(c)
               for c in list(choicelist) + [default]]
    dt = F.result_dtype(*choices)
    choices = [F.cast(c, dt) for c in choices]
    shape = F._broadcast_shape("select", [_shape_of(v) for v in conds + choices])
    out = choices[-1]
    for cond, choice in zip(conds[::-1], choices[-2::-1]):
        out = F.where(cond, choice, out)
    return F.broadcast_to(out, shape)


def piecewise(x, condlist, funclist, *args, **kw):
    """funclist[i](x[condlist[i]]) (or the constant funclist[i]) where condlist[i] holds,
    later pieces winning, 0 elsewhere, as np.piecewise. With a traced condition every
    function runs on all of x and the pieces are chosen with np.where (as in JAX), so the
    functions must be elementwise (others are refused); the where trap keeps a function's
    undefined values outside its piece (log of a negative) out of the gradient.

    >>> import numpy as np, adjit
    >>> adjit.compile(lambda x: np.piecewise(x, [x < 0, x >= 0], [lambda v: -v, lambda v: v ** 2]),
    ...               backend="numpy")(np.array([-2.0, 3.0]))
    array([2., 9.])
    """
    nd = len(_shape_of(x))
    # NumPy's rule: one condition unless condlist's first entry is itself an array or a list
    if isinstance(condlist, (list, tuple)):
        several = isinstance(condlist[0], (list, np.ndarray, Tracer)) or nd == 0
        conds = list(condlist) if several else [condlist]
    elif np.isscalar(condlist) or not len(_shape_of(condlist)):
        conds = [condlist]
    else:
        conds = [condlist] if condlist.ndim < 2 and nd else \
            [condlist[i] for i in range(len(condlist))]
    conds = [c if isinstance(c, Tracer) and c.dtype == np.bool_ else
             F.ne(c, 0) if isinstance(c, Tracer) else np.asarray(c, dtype=bool) for c in conds]
    n, n2 = len(conds), len(funclist)
    if n == n2 - 1:
        other = conds[0]
        for c in conds[1:]:
            other = C.logical_or(other, c)
        conds.append(C.logical_not(other))
    elif n != n2:
        raise ShapeError(f"np.piecewise: with {n} condition(s), either {n} or {n + 1} "
                         f"functions are expected, got {n2}{_at(user_where())}")
    dt = _dtype_of(x)
    shape = tuple(_shape_of(x))
    out = F.zeros_like(x)
    for cond, func in zip(conds, funclist):
        if not isinstance(func, Callable):
            out = F.where(cond, F.cast(func, dt), out)
        elif nd and not isinstance(cond, Tracer):
            # a constant condition: func(x[cond]) as NumPy calls it (a function of the whole
            # piece, t - t.mean(), sees that piece), placed at the condition's positions
            pos = np.flatnonzero(np.broadcast_to(cond, shape))
            if not pos.size:
                continue            # NumPy does not call func on an empty piece
            value = func(F.getitem(x, np.broadcast_to(cond, shape)), *args, **kw)
            value = F.broadcast_to(F.cast(value, dt), (pos.size,))
            placed = F.reshape(F.scatter_add(value, [pos], (("a", 0),),
                                             (int(np.prod(shape)),)), shape)
            out = F.where(cond, placed, out)
        else:
            # a traced condition: the piece's length depends on the data, so func runs on all
            # of x and the piece is selected, which is NumPy's result for elementwise
            # functions only (checked: anything else is refused)
            xt = x if isinstance(x, Tracer) else F.const(np.asarray(x))
            mark = xt.ctx.graph._next
            value = func(xt, *args, **kw)
            _elementwise_of(value, xt, mark, nd)
            # and not of the piece's length (t / t.size, len(t)): called on one more element,
            # the function must make the same constants
            if nd:
                flat = F.reshape(xt, (-1,))
                probe = F.concatenate([flat, F.getitem(flat, slice(0, 1))], 0)
                mark2 = xt.ctx.graph._next
                other = func(probe, *args, **kw)
                if _constants(value, mark) != _constants(other, mark2):
                    raise UnsupportedError(
                        f"np.piecewise with a traced condition{_at(user_where())}: a function "
                        "reads the length of its piece (t.size, len(t), t.shape), which depends "
                        "on the data; adjit calls it on all of x. Write np.where(cond, f(x), "
                        "...) with the length you mean")
            out = F.where(cond, F.cast(value, dt), out)
    return F.broadcast_to(out, shape)


def _constants(value, mark):
    """The sorted constant values a function's result was computed from (nodes from mark)."""
    if not isinstance(value, Tracer):
        return [repr(np.asarray(value).tolist())]
    g, todo, seen, out = value.ctx.graph, [value.id], set(), []
    while todo:
        n = todo.pop()
        if n in seen or n < mark:
            continue
        seen.add(n)
        if g[n]["op"] == "const":
            out.append(repr(np.asarray(g[n]["attrs"]["value"]).tolist()))
        todo.extend(g[n]["args"])
    return sorted(out)


def _elementwise_of(value, x, mark, nd):
    """Refuse a piecewise function that is not elementwise in x (its value at one position
    depends on others, or on the piece's size), which np.piecewise with a traced condition
    would call on x[cond]."""
    if not isinstance(value, Tracer) or not nd:
        return
    g, todo, seen = value.ctx.graph, [value.id], set()
    while todo:
        n = todo.pop()
        if n in seen or n < mark:
            continue
        seen.add(n)
        d = g[n]
        kind = OPS[d["op"]].kind
        ok = kind == "elementwise" or (
            d["op"] == "broadcast_to" and int(np.prod(g[d["args"][0]]["shape"])) == 1) or (
            d["op"] == "const" and np.ptp(np.asarray(d["attrs"]["value"]).astype(float)
                                          if np.size(d["attrs"]["value"]) else 0) == 0)
        if not ok:
            raise UnsupportedError(
                f"np.piecewise with a traced condition{_at(d['where'] or user_where())}: NumPy "
                "calls each function on x[cond], whose length depends on the data; adjit calls "
                "it on all of x and selects, which gives NumPy's numbers only for elementwise "
                f"functions, and this one is not ({d['op']}: it reduces, reorders, indexes or "
                "reads the piece's size). Write np.where(cond, f(x), ...) with f written for "
                "the whole array")
        todo.extend(d["args"])


def interp(x, xp, fp, left=None, right=None, period=None):
    """Piecewise-linear interpolation of the points (xp, fp) at x, as np.interp. xp must be a
    constant increasing NumPy array; x, fp, left and right may be traced (the derivative in x
    is the slope of the piece). Each x finds its piece by a binary search, as NumPy's.

    >>> import numpy as np, adjit
    >>> adjit.grad(lambda x: np.sum(np.interp(x, [0.0, 1.0, 3.0], [0.0, 2.0, 3.0])),
    ...            backend="numpy")(np.array([0.5, 2.0]))
    array([2. , 0.5])
    """
    where = _at(user_where())
    xp = B.resolve(xp) if isinstance(xp, B.Buffer) else xp
    if isinstance(xp, Tracer):
        if period is not None:
            raise UnsupportedError(f"np.interp with traced xp and a period{where}; give the "
                                   "sample points as a constant array, or leave out period=")
        return _interp_traced_knots(x, xp, fp, left, right, where)
    if period is not None:
        # NumPy's own reduction: x and xp into one period, xp sorted (fp with it) and
        # extended by one point on each side across the seam; left and right are ignored
        if isinstance(period, Tracer):
            raise UnsupportedError(f"np.interp with a traced period{where}; the period must "
                                   "be a number (a constant)")
        period = abs(float(period))
        if period == 0:
            raise ValueError(f"np.interp: period must be a non-zero value{where}")
        xp = np.asarray(xp, dtype=np.float64)
        if xp.ndim != 1 or tuple(_shape_of(fp)) != xp.shape:
            raise ShapeError(f"np.interp: xp {xp.shape} and fp {tuple(_shape_of(fp))} must be "
                             f"1-d and of the same length{where}")
        order = np.argsort(xp % period, kind="stable")
        xp = (xp % period)[order]
        xp = np.concatenate((xp[-1:] - period, xp, xp[:1] + period))
        fp = F.getitem(F.cast(fp, np.float64), np.concatenate((order[-1:], order, order[:1])))
        return interp(remainder(F.cast(x, np.float64), period), xp, fp)
    if _dtype_of(fp).kind == "c":
        raise UnsupportedError(f"np.interp with complex fp{where}")
    xp = np.asarray(xp, dtype=np.float64)
    fshape = tuple(_shape_of(fp))
    if xp.ndim != 1 or fshape != xp.shape or xp.size == 0:
        raise ShapeError(f"np.interp: xp {xp.shape} and fp {fshape} must be 1-d and of the "
                         f"same, non-zero length{where}")
    if np.any(np.diff(xp) < 0):
        raise UnsupportedError(f"np.interp with xp not increasing{where}; NumPy does not check "
                               "and answers nonsense: sort xp (and fp with it) first")
    x, fp = F.cast(x, np.float64), F.cast(fp, np.float64)
    n, last = xp.size, F.getitem(fp, -1)
    if n == 1:
        res = F.broadcast_to(last, _shape_of(x))
    else:
        if n == 2:
            j = np.zeros(_shape_of(x), np.intp)
        else:   # xp[j] <= x < xp[j + 1]: the inner knots at or below x (a binary search)
            j = searchsorted(xp[1:-1], x, "right")
        fj, fj1 = F.getitem(fp, j), F.getitem(fp, F.add(j, 1))
        xj = F.getitem(xp, j)
        # a zero-width piece is never the one used (x there is at or beyond the last knot),
        # but its slope is still differentiated: a safe width keeps 0 * inf out of the
        # gradients of the pieces not taken
        width = np.diff(xp)
        slope = F.div(F.sub(fj1, fj), F.getitem(np.where(width == 0, 1.0, width), j))
        res = F.add(F.mul(slope, F.sub(x, xj)), fj)
        # an infinite fp makes the slope infinite: NumPy tries the other end of the piece
        res = F.where(C.isnan(res), F.add(F.mul(slope, F.sub(x, F.getitem(xp, F.add(j, 1)))),
                                          fj1), res)
        res = F.where(C.logical_and(C.isnan(res), F.eq(fj, fj1)), fj, res)
        # at a knot NumPy takes fp itself (no non-finite slope times 0); written as
        # fp + slope (x - xp) with a finite slope, so the derivative in x there is the slope
        # of the piece to the right of the knot, and at the last knot of the piece to its left
        finite = C.isfinite(slope)
        if np.any(width == 0):
            finite = C.logical_and(finite, F.getitem(width != 0, j))
        s_fin = F.where(finite, slope, F.zeros_like(slope))
        res = F.where(F.eq(x, xj), F.add(F.mul(s_fin, F.sub(x, xj)), fj), res)
        res = F.where(F.eq(x, xp[-1]), F.add(F.mul(s_fin, F.sub(x, xp[-1])), last), res)
        res = F.where(C.isnan(x), x, res)
    lo = F.getitem(fp, 0) if left is None else left
    hi = last if right is None else right
    return F.cast(F.where(F.lt(x, xp[0]), lo, F.where(F.gt(x, xp[-1]), hi, res)), np.float64)


def _interp_traced_knots(x, xp, fp, left, right, where):
    """np.interp with traced sample points xp (learned knots): each x finds its piece by a
    binary search of the traced xp, and the value fp_j + (fp_j+1 - fp_j) (x - xp_j) / (xp_j+1
    - xp_j) has derivatives in x, xp and fp. xp must be increasing, as NumPy assumes (neither
    checks it: a traced xp cannot be checked while tracing)."""
    if _dtype_of(fp).kind == "c" or _dtype_of(xp).kind == "c":
        raise UnsupportedError(f"np.interp with complex fp or xp{where}")
    xshape, fshape = tuple(_shape_of(xp)), tuple(_shape_of(fp))
    if len(xshape) != 1 or fshape != xshape or xshape[0] == 0:
        raise ShapeError(f"np.interp: xp {xshape} and fp {fshape} must be 1-d and of the "
                         f"same, non-zero length{where}")
    x, xp, fp = (F.cast(v, np.float64) for v in (x, xp, fp))
    n, last = xshape[0], F.getitem(fp, -1)
    first_x, last_x = F.getitem(xp, 0), F.getitem(xp, -1)
    if n == 1:
        res = F.broadcast_to(last, _shape_of(x))
    else:
        j = np.zeros(_shape_of(x), np.intp) if n == 2 else \
            searchsorted(F.getitem(xp, slice(1, -1)), x, "right")
        j1 = F.add(j, 1)
        xj, xj1 = F.getitem(xp, j), F.getitem(xp, j1)
        fj, fj1 = F.getitem(fp, j), F.getitem(fp, j1)
        width = F.sub(xj1, xj)
        # a zero-width piece is never the one used, but it is differentiated: a safe width
        flat = F.eq(width, 0)
        slope = F.div(F.sub(fj1, fj), F.where(flat, F.ones_like(width), width))
        slope = F.where(flat, F.zeros_like(slope), slope)
        res = F.add(F.mul(slope, F.sub(x, xj)), fj)
        # an infinite knot makes x - xp_j infinite: NumPy tries the other end of the piece
        res = F.where(C.isnan(res), F.add(F.mul(slope, F.sub(x, xj1)), fj1), res)
        # at the last knot NumPy gives fp[-1] itself (its derivative in x the last slope)
        res = F.where(F.eq(x, last_x), F.add(F.mul(slope, F.sub(x, last_x)), last), res)
        # at an infinite knot itself, its value (x - xp is inf - inf there)
        inf_x = C.isinf(x)
        res = F.where(C.logical_and(inf_x, F.eq(x, xj)), fj,
                      F.where(C.logical_and(inf_x, F.eq(x, last_x)), last, res))
        res = F.where(C.isnan(x), x, res)
    lo = F.getitem(fp, 0) if left is None else left
    hi = last if right is None else right
    return F.cast(F.where(F.lt(x, first_x), lo, F.where(F.gt(x, last_x), hi, res)),
                  np.float64)


# -- grids and products ------------------------------------------------------------------------
def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """Coordinate arrays from coordinate vectors, as np.meshgrid (a tuple).

    >>> import numpy as np, adjit
    >>> [a.shape for a in adjit.compile(lambda x, y: np.meshgrid(x, y),
    ...                                 backend="numpy")(np.ones(2), np.ones(3))]
    [(3, 2), (3, 2)]
    """
    if indexing not in ("xy", "ij"):
        raise ShapeError(f"np.meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}"
                         f"{_at(user_where())}")
    ndim = len(xi)
    s0 = (1,) * ndim
    out = [F.reshape(x, s0[:i] + (-1,) + s0[i + 1:]) for i, x in enumerate(xi)]
    if indexing == "xy" and ndim > 1:
        out[0] = F.reshape(out[0], (1, -1) + s0[2:])
        out[1] = F.reshape(out[1], (-1, 1) + s0[2:])
    if not sparse:
        shape = F._broadcast_shape("meshgrid", [_shape_of(o) for o in out])
        out = [F.broadcast_to(o, shape) for o in out]
    if copy:    # NumPy's default: new writable arrays, not views of the inputs
        out = [o.copy_() if isinstance(o, Tracer) else np.array(o) for o in out]
    return tuple(out)


def multi_dot(arrays, *, out=None):
    """A chain of matrix products in the cheapest order, as np.linalg.multi_dot (the first
    and last arrays may be vectors).

    >>> import numpy as np, adjit
    >>> adjit.compile(lambda a: np.linalg.multi_dot([a, a, a]), backend="numpy")(np.eye(2) * 2)
    array([[8., 0.],
           [0., 8.]])
    """
    if out is not None:
        raise UnsupportedError(f"np.linalg.multi_dot(..., out=...){_at(user_where())}; "
                               "assign the result")
    arrays = list(arrays)
    n = len(arrays)
    if n < 2:
        raise ShapeError(f"np.linalg.multi_dot needs at least two arrays{_at(user_where())}")
    if n == 2:
        return F.dot(arrays[0], arrays[1])
    nd_first, nd_last = len(_shape_of(arrays[0])), len(_shape_of(arrays[-1]))
    if nd_first == 1:
        arrays[0] = F.reshape(arrays[0], (1, -1))
    if nd_last == 1:
        arrays[-1] = F.reshape(arrays[-1], (-1, 1))
    if any(len(_shape_of(a)) != 2 for a in arrays):
        raise ShapeError(f"np.linalg.multi_dot of shapes {[tuple(_shape_of(a)) for a in arrays]}"
                         f"{_at(user_where())}; the arrays must be 2-d (the first and last may "
                         "be 1-d)")
    dims = [_shape_of(a)[0] for a in arrays] + [_shape_of(arrays[-1])[1]]
    if n == 3:   # NumPy compares the two orders directly
        a0, a1b0, b1c0, c1 = dims
        split = np.zeros((3, 3), np.intp)   # split[i, j]: the last array of the left part
        if a0 * b1c0 * (a1b0 + c1) < a1b0 * c1 * (a0 + b1c0):
            split[0, 2] = 1                   # (A B) C
        else:
            split[1, 2] = 1                   # A (B C)
    else:
        split = _chain_order(dims)
    result = _multiply_chain(arrays, split, 0, n - 1)
    if nd_first == 1 and nd_last == 1:
        return F.getitem(result, (0, 0))
    return F.ravel(result) if nd_first == 1 or nd_last == 1 else result


def _chain_order(p):
    """NumPy's dynamic program for the cheapest parenthesisation (the same ties)."""
    n = len(p) - 1
    cost = np.zeros((n, n))
    split = np.empty((n, n), dtype=np.intp)
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i, j] = np.inf
            for k in range(i, j):
                c = cost[i, k] + cost[k + 1, j] + p[i] * p[k + 1] * p[j + 1]
                if c < cost[i, j]:
                    cost[i, j], split[i, j] = c, k
    return split


def _multiply_chain(arrays, split, i, j):
    if i == j:
        return arrays[i]
    k = int(split[i, j])
    return F.matmul(_multiply_chain(arrays, split, i, k),
                    _multiply_chain(arrays, split, k + 1, j))


# -- small NumPy functions written with the others ------------------------------------------------
def trunc(x):
    """Round towards zero (np.trunc, np.fix): floor above zero, ceil below."""
    return F._rounding("trunc", x)


def fix(x, out=None):
    if out is not None:
        raise UnsupportedError(f"np.fix with out={_at(user_where())}; use the result")
    return trunc(x)


def _nan_filled(a, fill):
    return F.where(C.isnan(a), F.full_like(a, fill), a) if F._dtype_of(a).kind == "f" else a


def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    if out is not None or where is not None:
        raise UnsupportedError(f"np.nanprod with out= or where={_at(user_where())}")
    return C.prod(_nan_filled(a, 1.0), axis, keepdims, dtype, initial)


def nancumsum(a, axis=None, dtype=None, out=None):
    if out is not None:
        raise UnsupportedError(f"np.nancumsum with out={_at(user_where())}")
    a = _nan_filled(a, 0.0)
    return F.cumsum(F.cast(a, dtype) if dtype is not None else a, axis)


def nancumprod(a, axis=None, dtype=None, out=None):
    if out is not None:
        raise UnsupportedError(f"np.nancumprod with out={_at(user_where())}")
    return C.cumprod(_nan_filled(a, 1.0), axis, dtype)


def unstack(x, /, *, axis=0):
    """np.unstack: the slices along axis, as a tuple."""
    ax = F._norm_axes((axis,), len(_shape_of(x)), "unstack")[0]
    n = _shape_of(x)[ax]
    return tuple(F.getitem(x, (slice(None),) * ax + (i,)) for i in range(n))


def broadcast_arrays(*args, subok=False):
    shape = F._broadcast_shape("broadcast_arrays", [_shape_of(a) for a in args])
    return tuple(F.broadcast_to(a, shape) for a in args)


def diagflat(v, k=0):
    return F.diag(F.ravel(v), k)


def _static_positions(obj, n, what):
    if isinstance(obj, Tracer):
        from .functions import _is_weak
        if _is_weak(obj) and obj.dtype.kind in "iu":
            obj._concrete(f"np.{what}'s position")   # a Python int argument: make it static
        raise UnsupportedError(f"np.{what} at positions computed from traced values"
                               f"{_at(user_where())}; the positions must be constants")
    if isinstance(obj, slice):
        return np.arange(n)[obj]
    idx = np.asarray(obj)
    if idx.dtype == np.bool_:
        return np.nonzero(idx)[0]
    if idx.size == 0:
        return idx.astype(np.intp)           # [] holds no positions (NumPy: integers)
    if idx.dtype.kind not in "iu":
        raise ShapeError(f"np.{what}: positions must be integers{_at(user_where())}")
    return idx


def delete(arr, obj, axis=None):
    """np.delete with constant positions: the kept ones gathered."""
    if axis is None:
        arr, axis = F.ravel(arr), 0
    ax = F._norm_axes((axis,), len(_shape_of(arr)), "delete")[0]
    n = _shape_of(arr)[ax]
    drop = _static_positions(obj, n, "delete")
    if drop.size and (drop.min() < -n or drop.max() >= n):
        raise ShapeError(f"np.delete: index out of bounds for axis {ax} with size {n}"
                         f"{_at(user_where())}")
    keep = np.setdiff1d(np.arange(n), drop % n if drop.size else drop)
    return F.getitem(arr, (slice(None),) * ax + (keep,))


def insert(arr, obj, values, axis=None):
    """np.insert with constant positions, by NumPy's rules: the values (at least arr's rank)
    make a block along the axis (one position: the values' first axis moved to it), the
    block is concatenated to arr and the whole put in order."""
    if axis is None:
        arr, axis = F.ravel(arr), 0
    shape = tuple(_shape_of(arr))
    ax = F._norm_axes((axis,), len(shape), "insert")[0]
    n = shape[ax]
    scalar = not isinstance(obj, slice) and np.ndim(obj) == 0
    pos = np.atleast_1d(_static_positions(obj, n + 1, "insert"))
    if pos.size and (pos.min() < -n or pos.max() > n):
        raise ShapeError(f"np.insert: index out of bounds for axis {ax} with size {n}"
                         f"{_at(user_where())}")
    pos = np.where(pos < 0, pos + n, pos)
    dt = F._dtype_of(arr)
    vals = F.cast(values, dt) if isinstance(values, Tracer) else np.asarray(values, dt)
    vshape = tuple(_shape_of(vals))
    if len(vshape) < len(shape):
        vshape = (1,) * (len(shape) - len(vshape)) + vshape
        vals = F.reshape(vals, vshape) if isinstance(vals, Tracer) else vals.reshape(vshape)
    if scalar:
        vals = C.moveaxis(vals, 0, ax) if isinstance(vals, Tracer) else np.moveaxis(vals, 0, ax)
        k = _shape_of(vals)[ax]
        pos = np.repeat(pos, k)
    else:
        k = pos.size
    block = F.broadcast_to(vals, shape[:ax] + (k,) + shape[ax + 1:])
    whole = F.concatenate([arr, block], ax)
    # each inserted value goes before the original element at its position, in given order
    key = np.concatenate([np.arange(n) * 2 + 1, pos * 2])
    order = np.argsort(key, kind="stable")
    return F.getitem(whole, (slice(None),) * ax + (order,))


def block(arrays):
    """np.block: nested lists concatenated along the last axes, innermost list last."""
    def depth(a):
        return 1 + depth(a[0]) if isinstance(a, list) and a else 0
    d = depth(arrays)

    def ndim(a):
        return max(len(_shape_of(x)) for x in _flat(a))

    nd = max(d, ndim(arrays))

    def go(a, level):
        if not isinstance(a, list):
            shape = tuple(_shape_of(a))
            return F.reshape(a, (1,) * (nd - len(shape)) + shape) if isinstance(a, Tracer) \
                else np.reshape(a, (1,) * (nd - len(shape)) + shape)
        parts = [go(x, level + 1) for x in a]
        return F.concatenate(parts, nd - d + level)
    return go(arrays, 0)


def _flat(a):
    if isinstance(a, list):
        for x in a:
            yield from _flat(x)
    else:
        yield a



def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0):
    """np.linspace with traced start or stop: start + step * arange(num)."""
    div = (num - 1) if endpoint else num
    # computed in the endpoints' float type, then floored (integers) and cast, as NumPy
    dt = F.result_dtype(start, stop, 1.0)
    start, stop = (F.cast(v, dt) if isinstance(v, Tracer) else np.asarray(v, dt)
                   for v in (start, stop))
    shape = F._broadcast_shape("linspace", [_shape_of(start), _shape_of(stop)])
    steps = np.arange(num, dtype=dt).reshape((-1,) + (1,) * len(shape))
    delta = F.sub(stop, start)
    step = F.div(delta, div) if div > 0 else F.mul(delta, np.nan)
    y = F.add(F.mul(steps, step), start) if div > 0 else F.add(F.mul(steps, delta), start)
    if endpoint and num > 1:
        last = F.broadcast_to(stop, shape)
        y = F.concatenate([F.getitem(y, slice(0, num - 1)), F.reshape(last, (1,) + shape)], 0)
    if axis != 0:
        y = C.moveaxis(y, 0, axis)
    if dtype is not None and np.dtype(dtype) != dt:
        if np.dtype(dtype).kind in "iub":
            y = F.floor(y) if np.dtype(dtype).kind != "b" else y
        y = F.cast(y, np.dtype(dtype))
    return (y, step) if retstep else y


def fmax(x, y):
    """np.fmax: the maximum, ignoring a NaN on one side (NaN only where both are)."""
    return _nan_aware("fmax", F.maximum, x, y)


def fmin(x, y):
    return _nan_aware("fmin", F.minimum, x, y)


def _nan_aware(name, op, x, y):
    if F.result_dtype(x, y).kind not in "fc":
        return op(x, y)
    return F._elementwise(name, [x, y])


def digitize(x, bins, right=False):
    """np.digitize: the bin of each x, through searchsorted (bins increasing or decreasing;
    traced bins are judged by their ends)."""
    if len(_shape_of(bins)) != 1:
        raise ShapeError(f"np.digitize: bins must be 1-D, got shape {tuple(_shape_of(bins))}"
                         f"{_at(user_where())}")
    side = "left" if right else "right"
    up = searchsorted(bins, x, side)
    n = _shape_of(bins)[0]
    down = F.sub(n, searchsorted(F.flip(bins, 0) if isinstance(bins, Tracer)
                                 else np.asarray(bins)[::-1], x, side))
    if not isinstance(bins, Tracer):
        b = np.asarray(bins)
        return down if n > 1 and b[0] > b[-1] else up
    return F.where(F.le(F.getitem(bins, (0,)), F.getitem(bins, (-1,))), up, down)


def searchsorted(a, v, side="left", sorter=None):
    """np.searchsorted: the insertion index of each v in the sorted a (a binary search, the
    registry's `searchsorted`). Integer results, no gradient."""
    if side not in ("left", "right"):
        raise ShapeError(f"np.searchsorted: side must be 'left' or 'right', got {side!r}"
                         f"{_at(user_where())}")
    if len(_shape_of(a)) != 1:
        raise ShapeError(f"np.searchsorted needs a 1-D sorted array, got shape "
                         f"{tuple(_shape_of(a))}{_at(user_where())}")
    if sorter is not None:
        a = F.getitem(a, (np.asarray(sorter) if not isinstance(sorter, Tracer) else sorter,))
    return F._index_op("searchsorted", [a, v], {"side": side})


def unravel_index(indices, shape, order="C"):
    """np.unravel_index for traced flat indices (np.unravel_index(np.argmax(x), x.shape)):
    each coordinate is (i // stride) % size, in integers. The indices must lie inside the shape
    (NumPy raises otherwise; traced values cannot be checked while tracing)."""
    if order not in ("C", "F"):
        raise ShapeError(f"np.unravel_index: order must be 'C' or 'F'{_at(user_where())}")
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    dims = range(len(shape)) if order == "C" else reversed(range(len(shape)))
    strides, acc = [0] * len(shape), 1
    for i in reversed(list(dims)):
        strides[i] = acc
        acc *= shape[i]
    idx = F.cast(indices, np.int64) if isinstance(indices, Tracer) else np.asarray(indices)
    return tuple(remainder(floor_divide(idx, strides[i]), shape[i]) for i in range(len(shape)))


def sliding_window_view(x, window_shape, axis=None, *, subok=False, writeable=False):
    """np.lib.stride_tricks.sliding_window_view as a gather: NumPy's own function applied to
    the grid of flat positions gives, for each output element, the element of x it views;
    overlapping windows then sum their cotangents. A copy (NumPy's is a read-only view)."""
    if writeable:
        raise UnsupportedError(f"sliding_window_view(..., writeable=True){_at(user_where())}: "
                               "writes through overlapping windows cannot be traced")
    shape = tuple(_shape_of(x))
    grid = np.arange(int(math.prod(shape)), dtype=np.int64).reshape(shape)
    try:
        pos = np.lib.stride_tricks.sliding_window_view(grid, window_shape, axis)
    except ValueError as e:
        raise ShapeError(f"sliding_window_view: {e}{_at(user_where())}") from None
    x = B.resolve(x)
    if not isinstance(x, Tracer):
        return np.lib.stride_tricks.sliding_window_view(x, window_shape, axis)
    # the positions stay NumPy's read-only view of the grid (a copy would hold every window:
    # 2048-sample windows of 16,000 samples are 28 million positions); a later [::hop]
    # keeps only its frames' (registry rewrite of slice of gather)
    idx = x.ctx.emit("const", [], {"value": pos, "dtype": pos.dtype})
    flat = F.ravel(x)
    r = x.ctx.emit("gather", [flat, idx], {"key": (("a", 0),)})
    # NumPy's is a read-only view of x: later writes into x show through it
    if flat.base is not None or flat is x:
        r.view_of(flat, "gather", {"key": (("a", 0),)}, (pos,), writable=False)
    elif pos.size <= _VIEW_POSITIONS:
        # x is itself a strided view (M.T): its positions per axis (a copy of the windows'
        # positions, so bounded)
        per_axis = np.unravel_index(pos, shape)
        r.view_of(x, "gather", {"key": tuple(("a", k) for k in range(len(shape)))},
                  per_axis, writable=False)
    return r


# the most window positions a view of a strided array holds as index arrays (one per axis)
_VIEW_POSITIONS = 1 << 22


# -- finite differences and polynomial matrices -------------------------------------------------
def gradient(f, *varargs, axis=None, edge_order=1):
    """np.gradient: second-order central differences inside, one-sided (edge_order 1 or 2) at
    the ends; spacings are numbers or coordinate arrays (traced ones too), one per axis or one
    for all.

    >>> import numpy as np, adjit
    >>> adjit.compile(np.gradient, backend="numpy")(np.array([1., 2., 4., 7.]))
    array([1. , 1.5, 2.5, 3. ])
    """
    shape = F._shape_of(f)
    nd = len(shape)
    # in the order given (one derivative per entry of axis, each with its own spacing)
    axes = tuple(range(nd)) if axis is None else tuple(
        F._axes(f, a)[0] for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))
    if len(set(axes)) != len(axes):
        raise ValueError(f"np.gradient: repeated axis in {axis}")
    if len(varargs) == 0:
        spacing = [1.0] * len(axes)
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        spacing = list(varargs) * len(axes)
    elif len(varargs) == len(axes):
        spacing = list(varargs)
    else:
        raise TypeError(f"np.gradient: {len(varargs)} spacings for {len(axes)} axes"
                        f"{_at(user_where())}")
    if edge_order not in (1, 2):
        raise ValueError("'edge_order' greater than 2 not supported")
    if F._dtype_of(f).kind not in "fc":
        f = F.cast(f, np.float64)
    dt = F._dtype_of(f)
    outs = []
    for ax, h in zip(axes, spacing):
        n = shape[ax]
        if n < edge_order + 1:
            raise ValueError("Shape of array too small to calculate a numerical gradient, "
                             "at least (edge_order + 1) elements are required.")
        if isinstance(h, Tracer) and not h.ndim:    # a uniform spacing passed in
            outs.append(F.div(_gradient_axis(f, ax, n, 1.0, edge_order, dt), h))
        else:
            outs.append(_gradient_axis(f, ax, n, h, edge_order, dt))
    return outs[0] if len(outs) == 1 else tuple(outs)


def _gradient_axis(f, ax, n, h, edge_order, dt):
    def part(start, stop):
        return C._slice(f, ax, start, stop)

    def col(v, start, stop):
        """a coefficient per position along ax (traced where the coordinates are), shaped to
        broadcast"""
        trail = (1,) * (len(F._shape_of(f)) - ax - 1)
        if isinstance(v, Tracer):
            return F.reshape(F.cast(v, dt), (-1,) + trail)
        v = np.asarray(v, dt)[start:stop] if np.ndim(v) else np.asarray(v, dt)
        if np.ndim(v) == 0:
            return v
        return v.reshape((-1,) + trail)
    if np.ndim(h) == 0:
        h = float(h)
        inner = F.div(F.sub(part(2, n), part(0, n - 2)), 2.0 * h)
        if edge_order == 1:
            first = F.div(F.sub(part(1, 2), part(0, 1)), h)
            last = F.div(F.sub(part(n - 1, n), part(n - 2, n - 1)), h)
        else:
            first = F.div(F.add(F.add(F.mul(part(0, 1), -1.5), F.mul(part(1, 2), 2.0)),
                                F.mul(part(2, 3), -0.5)), h)
            last = F.div(F.add(F.add(F.mul(part(n - 3, n - 2), 0.5),
                                     F.mul(part(n - 2, n - 1), -2.0)),
                               F.mul(part(n - 1, n), 1.5)), h)
    else:
        # coordinates: their differences make the coefficients (traced ones too, so the
        # derivative in the grid is followed)
        traced = isinstance(h, Tracer)
        x = F.cast(h, np.float64) if traced else np.asarray(h, np.float64)
        if len(F._shape_of(x)) != 1 or F._shape_of(x)[0] != n:
            raise ValueError("when 1d, distances must match the length of the corresponding "
                             "dimension")
        d = x[1:] - x[:-1]
        num = (lambda v: F.cast(v, dt)) if traced else dt.type
        dx1, dx2 = d[:-1], d[1:]
        a = -dx2 / (dx1 * (dx1 + dx2))
        b = (dx2 - dx1) / (dx1 * dx2)
        c = dx1 / (dx2 * (dx1 + dx2))
        inner = F.add(F.add(F.mul(part(0, n - 2), col(a, 0, None)),
                            F.mul(part(1, n - 1), col(b, 0, None))),
                      F.mul(part(2, n), col(c, 0, None)))
        if edge_order == 1:
            first = F.div(F.sub(part(1, 2), part(0, 1)), num(d[0]))
            last = F.div(F.sub(part(n - 1, n), part(n - 2, n - 1)), num(d[-1]))
        else:
            e1, e2 = d[0], d[1]
            a0, b0 = -(2. * e1 + e2) / (e1 * (e1 + e2)), (e1 + e2) / (e1 * e2)
            c0 = -e1 / (e2 * (e1 + e2))
            first = F.add(F.add(F.mul(part(0, 1), num(a0)), F.mul(part(1, 2), num(b0))),
                          F.mul(part(2, 3), num(c0)))
            e1, e2 = d[-2], d[-1]
            a1, b1 = e2 / (e1 * (e1 + e2)), -(e2 + e1) / (e1 * e2)
            c1 = (2. * e2 + e1) / (e2 * (e1 + e2))
            last = F.add(F.add(F.mul(part(n - 3, n - 2), num(a1)),
                               F.mul(part(n - 2, n - 1), num(b1))),
                         F.mul(part(n - 1, n), num(c1)))
    return F.concatenate([first, inner, last], ax)


def vander(x, N=None, increasing=False):
    """np.vander: columns x**0, x**1, ... (reversed unless increasing), as running products.

    >>> import numpy as np, adjit
    >>> adjit.compile(np.vander, backend="numpy")(np.array([1., 2., 3.]))
    array([[1., 1., 1.],
           [4., 2., 1.],
           [9., 3., 1.]])
    """
    if len(F._shape_of(x)) != 1:
        raise ValueError("x must be a one-dimensional array or sequence.")
    n = len(F._shape_of(x)) and F._shape_of(x)[0]
    N = n if N is None else int(N)
    dt = np.promote_types(_dtype_of(x), int)    # as NumPy: float32 columns come out float64
    x = F.cast(x, dt) if isinstance(x, Tracer) else np.asarray(x, dt)
    col = F.reshape(x, (-1, 1))
    cols = [F.ones_like(col)] if N else []
    for _ in range(1, N):
        cols.append(F.mul(cols[-1], col))
    if not increasing:
        cols = cols[::-1]
    return F.concatenate(cols, 1) if cols else F.getitem(F.mul(col, 0), (slice(None), slice(0, 0)))


# -- spacing, polynomials, phase and histogram functions ----------------------------------------
def _arg(v):
    """A Tracer, or a NumPy array for a constant (an array made inside resolved to its value)."""
    v = B.resolve(v)
    return v if isinstance(v, Tracer) else np.asarray(v)


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    """np.logspace with traced ends or base: base ** linspace(start, stop)."""
    base = base if isinstance(base, (int, float)) else _arg(base)    # a Python number weak
    y = linspace(_arg(start), _arg(stop), num=num, endpoint=endpoint, axis=axis)
    if np.ndim(base) if not isinstance(base, Tracer) else base.ndim:   # bases broadcast
        base = F.expand_dims(base, axis) if isinstance(base, Tracer) else \
            np.expand_dims(base, axis)
    r = F.power(base, y)
    return r if dtype is None else F.cast(r, np.dtype(dtype))


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """np.geomspace with traced ends: logspace of log10 |ends| in the ends' sign, the ends
    themselves exact (a zero end gives inf/nan, where NumPy raises)."""
    start, stop = _arg(start), _arg(stop)
    # NumPy promotes with a 0-d float64 (np.zeros((), dtype)): float32 ends give float64
    dt = F.result_dtype(start, stop, float(num), np.zeros((), dtype or np.float64))
    start, stop = (F.cast(v, dt) if isinstance(v, Tracer) else np.asarray(v, dt)
                   for v in (start, stop))
    sign = F.stop_gradient(F.sign(start)) if isinstance(start, Tracer) else np.sign(start)
    s, e = F.div(start, sign), F.div(stop, sign)
    log10 = lambda v: F._elementwise("log10", [v], float_only=True)   # noqa: E731
    y = logspace(log10(s), log10(e), num=num, endpoint=endpoint, base=10.0)
    shape = tuple(_shape_of(y))[1:]
    parts = [F.reshape(F.broadcast_to(s, shape), (1,) + shape)] if num > 0 else []
    if num > 1:
        inner = F.getitem(y, slice(1, num - 1 if endpoint else num))
        parts += [inner] + ([F.reshape(F.broadcast_to(e, shape), (1,) + shape)]
                            if endpoint else [])
    y = F.concatenate(parts, 0) if parts else y
    y = F.mul(y, sign)
    if axis != 0:
        y = C.moveaxis(y, 0, axis)
    return y if dtype is None else F.cast(y, np.dtype(dtype))


def _coefficients(p, what):
    p = _arg(p)
    if len(_shape_of(p)) != 1:
        raise UnsupportedError(f"np.{what} of coefficients of shape {tuple(_shape_of(p))}"
                               f"{_at(user_where())}: adjit takes a 1-d array (np.poly1d "
                               "objects are not traced)")
    return p


def polyder(p, m=1):
    """np.polyder of a 1-d coefficient array: each coefficient times its power, m times."""
    if m < 0:
        raise ValueError("Order of derivative must be positive (see polyint)")
    p = _coefficients(p, "polyder")
    for _ in range(m):      # as NumPy: p[:-1] * arange(n, 0, -1) (a constant's is empty)
        n = _shape_of(p)[0] - 1
        p = F.mul(F.getitem(p, slice(0, max(n, 0))), np.arange(n, 0, -1))   # float32 -> 64
    return p


def polyint(p, m=1, k=None):
    """np.polyint of a 1-d coefficient array, the integration constants k (0 by default)."""
    if m < 0:
        raise ValueError("Order of integral must be positive (see polyder)")
    p = _coefficients(p, "polyint")
    k = B.resolve(k)
    if k is None:
        ks = [0.0] * m
    elif isinstance(k, Tracer) and k.ndim == 0:
        ks = [k] * m
    else:                   # a scalar, or one constant per integration (traced ones too)
        ks = [F.getitem(k, i) for i in range(k.shape[0])] if isinstance(k, Tracer) else \
            [B.resolve(v) for v in k] if isinstance(k, (list, tuple)) else \
            list(np.atleast_1d(k))
        if len(ks) == 1:
            ks = ks * m
    if len(ks) < m:
        raise ValueError("k must be a scalar or a rank-1 array of length 1 or >m.")
    for i in range(m):
        p = F.div(p, np.arange(_shape_of(p)[0], 0, -1))    # an int array: float64, as NumPy
        c = ks[i]
        c = F.reshape(F.cast(c, _dtype_of(p)), (1,)) if isinstance(c, Tracer) else \
            np.asarray([c], _dtype_of(p))
        p = F.concatenate([p, c], 0)
    return p


def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """np.polyfit: the least-squares coefficients (highest power first), as NumPy: the
    Vandermonde columns scaled to unit norm, then lstsq; traced x, y or w."""
    from .decompositions import lstsq
    if full or cov:
        raise UnsupportedError(f"np.polyfit(..., full=True / cov=True){_at(user_where())}: "
                               "adjit traces the coefficients only")
    order = int(deg) + 1
    x, y = _arg(x), _arg(y)
    x = F.add(x, 0.0) if isinstance(x, Tracer) else np.asarray(x) + 0.0
    y = F.add(y, 0.0) if isinstance(y, Tracer) else np.asarray(y) + 0.0
    if len(_shape_of(x)) != 1 or len(_shape_of(y)) not in (1, 2) or \
            _shape_of(x)[0] != _shape_of(y)[0]:
        raise TypeError("expected 1D vector for x and 1D or 2D y of the same length")
    if rcond is None:       # NumPy's default: len(x) * eps
        rcond = _shape_of(x)[0] * np.finfo(_dtype_of(x)).eps
    lhs = vander(x, order)
    rhs = y
    if w is not None:
        w = _arg(w)
        lhs = F.mul(lhs, F.reshape(w, (-1, 1)))
        rhs = F.mul(rhs, w if len(_shape_of(rhs)) == 1 else F.reshape(w, (-1, 1)))
    scale = F.sqrt(F.sum(F.mul(lhs, lhs), axis=0))
    c = lstsq(F.div(lhs, scale), rhs, rcond)[0]
    return F.div(c, scale if len(_shape_of(c)) == 1 else F.reshape(scale, (-1, 1)))


def _chbevl(x, vals):
    b0, b1, b2 = vals[0], 0.0, 0.0
    for v in vals[1:]:
        b2, b1 = b1, b0
        b0 = F.add(F.sub(F.mul(x, b1), b2), v)
    return F.mul(F.sub(b0, b2), 0.5)


def _chbevl_slope(vals):
    """Coefficients (Cephes' order) of d/dy chbevl(y, vals): the Chebyshev derivative of the
    same series (chbevl is sum' c_k T_k(y / 2), its first term halved), so the slope is
    exactly that of the values computed, without a second table (I1's)."""
    c = np.asarray(vals, np.float64)[::-1].copy()
    c[0] /= 2
    d = np.polynomial.chebyshev.chebder(c)
    d[0] *= 2
    return list(0.5 * d[::-1])


def _i0_scaled_series(a, slope=False):
    """exp(-a) I0(a) for a >= 0 by NumPy's own Chebyshev series (Cephes), on a <= 8 and
    beyond; with slope, its derivative in a, from the same series."""
    from numpy.lib import _function_base_impl as impl
    small = F.le(a, 8.0)
    far = F.where(small, 16.0, a)      # the branch not taken sees a harmless argument
    y_in, y_out = F.sub(F.div(a, 2.0), 2.0), F.sub(F.div(32.0, far), 2.0)
    if not slope:
        inner = _chbevl(y_in, impl._i0A)
        outer = F.div(_chbevl(y_out, impl._i0B), F.sqrt(far))
        return F.where(small, inner, outer)
    inner = F.mul(_chbevl(y_in, _chbevl_slope(impl._i0A)), 0.5)
    # d/da [B(32 / a - 2) / sqrt(a)] = -32 B'(y) / a^2.5 - B(y) / (2 a^1.5)
    root = F.sqrt(far)
    outer = F.sub(F.div(F.mul(_chbevl(y_out, _chbevl_slope(impl._i0B)), -32.0),
                        F.mul(F.mul(far, far), root)),
                  F.div(_chbevl(y_out, impl._i0B), F.mul(F.mul(far, root), 2.0)))
    return F.where(small, inner, outer)


_I0_SCALED = None


def i0_scaled(a):
    """exp(-a) I0(a) for a >= 0 (np.i0 multiplies it by exp(a); scipy.special.i0e is it).
    Its derivative is a rule (adjit.custom_jvp) evaluating the derivative series: through the
    Chebyshev recurrence itself, a gradient kept ~50 arrays of the forward's recurrence and
    ran 13x slower than JAX's (sweep 29)."""
    global _I0_SCALED
    if _I0_SCALED is None:
        from .custom import custom_jvp

        @custom_jvp
        def i0e_of_abs(a):
            return _i0_scaled_series(a)

        @i0e_of_abs.defjvp
        def i0e_of_abs_jvp(primals, tangents):
            (a,), (t,) = primals, tangents
            return i0e_of_abs(a), F.mul(t, _i0_scaled_series(a, slope=True))
        _I0_SCALED = i0e_of_abs
    if not isinstance(a, Tracer):
        return _i0_scaled_series(a)
    return _I0_SCALED(a)


def i0(x):
    """np.i0, the modified Bessel function of order 0; its derivative is the series' (about
    I1)."""
    x = _arg(x)
    if _dtype_of(x).kind not in "f":
        x = F.cast(x, np.float64) if isinstance(x, Tracer) else x.astype(np.float64)
    # |x| as a select, not abs (whose derivative is 0 at 0): i0 is even, and its second
    # derivative at 0 is then the series' 1/2, not 0
    a = F.where(F.ge(x, 0), x, F.neg(x))
    return F.mul(F.exp(a), i0_scaled(a))


def unwrap(p, discont=None, axis=-1, *, period=2 * np.pi):
    """np.unwrap: jumps of more than discont between neighbours taken back by multiples of
    period. The corrections are constant pieces: the gradient passes through unchanged."""
    p = _arg(p)
    nd = len(_shape_of(p))
    axis = axis + nd if axis < 0 else axis
    n = _shape_of(p)[axis]
    if discont is None:
        discont = period / 2
    dt = F.result_dtype(p, period)
    if dt.kind in "iu":
        raise UnsupportedError(f"np.unwrap of integer phases{_at(user_where())}: cast to "
                               "float first")
    if n < 2:
        return F.cast(p, dt) if isinstance(p, Tracer) else p.astype(dt)
    sl = [slice(None)] * nd
    dd = C.diff(p, axis=axis)
    high = period / 2
    ddmod = F.sub(remainder(F.add(dd, high), period), high)
    ddmod = F.where(C.logical_and(F.eq(ddmod, -high), F.gt(dd, 0)), high, ddmod)
    correct = F.where(F.lt(F.abs(dd), discont), 0.0, F.sub(ddmod, dd))
    correct = F.stop_gradient(F.cumsum(correct, axis=axis))
    sl[axis] = slice(0, 1)
    head = F.getitem(p, tuple(sl))
    sl[axis] = slice(1, None)
    rest = F.add(F.getitem(p, tuple(sl)), correct)
    out = F.concatenate([F.cast(head, dt) if isinstance(head, Tracer) else head.astype(dt),
                         F.cast(rest, dt)], axis)
    return out


def extract(condition, arr):
    """np.extract(condition, arr): arr.ravel()[condition.ravel() != 0] for a constant condition."""
    if isinstance(B.resolve(condition), Tracer):
        raise UnsupportedError(
            f"np.extract with a traced condition{_at(user_where())}: the result's length "
            "depends on the values. Use np.where(condition, arr, 0) (and a sum), or a mask")
    cond = np.ravel(np.asarray(condition)) != 0
    flat = F.ravel(_arg(arr))
    return F.getitem(flat, np.nonzero(cond[:_shape_of(flat)[0]])[0])


def real_if_close(a, tol=100):
    """adjit's arrays are real: np.real_if_close returns them unchanged."""
    return _arg(a)


def angle(z, deg=False):
    """np.angle of a real array: pi where the sign bit is set, else 0 (nan stays nan)."""
    z = _arg(z)
    if _dtype_of(z).kind not in "f":
        z = F.cast(z, np.float64) if isinstance(z, Tracer) else z.astype(np.float64)
    r = F.where(C.isnan(z), z, F.where(C.signbit(z), np.pi, 0.0))
    r = F.stop_gradient(F.cast(r, _dtype_of(z)))
    return F.mul(r, 180.0 / np.pi) if deg else r


def _refuse_traced_samples(name, *data, bins=None, range=None):
    for what, v in (("bins", bins), ("range", range)):
        parts = v if isinstance(v, (tuple, list)) else (v,)
        traced = [B.resolve(p) for p in parts if isinstance(B.resolve(p), Tracer)]
        if traced:
            raise UnsupportedError(f"{name} with traced {what}{_at(user_where())}: the edges "
                                   f"must be constants{traced[0].argument_hint()}")
    if any(isinstance(B.resolve(d), Tracer) for d in data):
        raise UnsupportedError(
            f"{name} of traced data{_at(user_where())}: which bin a sample falls in is not "
            "differentiable. Pass the samples as constants (a NumPy array the function closes "
            "over or reads from a global; traced weights are fine), or write a soft histogram "
            "(e.g. a sum of np.exp(-(x[:, None] - centers) ** 2 / h))")


def histogram(a, bins=10, range=None, density=None, weights=None):
    """np.histogram of constant data with traced weights: the weights summed per bin (NumPy's
    bins, the last one closed). Traced data would move samples between bins: refused."""
    _refuse_traced_samples("np.histogram", a, bins=bins, range=range)
    a = np.asarray(a)
    edges = np.histogram_bin_edges(a, bins, range)
    if weights is None:
        return np.histogram(a, edges, density=density)
    w = B.resolve(weights)
    if tuple(_shape_of(w)) != a.shape:
        raise ValueError("weights should have the same shape as a.")
    flat = a.ravel()
    keep = (flat >= edges[0]) & (flat <= edges[-1])
    idx = np.searchsorted(edges, flat[keep], side="right") - 1
    idx[idx == len(edges) - 1] -= 1        # the last bin includes its right edge
    wv = F.getitem(F.ravel(w), np.nonzero(keep)[0])
    if _dtype_of(w).kind == "b":    # NumPy sums weights in their own dtype (ints stay ints)
        wv = F.cast(wv, np.int64)
    hist = F.scatter_add(wv, [idx.astype(np.intp)], (("a", 0),), (len(edges) - 1,))
    if density:
        hist = F.div(hist, F.mul(F.sum(hist), np.diff(edges)))
    return hist, edges


def _binned(sample, edges, weights, density):
    """The traced weights summed per bin of the constant (N, D) sample, as NumPy's
    histogramdd: searchsorted per axis, a sample on the last edge in the last bin, samples
    outside (and NaN) left out."""
    sample = np.asarray(sample, dtype=float)
    nbin = tuple(len(e) + 1 for e in edges)
    count = [np.searchsorted(e, sample[:, i], side="right") for i, e in enumerate(edges)]
    for i, e in enumerate(edges):
        count[i][sample[:, i] == e[-1]] -= 1
    flat = np.ravel_multi_index(count, nbin)
    inside = np.all([(c > 0) & (c < n - 1) for c, n in zip(count, nbin)], axis=0)
    shape = tuple(n - 2 for n in nbin)
    idx = np.ravel_multi_index([c[inside] - 1 for c in count], shape) if shape else flat[inside]
    w = B.resolve(weights)
    if tuple(_shape_of(w)) != (sample.shape[0],):
        raise ValueError(f"weights of shape {tuple(_shape_of(w))} for {sample.shape[0]} "
                         f"samples{_at(user_where())}: one weight per sample")
    # np.bincount sums the weights in float64, whatever their dtype
    wv = F.cast(F.getitem(w, np.nonzero(inside)[0]), np.float64)
    hist = F.scatter_add(wv, [idx.astype(np.intp)], (("a", 0),), (math.prod(shape),))
    hist = F.reshape(hist, shape)
    if density:
        total = F.sum(hist)
        for i, e in enumerate(edges):
            size = [1] * len(shape)
            size[i] = len(e) - 1
            hist = F.div(hist, np.diff(e).reshape(size))
        hist = F.div(hist, total)
    return hist


def histogramdd(sample, bins=10, range=None, density=None, weights=None):
    """np.histogramdd of a constant sample with traced weights (NumPy's edges)."""
    _refuse_traced_samples("np.histogramdd", sample, bins=bins, range=range)
    _, edges = np.histogramdd(sample, bins, range)
    if weights is None:
        return np.histogramdd(sample, edges, density=density)
    s = np.asarray(sample)
    s = np.atleast_2d(s).T if s.ndim == 1 or isinstance(sample, (list, tuple)) else s
    return _binned(s, edges, weights, density), edges


def histogram2d(x, y, bins=10, range=None, density=None, weights=None):
    """np.histogram2d of constant x, y with traced weights: (H, xedges, yedges)."""
    _refuse_traced_samples("np.histogram2d", x, y, bins=bins, range=range)
    _, xe, ye = np.histogram2d(x, y, bins, range)
    if weights is None:
        return np.histogram2d(x, y, [xe, ye], density=density)
    s = np.stack([np.ravel(np.asarray(x)), np.ravel(np.asarray(y))], axis=1)
    return _binned(s, [xe, ye], weights, density), xe, ye


def tensorsolve(a, b, axes=None):
    """np.linalg.tensorsolve: a reshaped to a square matrix, then solve."""
    from .linalg import solve
    a, b = _arg(a), _arg(b)
    if axes is not None:
        nd = len(_shape_of(a))
        allaxes = list(range(nd))
        for k in axes:
            allaxes.remove(k)
            allaxes.insert(nd, k)
        a = F.transpose(a, tuple(allaxes))
    oldshape = tuple(_shape_of(a))[-(len(_shape_of(a)) - len(_shape_of(b))):]
    prod = int(np.prod(oldshape))
    if int(np.prod(tuple(_shape_of(a)))) != prod * prod:
        raise np.linalg.LinAlgError(
            "Input arrays must satisfy the requirement prod(a.shape[b.ndim:]) == "
            "prod(a.shape[:b.ndim])")
    r = solve(F.reshape(a, (prod, prod)), F.reshape(b, (prod,)))
    return F.reshape(r, oldshape)


def tensorinv(a, ind=2):
    """np.linalg.tensorinv: the inverse of a reshaped to a square matrix."""
    from .linalg import inv
    a = _arg(a)
    if ind <= 0:
        raise ValueError("Invalid ind argument.")
    shape = tuple(_shape_of(a))
    invshape = shape[ind:] + shape[:ind]
    prod = int(np.prod(shape[ind:]))
    if int(np.prod(shape[:ind])) != prod:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
    return F.reshape(inv(F.reshape(a, (-1, prod))), invshape)


def roll(x, shift, axis=None):
    """np.roll; a traced shift (the lag of a correlation peak) gathers x[(i - shift) % n]."""
    shift = B.resolve(shift)
    if not isinstance(shift, Tracer) and not (isinstance(shift, (tuple, list)) and any(
            isinstance(B.resolve(s), Tracer) for s in shift)):
        return C.roll(x, shift, axis)
    x = _arg(x)
    if axis is None:
        return F.reshape(roll(F.ravel(x), shift, 0), tuple(_shape_of(x)))
    if isinstance(shift, Tracer) and shift.ndim == 1:     # (k, -k) joined into one array
        shift = [F.getitem(shift, i) for i in range(shift.shape[0])]
    shifts = list(shift) if isinstance(shift, (tuple, list)) else [shift]
    axes = list(axis) if isinstance(axis, (tuple, list)) else [axis]
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    if len(axes) == 1:
        axes = axes * len(shifts)
    if len(shifts) != len(axes):
        raise ValueError("'shift' and 'axis' should be scalars or 1D sequences")
    nd = len(_shape_of(x))
    for s, ax in zip(shifts, axes):
        s = B.resolve(s)
        if isinstance(s, Tracer) and (s.ndim or s.dtype.kind not in "iub"):
            raise UnsupportedError(f"np.roll by a traced shift of shape {tuple(s.shape)} and "
                                   f"dtype {s.dtype}{_at(user_where())}: the shift must be an "
                                   "integer scalar, as in NumPy")
        ax = ax + nd if ax < 0 else ax
        n = _shape_of(x)[ax]
        if not n:
            continue
        idx = remainder(F.sub(np.arange(n, dtype=np.int64), F.cast(s, np.int64)
                              if isinstance(s, Tracer) else int(s)), n)
        x = C.take(x, idx, axis=ax)
    return x
