"""numba backend: scheduled graph -> the NumPy backend's module, with fused groups as kernels.

Input: a fused, scheduled graph. Output: a Python module like the NumPy backend's (matmul stays
BLAS, other ops stay NumPy calls) in which each run of a fused group calls one `@numba.njit`
kernel (backends/numba_kernels.py) writing into arrays allocated just before it, so the memory
the schedule counts is what is allocated. Kernel modules are real files in a cache directory
named by the hash of their source, so numba's `cache=True` skips compilation in a new process.
Groups smaller than `min_kernel_size` elements run as NumPy code: a kernel would cost a compile
(0.1-1 s, once per machine) for nothing measurable at that size.
"""
from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
import tempfile
import threading
import types
import warnings

import numpy as np

from ..ir.errors import AdjitError
from ..ir.fused import Instr, value_types
from ..ir.ops import OPS
from .codegen import comment, load_module, node_comment
from .fused_numpy import numpy_group
from .fused_numpy import in_place_ok  # noqa: F401 - the schedule's rule (see build)
from .fused_numpy import scratch_bytes as numpy_scratch_bytes
from .numba_kernels import kernel_spec, whole_exponent
from .numpy_backend import Codegen, as_array

NAME = "numba"
FUSES = True
# a kernel's compile time grows with its arguments (LLVM took 25 s for one of 200)
FUSION_OPTIONS = {"reductions": True, "max_inputs": 16, "min_size": 2,
                  "join_reduction": lambda g, members, r: _joins(g, members, r)}

# below this many elements a group is NumPy code, not a kernel (see the module docstring)
MIN_KERNEL_SIZE = 4096
# from this many elements a kernel runs its prange variant on all of numba's threads: below,
# waking the threads costs more than it saves, and in a training step each kernel sits between
# BLAS calls whose threads spin on the other cores for a while after each call
PARALLEL_SIZE = 1 << 20


def scratch_bytes(g, n, placed=None):
    """Bytes node n holds besides its result while it runs, for the schedule: for a kernel,
    the copies np.ravel makes of its strided arguments (interior slices of a stencil, a
    transposed or Fortran-ordered array: sweep 32 measured a stencil's gradient at 2.3x the
    estimate without them); a group that runs as NumPy code (see `as_kernel`) holds its
    temporaries."""
    d = g[n]
    if (d["op"] == "fused" and as_kernel(g, [n], MIN_KERNEL_SIZE)) or (
            d["op"] != "fused" and OPS[d["op"]].fusion == "map" and
            _size(d["shape"]) >= MIN_KERNEL_SIZE):
        memo = {}
        return sum(g.nbytes(x) for x in set(d["args"]) if not _c_ordered(g, x, memo))
    return numpy_scratch_bytes(g, n, placed)


def _c_ordered(g, n, memo) -> bool:
    """Is node n's value C-contiguous in the generated code (np.ravel of it is a view)? Views
    are followed on a probe: an int8 array of n's shape over one byte, with the strides NumPy
    gives the view (never read), from an argument's recorded strides (attrs["strides"])."""
    p = _layout_probe(g, n, memo)
    return p is None or p.flags.c_contiguous


def _layout_probe(g, n, memo):
    if n in memo:
        return memo[n]
    d = g[n]
    shape, op = tuple(int(k) for k in d["shape"]), d["op"]
    probe = None                         # None: a new array (C order)
    if op == "input" and d["attrs"].get("strides") is not None:
        probe = _probe(shape, d["attrs"]["strides"])
    elif op in ("slice", "transpose", "reshape"):
        src = _layout_probe(g, d["args"][0], memo)
        if src is None:
            src_shape = tuple(int(k) for k in g[d["args"][0]]["shape"])
            src = _probe(src_shape, _c_strides(src_shape))
        if op == "slice":
            probe = src[d["attrs"]["index"]]
        elif op == "transpose":
            probe = np.transpose(src, d["attrs"]["perm"])
        elif src.flags.c_contiguous or [k for k in src.shape if k != 1] == \
                [k for k in shape if k != 1]:
            probe = src.reshape(shape)   # a view (NumPy copies other reshapes: C order)
    memo[n] = probe
    return probe


def _probe(shape, strides):
    """An int8 array of `shape` and element `strides` over one byte (its flags, never read)."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape, tuple(strides))


def _c_strides(shape):
    out, acc = [], 1
    for k in reversed(shape):
        out.append(acc)
        acc *= max(k, 1)
    return tuple(reversed(out))


# ops that numba's kernels compute with one C library call per element, where NumPy's loops
# use SIMD code, weighted by how much slower the call is (ns per float64 element on the
# project's machine, NumPy / numba: arctan 0.7 / 8, x ** 2.4 1.5 / 8.4; sin and cos 9 / 9 and
# sqrt 1.0 / 0.3 are no faster in NumPy). exp, expm1, log, log1p and tanh are numba_helpers'
# own vectorised forms, nearly as fast as NumPy's in float64 (exp 1.3 / 0.8, tanh 2.1 / 1.7,
# benchmarks/kernel_math.py): they weigh a little, so exp(x) * 2 alone stays NumPy code.
# A small group such as arctan(x) * 2 + x runs several times faster as NumPy code; a large one
# whose cheap ops outnumber the calls 4 to 1 stays a kernel (one pass over memory, not many).
_LIBM = {"exp": 0.3, "expm1": 0.3, "log": 0.3, "log1p": 0.3, "tanh": 0.3, "arctan": 1.0, "arcsin": 1.0, "arccos": 1.0, "arcsinh": 1.0, "arccosh": 1.0,
         "arctanh": 1.0, "arctan2": 1.0, "erf": 1.0, "erfc": 1.0, "exp2": 0.5, "cbrt": 1.0,
         "sinh": 1.0, "cosh": 1.0, "log2": 0.5, "log10": 0.5, "pow": 1.0, "tan": 1.0}
# float32: NumPy's SIMD loops are 5-40x faster than numba's per-element calls (ns per element,
# NumPy / numba, 1M elements, one thread: log2 0.25 / 1.8, arctan 0.22 / 8.9, sin 0.40 / 5.2),
# so the calls weigh more, and sin and cos count too; the helpers, which compute float32 in
# float64, are 3-5x slower than NumPy's float32 loops (exp 0.47 / 1.3, log 0.44 / 2.1, log1p
# 0.6 / 1.9, expm1 0.37 / 1.6)
_LIBM_F32 = {"exp": 0.5, "log": 1.0, "exp2": 1.0, "log2": 1.0, "log10": 1.0, "log1p": 0.7,
             "expm1": 0.8, "erf": 2.5, "erfc": 2.5, "cbrt": 2.5, "sin": 1.0, "cos": 1.0,
             "arctan": 3.0, "arcsin": 3.0, "arccos": 3.0, "arcsinh": 3.0, "arccosh": 3.0,
             "arctanh": 3.0, "arctan2": 3.0, "sinh": 3.0, "cosh": 3.0, "pow": 2.5, "tan": 3.0}
# float32 tanh is adjit's own rational function in kernels (numba_helpers), which vectorises
_OWN_F32 = frozenset(("tanh",))
# ops whose kernel loop vectorises (numba_helpers' own forms) unless the loop also carries a
# running max or min along the innermost axis (a select LLVM keeps in order, so the loop stays
# scalar): such a reduction does not join their group (the group writes its values, np.max's
# SIMD loop reduces them). A sum joins: its add may be reassociated (numba_helpers._rt_radd),
# so the loop vectorises with the sum in it (a summed softplus's value_and_grad at 1e6
# elements: 9-12 ms with the sum apart, 4.7-5.4 ms joined).
_VECTORISED = frozenset(("exp", "expm1", "log", "log1p", "tanh", "sigmoid", "logaddexp",
                         "logaddexp2"))


def _joins(g, members, r):
    """May reduction r join the fused group `members` (passes/fusion.py join_reduction)?"""
    if g[r]["op"] == "sum":
        return True
    shape = tuple(g[g.args(r)[0]]["shape"])
    if not shape or shape[-1] == 1:
        return True
    if (len(shape) - 1) not in {int(a) % len(shape) for a in g[r]["attrs"]["axis"]}:
        return True          # reduced across rows: the loop over a row stays vectorised
    return not any(g[m]["op"] in _VECTORISED for m in members)


CHEAP_PER_CALL = 4


def as_kernel(g, run, min_kernel_size) -> bool:
    """Does fused group `run` become a numba kernel (else NumPy code)? Not when it is too
    small to repay a compile, has a dtype numba lacks, or is mostly calls NumPy vectorises.
    min_kernel_size=0 makes every group numba can compile a kernel."""
    d0 = g[run[0]]
    a = d0["attrs"]
    if _size(a["shape"]) < min_kernel_size or not _numba_types(g, d0["args"], run):
        return False
    if min_kernel_size == 0:
        return True
    f32 = all(g[x]["dtype"] == np.float32 for x in list(d0["args"]) + list(run))
    table = _LIBM_F32 if f32 else _LIBM
    calls = cheap = 0
    for ins in a["expr"]:
        if OPS[ins.op].fusion != "map":
            continue
        if ins.op == "pow" and whole_exponent(a, len(d0["args"]), ins) is not None:
            cheap += 1          # x ** 3: products, no library call
        elif ins.op in table and not (f32 and ins.op in _OWN_F32):
            calls += table[ins.op]
        else:
            cheap += 1
    return calls == 0 or cheap >= CHEAP_PER_CALL * calls


def why_unusable():
    if importlib.util.find_spec("numba") is None:
        return "numba is not installed (pip install numba)"
    return None


def usable() -> bool:
    return why_unusable() is None


# -- the kernel cache ---------------------------------------------------------------------------
_LOCK = threading.Lock()
_MODULES = {}


def cache_dir() -> str:
    """Where kernel sources (and numba's compiled objects, in __pycache__) are kept:
    $ADJIT_CACHE_DIR, else $ADJIT_CACHE/numba (the data sets' cache, nn/data.py), else
    $XDG_CACHE_HOME/adjit/numba, else ~/.cache/adjit/numba."""
    d = os.environ.get("ADJIT_CACHE_DIR")
    if not d and os.environ.get("ADJIT_CACHE"):
        d = os.path.join(os.path.expanduser(os.environ["ADJIT_CACHE"]), "numba")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "adjit", "numba")
    try:
        os.makedirs(d, exist_ok=True)
        if os.access(d, os.W_OK):
            return d
    except OSError:
        pass
    d = os.path.join(tempfile.gettempdir(), f"adjit-numba-{os.getuid()}")
    os.makedirs(d, exist_ok=True)
    return d


def _helpers_stamp() -> str:
    """A hash of numba_helpers.py: kernels inline its functions, and numba's cache of a kernel
    file knows only that file, so a changed helper must name new kernel files."""
    global _HELPERS_STAMP
    if _HELPERS_STAMP is None:
        from . import numba_helpers
        with open(numba_helpers.__file__, "rb") as f:
            _HELPERS_STAMP = hashlib.sha1(f.read()).hexdigest()[:12]
    return _HELPERS_STAMP


_HELPERS_STAMP = None


def load_kernels(source: str):
    """The module of a kernel source, written once to the cache directory and imported."""
    digest = hashlib.sha1((_helpers_stamp() + source).encode()).hexdigest()[:20]
    with _LOCK:
        mod = _MODULES.get(digest)
        if mod is not None:
            return mod
        name = f"adjit_kernel_{digest}"
        path = os.path.join(cache_dir(), name + ".py")
        if not _same_text(path, source):
            # written once and never touched again: numba's cache checks the file's stamp
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                f.write(source)
            os.replace(tmp, path)
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        _MODULES[digest] = mod
        return mod


def _same_text(path, source):
    try:
        with open(path) as f:
            return f.read() == source
    except OSError:
        return False


# -- code generation ------------------------------------------------------------------------------
class NumbaCodegen(Codegen):
    backend = "numba"

    def __init__(self, g, fn_name="program", min_kernel_size=MIN_KERNEL_SIZE,
                 parallel_size=PARALLEL_SIZE, donate_argnums=(), **options):
        super().__init__(g, fn_name, **options)
        self.min_kernel_size, self.parallel_size = min_kernel_size, parallel_size
        self.kernels = {}                     # kernel name -> (source, file)
        self.ns_kernels = types.SimpleNamespace()
        self._sources = {}                    # kernel name -> its numba source
        self.namespace["_rt_kernels"] = self.ns_kernels
        from . import numba_ops               # compiled loops for a few ops (numba imported)
        self.namespace["_rt_ops"] = {**self.namespace["_rt_ops"], **numba_ops.OPS}
        self.contiguous_donations = True      # kernels write through flat views

    def emit_group(self, run):
        g = self.g
        d0 = g[run[0]]
        a = d0["attrs"]
        if not as_kernel(g, run, self.min_kernel_size):
            return numpy_group(self, run)
        args = d0["args"]
        return self._kernel_call(a, {g[n]["attrs"]["output"]: n for n in run},
                                 [self.arg(x) for x in args], [g[x]["shape"] for x in args],
                                 [g[x]["dtype"] for x in args], args)

    def emit_node(self, n):
        """Without fusion, each elementwise node is a kernel of one instruction. Reductions
        alone stay NumPy calls: np.sum's pairwise SIMD loop is as fast as a kernel's."""
        g = self.g
        d = g[n]
        if OPS[d["op"]].fusion != "map" or _size(d["shape"]) < self.min_kernel_size or \
                not _numba_types(g, d["args"], [n]):
            return super().emit_node(n)
        exprs, shapes, dtypes, loads = [], [], [], []
        for x in d["args"]:
            # an elided broadcast is read with broadcast strides from the array it broadcasts
            src = g.args(x)[0] if x in self.elided else x
            exprs.append(self.arg(x))
            shapes.append(g[src]["shape"])
            dtypes.append(g[src]["dtype"])
            loads.append(Instr("broadcast_to", (len(loads),), {"shape": d["shape"]}, x, None)
                         if src != x else None)
        n_in = len(exprs)
        expr = [i for i in loads if i is not None]
        refs, k = [], n_in
        for pos, load in enumerate(loads):
            refs.append(pos if load is None else k)
            k += load is not None
        expr.append(Instr(d["op"], tuple(refs), dict(d["attrs"]), n, d["where"]))
        a = {"kernel": f"{d['op']}_v{n}", "shape": d["shape"], "expr": tuple(expr),
             "outputs": ((n_in + len(expr) - 1, None),), "output": 0}
        return self._kernel_call(a, {0: n}, exprs, shapes, dtypes,
                                 [x if x not in self.elided else None for x in d["args"]])

    def _kernel_call(self, a, by_output, args, in_shapes, in_dtypes, arg_nodes):
        """Lines allocating the outputs `by_output` ({output index: node}) and calling the
        kernel that computes them from argument expressions `args`; outputs the schedule
        places in an argument's buffer (a donated argument, or a value dying here) are
        stored there when the array allows it at run time (C order: the kernel writes
        through a flat view)."""
        which = sorted(by_output)
        name = a["kernel"]
        if len(which) < len(a["outputs"]):
            name += "_out" + "_".join(str(k) for k in which)
        fn_name = name + ("_par" if _size(a["shape"]) >= self.parallel_size else "")
        lines = [comment(f"{fn_name} (Program.kernels[{fn_name!r}]) fuses:")]
        lines += [comment(f"  {line}") for line in user_lines(a)]
        inplace, tests = {}, []
        for k, n in sorted(by_output.items()):
            x = self.in_place.get(n)
            if x is None or x not in arg_nodes or a["outputs"][k][1] is not None:
                continue
            j = arg_nodes.index(x)
            inplace[k] = j
            test = self.donation_test(x) if self.g[x]["op"] == "input" else \
                f"{args[j]}.flags.c_contiguous"
            if test not in tests:
                tests.append(test)
        call = self._call(a, which, by_output, args, in_shapes, in_dtypes, name, fn_name, {})
        if not inplace:
            return lines + call
        into = self._call(a, which, by_output, args, in_shapes, in_dtypes, name + "_into",
                          fn_name + "_into", inplace)
        return lines + [f"if {' and '.join(tests)}:"] + ["    " + x for x in into] + \
            ["else:"] + ["    " + x for x in call]

    def _call(self, a, which, by_output, args, in_shapes, in_dtypes, name, fn_name, inplace):
        g = self.g
        spec = kernel_spec(a, which, in_shapes, in_dtypes, name, inplace)
        mod = load_kernels(spec.source)
        par = fn_name.endswith("_par") or fn_name.endswith("_par_into")
        # a recomputed group (checkpointing) keeps its original's name, but may write into
        # another argument: a different kernel must not replace the one bound to that name
        base, k = fn_name, 2
        while self._sources.setdefault(fn_name, spec.source) != spec.source:
            fn_name, k = f"{base}_{k}", k + 1
        setattr(self.ns_kernels, fn_name, getattr(mod, "kernel_par" if par else "kernel"))
        self.kernels[fn_name] = (spec.shown["par" if par else "seq"], mod.__file__)
        lines = []
        for k in which:
            n = by_output[k]
            lines.append(node_comment(g, n))
            if k in inplace:
                lines.append(f"{self.names[n]} = {args[inplace[k]]}  # its buffer")
            else:
                lines.append(f"{self.names[n]} = np.empty({tuple(g[n]['shape'])}, "
                             f"np.{g[n]['dtype'].name})")
        call = [f"np.ravel({args[k]})" for k in spec.inputs]
        call += [f"{self.names[by_output[k]]}.reshape(-1)" for k in spec.outputs]
        call += [str(s) for s in spec.sizes]
        lines.append(f"_rt_kernels.{fn_name}({', '.join(call)})")
        return lines


def user_lines(a):
    """The distinct user source lines a group's instructions come from, in order."""
    seen = {}
    for ins in a["expr"]:
        w = ins.where
        if w is not None:
            roles = seen.setdefault(f"{w.short}  {w.text}", set())
            roles.add("vjp" if w.role.startswith("vjp") else w.role or "forward")
    return [f"{line}    ({', '.join(sorted(roles))})" if roles != {"forward"} else line
            for line, roles in seen.items()]


def _size(shape):
    return int(math.prod(shape))


def passive_threads():
    """Ask numba's OpenMP threads to sleep at barriers instead of spinning (OMP_WAIT_POLICY,
    read when numba first starts its threads; a value the user set wins).

    Spinning threads hold the cores: with another busy process on a 2-core machine a parallel
    GELU kernel took 15.9 ms instead of 3.7 ms. (The workqueue layer does not spin either, but
    aborts the process when two Python threads call kernels at once.) Process-wide malloc
    settings are left to the program: `adjit` commands and the benchmarks raise glibc's mmap
    threshold, which matters when large results are allocated on every call.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")


def quiet_pedantic_checks():
    """numba's SSA pass warns `NumbaIRAssumptionWarning: variable ... is not in scope` when it
    compiles its own float32 tanh inside a kernel: an internal pedantic check, not about the
    program (results are tested against NumPy). Shown to a user it reads like a failure, so
    that one category from numba.core.ssa is ignored."""
    warnings.filterwarnings("ignore", message=".*is not in scope", module="numba.core.ssa")


def _numba_types(g, args, nodes) -> bool:
    """Can numba compile a kernel over these dtypes, its intermediate values' included (a
    uint8 logaddexp computes in float16)? It has no float16 and no long double: such groups
    run as NumPy code, which computes them as NumPy does."""
    if not all(g[x]["dtype"] in _NUMBA_DTYPES for x in list(args) + list(nodes)):
        return False
    a = g[nodes[0]]["attrs"] if nodes else None
    if a is None or "expr" not in a:
        # an integer power: NumPy raises for a negative exponent, a kernel would not
        return not (nodes and g[nodes[0]]["op"] == "pow" and g[nodes[0]]["dtype"].kind in "iu")
    types = value_types([g[x]["shape"] for x in args], [g[x]["dtype"] for x in args], a)
    if not all(np.dtype(dt) in _NUMBA_DTYPES for _, dt in types):
        return False
    n_in = len(args)
    return not any(ins.op == "pow" and np.dtype(types[n_in + j][1]).kind in "iu"
                   for j, ins in enumerate(a["expr"]))


_NUMBA_DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float32, np.float64))


def build(g, fn_name="program", min_kernel_size=MIN_KERNEL_SIZE, parallel_size=PARALLEL_SIZE,
          **options):
    """Generate and load the module; -> dict(fn, source, kernels, prepare, finish).

    min_kernel_size: groups with fewer elements run as NumPy code (0: every group is a kernel).
    parallel_size: groups with at least this many elements use numba's threads.
    """
    if not usable():
        raise AdjitError(f"backend 'numba' cannot run here: {why_unusable()}")
    passive_threads()
    quiet_pedantic_checks()
    cg = NumbaCodegen(g, fn_name, min_kernel_size=min_kernel_size, parallel_size=parallel_size,
                      **options)
    source, namespace = cg.generate()
    ns, _ = load_module(source, fn_name, namespace)
    fn = ns[fn_name]
    fn.__source__ = source
    kernels = {k: f"{comment(f'runs as `kernel` in {path}')}\n{src}"
               for k, (src, path) in cg.kernels.items()}
    return {"fn": fn, "source": source, "kernels": kernels, "prepare": as_array,
            "finish": as_array}
