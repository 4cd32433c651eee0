"""verify(graph, pass_name): check IR invariants and name the node and pass that broke one."""
from __future__ import annotations

import numpy as np

from .errors import VerifyError
from .ops import OPS


def verify(g, pass_name="?"):
    def fail(n, msg):
        raise VerifyError(f"after pass {pass_name!r}: node v{n} ({g[n]['op']}): {msg}")
    for n in g.nodes():
        d = g[n]
        op = OPS.get(d["op"])
        if op is None:
            fail(n, "unknown op")
        args = d["args"]
        if op.arity is not None and len(args) != op.arity:
            fail(n, f"expects {op.arity} arguments, has {len(args)}")
        if any(a >= n for a in args):
            fail(n, "an argument is not created before the node (order is not topological)")
        if any(n not in g._users[a] for a in args):
            fail(n, f"an argument's users do not list it (args {args})")
        try:
            shape = tuple(op.shape([g[a]["shape"] for a in args], d["attrs"]))
            dtype = np.dtype(op.dtype([g[a]["dtype"] for a in args], d["attrs"]))
        except Exception as e:  # noqa: BLE001 - reported as a verify failure
            fail(n, f"shape rule failed: {e}")
        if shape != d["shape"]:
            fail(n, f"shape {d['shape']} but its rule gives {shape}")
        if dtype != d["dtype"]:
            fail(n, f"dtype {d['dtype']} but its rule gives {dtype}")
    for o in g.outputs:
        if o not in g:
            raise VerifyError(f"after pass {pass_name!r}: output v{o} is not in the graph")
