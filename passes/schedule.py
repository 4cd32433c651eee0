"""Scheduling: graph -> the same graph with one linear order, last uses and a memory estimate.

The result's meta["schedule"] is a `Schedule`. Memory model (the one `measure_peak_memory`
measures): every non-view node allocates its result; views (broadcast_to, reshape of a
contiguous value, transpose, slice) alias their base, which stays alive until its last view
dies; inputs and constants are not counted; outputs live to the end. "Working" memory is the
same count less the results already computed (the gradients a training step returns).

Donation: given {output node: donated input node} candidates (passes/donation.py) and the
backend's rule for which nodes it can compute into an input's buffer (`in_place_ok`), a
result is written in place when every other reader of that input runs before it; it then
allocates nothing. Such an update (a training step's `W - lr * dW`) is moved to run as soon
as its gradient exists and the old value is no longer read, so each gradient dies at once
instead of every gradient living until the end of the backward pass.
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
    in_place: dict = field(default_factory=dict)       # output node -> input it overwrites


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


def analyze(g: Graph, order=None, scratch=None, in_place=None) -> Schedule:
    """Last uses, free points and the live bytes of every step of `order` (default: ids).

    scratch(g, n[, in_place]) -> bytes a node allocates only while it runs, besides its
    result (the temporaries of a backend's fused group); the backend supplies it
    (`scratch_bytes`). in_place: {output node: input node} results written into a donated input's buffer
    (checked by `in_place_pairs`); they allocate nothing.
    """
    order = list(order or order_nodes(g))
    pos = {n: i for i, n in enumerate(order)}
    base, alloc = buffers(g, order)
    for o in in_place or ():
        alloc[o] = 0
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
        now = cur + (_scratch(scratch, g, n, in_place) if scratch is not None else 0)
        live.append(now)
        results.append(res)
        peak = max(peak, now)
        work = max(work, now - res)
        cur -= free_bytes.get(i, 0)
    return Schedule(order, last_use, frees, alloc, base, live, peak,
                    result_bytes=results, peak_working_bytes=work,
                    in_place=dict(in_place or {}))


def _scratch(scratch, g, n, in_place):
    """The backend's scratch bytes of n; it is told which outputs go into donated buffers."""
    return scratch(g, n, in_place) if in_place else scratch(g, n)


def plan(g: Graph, order=None, scratch=None, donate_argnums=(), in_place_ok=None) -> Schedule:
    """The schedule of g (see `analyze`). donate_argnums: arguments whose buffers results
    may take (passes/donation.py); in_place_ok(g, output, input): can the backend compute
    that output into that input's buffer? Valid pairs are written in place, and their
    updates run as early as they can (module docstring)."""
    order = list(order or order_nodes(g))
    ok = {}
    if donate_argnums and in_place_ok is not None:
        from .donation import candidates
        ok = {o: i for o, i in candidates(g, donate_argnums).items() if in_place_ok(g, o, i)}
    if not ok:
        return analyze(g, order, scratch)
    best = analyze(g, order, scratch, in_place_pairs(g, order, ok))
    moved = hoist_updates(g, order, ok, scratch)
    if moved != order:
        s = analyze(g, moved, scratch, in_place_pairs(g, moved, ok))
        if s.peak_bytes <= best.peak_bytes:
            best = s
    return best


def schedule(g: Graph, order=None, scratch=None, donate_argnums=(), in_place_ok=None) -> Graph:
    """Return a copy of g with meta["schedule"] filled in (see `plan`)."""
    new = g.copy()
    new.meta["schedule"] = plan(g, order, scratch, donate_argnums, in_place_ok)
    return new


def units(g: Graph, order) -> list:
    """The order cut into units that run together: consecutive outputs of one fused group."""
    from ..ir.fused import same_group
    out = []
    for n in order:
        if out and same_group(g, out[-1][0], n):
            out[-1].append(n)
        else:
            out.append([n])
    return out


def _readers(g: Graph, order, base):
    """input node -> nodes that read it or a view of it."""
    got = {}
    for u in order:
        for a in g.args(u):
            b = base.get(a)
            if b is not None and g[b]["op"] == "input":
                got.setdefault(b, set()).add(u)
    return got


def in_place_pairs(g: Graph, order, candidates) -> dict:
    """The candidates {output: input} that can be written in place in this order: every
    other reader of the input (or of a view of it) runs before the output's unit, which
    reads the input itself (a kernel reading a transposed view would see its own writes),
    and no result is a view of the input."""
    if not candidates:
        return {}
    base, _ = buffers(g, order)
    readers = _readers(g, order, base)
    first, step = {}, {}
    for s, unit in enumerate(units(g, order)):
        for n in unit:
            first[n], step[n] = (s, set(unit)), s
    returned = {base.get(o) for o in g.outputs}
    got = {}
    for o, i in candidates.items():
        if o not in first or i in returned:
            continue
        s, unit = first[o]
        if any(step[u] >= s for u in readers.get(i, ()) if u not in unit):
            continue
        if any(a != i and base.get(a) == i for u in unit for a in g.args(u)):
            continue
        got[o] = i
    return got


def hoist_updates(g: Graph, order, candidates, scratch=None) -> list:
    """Move each unit holding a candidate in-place update to just after the last of its
    arguments and of the other readers of the inputs it overwrites, when it frees at least
    what it allocates there (so no step between gets fuller)."""
    if not candidates:
        return list(order)
    sched = analyze(g, order, scratch, in_place_pairs(g, order, candidates))
    buf_end = {}
    for s, n in enumerate(order):
        b = sched.base[n]
        buf_end[b] = max(buf_end.get(b, -1), sched.last_use[n])
    dies_at = {}
    for b, e in buf_end.items():
        if e < len(order):
            dies_at.setdefault(order[e], []).append(b)
    readers = _readers(g, order, sched.base)
    new = [list(u) for u in units(g, order)]
    for unit in [list(u) for u in units(g, order)]:
        targets = [candidates[n] for n in unit if n in candidates]
        if not targets:
            continue
        alloc = sum(sched.alloc[n] for n in unit) + \
            (_scratch(scratch, g, unit[0], sched.in_place) if scratch is not None else 0)
        freed = sum(sched.alloc.get(b, 0) for n in unit for b in dies_at.get(n, ()))
        if alloc > freed:
            continue
        pos = {n: k for k, u in enumerate(new) for n in u}
        here = pos[unit[0]]
        after = [pos[a] for n in unit for a in g.args(n)]
        after += [pos[u] for i in targets for u in readers.get(i, ()) if u not in unit]
        anchor = max(after, default=-1)
        if anchor < here - 1:
            del new[here]
            new.insert(anchor + 1, unit)
    return [n for u in new for n in u]
