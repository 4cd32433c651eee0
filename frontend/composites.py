"""NumPy functions built from the elementary ones in functions.py: splits, pads, rolls, sorts,
products, tensordot, NaN-aware reductions, logical functions and a few linear-algebra helpers.

Each takes Tracers, NumPy arrays or Python scalars and returns what NumPy would; the result is
ordinary IR, so it differentiates like anything else. Nothing here adds an op.
"""
from __future__ import annotations

import builtins
import math

import operator

import numpy as np

from ..ir.errors import OutOfBoundsError, ShapeError, UnsupportedError
from . import functions as F
from .tracer import Tracer, _at, user_where

_shape_of = F._shape_of


def _nd(x):
    return len(_shape_of(x))


def _axis(axis, nd, what):
    return F._norm_axes((axis,), nd, what)[0]


def _along(ax, nd, s):
    """An index tuple applying slice or index s on axis ax."""
    return (slice(None),) * ax + (s,) + (slice(None),) * (nd - ax - 1)


def _slice(x, ax, start, stop, step=None):
    return F.getitem(x, _along(ax, _nd(x), slice(start, stop, step)))


# -- splitting and joining ---------------------------------------------------------------------
def _sections(s):
    """A number of sections as NumPy reads it (int(2.0) is 2), or the list of split points."""
    if isinstance(s, Tracer):
        s._concrete("a number of sections or split positions (the parts' shapes)")
    if np.ndim(s) == 0:
        if int(s) != s:
            raise ShapeError(f"split: {s!r} sections is not a whole number{_at(user_where())}")
        return int(s)
    return s


def array_split(x, indices_or_sections, axis=0):
    ax = _axis(axis, _nd(x), "array_split")
    n = _shape_of(x)[ax]
    indices_or_sections = _sections(indices_or_sections)
    if isinstance(indices_or_sections, (int, np.integer)):
        k = int(indices_or_sections)
        if k <= 0:
            raise ShapeError(f"array_split: number of sections must be larger than 0"
                             f"{_at(user_where())}")
        sizes = [n // k + 1] * (n % k) + [n // k] * (k - n % k)
        bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    else:
        bounds = [0] + [int(i) for i in indices_or_sections] + [n]
    return [_slice(x, ax, int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def split(x, indices_or_sections, axis=0):
    indices_or_sections = _sections(indices_or_sections)
    if isinstance(indices_or_sections, (int, np.integer)):
        n = _shape_of(x)[_axis(axis, _nd(x), "split")]
        if n % int(indices_or_sections):
            raise ShapeError(f"split: an axis of size {n} does not divide into "
                             f"{int(indices_or_sections)} equal parts{_at(user_where())}; "
                             "use np.array_split")
    return array_split(x, indices_or_sections, axis)


def hsplit(x, sections):
    return split(x, sections, axis=1 if _nd(x) > 1 else 0)


def vsplit(x, sections):
    return split(x, sections, axis=0)


def dsplit(x, sections):
    return split(x, sections, axis=2)


def atleast_1d(*xs):
    out = [F.reshape(x, (1,)) if _nd(x) == 0 else x for x in xs]
    return out[0] if len(out) == 1 else out


def atleast_2d(*xs):
    out = [F.reshape(x, (1,) * (2 - _nd(x)) + tuple(_shape_of(x))) if _nd(x) < 2 else x
           for x in xs]
    return out[0] if len(out) == 1 else out


def atleast_3d(*xs):
    def one(x):
        s = tuple(_shape_of(x))
        return F.reshape(x, {0: (1, 1, 1), 1: (1,) + s + (1,), 2: s + (1,)}[len(s)]) \
            if len(s) < 3 else x
    out = [one(x) for x in xs]
    return out[0] if len(out) == 1 else out


def hstack(xs):
    xs = [atleast_1d(x) for x in xs]
    return F.concatenate(xs, axis=0 if _nd(xs[0]) == 1 else 1)


def vstack(xs):
    return F.concatenate([atleast_2d(x) for x in xs], axis=0)


def dstack(xs):
    return F.concatenate([atleast_3d(x) for x in xs], axis=2)


def column_stack(xs):
    return F.concatenate([F.reshape(x, (-1, 1)) if _nd(x) < 2 else x for x in xs], axis=1)


def moveaxis(x, source, destination):
    nd = _nd(x)
    src = F._norm_axes(source if isinstance(source, (tuple, list)) else (source,), nd,
                       "moveaxis")
    dst = F._norm_axes(destination if isinstance(destination, (tuple, list))
                       else (destination,), nd, "moveaxis")
    order = [a for a in range(nd) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return F.transpose(x, order)


def rollaxis(x, axis, start=0):
    """np.rollaxis: axis moved to sit before position start (NumPy's older moveaxis)."""
    nd = _nd(x)
    ax = _axis(axis, nd, "rollaxis")
    if not -nd <= start <= nd:
        raise OutOfBoundsError(f"np.rollaxis: start={start} is out of bounds for an array of "
                               f"dimension {nd}{_at(user_where())}")
    start = start + nd if start < 0 else start
    if ax < start:
        start -= 1
    if ax == start:
        return x
    order = [a for a in range(nd) if a != ax]
    order.insert(start, ax)
    return F.transpose(x, order)


def ediff1d(x, to_end=None, to_begin=None):
    """np.ediff1d: differences of the flattened array, with to_begin and to_end (flattened,
    in x's dtype) around them."""
    dt = F._dtype_of(x)
    x = F.ravel(x)
    d = F.sub(_slice(x, 0, 1, None), _slice(x, 0, None, -1))
    ends = [F.cast(F.ravel(e), dt) for e in (to_begin, to_end)]
    parts = ([ends[0]] if to_begin is not None else []) + [d] + \
        ([ends[1]] if to_end is not None else [])
    return F.concatenate(parts, 0) if len(parts) > 1 else d


def choose(a, choices, out=None, mode="raise"):
    """np.choose: choices[a] elementwise, all broadcast together; a chain of wheres (the
    gradient goes to the chosen array). Traced indices need mode 'clip' or 'wrap', as in
    JAX: their range cannot be checked."""
    where = _at(user_where())
    if out is not None:
        raise UnsupportedError(f"np.choose with out={where}")
    if mode not in ("raise", "clip", "wrap"):
        raise ValueError(f"np.choose: mode must be 'raise', 'clip' or 'wrap', got {mode!r}")
    choices = list(choices)
    n = len(choices)
    if F._dtype_of(a).kind not in "iub":
        raise TypeError(f"np.choose: the index array must be integers{where}")
    if mode == "wrap":
        from . import numeric as N
        a = N.remainder(a, n)
    elif mode == "clip":
        a = F.minimum(F.maximum(a, 0), n - 1)
    elif isinstance(a, Tracer):
        raise UnsupportedError(f"np.choose with traced indices and mode='raise'{where}: "
                               "their range cannot be checked while tracing; pass "
                               "mode='clip' or mode='wrap' (as JAX requires)")
    elif np.any((np.asarray(a) < 0) | (np.asarray(a) >= n)):
        raise ValueError(f"np.choose: invalid entry in choice array{where}")
    shape = np.broadcast_shapes(tuple(_shape_of(a)), *(tuple(_shape_of(c)) for c in choices))
    dt = F.result_dtype(*choices)
    r = F.broadcast_to(F.cast(choices[0], dt), shape)
    for k in range(1, n):
        r = F.where(F.eq(a, k), F.cast(choices[k], dt), r)
    r = F.broadcast_to(r, shape)
    # a new array, as NumPy's: not choices[0] itself (np.choose(0, [h]))
    return r.copy_() if isinstance(r, Tracer) and any(r is c for c in choices) else r


def ldexp(x, i):
    """np.ldexp: x * 2 ** i, in two exact halves so that a small 2 ** i does not underflow
    before the product (ldexp(1e300, -1100))."""
    if F._dtype_of(i).kind not in "iub":
        raise TypeError(f"np.ldexp: the exponent must be integers{_at(user_where())}")
    from . import numeric as N
    # NumPy's loop: float16 for bool and int8, float32 for int16, ...
    dt = np.ldexp(np.zeros((), F._dtype_of(x)), np.zeros((), F._dtype_of(i))).dtype
    h = N.floor_divide(i, 2)
    half = lambda k: F.exp2(F.cast(k, dt))  # noqa: E731
    return F.mul(F.mul(F.cast(x, dt), half(h)), half(F.sub(i, h)))


def resize(x, new_shape):
    """np.resize: the flattened array repeated cyclically to fill new_shape."""
    shape = (int(new_shape),) if np.ndim(new_shape) == 0 else tuple(int(d) for d in new_shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"np.resize: all elements of `new_shape` must be non-negative"
                         f"{_at(user_where())}")
    size = int(math.prod(shape))
    flat = F.ravel(x)
    n = _shape_of(flat)[0]
    if size == 0 or n == 0:
        return F.zeros(shape, F._dtype_of(x))
    reps = -(-size // n)
    return F.reshape(_slice(F.tile(flat, reps) if reps > 1 else flat, 0, 0, size), shape)


def roll(x, shift, axis=None):
    if axis is None:
        return F.reshape(roll(F.ravel(x), shift, 0), tuple(_shape_of(x)))
    shifts = shift if isinstance(shift, (tuple, list)) else (shift,)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    shifts, axes = np.broadcast_arrays(np.asarray(shifts), np.asarray(axes))
    for s, a in zip(shifts.ravel(), axes.ravel()):
        ax = _axis(int(a), _nd(x), "roll")
        n = _shape_of(x)[ax]
        k = int(s) % n if n else 0
        if k:
            x = F.concatenate([_slice(x, ax, n - k, None), _slice(x, ax, 0, n - k)], ax)
    return x


def take(x, indices, axis=None, out=None, mode="raise"):
    if out is not None:
        raise UnsupportedError(f"np.take with out={_at(user_where())}; use the result")
    if mode not in (None, "raise", "clip", "wrap"):
        raise UnsupportedError(f"np.take: unknown mode={mode!r}{_at(user_where())}; NumPy's are "
                               "'raise', 'clip' and 'wrap'")
    if axis is None:
        x, axis = F.ravel(x), 0
    ax = _axis(axis, _nd(x), "take")
    if mode in ("clip", "wrap"):
        n = _shape_of(x)[ax]
        if isinstance(indices, Tracer):
            from .numeric import remainder
            indices = (F.minimum(F.maximum(indices, 0), n - 1) if mode == "clip"
                       else remainder(indices, n))
        else:
            indices = np.asarray(indices)
            indices = np.clip(indices, 0, n - 1) if mode == "clip" else indices % n
    return F.getitem(x, _along(ax, _nd(x), indices))


def diff(x, n=1, axis=-1, prepend=None, append=None):
    ax = _axis(axis, _nd(x), "diff")
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n!r}{_at(user_where())} "
                         "(np.diff, as NumPy)")
    if n == 0:
        return x     # NumPy ignores prepend and append then
    if prepend is not None or append is not None:
        parts = [F.broadcast_to(p, _shape_of(x)[:ax] + (1,) + _shape_of(x)[ax + 1:])
                 if _nd(p) == 0 else p for p in (prepend,) if p is not None]
        tail = [F.broadcast_to(p, _shape_of(x)[:ax] + (1,) + _shape_of(x)[ax + 1:])
                if _nd(p) == 0 else p for p in (append,) if p is not None]
        x = F.concatenate(parts + [x] + tail, ax)
    for _ in range(n):
        # booleans differ where they change (np.diff uses not_equal for them)
        step = F.ne if F._dtype_of(x) == np.bool_ else F.sub
        x = step(_slice(x, ax, 1, None), _slice(x, ax, None, -1))
    return x


_PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap", "maximum", "minimum", "mean",
              "median", "linear_ramp")
_PAD_STATS = ("maximum", "minimum", "mean", "median")


_RUNS = 8      # runs of a constant index that take_runs joins from slices


def take_runs(x, ax, idx):
    """x[..., idx, ...] on axis ax for a constant index vector made of a few runs that step
    by +1, -1 or 0 (np.pad's reflect, wrap and edge): slices (reversed ones too) and
    broadcasts, concatenated, so the forward copies memory once and the backward adds slices,
    where a gather and a scatter-add would index every element."""
    idx = np.asarray(idx, np.int64)
    runs, start = [], 0
    for i in range(1, len(idx) + 1):
        if i == len(idx) or (i - start > 1 and idx[i] - idx[i - 1] != idx[start + 1] -
                             idx[start]) or (i - start == 1 and abs(idx[i] - idx[i - 1]) > 1):
            runs.append((start, i))
            start = i
            if len(runs) > _RUNS:
                return F.getitem(x, _along(ax, _nd(x), idx))
    nd, parts = _nd(x), []
    for a, b in runs:
        first, last = int(idx[a]), int(idx[b - 1])
        step = 0 if b - a == 1 else int(idx[a + 1] - idx[a])
        if step == 0:
            part = _slice(x, ax, first, first + 1)
            if b - a > 1:
                shape = list(_shape_of(part))
                shape[ax] = b - a
                part = F.broadcast_to(part, tuple(shape))
        elif step == 1:
            part = _slice(x, ax, first, last + 1)
        else:
            part = _slice(x, ax, first, last - 1 if last > 0 else None, -1)
        parts.append(part)
    return parts[0] if len(parts) == 1 else F.concatenate(parts, ax)


def _odd_reflections(x, ax, left, right, include_edge):
    """np.pad's odd reflection: NumPy's own loop (_set_reflect_both), each round reflecting the
    array padded so far in 2 * edge - mirror chunks (one round when one reflection covers the
    pad), so only the padded part is computed from the edge and an inf or nan lands where
    NumPy puts it."""
    n = _shape_of(x)[ax]

    def part(v, idx):
        return take_runs(v, ax, np.asarray(idx, np.int64))

    cur = x
    while left > 0 or right > 0:
        length = _shape_of(cur)[ax]
        if include_edge:
            old, offset = length // n * n, 1
        else:
            old, offset = (length - 1) // (n - 1) * (n - 1), 0
        if left > 0:
            chunk = min(old, left)
            mirror = part(cur, np.arange(chunk - offset, -offset, -1))
            edge = part(cur, [0])
            cur = F.concatenate([F.sub(F.add(edge, edge), mirror), cur], ax)
            left -= chunk
        if right > 0:
            chunk = min(old, right)
            length = _shape_of(cur)[ax]
            last = length - 2 + offset
            mirror = part(cur, np.arange(last, last - chunk, -1))
            edge = part(cur, [length - 1])
            cur = F.concatenate([cur, F.sub(F.add(edge, edge), mirror)], ax)
            right -= chunk
    return cur


def pad(x, pad_width, mode="constant", **kw):
    """np.pad: constant padding writes x into zeros; edge/reflect/symmetric/wrap join slices."""
    if not isinstance(x, Tracer):
        return np.pad(x, pad_width, mode=mode, **kw)
    if mode not in _PAD_MODES or set(kw) - {"constant_values", "reflect_type", "stat_length",
                                            "end_values"}:
        given = f" and {', '.join(sorted(kw))}" if kw else ""
        raise UnsupportedError(f"np.pad with mode={mode!r}{given}{_at(user_where())}; "
                               f"supported modes: {', '.join(_PAD_MODES)}")
    shape = tuple(_shape_of(x))
    if isinstance(pad_width, dict):    # NumPy 2.4: {axis: width}, other axes unpadded
        widths = np.zeros((len(shape), 2), np.int64)
        for ax, w in pad_width.items():
            widths[_axis(ax, len(shape), "np.pad")] = np.broadcast_to(np.asarray(w, np.int64),
                                                                     (2,))
        pad_width = widths
    # as NumPy: ((1,), (2,)) pads axis 0 by 1 and axis 1 by 2 on both sides
    pw = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (len(shape), 2))
    if (pw < 0).any():
        raise ShapeError(f"np.pad: index can't contain negative values ({pad_width!r})"
                         f"{_at(user_where())}")
    if mode in _PAD_STATS or mode == "linear_ramp":
        # axis by axis, as NumPy: a later axis's border reads the earlier axes' borders
        extra = _pad_pairs(kw.get("stat_length" if mode != "linear_ramp" else "end_values",
                                  None if mode != "linear_ramp" else 0), len(shape))
        for ax, ((b, a), more) in enumerate(zip(pw, extra)):
            if b or a:
                x = (_ramp_pad if mode == "linear_ramp" else _stat_pad)(
                    x, ax, int(b), int(a), more, mode)
        return x
    if mode != "constant":
        odd = kw.get("reflect_type", "even") == "odd" and mode in ("reflect", "symmetric")
        for ax, (b, a) in enumerate(pw):
            if (b or a) and odd and shape[ax] == 1:
                # a length-1 axis takes its edge value, as NumPy (no 2 * edge - edge)
                x = take_runs(x, ax, np.zeros(int(b) + 1 + int(a), np.int64))
            elif (b or a) and odd:
                x = _odd_reflections(x, ax, int(b), int(a), mode == "symmetric")
            elif b or a:
                idx = np.pad(np.arange(shape[ax]), (int(b), int(a)), mode=mode, **kw)
                x = take_runs(x, ax, idx)
        return x
    index = tuple(slice(int(b), int(b) + d) for (b, _), d in zip(pw, shape))
    out_shape = tuple(int(b) + d + int(a) for (b, a), d in zip(pw, shape))
    out = F.unslice(x, index, out_shape)
    cv = kw.get("constant_values", 0)
    if isinstance(cv, Tracer) and cv.ndim:
        raise UnsupportedError(f"np.pad with a traced array of constant_values"
                               f"{_at(user_where())}; give a number or a tuple of numbers per "
                               "axis, or pad with 0 and add each border")
    if _holds_traced(cv):
        # traced values on the borders: each border's mask (a constant) times its value. NumPy
        # pads axis by axis, so a corner takes the value of the last axis padded over it
        owner = np.full(out_shape, -1)
        pairs = _pad_pairs(cv, len(shape))
        for i, (b, a) in enumerate(pw):
            lead = (slice(None),) * i
            owner[lead + (slice(0, int(b)),)] = 2 * i
            owner[lead + (slice(out_shape[i] - int(a), out_shape[i]),)] = 2 * i + 1
        for k, v in enumerate(v for pair in pairs for v in pair):
            mask = owner == k
            if mask.any():      # selected, not added: an inf or -0.0 border stays itself
                out = F.where(mask, F.cast(v, x.dtype) if isinstance(v, Tracer) else
                              np.asarray(v, x.dtype), out)
        return out
    values = np.asarray(cv)
    if np.any(values != 0) or np.any(np.signbit(values)):
        # selected, not added: -0.0 inside x (and a -0.0 border) keep their sign
        border = np.pad(np.zeros(shape, x.dtype), pw, constant_values=cv)
        inside = np.zeros(out_shape, bool)
        inside[index] = True
        out = F.where(inside, out, border)
    return out


def _stat_pad(x, ax, b, a, lengths, mode):
    """np.pad's maximum/minimum/mean/median along ax: each border repeats the statistic of the
    first (last) stat_length values (all by default)."""
    n = _shape_of(x)[ax]
    if n == 0:
        raise ShapeError(f"np.pad with mode={mode!r}: can't extend empty axis {ax}"
                         f"{_at(user_where())}")
    stat = {"maximum": F.max, "minimum": F.min, "mean": F.mean,
            "median": lambda v, axis, keepdims: median(v, axis, keepdims)}[mode]
    parts = []
    for side, width, k in (("before", b, lengths[0]), ("after", a, lengths[1])):
        if not width:
            continue
        k = n if k is None else builtins.min(int(k), n)
        if k <= 0:
            raise ValueError(f"np.pad: stat_length of 0 for mode={mode!r}{_at(user_where())}")
        part = _slice(x, ax, 0, k) if side == "before" else _slice(x, ax, n - k, n)
        s = stat(part, axis=ax, keepdims=True)
        if F._dtype_of(x).kind in "iu" and mode in ("mean", "median"):
            s = F.round_(s)               # NumPy rounds an integer array's mean
        s = F.cast(s, F._dtype_of(x))
        shape = list(_shape_of(x))
        shape[ax] = width
        parts.append((side, F.broadcast_to(s, tuple(shape))))
    pieces = [p for side, p in parts if side == "before"] + [x] + \
        [p for side, p in parts if side == "after"]
    return F.concatenate(pieces, ax)


def _ramp_pad(x, ax, b, a, ends, mode):
    """np.pad's linear_ramp along ax: from end_value to the edge value, the edge excluded."""
    n = _shape_of(x)[ax]
    if n == 0:
        raise ShapeError(f"np.pad with mode='linear_ramp': can't extend empty axis {ax}"
                         f"{_at(user_where())}")
    dt = F._dtype_of(x)
    # NumPy's ramp (np.linspace): in x's float type, floored for integers
    ft = dt if dt.kind in "fc" else np.dtype(np.float64)
    pieces = []
    for side, width, end in (("before", b, ends[0]), ("after", a, ends[1])):
        if not width:
            continue
        edge = _slice(x, ax, 0, 1) if side == "before" else _slice(x, ax, n - 1, n)
        edge = F.cast(edge, ft) if ft != dt else edge
        shape = [1] * len(_shape_of(x))
        shape[ax] = width
        frac = np.arange(width, dtype=np.float64).reshape(shape) / width
        if side == "after":
            frac = np.flip(frac, ax)
        end = F.cast(end, ft) if isinstance(end, Tracer) else np.asarray(end, ft)
        ramp = F.add(end, F.mul(F.sub(edge, end), frac.astype(ft)))
        pieces.append((side, ramp if ft == dt else F.cast(F.floor(ramp), dt)))
    return F.concatenate([p for side, p in pieces if side == "before"] + [x] +
                         [p for side, p in pieces if side == "after"], ax)


def _holds_traced(v):
    return isinstance(v, Tracer) or (isinstance(v, (tuple, list)) and any(
        _holds_traced(u) for u in v))


def _pad_pairs(cv, nd):
    """np.pad's constant_values as (before, after) per axis (NumPy's _as_pairs)."""
    if not isinstance(cv, (tuple, list)):
        return [(cv, cv)] * nd
    if len(cv) == 1:
        return _pad_pairs(cv[0], nd)
    if len(cv) == 2 and not any(isinstance(c, (tuple, list)) for c in cv):
        return [(cv[0], cv[1])] * nd
    if len(cv) != nd:
        raise ValueError(f"np.pad: constant_values of {len(cv)} entries for {nd} axes"
                         f"{_at(user_where())}")
    return [(c, c) if not isinstance(c, (tuple, list)) else
            (c[0], c[0]) if len(c) == 1 else (c[0], c[1]) for c in cv]


# -- products and sorting ---------------------------------------------------------------------
def prod(x, axis=None, keepdims=False, dtype=None, initial=None):
    """Product over axes as a tree of pairwise multiplications (exact gradients at zeros)."""
    if not isinstance(x, Tracer):
        return np.prod(x, axis=axis, keepdims=keepdims, dtype=dtype)
    if dtype is not None:
        x = F.strong(F.cast(x, dtype))
    elif x.dtype.kind in "bui":
        x = F.cast(x, F.accumulator(x.dtype))
    axes = F._axes(x, axis)
    keep = [i for i in range(x.ndim) if i not in axes]
    out_shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keepdims \
        else tuple(x.shape[i] for i in keep)
    lead = tuple(x.shape[i] for i in keep)
    n = int(math.prod([x.shape[a] for a in axes]))
    if n == 0:
        y = F.full_like(F.zeros(lead, x.dtype) if lead else F.sum(x), 1, x.dtype)
    else:
        y = F.reshape(F.transpose(x, keep + list(axes)), lead + (n,))
        while y.shape[-1] > 1:
            m = y.shape[-1]
            h = m // 2
            # neighbours paired ((a b)(c d)), nearer NumPy's left-to-right order than halves
            # ((a c)(b d)): [1e200, 1e-200, 1e200, 1e-200] gives 1, not inf * 0
            p = F.mul(y[..., 0:2 * h:2], y[..., 1:2 * h:2])
            y = F.concatenate([p, y[..., 2 * h:]], -1) if m % 2 else p
        y = F.reshape(y, lead)
    y = join_initial(y, initial, F.mul)
    return F.reshape(y, out_shape)


# axes up to this length take NumPy's left-to-right order; longer ones the doubling scan
_SEQUENTIAL = 32


def cumprod(x, axis=None, dtype=None):
    """Running product as a scan of products (exact gradients at zeros)."""
    if not isinstance(x, Tracer):
        return np.cumprod(x, axis=axis, dtype=dtype)
    if axis is None:
        x, axis = F.ravel(x), 0
    if dtype is not None:
        x = F.cast(x, dtype)
    elif x.dtype.kind in "bui":
        x = F.cast(x, F.accumulator(x.dtype))
    if x.ndim == 0:
        raise ShapeError(f"np.cumprod of a 0-d array with an axis{_at(user_where())}")
    return x.ctx.emit("cumprod", [x], {"axis": _axis(axis, x.ndim, "cumprod")})


def exclusive(y, ax, fill):
    """y shifted one step along ax, fill first: y_{i-1} (y_{-1} = fill)."""
    first = F.full_like(_slice(y, ax, 0, 1), fill)
    return F.concatenate([first, _slice(y, ax, 0, _shape_of(y)[ax] - 1)], ax)


def linear_recurrence(a, b, ax):
    """t_i = b_i + a_i t_{i-1} along ax, t_{-1} = 0, by products and sums only (no division:
    exact where a holds zeros): left to right up to 32 long, else by doubling strides on the
    affine maps (a, b)."""
    n = _shape_of(b)[ax]
    if n <= _SEQUENTIAL:
        parts = [_slice(b, ax, 0, 1)]
        for i in range(1, n):
            parts.append(F.add(_slice(b, ax, i, i + 1), F.mul(_slice(a, ax, i, i + 1),
                                                              parts[-1])))
        return F.concatenate(parts, ax) if n > 1 else parts[0]
    k = 1
    while k < n:
        # maps ending at i compose with those ending at i - k: (a, b) o (a', b')
        a_hi, b_hi = _slice(a, ax, k, n), _slice(b, ax, k, n)
        a_lo, b_lo = _slice(a, ax, 0, n - k), _slice(b, ax, 0, n - k)
        b = F.concatenate([_slice(b, ax, 0, k), F.add(b_hi, F.mul(a_hi, b_lo))], ax)
        a = F.concatenate([_slice(a, ax, 0, k), F.mul(a_hi, a_lo)], ax)
        k *= 2
    return b


def cumprod_vjp(g, out, x, axis):
    """d x_k = y_{k-1} S_k with S_k = g_k + x_{k+1} S_{k+1}: a reverse linear recurrence,
    exact at zeros (the textbook reverse_cumsum(g y) / x divides by them)."""
    gf, xf = F.flip(g, axis), F.flip(x, axis)
    s = F.flip(linear_recurrence(exclusive(xf, axis, 0), gf, axis), axis)
    return F.mul(exclusive(out, axis, 1), s)


def cumprod_jvp(t, out, x, axis):
    """d y_i = x_i d y_{i-1} + y_{i-1} t_i."""
    return linear_recurrence(x, F.mul(exclusive(out, axis, 1), t), axis)


def fold(f, x, axis, keepdims, what):
    """f.reduce for an associative, commutative binary f: pairwise halving (log n levels)."""
    if axis is None:
        x, axis = F.ravel(x), 0
    if isinstance(axis, (tuple, list)):   # several axes: one after another, the last first
        for ax in sorted(F._axes(x, tuple(axis)), reverse=True):
            x = fold(f, x, ax, keepdims, what)
        return x
    nd = _nd(x)
    ax = _axis(axis, nd, what)
    n = _shape_of(x)[ax]
    if n == 0:
        raise UnsupportedError(f"{what} of an empty axis{_at(user_where())}: it has no "
                               "identity adjit knows")
    while n > 1:
        half = n // 2
        y = f(_slice(x, ax, 0, half), _slice(x, ax, half, 2 * half))
        x = F.concatenate([y, _slice(x, ax, 2 * half, n)], ax) if n % 2 else y
        n = half + n % 2
    return x if keepdims else F.reshape(x, tuple(d for i, d in enumerate(_shape_of(x))
                                                 if i != ax))


def scan(f, x, axis, what):
    """f.accumulate for an associative, commutative binary f (cumprod, np.maximum.accumulate):
    left to right up to 32 long, as NumPy goes, so with its roundings (a product's under- and
    overflows: [1e-200, 1e-200, 1e200, 1e200] gives 0s, where doubling gives inf * 0); by
    doubling strides beyond (log n levels)."""
    if axis is None:
        raise UnsupportedError(f"{what} with axis=None{_at(user_where())}; ravel first")
    if not isinstance(x, Tracer):
        x = F.const(np.asarray(x))
    ax = _axis(axis, _nd(x), what)
    n, k = _shape_of(x)[ax], 1
    if 0 < n <= _SEQUENTIAL:
        parts = [_slice(x, ax, 0, 1)]
        for i in range(1, n):
            parts.append(f(parts[-1], _slice(x, ax, i, i + 1)))
        return F.concatenate(parts, ax) if n > 1 else parts[0]
    while k < n:
        x = F.concatenate([_slice(x, ax, 0, k), f(_slice(x, ax, k, n),
                                                  _slice(x, ax, 0, n - k))], ax)
        k *= 2
    return x


def cumulative_extreme(name, x, axis, what):
    """np.maximum.accumulate (minimum, fmax, fmin): NumPy's accumulate, one pass (the op's
    rules send the cotangent to each running extreme: see extreme_positions)."""
    if axis is None:
        raise UnsupportedError(f"{what} with axis=None{_at(user_where())}; ravel first")
    if not isinstance(x, Tracer):
        x = F.const(np.asarray(x))
    ax = _axis(axis, _nd(x), what)
    return x.ctx.emit("accumulate", [x], {"ufunc": name, "axis": ax})


def extreme_positions(out, x, name, axis):
    """Where each running extreme of accumulate's out sits in x along axis: the last element
    equal to it (ties too, as torch.cummax), or the NaN that maximum and minimum carry on
    (fmax/fmin: a NaN start)."""
    shape = tuple(_shape_of(x))
    pos = np.arange(shape[axis], dtype=np.int64).reshape(
        tuple(-1 if i == axis else 1 for i in range(len(shape))))
    nan_at = isnan(out) if name in ("fmax", "fmin") else isnan(x)
    record = logical_or(F.eq(x, out), nan_at)
    last = F.cast(F.where(record, np.broadcast_to(pos, shape), np.int64(0)), np.int64)
    return x.ctx.emit("accumulate", [last], {"ufunc": "maximum", "axis": axis})


def cumulative_extreme_vjp(g, out, x, name, axis):
    if x.dtype.kind != "f":
        return None
    key = F.along_axis_key(x, extreme_positions(out, x, name, axis), axis)
    arrays, tkey = F.advanced_key(x, key)
    arrays = [a if isinstance(a, Tracer) else F.lift(a, a.dtype, x.ctx) for a in arrays]
    return F.scatter_add(g, arrays, tkey, x.shape)


def cumulative_extreme_jvp(t, out, x, name, axis):
    if t is None or x.dtype.kind != "f":
        return None
    return F.take_along_axis(t, extreme_positions(out, x, name, axis), axis)


def _extreme_weights(out, a, v, idx):
    """For np.maximum.at's result out: the share of each element of a and v equal to its
    result (NaNs to a NaN result), ties split evenly, and v's positions idx."""
    key = (("a", 0),)
    at = F.gather(out, [idx], key)
    ta = logical_or(F.eq(a, out), logical_and(isnan(a), isnan(out)))
    tv = logical_or(F.eq(v, at), logical_and(isnan(v), isnan(at)))
    ta, tv = F.cast(ta, a.dtype), F.cast(tv, a.dtype)
    count = F.add(ta, F.scatter_add(tv, [idx], key, a.shape))
    count = F.where(F.gt(count, 0), count, 1.0)
    return F.div(ta, count), F.div(tv, F.gather(count, [idx], key))


def extreme_at_vjp(g, out, a, v, idx):
    if a.dtype.kind != "f":
        return [None, None, None]
    wa, wv = _extreme_weights(out, a, v, idx)
    return [F.mul(g, wa), F.mul(F.gather(g, [idx], (("a", 0),)), wv), None]


def extreme_at_jvp(t, out, a, v, idx):
    if a.dtype.kind != "f" or (t[0] is None and t[1] is None):
        return None
    wa, wv = _extreme_weights(out, a, v, idx)

    def share(t, w):    # an unselected element's tangent (log(0)'s -inf) adds 0, not nan
        return F.where(F.eq(w, 0), 0.0, F.mul(t, w))
    parts = []
    if t[0] is not None:
        parts.append(share(t[0], wa))
    if t[1] is not None:
        parts.append(F.scatter_add(share(t[1], wv), [idx], (("a", 0),), a.shape))
    return parts[0] if len(parts) == 1 else F.add(*parts)


def sort(x, axis=-1, kind=None, order=None):
    if order is not None:
        raise UnsupportedError(f"np.sort with order={order!r}{_at(user_where())}")
    if axis is None:
        x, axis = F.ravel(x), 0
    if not isinstance(x, Tracer):
        return np.sort(x, axis=axis)
    if x.ndim == 0:
        raise ShapeError(f"np.sort of a 0-d array{_at(user_where())} (NumPy: axis out of bounds)")
    ax = F._norm_axes((axis,), x.ndim, "sort")[0]
    return x.ctx.emit("sort", [x], {"axis": ax})


def median(x, axis=None, keepdims=False):
    nd = _nd(x)
    axes = F._axes(x, axis)
    if not axes:     # axis=() (or 0-d): the values themselves, as floats
        return F.cast(x, np.float64) if F._dtype_of(x).kind not in "fc" else F.mul(x, 1.0)
    if axis is None or len(axes) > 1:
        keep = [i for i in range(nd) if i not in axes]
        shape = tuple(_shape_of(x))
        y = F.reshape(F.transpose(x, keep + list(axes)), tuple(shape[i] for i in keep) + (-1,))
        m = median(y, -1)
        out = tuple(1 if i in axes else d for i, d in enumerate(shape)) if keepdims \
            else tuple(shape[i] for i in keep)
        return F.reshape(m, out)
    ax = axes[0]
    s = sort(x, ax)
    n = _shape_of(x)[ax]
    mid = _slice(s, ax, (n - 1) // 2, n // 2 + 1)
    m = F.mean(mid, axis=ax, keepdims=keepdims)
    if F._dtype_of(x).kind != "f":
        return m
    # sorting puts NaN last; NumPy's median of a slice holding NaN is NaN
    bad = any_(isnan(x), ax, keepdims)
    return F.where(bad, F.full_like(m, np.nan), m)


def ptp(x, axis=None, keepdims=False):
    return F.sub(F.max(x, axis, keepdims), F.min(x, axis, keepdims))


# -- tensor products ---------------------------------------------------------------------------
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def tensordot(a, b, axes=2):
    """np.tensordot written as a two-operand einsum (transpose, reshape, one matmul)."""
    na, nb = _nd(a), _nd(b)
    if isinstance(axes, (int, np.integer)):
        ax_a, ax_b = list(range(na - int(axes), na)), list(range(int(axes)))
    else:
        ax_a, ax_b = axes
        ax_a = [ax_a] if isinstance(ax_a, (int, np.integer)) else list(ax_a)
        ax_b = [ax_b] if isinstance(ax_b, (int, np.integer)) else list(ax_b)
    ax_a, ax_b = F._norm_axes(ax_a, na, "tensordot"), F._norm_axes(ax_b, nb, "tensordot")
    if len(ax_a) != len(ax_b):
        raise ShapeError(f"tensordot: axes {ax_a} and {ax_b} differ in number"
                         f"{_at(user_where())}")
    sa, sb = _shape_of(a), _shape_of(b)
    if any(sa[i] != sb[j] for i, j in zip(ax_a, ax_b)):
        # einsum would broadcast a length-1 axis; NumPy's tensordot does not
        raise ShapeError(f"tensordot: shape-mismatch for sum: axes of lengths "
                         f"{[sa[i] for i in ax_a]} and {[sb[j] for j in ax_b]}"
                         f"{_at(user_where())}")
    la = list(_LETTERS[:na])
    lb = list(_LETTERS[na:na + nb])
    for i, j in zip(ax_a, ax_b):
        lb[j] = la[i]
    out = [c for i, c in enumerate(la) if i not in ax_a] + \
          [c for j, c in enumerate(lb) if j not in ax_b]
    return F.einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", a, b)


def inner(a, b):
    if _nd(a) == 0 or _nd(b) == 0:
        return F.strong_mul(a, b)
    return tensordot(a, b, ([-1], [-1]))


def kron(a, b):
    sa, sb = tuple(_shape_of(a)), tuple(_shape_of(b))
    nd = builtins.max(len(sa), len(sb))
    sa, sb = (1,) * (nd - len(sa)) + sa, (1,) * (nd - len(sb)) + sb
    a = F.reshape(a, tuple(v for d in sa for v in (d, 1)))
    b = F.reshape(b, tuple(v for d in sb for v in (1, d)))
    return F.reshape(F.mul(a, b), tuple(x * y for x, y in zip(sa, sb)))


def matrix_power(m, n):
    if isinstance(n, Tracer):
        n._concrete("np.linalg.matrix_power's exponent")
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"exponent must be an integer{_at(user_where())} (as NumPy)") from None
    shape = tuple(_shape_of(m))
    if n < 0:
        from .linalg import inv
        m, n = inv(m), -n
    if n == 0:
        return F.broadcast_to(np.eye(shape[-1], dtype=F._dtype_of(m)), shape)
    result, base = None, m
    while n:
        if n & 1:
            result = base if result is None else F.matmul(result, base)
        n >>= 1
        if n:
            base = F.matmul(base, base)
    return result


def triu(m, k=0):
    s = tuple(_shape_of(m))
    return F.where(np.triu(np.ones(s[-2:], bool), k), m, F.zeros_like(m))


def tril(m, k=0):
    s = tuple(_shape_of(m))
    return F.where(np.tril(np.ones(s[-2:], bool), k), m, F.zeros_like(m))


def convolve(a, v, mode="full"):
    """np.convolve (1-D): the longer operand correlated with the reversed shorter one (registry
    op correlate, NumPy's own loop)."""
    _check_1d(a, v, mode, "convolve")
    if _shape_of(a)[0] < _shape_of(v)[0]:  # convolution commutes; NumPy slides the longer
        a, v = v, a
    return F.correlate(a, F.flip(v), mode)


def correlate(a, v, mode="valid"):
    _check_1d(a, v, mode, "correlate")
    if _shape_of(a)[0] < _shape_of(v)[0]:
        return F.flip(F.correlate(v, a, mode))
    return F.correlate(a, v, mode)


def _check_1d(a, v, mode, what):
    sa, sv = _shape_of(a), _shape_of(v)
    if len(sa) != 1 or len(sv) != 1 or mode not in ("full", "same", "valid") or 0 in (
            sa + sv):
        raise UnsupportedError(f"np.{what} of shapes {sa}, {sv} with mode={mode!r}"
                               f"{_at(user_where())}; non-empty 1-D arrays and full/same/valid "
                               "only")


# -- NaN-aware and logical functions ----------------------------------------------------------
def isnan(x):
    return F.ne(x, x)


def isinf(x):
    return F.eq(F.abs(x), math.inf)


def isfinite(x):
    return F.lt(F.abs(x), math.inf)


def _bool(x):
    (x,) = F._lists_as_arrays((x,))
    dt = F._dtype_of(x)
    return x if dt == np.bool_ else F.ne(x, 0)


def logical_and(a, b):
    return F.where(_bool(a), _bool(b), False)


def logical_or(a, b):
    return F.where(_bool(a), True, _bool(b))


def logical_xor(a, b):
    return F.ne(_bool(a), _bool(b))


def logical_not(a):
    return F.eq(_bool(a), False)


def count_nonzero(x, axis=None, keepdims=False):
    return F.sum(F.ne(x, 0), axis, keepdims)


def any_(x, axis=None, keepdims=False):
    return F.gt(count_nonzero(x, axis, keepdims), 0)


def all_(x, axis=None, keepdims=False):
    return F.eq(F.sum(F.eq(x, 0), axis, keepdims), 0)


def join_initial(r, initial, combine=None):
    """A reduction's result r with initial= joined, as NumPy does: initial cast to r's dtype
    first (np.sum(counts, initial=0.5) stays integer and adds 0; a float64 initial keeps a
    float32 sum float32)."""
    if initial is None:
        return r
    combine = combine or F.add
    dt = F._dtype_of(r)
    if isinstance(initial, Tracer):
        return combine(r, F.cast(initial, dt) if initial.dtype != dt else initial)
    return combine(r, cast_initial(initial, dt))


def cast_initial(initial, dt):
    """initial= in the reduction's dtype as NumPy casts it: a Python int out of an integer
    dtype's range raises OverflowError (np.max(u8, initial=-1)), a float is truncated."""
    if type(initial) is int and np.dtype(dt).kind in "iu":
        info = np.iinfo(dt)
        if not info.min <= initial <= info.max:
            raise OverflowError(f"Python integer {initial} out of bounds for {np.dtype(dt)}"
                                f"{_at(user_where())} (initial=, as NumPy)")
    return np.asarray(initial).astype(dt)


def nansum(x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """np.nansum, with NumPy's signature (out= only as adjit's functions take it: not at all)"""
    _no_out("nansum", out)
    skip = isnan(x) if where is None else logical_or(isnan(x), F.eq(where, False))
    s = F.sum(F.where(skip, F.zeros_like(x), x), axis, keepdims, dtype)
    return join_initial(s, initial)


def nanmean(x, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """np.nanmean: float32 stays float32 (the count takes the sum's dtype)"""
    _no_out("nanmean", out)
    if dtype is not None:
        x = F.cast(x, dtype)
    elif F._dtype_of(x).kind not in "fc":
        x = F.cast(x, np.float64)
    keep = F.eq(isnan(x), False)
    if where is not None:
        keep = logical_and(keep, where)
    s = F.sum(F.where(keep, x, F.zeros_like(x)), axis, keepdims)
    return F.div(s, F.cast(count_nonzero(keep, axis, keepdims), F._dtype_of(s)))


def _no_out(name, out, where=None):
    if out is not None:
        raise UnsupportedError(f"np.{name}(..., out=...) writes in place, which a traced "
                               f"function cannot do{_at(user_where())}; assign the result")
    if where is not None:
        raise UnsupportedError(f"np.{name}(..., where=...){_at(user_where())}; use "
                               "np.where on the argument instead")


def nanmax(x, axis=None, keepdims=False):
    return _nan_extreme(F.max, x, axis, keepdims)


def nanmin(x, axis=None, keepdims=False):
    return _nan_extreme(F.min, x, axis, keepdims)


def _nan_extreme(op, x, axis, keepdims):
    """The max (min) ignoring NaN; a slice of NaN only is NaN, as in NumPy."""
    if not isinstance(x, Tracer):
        return (np.nanmax if op is F.max else np.nanmin)(x, axis=axis, keepdims=keepdims)
    if F._dtype_of(x).kind != "f":
        return op(x, axis, keepdims)          # integers and booleans hold no NaN
    # registry ops nanmax / nanmin: NumPy's fmax.reduce, one pass
    return F.reduction("nanmax" if op is F.max else "nanmin", x, axis, keepdims)


def heaviside(x, h0):
    step = F.where(F.gt(x, 0), F.ones_like(x), F.zeros_like(x))
    return F.where(F.eq(x, 0), h0, F.where(isnan(x), x, step))


def signbit(x):
    """np.signbit: x < 0 for integers; the sign bit of floats (-0.0 and a negative NaN too)."""
    if F._dtype_of(x).kind not in "fc":
        return F.lt(x, 0)
    return F._elementwise("signbit", [x])


def modf(x):
    """np.modf: (fractional part, integral part), both with x's sign; (+-0, +-inf) at inf."""
    from .numeric import trunc
    x = _as_dtype(x, np.modf(np.ones((), F._dtype_of(x)))[0].dtype)   # ints: NumPy's loop
    whole = trunc(x)
    # x - whole is +0.0 at a negative integer, where NumPy's is -0.0: -(whole - x) there and
    # for every negative x, so the derivative is 1 everywhere (copysign's would flip it)
    frac = F.where(signbit(x), F.neg(F.sub(whole, x)), F.sub(x, whole))
    return F.where(isinf(x), copysign(F.zeros_like(x), x), frac), whole


def copysign(x, y):
    dt = F.result_dtype(x, y, 1.0)       # Python numbers weak: copysign(2.0, x32) is float32
    return F._elementwise("copysign", [_as_dtype(x, dt), _as_dtype(y, dt)])


def hypot(x, y):
    # np.hypot's loops are float only: promote (Python scalars weak), then take its loop's
    # dtype, so hypot(float32 array, 1.0) stays float32 and two int16 arrays give float32
    dt = _loop_dtype(np.hypot, x, y)
    return F._elementwise("hypot", [_as_dtype(x, dt), _as_dtype(y, dt)])


def _as_dtype(x, dt):
    return F.cast(x, dt) if isinstance(x, Tracer) else np.asarray(x, dtype=dt)


def logaddexp(x, y):
    dt = _loop_dtype(np.logaddexp, x, y)    # Python numbers stay weak: float32 stays float32
    return F._elementwise("logaddexp", [_as_dtype(x, dt), _as_dtype(y, dt)])


def _loop_dtype(ufunc, *xs):
    """The dtype NumPy's float-only ufunc computes in for these arguments (Python numbers
    weak): int8 takes float16, float32 stays float32."""
    one = np.ones((), F.result_dtype(*xs))
    return ufunc(*[one] * len(xs)).dtype


def logaddexp2(x, y):
    dt = _loop_dtype(np.logaddexp2, x, y)
    return F._elementwise("logaddexp2", [_as_dtype(x, dt), _as_dtype(y, dt)])


# -- polynomials, integration, cross products -------------------------------------------------
def polyval(p, x):
    """Horner's rule, as np.polyval (p holds the coefficients, highest power first).

    As NumPy, which takes np.asarray(p) and np.asanyarray(x): a list of Python floats or a
    Python scalar x is a float64 array (strong), not a weak scalar.
    """
    if isinstance(p, (list, tuple)):
        if any(isinstance(c, Tracer) for c in p):
            dt = np.result_type(*[F._dtype_of(c) for c in p])
            p = [_as_dtype(c, dt) for c in p]
        else:
            p = np.asarray(p)
    elif not isinstance(p, Tracer):
        p = np.asarray(p)
    if not isinstance(x, Tracer):
        x = np.asarray(x)
    coeffs = list(p) if isinstance(p, list) or _nd(p) else [p]
    y = F.zeros_like(x) if not coeffs else F.mul(F.ones_like(x), coeffs[0])
    for c in coeffs[1:]:
        y = F.add(F.mul(y, x), c)
    return y


def trapezoid(y, x=None, dx=1.0, axis=-1):
    ax = _axis(axis, _nd(y), "trapezoid")
    mid = F.mul(F.add(_slice(y, ax, 1, None), _slice(y, ax, None, -1)), 0.5)
    if x is None:
        return F.mul(F.sum(mid, axis=ax), dx)
    d = diff(x, axis=-1 if _nd(x) == 1 else ax)
    if _nd(x) == 1 and _nd(y) > 1:
        d = F.reshape(d, tuple(-1 if i == ax else 1 for i in range(_nd(y))))
    return F.sum(F.mul(mid, d), axis=ax)


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = moveaxis(a, axisa, -1), moveaxis(b, axisb, -1)
    na, nb = _shape_of(a)[-1], _shape_of(b)[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError("incompatible dimensions for cross product\n"
                         "(dimension must be 2 or 3)")
    # NumPy's deprecated 2-vector forms: a 2-vector's z is 0 (left out of the products, as
    # NumPy does), and two 2-vectors give the z component alone
    a0, a1, a2 = (F.getitem(a, (Ellipsis, i)) if i < na else None for i in range(3))
    b0, b1, b2 = (F.getitem(b, (Ellipsis, i)) if i < nb else None for i in range(3))

    def term(x, y, u, v):     # x * y - u * v, a missing (zero) component dropping its product
        p = None if x is None or y is None else F.mul(x, y)
        q = None if u is None or v is None else F.mul(u, v)
        return F.sub(p, q) if p is not None and q is not None else \
            p if p is not None else F.neg(q)
    z = term(a0, b1, a1, b0)
    if na == nb == 2:
        return z
    c = F.stack([term(a1, b2, a2, b1), term(a2, b0, a0, b2), z], axis=-1)
    return moveaxis(c, -1, axisc)
