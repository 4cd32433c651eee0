"""Simplification: graph -> equivalent smaller graph.

Removes dead code, merges common subexpressions, folds small constants, and applies the
algebraic identities registered in the op table (x*1, x+0, --x, transpose of transpose, no-op
reshapes and casts). Node ids stay in topological order; outputs keep their positions.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.graph import Graph
from ..ir.ops import OPS

_FOLD_LIMIT = 4096  # constants larger than this are not materialised by folding


def _attr_key(attrs):
    items = []
    for k, v in sorted(attrs.items()):
        if isinstance(v, np.ndarray):
            v = ("arr", v.dtype.str, v.shape, v.tobytes() if v.size <= 65536 else id(v))
        elif isinstance(v, np.dtype):
            v = v.str
        else:
            v = repr(v)
        items.append((k, v))
    return tuple(items)


def constant_value(g: Graph, n):
    """The values of a constant node (seen through broadcasts/reshapes), else None."""
    while g[n]["op"] in ("broadcast_to", "reshape"):
        n = g[n]["args"][0]
    return np.asarray(g[n]["attrs"]["value"]) if g[n]["op"] == "const" else None


def uniform_value(g: Graph, n):
    """The single value of a constant node (seen through broadcasts/reshapes), else None."""
    v = constant_value(g, n)
    if v is None or v.size == 0:
        return None
    first = v.flat[0]
    if v.size > 1 and not np.all(v == first):
        return None
    if v.size > 1 and v.dtype.kind in "fc" and first == 0 and \
            not np.all(np.signbit(v) == np.signbit(first)):
        return None     # zeros of both signs: not one value (x + [-0.0, 0.0] is not x)
    return first.item()


class _Emitter:
    """Lets a registry rewrite rule add nodes (with CSE) to the graph being built."""

    def __init__(self, new, d, seen):
        self.new, self.d, self.seen = new, d, seen

    def users(self, nid):
        return self.new.meta["_users"].get(nid, 0)

    def __call__(self, op, args, attrs):
        opdef = OPS[op]
        shapes = [self.new[a]["shape"] for a in args]
        dtypes = [self.new[a]["dtype"] for a in args]
        d = dict(self.d, shape=tuple(opdef.shape(shapes, attrs)),
                 dtype=opdef.dtype(dtypes, attrs), name=None)
        return _rewrite(self.new, d | {"op": op, "attrs": attrs}, tuple(args), self.seen)


def simplify(g: Graph) -> Graph:
    """Return a simplified copy of g (g is unchanged)."""
    out = _simplify_once(g)
    # a rewrite can leave the node it replaced without users: one more sweep removes it
    return _simplify_once(out) if len(_live(out)) < len(out) else out


def _live(g):
    """Inputs, outputs and everything an output depends on (one walk from all outputs)."""
    live = set(g.inputs)
    todo = [o for o in g.outputs]
    while todo:
        n = todo.pop()
        if n in live and n not in g.inputs:
            continue
        live.add(n)
        todo.extend(a for a in g.args(n) if a not in live)
    return live


def _simplify_once(g: Graph) -> Graph:
    live = _live(g)
    new = Graph()
    new.meta = dict(g.meta)
    m = {}
    seen = {}
    users = {}
    for n in live:
        for a in g.args(n):
            users[a] = users.get(a, 0) + 1
    new.meta["_users"] = {}
    for n in g.nodes():
        if n not in live:
            continue
        d = g[n]
        if d["op"] == "input":
            m[n] = new.add("input", (), d["shape"], d["dtype"], d["attrs"], d["name"],
                           d["where"])
            new.inputs.append(m[n])
            continue
        args = tuple(m[a] for a in d["args"])
        for a_old, a_new in zip(d["args"], args):
            new.meta["_users"][a_new] = users.get(a_old, 0)
        m[n] = _rewrite(new, d, args, seen)
    assert [m[i] for i in g.inputs] == new.inputs
    new.outputs = [m[o] for o in g.outputs]
    del new.meta["_users"]
    return new


def _rewrite(new, d, args, seen):
    op, attrs = d["op"], d["attrs"]
    opdef = OPS[op]
    # identities registered on the op
    if opdef.noop is not None and len(args) == 1 and opdef.noop(attrs, new[args[0]]["shape"],
                                                                new[args[0]]["dtype"]):
        return args[0]
    if opdef.identity is not None:
        k = opdef.identity([uniform_value(new, a) for a in args])
        if k is not None and new[args[k]]["shape"] == d["shape"] \
                and new[args[k]]["dtype"] == d["dtype"]:
            return args[k]
    if opdef.chain is not None and len(args) == 1 and new[args[0]]["op"] == op:
        inner = new[args[0]]
        combined = opdef.chain(inner["attrs"], attrs)
        if combined == "identity":
            return inner["args"][0]
        args, attrs = inner["args"], combined
        if opdef.noop is not None and opdef.noop(attrs, new[args[0]]["shape"],
                                                 new[args[0]]["dtype"]):
            return args[0]
    if opdef.rewrite is not None:
        r = opdef.rewrite(_Emitter(new, d, seen), attrs, [new[a] | {"id": a} for a in args])
        if r is not None:
            if new[r]["name"] is None:
                new[r]["name"] = d["name"]
            return r
    # an elementwise op of uniform constants (broadcasts of scalars) is a broadcast scalar:
    # computed as a full array it would reach later ops as a plain array where fused code
    # (which inlines scalars) passes a scalar, and NumPy takes different paths for the two
    # (power with a stride-0 exponent of 2, 0.5 or -1 squares, roots or divides; with an
    # array of them it calls pow), so fused and unfused programs would differ in the last bit
    if opdef.kind == "elementwise" and args and d["shape"] != () \
            and not all(new[a]["op"] == "const" and new[a]["shape"] == d["shape"]
                        and math.prod(d["shape"]) <= _FOLD_LIMIT
                        for a in args):
        consts = [uniform_value(new, a) for a in args]
        if all(c is not None for c in consts):
            vals = [np.asarray(c, dtype=new[a]["dtype"]) for c, a in zip(consts, args)]
            with np.errstate(all="ignore"):   # a folded 0 / 0 is a NaN, not a warning
                value = np.asarray(opdef.numpy(*vals, **attrs)).astype(d["dtype"])
            c = _rewrite(new, dict(d, op="const", shape=(), name=None,
                                   attrs={"value": value, "dtype": value.dtype}), (), seen)
            return _rewrite(new, dict(d, op="broadcast_to", attrs={"shape": d["shape"]}),
                            (c,), seen)
    # constant folding of small values
    # broadcasts of constants stay views: folding them would materialise big arrays (a small
    # one is read as its value by a non-elementwise op: the cotangent seed's concatenate)
    if args and op != "broadcast_to" and math.prod(d["shape"]) <= _FOLD_LIMIT \
            and all(_const_value(new, a, opdef.kind != "elementwise") is not None
                    for a in args):
        vals = [_const_value(new, a, True) for a in args]
        with np.errstate(all="ignore"):
            value = np.asarray(opdef.numpy(*vals, **attrs)).astype(d["dtype"])
        attrs, args, op = {"value": value, "dtype": value.dtype}, (), "const"
    key = (op, args, _attr_key(attrs))
    if key in seen:
        return seen[key]
    nid = new.add(op, args, d["shape"], d["dtype"], attrs, d["name"], d["where"])
    seen[key] = nid
    return nid


def _const_value(g, n, broadcasts):
    """The value of a constant node; with broadcasts, of a small broadcast of one too."""
    d = g[n]
    if d["op"] == "const":
        return d["attrs"]["value"]
    if broadcasts and d["op"] == "broadcast_to" and g[d["args"][0]]["op"] == "const" \
            and math.prod(d["shape"]) <= _FOLD_LIMIT:
        return np.broadcast_to(g[d["args"][0]]["attrs"]["value"], d["shape"])
    return None
