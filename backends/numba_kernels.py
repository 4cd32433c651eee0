"""Source of a numba kernel for a run of fused nodes: loops over flat indices, no temporaries.

Input: a fused group (ir/fused.py), which of its outputs to compute, and its inputs' shapes and
dtypes. Output: a `KernelSpec` with the kernel's source (a sequential and a `prange` variant of
one function) and how to call it. Arrays are passed flat and C-contiguous; broadcasting is by
strides (0 for a broadcast axis), so no broadcast is materialised. Axes of size 1 are dropped and
neighbouring axes that every array walks alike are merged, so a contiguous group is one loop.
Sizes are arguments, not constants, so one kernel serves every batch size of a program.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..ir.fused import value_types
from ..ir.ops import OPS, whole_power
from .codegen import comment
from .fused_numpy import needed

BLOCK = 512   # elements of the parallel axis per task when that axis is not the outermost


@dataclass
class KernelSpec:
    name: str            # the kernel's name from the IR, e.g. fused_mul_add_tanh_v40
    source: str          # the module that runs: functions `kernel` and `kernel_par`
    shown: dict          # "seq"/"par" -> that variant named `name`, with the user lines
    inputs: list         # argument positions (into the fused node's args) the kernel reads
    outputs: list        # output indices whose arrays are passed (not written in place)
    sizes: list          # the merged axis sizes to pass after the arrays


# elementwise ops whose scalar spelling is already a Python bool for boolean results
_BOOL_NATIVE = frozenset(("eq", "ne", "lt", "le", "gt", "ge", "logical_not", "isnan",
                          "isinf", "isfinite", "where", "cast", "signbit"))

def literal(value, dtype) -> str:
    """A scalar constant as numba source (math.inf and math.nan instead of float('inf'))."""
    dt = np.dtype(dtype)
    v = np.asarray(value).astype(dt).item()
    if dt.kind == "b":
        return repr(bool(v))
    if dt.kind in "iu":
        return f"np.{dt.name}({int(v)})"
    if math.isnan(v):
        return f"np.{dt.name}(math.nan)"
    if math.isinf(v):
        return f"np.{dt.name}({'-' if v < 0 else ''}math.inf)"
    return f"np.{dt.name}({float(v)!r})"


def _axes(shape, in_shapes, out_specs):
    """Merged axes: [(original axes, reduced?)] and, per array, which merged axes it walks."""
    nd = len(shape)
    keep = [i for i in range(nd) if shape[i] != 1]
    reduced = set()
    for red in out_specs:
        if red is not None:
            reduced |= {i for i in red[1]}

    def walks(s):
        s = (1,) * (nd - len(s)) + tuple(s)
        return [s[i] == shape[i] for i in keep]
    flags = [walks(s) for s in in_shapes]
    flags += [[i not in reduced for i in keep] if red else [True] * len(keep) for red in out_specs]
    merged, mflags = [], [[] for _ in flags]
    for k, ax in enumerate(keep):
        red = ax in reduced
        if merged and merged[-1][1] == red and all(f[k] == mf[-1] for f, mf in zip(flags, mflags)):
            merged[-1][0].append(ax)
            continue
        merged.append(([ax], red))
        for f, mf in zip(flags, mflags):
            mf.append(f[k])
    return merged, mflags


def kernel_spec(attrs, which, in_shapes, in_dtypes, name, inplace=None):
    """The kernel computing outputs `which` (sorted) of a fused group (see module docstring).

    inplace: {output index: argument position} for outputs written over a full-shape argument
    of the same dtype (a donated buffer); the kernel then stores into that argument itself,
    which it reads at the same index just before, so the loop still vectorises.
    """
    inplace = dict(inplace or {})
    shape = tuple(attrs["shape"])
    n_in = len(in_shapes)
    types = value_types(in_shapes, in_dtypes, attrs)
    need = needed(attrs, n_in, which) | set(inplace.values())
    ins = [k for k in range(n_in) if k in need]
    outs = [attrs["outputs"][k] for k in which]
    merged, flags = _axes(shape, [in_shapes[k] for k in ins], [red for _, red in outs])
    sizes = [int(math.prod([shape[i] for i in axes])) for axes, _ in merged]
    src = _Source(attrs, types, n_in, ins, outs, merged, flags, which, name, inplace)
    return KernelSpec(name, src.module(), {v: src.module(shown=v) for v in ("seq", "par")},
                      ins, [k for k in which if k not in inplace], sizes)


class _Source:
    def __init__(self, attrs, types, n_in, ins, outs, merged, flags, which, name, inplace):
        self.a, self.types, self.n_in = attrs, types, n_in
        self.inplace = inplace
        self.ins, self.outs, self.which, self.name = ins, outs, which, name
        self.red = [k for k, (_, red) in enumerate(outs) if red is not None]
        self.nd = len(merged)
        self.reduced = [r for _, r in merged]
        self.flags = flags
        # the parallel axis: the first kept one (reductions may not be split across threads)
        kept = [d for d in range(self.nd) if not self.reduced[d]]
        self.par = kept[0] if kept else None
        self.blocked = self.par is not None and self.par != 0

    def module(self, shown=None):
        """The module's source: `kernel` and `kernel_par` with no names or comments from the
        graph, so one compiled kernel serves every graph with the same structure. With `shown`
        ("seq" or "par"), the variant that runs, named after the group, with the user lines
        it came from."""
        variants = (False, True) if shown is None else (shown == "par",)
        bodies = {par: self._body(par, shown) for par in variants}
        # scalar helpers the spellings name (ir/ops.py SCALAR_HELPERS; backends/numba_helpers.py)
        # and _rt_radd, a running sum's add, in either variant
        helpers = sorted(set(re.findall(r"\b(_rt_\w+)\(", "\n".join(
            line for par in variants for line in bodies[par]))))
        lines = [comment("numba kernel generated by adjit")]
        if shown:
            lines = [comment(f"numba kernel {self.name}, generated by adjit from:")]
            lines += ["#     " + line for line in self._describe()]
        lines += ["import math", "", "import numba", "import numpy as np"]
        if helpers:
            lines += ["", "from adjit.backends.numba_helpers import " + ", ".join(helpers)]
        lines += ["", ""]
        fn = self.name if shown else "kernel"
        for par in variants:
            flags = "parallel=True, " if par else ""
            lines.append(f"@numba.njit({flags}cache=True, error_model=\"numpy\", nogil=True)")
            lines.append(f"def {fn}{'_par' if par else ''}({self._params()}):")
            lines += ["    " + b if b else "" for b in bodies[par]]
            lines += ["", ""]
        return "\n".join(lines).rstrip() + "\n"

    def _out(self, k):
        """The array output k is stored into: its own, or the argument it overwrites."""
        return f"in{self.inplace[k]}" if k in self.inplace else f"out{k}"

    def _params(self):
        outs = [self._out(k) for k in self.which if k not in self.inplace]
        return ", ".join([f"in{k}" for k in self.ins] + outs
                         + [f"n{d}" for d in range(self.nd)])

    def _describe(self):
        from ..ir.fused import describe
        return describe(self.a, [f"in{k}" for k in range(self.n_in)])

    # -- loop nest ----------------------------------------------------------------------------
    def _stride(self, arr, d):
        """Source for the element stride of array `arr` along merged axis d (C order)."""
        later = [f"n{e}" for e in range(d + 1, self.nd) if self.flags[arr][e]]
        return " * ".join(later) if later else "1"

    def _index(self, arr, sub=None):
        """Flat index of array `arr` (inputs, then outputs) at the loop indices i0, i1, ...
        (`sub` replaces some of them)."""
        terms = []
        for d in range(self.nd):
            if self.flags[arr][d]:
                s = self._stride(arr, d)
                i = (sub or {}).get(d, f"i{d}")
                terms.append(i if s == "1" else f"{i} * {s}")
        return " + ".join(terms) if terms else "0"

    def _access(self, arr, name):
        """`name[index]` of array arr at the current element; in a sliced block the view
        `_rt_s<arr>` starts at the block's first element of the row."""
        if self.sliced:
            return f"_rt_s{arr}[{'_rt_k' if self.flags[arr][self.par] else '0'}]"
        return f"{name}[{self._index(arr)}]"

    def _names(self):
        return [f"in{k}" for k in self.ins] + [self._out(k) for k in self.which]

    def _body(self, par, shown):
        rng_p = "numba.prange" if par else "range"
        out = []
        inner_red = self.nd > 0 and self.reduced[self.nd - 1]   # sums kept in acc<k> locals
        wide = [k for k in self.red if inner_red and self._acc_dtype(k) != self._out_dtype(k)]
        for k in self.red:
            # reductions start from their identity; float32 sums add their partial sums in a
            # float64 array (each row's sum rounded into a float32 total would lose ~rows ulps)
            arr = f"out{self.which[k]}"
            if k in wide:
                out.append(f"_rt_w{k} = np.zeros({arr}.size, np.float64)")
                continue
            init = self._literal_init(k, self._out_dtype(k))
            out += [f"for _rt_j in {rng_p}({arr}.size):", f"    {arr}[_rt_j] = {init}"]
        self.sliced = False
        if self.nd == 0:
            return out + self._element([], shown, False)
        # threads split the parallel axis; when it is not the outermost one, into blocks, each
        # thread running the whole nest over its block (sequential code keeps plain loops)
        blocked = par and self.blocked
        p, indent = self.par, ""
        if blocked:
            out.append(f"for _rt_b in numba.prange((n{p} + {BLOCK - 1}) // {BLOCK}):")
            out.append(f"    _rt_lo = _rt_b * {BLOCK}")
            indent = "    "
        inner = self.nd - 1
        accs = self.red if self.reduced[inner] else []
        # a sum over everything splits across threads as a prange reduction (`acc += v`),
        # whose partial sums numba combines
        psum = par and self.par is None and self.nd == 1 and \
            all(self.outs[k][1][0] == "sum" for k in accs)
        for d in range(self.nd):
            if d == inner:
                out += [f"{indent}acc{k} = {self._literal_init(k, self._acc_dtype(k))}"
                        for k in accs]
            loop = f"i{d}"
            if blocked and d == p == inner:
                # views that start at the block: a loop from 0 vectorises, one from _rt_lo
                # did not (10x slower here)
                self.sliced = True
                for a, name in enumerate(self._names()):
                    out.append(f"{indent}_rt_s{a} = {name}[{self._index(a, {p: '_rt_lo'})}:]")
                loop, rng = "_rt_k", f"range(min({BLOCK}, n{d} - _rt_lo))"
            elif blocked and d == p:
                rng = f"range(_rt_lo, min(n{d}, _rt_lo + {BLOCK}))"
            elif d == 0 and par and (p == 0 or psum):
                rng = "numba.prange(n0)"
            else:
                rng = f"range(n{d})"
            out.append(f"{indent}for {loop} in {rng}:")
            indent += "    "
        out += [indent + line for line in self._element(accs, shown, psum)]
        indent = indent[:-4]
        for k in accs:
            arr = f"out{self.which[k]}"
            idx = self._index(len(self.ins) + k)
            if k in wide:
                out.append(f"{indent}_rt_w{k}[{idx}] += acc{k}")
            else:
                out.append(f"{indent}{arr}[{idx}] = "
                           f"{self._combine(k, f'{arr}[{idx}]', f'acc{k}')}")
        for k in wide:
            arr = f"out{self.which[k]}"
            dt = self._out_dtype(k).name
            out += [f"for _rt_j in {rng_p}({arr}.size):",
                    f"    {arr}[_rt_j] = np.{dt}(_rt_w{k}[_rt_j])"]
        return out

    def _literal_init(self, k, dt):
        return literal(OPS[self.outs[k][1][0]].reduce_init(dt), dt)

    def _out_dtype(self, k):
        ref, (op, axis, keepdims) = self.outs[k]
        dt = self.types[ref][1]
        return np.dtype(OPS[op].dtype([dt], {"axis": tuple(axis), "keepdims": keepdims}))

    def _acc_dtype(self, k):
        dt = self._out_dtype(k)
        # float32 sums accumulate in float64, as accurate as NumPy's pairwise summation
        if dt == np.float32 and self.outs[k][1][0] == "sum":
            return np.dtype(np.float64)
        return dt

    def _combine(self, k, a, b):
        _, (op, _, _) = self.outs[k]
        dt = self._out_dtype(k)
        return f"np.{dt.name}({OPS[op].scalar.format(a, b)})"

    # -- one element ----------------------------------------------------------------------------
    def _element(self, accs, shown, psum):
        need = needed(self.a, self.n_in, self.which)
        lines, last = [], None
        for pos, k in enumerate(self.ins):
            lines.append(f"a{k} = {self._access(pos, f'in{k}')}")
        val = {k: f"a{k}" for k in self.ins}
        for j, ins in enumerate(self.a["expr"]):
            r = self.n_in + j
            if r not in need:
                continue
            dt = self.types[r][1]
            if ins.op == "const":
                val[r] = literal(ins.attrs["value"], dt)
                continue
            spelling = OPS[ins.op].scalar
            if spelling is None:
                raise NotImplementedError(f"op {ins.op!r} has no scalar spelling for kernels")
            fields = {k: (f"np.{np.dtype(v).name}" if k == "dtype" else v)
                      for k, v in ins.attrs.items()}
            expr = spelling.format(*[val[q] for q in ins.args], **fields)
            e = whole_exponent(self.a, self.n_in, ins) if dt.kind == "f" else None
            # x ** 3: products, as ir/ops.whole_power says (x ** 2 and x ** -1 LLVM rewrites
            # itself; others call pow())
            if e is not None and whole_power(e) is not None:
                expr = _power(val[ins.args[0]], e)
            if OPS[ins.op].fusion == "broadcast":
                val[r] = expr
                continue
            w = ins.where
            if w is not None and shown and (w.short, w.text) != last:
                lines.append(comment(f"{w.short}  {w.text}"))
                last = (w.short, w.text)
            if dt.kind != "b":
                expr = f"np.{dt.name}({_unwrap(expr)})"
            elif OPS[ins.op].kind == "elementwise" and ins.op not in _BOOL_NATIVE:
                # NumPy's boolean arithmetic is logical: True + True is True (Python's is 2)
                expr = f"({expr} != 0)"    # kept whole: `a < b != 0` would chain
            lines.append(f"t{j} = {expr}")
            val[r] = f"t{j}"
        n_ins = len(self.ins)
        for k, (ref, red) in enumerate(self.outs):
            arr = self._out(self.which[k])
            if red is None:
                lines.append(f"{self._access(n_ins + k, arr)} = {val[ref]}")
            elif k in accs and psum:
                lines.append(f"acc{k} += {val[ref]}")
            elif k in accs:
                _, (op, _, _) = self.outs[k]
                acc_dt = self._acc_dtype(k)
                if op == "sum" and acc_dt.kind == "f":
                    # the one add that may be reassociated: the loop vectorises (numba_helpers)
                    lines.append(f"acc{k} = _rt_radd(acc{k}, np.{acc_dt.name}({val[ref]}))")
                    continue
                comb = OPS[op].scalar.format(f"acc{k}", val[ref])
                lines.append(f"acc{k} = np.{acc_dt.name}({comb})")
            else:
                cell = self._access(n_ins + k, arr)
                lines.append(f"{cell} = {self._combine(k, cell, val[ref])}")
        return lines


def whole_exponent(a, n_in, ins):
    """The exponent of a pow instruction of the group `a` when it is a constant whole number
    up to 8 in magnitude, which the kernel computes with products (no pow() call), else None;
    numba_backend.as_kernel counts such a power as cheap."""
    if ins.op != "pow":
        return None
    r = ins.args[1]
    while r >= n_in and a["expr"][r - n_in].op in ("broadcast_to", "cast"):
        r = a["expr"][r - n_in].args[0]
    if r < n_in or a["expr"][r - n_in].op != "const":
        return None
    v = np.asarray(a["expr"][r - n_in].attrs["value"])
    if v.size != 1:
        return None
    v = float(v.reshape(-1)[0])
    return int(v) if v == round(v) and abs(v) <= 8 else None


def _power(x, e):
    """x ** e for a whole e as products, left to right over the exponent's bits (square, and
    multiply by x where a bit is set: x^7 = ((x^2 x)^2) x; LLVM computes each repeated
    subexpression once), as ir/ops._power computes it on the NumPy backend."""
    r = x
    for bit in bin(abs(e))[3:]:
        r = f"({r} * {r})"
        if bit == "1":
            r = f"({r} * {x})"
    return r if e > 0 else f"(1.0 / {r})"


def _unwrap(expr):
    """`(a + b)` -> `a + b` when the parentheses enclose the whole expression."""
    if not (expr.startswith("(") and expr.endswith(")")):
        return expr
    depth = 0
    for i, ch in enumerate(expr):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i < len(expr) - 1:
            return expr
    return expr[1:-1]
