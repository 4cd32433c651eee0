"""The pass pipeline: traced graph -> simplified, checkpointed, fused, scheduled graph.

Each step is a function from graph to graph; DEBUG=2 prints the IR after every pass.
"""
from __future__ import annotations

import math
import numpy as np

from ..ir.verify import verify
from .donation import normalize
from .schedule import flops, schedule
from .simplify import simplify


def run_pipeline(g, backend, fuse=True, checkpoint=None, memory_budget=None, debug=0,
                 donate_argnums=()):
    """simplify -> fusion (if the backend fuses) -> checkpoint (if asked) -> schedule.

    donate_argnums: arguments whose buffers results may take; the schedule writes them in
    place where the backend can (its `in_place_ok`) and runs those updates early.

    Checkpointing runs last before scheduling because it decides the order of the backward
    half (recomputations go just before their first use); it may leave that order in
    g.meta["order"], which the schedule then follows.
    """
    steps = [("simplify", simplify)]
    if fuse and getattr(backend, "FUSES", False):
        from .fusion import fuse_elementwise
        steps.append(("fusion", lambda x: fuse_elementwise(x, **getattr(
            backend, "FUSION_OPTIONS", {}))))
    scratch = getattr(backend, "scratch_bytes", None)   # its fused groups' temporaries
    # results the backend writes into donated arguments' buffers allocate nothing
    donate = dict(donate_argnums=normalize(donate_argnums),
                  in_place_ok=getattr(backend, "in_place_ok", None))
    if checkpoint is not None or memory_budget is not None:
        from .checkpoint import schedule_checkpoints
        steps.append(("checkpoint", lambda x: schedule_checkpoints(
            x, segments=checkpoint, budget=memory_budget, scratch=scratch, **donate)))

    def scheduled(x):
        return schedule(x, order=x.meta.get("order"), scratch=scratch, **donate)
    steps.append(("schedule", scheduled))
    for i, (name, step) in enumerate(steps):
        g = step(g)
        if debug >= 1 or i == len(steps) - 1:
            # every pass's output when debugging; the scheduled graph always (each pass
            # keeps the invariants, so a break shows there too, without naming the pass)
            verify(g, name)
        if debug >= 2:
            print(f"-- after {name} --\n{g}\n")
    return g


def memory_report(g):
    from ..backends.runtime import MemoryReport, _shared_outputs
    s = g.meta["schedule"]
    fwd = sum(flops(g, n) for n in s.order if g[n]["where"] is None or not g[n]["where"].role)
    ck = g.meta.get("checkpoints", {})
    # after the generated code returns, the runtime copies results that are arguments,
    # constants or one array returned twice (Program.run_flat): they join the results
    copies = sum(_nbytes(g[g.outputs[i]]) for i in _shared_outputs(g))
    # and a broadcast result is made a new array by the generated code (np.array of the view)
    copies += sum(_nbytes(g[o]) for o in set(g.outputs) if g[o]["op"] == "broadcast_to")
    live = list(s.live_bytes)
    if copies:
        live.append((live[-1] if live else 0) + copies)
    return MemoryReport(max(s.peak_bytes, live[-1] if live else 0), live, list(s.order),
                        dict(ck), g.meta.get("recomputed_flops", 0), fwd,
                        s.peak_working_bytes, dict(g.meta.get("checkpoint_plan") or {}))


def _nbytes(d):
    return int(math.prod(d["shape"])) * np.dtype(d["dtype"]).itemsize
