"""Pytrees: nested dicts, lists, tuples, namedtuples and dataclass instances of arrays,
flattened to leaves and rebuilt.

A treedef is hashable, so it is part of the compile cache key; leaf paths give inputs
readable names (`params['W1']`).
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import types

import numpy as np

LEAF = ("leaf",)
# what a dataclass field may hold as configuration: part of the treedef, not traced
_STATIC = (str, bytes, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
           functools.partial, np.ufunc)


def flatten(tree, path="x"):
    """-> (leaves, treedef, paths). None is an empty subtree."""
    leaves, paths = [], []
    treedef = _flatten(tree, path, leaves, paths)
    return leaves, treedef, paths


def _flatten(t, path, leaves, paths, nested=False):
    if isinstance(t, dict):
        keys = tuple(t.keys())
        children = tuple(_flatten(t[k], f"{path}[{k!r}]", leaves, paths, True) for k in keys)
        if isinstance(t, collections.OrderedDict):   # rebuilt as one, as JAX does
            return ("dict", keys, children, collections.OrderedDict)
        if isinstance(t, collections.defaultdict):   # with its default factory, as JAX does
            return ("dict", keys, children, _DefaultDict(t.default_factory))
        return ("dict", keys, children)
    if isinstance(t, tuple) and hasattr(t, "_fields"):
        return ("namedtuple", type(t), tuple(_flatten(v, f"{path}.{f}", leaves, paths, True)
                                             for f, v in zip(t._fields, t)))
    if isinstance(t, (list, tuple)):
        kind = "list" if isinstance(t, list) else "tuple"
        return (kind, len(t), tuple(_flatten(v, f"{path}[{i}]", leaves, paths, True)
                                    for i, v in enumerate(t)))
    if dataclasses.is_dataclass(t) and not isinstance(t, type):
        # a dataclass of parameters: its fields are the children, rebuilt without calling
        # __init__ or __post_init__ (a gradient has the argument's class, as in JAX)
        # fields holding strings or functions (an activation's name) are static, and so are
        # fields declared field(metadata={"static": True}) (a layer count, as flax's
        # pytree_node=False)
        fields = dataclasses.fields(t)
        names = tuple(f.name for f in fields)
        return ("dataclass", (type(t), names), tuple(
            ("static", Static(getattr(t, f.name), f"{path}.{f.name}"), ())
            if isinstance(getattr(t, f.name), _STATIC) or
            f.metadata.get("static") or f.metadata.get("pytree_node") is False
            else _flatten(getattr(t, f.name), f"{path}.{f.name}", leaves, paths, True)
            for f in fields))
    if t is None:
        return ("none",)
    if nested and isinstance(t, (str, bytes)):
        # a string inside a dict or list argument (CS231n's bn_param["mode"]) is
        # configuration, static as a string argument is: one program per value (a string
        # argument itself is static unless argnums differentiates it: refused then)
        return ("static", Static(t, path), ())
    if getattr(type(t), "_adjit_complex", False) or (
            isinstance(t, (complex, np.ndarray, np.generic)) and np.iscomplexobj(t)) or (
            hasattr(type(t), "__cuda_array_interface__") and np.dtype(t.dtype).kind == "c"):
        # a complex array (traced ones: frontend/complex.py) is its real and imaginary parts,
        # two float leaves, rebuilt as one complex array
        if hasattr(type(t), "__cuda_array_interface__"):
            t = _Parts(t.real.copy(), t.imag.copy())   # a complex CuPy array: its parts, on the GPU
        elif not getattr(type(t), "_adjit_complex", False):
            t = _Parts(np.real(t), np.imag(t))
        return ("complex", None, (_flatten(t.re, f"{path}.real", leaves, paths, True),
                                  _flatten(t.im, f"{path}.imag", leaves, paths, True)))
    leaves.append(t)
    paths.append(path)
    return LEAF


class _DefaultDict:
    """Rebuilds a collections.defaultdict with its factory; equal for equal factories (a
    treedef is part of a compiled program's cache key)."""

    def __init__(self, factory):
        self.factory = factory

    def __call__(self, d):
        return collections.defaultdict(self.factory, d)

    def __eq__(self, other):
        return isinstance(other, _DefaultDict) and other.factory == self.factory

    def __hash__(self):
        return hash(("defaultdict", self.factory))

    def __repr__(self):
        return f"defaultdict({getattr(self.factory, '__name__', self.factory)})"


def typed_key(v):
    """v with the type of every item beside it: 1, 1.0 and True are equal (and hash alike)
    but trace different programs, and so do 0.0 and -0.0 (1 / s), also inside tuples; a dict
    or list of such values (a layer's {'stride': 1, 'pad': 1}) is keyed by its items in
    their order (a loop over a dict's items runs in that order), so it may be static too."""
    if isinstance(v, (tuple, list)):
        return (type(v), tuple(typed_key(x) for x in v))
    if isinstance(v, dict):
        return (type(v), tuple((typed_key(k), typed_key(x)) for k, x in v.items()))
    if isinstance(v, (float, np.floating)) and not isinstance(v, np.longdouble):
        return (type(v), float(v).hex())    # -0.0 apart from 0.0; a NaN equals itself
    if isinstance(v, (complex, np.complexfloating)) and not isinstance(v, np.clongdouble):
        return (type(v), complex(v).real.hex(), complex(v).imag.hex())
    return (type(v), v)


class Static:
    """A dataclass field held as configuration in a treedef: equal and hashed by its typed
    key, so a field of 2 and one of 2.0 make two programs and a list may be held."""
    __slots__ = ("value", "key")

    def __init__(self, value, path="x"):
        self.value, self.key = value, typed_key(value)
        try:
            hash(self.key)
        except TypeError:
            raise TypeError(f"the static field {path} holds {type(value).__name__} {value!r}, "
                            "which is not hashable: adjit keys compiled programs by the values "
                            "of static fields (numbers, strings, tuples, lists and dicts of "
                            "them); make the field an array leaf (drop its static metadata) or "
                            "hold a hashable value") from None

    def __eq__(self, other):
        return isinstance(other, Static) and self.key == other.key

    def __hash__(self):
        return hash(self.key)

    def __repr__(self):
        return repr(self.value)


class _Parts:
    def __init__(self, re, im):
        self.re, self.im = re, im


def copy_arrays(tree):
    """tree with each concrete array leaf copied (NumPy's and CuPy's .copy()); traced
    values, numbers and None stay as they are."""
    leaves, treedef, _ = flatten(tree)
    return unflatten(treedef, [x.copy() if hasattr(x, "__array_interface__") or hasattr(
        x, "__cuda_array_interface__") else x for x in leaves])


def unflatten(treedef, leaves):
    it = iter(leaves)
    out = _unflatten(treedef, it)
    return out


def _unflatten(td, it):
    kind = td[0]
    if kind == "leaf":
        return next(it)
    if kind == "none":
        return None
    if kind == "static":
        return td[1].value
    if kind == "complex":
        re, im = _unflatten(td[2][0], it), _unflatten(td[2][1], it)
        from .tracer import Tracer
        if isinstance(re, Tracer) and isinstance(im, Tracer) and re.shape == im.shape and \
                re.dtype == im.dtype:     # traced real parts
            from .complex import ComplexTracer
            return ComplexTracer(re, im)
        return _joined(re, im)
    if kind == "dict":
        d = {k: _unflatten(c, it) for k, c in zip(td[1], td[2])}
        return td[3](d) if len(td) > 3 else d
    if kind == "namedtuple":
        return td[1](*[_unflatten(c, it) for c in td[2]])
    if kind == "dataclass":
        cls, names = td[1]
        obj = cls.__new__(cls)
        for f, c in zip(names, td[2]):
            object.__setattr__(obj, f, _unflatten(c, it))   # frozen ones too
        return obj
    children = [_unflatten(c, it) for c in td[2]]
    return children if kind == "list" else tuple(children)


def _joined(re, im):
    """The complex array with parts re and im (NumPy's or CuPy's; numbers give a Python or
    NumPy complex), written part by part: re + 1j * im would turn an infinite imaginary part
    into a NaN real one (1j * inf is nan + inf j)."""
    if getattr(type(re), "_adjit_complex", False) or getattr(type(im), "_adjit_complex", False):
        return re + 1j * im     # complex parts (a Hessian's blocks, traced)
    xp = np
    if hasattr(re, "__cuda_array_interface__"):
        import cupy as xp
    re, im = xp.asarray(re), xp.asarray(im)
    shape = np.broadcast_shapes(re.shape, im.shape)
    z = xp.empty(shape, np.result_type(re.dtype, im.dtype, np.complex64))
    z.real[...] = re
    z.imag[...] = im
    return z[()] if not shape and xp is np else z


def num_leaves(treedef) -> int:
    if treedef[0] == "leaf":
        return 1
    if treedef[0] == "none":
        return 0
    return sum(num_leaves(c) for c in treedef[2])


def leaf_ranges(in_trees):
    """Argument index -> range of its leaves among the flattened inputs (static arguments,
    whose treedef is None, have none)."""
    ranges, pos = {}, 0
    for i, tree in enumerate(in_trees):
        if tree is not None:
            n = num_leaves(tree)
            ranges[i] = range(pos, pos + n)
            pos += n
    return ranges


def flatten_like(tree, treedef, what="value"):
    """The leaves of `tree` in the order of `treedef` (a dict's leaves follow treedef's keys,
    not tree's insertion order). A tuple, list or namedtuple matches any of the three with as
    many children. Raises ShapeError naming the first place where the structures differ."""
    from ..ir.errors import ShapeError
    out = []

    def walk(t, td, path):
        kind = td[0]
        if kind == "leaf":
            if isinstance(t, (dict, list, tuple)) or t is None or (
                    dataclasses.is_dataclass(t) and not isinstance(t, type)):
                raise ShapeError(f"{what}: expected an array at {path}, got "
                                 f"{type(t).__name__}")
            out.append(t)
        elif kind == "none":
            if t is not None:
                raise ShapeError(f"{what}: expected None at {path}, got {type(t).__name__}")
        elif kind == "static":
            pass
        elif kind == "complex":
            out.append(np.real(t))
            out.append(np.imag(t))
        elif kind == "dataclass":
            cls, names = td[1]
            if type(t) is not cls:
                raise ShapeError(f"{what}: expected a {cls.__name__} at {path}, got "
                                 f"{type(t).__name__}")
            for f, c in zip(names, td[2]):
                walk(getattr(t, f), c, f"{path}.{f}")
        elif kind == "dict":
            if not isinstance(t, dict) or set(t) != set(td[1]):
                got = (f"keys {', '.join(sorted(map(repr, t)))}" if isinstance(t, dict) else
                       type(t).__name__)
                raise ShapeError(f"{what}: expected a dict with keys "
                                 f"{', '.join(sorted(map(repr, td[1])))} at {path}, got {got}")
            for k, c in zip(td[1], td[2]):
                walk(t[k], c, f"{path}[{k!r}]")
        else:
            if not isinstance(t, (list, tuple)) or len(t) != len(td[2]):
                got = (f"{type(t).__name__} of length {len(t)}"
                       if isinstance(t, (list, tuple)) else type(t).__name__)
                raise ShapeError(f"{what}: expected a {kind} of length {len(td[2])} at {path}, "
                                 f"got {got}")
            for i, (v, c) in enumerate(zip(t, td[2])):
                walk(v, c, f"{path}[{i}]")
    walk(tree, treedef, what)
    return out
