"""Reverse and forward mode: graph -> graph with the adjoint (or tangent) computation added.

derive_adjoint(g, wrt) returns a new graph with the same inputs (plus cotangent inputs in
"vjp" mode) whose outputs are g's outputs followed by one cotangent per `wrt` input. VJP rules
come from the op registry and are replayed with frontend functions, so the result is plain IR.
Only nodes on a path from a `wrt` input to an output get cotangents.

This pass imports the frontend, against STYLE's "passes -> ir only": DESIGN asks VJP rules to
be written with the functions users call, and those build IR through the tracer, so replaying
the graph inside a TraceContext is how a rule's result becomes ordinary IR.
"""
from __future__ import annotations

import math

import numpy as np

from ..frontend import functions as F
from ..frontend.trace import custom_primal, replay
from ..frontend.tracer import TraceContext, Tracer, current, where_override
from ..ir.errors import GradError
from ..ir.graph import Graph
from ..ir.ops import OPS
from .simplify import constant_value, uniform_value


def _relevant(g: Graph, wrt_ids, out_ids):
    """The nodes on a path from a wrt input to an output."""
    return _reach(wrt_ids, g.users) & _reach(out_ids, g.args)


def _reach(start, step):
    seen, todo = set(start), list(start)
    while todo:
        for m in step(todo.pop()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def _args_but_stopped(g):
    return lambda n: () if g[n]["op"] == "stop_gradient" else g.args(n)


def _new_inputs(ctx, g):
    out = []
    for i in g.inputs:
        d = g[i]
        t = ctx.input(d["shape"], d["dtype"], d["name"], where=d["where"])
        ctx.graph[t.id]["attrs"].update(d["attrs"])
        out.append(t)
    return out


def derive_adjoint(g: Graph, wrt, seed="ones", outputs=None) -> Graph:
    """Reverse mode. wrt: input positions. seed "ones" (scalar loss) or "inputs" (vjp).

    outputs: which of g.outputs are differentiated (default: the first one for "ones", all for
    "inputs"). The other outputs are carried through unchanged (auxiliary values).
    """
    # inside another trace (grad of grad, hessian, hvp) this backward will be differentiated
    # itself: its guards must keep how cotangents depend on g where g == 0 (see _guarded)
    nested = current() is not None and current().differentiated
    diff = outputs if outputs is not None else ([0] if seed == "ones"
                                                else list(range(len(g.outputs))))
    diff_ids = [g.outputs[k] for k in diff]
    wrt_ids = [g.inputs[p] for p in wrt]
    need = _relevant(g, wrt_ids, diff_ids)
    # custom-rule nodes differentiated here by their rules: the new graph reads their primal.
    # One whose value reaches the outputs only through a stop_gradient (a rule's own call of
    # the function, `ans = f(x)`, inside the node's primal) is not differentiated here: it
    # stays a custom node, so a later derivative takes its rule again (as JAX)
    custom = {n for n in need & _reach(diff_ids, _args_but_stopped(g))
              if OPS[g[n]["op"]].kind == "custom"}
    ctx = TraceContext()
    with ctx:
        ins = _new_inputs(ctx, g)
        outs, env = replay(g, ins, consume=custom)
        cot, cot_inputs = {}, []
        for k, o in zip(diff, diff_ids):
            d = g[o]
            if seed == "ones":
                w = d["where"].with_role("seed of the reverse sweep") if d["where"] else None
                with where_override(w):
                    c = F.full_like(env[o], 1.0)
            else:
                c = ctx.input(d["shape"], d["dtype"], f"cotangent{k}", where=None)
                cot_inputs.append(c)
            # an output returned twice, or one that another output uses, sums its seeds with
            # the contributions of its uses when the sweep reaches it
            cot.setdefault(o, []).append(c)
        cot = _Cotangents(ctx, cot)
        blow, tests = {}, {}
        for n in reversed(g.nodes()):
            if n not in cot or n not in need or not g.args(n):
                continue
            d = g[n]
            # the op, not the node id: later passes renumber nodes, the op stays true
            w = d["where"].with_role(f"vjp of {d['op']}") if d["where"] else None
            with where_override(w):
                # the sum of n's cotangent parts is backward work for n's line, not the caller's
                _name_cotangent(ctx, cot[n], d)
            rule = OPS[d["op"]].vjp
            todo = [a for a in g.args(n) if a in need]
            if not todo:
                continue
            if rule is None:
                raise GradError(f"no vjp rule for op {d['op']!r} (at {d['where']}); add one to "
                                f"OPS[{d['op']!r}] in ir/ops.py or stop the gradient there")
            op = OPS[d["op"]]
            with where_override(w):
                gs = rule(cot[n], env[n], *[env[a] for a in g.args(n)], **d["attrs"])
                masked = n in cot.masked and (op.kind in _KEEPS_ZEROS or op.keeps_zeros)
                if n in cot.masked and op.guard:
                    gs = _guarded(cot[n], gs, nested)
                for a, ga in zip(g.args(n), gs):
                    if ga is None or a not in need:
                        continue
                    cot.add(a, ga, masked, selected=op.skips_nan or op.selects and (
                        _may_blow_up(g, a, blow) or (d["op"] == "where" and _tests_finite(
                            g, g.args(n)[0], tests))))
        grads = []
        for i, t in zip(wrt_ids, [ins[p] for p in wrt]):
            w = g[i]["where"].with_role("vjp of input") if g[i]["where"] else None
            with where_override(w):
                if i in cot:
                    _name_cotangent(ctx, cot[i], g[i])
                    grads.append(cot[i])
                else:
                    # the output does not depend on this input: its gradient is truly zero
                    grads.append(F.zeros(t.shape, t.dtype))
        for gi, t in zip(grads, [ins[p] for p in wrt]):
            assert gi.shape == t.shape, (gi.shape, t.shape)
    new = ctx.graph
    new.inputs = [t.id for t in ins] + [c.id for c in cot_inputs]
    new.outputs = [o.id for o in outs] + [x.id for x in grads]
    new.meta = dict(g.meta)
    new.meta["n_primal_outputs"] = len(outs)
    return new


# ops whose VJP maps a cotangent's zeros to zeros of the argument's cotangent (a matrix
# product mixes them): a masked cotangent stays masked through these
_KEEPS_ZEROS = frozenset(("elementwise", "reduction", "view", "layout", "index"))


def _may_blow_up(g, a, memo):
    """Can where's branch a be inf or nan from finite inputs (a log, a division, an exp, ...
    among the elementwise work that computes it)? Only then its cotangent is masked: a relu
    written np.where(z > 0, z, 0) adds no guards to the backward. One pass over g, in
    topological order, answers for every node (memo: this sweep's dict, filled once)."""
    if not memo:
        for n in g.nodes():
            op = OPS[g[n]["op"]]
            own = op.blows_up
            if callable(own):
                own = own(*[constant_value(g, a) for a in g.args(n)])
            if op.name == "const":
                v = np.asarray(g[n]["attrs"]["value"])
                # x * [1, nan, inf] is nan or inf where x is finite
                own = v.dtype.kind in "fc" and not np.isfinite(v).all()
            memo[n] = own or ((op.kind in _KEEPS_ZEROS or op.keeps_zeros) and
                              any(memo[x] for x in g.args(n)))
    return memo[a]


_COMPARISONS = frozenset(("eq", "ne", "lt", "le", "gt", "ge"))


def _tests_finite(g, cond, memo):
    """Is where's condition a test for nan or inf (np.isnan(y), ~np.isfinite(y), combined
    with other masks)? Then the branches may be non-finite data (missing targets in
    np.nanmean((p - y) ** 2)), and their cotangents are masked like a log's."""
    if not memo:
        for n in g.nodes():
            d = g[n]
            args = d["args"]
            own = d["op"] in _COMPARISONS and (
                (len(args) == 2 and args[0] == args[1]) or any(            # x != x
                    _is_inf(uniform_value(g, a)) for a in args))
            # through masks and counts: isnan(y).any(axis=1), isnan(y).sum(axis=1) > 0
            memo[n] = own or (d["dtype"].kind in "biu" and any(memo.get(a) for a in args))
    return memo[cond]


def _is_inf(v):
    return isinstance(v, float) and math.isinf(v)


def _guarded(g, gs, exact=False):
    """The cotangents gs, 0 where the incoming cotangent g is (0 * inf would be nan).

    exact (a backward that will be differentiated again): 0 only where they are also not
    finite; where finite they stay themselves, not a 0 of the where, so a second derivative
    (hessian, hvp) still sees how they depend on g at g == 0. Three more passes per guard,
    which a first-order program does not need."""
    zero = F.eq(g, 0)
    out = []
    for ga in gs:
        if ga is None or tuple(ga.shape) != tuple(g.shape):
            out.append(ga)
            continue
        drop = F.where(zero, F.eq(F.lt(F.abs(ga), np.inf), False), False) if exact else zero
        out.append(F.where(drop, F.zeros_like(ga), ga))
    return out


class _Cotangents:
    """The cotangent of each node: its contributions (one per use), summed when first read,
    which is after every use has contributed (the sweep runs in reverse order).

    Contributions that embed a piece of the node into zeros (ops with `places` in the
    registry: unslice, the VJP of x[i]) and never overlap are placed together: one concatenation of the pieces (and one gather when
    they are out of order or leave gaps) instead of one zero-padded full-size array per use.
    A loop over W[i] or xs[t] then keeps pieces of W's size in all, not one W per step."""

    def __init__(self, ctx, initial):
        self.ctx, self.parts, self.done = ctx, dict(initial), {}
        self.masked = set()   # nodes whose cotangent is 0 where a where did not select them
        self.selected = {}    # node -> contributions that are 0 where a selection skipped it

    def __contains__(self, n):
        return n in self.done or n in self.parts

    def add(self, n, t, masked=False, selected=False):
        """masked: t carries zeros of a masked cotangent; selected: t is 0 where the op
        using n did not select it (where's other branch, the rest of x around x[0])."""
        assert n not in self.done, "a cotangent was read before all its uses contributed"
        if masked:
            self.masked.add(n)
        elif selected:
            self.selected.setdefault(n, []).append(t)
        parts = self.parts.setdefault(n, [])
        if self._dense(t):
            # summed as it arrives: a weight read at every step of a loop then holds one
            # running total in the backward, not one full-size gradient per step
            k = next((i for i, p in enumerate(parts) if self._dense(p)), None)
            if k is not None:
                parts[k] = F.add(parts[k], t)
                return
        parts.append(t)

    def _dense(self, t):
        return OPS[self.ctx.graph[t.id]["op"]].places is None

    def __getitem__(self, n):
        if n not in self.done:
            sel = self.selected.pop(n, None)
            if sel is not None and not self._covered(sel):
                self.masked.add(n)
            self.done[n] = self._sum(self.parts.pop(n))
        return self.done[n]

    def _covered(self, selected):
        """Do slices that are all of n's selected uses read every element of n between them
        (a state unpacked as y[0], y[1], ...)? Then no element's cotangent is a structural 0
        and n's cotangent needs no mask (and the VJPs before it no guards)."""
        g = self.ctx.graph
        if any(OPS[g[t.id]["op"]].places is None for t in selected):
            return False
        seen = np.zeros(int(math.prod(selected[0].shape)), bool)
        for t in selected:
            seen[self._positions(t)] = True
        return bool(seen.all())

    def _sum(self, parts):
        g = self.ctx.graph
        pieces = self._merged([t for t in parts if OPS[g[t.id]["op"]].places is not None])
        rest = [t for t in parts if OPS[g[t.id]["op"]].places is None]
        total = None
        if len(pieces) > 1:
            placed, over = self._disjoint(pieces)
            total = self._place(placed) if len(placed) > 1 else None
            if total is None:
                over = placed + over
            if len(over) > 1:
                # overlapping slices (x[1:] and x[:-1]): added into one array of zeros, not
                # one zero-filled array each
                a = [g[t.id]["attrs"] for t in over]
                summed = F.place_add([Tracer(self.ctx, g[t.id]["args"][0]) for t in over],
                                     [x["index"] for x in a], a[0]["shape"])
                total = summed if total is None else F.add(total, summed)
            else:
                rest = over + rest
        else:
            rest = pieces + rest
        for t in rest:
            total = t if total is None else F.add(total, t)
        return total

    def _merged(self, pieces):
        """Pieces at the same place (x[0] read twice) as one piece of their sum: a state
        unpacked by indexing then places its cotangent with one concatenation."""
        g, groups = self.ctx.graph, {}
        for t in pieces:
            a = g[t.id]["attrs"]
            groups.setdefault((repr(a["index"]), tuple(a["shape"])), []).append(t)
        if len(groups) == len(pieces):
            return pieces
        out = []
        for ts in groups.values():
            if len(ts) > 1:
                src = Tracer(self.ctx, g[ts[0].id]["args"][0])
                for t in ts[1:]:
                    src = F.add(src, Tracer(self.ctx, g[t.id]["args"][0]))
                a = g[ts[0].id]["attrs"]
                ts = [F.unslice(src, a["index"], a["shape"])]
            out.extend(ts)
        return out

    def _positions(self, t):
        d = self.ctx.graph[t.id]
        return OPS[d["op"]].places(d["attrs"])

    def _disjoint(self, pieces):
        """(pieces that do not overlap, the others): greedy, in order. A piece is a basic
        slice, so its own positions never repeat."""
        taken = np.zeros(int(math.prod(pieces[0].shape)), bool)
        placed, over = [], []
        for t in pieces:
            pos = self._positions(t)
            if not taken[pos].any():
                taken[pos] = True
                placed.append(t)
            else:
                over.append(t)  # overlapping pieces add up
        return placed, over

    def _place(self, pieces):
        g = self.ctx.graph
        shape = pieces[0].shape
        # in the order of their places: x[1] read before x[0] still makes one concatenation
        pieces = sorted(pieces, key=lambda t: self._positions(t).min(initial=2 ** 62))
        flat_pos = np.concatenate([self._positions(t) for t in pieces])
        srcs = [F.reshape(Tracer(self.ctx, g[t.id]["args"][0]), (-1,)) for t in pieces]
        n, size = len(flat_pos), int(math.prod(shape))
        if n == size and np.array_equal(flat_pos, np.arange(size)):
            return F.reshape(F.concatenate(srcs, 0), shape)
        if len(pieces) <= _FEW or size > _GATHER_MAX:
            # a few pieces (or a large array): added into zeros at their slices, where a
            # gather would read a constant index table as large as the array
            a = [g[t.id]["attrs"] for t in pieces]
            return F.place_add([Tracer(self.ctx, g[t.id]["args"][0]) for t in pieces],
                               [x["index"] for x in a], shape)
        dtype = g[pieces[0].id]["dtype"]
        idx = np.full(size, n, np.intp)  # n: the zero after the pieces
        idx[flat_pos] = np.arange(n)
        flat = F.concatenate(srcs + [F.zeros((1,), dtype)], 0)
        return F.reshape(F.gather(flat, [idx], (("a", 0),)), shape)


_FEW = 8                # pieces placed by adding them into zeros, not by one gather
_GATHER_MAX = 1 << 20   # elements beyond which pieces are never placed by a gather


def _name_cotangent(ctx, t, d):
    node = ctx.graph[t.id]
    if node["name"] is None and d["name"] and node["op"] not in ("input", "const"):
        node["name"] = "g_" + str(d["name"])


def derive_tangent(g: Graph, wrt) -> Graph:
    """Forward mode: inputs are g's inputs plus one tangent per `wrt` input; outputs are g's
    outputs followed by their tangents (zeros where an output does not depend on wrt)."""
    ctx = TraceContext()
    with ctx:
        ins = _new_inputs(ctx, g)
        tans = {}
        tan_inputs = []
        for p in wrt:
            d = g[g.inputs[p]]
            t = ctx.input(d["shape"], d["dtype"], f"tangent_{d['name']}")
            tan_inputs.append(t)
            tans[g.inputs[p]] = t
        env = dict(zip(g.inputs, ins))
        # tangents only of values an output reads: an unused factor (the full U of an svd
        # whose S alone is used) may have no tangent rule
        used, stack = set(g.outputs), list(g.outputs)
        while stack:
            for a in g[stack.pop()]["args"]:
                if a not in used:
                    used.add(a)
                    stack.append(a)
        # custom nodes whose tangent reaches an output (not only through a stop_gradient, as
        # a rule's own call `ans = f(x)` inside another's primal): those are consumed
        differentiated = _reach(g.outputs, _args_but_stopped(g))
        for n in g.nodes():
            if n in env:
                continue
            d = g[n]
            with where_override(d["where"]):
                env[n] = ctx.emit(d["op"], [env[a] for a in d["args"]], d["attrs"],
                                  where=d["where"], name=d["name"])
            ts = [tans.get(a) for a in d["args"]]
            if n not in used or all(t is None for t in ts):
                continue
            rule = OPS[d["op"]].jvp
            if rule is None:
                raise GradError(f"no jvp rule for op {d['op']!r} (at {d['where']}); add one to "
                                f"OPS[{d['op']!r}] in ir/ops.py")
            w = d["where"].with_role(f"jvp of {d['op']}") if d["where"] else None
            with where_override(w):
                t = rule(ts, env[n], *[env[a] for a in d["args"]], **d["attrs"])
            if t is not None:
                tans[n] = t
            if OPS[d["op"]].kind == "custom" and n in differentiated:
                # differentiated here by its rule: the new graph reads its primal (replay)
                env[n] = env[custom_primal(g, n)]
        outs = [env[o] for o in g.outputs]
        touts = [tans[o] if o in tans else F.zeros(env[o].shape, env[o].dtype)
                 for o in g.outputs]
    new = ctx.graph
    new.inputs = [t.id for t in ins] + [t.id for t in tan_inputs]
    new.outputs = [o.id for o in outs] + [t.id for t in touts]
    new.meta = dict(g.meta)
    new.meta["n_primal_outputs"] = len(outs)
    return new
