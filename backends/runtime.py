"""Programs: a generated module wrapped as a callable over pytrees, plus its reports.

`Program(*args)` flattens the arguments, runs the generated function and rebuilds the result's
structure; `.source`, `.ir`, `.graph`, `.kernels` and `.memory` show what was compiled.
"""
from __future__ import annotations

import contextlib
import ctypes
import gc
import linecache
import platform
import re
import sys
import tracemalloc
import weakref
from dataclasses import dataclass, field

import numpy as np

from ..frontend import pytree


def tune_malloc() -> bool:
    """Let glibc keep freed arrays for reuse instead of returning them to the kernel.

    A compiled function returns new arrays on every call, and a step allocates and frees the
    same few-hundred-KiB temporaries every call. glibc serves those with mmap, or trims them
    off its heap, and so every call pays the page faults again: on the project's 2-core VM,
    a value_and_grad of a 100,000-element Huber loss (numba backend) called in a loop took
    1.77 ms per call with the default settings and 0.44-0.55 ms with these; the MNIST step
    called repeatedly on the same arrays 3.1 ms and 1.2 ms. Raising the mmap and trim
    thresholds (64 MiB, 256 MiB) keeps the memory in the heap. Process-wide, so the `adjit`
    command does it and a library user calls it (adjit.tune_malloc()) rather than adjit
    doing it on import. Returns whether it was applied (glibc only)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3    # from glibc's malloc.h
    return bool(libc.mallopt(m_mmap_threshold, 64 << 20)
                and libc.mallopt(m_trim_threshold, 256 << 20))


@dataclass
class MemoryReport:
    """The schedule's static estimate of what the program allocates (inputs excluded)."""
    peak_bytes: int
    live_bytes: list
    steps: list = field(default_factory=list)          # node ids, in schedule order
    checkpoints: dict = field(default_factory=dict)    # node -> why it is kept
    recomputed_flops: int = 0
    forward_flops: int = 0
    # the peak less the results (gradients) already computed at that step: the working memory
    peak_working_bytes: int = 0
    # the checkpoint pass's plan: candidates, segments, mode, budget, and a note when
    # checkpointing was asked for but could not lower the peak (and why)
    plan: dict = field(default_factory=dict)

    @property
    def recompute_ratio(self) -> float:
        return self.recomputed_flops / self.forward_flops if self.forward_flops else 0.0

    def __str__(self):
        s = (f"peak {self.peak_bytes / 2**20:.2f} MiB ({self.peak_working_bytes / 2**20:.2f} "
             f"MiB besides results) over {len(self.live_bytes)} steps")
        if self.checkpoints:
            s += (f"; {len(self.checkpoints)} values kept for the backward, recomputes "
                  f"{100 * self.recompute_ratio:.0f}% of the forward FLOPs")
        if self.plan.get("note"):
            s += f"; checkpointing: {self.plan['note']}"
        return s


class Program:
    """A compiled graph for one signature of arguments."""

    def __init__(self, fn, source, graph, memory, in_trees, out_tree, static_argnums, backend,
                 kernels=None, prepare=None, finish=None):
        self.fn, self.source, self.graph, self.memory = fn, source, graph, memory
        self.in_trees, self.out_tree = in_trees, out_tree
        self.static_argnums = set(static_argnums)
        self.backend = backend
        self.kernels = kernels or {}
        self._prepare = prepare or (lambda a: a)
        self._finish = finish or (lambda a: a)
        self._fresh = _shared_outputs(graph)
        # results that stand for Python numbers (see frontend/trace.py) are returned as such
        self._scalars = tuple(graph.meta.get("weak_out", ()))

    @property
    def ir(self) -> str:
        return str(self.graph)

    @property
    def namespace(self) -> dict:
        """The names the generated source refers to (its constants `_rt_consts`, the runtime
        helpers `_rt_ops`, the kernels): `exec(prog.source, dict(prog.namespace))` defines
        the program's function again."""
        return dict(getattr(self.fn, "__globals__", {}))

    def flat_args(self, args):
        leaves = []
        for i, a in enumerate(args):
            if i in self.static_argnums:
                continue
            ls, _, _ = pytree.flatten(a)
            leaves.extend(ls)
        return leaves

    def __call__(self, *args):
        return self.run_flat(self.flat_args(args))

    def run_flat(self, leaves):
        """Run on the flattened array leaves of the non-static arguments."""
        prep, fin = self._prepare, self._finish
        # no floating-point warnings, as in JAX: the backward's and the guarded branches'
        # inf and nan are adjit's own (see the where trap in passes/autodiff.py), and a
        # result's inf or nan is in the result
        try:
            with np.errstate(all="ignore"):
                outs = self.fn(*[prep(x) for x in leaves])
        except (IndexError, ValueError, ArithmeticError, np.linalg.LinAlgError) as e:
            _name_the_line(e, self.graph)
            raise
        if self._fresh or self._scalars:
            outs = list(outs)
            for i in self._fresh:
                if hasattr(outs[i], "copy"):
                    outs[i] = outs[i].copy()
            outs = [fin(o) for o in outs]
            for i in self._scalars:
                outs[i] = outs[i].item()
            return pytree.unflatten(self.out_tree, outs)
        return pytree.unflatten(self.out_tree, [fin(o) for o in outs])

    def __repr__(self):
        return f"<adjit.Program {self.backend} {self.graph.meta.get('fn_name', '')}: " \
               f"{len(self.graph)} nodes, {self.memory}>"


_NODE_COMMENT = re.compile(r"^\s*# v(\d+) = ")


def _name_the_line(e, graph):
    """Add the user's line to an error the generated code raised at run time (an index out of
    bounds, a singular matrix): the comment above the generated line that raised names the
    node, and the node its line (`Where`). Changes e's message in place (its type stays)."""
    from ..ir.errors import AdjitError
    if isinstance(e, AdjitError) or len(e.args) != 1 or not isinstance(e.args[0], str):
        return
    tb, where = e.__traceback__, None
    while tb is not None and where is None:
        name = tb.tb_frame.f_code.co_filename
        if name.startswith("<adjit:"):
            lines = linecache.getlines(name)
            for line in reversed(lines[:tb.tb_lineno]):
                m = _NODE_COMMENT.match(line)
                if m:
                    nid = int(m.group(1))
                    if nid in graph:
                        where = graph[nid]["where"]
                    break
        tb = tb.tb_next
    if where is None:
        return
    role = f", in the {where.role}" if getattr(where, "role", "") else ""
    e.args = (f"{e.args[0]} (raised by the compiled code of {where}{role})",)


def _shared_outputs(graph) -> list:
    """Results that would be one array returned twice (two equal gradients made one node), a
    constant the program keeps between calls, or an argument (or a view of one: the gradient
    of sum(w * x) is x): each call returns its own copy of those, so that writing into one
    result never changes another, the next call's, or the caller's arrays."""
    from ..ir.ops import OPS
    out, seen = [], set()
    for i, o in enumerate(graph.outputs):
        n = o
        if graph[o]["op"] == "broadcast_to":
            # the backends return a broadcast result as a new array (np.array of the view)
            if o in seen:
                out.append(i)
            seen.add(o)
            continue
        while OPS[graph[n]["op"]].kind == "view" and graph.args(n):
            n = graph.args(n)[0]
        # n: the array whose memory this result shares (itself, or what it is a view of)
        if n in seen or graph[n]["op"] in ("const", "input"):
            out.append(i)
        seen.add(n)
    return out


def measure_peak_memory(fn, *args, exclude_results=False) -> int:
    """Bytes allocated at peak during one call of fn(*args), above what was live before.

    Host arrays are measured with tracemalloc (NumPy reports its buffers to it), CuPy arrays
    with the memory pool; a compiled function is called once first so that compilation is not
    measured. With exclude_results=True (compiled functions only) the results already computed
    at each line of the generated code (a training step's gradients) are subtracted, which
    measures what `MemoryReport.peak_working_bytes` estimates; that call is traced line by
    line, so do not time it.
    """
    from .. import frontend  # noqa: F401 - keeps import order simple for callers
    names = None
    if exclude_results:
        if not hasattr(fn, "lower"):
            raise TypeError("measure_peak_memory(exclude_results=True) needs a function "
                            "compiled by adjit (its results are named in the generated code)")
        # compiled first: the first call also runs generated code of its own (the events
        # of the two passes below must be the same lines)
        fn(*pytree.copy_arrays(args))
        names = _result_names(fn, pytree.copy_arrays(args))
    elif hasattr(fn, "lower"):
        fn(*pytree.copy_arrays(args))   # compiles; on copies: a donated step updates them
    probe = _CupyProbe() if _uses_cupy(fn, args) else _HostProbe()
    with probe:
        if names is None:
            out = fn(*args)
            peak = probe.peak()
        else:
            out, peak = _traced_call(fn, args, probe, names)
    del out
    return int(peak)


def _uses_cupy(fn, args):
    """Are the arguments CuPy arrays, or is fn compiled for the CuPy backend (which copies
    NumPy arguments to the device: the pool, not tracemalloc, sees what it allocates)?"""
    leaves, _, _ = pytree.flatten(list(args))
    if any(type(x).__module__.startswith("cupy") for x in leaves):
        return True
    return hasattr(fn, "lower") and getattr(fn.lower(*args), "backend", None) == "cupy"


class _HostProbe:
    """Peak host bytes from tracemalloc, relative to when the probe was entered."""

    def __enter__(self):
        gc.collect()
        self._was = tracemalloc.is_tracing()
        if not self._was:
            tracemalloc.start()
        self.base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        return self

    def peak(self):
        return tracemalloc.get_traced_memory()[1] - self.base

    def reset(self):
        tracemalloc.reset_peak()

    def __exit__(self, *exc):
        if not self._was:
            tracemalloc.stop()


class _CupyProbe:
    """Peak bytes of CuPy's memory pool (sampled at each allocation: the pool has no peak)."""

    def __enter__(self):
        import cupy
        from cupy.cuda import memory_hooks
        self.cupy, self.pool = cupy, cupy.get_default_memory_pool()
        cupy.cuda.Device().synchronize()
        self.pool.free_all_blocks()
        self.base = self.top = self.pool.used_bytes()
        probe = self

        # the base class is cupy.cuda.MemoryHook; memory_hooks holds the ready-made hooks
        hook_base = getattr(cupy.cuda, "MemoryHook", None) or memory_hooks.MemoryHook

        class _Peak(hook_base):
            name = "adjit_peak"

            def malloc_postprocess(self, **kw):
                probe.top = max(probe.top, probe.pool.used_bytes())

        self.hook = _Peak()
        self.hook.__enter__()
        return self

    def peak(self):
        return self.top - self.base

    def reset(self):
        self.top = self.pool.used_bytes()

    def __exit__(self, *exc):
        self.cupy.cuda.Device().synchronize()
        self.hook.__exit__(*exc)


@contextlib.contextmanager
def _tracing_generated(on_event):
    """sys.settrace for the frames of generated code only (codegen.load_module names their
    files `<adjit:...>`), restored afterwards."""
    def on_call(frame, event, arg):
        return on_event if frame.f_code.co_filename.startswith("<adjit:") else None
    old = sys.gettrace()
    sys.settrace(on_call)
    try:
        yield
    finally:
        sys.settrace(old)


def _result_names(fn, args):
    """Call fn once; -> for each line event of the generated code (counted from 0), the names
    of its locals that hold a result there: the object fn returns (not an input, nor a result
    written into an input's buffer: a donated argument allocates nothing), under whatever
    name holds it. A gradient accumulated in place is a temporary (`_t152`) before its last
    line names it, and it counts as a result from the line it is made, as the schedule's
    estimate counts it. The bindings are followed by weak references (this pass is not
    measured; a freed temporary's reference dies, so a later object at its address is not
    mistaken for it)."""
    bindings = []                     # (event, name, weakref of the array it names)
    last = {}                         # name -> id of the array it was last seen naming
    events = [0]
    holders = {}

    def on_event(frame, event, arg):
        if event in ("line", "return"):
            k = events[0]
            events[0] += 1
            for name, v in frame.f_locals.items():
                if isinstance(v, np.ndarray) and last.get(name) != id(v):
                    last[name] = id(v)
                    bindings.append((k, name, weakref.ref(v)))
        if event == "return" and isinstance(arg, tuple):
            params = frame.f_code.co_varnames[:frame.f_code.co_argcount]
            local = frame.f_locals
            inputs = {id(local[p]) for p in params if p in local}
            results = {id(x) for x in arg if id(x) not in inputs}
            # a result returned as a view of a local (g.T): that local's buffer is the result
            results |= {id(x.base) for x in arg if isinstance(x, np.ndarray) and
                        x.base is not None and id(x) not in inputs and id(x.base) not in inputs}
            # each name's bindings in order: a result-holding binding lasts until the next
            spans = {}
            for k, name, ref in bindings:
                spans.setdefault(name, []).append((k, ref))
            for name, seq in spans.items():
                if name in params:
                    continue
                for (k, ref), nxt in zip(seq, seq[1:] + [(events[0], None)]):
                    obj = ref()
                    if obj is not None and id(obj) in results:
                        for e in range(k, nxt[0]):
                            holders.setdefault(e, set()).add(name)
        return on_event
    with _tracing_generated(on_event):
        fn(*args)
    return holders


def _traced_call(fn, args, probe, holders):
    """Run fn, and at each line of generated code take the peak since the previous line less
    the bytes of the results held by then (`holders`, per line event); -> (result, largest
    such difference)."""
    worst = 0
    events = [0]

    def on_event(frame, event, arg):
        nonlocal worst
        if event in ("line", "return"):
            top = probe.peak()
            local = frame.f_locals
            names = holders.get(events[0], ())
            events[0] += 1
            done = sum(getattr(local[k], "nbytes", 0) for k in names if k in local)
            worst = max(worst, top - done)
            probe.reset()
        return on_event
    with _tracing_generated(on_event):
        out = fn(*args)
    return out, worst


def as_numpy(x):
    return np.asarray(x)
