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

import networkx as nx

from ..frontend import functions as F
from ..frontend.trace import replay
from ..frontend.tracer import TraceContext, where_override
from ..ir.errors import GradError
from ..ir.graph import Graph
from ..ir.ops import OPS


def _relevant(g: Graph, wrt_ids, out_ids):
    down = set(wrt_ids)
    for w in wrt_ids:
        down |= nx.descendants(g.nx, w)
    up = set(out_ids)
    for o in out_ids:
        up |= nx.ancestors(g.nx, o)
    return down & up


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
    ctx = TraceContext()
    with ctx:
        ins = _new_inputs(ctx, g)
        outs, env = replay(g, ins)
        diff = outputs if outputs is not None else ([0] if seed == "ones"
                                                    else list(range(len(g.outputs))))
        diff_ids = [g.outputs[k] for k in diff]
        cot = {}
        for k, o in zip(diff, diff_ids):
            d = g[o]
            if seed == "ones":
                w = d["where"].with_role("seed of the reverse sweep") if d["where"] else None
                with where_override(w):
                    c = F.full_like(env[o], 1.0)
            else:
                c = ctx.input(d["shape"], d["dtype"], f"cotangent{k}", where=None)
            cot[o] = c if o not in cot else F.add(cot[o], c)
        cot_inputs = [cot[o] for o in diff_ids] if seed == "inputs" else []
        wrt_ids = [g.inputs[p] for p in wrt]
        need = _relevant(g, wrt_ids, diff_ids)
        for n in reversed(g.nodes()):
            if n not in cot or n not in need or not g.args(n):
                continue
            d = g[n]
            _name_cotangent(ctx, cot[n], d)
            rule = OPS[d["op"]].vjp
            todo = [a for a in g.args(n) if a in need]
            if not todo:
                continue
            if rule is None:
                raise GradError(f"no vjp rule for op {d['op']!r} (at {d['where']}); add one to "
                                f"OPS[{d['op']!r}] in ir/ops.py or stop the gradient there")
            # the op, not the node id: later passes renumber nodes, the op stays true
            w = d["where"].with_role(f"vjp of {d['op']}") if d["where"] else None
            with where_override(w):
                gs = rule(cot[n], env[n], *[env[a] for a in g.args(n)], **d["attrs"])
                for a, ga in zip(g.args(n), gs):
                    if ga is None or a not in need:
                        continue
                    cot[a] = ga if a not in cot else F.add(cot[a], ga)
        grads = []
        for i, t in zip(wrt_ids, [ins[p] for p in wrt]):
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
        for n in g.nodes():
            if n in env:
                continue
            d = g[n]
            with where_override(d["where"]):
                env[n] = ctx.emit(d["op"], [env[a] for a in d["args"]], d["attrs"],
                                  where=d["where"], name=d["name"])
            ts = [tans.get(a) for a in d["args"]]
            if all(t is None for t in ts):
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
        outs = [env[o] for o in g.outputs]
        touts = [tans[o] if o in tans else F.zeros(env[o].shape, env[o].dtype)
                 for o in g.outputs]
    new = ctx.graph
    new.inputs = [t.id for t in ins] + [t.id for t in tan_inputs]
    new.outputs = [o.id for o in outs] + [t.id for t in touts]
    new.meta = dict(g.meta)
    new.meta["n_primal_outputs"] = len(outs)
    return new
