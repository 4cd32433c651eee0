"""Gradient checkpointing: joint forward+adjoint graph -> graph that recomputes segments.

Chen et al. 2016 ("Training deep nets with sublinear memory cost") on a general graph. A
candidate checkpoint is a forward value c through which every path from the data to the
loss passes: the values computed before c (everything that does not depend on c) reach the
rest of the forward pass only through c, inputs (always alive), values that depend on
parameters alone (meta["parameters"], the differentiated inputs that adjit.grad records;
without it every input counts as data), and at most a few small passengers (a scalar loss
term of another branch, one-hot labels). Chosen candidates cut the forward pass into
segments. In the backward half, a segment's values are recomputed from its checkpoint just
before the first adjoint that needs them, with the same ops (so results are bit-identical),
and only checkpoints stay alive between the forward and the backward. checkpoint="sqrt"
picks about sqrt(L) segments of similar bytes; an int picks that many; memory_budget picks
by dynamic programming the checkpoints with the fewest recomputed FLOPs whose static peak
fits (Chen et al. section 4).

Output invariant: node ids are the execution order (forward, then the backward with the
recomputations interleaved); meta["checkpoints"] says why each value kept for the backward
is kept; meta["recomputed_flops"] counts the FLOPs of the recomputed copies.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import numpy as np

from ..ir.errors import BudgetError, OptionError
from ..ir.graph import Graph, Where
from .schedule import buffers, flops, kind, plan

BACKWARD_ROLES = ("vjp of", "seed of")
PASSENGER_SHARE = 8         # passengers may add at most 1/8 of the checkpoint's own bytes;
WIDE_PASSENGER_SHARE = 1    # where that leaves fewer than two cut points, as much as the
                            # checkpoint itself: a state of two arrays (a leapfrog's x and v)
                            # then crosses as x with v beside it
MAX_PASSENGERS = 16
TINY_SHARE = 256            # a candidate smaller than 1/256 of the largest value is no cut


# "sqrt" is applied only when it lowers the static peak, or the peak of working memory (the
# peak less the results, such as gradients, already computed), by at least this fraction:
# its recomputation costs about one more forward pass
_WORTH = 0.05


def schedule_checkpoints(g: Graph, segments=None, budget=None, scratch=None,
                         donate_argnums=(), in_place_ok=None) -> Graph:
    """Return a copy of g whose backward half recomputes forward segments.

    segments: "sqrt" (about sqrt(L) segments), an int (that many segments) or None;
    budget: bytes the static peak must stay under (then segments is ignored); scratch: the
    backend's temporaries per node, for the exact peak (passes/schedule.py); donate_argnums,
    in_place_ok: results written into donated arguments (a training step's updated
    parameters) take no memory, as the schedule will count them. Raises BudgetError when no
    choice of checkpoints fits the budget.
    """
    segments, budget = check_options(segments, budget)
    a = _analyze(g, scratch)
    if not a.m and g.meta.get("parameters") is not None:
        # every input differentiated (a simulation's gradient with respect to its initial
        # state): no input is data by that rule, so take the differentiated ones as data
        a = _analyze(g, scratch, every_input_data=True)
    a.donate = dict(donate_argnums=donate_argnums, in_place_ok=in_place_ok)
    if budget is not None:
        chosen = _fit_budget(a, int(budget))
    elif segments is None:
        chosen = None
    else:
        chosen = _even_segments(a, segments)
    note = None
    if not a.m:
        note = ("no candidate cut points: no value lies on every path from the data inputs to "
                "the loss, so no segment can be recomputed and the graph is unchanged")
    elif chosen:
        out = _rewrite(a, chosen)
        # checkpointing pays recomputation for memory: check that it buys some
        full = _exact(a, [], schedule=True)
        got = plan(out, out.meta.get("order"), a.scratch, **a.donate)
        saves = full.peak_bytes - got.peak_bytes
        saves_working = full.peak_working_bytes - got.peak_working_bytes
        if saves < _WORTH * full.peak_bytes and \
                saves_working < _WORTH * full.peak_working_bytes:
            # recomputation that buys no memory, or next to none (a recurrence whose input
            # projections every step reads leaves few cut points): adjit's own choice
            # ("sqrt") is dropped, an explicit number of segments or a budget is done as asked
            applied = segments != "sqrt"
            how = "not lower the static peak" if saves <= 0 else \
                (f"lower the static peak by only {_size(saves)} "
                 f"({100 * saves / full.peak_bytes:.1f}%)")
            note = (f"{len(chosen) + 1} segments {'do' if applied else 'would'} {how} "
                    f"({_size(got.peak_bytes)} against {_size(full.peak_bytes)} "
                    "without checkpointing): the results, or the values kept across the "
                    "checkpoints, outweigh the activations recomputed"
                    + ("" if applied else ", so the graph is unchanged"))
            if not applied:
                unchanged = g.copy()
                unchanged.meta["checkpoint_plan"] = _plan_note(a, [], segments, budget, note)
                return unchanged
        out.meta["checkpoint_plan"] = _plan_note(a, chosen, segments, budget, note)
        return out
    elif budget is not None:
        note = "the whole program fits the budget without recomputation"
    out = g.copy()
    out.meta["checkpoint_plan"] = _plan_note(a, [], segments, budget, note)
    return out


def _size(b) -> str:
    for unit, k in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= k:
            return f"{b / k:.2f} {unit}"
    return f"{int(b)} bytes"


def check_options(checkpoint=None, memory_budget=None):
    """-> (checkpoint, memory_budget) normalised (a NumPy integer becomes an int, a whole
    float budget an int); raises OptionError naming the option and what to pass."""
    if checkpoint is not None:
        if isinstance(checkpoint, str):
            if checkpoint != "sqrt":
                raise OptionError(f"checkpoint must be None, 'sqrt' or a number of segments "
                                  f"(an int >= 1), got {checkpoint!r}")
        elif isinstance(checkpoint, (int, np.integer)) and not isinstance(
                checkpoint, (bool, np.bool_)):
            if checkpoint < 1:
                raise OptionError(f"checkpoint must be None, 'sqrt' or a number of segments "
                                  f"(an int >= 1; 1 means no recomputation), got {checkpoint}")
            checkpoint = int(checkpoint)
        else:
            raise OptionError(f"checkpoint must be None, 'sqrt' or a number of segments "
                              f"(an int >= 1), got {checkpoint!r} of type "
                              f"{type(checkpoint).__name__}")
    if memory_budget is not None:
        ok = isinstance(memory_budget, (int, float, np.integer, np.floating)) and \
            not isinstance(memory_budget, (bool, np.bool_))
        if not ok:
            raise OptionError(f"memory_budget must be a number of bytes (e.g. "
                              f"memory_budget=64 * 2**20 for 64 MiB), got {memory_budget!r} "
                              f"of type {type(memory_budget).__name__}")
        if not (math.isfinite(memory_budget) and memory_budget >= 1):
            raise OptionError(f"memory_budget must be a positive, finite number of bytes (e.g. "
                              f"memory_budget=64 * 2**20 for 64 MiB; None for no budget), got "
                              f"{memory_budget!r}")
        memory_budget = int(memory_budget)
    return checkpoint, memory_budget


# -- analysis ---------------------------------------------------------------------------------
# a data value computed from the inputs by at most this many elementwise data nodes (an SDE's
# noise term np.exp(mu + s * Z[t])) is light: cheap to recompute from the inputs, it is no
# passenger of a cut and is computed in the stage that reads it, so each step's own term
# does not cross every checkpoint
LIGHT_DEPTH = 6


@dataclass
class _Analysis:
    g: Graph
    backward: set                 # adjoint nodes and everything computed from them
    free: set                     # inputs, constants and views of them: never allocate
    floating: set                 # forward values of parameters alone: kept like parameters
    data: list                    # the other forward nodes, in id (topological) order
    saved: set                    # data nodes the backward reads (not results)
    storage: dict                 # node -> bytes of the buffer it holds alive
    base: dict                    # node -> node whose buffer it uses
    chain: list = field(default_factory=list)       # candidate checkpoints, nested
    cross: dict = field(default_factory=dict)       # candidate -> bytes of what crosses it
    stage: dict = field(default_factory=dict)       # data node -> index of its stage
    light: set = field(default_factory=set)         # data nodes cheap to recompute (above)
    scratch: object = None                          # the backend's temporaries per node
    donate: dict = field(default_factory=dict)      # donation options of schedule.plan

    @property
    def m(self):
        return len(self.chain)


def _analyze(g: Graph, scratch=None, every_input_data=False) -> _Analysis:
    nodes = g.nodes()
    back = set()
    for n in nodes:
        w = g[n]["where"]
        if (w is not None and w.role.startswith(BACKWARD_ROLES)) \
                or any(x in back for x in g.args(n)):
            back.add(n)
    base, alloc = buffers(g, nodes)
    free = {n for n in nodes if alloc[n] == 0 and (kind(g[base[n]]["op"]) == "source")}
    params = None if every_input_data else g.meta.get("parameters")
    inputs = set(g.inputs)
    data_dep = {}
    for k, n in enumerate(g.inputs):
        # integer inputs (labels, indices) are not data either: what depends on them alone
        # (one-hot targets) is small and read at the end, like the parameters
        data_dep[n] = (params is None or k not in params) and g[n]["dtype"].kind in "fc"
    for n in nodes:
        if n not in data_dep:
            data_dep[n] = any(data_dep[x] for x in g.args(n))
    fwd = [n for n in nodes if n not in back and n not in free and n not in inputs]
    data = [n for n in fwd if data_dep[n]]
    floating = {n for n in fwd if not data_dep[n]}
    outputs = set(g.outputs)
    saved = {n for n in data if n not in outputs and any(u in back for u in g.users(n))}
    storage = {n: alloc[base[n]] for n in nodes}
    a = _Analysis(g, back, free, floating, data, saved, storage, base, scratch=scratch)
    a.light = _light(g, data)
    _find_candidates(a)
    if a.m < 2:
        strict = (a.chain, a.cross, dict(a.stage))
        _find_candidates(a, WIDE_PASSENGER_SHARE)
        if a.m <= len(strict[0]):
            a.chain, a.cross, a.stage = strict
    return a


def _light(g, data) -> set:
    """The data nodes that at most LIGHT_DEPTH elementwise or view nodes compute from the
    inputs (each of their data arguments light too): no matrix product or reduction, whose
    recomputation would be real work."""
    from ..ir.ops import OPS
    inside = set(data)
    size, light = {}, set()
    for n in data:
        args = [x for x in g.args(n) if x in inside]
        if any(x not in light for x in args):
            continue
        opdef = OPS.get(g[n]["op"])
        if opdef is None or opdef.fusion not in ("map", "broadcast") and opdef.kind != "view":
            continue    # elementwise steps and views only: a product or a sum is work
        total = 1 + sum(size[x] for x in args)
        if total <= LIGHT_DEPTH:
            size[n] = total
            light.add(n)
    return light


def _find_candidates(a: _Analysis, share=PASSENGER_SHARE):
    """Candidates by bit sets over the data nodes; then collapse equivalent neighbours."""
    g, data = a.g, a.data
    idx = {n: i for i, n in enumerate(data)}
    users = {n: [u for u in g.users(n) if u in idx] for n in data}
    desc, parents = {}, {}
    for n in reversed(data):
        d = 1 << idx[n]
        p = 0
        for x in g.args(n):
            if x in idx:
                p |= 1 << idx[x]
        for u in users[n]:
            d |= desc[u]
            p |= parents[u]
        desc[n], parents[n] = d, p
    saved = sum(1 << idx[n] for n in a.saved)
    light = sum(1 << idx[n] for n in a.light)
    cands, cross = [], {}
    # a value far smaller than the activations (the 0-d -k of a spring force -k * x, computed
    # from a data input once) is no useful cut, and as the first candidate it would keep the
    # rest nested below it and stop the wider search
    tiny = max((a.storage[n] for n in data), default=0) / TINY_SHARE
    for c in data:
        if not users[c] or kind(g[c]["op"]) == "view" or a.storage[c] == 0 or \
                a.storage[c] < tiny or c in a.light:
            continue         # (a light value is recomputed from the inputs: no cut)
        after, par = 0, 0
        for u in users[c]:
            after |= desc[u]
            par |= parents[u]
        if not after & saved:
            continue         # nothing after c for the backward (an auxiliary output's branch)
        x = par & ~after     # values computed without c and read after it
        x &= ~(1 << idx[c])
        if x & light:
            # light ones are recomputed where they are read (_assign_stages), unless c needs
            # them itself (then they are made before it and cross it)
            x &= ~(light & ~_ancestors_bits(a, c, idx))
        if x.bit_count() > 4 * MAX_PASSENGERS:
            continue         # (bounds the walk below; few of so many would be tiny)
        extra, big, count = 0, 0, 0
        while x:
            low = x & -x
            size = a.storage[data[low.bit_length() - 1]]
            extra += size
            if size >= tiny:      # tiny passengers (a 0-d -k) neither count nor weigh
                big += size
                count += 1
            x ^= low
        if count > MAX_PASSENGERS or big * share > a.storage[c]:
            continue
        if cands and not (desc[cands[-1]] >> idx[c]) & 1:
            continue         # not below the previous candidate: keep the segments nested
        cands.append(c)
        cross[c] = a.storage[c] + extra
    a.chain, a.cross = cands, cross
    _assign_stages(a)
    keep = _collapse(a)
    if len(keep) < len(a.chain):
        a.chain = keep
        _assign_stages(a)


def _ancestors_bits(a, c, idx):
    """The light data nodes c is computed from, as a bit set (walks light nodes only)."""
    bits, todo, seen = 0, [c], set()
    while todo:
        n = todo.pop()
        for x in a.g.args(n):
            if x in a.light and x not in seen:
                seen.add(x)
                bits |= 1 << idx[x]
                todo.append(x)
    return bits


def _assign_stages(a: _Analysis):
    """Stage t holds the data nodes after candidate t-1, up to and including candidate t; a
    light node that is no candidate goes to the first stage that reads it (it is computed,
    and recomputed, there)."""
    pos = {c: t for t, c in enumerate(a.chain)}
    stage = {}
    for n in a.data:
        s = 0
        for x in a.g.args(n):
            if x in stage:
                s = max(s, stage[x], pos[x] + 1 if x in pos else 0)
        stage[n] = s
    inside = set(a.data)
    for n in reversed(a.data):
        if n in a.light and n not in pos:
            readers = [stage[u] for u in a.g.users(n) if u in inside]
            if readers:
                stage[n] = max(stage[n], min(readers))
    a.stage = stage


def _collapse(a: _Analysis) -> list:
    """Neighbouring candidates with no saved value between them cost the same memory: keep
    the best of each run (a value the backward reads anyway, then the smallest, the latest)."""
    holds = [False] * (a.m + 1)
    for n in a.saved:
        holds[a.stage[n]] = True
    keep, run = [], []
    for t, c in enumerate(a.chain):
        if run and holds[t]:
            keep.append(min(run, key=_rank(a)))
            run = []
        run.append((t, c))
    if run:
        keep.append(min(run, key=_rank(a)))
    return [c for _, c in keep]


def _rank(a):
    return lambda tc: (a.cross[tc[1]] - (a.storage[tc[1]] if tc[1] in a.saved else 0), -tc[0])


# -- per-stage costs --------------------------------------------------------------------------
@dataclass
class _Costs:
    saved: np.ndarray        # bytes of saved values per stage (m + 1 stages)
    top: np.ndarray          # of those, the candidate's own bytes (kept when it is chosen)
    cross: np.ndarray        # bytes a chosen candidate keeps (itself and its passengers)
    inner: np.ndarray        # FLOPs to recompute a stage inside a segment
    head: np.ndarray         # FLOPs to recompute the top stage of a segment (its top kept)
    results: np.ndarray      # bytes of results computed before a stage's backward begins


def _costs(a: _Analysis) -> _Costs:
    g, m = a.g, a.m
    by_stage = [[] for _ in range(m + 1)]
    for n in a.data:
        by_stage[a.stage[n]].append(n)
    saved, top = np.zeros(m + 1), np.zeros(m + 1)
    inner, head = np.zeros(m + 1), np.zeros(m + 1)
    first_use = np.full(m + 1, np.inf)
    for t, ns in enumerate(by_stage):
        c = a.chain[t] if t < m else None
        bases = {}
        for n in ns:
            if n in a.saved:
                bases[a.base[n]] = a.storage[n]
                first_use[t] = min(first_use[t], min(u for u in g.users(n) if u in a.backward))
        saved[t] = sum(bases.values())
        top[t] = a.storage[c] if c in a.saved else 0
        leaving = {n for n in ns if any(a.stage.get(u, t) > t for u in g.users(n))}
        mine = set(ns)
        inner[t] = _closure_flops(g, (a.saved & mine) | leaving, mine)
        head[t] = _closure_flops(g, (a.saved & mine) - leaving, mine - leaving)
    cross = np.array([a.cross[c] for c in a.chain] + [0.0])
    in_place = _in_place(a)
    outs = sorted((o, g.nbytes(o)) for o in set(g.outputs) if o in a.backward
                  and o not in in_place)
    ids = [o for o, _ in outs]
    cum = np.concatenate([[0], np.cumsum([b for _, b in outs])])
    begin = np.minimum.accumulate(first_use)
    # a stage's first reader is often a result itself (the weight's cotangent): count it
    results = np.array([cum[bisect.bisect_right(ids, b)] if np.isfinite(b) else 0
                        for b in begin])
    return _Costs(saved, top, cross, inner, head, results)


def _closure_flops(g, roots, within) -> float:
    seen, todo = set(), [r for r in roots if r in within]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo.extend(x for x in g.args(n) if x in within)
    return float(sum(flops(g, n) for n in seen))


# -- choosing checkpoints ---------------------------------------------------------------------
def _even_segments(a: _Analysis, segments) -> list:
    """k segments holding similar bytes of saved values; "sqrt": k = sqrt(saved / checkpoint)."""
    if a.m == 0:
        return []
    c = _costs(a)
    total = float(c.saved.sum())
    if segments == "sqrt":
        # at least two where a cut exists: a recurrence whose weights every step reads has
        # one candidate, whose two segments can still pay (kept only when they do, _WORTH)
        k = max(2, round(math.sqrt(total / max(float(np.median(c.cross[:-1])), 1.0))))
    elif isinstance(segments, (int, np.integer)) and not isinstance(segments, bool):
        k = int(segments)
    else:
        raise ValueError(f"checkpoint must be None, 'sqrt' or a number of segments, "
                         f"got {segments!r}")
    k = max(1, min(k, a.m + 1))
    if k == a.m + 1:
        return list(range(a.m))
    cum = np.cumsum(c.saved)[:-1]          # saved bytes up to and including candidate t
    chosen, last = [], -1
    for j in range(1, k):
        target = j * total / k
        t = int(np.argmin(np.abs(cum - target) + np.where(np.arange(a.m) > last, 0, np.inf)))
        if t > last:
            chosen.append(t)
            last = t
    return chosen


def _fit_budget(a: _Analysis, budget: int) -> list:
    """Fewest recomputed FLOPs whose static peak fits, by dynamic programming over the
    candidates. The model's constant (the backward's temporaries) is calibrated on the
    uncheckpointed schedule, and each choice is checked on the exact schedule. The first try
    leaves room for the interpreter's own objects, which measure_peak_memory counts too:
    0.1% of the budget and 64 bytes a step (a frame slot and an array header or two)."""
    whole = _exact(a, [])
    costs = _costs(a) if a.m else None
    for target in (budget - budget // 1000 - 64 * len(a.g), budget):
        if whole <= target:
            return []
        chosen = _search(a, costs, target, whole) if a.m else None
        if chosen is not None:
            return chosen
    if a.m == 0:
        raise BudgetError(_no_fit(a, budget, whole, "no value cuts the forward pass into "
                                                    "segments (none lies on every path from "
                                                    "the data to the loss), so "
                                                    "checkpointing cannot lower its peak"))
    low, plan_ = _lowest_peak(a, costs, whole)
    if low <= budget:
        return plan_     # a plan the model misjudged, checked on the exact schedule
    e = BudgetError(_no_fit(a, budget, low, "even the cheapest segments in memory exceed it"))
    e.lowest = low       # the pipeline compares the orders of fusion and checkpointing with it
    raise e


def _search(a, c, target, whole):
    temps = whole - _model_peak(c, [])
    margin, step = 0.0, float(c.cross[:-1].min()) / 2
    for _ in range(8):
        chosen = _dp(c, target - temps - margin)
        if chosen is None:
            return None
        peak = _exact(a, chosen)
        if peak <= target:
            return chosen
        margin += peak - target + step
    return None


def _exact(a: _Analysis, chosen, schedule=False):
    """The static peak of a choice, from the schedule pass itself (schedule=True: the
    whole Schedule)."""
    g = _rewrite(a, chosen) if chosen else a.g
    s = plan(g, g.meta.get("order"), a.scratch, **a.donate)
    return s if schedule else s.peak_bytes


def _in_place(a: _Analysis) -> set:
    """Results the backend may write into donated arguments (they allocate nothing)."""
    ok, nums = a.donate.get("in_place_ok"), a.donate.get("donate_argnums")
    if ok is None or not nums:
        return set()
    from .donation import candidates
    return {o for o, i in candidates(a.g, nums).items() if ok(a.g, o, i)}


def _model_peak(c: _Costs, chosen) -> float:
    """The peak the dynamic programme's model gives to one choice of boundaries."""
    m = len(c.cross) - 1
    ps = np.concatenate([[0], np.cumsum(c.saved)])
    kept, peak = 0.0, 0.0
    for i, j in zip([-1] + list(chosen), list(chosen) + [m]):
        top = c.top[j] if j < m else 0.0
        keep = c.cross[j] if j < m else 0.0
        peak = max(peak, c.results[j] + kept + keep + ps[j + 1] - ps[i + 1] - top)
        kept += keep
    return peak


def _lowest_peak(a, c, whole):
    """(peak, choice): the lowest exact peak among the model's leanest choice and the even
    splits."""
    lo, hi = 0.0, float(whole)
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _dp(c, mid) is not None else (mid, hi)
    plans = [_dp(c, hi) or []] + [_even_segments(a, k) for k in (2, "sqrt")]
    return min(((_exact(a, p), p) for p in plans), key=lambda t: t[0])


def _dp(c: _Costs, budget: float):
    """Boundaries (candidate indices) minimising recomputed FLOPs under the peak model:
    while segment (i, j] runs its backward, alive are the results so far, the checkpoints at
    and below i, the one at j, and the segment's recomputed values."""
    m = len(c.cross) - 1
    ps = np.concatenate([[0], np.cumsum(c.saved)])
    pf = np.concatenate([[0], np.cumsum(c.inner)])
    i = np.arange(-1, m)[:, None]          # bottom boundary (-1: the inputs)
    j = np.arange(0, m + 1)[None, :]       # top boundary (m: the end, the last segment)
    top = np.where(j < m, c.top[np.minimum(j, m)], 0.0)
    seg_bytes = ps[j + 1] - ps[i + 1] - top
    seg_flops = np.where(j < m, pf[j] - pf[i + 1] + c.head[np.minimum(j, m)], 0.0)
    keep_top = np.where(j < m, c.cross[np.minimum(j, m)], 0.0)
    need = c.results[np.minimum(j, m)] + keep_top + seg_bytes
    valid = j > i
    cost = np.full(m + 1, np.inf)          # by bottom boundary i + 1
    kept = np.zeros(m + 1)
    cost[0] = 0.0
    best, best_path, back = np.inf, None, []
    for _ in range(m + 1):
        ok = valid & np.isfinite(cost)[:, None] & (need + kept[:, None] <= budget)
        total = np.where(ok, cost[:, None] + seg_flops, np.inf)
        arg = np.argmin(total, axis=0)
        new = total[arg, np.arange(m + 1)]
        if np.isfinite(new[m]) and new[m] < best:
            best, best_path = new[m], list(back) + [arg]
        if not np.isfinite(new[:m]).any():
            break
        back.append(arg)
        kept = np.concatenate([[0.0], kept[arg[:m]] + c.cross[:m]])
        cost = np.concatenate([[np.inf], new[:m]])
    if best_path is None:
        return None
    chosen, at = [], m
    for arg in reversed(best_path):
        i_ = int(arg[at]) - 1
        if i_ < 0:
            break
        chosen.append(i_)
        at = i_
    return sorted(chosen)


# said with every budget advice: the budget bounds the estimate (Program.memory), and a run
# allocates some small objects besides (sweep 31 measured 17-80 KiB more; sweep 33 found
# NumPy's ufunc buffers for two strided 2-d operands, 130-200 KiB whatever their size)
_SLACK = ("The budget bounds the static estimate; a measured run (measure_peak_memory) "
          "also holds small arrays, Python objects and NumPy's iteration buffers for strided "
          "operands, up to about 256 KiB more: leave that margin when the measured peak must "
          "stay under a limit.")


def _no_fit(a, budget, low, why) -> str:
    res = sum(a.g.nbytes(o) for o in set(a.g.outputs))
    name = a.g.meta.get("fn_name", "the function")
    return (f"memory_budget={budget} bytes ({_size(budget)}) is too small for {name}: {why}. "
            f"The lowest static peak found is {low} bytes ({_size(low)}), of which "
            f"{_size(res)} are its results. Raise the budget to at least memory_budget={low}, "
            "or shrink the batch or the model. " + _SLACK)


def _plan_note(a, chosen, segments, budget, note=None) -> dict:
    """What was asked and chosen; "note" says why checkpointing did not help, if it did not."""
    return {"candidates": a.m, "segments": len(chosen) + 1 if chosen else 1,
            "mode": "budget" if budget is not None else segments, "budget": budget,
            "note": note}


# -- rewriting --------------------------------------------------------------------------------
class _Rewriter:
    """Builds the new graph in execution order: the forward segment by segment, then the
    backward, each recomputed value emitted just before its first reader."""

    def __init__(self, a: _Analysis, chosen: list):
        self.a, self.g = a, a.g
        self.bounds = [a.chain[t] for t in chosen]
        self.nseg = len(chosen) + 1
        self.seg = {n: bisect.bisect_left(chosen, a.stage[n]) for n in a.data}
        outputs = set(a.g.outputs)
        self.kept = {n for n in a.data if n in outputs or self.seg[n] == self.nseg - 1
                     or any(self.seg.get(u, -1) > self.seg[n] for u in a.g.users(n))}
        self.new = Graph()
        self.new.meta = {k: v for k, v in a.g.meta.items() if k not in ("order", "schedule")}
        self.orig, self.copy = {}, {}
        self.saved = set()      # forward values the backward half reads
        self.backward_start = None
        self.recomputed = 0
        self._groups = set()    # kernels of fused groups the forward computes (_group_computed)

    def build(self) -> Graph:
        g = self.g
        for n in g.inputs:
            self._emit(n)
        needed = self._needed_originals()
        for n in sorted(self.a.data, key=lambda n: (self.seg[n], n)):
            if n in needed:
                self._original(n)
        self.backward_start = len(self.new)
        for n in sorted(self.a.backward):
            args = [self._for_backward(x) for x in g.args(n)]
            self.orig[n] = self._add(n, args)
        for o in g.outputs:
            self._original(o)
        self.new.outputs = [self.orig[o] for o in g.outputs]
        self.new.meta["checkpoints"] = {self.orig[n]: self._why(n) for n in sorted(self.saved)}
        self.new.meta["recomputed_flops"] = self.recomputed
        # the plain program's forward FLOPs (the ratio's base: some values are computed only
        # as the backward's copies now)
        self.new.meta["forward_flops"] = sum(flops(g, n) for n in g.nodes()
                                             if n not in self.a.backward)
        return self.new

    def _needed_originals(self) -> set:
        """The forward values whose first computation is read: the kept ones and those a
        needed forward value reads. The others are read only by the backward, which reads
        their recomputed copies: computing them in the forward too (an output of a fused
        group nothing else reads) would allocate what the plan does not count."""
        g, data, need = self.g, self.a.data, set()
        for n in sorted(data, reverse=True):        # node ids are a topological order
            if n in self.kept or any(u in need for u in g.users(n)):
                need.add(n)
        return need

    def _add(self, n, args, where=None) -> int:
        d = self.g[n]
        nid = self.new.add(d["op"], args, d["shape"], d["dtype"], d["attrs"], d["name"],
                           where or d["where"])
        if d["op"] == "input":
            self.new.inputs.append(nid)
        return nid

    def _emit(self, n):
        self.orig[n] = self._add(n, [self.orig[x] for x in self.g.args(n)])
        if self.g[n]["op"] == "fused":
            self._groups.add(self.g[n]["attrs"]["kernel"])

    def _original(self, n):
        """Emit n (and any free or parameter-only arguments not yet emitted) once."""
        todo = [n]
        while todo:
            x = todo[-1]
            if x in self.orig:
                todo.pop()
                continue
            missing = [y for y in self.g.args(x) if y not in self.orig]
            if missing:
                todo.extend(missing)
                continue
            todo.pop()
            self._emit(x)

    def _for_backward(self, x) -> int:
        if x in self.a.backward:
            return self.orig[x]
        if x in self.seg and x not in self.kept:
            return self._recompute(x)
        self._original(x)
        self._note_saved(x)
        return self.orig[x]

    def _note_saved(self, x):
        if x not in self.a.free and self.orig[x] < self.backward_start:
            self.saved.add(x)

    def _group_computed(self, x) -> bool:
        """Did the forward compute x's fused group for another of its outputs? A group that
        fuses several steps of a chain keeps its last value: the forward computes the values
        before it inside the kernel, and their copies are recomputations all the same."""
        d = self.g[x]
        return d["op"] == "fused" and d["attrs"]["kernel"] in self._groups

    def _recompute(self, n) -> int:
        """Copy n and the values of its segment it needs, from the segment's checkpoints."""
        s = self.seg[n]
        need, todo = set(), [n]
        while todo:
            x = todo.pop()
            if x in need or x in self.copy:
                continue
            need.add(x)
            todo.extend(y for y in self.g.args(x)
                        if self.seg.get(y) == s and y not in self.kept)
        where = self._role(s)
        for x in sorted(need):
            args = []
            for y in self.g.args(x):
                if y in self.copy:
                    args.append(self.copy[y])
                else:
                    self._original(y)
                    self._note_saved(y)
                    args.append(self.orig[y])
            w = self.g[x]["where"]
            self.copy[x] = self._add(x, args, where(w))
            if x in self.orig or self._group_computed(x):
                # (else this copy is its only computation: see build)
                self.recomputed += flops(self.g, x)
        return self.copy[n]

    def _role(self, s):
        src = (f"checkpoint v{self.orig[self.bounds[s - 1]]}" if s else "the inputs")
        role = f"recompute segment {s + 1} of {self.nseg} from {src}"
        return lambda w: (w or Where("<adjit>", 0)).with_role(role)

    def _why(self, n) -> str:
        g, s = self.g, self.seg.get(n)
        if n in self.bounds:
            k = self.bounds.index(n) + 1
            nxt = ("the last segment, kept" if k + 1 == self.nseg
                   else f"segment {k + 1}, recomputed from it in the backward")
            return f"checkpoint {k} of {self.nseg - 1}: the input of {nxt}"
        if n in set(g.outputs):
            return "a result of the function, alive to the end anyway"
        if n in self.a.floating:
            return "computed from parameters alone (no data input): kept like them"
        if s == self.nseg - 1:
            return (f"in the last segment ({self.nseg} of {self.nseg}): its backward runs "
                    "right after the forward, so it is kept, not recomputed")
        if s is not None:
            later = max(self.seg.get(u, s) for u in g.users(n)) + 1
            return (f"read by segment {later}'s forward: it crosses a checkpoint and is kept "
                    "with it")
        return "saved for the backward"


def _rewrite(a: _Analysis, chosen: list) -> Graph:
    return _Rewriter(a, chosen).build()
