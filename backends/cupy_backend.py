"""CuPy backend: scheduled graph -> a Python module whose arrays live on the GPU.

Input: a graph with meta["schedule"], fused or not. Output: a readable module: the CUDA kernels
first (one `cupy.ElementwiseKernel` per elementwise node or fused group, one
`cupy.ReductionKernel` per fused reduction, their C written by `cuda_source` from the registry's
spellings), then one statement per node as in the NumPy backend, with `cp.` calls for layout,
reductions and matmul (cuBLAS; transposes stay views). Generating needs neither CuPy nor a GPU;
`build` with the default runtime (cupy_runtime.CupyRuntime) imports CuPy, and with
`cuda_graph=True` wraps the program in a `cuda_graph.GraphRunner` that captures it once and
replays it.
"""
from __future__ import annotations

import importlib.util
import re

import numpy as np

from ..ir.errors import AdjitError
from ..ir.fused import value_types
from ..ir.ops import OPS
from . import cuda_source as cs
from .codegen import Names, comment, literal, load_module, node_comment
from .cupy_runtime import to_device  # noqa: F401 - the training loop's hook, see to_host
from .numpy_backend import _expression

NAME = "cupy"
FUSES = True
# a fused reduction is one ReductionKernel; inputs bounded as numba's (nvcc time grows too)
FUSION_OPTIONS = {"reductions": True, "max_inputs": 16}


# -- availability ------------------------------------------------------------------------------
_USABLE = {}


def why_unusable():
    """None when CuPy and a CUDA device are usable, else the reason (cached)."""
    if "why" not in _USABLE:
        _USABLE["why"] = _probe()
    return _USABLE["why"]


def usable() -> bool:
    return why_unusable() is None


def _probe():
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is not installed (pip install cupy-cuda13x, or cupy-cuda12x for CUDA 12)"
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "CuPy finds no CUDA device"
        cupy.zeros(1).sum().item()
    except Exception as e:  # noqa: BLE001 - any failure here means no usable GPU; say which
        return f"CuPy cannot use a CUDA device: {type(e).__name__}: {e}"
    return None


def to_host(x):
    """A NumPy copy of a CuPy array (anything else through np.asarray); with to_device, the
    training loop's hooks (nn/train.py)."""
    return x.get() if hasattr(x, "__cuda_array_interface__") else np.asarray(x)


# -- code generation -----------------------------------------------------------------------------
def _is_kernel(g, n) -> bool:
    """Is n computed by a generated kernel (a fused group, or an unfused elementwise node)?"""
    op = g[n]["op"]
    return op == "fused" or OPS[op].fusion == "map"


def _scalar_const(g, a):
    """The value of a uniform constant (a 0-d const, maybe broadcast or reshaped), else None."""
    while g[a]["op"] in ("broadcast_to", "reshape"):
        a = g.args(a)[0]
    d = g[a]
    if d["op"] == "const" and np.size(d["attrs"]["value"]) == 1:
        return np.asarray(d["attrs"]["value"]).reshape(())
    return None


def _source(g, a):
    """The array a kernel argument broadcasts from (kernels broadcast implicitly)."""
    while g[a]["op"] == "broadcast_to":
        a = g.args(a)[0]
    return a


class _KernelArgs:
    """Kernel parameters in first-use order: distinct source arrays; uniform constants inline."""

    def __init__(self, g):
        self.g, self.params, self.instrs, self.at = g, [], [], {}

    def ref(self, a):
        """Index of the instruction reading argument node a."""
        g = self.g
        value = _scalar_const(g, a)
        if value is not None:
            self.instrs.append(cs.Instr("const", (), g[a]["dtype"], {"value": value}))
            return len(self.instrs) - 1
        src = _source(g, a)
        if src not in self.at:
            self.instrs.append(cs.Instr("input", (), g[src]["dtype"],
                                        {"index": len(self.params)}, src))
            self.at[src] = len(self.instrs) - 1
            self.params.append(src)
        return self.at[src]


def _node_program(g, n):
    """-> (ScalarProgram, argument nodes) of one unfused elementwise node."""
    d = g[n]
    args = _KernelArgs(g)
    refs = tuple(args.ref(a) for a in d["args"])
    args.instrs.append(cs.Instr(d["op"], refs, d["dtype"], dict(d["attrs"]), n))
    prog = cs.ScalarProgram(f"{d['op']}_v{n}", [g[p]["dtype"] for p in args.params],
                            args.instrs, [len(args.instrs) - 1])
    return prog, args.params


def _group_program(g, n, which, name, reduce=None):
    """-> ScalarProgram computing outputs `which` of fused node n's group (ir/fused.py).

    The group's values index its arguments then its instructions, as the program's do."""
    a = g[n]["attrs"]
    args = g.args(n)
    types = value_types([g[x]["shape"] for x in args], [g[x]["dtype"] for x in args], a)
    instrs = [cs.Instr("input", (), g[x]["dtype"], {"index": k}, x) for k, x in enumerate(args)]
    for j, ins in enumerate(a["expr"]):
        instrs.append(cs.Instr(ins.op, tuple(ins.args), types[len(args) + j][1],
                               dict(ins.attrs), ins.node))
    return cs.ScalarProgram(name, [g[x]["dtype"] for x in args], instrs,
                            [a["outputs"][k][0] for k in which], reduce)


def _runs(g, order):
    """Fused node -> the run of consecutive nodes of its group it belongs to (one launch)."""
    runs, prev = {}, None
    for n in order:
        d = g[n]
        if d["op"] != "fused":
            prev = None
            continue
        key = (d["attrs"]["kernel"], d["args"])
        if prev is not None and prev[0] == key:
            prev[1].append(n)
        else:
            prev = (key, [n])
        runs[n] = prev[1]
    return runs


def _kernel_def_source(d: cs.KernelDef) -> list:
    """Python lines defining kernel d with the same arguments CuPy's constructors take."""
    def text(s):
        lines = s.split("\n")
        return [f"    {(ln + chr(10) if k < len(lines) - 1 else ln)!r}"
                for k, ln in enumerate(lines)]
    var = f"_k_{d.name}"
    if d.kind == "elementwise":
        out = [f"{var} = _rt_elementwise(", f"    {d.in_params!r},", f"    {d.out_params!r},"]
        out += text(d.operation)
        out[-1] += ","
        out.append(f"    {d.name!r},")
    else:
        out = [f"{var} = _rt_reduction(", f"    {d.in_params!r},", f"    {d.out_params!r},",
               f"    {d.operation!r}, {d.reduce_expr!r}, {d.post_map_expr!r},",
               f"    {d.identity!r}, {d.name!r}, reduce_type={d.reduce_type!r},"]
    if d.preamble:
        out.append("    preamble=(")
        out += ["    " + s for s in text(d.preamble)]
        out[-1] += "),"
    out.append(")")
    return out


def _to_cp(rhs):
    return re.sub(r"\bnp\.", "cp.", rhs)


def generate(g, fn_name="program", inplace=None, capture=False):
    """-> (source, kernel defs, constants, attribute table) for the scheduled graph g.

    inplace maps an output node to the input node whose buffer its kernel writes (donated
    arguments of a CUDA-graph program, see `donation`). Values are `del`-ed after the last
    statement that reads them, which may differ from the schedule's last use since kernels
    read a broadcast's source instead of the broadcast. capture: the module is run under
    stream capture (cuda_graph=True), so matrix products call `_rt_matmul` (the runtime's
    matmul: CuPy refuses cuBLAS calls on a capturing stream) instead of `@`.
    """
    m = _Module(g, inplace or {}, capture)
    sched = g.meta["schedule"]
    inline = _kernel_only(g, sched.order)
    runs = _runs(g, sched.order)
    items, in_backward = [], False        # (lines, nodes read, nodes defined)
    for n in sched.order:
        d = g[n]
        op = d["op"]
        if op == "const":
            value = d["attrs"]["value"]
            if np.ndim(value) == 0 and n in inline:
                m.expr[n] = literal(value, d["dtype"])   # only kernels read it: a C literal
            else:
                m.consts.append(np.asarray(value, dtype=d["dtype"]))
                m.expr[n] = f"_rt_consts[{len(m.consts) - 1}]"
            continue
        if op == "broadcast_to" and n in inline:
            m.alias[n] = d["args"][0]                    # kernels broadcast their arguments
            continue
        if op == "input" or (n in runs and runs[n][0] != n):
            continue
        if not in_backward and any(g[r]["where"] is not None and
                                   g[r]["where"].role.startswith("vjp")
                                   for r in runs.get(n, [n])):
            items.append((["", "# backward"], set(), []))
            in_backward = True
        m.reads = set()
        if n in runs:
            lines = [node_comment(g, r) for r in runs[n]] + m.run_kernels(runs[n])
            defined = list(runs[n])
        else:
            lines = [node_comment(g, n), m.node_kernel(n) if _is_kernel(g, n)
                     else m.statement(n)]
            defined = [n]
        items.append((lines, m.reads, defined))
    body = _with_dels(g, items)
    outs = [m.arg(o) for o in g.outputs]
    params = ", ".join(m.names[i] for i in g.inputs)
    lines = [comment(f"generated by adjit (cupy backend) from {g.meta.get('fn_name', 'fn')}"),
             "# cp is cupy; arrays stay on the GPU. Each kernel below is a cupy.ElementwiseKernel",
             "# or ReductionKernel built once per program (cached by its source hash).", "", ""]
    lines += m.kernel_src
    lines.append(f"def {fn_name}({params}):")
    lines += ["    " + b if b else "" for b in body]
    lines.append("    return (" + "".join(o + ", " for o in outs).rstrip(" ") + ")")
    return "\n".join(lines) + "\n", m.defs, m.consts, m.attrs_tab


def _with_dels(g, items):
    """The items' lines, each value `del`-ed after the last item that reads it (so the
    memory pool gets it back), or right away if nothing reads it."""
    last = {}
    for k, (_, reads, _) in enumerate(items):
        for r in reads:
            last[r] = k
    keep = set(g.outputs) | set(g.inputs)
    names = Names(g)
    body = []
    for k, (lines, _, defined) in enumerate(items):
        body += lines
        dead = [r for r, at in last.items() if at == k and r not in keep]
        dead += [d for d in defined if d not in last and d not in keep]
        if dead:
            body.append("del " + ", ".join(names[r] for r in sorted(dead)))
    return body


class _Module:
    """What one generated module holds while it is written: names, inlined expressions,
    constants, the kernels defined so far, and the nodes the current statement reads."""

    def __init__(self, g, inplace, capture=False):
        self.g, self.inplace, self.capture = g, inplace, capture
        self.names = Names(g)
        self.expr, self.alias, self.consts, self.attrs_tab = {}, {}, [], []
        self.defs, self.kernel_src, self.used = [], [], set()
        self.reads = set()

    def arg(self, a):
        """The expression for node a in a statement (recorded as read)."""
        while a in self.alias:
            a = self.alias[a]
        if a in self.expr:
            return self.expr[a]
        self.reads.add(a)
        return self.names[a]

    def statement(self, n):
        """A non-kernel node: the NumPy backend's template with `cp.` for `np.`."""
        g = self.g
        if self.capture and g[n]["op"] == "matmul":
            a, b = (self.arg(x) for x in g.args(n))
            return f"{self.names[n]} = _rt_matmul({a}, {b})"
        rhs = _to_cp(_expression(g, n, [self.arg(a) for a in g.args(n)], self.attrs_tab))
        if n in g.outputs and g[n]["op"] == "broadcast_to":
            rhs = f"cp.array({rhs})"  # results must be writable arrays, not views
        return f"{self.names[n]} = {rhs}"

    def define(self, prog, n):
        """Define prog's kernel in the module; -> the variable that holds it."""
        base, k = prog.name, 1
        while prog.name in self.used:
            k += 1
            prog.name = f"{base}_{k}"
        self.used.add(prog.name)
        kd = cs.kernel_def(prog)
        self.defs.append(kd)
        self.kernel_src += [node_comment(self.g, n)] + _kernel_def_source(kd) + ["", ""]
        return f"_k_{kd.name}"

    def node_kernel(self, n):
        prog, params = _node_program(self.g, n)
        return self.call(self.define(prog, n), params, [n], self.g[n]["shape"])

    def run_kernels(self, run):
        """A run of one fused group: a ReductionKernel per reduced output, then one
        ElementwiseKernel for the others (reductions first: they read the group's arguments,
        which the elementwise kernel may overwrite when they are donated)."""
        g = self.g
        a = g[run[0]]["attrs"]
        args = list(g.args(run[0]))
        shape = tuple(a["shape"])
        lines, maps = [], []
        for n in run:
            k = g[n]["attrs"]["output"]
            red = a["outputs"][k][1]
            if red is None:
                maps.append(n)
                continue
            op, axis, keepdims = red
            prog, used = cs.used_inputs(_group_program(g, n, [k], f"{a['kernel']}_{op}{k}",
                                                       {"op": op, "dtype": g[n]["dtype"]}))
            if not used:
                raise cs.KernelSourceError(f"{a['kernel']}: a reduction of constants; "
                                           "simplify should have folded it")
            var = self.define(prog, n)
            call = [self.arg(args[j]) for j in used]
            if self._natural([args[j] for j in used]) != shape:
                # the reduced shape comes from the arguments: give it to the first one
                call[0] = f"cp.broadcast_to({call[0]}, {shape!r})"
            lines.append(f"{self.names[n]} = {var}({', '.join(call)}, axis={tuple(axis)!r}, "
                         f"keepdims={bool(keepdims)!r})")
        if maps:
            which = [g[n]["attrs"]["output"] for n in maps]
            prog, used = cs.used_inputs(_group_program(g, maps[0], which, a["kernel"]))
            var = self.define(prog, maps[0])
            lines.append(self.call(var, [args[j] for j in used], maps, shape))
        return lines

    def _natural(self, params):
        """The shape the arrays passed for params broadcast to (None with no arrays)."""
        shapes = []
        for p in params:
            while p in self.alias:
                p = self.alias[p]
            if p not in self.expr or self.expr[p].startswith("_rt_consts"):
                shapes.append(self.g[p]["shape"])
        return tuple(np.broadcast_shapes(*shapes)) if shapes else None

    def call(self, var, params, outs, shape):
        """`outs = kernel(args)`, with output buffers when the arguments broadcast to less than
        the output shape, or when an output goes into a donated argument's buffer."""
        g = self.g
        call = [self.arg(p) for p in params]
        buffers = [self.arg(self.inplace[o]) if o in self.inplace else None for o in outs]
        if self._natural(params) != tuple(shape) or any(buffers):
            call += [b or f"cp.empty({tuple(shape)!r}, dtype=cp.{g[o]['dtype'].name})"
                     for b, o in zip(buffers, outs)]
        return f"{', '.join(self.names[o] for o in outs)} = {var}({', '.join(call)})"


def _kernel_only(g, order):
    """Nodes read only by kernels, directly or through broadcasts read only by kernels: such
    broadcasts need no statement (kernels broadcast) and such scalars become C literals."""
    users = {}
    for n in order:
        for a in g.args(n):
            users.setdefault(a, set()).add(n)
    only = set()
    for n in reversed(order):
        if n not in g.outputs and users.get(n) and all(
                _is_kernel(g, u) or (g[u]["op"] == "broadcast_to" and u in only)
                for u in users[n]):
            only.add(n)
    return only


def _matmul(a, b):
    return a @ b


def build(g, fn_name="program", cuda_graph=False, donate_argnums=(), runtime=None):
    """Generate and load the module; -> dict(fn, source, kernels, prepare, finish).

    cuda_graph: capture the whole program once (on the first call) and replay it;
    donate_argnums: arguments whose buffers the program may overwrite with results of the
    same shape and dtype (a training step's parameters and optimizer state), cuda_graph only.
    runtime: what the module runs on; default CuPy on the current device (tests pass a host
    emulation).
    """
    donate_argnums = tuple(donate_argnums or ()) if not isinstance(donate_argnums, int) \
        else (donate_argnums,)
    if donate_argnums and not cuda_graph:
        # only a captured program owns buffers it can update in place: uncaptured, results
        # are new arrays (README's portable adjit.compile(step, donate_argnums=...) runs)
        donate_argnums = ()
    from .cuda_graph import GraphRunner, donation
    from .cupy_runtime import CupyRuntime, device_ops
    rt = runtime or CupyRuntime()
    pairs, inplace = donation(g, donate_argnums) if donate_argnums else ([], {})
    source, defs, consts, attrs_tab = generate(g, fn_name, inplace, capture=cuda_graph)
    namespace = {"cp": rt.xp, "np": np, "_rt_elementwise": rt.elementwise,
                 "_rt_matmul": getattr(rt, "matmul", None) or _matmul,
                 "_rt_reduction": rt.reduction, "_rt_attrs": attrs_tab,
                 "_rt_consts": [rt.to_device(c) for c in consts], "_rt_ops": device_ops(rt)}
    ns, _ = load_module(source, fn_name, namespace)
    fn = ns[fn_name]
    fn.__source__ = source
    kernels = {d.name: d.cuda() for d in defs}
    prepare = rt.to_device
    if cuda_graph:
        specs = [(g[i]["shape"], g[i]["dtype"]) for i in g.inputs]
        in_place = {g.inputs.index(i) for i in inplace.values()}
        fn = GraphRunner(fn, specs, pairs, in_place, rt, fn_name)
        prepare = None   # the runner copies arguments into its own buffers
    return {"fn": fn, "source": source, "kernels": kernels, "prepare": prepare,
            "finish": None, "kernel_defs": defs}
