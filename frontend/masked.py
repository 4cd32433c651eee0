"""x[mask] with a traced boolean mask, for the one use whose shape does not depend on the data:
an elementwise update written back through the same mask,

    x[x > 0] *= 3                  x[m] = np.exp(x[m])              h[m] /= 0.7

NumPy's x[mask] is the 1-D array of the selected elements; its length depends on the data, so
adjit cannot trace it. A `Selection` instead keeps x at full size and remembers the mask:
elementwise arithmetic and ufuncs apply to every element, and `x[mask] = selection` writes
back `np.where(mask, selection, x)`, which equals NumPy's result. The unselected elements
enter the computation through stop_gradient, so a function that is singular there (np.log of
a non-positive value that the mask leaves out) cannot put NaN into the gradient.

Reductions of a selection have a fixed shape too, and are computed over the selected elements
(the others count as the reduction's identity): x[m].sum(), np.mean(loss[valid]) (divided by
the number selected), var/std (ddof=), max/min (an empty selection gives -inf/+inf where NumPy
raises), prod, any, all, np.count_nonzero; along axis 0 (the selected positions) or along the
axes after it (the result is then a selection again); x[m].size is the traced count. Any other
use (len(x[m]), indexing, sorting) raises an error that points to adjit.where.
"""
from __future__ import annotations

import numpy as np

from ..ir.errors import UnsupportedError
from .tracer import Tracer, _at, user_where


class Selection:
    """x[mask] held at x's full shape; see the module docstring."""
    __array_priority__ = 2000

    def __init__(self, mask, full, leading=True):
        self.mask, self.full = mask, full
        # the mask on full's leading axes (x[m], x[m, :]): x[mask]'s axis 0 is the selected
        # positions. Otherwise (x[m, 1:], x[:, m]) the mask was widened to full's shape and
        # only the elements are known: reductions over all of them, not along an axis
        self.leading = leading
        self.made_at = user_where()      # for a use far from the user's code (returning it)

    @staticmethod
    def of(x, mask, leading=True):
        from . import functions as F
        m = F.reshape(mask, mask.shape + (1,) * (x.ndim - mask.ndim))
        return Selection(mask, F.where(m, x, F.stop_gradient(x)), leading)

    def _refuse(self, what="this use of x[mask]", where=None):
        raise UnsupportedError(
            f"{what} with a traced boolean mask{_at(where or user_where())}: x[mask] has a "
            "length that depends on the data. adjit supports x[mask] = v, x[mask] op= v, "
            "x[mask] = f(x[mask]) for elementwise f, and reductions of x[mask] (sum, mean, "
            "var, std, max, min, prod, any, all, .size); otherwise write it at full size with "
            "np.where(mask, x, fill) (a masked mean: np.sum(np.where(mask, x, 0)) / "
            "np.sum(mask))")

    # -- reductions over the selected elements ------------------------------------------------
    def _axes(self, axis):
        """(full's axes reduced, do they include the selected positions?) for an axis of
        x[mask], whose axis 0 is the mask's axes and whose axis k >= 1 is full's k + nm - 1."""
        nm, nd = self.mask.ndim, self.full.ndim
        sel_nd = 1 + nd - nm
        if axis is None:
            return tuple(range(nd)), True
        out, first = [], False
        for a in (axis if isinstance(axis, tuple) else (axis,)):
            a = int(a)
            if not -sel_nd <= a < sel_nd:
                raise np.exceptions.AxisError(a, sel_nd)
            a %= sel_nd
            if a == 0:
                first = True
                out.extend(range(nm))
            else:
                out.append(a + nm - 1)
        return tuple(sorted(out)), first

    def _filled(self, fill):
        """full with the unselected elements set to fill (a reduction's identity)."""
        from . import functions as F
        m = F.reshape(self.mask, self.mask.shape + (1,) * (self.full.ndim - self.mask.ndim))
        return F.where(m, self.full, F.full_like(self.full, fill))

    def _count(self, axes):
        """How many elements each result reduces: the selected positions times the other
        reduced axes' lengths (a traced count, full's dtype for a mean)."""
        from . import functions as F
        nm = self.mask.ndim
        other = int(np.prod([self.full.shape[a] for a in axes if a >= nm]))
        c = F.sum(self.mask)
        return F.mul(c, other) if other != 1 else c

    def _reduce(self, name, *args, **kwargs):
        """np.<name>(x[mask], ...) with NumPy's positional parameters for that reduction."""
        name = {"amax": "max", "amin": "min"}.get(name, name)
        params = _PARAMS[name]
        if len(args) > len(params):
            raise TypeError(f"np.{name}: too many arguments{_at(user_where())}")
        kw = dict(zip(params, args))
        for k, v in kwargs.items():
            if k in kw or k not in params + ("where", "initial"):
                raise TypeError(f"np.{name}: unexpected argument {k!r}{_at(user_where())}")
            kw[k] = v
        if kw.get("out") is not None or kw.get("where") not in (None, True) or \
                kw.get("initial") is not None:
            self._refuse(f"x[mask].{name} with out=, where= or initial=")
        axis, dtype = kw.get("axis"), kw.get("dtype")
        keepdims, ddof = kw.get("keepdims", False), kw.get("ddof", 0)
        if not self.leading and (axis is not None or keepdims):
            self._refuse(f"x[mask].{name} along an axis, for a mask beside other indices "
                         "(x[m, 1:], x[:, m]: only a reduction of all the selected elements is "
                         "supported there)")
        axes, first = self._axes(axis)
        from . import functions as F
        if not first:       # along the axes after the selected positions: still a selection
            if keepdims:
                self._refuse(f"x[mask].{name} with keepdims along the later axes")
            extra = {k: v for k, v in (("dtype", dtype), ("ddof", ddof)) if k in params}
            if name == "count_nonzero":
                r = Selection(self.mask, np.sum(self.full != 0, axis=axes))
            else:
                r = Selection(self.mask, getattr(np, name)(self.full, axis=axes, **extra))
            r.partial = f"np.{name}(x[mask], axis={axis!r})"
            return r
        dt = self.full.dtype
        if name in ("sum", "prod"):
            r = getattr(np, name)(self._filled(0 if name == "sum" else 1), axis=axes,
                                  dtype=dtype)
        elif name in ("max", "min"):
            if dt.kind == "b":
                fill = name == "min"
            else:
                big = np.inf if dt.kind == "f" else int(np.iinfo(dt).max)
                low = -np.inf if dt.kind == "f" else int(np.iinfo(dt).min)
                fill = low if name == "max" else big
            r = getattr(np, name)(self._filled(fill), axis=axes)
        elif name in ("any", "all"):
            r = getattr(np, name)(self._filled(name == "all"), axis=axes)
        elif name == "count_nonzero":
            r = np.sum(self._filled(0) != 0, axis=axes)
        else:               # mean, var, std
            x = self.full if dtype is not None or dt.kind in "fc" else \
                F.cast(self.full, np.float64)
            sel = Selection(self.mask, x if dtype is None else F.cast(x, dtype))
            total = np.sum(sel._filled(0), axis=axes)
            n = F.cast(self._count(axes), total.real.dtype)
            mean = F.div(total, n)
            if name == "mean":
                r = mean
            else:
                kept = tuple(1 if k in axes else d for k, d in enumerate(sel.full.shape))
                d = F.sub(sel.full, F.reshape(mean, kept))
                sq = F.mul(d, d) if d.dtype.kind != "c" else F.mul(d, np.conj(d)).real
                # NumPy divides by max(n - ddof, 0): inf or nan where ddof >= n
                v = F.div(np.sum(Selection(self.mask, sq)._filled(0), axis=axes),
                          F.maximum(F.sub(n, ddof), 0.0))
                r = v if name == "var" else F.sqrt_of_variance(v)
        if keepdims:
            nm = self.mask.ndim
            r = F.reshape(r, (1,) + tuple(1 if a in axes else self.full.shape[a]
                                          for a in range(nm, self.full.ndim)))
        return r

    @property
    def size(self):
        """The number of selected elements, traced, and weak as the Python int NumPy's size
        is (a float32 sum / size stays float32)."""
        c = self._count(tuple(range(self.full.ndim)))
        c.ctx.weak.add(c.id)
        return c

    def _combine(self, fn, *others):
        args = []
        for o in others:
            if isinstance(o, Selection):
                if not same_mask(o.mask, self.mask):
                    self._refuse("combining selections made with different masks")
                args.append(o.full)
            elif (isinstance(o, Tracer) and o.ndim > 0) or (
                    not isinstance(o, Tracer) and np.ndim(o) > 0):
                self._refuse("combining x[mask] with an array")
            else:
                args.append(o)
        return Selection(self.mask, fn(*args), self.leading)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        from .numpy_api import UFUNCS
        if method != "__call__" or kwargs or ufunc not in UFUNCS:
            self._refuse(f"np.{ufunc.__name__} of x[mask]")
        first = next(i for i in inputs if isinstance(i, Selection))
        return first._combine(lambda *a: UFUNCS[ufunc](*a), *inputs)

    def __array_function__(self, func, types, args, kwargs):
        name = func.__name__
        if name in _REDUCTIONS and args and args[0] is self and \
                not any(isinstance(a, Selection) for a in args[1:]):
            return self._reduce(name, *args[1:], **kwargs)
        self._refuse(f"np.{name} of x[mask]")

    def __getattr__(self, name):
        if name == "partial":
            raise AttributeError(name)
        if name.startswith("__"):           # NumPy or a library converting it: returned,
            if getattr(self, "partial", None):
                self._refuse(f"{self.partial}, reduced along the later axes only, keeps one "
                             "value per selected position (a length that depends on the "
                             "data), and it was used as an array (returned or passed on); "
                             "reduce over the selected positions too (axis 0), or write it "
                             "back with x[mask] = ...", self.made_at)
            self._refuse("x[mask] used as an array (returned, or passed to a function "
                         "other than a reduction)", self.made_at)
        if name in _REDUCTIONS and name != "count_nonzero":
            return lambda *a, **k: self._reduce(name, *a, **k)
        self._refuse(f"x[mask].{name}")

    def __len__(self):
        self._refuse("len(x[mask])")

    def __iter__(self):
        self._refuse("iterating over x[mask]")

    def __getitem__(self, key):
        self._refuse("indexing x[mask]")

    def __setitem__(self, key, value):
        self._refuse("writing into x[mask] (d = x[mask]; d[d < 1] = 1)")

    def __bool__(self):
        self._refuse("the truth value of x[mask]")

    def __array__(self, dtype=None, copy=None):
        self._refuse("converting x[mask] to a NumPy array")


# NumPy's positional parameters of each reduction of a selection
_PARAMS = {"sum": ("axis", "dtype", "out", "keepdims"),
           "prod": ("axis", "dtype", "out", "keepdims"),
           "mean": ("axis", "dtype", "out", "keepdims"),
           "var": ("axis", "dtype", "out", "ddof", "keepdims"),
           "std": ("axis", "dtype", "out", "ddof", "keepdims"),
           "max": ("axis", "out", "keepdims"), "min": ("axis", "out", "keepdims"),
           "any": ("axis", "out", "keepdims"), "all": ("axis", "out", "keepdims"),
           "count_nonzero": ("axis", "keepdims")}
_REDUCTIONS = frozenset(_PARAMS) | {"amax", "amin"}


def _binary(name):
    def op(self, other):
        return self._combine(lambda a, b: getattr(a, name)(b) if isinstance(a, Tracer)
                             else getattr(np.asarray(a), name)(b), self, other)
    return op


def _reflected(name):
    """other op x[mask] (1 - x[mask]): the traced values' own reflected operator (name is
    `__rsub__`), so the Python number stays on the left."""
    def op(self, other):
        return self._combine(lambda a, b: getattr(a, name)(b), self, other)
    return op


for _n in ("add", "sub", "mul", "truediv", "pow", "floordiv", "mod", "lt", "le", "gt", "ge",
           "eq", "ne"):
    setattr(Selection, f"__{_n}__", _binary(f"__{_n}__"))
for _n in ("add", "sub", "mul", "truediv", "pow", "floordiv", "mod"):
    setattr(Selection, f"__r{_n}__", _reflected(f"__r{_n}__"))
Selection.__matmul__ = lambda s, o: s._refuse("a matrix product of x[mask]")
Selection.__rmatmul__ = lambda s, o: s._refuse("a matrix product of x[mask]")
Selection.__neg__ = lambda s: Selection(s.mask, -s.full, s.leading)
Selection.__pos__ = lambda s: s
Selection.__abs__ = lambda s: Selection(s.mask, abs(s.full), s.leading)
Selection.__hash__ = None


def same_mask(a, b, depth=12) -> bool:
    """Do two boolean tracers compute the same thing (x > 0 written twice)?"""
    if a is b:
        return True
    if not (isinstance(a, Tracer) and isinstance(b, Tracer)) or a.ctx is not b.ctx:
        return False
    return _same_node(a.ctx.graph, a.id, b.id, depth)


def _same_node(g, n, m, depth):
    if n == m:
        return True
    if depth == 0:
        return False
    x, y = g[n], g[m]
    if x["op"] != y["op"] or x["shape"] != y["shape"] or x["dtype"] != y["dtype"] or \
            len(x["args"]) != len(y["args"]) or x["op"] == "input":
        return False
    if x["op"] == "const":
        return np.array_equal(x["attrs"]["value"], y["attrs"]["value"])
    if x["attrs"].keys() != y["attrs"].keys() or any(
            not _equal_attr(x["attrs"][k], y["attrs"][k]) for k in x["attrs"]):
        return False
    return all(_same_node(g, p, q, depth - 1) for p, q in zip(x["args"], y["args"]))


def _equal_attr(a, b):
    try:
        return bool(np.all(a == b)) if isinstance(a, np.ndarray) else a == b
    except Exception:
        return False
