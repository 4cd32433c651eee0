"""Scheduling: graph -> the same graph with one linear order, last uses and a memory estimate.

The result's meta["schedule"] is a `Schedule`. Memory model (the one `measure_peak_memory`
measures): every non-view node allocates its result; views (broadcast_to, reshape of a
contiguous value, transpose, slice) alias their base, which stays alive until its last view
dies; inputs and constants are not counted; outputs live to the end. "Working" memory is the
same count less the results already computed (the gradients a training step returns).

Placement (`plan`), when the backend says which nodes it can compute into an argument's
buffer (`in_place_ok`):
- Donation: given the donated arguments (passes/donation.py), a result shaped like one is
  written into it when every other reader of that input runs before; it then allocates
  nothing. Such an update (a training step's `W - lr * dW`) is moved to run as soon as its
  gradient exists and the old value is no longer read, so each gradient dies at once instead
  of every gradient living until the end of the backward pass.
- Dying values: a node takes the buffer of an argument whose every name dies where the node
  runs (`reuse_dying`), and a fused group's temporaries may take the other such buffers, so
  a backward such as `g * (1 - h * h)` allocates nothing. The estimate counts these buffers
  exactly as the generated code uses them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

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
    in_place: dict = field(default_factory=dict)       # node -> argument whose buffer it takes
    spare: dict = field(default_factory=dict)          # unit's first node -> dying arguments
                                                       # its temporaries may overwrite


class Placed(NamedTuple):
    """What a backend's `scratch_bytes` is told of the placement: nodes computed into
    arguments' buffers, and per unit the dying arguments its temporaries may overwrite."""
    in_place: dict
    spare: dict


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
    if d["op"] == "reshape" and _unit_axes_only(g, n):
        r = _contiguous(g, d["args"][0], memo)
    else:
        # other views may be strided; a general reshape either views a contiguous value or
        # copies it into a new (contiguous) array
        r = kind(d["op"]) != "view" or d["op"] == "reshape"
    memo[n] = r
    return r


def _unit_axes_only(g, n) -> bool:
    """Does reshape n only insert or drop axes of length 1? NumPy then returns a view
    whatever the strides of its argument (x[:, 1:5].reshape(b, 4, 1) copies nothing)."""
    src = [k for k in g[g[n]["args"][0]]["shape"] if k != 1]
    return src == [k for k in g[n]["shape"] if k != 1]


def is_view(g: Graph, n, memo=None, may_alias=False) -> bool:
    """Does node n share its argument's buffer in NumPy (no allocation)? may_alias: also a
    reshape of a strided view, which NumPy views whenever the strides allow it (a reversed
    vector reshaped to a matrix): the question before writing into a buffer."""
    d = g[n]
    if kind(d["op"]) != "view":
        return False
    if d["op"] == "reshape" and not may_alias:
        # reshaping a transposed or broadcast view copies, unless only unit axes change
        return _unit_axes_only(g, n) or \
            _contiguous(g, d["args"][0], memo if memo is not None else {})
    return True


def buffers(g: Graph, nodes, in_place=None, may_alias=False) -> tuple[dict, dict]:
    """(base, alloc): the node whose buffer each node uses, and the bytes each allocates.
    in_place: {node: argument} nodes computed into an argument's buffer (a donated input's,
    which stays the node's own for liveness, or a dying value's, which it takes over).
    may_alias: every reshape counts as a view (`is_view`), for decisions to overwrite."""
    memo, base, alloc = {}, {}, {}
    in_place = in_place or {}
    for n in nodes:
        d = g[n]
        if n in in_place:
            x = in_place[n]
            base[n] = n if g[x]["op"] == "input" else base[x]
            alloc[n] = 0
        elif kind(d["op"]) == "source":
            base[n], alloc[n] = n, 0
        elif is_view(g, n, memo, may_alias):
            base[n], alloc[n] = base[d["args"][0]], 0
        else:
            base[n], alloc[n] = n, g.nbytes(n)
    return base, alloc


def order_nodes(g: Graph) -> list:
    """Creation order: the forward pass, then the reverse sweep (autodiff emits each weight's
    cotangent as soon as its layer is reached, so results appear early and temporaries die
    early); the checkpoint pass builds its graph in the order it wants run."""
    return g.nodes()


def analyze(g: Graph, order=None, scratch=None, in_place=None, spare=None) -> Schedule:
    """Last uses, free points and the live bytes of every step of `order` (default: ids).

    scratch(g, n[, placed]) -> bytes a node allocates only while it runs, besides its
    result (the temporaries of a backend's fused group); the backend supplies it
    (`scratch_bytes`). in_place: {node: argument} nodes computed into a donated input's
    buffer (`in_place_pairs`) or a dying argument's (`reuse_dying`); they allocate nothing.
    spare: {unit's first node: arguments} dying arguments the unit's temporaries may use.
    """
    order = list(order or order_nodes(g))
    in_place, spare = in_place or {}, spare or {}
    placed = Placed(in_place, spare) if in_place or spare else None
    base, alloc = buffers(g, order, in_place)
    last_use = last_uses(g, order, base, in_place)
    end = len(order)
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
        now = cur + (_scratch(scratch, g, n, placed) if scratch is not None else 0)
        live.append(now)
        results.append(res)
        peak = max(peak, now)
        work = max(work, now - res)
        cur -= free_bytes.get(i, 0)
    return Schedule(order, last_use, frees, alloc, base, live, peak,
                    result_bytes=results, peak_working_bytes=work,
                    in_place=dict(in_place), spare=dict(spare))


def last_uses(g: Graph, order, base, in_place=()) -> dict:
    """node -> step of its last reader (outputs: the end). A view keeps its argument's name
    alive too: backends may spell the view with it (NumPy broadcasts implicitly) and the
    buffer is alive anyway."""
    pos = {n: i for i, n in enumerate(order)}
    end = len(order)
    last_use = dict(pos)
    for n in order:
        for a in g.args(n):
            last_use[a] = max(last_use[a], pos[n])
    for o in g.outputs:
        last_use[o] = end
    for n in reversed(order):
        if base[n] != n and n not in in_place and g[n]["op"] != "input":
            a = g.args(n)[0]
            last_use[a] = max(last_use[a], last_use[n])
    return last_use


def reuse_dying(g: Graph, order, in_place_ok, taken=None) -> tuple[dict, dict]:
    """(in_place, spare): {node: argument} nodes the backend computes into the buffer of an
    argument that dies where they are computed (no other name of that buffer is read later,
    and it is not a result), so they allocate nothing; {unit's first node: arguments} the
    other such arguments, whose buffers the unit's temporaries may take. taken: pairs
    already decided (donations)."""
    taken = dict(taken or {})
    base, alloc = buffers(g, order, taken, may_alias=True)
    last_use = last_uses(g, order, base, taken)
    # per buffer, what its members (the nodes living in it so far) need: whether one is a
    # result, and the last step one is read (running aggregates: a chain of 30,000 nodes
    # computed into one buffer made a scan of its members per candidate quadratic)
    holds_output, read_until, got, spare = {}, {}, {}, {}
    step = 0

    outputs = set(g.outputs)

    def dying(x, last, reads):
        """Does x's buffer die at this unit, read there through x alone (a view of it,
        such as x.T, would read elements the unit has already overwritten)? reads: the
        unit's arguments by buffer."""
        b = base[x]
        return x not in outputs and kind(g[x]["op"]) not in ("view", "source") and \
            alloc.get(b) and not holds_output.get(b) and read_until.get(b, -1) <= last and \
            reads[b] == {x}
    for unit in units(g, order):
        last = step + len(unit) - 1
        used = set()
        for n in unit:
            # a view shares its argument's buffer as it is now: the argument may have been
            # computed into a dying value's buffer since `buffers` looked (t = h + s into h,
            # then t[::-1] is a view of h's buffer too)
            if base[n] != n and n not in taken and kind(g[n]["op"]) == "view":
                base[n] = base[g.args(n)[0]]
        reads = {}
        for n in unit:
            for a in g.args(n):
                reads.setdefault(base[a], set()).add(a)
        for n in unit:
            if n in taken:
                continue
            for x in _by_preference(g, n):
                if base[x] in used or g[x]["shape"] != g[n]["shape"] \
                        or g[x]["dtype"] != g[n]["dtype"] or not dying(x, last, reads) \
                        or not in_place_ok(g, n, x):
                    continue
                got[n] = x
                used.add(base[x])
                break
        if g[unit[0]]["op"] == "fused":
            rest = tuple(x for x in dict.fromkeys(g.args(unit[0]))
                         if base[x] not in used and dying(x, last, reads))
            if rest:
                spare[unit[0]] = rest
        for n in unit:
            if n in got:
                base[n] = base[got[n]]
                alloc[n] = 0
            b = base[n]
            holds_output[b] = holds_output.get(b, False) or n in outputs
            read_until[b] = max(read_until.get(b, -1), last_use[n])
        step = last + 1
    return got, spare


def _by_preference(g: Graph, n) -> list:
    """n's distinct arguments, those its own last instruction reads first (for a fused
    group): an argument read only earlier in the group is better left to the temporaries."""
    args = list(dict.fromkeys(g.args(n)))
    d = g[n]
    if d["op"] != "fused":
        return args
    a = d["attrs"]
    ref = a["outputs"][a["output"]][0]
    n_in = len(d["args"])
    if ref < n_in:
        return args
    direct = {d["args"][r] for r in a["expr"][ref - n_in].args if r < n_in}
    return sorted(args, key=lambda x: x not in direct)


def _scratch(scratch, g, n, placed):
    """The backend's scratch bytes of n, told the placement (`Placed`) when there is one."""
    if placed is not None and (placed.in_place or placed.spare):
        return scratch(g, n, placed)
    return scratch(g, n)


def plan(g: Graph, order=None, scratch=None, donate_argnums=(), in_place_ok=None) -> Schedule:
    """The schedule of g (see `analyze`). in_place_ok(g, node, argument): can the backend
    compute that node into that argument's buffer? With it, nodes take the buffers of
    arguments that die there (`reuse_dying`), and results shaped like the donated arguments
    (donate_argnums, passes/donation.py) are written into them when no one reads those
    later; such updates run as early as they can (module docstring)."""
    order = list(order or order_nodes(g))
    if in_place_ok is None:
        return analyze(g, order, scratch)
    ok = {}
    if donate_argnums:
        from .donation import candidates
        ok = {o: i for o, i in candidates(g, donate_argnums).items() if in_place_ok(g, o, i)}

    def in_order(order):
        donated = in_place_pairs(g, order, ok)
        reused, spare = reuse_dying(g, order, in_place_ok, donated)
        return analyze(g, order, scratch, {**donated, **reused}, spare)
    best = in_order(order)
    if ok:
        moved = hoist_updates(g, order, ok, scratch)
        if moved != order:
            s = in_order(moved)
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
    base, _ = buffers(g, order, may_alias=True)
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
            (_scratch(scratch, g, unit[0], Placed(sched.in_place, {}))
             if scratch is not None else 0)
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
