"""Replaying a graph over a stack of inputs at once (the sweeps of a Jacobian or Hessian).

`replay_batched` emits a graph into the current trace with some inputs carrying a new leading
axis of size n: the nodes that depend on none of them are emitted once and shared, the others
by their op's batch rule (ir/ops.py, OpDef.batch) as one node over the stack, or, for an op
without one, once per element of the stack. jacobian's n basis sweeps through the linearized
program become one sweep of n-times-larger arrays: the program no longer grows with n, and
NumPy runs a few large operations where it ran many tiny ones.
"""
from __future__ import annotations

from ..ir.ops import OPS
from . import functions as F
from .tracer import current, where_override


def replay_batched(graph, inputs, batched, n, env=None):
    """Emit graph with `inputs`, where inputs[i] has a leading stack axis of n if batched[i].

    Returns (outputs, stacked, env): stacked[k] says whether output k carries the axis (an
    output that depends on no stacked input is the same for all n and is emitted once); env
    maps graph nodes to tracers and may be passed in to share nodes already emitted.
    """
    env = dict(env or {})
    stacked = {nid: False for nid in env}
    assert len(inputs) == len(graph.inputs) == len(batched)
    for nid, x, b in zip(graph.inputs, inputs, batched):
        env[nid], stacked[nid] = x, bool(b)
    ctx = current() or (inputs[0].ctx if inputs else None)
    live = live_nodes(graph)
    for nid in graph.nodes():
        if nid in env or nid not in live:
            continue
        d = graph[nid]
        xs = [env[a] for a in d["args"]]
        bs = [stacked[a] for a in d["args"]]
        with where_override(d["where"]):
            if not any(bs):
                env[nid] = ctx.emit(d["op"], xs, d["attrs"], where=d["where"], name=d["name"])
            else:
                env[nid] = _batched(d, xs, bs, n)
        stacked[nid] = any(bs)
    return [env[o] for o in graph.outputs], [stacked[o] for o in graph.outputs], env


def live_nodes(graph):
    """The nodes the outputs depend on (a VJP rule also emits the cotangents of arguments
    that need none: a constant matrix's, n x n, dead until simplification removes it)."""
    live, todo = set(graph.outputs), list(graph.outputs)
    while todo:
        for a in graph.args(todo.pop()):
            if a not in live:
                live.add(a)
                todo.append(a)
    return live


def _batched(d, xs, bs, n):
    rule = OPS[d["op"]].batch
    out = rule(n, xs, bs, d["attrs"]) if rule is not None else None
    if out is None:     # no rule (a 1-d correlation, np.maximum.at), or none for these arguments
        out = F.stack([xs[0].ctx.emit(d["op"], [F.slice_(x, (i,)) if b else x
                                                for x, b in zip(xs, bs)], d["attrs"])
                       for i in range(n)])
    want = (n,) + tuple(d["shape"])
    assert tuple(out.shape) == want and out.dtype == d["dtype"], (d["op"], out.shape, want)
    return out

