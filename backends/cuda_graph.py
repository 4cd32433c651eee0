"""Whole-program CUDA graphs: capture a generated CuPy program once, replay it on each call.

`donation(g, argnums)` decides which results go into which arguments' buffers (and which
kernels write them there directly); `GraphRunner` runs the program captured.

Input: the generated function, the shapes and dtypes of its flat arguments, and which results
are donated to which arguments. The runner owns one static buffer per argument (a new argument
is copied in, unless it already is that buffer) and the captured results. A donated argument's
buffer receives its result and is returned as that result, so a training step whose results
are fed back costs one graph launch and no copies (as with JAX's donation, an array passed
for a donated argument is overwritten by a later call). Other results are returned as copies,
so they stay valid when the graph runs again.
"""
from __future__ import annotations

import warnings

from ..passes.donation import pairs as donation_pairs


def _base(x):
    while getattr(x, "base", None) is not None:
        x = x.base
    return x


class GraphRunner:
    """fn(*flat_args) -> tuple of results, run as one captured CUDA graph after the first call.

    pairs: (result index, argument index) of donated buffers; in_place: argument indices whose
    result the generated code already writes into the argument's buffer (no copy needed).
    """

    def __init__(self, fn, specs, pairs, in_place, runtime, name="program"):
        self.fn, self.specs, self.rt, self.name = fn, list(specs), runtime, name
        self.pairs = list(pairs)
        self.in_place = set(in_place)
        self._donated = dict(self.pairs)      # result index -> argument index
        self.mode = None          # "graph" once captured; "eager" if capture failed
        self.static_inputs = None
        self._graph = self._outs = self._keep = None
        self.__source__ = getattr(fn, "__source__", None)

    def __call__(self, *leaves):
        if self.static_inputs is None:
            self.static_inputs = [self.rt.empty(s, d) for s, d in self.specs]
        for buf, x in zip(self.static_inputs, leaves):
            if x is not buf:
                self.rt.copy_into(buf, x)
        if self.mode is None:
            self._capture()
        if self.mode == "graph":
            self.rt.launch(self._graph)
            return tuple(o if k in self._donated else o.copy() for k, o in enumerate(self._outs))
        return self._run(self.static_inputs)

    def _run(self, ins):
        """One uncaptured run on buffers ins; donated results end up in their arguments."""
        outs = list(self.fn(*ins))
        donated = {id(ins[leaf]) for _, leaf in self.pairs}
        for k, o in enumerate(outs):
            # a result that is a donated argument, or a view of one, holds its old values:
            # copied before the updates below overwrite the buffer (`return p - lr * g, p`)
            if (k not in self._donated or o is not ins[self._donated[k]]) and \
                    (id(o) in donated or id(_base(o)) in donated):
                outs[k] = o.copy()
        for k, leaf in self.pairs:
            if outs[k] is not ins[leaf]:
                ins[leaf][...] = outs[k]
                outs[k] = ins[leaf]
        return tuple(outs)

    def _capture(self):
        def run(warmup):
            if warmup:
                # on copies: a real run would overwrite the donated arguments of this call
                self._run([b.copy() for b in self.static_inputs])
                return None
            return self._run(self.static_inputs)
        try:
            self._graph, self._outs, self._keep = self.rt.capture(run, self.static_inputs)
            self.mode = "graph"
        except Exception as e:  # noqa: BLE001 - reported, and the program still runs
            warnings.warn(f"{self.name}: CUDA graph capture failed ({type(e).__name__}: {e}); "
                          "running the program uncaptured instead (pass cuda_graph=False to "
                          "skip the attempt)", RuntimeWarning, stacklevel=3)
            self.mode = "eager"


# -- donation: which outputs a CUDA-graph program writes into its inputs' buffers -------------
def donation(g, donate_argnums):
    """-> (pairs, inplace): pairs (output index, input leaf index) of donated buffers
    (passes/donation.py), and inplace {output node: input node} for those whose kernel can
    write the input's buffer."""
    pairs = donation_pairs(g, donate_argnums)
    from .cupy_backend import _runs
    inplace = {}
    runs = _runs(g, g.meta["schedule"].order)
    for k, leaf in pairs:
        o, i = g.outputs[k], g.inputs[leaf]
        if g.outputs.count(o) == 1 and o not in inplace and \
                _can_write_in_place(g, o, i, runs.get(o, [o])):
            inplace[o] = i
    return pairs, inplace


def _can_write_in_place(g, o, i, kernel):
    """Can the kernel computing o (the nodes `kernel`, one launch) write into input i's
    buffer? Only if every other reader of i (or of a view of it) runs before that kernel,
    and the kernel reads i itself, not a view of it (a transpose would read other elements)."""
    from .cupy_backend import _is_kernel
    sched = g.meta["schedule"]
    if o == i or not _is_kernel(g, o):
        return False
    if any(x != o and (x == i or sched.base.get(x) == i) for x in g.outputs):
        return False   # another result is the argument or a view of it: it keeps the old values
    if g[o]["op"] == "fused" and g[o]["attrs"]["outputs"][g[o]["attrs"]["output"]][1]:
        return False   # a reduction
    step = {n: s for s, n in enumerate(sched.order)}
    views = {m for m in sched.order if sched.base.get(m) == i}
    for u in sched.order:
        reads = [a for a in g.args(u) if a in views]
        if not reads:
            continue
        if u in kernel:
            if any(a != i for a in reads):
                return False
        elif step[u] > step[kernel[0]]:
            return False
    return True
