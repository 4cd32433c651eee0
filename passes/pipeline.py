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

    Checkpointing decides the order of the backward half (recomputations go just before
    their first use): it builds its graph in that order or leaves it in g.meta["order"],
    which the schedule then follows. It cuts the forward pass at single values, and fusion
    before it can leave none: a loop of elementwise steps (x = x - h * k * np.sin(x), an ODE
    integrator) fuses into a group whose results are every step's state, or with the
    backward into one group that keeps a full array per step. So with both, the pipeline
    also runs simplify -> checkpoint -> fusion -> schedule (fusion keeping the checkpoint
    pass's order) and keeps that program when it fits the budget and its static peak is
    at least 5% lower (else the first: its fused forward groups recompute faster).
    """
    if debug >= 2:
        print(f"-- traced (with its adjoint, before any pass) --\n{g}\n")
    fusing = bool(fuse and getattr(backend, "FUSES", False))
    if fusing:
        from .fusion import fuse_elementwise
        fusion = ("fusion", lambda x: fuse_elementwise(x, **getattr(
            backend, "FUSION_OPTIONS", {})))
    scratch = getattr(backend, "scratch_bytes", None)   # its fused groups' temporaries
    # results the backend writes into donated arguments' buffers allocate nothing
    donate = dict(donate_argnums=normalize(donate_argnums),
                  in_place_ok=getattr(backend, "in_place_ok", None))

    def scheduled(x):
        return schedule(x, order=x.meta.get("order"), scratch=scratch, **donate)
    if checkpoint is None and memory_budget is None:
        return _run(g, [("simplify", simplify)] + ([fusion] if fusing else []) +
                    [("schedule", scheduled)], debug)
    from .checkpoint import schedule_checkpoints

    def cut_under(budget):
        return ("checkpoint", lambda x: schedule_checkpoints(
            x, segments=checkpoint, budget=budget, scratch=scratch, **donate))
    cut = cut_under(memory_budget)
    if not fusing:
        return _run(g, [("simplify", simplify), cut, ("schedule", scheduled)], debug)
    from ..ir.errors import BudgetError
    simple = _run(g, [("simplify", simplify)], debug)

    def fit(budget):
        return _fit(simple, budget, cut_under, fusion, scheduled, debug)
    try:
        return fit(memory_budget)
    except BudgetError as e:
        if memory_budget is None:
            raise
        # the advice names a budget that fits: the checkpoint pass's lowest peak is the
        # unfused program's, and fusion moves it (sweep 29: the fused-first order's minimum,
        # 28.7 MiB, was advised where 9.8 MiB fitted); search upward from the lowest found
        # the fused program without checkpoints fits any budget from its own peak
        whole = memory_report(_run(simple, [fusion, ("schedule", scheduled)], debug))
        found = _lowest_fitting(fit, memory_budget,
                                getattr(e, "lowest_found", []) + [whole.peak_bytes])
        if found is None:
            raise
        low, peak = found
        from .checkpoint import _SLACK, _size
        name = g.meta.get("fn_name", "the function")
        raise BudgetError(
            f"memory_budget={memory_budget} bytes ({_size(memory_budget)}) is too small for "
            f"{name}: the lowest static peak found is {peak} bytes ({_size(peak)}), with "
            f"fusion, at memory_budget={low}. Raise the budget to at least "
            f"memory_budget={low}, or shrink the batch or the model (fuse=False keeps each "
            "step's values apart and may fit lower). " + _SLACK) from None


def _fit(simple, memory_budget, cut_under, fusion, scheduled, debug):
    """Both orders of fusion and checkpointing (see run_pipeline) under memory_budget (or
    None); the better program, or BudgetError (its lowest_found: the peaks seen, bytes)."""
    from ..ir.errors import BudgetError
    cut = cut_under(memory_budget)
    tries, failed, lows, cut_first = [], None, [], False
    for k, steps in enumerate(([fusion, cut], [cut, fusion])):
        try:
            tries.append(_run(simple, steps + [("schedule", scheduled)], debug))
            cut_first = k == 1
        except BudgetError as e:
            failed = failed or e
            if getattr(e, "lowest", None) is not None:
                lows.append(e.lowest)
    peaks = [memory_report(x).peak_bytes for x in tries]
    # the checkpoint pass's margin under a budget, for what the static estimate does not see
    # (array headers: a measured peak 0.1% above an estimate just under the budget)
    target = None if memory_budget is None else memory_budget - memory_budget // 1000
    if memory_budget is not None and tries and (
            min(peaks) > memory_budget or (cut_first and peaks[-1] > target)):
        # fusion after the checkpoint pass raised the peak the pass fitted (groups keep
        # temporaries): fit again under the budget lowered by the excess, a few times
        budget, best = memory_budget, (tries[-1], peaks[-1])
        for _ in range(_REFITS):
            budget -= peaks[-1] - target
            if budget <= 0:
                break       # the excess is the whole budget: it cannot be fitted lower
            try:
                tries[-1] = _run(simple, [cut_under(budget), fusion, ("schedule", scheduled)],
                                 debug)
            except BudgetError:
                break
            peaks[-1] = memory_report(tries[-1]).peak_bytes
            if peaks[-1] <= target:
                break
        if peaks[-1] > memory_budget and best[1] <= memory_budget:
            tries[-1], peaks[-1] = best     # the refits lost a program that fitted
    if memory_budget is not None:
        # fusion after the checkpoint pass may move the peak it fitted: only a program whose
        # final schedule fits counts (else the checkpoint pass's BudgetError, as without it)
        fits = [(x, p) for x, p in zip(tries, peaks) if p <= memory_budget]
        if not fits:
            if failed is not None:
                e = BudgetError(f"{failed} (with fusion; fuse=False keeps each step's "
                                "values apart and may fit)")
            else:
                e = BudgetError(
                    f"memory_budget={memory_budget} bytes: no checkpointing of the fused "
                    f"program fits (lowest static peak {min(peaks)} bytes); fuse=False may, or "
                    "raise the budget")
            e.lowest_found = lows + peaks
            raise e
        tries, peaks = [x for x, _ in fits], [p for _, p in fits]
        if len(tries) == 2:
            # a budget asks for the fewest recomputed FLOPs that fit (sweep 29: a 60 MB
            # budget kept the fused-first program, recomputing 129M FLOPs at a 38 MB peak,
            # where the other order fitted 35 MB with 107M), with the checkpoint pass's
            # margin for what the estimate does not see (array headers: a measured peak
            # 0.1% above an estimate just under the budget)
            roomy = [x for x, p in zip(tries, peaks) if p <= target]
            return min(roomy or tries, key=lambda x: (x.meta.get("recomputed_flops", 0),
                                                      memory_report(x).peak_bytes))
    if len(tries) < 2:
        return tries[0]
    k = 1 if peaks[1] < (1 - _BETTER) * peaks[0] else 0
    return _say_segments(tries[k], tries[1 - k], peaks[k], peaks[1 - k])


def _say_segments(kept, other, peak, other_peak):
    """kept, with a plan note when checkpoint=k was asked and it has fewer segments (the
    fused-then-checkpointed order cuts between fused groups only; sweep 31: checkpoint=8 of
    an ODE kept 2 segments, and the note said nothing)."""
    plan = kept.meta.get("checkpoint_plan")
    mode = plan.get("mode") if plan else None
    if not plan or not isinstance(mode, int) or isinstance(mode, bool) or \
            plan.get("segments", mode) >= mode or plan.get("note"):
        return kept
    seg_o = (other.meta.get("checkpoint_plan") or {}).get("segments")
    plan = dict(plan)
    plan["note"] = (f"checkpoint={mode} asked; {plan['segments']} segment"
                    f"{'s' if plan['segments'] != 1 else ''} kept: fusion keeps its groups "
                    f"whole, and this order's static peak ({peak} bytes) was not 5% above "
                    f"the other's ({other_peak} bytes, {seg_o} segments); fuse=False cuts "
                    f"exactly {mode}")
    kept.meta["checkpoint_plan"] = plan
    return kept


def _lowest_fitting(fit, budget, found, tries=8):
    """(the lowest budget above `budget` that fit() accepts, its program's peak): upward
    from the lowest peak found so far, x1.15 a try or the next peak found if that is lower,
    each checked by compiling; None when none of `tries` fits."""
    from ..ir.errors import BudgetError
    found = sorted({int(x) for x in found if x > budget})
    b = found[0] if found else int(budget * 1.15) + 1
    for _ in range(tries):
        try:
            return b, memory_report(fit(b)).peak_bytes
        except BudgetError:
            b = min([int(b * 1.15) + 1] + [x for x in found if x > b])
    return None


# how many times a budget is fitted again after fusion moved the checkpointed peak above it
_REFITS = 4

# the checkpointed-then-fused program replaces the fused-then-checkpointed one when its
# static peak is this much lower
_BETTER = 0.05


def _run(g, steps, debug):
    for i, (name, step) in enumerate(steps):
        g = step(g)
        if debug >= 1 or (i == len(steps) - 1 and name == "schedule"):
            # every pass's output when debugging; the scheduled graph always (each pass
            # keeps the invariants, so a break shows there too, without naming the pass)
            verify(g, name)
        if debug >= 2:
            print(f"-- after {name} --\n{g}\n")
    return g


def memory_report(g):
    from ..backends.runtime import MemoryReport, _shared_outputs
    s = g.meta["schedule"]
    fwd = g.meta.get("forward_flops") or sum(
        flops(g, n) for n in s.order if g[n]["where"] is None or not g[n]["where"].role)
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
