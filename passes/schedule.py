"""Scheduling: graph -> the same graph with one linear order, last uses and a memory estimate.

The result's meta["schedule"] is a `Schedule`. Memory model (the one `measure_peak_memory`
measures): every non-view node allocates its result; views (broadcast_to, reshape of a
contiguous value, transpose, slice) alias their base, which stays alive until its last view
dies; inputs and constants are not counted; outputs live to the end. "Working" memory is the
same count less the results already computed (the gradients a training step returns).
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
    result_bytes: list = field(default_factory=list)  # of live_bytes, results (kept to the end)
    peak_working_bytes: int = 0                        # max of live_bytes - result_bytes


def kind(op) -> str:
    """The registry kind of an op; ops made by passes (fused groups) compute new values."""
    opdef = OPS.get(op)
    return opdef.kind if opdef is not None else "computed"


def flops(g: Graph, n) -> int:
    """FLOPs of one node from the registry (a pass-made node may carry attrs["flops"])."""
    d = g[n]
    opdef = OPS.get(d["op"])
    if opdef is None:
        return int(d["attrs"].get("flops", 0))
    return int(opdef.flops(d["shape"], [g[a]["shape"] for a in d["args"]], d["attrs"]))


def _contiguous(g, n, memo):
    if n in memo:
        return memo[n]
    d = g[n]
    if kind(d["op"]) == "view":
        r = d["op"] == "reshape" and _contiguous(g, d["args"][0], memo)
    else:
        r = True
    memo[n] = r
    return r


def is_view(g: Graph, n, memo=None) -> bool:
    """Does node n share its argument's buffer in NumPy (no allocation)?"""
    d = g[n]
    if kind(d["op"]) != "view":
        return False
    if d["op"] == "reshape":
        # reshaping a transposed or broadcast view copies
        return _contiguous(g, d["args"][0], memo if memo is not None else {})
    return True


def buffers(g: Graph, nodes) -> tuple[dict, dict]:
    """(base, alloc): the node whose buffer each node uses, and the bytes each allocates."""
    memo, base, alloc = {}, {}, {}
    for n in nodes:
        d = g[n]
        if kind(d["op"]) == "source":
            base[n], alloc[n] = n, 0
        elif is_view(g, n, memo):
            base[n], alloc[n] = base[d["args"][0]], 0
        else:
            base[n], alloc[n] = n, g.nbytes(n)
    return base, alloc


def order_nodes(g: Graph) -> list:
    """Creation order: the forward pass, then the reverse sweep (autodiff emits each weight's
    cotangent as soon as its layer is reached, so results appear early and temporaries die
    early); the checkpoint pass builds its graph in the order it wants run."""
    return g.nodes()


def analyze(g: Graph, order=None, scratch=None) -> Schedule:
    """Last uses, free points and the live bytes of every step of `order` (default: ids).

    scratch(g, n) -> bytes a node allocates only while it runs, besides its result (the
    temporaries of a backend's fused group); the backend supplies it (`scratch_bytes`).
    """
    order = list(order or order_nodes(g))
    pos = {n: i for i, n in enumerate(order)}
    base, alloc = buffers(g, order)
    end = len(order)
    last_use = {n: pos[n] for n in order}
    for n in order:
        for a in g.args(n):
            last_use[a] = max(last_use[a], pos[n])
    for o in g.outputs:
        last_use[o] = end
    for n in reversed(order):
        if base[n] != n and alloc[n] == 0 and g[n]["op"] != "input":
            # a view keeps its argument's name alive too: backends may spell the view with
            # it (NumPy broadcasts implicitly) and the buffer is alive anyway
            a = g.args(n)[0]
            last_use[a] = max(last_use[a], last_use[n])
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
    live, results, cur, res, peak, work = [], [], 0, 0, 0, 0
    for i, n in enumerate(order):
        cur += alloc[n]
        if base[n] == n and buf_end[n] == end:
            res += alloc[n]
        now = cur + (scratch(g, n) if scratch is not None else 0)
        live.append(now)
        results.append(res)
        peak = max(peak, now)
        work = max(work, now - res)
        cur -= free_bytes.get(i, 0)
    return Schedule(order, last_use, frees, alloc, base, live, peak,
                    result_bytes=results, peak_working_bytes=work)


def schedule(g: Graph, order=None, scratch=None) -> Graph:
    """Return a copy of g with meta["schedule"] filled in (see `analyze`)."""
    new = g.copy()
    new.meta["schedule"] = analyze(g, order, scratch)
    return new
