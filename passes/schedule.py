"""Scheduling: graph -> the same graph with one linear order, last uses and a memory estimate.

The result's meta["schedule"] is a `Schedule`. Memory model (the one `measure_peak_memory`
measures): every non-view node allocates its result; views (broadcast_to, reshape of a
contiguous value, transpose, slice) alias their base, which stays alive until its last view
dies; inputs and constants are not counted; outputs live to the end.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.graph import Graph
from ..ir.ops import OPS


@dataclass
class Schedule:
    order: list
    last_use: dict            # node -> step index of its last reader (or its own step)
    frees: dict               # step index -> nodes whose names can be dropped after it
    alloc: dict               # node -> bytes it allocates
    base: dict                # node -> node whose buffer it uses
    live_bytes: list          # bytes allocated by the program and alive at each step
    peak_bytes: int = 0
    notes: dict = field(default_factory=dict)


def _contiguous(g, n, memo):
    if n in memo:
        return memo[n]
    d = g[n]
    kind = OPS[d["op"]].kind
    if kind == "view":
        if d["op"] == "reshape":
            r = _contiguous(g, d["args"][0], memo)
        else:
            r = False
    else:
        r = True
    memo[n] = r
    return r


def is_view(g: Graph, n, memo=None) -> bool:
    """Does node n share its argument's buffer in NumPy (no allocation)?"""
    d = g[n]
    if OPS[d["op"]].kind != "view":
        return False
    if d["op"] == "reshape":
        # reshaping a transposed or broadcast view copies
        return _contiguous(g, d["args"][0], memo if memo is not None else {})
    return True


def order_nodes(g: Graph) -> list:
    """Creation order, which follows the forward pass then the reverse sweep."""
    return g.nodes()


def schedule(g: Graph, order=None) -> Graph:
    """Return a copy of g with meta["schedule"] filled in."""
    order = list(order or order_nodes(g))
    pos = {n: i for i, n in enumerate(order)}
    memo = {}
    base, alloc = {}, {}
    for n in order:
        d = g[n]
        if d["op"] in ("input", "const"):
            base[n], alloc[n] = n, 0
        elif is_view(g, n, memo):
            base[n], alloc[n] = base[d["args"][0]], 0
        else:
            base[n], alloc[n] = n, g.nbytes(n)
    end = len(order)
    last_use = {n: pos[n] for n in order}
    for n in order:
        for a in g.args(n):
            last_use[a] = max(last_use[a], pos[n])
    for o in g.outputs:
        last_use[o] = end
    buf_end = {}
    for n in order:
        b = base[n]
        buf_end[b] = max(buf_end.get(b, -1), last_use[n])
    frees = {}
    for n in order:
        if last_use[n] < end and g[n]["op"] != "input":
            frees.setdefault(last_use[n], []).append(n)
    free_bytes = {}
    for b, e in buf_end.items():
        if e < end and alloc.get(b, 0):
            free_bytes[e] = free_bytes.get(e, 0) + alloc[b]
    live, cur, peak = [], 0, 0
    for i, n in enumerate(order):
        cur += alloc[n]
        live.append(cur)
        peak = max(peak, cur)
        cur -= free_bytes.get(i, 0)
    new = g.copy()
    new.meta["schedule"] = Schedule(order, last_use, frees, alloc, base, live, peak)
    return new
