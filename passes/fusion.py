"""Elementwise fusion: graph -> graph whose connected elementwise nodes form `fused` groups.

Input: a simplified graph (autodiff has run). Output: the same computation in which every
group of connected same-shape elementwise nodes, with the broadcasts and scalar constants it
reads, is one `fused` node per value that other nodes need (ir/fused.py); reductions of a
group's values join it as extra outputs, so `sum(exp(z - m), axis=1)` is one pass.
Invariant: no cycle: two groups merge only when no path leaves them and comes back.
"""
from __future__ import annotations

import math
import heapq

import numpy as np

from ..ir.fused import Instr
from ..ir.graph import Graph
from ..ir.ops import OPS
from .schedule import flops


# a group's size bound: each output node of a group lists all of the group's arguments, so
# an unrolled loop of scalar steps fused into one group would cost outputs x arguments edges
MAX_GROUP = 256
# the cycle check between two units gives up (no merge) after visiting this many units
SEARCH_LIMIT = 256
# arrays smaller than this are not worth a separate group to free early (see _holds_longer)
HOLD_BYTES = 1 << 16
# the ops that allocate a new array (inputs, constants, views and broadcasts do not)
_WORK = frozenset(("elementwise", "reduction", "matmul", "index", "layout"))


def fuse_elementwise(g: Graph, reductions=True, max_inputs=None, min_size=0,
                     join_reduction=None) -> Graph:
    """Return a fused copy of g (g is unchanged).

    reductions: let sum/max of a group's value join the group (a backend whose fused code
    would materialise the prologue anyway, like NumPy's, turns this off).
    max_inputs: the most arrays a group may read (a compiled kernel's compile time grows with
    its arguments: a weight's gradient summed over 200 steps of a loop is 200 of them).
    min_size: nodes of fewer elements stay unfused (for a backend that runs small groups as
    the same NumPy statements anyway, fusing scalars only costs compile time: a scalar-style
    program of 100,000 nodes spent most of its compile in the cycle search).
    join_reduction(g, members, r) -> bool: may reduction r join the group of these nodes (a
    backend whose summing loops cannot vectorise what the group computes says no)?
    """
    f = _Fuser(g, max_inputs, min_size)
    f.join_reduction = join_reduction
    f.group_elementwise()
    if reductions:
        f.join_reductions()
    return f.build()


def _inlined(g, n):
    """A constant (or a broadcast of one), which fused code writes in, not reads."""
    d = g[n]
    return d["op"] == "const" or (d["op"] == "broadcast_to" and g[d["args"][0]]["op"] == "const")


def _fusion(g, n):
    return OPS[g[n]["op"]].fusion


class _Fuser:
    def __init__(self, g, max_inputs=None, min_size=0):
        self.g = g
        self.join_reduction = None
        self.max_inputs = max_inputs
        self.users = {n: g.users(n) for n in g.nodes()}
        self.members = {n for n in g.nodes() if _fusion(g, n) == "map"
                        and (not min_size or _numel(g[n]["shape"]) >= min_size)}
        self.parent = {n: n for n in self.members}
        self.sets = {n: {n} for n in self.members}
        # the arrays each group reads (constants and their broadcasts are inlined), when
        # their number is bounded
        self.reads = {n: {a for a in g.args(n) if not _inlined(g, a)}
                      for n in self.members} if max_inputs else None
        # group root -> the nodes outside the unit that read it (its members' users): the
        # cycle search walks these, not every member's users
        self.ext = {n: set(self.users[n]) - {n} for n in self.members}
        self.reduces = {}             # group root -> reduction nodes joined to it
        self.red_root = {}            # reduction node -> the root of the group it joined
        # A topological order of the units (groups, and nodes outside groups), kept valid as
        # groups merge: `slots` lists them in order (None where a merged unit left), `pos`
        # gives each unit's slot. A path between two units can only pass through the units
        # between them, so the cycle check searches that window only.
        self.slots = list(g.nodes())
        self.pos = {n: i for i, n in enumerate(self.slots)}
        assert all(self.pos[a] < self.pos[n] for n in self.slots for a in g.args(n)), \
            "fusion needs the graph's nodes in topological order"

    # -- union-find ---------------------------------------------------------------------
    def find(self, n):
        while self.parent[n] != n:
            self.parent[n] = self.parent[self.parent[n]]
            n = self.parent[n]
        return self.parent[n]

    def union(self, a, b):
        a, b = self.find(a), self.find(b)
        if len(self.sets[a]) < len(self.sets[b]):
            a, b = b, a
        self.parent[b] = a
        self.sets[a] |= self.sets.pop(b)
        if self.reads is not None:
            self.reads[a] = (self.reads[a] | self.reads.pop(b)) - self.sets[a]
        self.reduces.setdefault(a, []).extend(self.reduces.pop(b, []))
        self.ext[a] = (self.ext[a] | self.ext.pop(b)) - self.sets[a] - set(self.reduces[a])
        return a

    def _unit(self, root):
        return self.sets[root] | set(self.reduces.get(root, []))

    def _root(self, n):
        """The unit n belongs to: its group's root, or n alone."""
        if n in self.parent:
            return self.find(n)
        return self.red_root.get(n, n)

    def _members(self, root):
        if root in self.sets:
            yield from self.sets[root]
            yield from self.reduces.get(root, ())
        else:
            yield root

    def _readers(self, x):
        """The nodes outside unit x that read it."""
        return self.ext[x] if x in self.ext else self.users[x]

    def _between(self, a, b):
        """(cycle, D) for merging unit a into unit b (pos[a] < pos[b], a feeds b): cycle is
        whether a path leaves a and enters b through another unit; D are the units between
        them that a reaches (they must move after the merged unit)."""
        pb = self.pos[b]
        if all(self._root(w) == b for w in self._readers(a)):
            return False, []        # b is a's only reader: no path can leave and come back
        seen, stack, reached = {a, b}, [a], []
        while stack:
            x = stack.pop()
            for w in self._readers(x):
                y = self._root(w)
                if y == b:
                    if x != a:
                        return True, None
                    continue
                if y in seen or self.pos[y] > pb:
                    continue
                if len(seen) > SEARCH_LIMIT:
                    # far apart with much work between: do not merge (such a merge would
                    # also keep a's arguments alive over that work); this bounds the
                    # search, which made fusing long unrolled loops quadratic
                    return True, None
                seen.add(y)
                reached.append(y)
                stack.append(y)
        return False, reached

    def _holds_longer(self, a, b):
        """Would merging unit a into b keep more memory alive? The merged group runs at b's
        place, so the arrays a reads that die there stay alive over every unit between a and
        b instead of a's one result. With two or more such full-size arrays and other work in
        between (a gradient summed over the steps of a loop, `acc + part_t`, each part made by
        a matrix product), merging would hold one part per step until the end."""
        pa, pb = self.pos[a], self.pos[b]
        g = self.g
        size = _numel(g[a]["shape"])
        if size * np.dtype(g[a]["dtype"]).itemsize < HOLD_BYTES:
            return False    # first: the scan below grows with the program's length
        if pb - pa <= 1 or not any(x is not None and x not in self.sets and
                                   OPS[g[x]["op"]].kind in _WORK for x in self.slots[pa + 1:pb]):
            return False
        inside = set(self._members(a))
        dying = 0
        for m in inside:
            for x in g.args(m):
                # arguments stay alive anyway; broadcasts, views and constants hold no array
                # of their own
                if (x in inside or _numel(g[x]["shape"]) < size
                        or OPS[g[x]["op"]].kind not in _WORK):
                    continue
                if all(self._root(w) == a or self.pos[self._root(w)] <= pa
                       for w in self.users[x]):
                    dying += 1
        return dying >= 2

    def _place(self, a, b, merged, reached):
        """Keep the order topological after units a and b merged into `merged`: within the
        window from a to b, the units a reached move after it, the others before."""
        pa, pb = self.pos[a], self.pos[b]
        if not reached:
            # nothing a reaches lies between: the merged unit takes b's slot, the rest stay
            # (the usual case, and a forward value merged into a far backward group would
            # otherwise rewrite the whole window)
            self.slots[pa], self.slots[pb] = None, merged
            self.pos[merged] = pb
            return
        after = set(reached)
        window = [x for x in self.slots[pa:pb + 1] if x is not None and x not in (a, b)]
        order = [x for x in window if x not in after] + [merged] + \
            [x for x in window if x in after]
        order += [None] * (pb + 1 - pa - len(order))
        self.slots[pa:pb + 1] = order
        for i, x in enumerate(order, pa):
            if x is not None:
                self.pos[x] = i

    # -- grouping -------------------------------------------------------------------------
    def group_elementwise(self):
        # consumers first, so a producer joins the group that reads it (the backward pass's
        # `g * (1 - t * t)` takes `1 - t * t` instead of the forward group that made t)
        g = self.g
        for v in reversed(g.nodes()):
            if v not in self.members:
                continue
            for u in g.args(v):
                if u not in self.members or self.find(u) == self.find(v):
                    continue
                if g[u]["shape"] != g[v]["shape"]:
                    continue
                a, b = self.find(u), self.find(v)
                if len(self.sets[a]) + len(self.sets[b]) > MAX_GROUP:
                    continue
                if self.reads is not None and len(
                        (self.reads[a] | self.reads[b]) - self.sets[a] - self.sets[b]) \
                        > self.max_inputs:
                    continue
                if self._holds_longer(a, b):
                    continue
                cycle, reached = self._between(a, b)
                if not cycle:
                    self._place(a, b, self.union(u, v), reached)

    def join_reductions(self):
        g = self.g
        for r in g.nodes():
            if _fusion(g, r) != "reduce":
                continue
            (a,) = g.args(r)
            if a not in self.members:
                continue
            root = self.find(a)
            if self.join_reduction is not None and \
                    not self.join_reduction(g, self.sets[root], r):
                continue
            axes = tuple(g[r]["attrs"]["axis"])
            if any(tuple(g[q]["attrs"]["axis"]) != axes for q in self.reduces.get(root, [])):
                continue
            # r may not feed the group back, directly (a size-1 axis) or through other
            # nodes: in a topological order of the units, that is the group coming after r
            if self.pos[root] > self.pos[r]:
                continue
            cycle, reached = self._between(root, r)
            if cycle:
                # a reduction reads one value, so no path leaves the group and comes back;
                # this is the search giving up (too much work lies between the two)
                continue
            self.reduces.setdefault(root, []).append(r)
            self.red_root[r] = root
            self.ext[root] = (self.ext[root] | set(self.users[r])) - {r}
            self._place(root, r, root, reached)

    # -- building the new graph -----------------------------------------------------------
    def build(self):
        g = self.g
        groups = {}
        for n in self.members:
            groups.setdefault(self.find(n), []).append(n)
        owner = {}
        for root, ms in groups.items():
            for n in ms + self.reduces.get(root, []):
                owner[n] = root
        plans = {root: _plan(g, sorted(ms), sorted(self.reduces.get(root, [])), owner, root)
                 for root, ms in groups.items()}
        live = self._live(owner, plans)
        order = self._order(owner, plans, live)
        return self._emit(order, owner, plans)

    def _live(self, owner, plans):
        """Nodes outside groups that are still needed (absorbed broadcasts and consts are not)."""
        g = self.g
        live = set(g.inputs) | {o for o in g.outputs if o not in owner}
        for p in plans.values():
            live |= {x for x in p["inputs"] if x not in owner}
        for n in reversed(g.nodes()):
            if n in owner or n not in live:
                continue
            for a in g.args(n):
                if a not in owner:
                    live.add(a)
        return live

    def _order(self, owner, plans, live):
        """Units (groups and kept nodes) in a topological order close to the original one."""
        g = self.g
        deps, key = {}, {}
        # a given order (the checkpoint pass's) ranks the units, else creation order does
        given = g.meta.get("order")
        pos = {n: i for i, n in enumerate(given)} if given else None
        rank = pos.__getitem__ if pos else (lambda n: n)
        for root, p in plans.items():
            deps[root] = {owner.get(a, a) for a in p["inputs"]}
            key[root] = max(rank(n) for n in p["nodes"])
        for n in live:
            deps[n] = {owner.get(a, a) for a in g.args(n)}
            key[n] = rank(n)
        waiting = {u: len(d) for u, d in deps.items()}
        rev = {}
        for u, d in deps.items():
            for x in d:
                rev.setdefault(x, []).append(u)
        ready = [(key[u], u) for u, c in waiting.items() if c == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            _, u = heapq.heappop(ready)
            order.append(u)
            for v in rev.get(u, []):
                waiting[v] -= 1
                if waiting[v] == 0:
                    heapq.heappush(ready, (key[v], v))
        assert len(order) == len(waiting), "fusion made a cycle"
        return order

    def _emit(self, order, owner, plans):
        g = self.g
        new = Graph()
        new.meta = {k: v for k, v in g.meta.items() if k not in ("order", "schedule")}
        m = {}
        for u in order:
            if u in plans:
                _emit_group(g, new, plans[u], m)
                continue
            d = g[u]
            m[u] = new.add(d["op"], [m[a] for a in d["args"]], d["shape"], d["dtype"],
                           d["attrs"], d["name"], d["where"])
            if d["op"] == "input":
                new.inputs.append(m[u])
        assert [m[i] for i in g.inputs] == new.inputs
        new.outputs = [m[o] for o in g.outputs]
        if "checkpoints" in g.meta:
            # after the checkpoint pass: the values it keeps, under their new ids (one that
            # a group now computes and reads inside is no longer kept)
            new.meta["checkpoints"] = {m[n]: w for n, w in g.meta["checkpoints"].items()
                                       if n in m}
        return new


def _numel(shape):
    return math.prod(shape)


def _is_scalar_const(g, n):
    return g[n]["op"] == "const" and np.ndim(g[n]["attrs"]["value"]) == 0


def _plan(g, members, reduces, owner, root):
    """The group's inputs, instructions and outputs, in terms of the old graph's nodes."""
    inside = set(members)
    inputs, instrs, ref = [], [], {}

    def input_ref(x):
        if x not in inputs:
            inputs.append(x)
        return ("in", inputs.index(x))

    def value(u):
        if u in ref:
            return ref[u]
        if u in inside:
            raise AssertionError("members are visited in topological order")
        d = g[u]
        if _is_scalar_const(g, u):
            instrs.append(Instr("const", (), dict(d["attrs"]), u, d["where"]))
            ref[u] = ("t", len(instrs) - 1)
        elif OPS[d["op"]].fusion == "broadcast" and u not in owner:
            (x,) = d["args"]
            src = value(x) if _is_scalar_const(g, x) else input_ref(x)
            instrs.append(Instr(d["op"], (src,), dict(d["attrs"]), u, d["where"]))
            ref[u] = ("t", len(instrs) - 1)
        else:
            return input_ref(u)
        return ref[u]

    for n in members:
        d = g[n]
        args = tuple(value(a) for a in d["args"])
        instrs.append(Instr(d["op"], args, dict(d["attrs"]), n, d["where"]))
        ref[n] = ("t", len(instrs) - 1)
    outputs = []
    group = inside | set(reduces)
    for n in members:
        if n in g.outputs or any(u not in group for u in g.users(n)):
            outputs.append((n, ref[n], None))
    for r in reduces:
        a = g[r]["attrs"]
        outputs.append((r, ref[g.args(r)[0]], (g[r]["op"], tuple(a["axis"]), a["keepdims"])))
    outputs.sort(key=lambda o: o[0])
    return {"inputs": inputs, "instrs": instrs, "outputs": outputs, "shape": g[members[0]]["shape"],
            "nodes": members + reduces, "root": root}


def _emit_group(g, new, plan, m):
    n_in = len(plan["inputs"])

    def resolve(r):
        return r[1] if r[0] == "in" else n_in + r[1]
    expr = tuple(i._replace(args=tuple(resolve(r) for r in i.args)) for i in plan["instrs"])
    outputs = tuple((resolve(r), red) for _, r, red in plan["outputs"])
    kernel = _kernel_name(g, plan, new._next)
    args = [m[x] for x in plan["inputs"]]
    # the group's FLOPs, shared by its output nodes (schedule.flops reads attrs["flops"]): the
    # checkpoint pass counts what a fused program recomputes with them
    total = sum(flops(g, n) for n in plan["nodes"])
    share = -(-total // max(len(plan["outputs"]), 1))
    for k, (n, _, _) in enumerate(plan["outputs"]):
        d = g[n]
        attrs = {"kernel": kernel, "shape": tuple(plan["shape"]), "expr": expr,
                 "outputs": outputs, "output": k, "flops": share}
        m[n] = new.add("fused", args, d["shape"], d["dtype"], attrs, d["name"], d["where"])


def _kernel_name(g, plan, first_id):
    ops = []
    for n in plan["nodes"]:
        op = g[n]["op"]
        if op not in ops:
            ops.append(op)
    shown = "_".join(ops[:4]) + ("_etc" if len(ops) > 4 else "")
    return f"fused_{shown}_v{first_id}"
