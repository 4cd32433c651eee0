"""x[mask] with a traced boolean mask, for the one use whose shape does not depend on the data:
an elementwise update written back through the same mask,

    x[x > 0] *= 3                  x[m] = np.exp(x[m])              h[m] /= 0.7

NumPy's x[mask] is the 1-D array of the selected elements; its length depends on the data, so
adjit cannot trace it. A `Selection` instead keeps x at full size and remembers the mask:
elementwise arithmetic and ufuncs apply to every element, and `x[mask] = selection` writes
back `np.where(mask, selection, x)`, which equals NumPy's result. The unselected elements
enter the computation through stop_gradient, so a function that is singular there (np.log of
a non-positive value that the mask leaves out) cannot put NaN into the gradient. Any other use
of a selection (its length, a sum, indexing) raises an error that points to adjit.where.
"""
from __future__ import annotations

import numpy as np

from ..ir.errors import UnsupportedError
from .tracer import Tracer, _at, user_where


class Selection:
    """x[mask] held at x's full shape; see the module docstring."""
    __array_priority__ = 2000

    def __init__(self, mask, full):
        self.mask, self.full = mask, full
        self.made_at = user_where()      # for a use far from the user's code (returning it)

    @staticmethod
    def of(x, mask):
        from . import functions as F
        m = F.reshape(mask, mask.shape + (1,) * (x.ndim - mask.ndim))
        return Selection(mask, F.where(m, x, F.stop_gradient(x)))

    def _refuse(self, what="this use of x[mask]", where=None):
        raise UnsupportedError(
            f"{what} with a traced boolean mask{_at(where or user_where())}: x[mask] has a "
            "length that "
            "depends on the data. adjit supports x[mask] = v, x[mask] op= v and "
            "x[mask] = f(x[mask]) for elementwise f; otherwise use adjit.where(mask, x, 0) "
            "(np.sum(np.where(mask, x, 0)) for a masked sum)")

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
        return Selection(self.mask, fn(*args))

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        from .numpy_api import UFUNCS
        if method != "__call__" or kwargs or ufunc not in UFUNCS:
            self._refuse(f"np.{ufunc.__name__} of x[mask]")
        first = next(i for i in inputs if isinstance(i, Selection))
        return first._combine(lambda *a: UFUNCS[ufunc](*a), *inputs)

    def __array_function__(self, func, types, args, kwargs):
        self._refuse(f"np.{func.__name__} of x[mask]")

    def __getattr__(self, name):
        if name.startswith("__array"):      # NumPy converting it: returned, or passed on
            self._refuse("x[mask] used as an array (returned, or passed to NumPy)",
                         self.made_at)
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
Selection.__neg__ = lambda s: Selection(s.mask, -s.full)
Selection.__pos__ = lambda s: s
Selection.__abs__ = lambda s: Selection(s.mask, abs(s.full))
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
