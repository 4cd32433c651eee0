"""NumPy statements for a run of fused nodes: one call per instruction, in place where it can.

Input: consecutive fused nodes of one group (ir/fused.py) inside a Codegen. Output: lines that
make the same NumPy calls as the unfused program, so results are bit-identical, but write each
ufunc result into the buffer of an operand that dies there (`out=`) instead of a new array.
Temporaries are `_t<j>` and are deleted at their last use, so memory measurements stay real.
"""
from __future__ import annotations

import math
import numpy as np

from ..ir.fused import same_group, value_types
from ..ir.ops import OPS
from .codegen import comment, literal


def ufunc_name(op, args=None):
    """`np.<name>` when OPS[op].numpy is that NumPy ufunc (it then accepts out=), or the
    source of the ufunc-like callable a reference names for the argument sources `args`
    (ir/ops._power: `_rt_ops['pow']` for a whole power, else np.power), else None. Without
    args, such a reference is not a ufunc: it reads its operands after writing out, so no
    operand's buffer is given to it (in_place_ok, `_own_buffer`)."""
    fn = OPS[op].numpy
    if isinstance(fn, np.ufunc) and getattr(np, fn.__name__, None) is fn:
        return f"np.{fn.__name__}"
    source = getattr(fn, "ufunc_source", None)
    return source(args) if source is not None and args is not None else None


def _own_buffer(op) -> bool:
    """Must op's NumPy call write a buffer none of its operands holds? Yes for a reference
    that writes out= before it has read all its operands (a whole power), and for an op
    whose ufunc is slow in place (OPS[op].in_place, np.sign)."""
    return getattr(OPS[op].numpy, "ufunc_source", None) is not None or not OPS[op].in_place


def needed(a, n_in, which):
    """Values (input and instruction indices) that outputs `which` depend on."""
    need, stack = set(), [a["outputs"][k][0] for k in which]
    while stack:
        r = stack.pop()
        if r in need:
            continue
        need.add(r)
        if r >= n_in:
            stack.extend(a["expr"][r - n_in].args)
    return need


def instr_comment(ins):
    """`# tanh    mlp.py:18  h = ...`: the op of one instruction and the user line it is from."""
    w = ins.where
    if w is None:
        return comment(ins.op)
    if w.role:
        return comment(f"{ins.op:<32}  {w.role} ({w.short}  {w.text})")
    return comment(f"{ins.op:<32}  {w.short}  {w.text}")


def numpy_group(cg, run):
    """Lines computing the fused nodes `run` with NumPy (see the module docstring)."""
    return numpy_group_plan(cg, run)[0]


class _Placeholders(dict):
    def __missing__(self, n):
        return f"v{n}"


class _Names:
    """What `numpy_group_plan` needs of a Codegen, with placeholder names: `scratch_bytes`
    runs the plan for its byte count only (real names would cost a pass over every input)."""
    in_place, spare = {}, {}

    def __init__(self, g):
        self.g, self.names, self.attrs_tab = g, _Placeholders(), []

    def arg(self, x):
        return self.names[x]

    def donation_test(self, x):
        return "_rt_in_place"


def scratch_bytes(g, n, placed=None):
    """Bytes the NumPy code of fused node n allocates besides n's result while it runs: its
    temporaries, and the results of the rest of its group, made in the same statements (the
    schedule counts them at their own steps, just after). Charged to a group's first node.
    placed: the schedule's `Placed` (outputs written into arguments' buffers, which
    allocate nothing, and dying arguments the temporaries may overwrite)."""
    if g[n]["op"] != "fused" or (n - 1 in g and same_group(g, n - 1, n)):
        return 0
    run = [n]
    while run[-1] + 1 in g and same_group(g, n, run[-1] + 1):
        run.append(run[-1] + 1)
    names = _Names(g)
    if placed:
        names.in_place = {m: placed.in_place[m] for m in run if m in placed.in_place}
        names.spare = {run[0]: placed.spare.get(run[0], ())}
    own = 0 if n in names.in_place else g.nbytes(n)
    return max(0, numpy_group_plan(names, run)[1] - own)


def numpy_group_plan(cg, run):
    """(lines, peak bytes those lines hold at once: temporaries and results) for `run`."""
    g = cg.g
    d0 = g[run[0]]
    a = d0["attrs"]
    shape = tuple(a["shape"])
    in_nodes = d0["args"]
    n_in = len(in_nodes)
    types = value_types([g[x]["shape"] for x in in_nodes], [g[x]["dtype"] for x in in_nodes], a)
    want = {g[n]["attrs"]["output"]: n for n in run}
    need = needed(a, n_in, want)
    ends = {r: float("inf") for r in (a["outputs"][k][0] for k in want)}
    for j, ins in enumerate(a["expr"]):
        if n_in + j in need:
            for r in ins.args:
                ends.setdefault(r, j)
                ends[r] = max(ends[r], j)
    target = {a["outputs"][k][0]: n for k, n in want.items() if a["outputs"][k][1] is None}
    val = [cg.arg(x) for x in in_nodes]          # source of every value so far
    full = [g[x]["shape"] == shape for x in in_nodes]
    # the shape each value has in NumPy (broadcasts stay implicit, so a value computed from
    # two broadcast operands, x[:, None] - y[None, :], can be full-size without either)
    vshape = [tuple(g[x]["shape"]) for x in in_nodes]
    temps = set()                                # values held in `_t<j>` arrays, alive
    literals = set()                             # values written as scalar literals
    # arguments that die here (the schedule's `spare`): temporaries may overwrite them
    # (read once, and not through a broadcast, whose value would share the name)
    spare = set(cg.spare.get(run[0], ()))
    spare = {r for r, x in enumerate(in_nodes) if x in spare and full[r]
             and in_nodes.count(x) == 1 and not any(
                 OPS[ins.op].fusion == "broadcast" and r in ins.args for ins in a["expr"])}
    held = {}                                    # value -> bytes of the array it holds
    live = peak = 0
    full_bytes = int(math.prod(shape))
    lines = [comment(f"{a['kernel']}: " + ", ".join(
        f"{cg.names[n]} = out{g[n]['attrs']['output']}" for n in run))]
    for j, ins in enumerate(a["expr"]):
        r_j = n_in + j
        if r_j not in need:
            val.append(None)
            full.append(False)
            vshape.append(())
        elif ins.op == "const":
            val.append(literal(ins.attrs["value"], types[r_j][1]))
            full.append(False)
            vshape.append(())
            literals.add(r_j)
        elif OPS[ins.op].fusion == "broadcast":
            # NumPy broadcasts implicitly, with the same right-aligned rule as the IR
            val.append(val[ins.args[0]])
            full.append(False)
            vshape.append(vshape[ins.args[0]])
        else:
            own = tuple(np.broadcast_shapes(*[vshape[r] for r in ins.args]))
            name = cg.names[target[r_j]] if r_j in target else f"_t{j}"
            # (a whole power reads x again after its first product: never x's own buffer)
            reuse = [] if _own_buffer(ins.op) else [
                r for r in ins.args if (r in temps or r in spare) and ends.get(r) == j
                and full[r] and types[r][1] == types[r_j][1]]
            into = cg.in_place.get(target.get(r_j))
            rhs, is_full, new = _call(cg, ins, [val[r] for r in ins.args], shape,
                                      types[r_j][1], own == tuple(shape),
                                      r_j in target, val[reuse[0]] if reuse else None,
                                      into_code(cg, into),
                                      [r not in literals for r in ins.args])
            if into is not None:
                held[r_j] = 0       # a donated argument's buffer: the schedule counts none
            elif new:
                size = full_bytes if is_full else int(math.prod(own))
                held[r_j] = size * types[r_j][1].itemsize if size > 1 else 0
                live += held[r_j]
            else:
                held[r_j] = held.pop(reuse[0], 0)
            peak = max(peak, live)
            lines.append(instr_comment(ins))
            lines.append(f"{name} = {rhs}")
            val.append(name)
            full.append(is_full)
            vshape.append(tuple(shape) if is_full else own)
            if r_j not in target:
                temps.add(r_j)
            dead = sorted({r for r in ins.args if r in temps and ends.get(r) == j})
            if dead:
                lines.append("del " + ", ".join(val[r] for r in dead))
                temps -= set(dead)
                live -= sum(held.pop(r, 0) for r in dead)
    from .numpy_backend import op_expression
    for k, n in sorted(want.items()):
        ref, red = a["outputs"][k]
        if red is None:
            continue
        src = val[ref] if full[ref] or not shape else f"np.broadcast_to({val[ref]}, {shape})"
        lines.append(comment(f"{red[0]} of {val[ref]}"))
        lines.append(f"{cg.names[n]} = " + op_expression(
            red[0], {"axis": tuple(red[1]), "keepdims": red[2]}, [src], cg.attrs_tab))
        live += g.nbytes(n)
        peak = max(peak, live)
    if temps:
        lines.append("del " + ", ".join(sorted(val[r] for r in temps)))
    return lines, peak


def into_code(cg, x):
    """The `out=` of a node the schedule computes into argument x's buffer (None: none): a
    dying value's buffer always; a donated argument's when the call allows it
    (`_rt_in_place[k]`), else the fallback `{}` (a dying temporary's buffer, or a new array)."""
    if x is None:
        return None
    if cg.g[x]["op"] == "input":
        return cg.arg(x) + f" if {cg.donation_test(x)} else {{}}"
    return cg.arg(x)


def _call(cg, ins, args, shape, dtype, is_full, is_out, dying, into=None, arrays=None):
    """(right-hand side, is the result full-shape, is it a new array) for one instruction: a
    ufunc writing into the dying buffer `dying` when there is one, else a new array; an
    output the schedule puts into an argument's buffer is written there (`into_code`)."""
    from .numpy_backend import op_expression
    uf = ufunc_name(ins.op, args)
    if uf is not None and shape and not is_full and (into is not None or
                                                     (is_out and dying is None)):
        # a full-shape result from smaller operands: the arguments are broadcast as views, as
        # in the unfused program, so NumPy lays the new array out as it would there (a new
        # C-order array would be summed in another order where the inputs are not C order)
        arrays = arrays or [True] * len(args)
        if not any(arrays):
            arrays = [True] + [False] * (len(args) - 1)
        args = [f"np.broadcast_to({x}, {shape})" if a else x for x, a in zip(args, arrays)]
    if into is not None:
        other = dying if dying is not None else "None"
        return f"{uf}({', '.join(args)}, out={into.format(other)})", True, False
    if uf is not None and shape:
        if dying is not None:
            return f"{uf}({', '.join(args)}, out={dying})", True, False
        if is_out and not is_full:
            return f"{uf}({', '.join(args)})", True, True
        return f"{uf}({', '.join(args)})", is_full, True
    rhs = op_expression(ins.op, ins.attrs, args, cg.attrs_tab)
    if shape and is_out and not is_full:
        return f"np.array(np.broadcast_to({rhs}, {shape}))", True, True
    return rhs, is_full, True


def in_place_ok(g, n, x) -> bool:
    """Can the NumPy code of node n write its result into input x's buffer? When n is
    computed by a ufunc (out=) over arguments that include x, and, in a fused group, no
    instruction after n's reads x (it would see n's values) and no reduction reads it."""
    d = g[n]
    if not d["shape"] or g[x]["shape"] != d["shape"] or g[x]["dtype"] != d["dtype"] \
            or x not in d["args"]:
        return False
    if d["op"] != "fused":
        return OPS[d["op"]].kind == "elementwise" and not d["attrs"] and \
            ufunc_name(d["op"]) is not None and not _own_buffer(d["op"])
    a = d["attrs"]
    ref, red = a["outputs"][a["output"]]
    n_in = len(d["args"])
    if red is not None or ref < n_in or ufunc_name(a["expr"][ref - n_in].op) is None or \
            _own_buffer(a["expr"][ref - n_in].op):
        return False
    alias = {p for p, y in enumerate(d["args"]) if y == x}
    for j, ins in enumerate(a["expr"]):
        reads = any(r in alias for r in ins.args)
        if reads and OPS[ins.op].fusion == "broadcast":
            alias.add(n_in + j)
        elif reads and n_in + j > ref:
            return False
    return not any(r in alias for r, red in a["outputs"] if red is not None)
