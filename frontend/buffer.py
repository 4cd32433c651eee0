"""NumPy arrays made inside a traced function that traced values are later written into.

Users preallocate and fill:

    out = np.zeros((T, n))
    for t in range(T):
        out[t] = np.tanh(W @ h)

`out` is a NumPy array, and NumPy never asks adjit when a tracer is stored into it. So while a
trace is active, np.zeros/ones/empty/full, their *_like forms, np.eye and np.identity called
from user code return a `Buffer` (a float ndarray subclass that owns its memory). A Buffer is
an ordinary array until a traced value is assigned into it (or into a view of it): then it is
*promoted*, and from then on its value is a Tracer (`shadow`) that every later use reads:
operators, NumPy functions and ufuncs, methods and attributes, indexing, adjit's functions and
the function's results. A view of a Buffer (`out[t]`, `out.T`) reads and writes through to it,
as in NumPy. The promoted array's own memory is filled with NaN, so that a use NumPy performs
behind adjit's back (a NumPy view taken with a plain-array function before the assignment, or
the array used as an index) shows NaN instead of a plausible stale number.
"""
from __future__ import annotations

import math
import os
import sys
import warnings
import weakref

import numpy as np

from ..ir.errors import UnsupportedError
from .tracer import Tracer, _at, current, user_where, _INTERNAL


# what NumPy makes from plain arrays: ndarray, and numpy_api.Table (a module's array seen
# while tracing), which numpy_api adds here
PLAIN_TYPES = (np.ndarray,)


class Buffer(np.ndarray):
    """A float array created in a traced function; see the module docstring."""

    def __new__(cls, value):
        value = np.asarray(value)
        b = np.ndarray.__new__(cls, value.shape, value.dtype)  # owns its memory
        np.copyto(b.view(np.ndarray), value)
        # made Fortran-ordered (np.zeros(shape, order="F")): this memory is C-ordered, so an
        # order='A'/'K' read of its traced value is refused (_fortran_order_read)
        np.ndarray.__setattr__(b, "_fortran", value.ndim > 1 and value.flags.f_contiguous and
                               not value.flags.c_contiguous)
        ctx = current()
        if ctx is not None:
            ctx.buffers.append(weakref.ref(b))
        return b

    def __array_finalize__(self, obj):
        np.ndarray.__setattr__(self, "_shadow", None)
        # a Buffer made on another's memory through a plain array (as_strided(c, ...) views
        # its memory by address and converts back): a view of that Buffer
        via = None
        if obj is not None and current() is not None and \
                not isinstance(np.ndarray.__getattribute__(self, "base"), Buffer):
            # (NumPy's as_strided calls this again with the original Buffer as obj)
            via = _memory_owner(np.ndarray.view(self, np.ndarray))
        np.ndarray.__setattr__(self, "_via", via)

    def __reduce__(self):  # pickles as the plain array it stands for
        return np.asarray(resolve(self)).__reduce__()

    def __copy__(self):
        """copy.copy: a copy of the current value (traced values included)."""
        tv = traced_value(self)
        return tv.copy_() if tv is not None else Buffer(self.view(np.ndarray))

    def __deepcopy__(self, memo):
        return self.__copy__()

    # -- reading ---------------------------------------------------------------------------
    def __getattribute__(self, name):
        if name[:1] == "_" or name in _PLAIN_ATTRS or name in _WRITERS:
            return np.ndarray.__getattribute__(self, name)
        tv = traced_value(self)
        if tv is None:
            attr = np.ndarray.__getattribute__(self, name)
            return _taking_traced(self, name, attr) if name in _ARG_METHODS else attr
        if name in ("ravel", "reshape", "flatten") and getattr(_owner(self), "_fortran", False):
            return _fortran_order_read(self, name, tv)
        if name in _VIEW_ATTRS and _owner(self) is not self:
            # a view of a view taken before the first traced write (v = c[:]; v.T[0] = 7):
            # NumPy's view, a Buffer view of the owner, so writes into it reach the owner
            return _view_or_value(self, name, tv)
        return getattr(tv, name)

    def __getitem__(self, key):
        tv = traced_value(self)
        if tv is not None:
            if _owner(self) is not self and _basic(key):
                # a view of a view taken before the first traced write (rest = hs[1:], then
                # rest[t]): a Buffer view of the owner too, so writes into it reach the owner;
                # an element (a scalar of the placeholder memory) is read from the value
                r = np.ndarray.__getitem__(self, key)
                if isinstance(r, Buffer) and r.ndim:
                    return r
            return tv[key]
        if _holds_traced(key):
            return _lifted(self)[key]
        r = np.ndarray.__getitem__(self, key)
        if isinstance(r, np.ndarray) and r.ndim and not np.may_share_memory(r, self) and \
                not r.flags.c_contiguous:
            # advanced indexing's copy (y[:, [1, 2]]) may come out in another order: a
            # C-ordered one can receive traced values (y[:, [1, 2]] += v)
            return Buffer(r)
        return r

    def __iter__(self):
        # row by row through __getitem__, so rows taken before and after a traced write are
        # views of this array either way
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(len(self)))

    def __repr__(self):
        tv = traced_value(self)
        return repr(tv) if tv is not None else repr(self.view(np.ndarray))

    __str__ = __repr__

    def __bool__(self):
        tv = traced_value(self)
        return bool(tv) if tv is not None else np.ndarray.__bool__(self)

    def __float__(self):
        tv = traced_value(self)
        return float(tv) if tv is not None else np.ndarray.__float__(self)

    @property
    def flat(self):
        """x.flat reading this array's current values, traced ones too (NumPy's flatiter
        would read the memory behind adjit's back)."""
        return FlatIter(lambda: self.reshape(-1), self.shape, self)

    @flat.setter
    def flat(self, value):
        """x.flat = v: every element, v repeated as NumPy repeats it."""
        FlatIter(lambda: self.reshape(-1), self.shape, self)[...] = value

    # -- writing ---------------------------------------------------------------------------
    def fill(self, value):
        """x.fill(v): v may be traced (np.zeros(3).fill(np.max(x))); through a view taken
        before the array held traced values too (it is stored like x[...] = v)."""
        self[...] = value

    def sort(self, axis=-1, kind=None, order=None, *, stable=None):
        """x.sort(): the sorted values stored back, so a view sorts its owner's elements."""
        if traced_value(self) is None:
            np.ndarray.sort(self, axis=axis, kind=kind, order=order, stable=stable)
            return
        self[...] = np.sort(resolve(self), axis=axis, kind=kind)

    def put(self, indices, values, mode="raise"):
        """x.put(i, v): v may be traced, as np.put(x, i, v)."""
        if traced_value(self) is None and not _holds_traced((indices, values)):
            np.ndarray.put(self, indices, values, mode=mode)
        else:
            np.put(self, indices, values, mode=mode)

    def __setattr__(self, name, value):
        if name not in ("real", "imag", "shape", "dtype", "strides", "flat"):
            np.ndarray.__setattr__(self, name, value)
            return
        owner = _owner(self)
        if name in ("real", "imag") and owner.dtype.kind == "c" and (
                owner._shadow is not None or _holds_traced(value)):
            # w = np.empty(n, complex); w.real = x: the traced part of the complex value
            if owner is not self:
                raise UnsupportedError(f"setting .{name} of a view of a complex array with "
                                       f"traced values{_at(user_where())}: set it on the "
                                       "array itself")
            _promote(owner)
            setattr(owner._shadow, name, resolve(value))
            return
        if name in ("shape", "dtype", "strides", "flat") and (
                traced_value(self) is not None or _holds_traced(value)):
            raise UnsupportedError(
                f"setting x.{name} of an array holding traced values{_at(user_where())}: "
                "adjit follows new arrays, not changes of layout in place; write "
                + ("x = x.reshape(...)" if name == "shape" else "x = x.astype(...)"
                   if name == "dtype" else "x[...] = values" if name == "flat" else
                   "x = x.copy() with the layout you need"))
        np.ndarray.__setattr__(self, name, value)

    def __setitem__(self, key, value):
        owner = _owner(self)
        if getattr(type(value), "_adjit_complex", False) and owner.dtype.kind != "c":
            raise TypeError(
                f"storing complex values into a {owner.dtype} array{_at(user_where())}: NumPy "
                "would drop their imaginary parts (ComplexWarning); make the array complex "
                "(np.zeros(..., dtype=complex)) or store z.real")
        if owner._shadow is None and not _holds_traced(value) and not _holds_traced(key):
            np.ndarray.__setitem__(self, key, value)
            return
        if not np.ndarray.__getattribute__(self, "flags").writeable:
            # NumPy's read-only views (np.broadcast_to, x.diagonal(), windows) refuse writes,
            # traced ones too
            raise ValueError("assignment destination is read-only")
        _promote(owner)
        if owner is self:
            owner._shadow[key] = resolve(value)
            return
        k = resolve(key)
        if isinstance(k, Tracer) and k.dtype == np.bool_ and k.shape == self.shape:
            # v[v > 0.5] = c on a view: the mask selects, as x[mask] = c does on the owner
            from .functions import where
            from .masked import Selection, same_mask
            if isinstance(value, Selection) and not same_mask(value.mask, k):
                value._refuse("assigning x[mask2] into v[mask]")
            new = value.full if isinstance(value, Selection) else resolve(value)
            value, key = where(k, new, traced_value(self)), Ellipsis
        from .functions import index_target
        if owner.dtype.kind == "c":
            # a view of a complex array (u[2:] += x[2:]): each part written at the view's
            # positions; a view of one part (u.real[::2] = x) that part
            from .complex import split
            if self.dtype.kind != "c":
                which, grid = _part_positions(self, owner)
                part = (owner._shadow.re, owner._shadow.im)[which]
                part.assign_at(*index_target(part, key, resolve(value), grid=grid))
                return
            grid = _positions(self, owner)
            pieces = split(resolve(value))
            for part, v in zip((owner._shadow.re, owner._shadow.im), pieces):
                part.assign_at(*index_target(part, key, 0.0 if v is None else v, grid=grid))
            return
        owner._shadow.assign_at(*index_target(owner._shadow, key, resolve(value),
                                              grid=_positions(self, owner)))

    # -- NumPy protocols -------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.get("out")
        traced = any(_is_traced(x) for x in inputs) or (
            out is not None and any(_is_traced(o) for o in out))
        if method == "at" and isinstance(inputs[0], Buffer) and _holds_traced(inputs):
            # np.add.at(b, idx, traced): on b's value as a tracer, then stored back into b
            target = inputs[0]
            if _owner(target) is target and target.dtype.kind != "c" and \
                    ufunc in (np.add, np.subtract):
                _promote(target)       # its values so far: a constant the writes start from
            tv = traced_value(target)
            if tv is not None and _owner(target) is target and not getattr(
                    type(tv), "_adjit_complex", False):
                # b's value itself takes the update, as its collected writes (np.add.at of
                # an element's entries in an assembly loop touches only those)
                ufunc.at(tv, *[resolve(x) for x in inputs[1:]], **kwargs)
                return None
            value = (tv if tv is not None else _lifted(target)).copy_()
            ufunc.at(value, *[resolve(x) for x in inputs[1:]], **kwargs)
            target[...] = value
            return None
        if traced or (out is not None and any(isinstance(o, Buffer) for o in out) and (
                any(_holds_traced(x) for x in inputs) or _holds_traced(kwargs.get("where")))):
            if out is not None:
                kwargs = dict(kwargs)
                del kwargs["out"]
                (target,) = out
                where = kwargs.pop("where", True)
                casting = kwargs.pop("casting", "same_kind")
                r = getattr(ufunc, method)(*[resolve(x) for x in inputs], **kwargs)
                if where is not True:   # elsewhere the out array keeps its values
                    r = np.where(resolve(where), r, resolve(target))
                from .numpy_api import _check_cast
                _check_cast(r, target, casting, f"np.{ufunc.__name__}(..., out=x)")
                target[...] = r
                return target
            return getattr(ufunc, method)(*[resolve(x) for x in inputs], **kwargs)
        plain = [x.view(np.ndarray) if isinstance(x, Buffer) else x for x in inputs]
        if isinstance(kwargs.get("where"), Buffer):      # np.array([...]) made here
            kwargs = dict(kwargs, where=kwargs["where"].view(np.ndarray))
        if out is not None:
            kwargs = dict(kwargs, out=tuple(o.view(np.ndarray) if isinstance(o, Buffer) else o
                                            for o in out))
            getattr(ufunc, method)(*plain, **kwargs)
            return out[0] if len(out) == 1 else out
        return _made_here(getattr(ufunc, method)(*plain, **kwargs), plain)

    def __array_function__(self, func, types, args, kwargs):
        from .numpy_api import INPLACE
        if func in INPLACE and args and isinstance(args[0], Buffer) and _holds_traced(
                (args, kwargs)):
            # np.copyto(b, traced) & co: on b's value as a tracer, then stored back into b
            target = args[0]
            tv = traced_value(target)
            value = (tv if tv is not None else _lifted(target)).copy_()
            func(value, *_resolve_tree(args[1:]), **_resolve_tree(kwargs))
            target[...] = value
            return None
        if _holds_traced((args, kwargs)):
            out = kwargs.get("out")
            if isinstance(out, Buffer):
                # np.clip(v, lo, hi, out=v) into a Buffer (or a view of one): computed, then
                # stored into it, so the write reaches the array it views
                from .numpy_api import _NP_CLIP, _check_cast, out_casting
                rest = {k: v for k, v in kwargs.items() if k != "out"}
                where = rest.pop("where", True) if func is _NP_CLIP else True
                r = func(*_resolve_tree(args), **_resolve_tree(rest))
                if where is not True:
                    # np.clip is a ufunc: where the mask is False, out keeps its values
                    _check_cast(r, out, out_casting(func, kwargs), "np.clip(..., out=x)")
                    r = np.where(resolve(where), r.astype(out.dtype), resolve(out))
                # np.clip's ufunc casts same_kind; reductions store unsafely, as in NumPy
                _check_cast(r, out, out_casting(func, kwargs), f"np.{func.__name__}(..., out=x)")
                out[...] = r
                return out
            if _holds_promoted((args, kwargs)):
                from .numpy_api import _VIEWS
                if func in _VIEWS and not any(isinstance(x, Tracer)
                                              for x in _leaves((args, kwargs))):
                    # np.swapaxes(b.view(), 0, 1): NumPy's view through the array's own
                    # methods (a Buffer view, or its value's view), so later writes show
                    r = super().__array_function__(func, types, args, kwargs)
                    if type(r) in PLAIN_TYPES:      # np.einsum's plain view of the memory
                        r = views_of_buffers(r, (args, kwargs))
                    if isinstance(r, (Buffer, Tracer)):
                        return r
                return func(*_resolve_tree(args), **_resolve_tree(kwargs))
            if any(issubclass(t, Tracer) for t in types):
                return NotImplemented  # a Tracer argument: its own dispatch takes it
            # the traced arguments are ones NumPy does not dispatch on (np.take's indices):
            # this array's value joins the trace as a constant, and the Tracer takes it
            # (integer arrays stay NumPy's when a float one is lifted: np.arange(1) as the
            # axes of np.tensordot)
            floats = any(isinstance(x, Buffer) and x.dtype.kind in "fc"
                         for x in _leaves((args, kwargs)))
            lifted = _map_tree((args, kwargs), lambda x: x if not isinstance(x, Buffer) else
                               _lifted(x) if x.dtype.kind in "fc" or not floats else
                               x.view(np.ndarray))
            return func(*lifted[0], **lifted[1])
        from .numpy_api import _VIEWS
        if func in _VIEWS:  # np.transpose(b): a Buffer view, so later writes reach it
            r = super().__array_function__(func, types, args, kwargs)
            if type(r) in PLAIN_TYPES and not any(
                    np.may_share_memory(r, np.ndarray.view(x, np.ndarray))
                    for x in _leaves((args, kwargs)) if isinstance(x, np.ndarray)):
                return _made_here(r, _plain_tree(args))   # np.diag of a vector: a new array
            if type(r) in PLAIN_TYPES:
                # a plain view of a Buffer's memory (np.einsum's does not keep the subclass)
                views = views_of_buffers(r, (args, kwargs))
                if views is not None:
                    return views
            return r
        plain = _plain_tree(args)
        r = func(*plain, **_plain_tree(kwargs))
        views = views_of_buffers(r, (args, kwargs))
        return views if views is not None else _made_here(r, plain)


class FlatIter:
    """x.flat while tracing, as NumPy's flatiter: reading x.flat[k] copies the current value
    (traced values too), x.flat[k] = v writes into x, and it iterates (with .coords and .index,
    for np.ndenumerate). flat() gives x's current value flattened (a view of x)."""

    def __init__(self, flat, shape, base):
        self._flat, self._shape, self.base, self._pos = flat, tuple(shape), base, 0

    def __getitem__(self, key):
        r = self._flat()[key]
        if isinstance(r, Tracer):
            return r.copy_()
        return r.copy() if isinstance(r, np.ndarray) else r

    def __setitem__(self, key, value):
        """x.flat[k] = v: stored at x's elements in C order (a view's too: x.T.flat), the
        values repeated as NumPy's flatiter repeats them (x.flat[:4] = [7, 8])."""
        n = len(self)
        idx = np.arange(n)[key]
        coords = np.unravel_index(idx, self._shape)
        v = resolve(value)
        m = int(np.size(v)) if not isinstance(v, Tracer) else int(v.size)
        if idx.size and m not in (1, idx.size):
            reps = -(-idx.size // m)
            v = np.tile(np.ravel(v), reps)[:idx.size].reshape(idx.shape) if isinstance(
                v, Tracer) else np.resize(np.asarray(v), idx.shape)
        elif m == idx.size and np.ndim(v) != idx.ndim:
            v = np.reshape(v, idx.shape)
        self.base[coords] = v

    def __len__(self):
        return int(math.prod(self._shape))

    def __iter__(self):
        return self

    def __next__(self):
        if self._pos >= len(self):
            raise StopIteration
        self._pos += 1
        return self[self._pos - 1]

    @property
    def coords(self):
        if self._pos >= len(self):      # read once more at the end (np.ndenumerate)
            return (0,) * len(self._shape)
        return tuple(int(i) for i in np.unravel_index(self._pos, self._shape))

    @property
    def index(self):
        return self._pos

    def copy(self):
        """The values, flattened (a new array)."""
        return self[:]


# attributes that never need the traced value (and that NumPy reads internally)
_PLAIN_ATTRS = frozenset(("shape", "dtype", "ndim", "size", "itemsize", "nbytes", "base",
                          "strides", "flags", "view"))
# methods that write: the Buffer's own, which store into it (its owner's elements when it is
# a view), not its traced value's (a value read from the owner, written where no one looks)
_WRITERS = frozenset(("fill", "put", "sort"))


# methods whose arguments may be traced values while the array holds none (h.dot(W) of a
# zeros block at the first step of an RNN loop, b.max(initial=t), b.take(traced indices))
_ARG_METHODS = frozenset(("dot", "take", "choose", "clip", "max", "min", "sum", "prod", "mean",
                          "std", "var", "cumsum", "cumprod", "all", "any", "compress",
                          "searchsorted", "repeat", "round", "ptp", "trace"))


def _taking_traced(b, name, attr):
    def method(*args, **kwargs):
        if _holds_traced((args, kwargs)):
            # b's values join the trace as a constant; the method is then the Tracer's (b's
            # own function for choose: b holds the indices)
            if name == "choose":
                return np.choose(np.ndarray.view(b, np.ndarray), *args, **kwargs)
            return getattr(_lifted(b), name)(*_resolve_tree(args), **_resolve_tree(kwargs))
        # a new array computed from b (b.mean(0)) is made here too, as _make_op's results
        return _made_here(attr(*args, **kwargs), (np.ndarray.view(b, np.ndarray),))
    method.__name__ = name
    return method


def _make_op(name):
    def op(self, *args):
        tv = traced_value(self)
        if tv is None and not _holds_traced(args):
            plain = self.view(np.ndarray)
            return _made_here(getattr(plain, name)(*_plain_tree(args)), (plain,))
        if tv is None:
            tv = _lifted(self)
        return getattr(tv, name)(*[resolve(a) for a in args])
    op.__name__ = name
    return op


def views_of_buffers(r, inputs):
    """r with each plain array in it that views a Buffer among inputs (np.broadcast_to(b, ...),
    np.asarray(b, dtype=...), np.einsum('ii->i', b) take plain views of its memory) remade as
    a Buffer view of that Buffer's owner, so that it reads the traced values written later,
    as NumPy's view would; None when r holds no such view."""
    owners = {id(o): o for o in (_owner(x) for x in _leaves(inputs) if isinstance(x, Buffer))}
    if not owners:
        return None

    def rebase(a):
        if not isinstance(a, np.ndarray) or not a.size or (
                isinstance(a, Buffer) and id(_owner(a)) in owners):
            return a
        given, a = a, np.ndarray.view(a, np.ndarray)   # as_strided's: a Buffer on foreign memory
        for o in owners.values():
            mem = np.ndarray.view(o, np.ndarray)    # a Buffer would dispatch these calls
            if np.may_share_memory(a, mem) and np.shares_memory(a, mem):
                with warnings.catch_warnings():    # broadcast_arrays' views warn on export
                    warnings.simplefilter("ignore", FutureWarning)
                    offset = a.__array_interface__["data"][0] - \
                        mem.__array_interface__["data"][0]
                    writeable = a.flags.writeable
                v = np.ndarray.__new__(Buffer, a.shape, a.dtype, buffer=o, offset=offset,
                                       strides=a.strides)
                if not writeable:
                    v.flags.writeable = False
                return v
        return given
    if isinstance(r, (tuple, list)):
        items = [rebase(a) for a in r]
        if not any(x is not y for x, y in zip(items, r)):
            return None
        # a namedtuple (np.linalg.slogdet's SlogdetResult) takes its fields as arguments
        return type(r)(*items) if hasattr(r, "_fields") else type(r)(items)
    out = rebase(r)
    return out if out is not r else None


def _made_here(r, inputs):
    """A new float array computed from an array made in the traced function (P = F @ P @ F.T
    from P = np.eye(2)) is made there too: a Buffer, which may receive traced values later.
    Results that share memory with an input (views) and those NumPy's own code asks for stay
    plain."""
    if (type(r) not in PLAIN_TYPES or r.dtype.kind not in "biufc" or current() is None
            or not _user_asked()):
        return r
    arrays = [x for x in _leaves(inputs) if isinstance(x, np.ndarray)]
    if any(np.may_share_memory(r, x) for x in arrays):
        return r
    return Buffer(r)


def _leaves(obj):
    if isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _leaves(v)
    else:
        yield obj


def _user_asked():
    """Whether the nearest caller outside adjit is user code, not NumPy's own."""
    f = sys._getframe(1)
    while f is not None and (f.f_code.co_filename.startswith(_INTERNAL)
                             or f.f_code.co_filename == __file__):
        f = f.f_back
    return f is not None and not f.f_code.co_filename.startswith(_NUMPY_DIR)


def _make_iop(name, binary):
    def iop(self, other):
        if traced_value(self) is None and not _holds_traced(other):
            getattr(self.view(np.ndarray), name)(_plain_tree(other))
            return self
        from .numpy_api import _store
        current_value = traced_value(self)
        if current_value is None:
            current_value = _lifted(self)
        r = getattr(current_value, binary)(resolve(other))
        if getattr(type(r), "_adjit_complex", False):   # a complex array: z *= np.exp(1j * x)
            if tuple(r.shape) != tuple(self.shape):
                raise ValueError(f"non-broadcastable output operand with shape {self.shape} "
                                 f"doesn't match the broadcast shape {tuple(r.shape)}"
                                 f"{_at(user_where())} (as NumPy)")
            self[...] = r
            return self
        probe = current_value.copy_()
        _store(probe, r, f"x {name} y")  # NumPy's shape and casting rules for x op= y
        self[...] = probe
        return self
    iop.__name__ = name
    return iop


for _n in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
           "xor", "radd", "rsub", "rmul", "rtruediv", "rfloordiv", "rmod", "rpow", "rmatmul",
           "rand", "ror", "rxor", "lt", "le", "gt", "ge", "eq", "ne", "neg", "pos", "abs",
           "invert"):
    setattr(Buffer, f"__{_n}__", _make_op(f"__{_n}__"))
for _n in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
           "xor"):
    setattr(Buffer, f"__i{_n}__", _make_iop(f"__i{_n}__", f"__{_n}__"))
Buffer.__hash__ = None


# -- the traced value of a Buffer ----------------------------------------------------------------
_VIEW_ATTRS = frozenset(("T", "mT", "transpose", "swapaxes", "reshape", "squeeze", "ravel"))


def _view_or_value(b, name, tv):
    """b.T (or b.reshape(...)) of a Buffer view b: NumPy's view where it is one (it shares
    b's memory), else the traced value's."""
    def pick(r, args, kwargs):
        if isinstance(r, np.ndarray) and np.may_share_memory(np.ndarray.view(r, np.ndarray),
                                                             np.ndarray.view(b, np.ndarray)):
            return r
        attr = getattr(tv, name)
        return attr(*args, **kwargs) if args is not None else attr
    if name in ("T", "mT"):
        return pick(np.ndarray.__getattribute__(b, name), None, None)

    def method(*args, **kwargs):
        return pick(getattr(np.ndarray, name)(b, *args, **kwargs), args, kwargs)
    return method


def _fortran_order_read(b, name, tv):
    """b.ravel / reshape / flatten of an array made Fortran-ordered (np.zeros(shape,
    order="F")) holding traced values: order 'A' and 'K' read its memory order, which adjit
    does not follow there (refused, as for other Fortran-ordered arrays made inside)."""
    def method(*args, **kwargs):
        order = kwargs.get("order", args[0] if name in ("ravel", "flatten") and args else
                           args[-1] if name == "reshape" and args and isinstance(args[-1], str)
                           else "C")
        if order in ("A", "K"):
            raise UnsupportedError(
                f"{name} with order={order!r} of an array made Fortran-ordered (order='F')"
                f"{_at(user_where())}: the result depends on the memory layout, which adjit "
                "does not follow there; write order='F' (the layout NumPy has here) or 'C'")
        inner = _view_or_value(b, name, tv) if _owner(b) is not b else getattr(tv, name)
        return inner(*args, **kwargs)
    return method


def _basic(key) -> bool:
    """Is key basic indexing (ints, slices, None, ...), which NumPy answers with a view?"""
    keys = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or isinstance(k, (slice, int, np.integer))
               and not isinstance(k, (bool, np.bool_)) for k in keys)


def _owner(b):
    base = np.ndarray.__getattribute__(b, "base")
    if isinstance(base, Buffer):
        return _owner(base)     # NumPy's base is the owner, or a Buffer on foreign memory
    via = np.ndarray.__getattribute__(b, "_via")
    return via if via is not None else b


def _memory_owner(plain):
    """The Buffer of the active trace whose memory the plain array lies in, else None."""
    ctx = current()
    for ref in ctx.buffers if ctx is not None else ():
        o = ref()
        if o is None or not o.flags.owndata:
            continue
        mem = np.ndarray.view(o, np.ndarray)
        if plain.size and np.may_share_memory(plain, mem) and np.shares_memory(plain, mem):
            return o
    return None


def traced_value(b):
    """The Tracer a promoted Buffer (or a view of one) stands for, else None."""
    owner = _owner(b)
    if owner._shadow is None:
        return None
    if getattr(owner, "_fortran", False):
        # made Fortran-ordered (np.zeros(shape, order="F")): what is computed from its value
        # has that layout, which a later order='A'/'K' read would need (refused there,
        # numpy_api._transposed_upstream)
        owner._shadow.ctx.graph.meta.setdefault("fortran_nodes", set()).add(owner._shadow.id)
    return owner._shadow if owner is b else _view_value(b, owner)


def _is_traced(x):
    return isinstance(x, Tracer) or getattr(type(x), "_adjit_complex", False) or (
        isinstance(x, Buffer) and traced_value(x) is not None)


def _holds_traced(obj):
    if _is_traced(obj):
        return True
    if isinstance(obj, (list, tuple)):
        return any(_holds_traced(v) for v in obj)
    if isinstance(obj, dict):
        return any(_holds_traced(v) for v in obj.values())
    if isinstance(obj, slice):
        return any(_holds_traced(v) for v in (obj.start, obj.stop, obj.step))
    return False


def _holds_promoted(obj):
    if isinstance(obj, Buffer):
        return traced_value(obj) is not None
    if isinstance(obj, (list, tuple)):
        return any(_holds_promoted(v) for v in obj)
    if isinstance(obj, dict):
        return any(_holds_promoted(v) for v in obj.values())
    return False


def resolve(x):
    """x, or the Tracer standing for it when x is a promoted Buffer."""
    if isinstance(x, Buffer):
        tv = traced_value(x)
        return tv if tv is not None else x.view(np.ndarray)
    return x


def _map_tree(obj, fn):
    """fn applied to every leaf of nested lists, tuples and dicts (NumPy's arguments)."""
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_map_tree(v, fn) for v in obj)
    if isinstance(obj, dict):
        return {k: _map_tree(v, fn) for k, v in obj.items()}
    return fn(obj)


def _resolve_tree(obj):
    return _map_tree(obj, resolve)


def _plain_tree(obj):
    return _map_tree(obj, lambda x: x.view(np.ndarray) if isinstance(x, Buffer) else x)


def _lifted(b):
    """b's current (plain) value as a constant of the active trace (a complex one: its two
    parts, complex.py)."""
    from .functions import lift
    plain = np.array(b.view(np.ndarray))
    if plain.dtype.kind == "c":
        from .complex import make
        part = plain.real.dtype
        return make(lift(plain.real.copy(), part, current()),
                    lift(plain.imag.copy(), part, current()))
    return lift(plain, plain.dtype, current())


def _promote(owner):
    if owner._shadow is not None:
        return
    ctx = current()
    if ctx is None:
        raise UnsupportedError(f"a traced value was stored into an array after its trace ended"
                               f"{_at(user_where())}")
    if not owner.flags.c_contiguous:
        raise UnsupportedError(f"a traced value is stored into a non-contiguous array"
                               f"{_at(user_where())}; make it with np.zeros/np.empty/... "
                               "(or .copy() it) first")
    if owner.dtype.kind == "c":
        # a complex array (np.zeros(..., complex) filled with a spectrum): its value is a
        # traced complex array of the two parts (complex.py), written through as any other
        from .complex import make
        from .functions import lift
        plain = np.array(owner.view(np.ndarray))
        part = plain.real.dtype
        shadow = make(lift(plain.real.copy(), part, ctx).copy_(),
                      lift(plain.imag.copy(), part, ctx).copy_())
    else:
        shadow = _lifted(owner).copy_()
    np.ndarray.__setattr__(owner, "_shadow", shadow)
    ctx.promoted.append(owner)
    if owner.dtype.kind in "fc":
        owner.view(np.ndarray)[...] = np.nan  # any read behind adjit's back shows NaN


def refuse_stale_view(value, ctx):
    """A plain NumPy array sharing memory with a promoted Buffer is a view NumPy took behind
    adjit's back, before the traced write: its numbers are stale (NaN)."""
    value = np.ndarray.view(value, np.ndarray)
    for owner in ctx.promoted:
        mem = np.ndarray.view(owner, np.ndarray)    # a Buffer would dispatch these calls
        if np.may_share_memory(value, mem) and np.shares_memory(value, mem):
            raise UnsupportedError(
                f"an array read here is a view of an array that later received traced "
                f"values{_at(user_where())}, taken before that write with a function adjit "
                "does not follow for views (np.broadcast_to, np.asarray(x, dtype=...), "
                "sliding_window_view, np.einsum, x.flat, ...): it would hold the old numbers. "
                "Take the view after the write, or with indexing and reshapes (c[:1], c.T, "
                "c.reshape(...)), which adjit follows")


def _positions(view, owner):
    """The flat positions in `owner` of each element of the NumPy view `view`."""
    item = owner.itemsize
    if view.itemsize != item:
        raise UnsupportedError(f"a view with another dtype (.view(...)) of an array holding "
                               f"traced values{_at(user_where())}")
    offset = (view.__array_interface__["data"][0] - owner.__array_interface__["data"][0])
    pos = np.arange(owner.size, dtype=np.intp)
    return np.lib.stride_tricks.as_strided(
        pos[offset // item:], shape=view.shape,
        strides=tuple(s // item * pos.itemsize for s in view.strides)).copy()


def _part_positions(view, owner):
    """(0 for the real part, 1 for the imaginary; the flat positions in owner of each
    element) of a float view of one part of a complex Buffer (u.real, u.imag[::2])."""
    item = owner.itemsize
    offset = (view.__array_interface__["data"][0] - owner.__array_interface__["data"][0])
    which = (offset % item) // view.itemsize
    if view.itemsize * 2 != item or offset % view.itemsize or any(
            s % item for s in view.strides):
        raise UnsupportedError(f"a view with another dtype (.view(...)) of a complex array "
                               f"holding traced values{_at(user_where())}")
    pos = np.arange(owner.size, dtype=np.intp)
    return which, np.lib.stride_tricks.as_strided(
        pos[offset // item:], shape=view.shape,
        strides=tuple(s // item * pos.itemsize for s in view.strides)).copy()


def _view_value(view, owner):
    """The current value of a view of a promoted Buffer, read from its shadow."""
    from .functions import gather, reshape
    shadow = owner._shadow
    if getattr(type(shadow), "_adjit_complex", False) and view.dtype.kind != "c":
        which, pos = _part_positions(view, owner)
        part = (shadow.re, shadow.im)[which]
        return reshape(gather(reshape(part, (-1,)), [pos.reshape(-1)], (("a", 0),)),
                       view.shape).copy_()
    pos = _positions(view, owner)
    if getattr(type(shadow), "_adjit_complex", False):
        from .complex import make
        parts = [reshape(gather(reshape(p, (-1,)), [pos.reshape(-1)], (("a", 0),)),
                         view.shape).copy_() for p in (shadow.re, shadow.im)]
        return make(*parts)
    if shadow._pending is not None:
        # the shadow's collected writes hold the view's elements (K[e:e+2, e:e+2] += ke in
        # an assembly loop reads the last few writes, not all of K)
        nid = shadow.read_pending(pos)
        if nid is not None:
            return Tracer(shadow.ctx, nid)
    flat = reshape(shadow, (-1,))
    return reshape(gather(flat, [pos.reshape(-1)], (("a", 0),)), view.shape).copy_()


# -- the constructors that make Buffers while a trace is active ---------------------------------
_MAKERS = ("zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like",
           "full_like", "eye", "identity", "arange", "linspace", "logspace", "geomspace",
           "copy", "tri", "fromfunction", "meshgrid")


_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__)) + os.sep


def _from_user(depth=2):
    fn = sys._getframe(depth).f_code.co_filename
    return not fn.startswith(_INTERNAL) and not fn.startswith(_NUMPY_DIR)


def making_buffers(orig):
    """Wrap a NumPy constructor: a float result asked for by user code becomes a Buffer."""
    def maker(*args, **kwargs):
        if orig.__name__ in ("full", "full_like") and len(args) > 1 and _holds_traced(args[1]):
            return _traced_full(orig.__name__, *args, **kwargs)
        if orig.__name__ in ("arange", "eye", "identity", "tri") and current() is not None:
            for a in args:      # a size or bound of a Python int argument: name it
                if isinstance(a, Tracer) and not a.shape and a.dtype.kind in "biu":
                    a._concrete(f"np.{orig.__name__}'s size")
        r = orig(*args, **kwargs)
        if current() is None or not _from_user():
            return r
        if type(r) in PLAIN_TYPES and r.dtype.kind in "biufc":
            return Buffer(r)
        if isinstance(r, (list, tuple)) and all(
                type(a) in PLAIN_TYPES and a.dtype.kind in "biufc" for a in r):
            # np.meshgrid's copies (a grid filled in a loop); its copy=False views stay plain
            return type(r)(Buffer(a) if a.flags.owndata else a for a in r)
        return r
    maker.__name__ = orig.__name__
    maker.__doc__ = orig.__doc__
    maker.__wrapped__ = orig
    return maker


def _traced_full(name, first, fill_value, dtype=None, *args, **kwargs):
    """np.full(shape, v) / np.full_like(a, v) with a traced v: v broadcast, as a new array."""
    from . import functions as F
    from .numpy_api import _from_nested
    v = resolve(fill_value)
    if isinstance(v, (list, tuple)):
        v = _from_nested(v, np.asarray)
    if name == "full":
        shape = tuple(first) if isinstance(first, (tuple, list)) else (int(first),)
        dtype = dtype if dtype is not None else v.dtype
    else:
        shape = F._shape_of(first)
        dtype = dtype if dtype is not None else F._dtype_of(first)
    return F.broadcast_to(F.cast(v, dtype), shape).copy_()
