"""The `fused` op: one output of a group of elementwise nodes merged by passes/fusion.py.

A group is a scalar expression DAG over its inputs (`expr`, a tuple of `Instr`), evaluated at
every index of an iteration `shape`, with outputs that are DAG values or reductions of them.
Every output is its own graph node (attrs["output"] picks it) carrying the whole group, so each
node is self-contained for passes (DCE, recomputation) and the schedule counts each output's
bytes where it is made; backends run a run of consecutive nodes of one group as one kernel.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .errors import GradError


class Instr(NamedTuple):
    """One scalar operation of a group: OPS[op] applied to earlier values.

    args index the group's values: 0..n_inputs-1 are the node's arguments, n_inputs + j is
    instruction j. node and where name the IR node it came from (for comments and errors).
    """
    op: str
    args: tuple
    attrs: dict
    node: int
    where: object = None


def same_group(g, n, m):
    """Are n and m different outputs of one fused group, over the same arguments?"""
    a, b = g[n], g[m]
    return a["op"] == b["op"] == "fused" and b["attrs"]["kernel"] == a["attrs"]["kernel"] \
        and b["args"] == a["args"] and b["attrs"]["output"] != a["attrs"]["output"]


def ops():
    from .ops import OPS
    return OPS


# every output node of a group carries the same `expr`: its value types are worked out once
# (keyed by the expr object, which the entry keeps alive, and the argument types)
_TYPES = {}


def value_types(in_shapes, in_dtypes, a):
    """(shape, dtype) of every value of the group (inputs then instructions), checked.

    Each instruction's own shape and dtype rules are replayed, so a malformed group fails
    verification with the rule that broke; every instruction must have the iteration shape
    except scalar constants.
    """
    key = (id(a["expr"]), tuple(a["shape"]), tuple(tuple(s) for s in in_shapes),
           tuple(np.dtype(d) for d in in_dtypes))
    hit = _TYPES.get(key)
    if hit is not None and hit[0] is a["expr"]:
        return hit[1]
    types = _value_types(in_shapes, in_dtypes, a)
    if len(_TYPES) > 4096:
        _TYPES.clear()
    _TYPES[key] = (a["expr"], types)
    return types


def _value_types(in_shapes, in_dtypes, a):
    OPS = ops()
    shape = tuple(a["shape"])
    types = [(tuple(s), np.dtype(d)) for s, d in zip(in_shapes, in_dtypes)]
    for s, _ in types:
        assert tuple(np.broadcast_shapes(s, shape)) == shape, \
            f"input of shape {s} does not broadcast to the iteration shape {shape}"
    for k, ins in enumerate(a["expr"]):
        op = OPS[ins.op]
        assert op.fusion in ("map", "broadcast", "source"), f"{ins.op} cannot be fused"
        assert all(0 <= r < len(types) for r in ins.args), f"instruction {k} refers ahead"
        s = tuple(op.shape([types[r][0] for r in ins.args], ins.attrs))
        d = np.dtype(op.dtype([types[r][1] for r in ins.args], ins.attrs))
        assert s == shape or (op.fusion == "source" and s == ()), \
            f"instruction {k} ({ins.op}) has shape {s}, not the iteration shape {shape}"
        types.append((s, d))
    return types


def output_type(in_shapes, in_dtypes, a, k=None):
    """(shape, dtype) of output k (default: this node's output)."""
    OPS = ops()
    types = value_types(in_shapes, in_dtypes, a)
    ref, red = a["outputs"][a["output"] if k is None else k]
    s, d = types[ref]
    if red is None:
        return s, d
    op, axis, keepdims = red
    attrs = {"axis": tuple(axis), "keepdims": keepdims}
    return (tuple(OPS[op].shape([s], attrs)), np.dtype(OPS[op].dtype([d], attrs)))


def fused_shape(shapes, a):
    # dtypes do not change shapes: replay the rules with any dtype
    return output_type(shapes, [np.float64] * len(shapes), a)[0]


def fused_dtype(dtypes, a):
    # nor do shapes change dtypes: replay with every input at the iteration shape
    return output_type([tuple(a["shape"])] * len(dtypes), dtypes, a)[1]


def evaluate(arrays, a, which=None):
    """Reference semantics: every (or the `which`) output of the group, with NumPy."""
    OPS = ops()
    vals = list(arrays)
    for ins in a["expr"]:
        vals.append(OPS[ins.op].numpy(*[vals[r] for r in ins.args], **ins.attrs))
    outs = []
    for k in (range(len(a["outputs"])) if which is None else which):
        ref, red = a["outputs"][k]
        v = vals[ref]
        if red is not None:
            v = OPS[red[0]].numpy(v, axis=tuple(red[1]), keepdims=red[2])
        outs.append(np.asarray(v))
    return outs


def fused_numpy(*arrays, kernel, shape, expr, outputs, output):
    a = {"shape": shape, "expr": expr, "outputs": outputs}
    return evaluate(arrays, a, [output])[0]


def no_rule(*args, **attrs):
    raise GradError("fused nodes are made by passes/fusion.py after autodiff, so they have "
                    "no vjp or jvp rule; differentiate the function before fusing it "
                    "(adjit.grad and friends already do)")


def fused_flops(out, ins, a):
    """The group's FLOPs, shared equally among its output nodes."""
    key = ("flops", id(a["expr"]), tuple(a["shape"]))
    hit = _TYPES.get(key)
    if hit is None or hit[0] is not a["expr"]:
        OPS = ops()
        shape = tuple(a["shape"])
        hit = (a["expr"], sum(OPS[i.op].flops(shape, [], i.attrs) for i in a["expr"]
                              if OPS[i.op].fusion == "map"))
        _TYPES[key] = hit
    return hit[1] // len(a["outputs"])


def show(attrs) -> str:
    """Compact attributes for the printed IR: kernel name and which output."""
    k, n = attrs["output"], len(attrs["outputs"])
    ref, red = attrs["outputs"][k]
    what = f"{red[0]}{list(red[1])}" if red else ""
    part = f" out {k}/{n}" if n > 1 else ""
    return f"[{attrs['kernel']}{part}{' ' + what if what else ''}]"


def describe(a, in_names) -> list:
    """The group as readable lines `t3 = tanh(t2)    # v40  file:line  text`."""
    from .printer import safe_text
    names = list(in_names)
    lines = []
    for j, ins in enumerate(a["expr"]):
        names.append(f"t{j}")
        if ins.op == "const":
            head = f"t{j} = {np.asarray(ins.attrs['value']).item()!r}"
        else:
            extra = f" {_short_attrs(ins.attrs)}" if ins.attrs else ""
            head = f"t{j} = {ins.op}({', '.join(names[r] for r in ins.args)}){extra}"
        w = ins.where
        lines.append(f"{head:<36}  # {w.short}  {safe_text(w.text)}" if w else head)
    for k, (ref, red) in enumerate(a["outputs"]):
        v = names[ref]
        if red is not None:
            v = f"{red[0]}({v}, axis={tuple(red[1])}, keepdims={red[2]})"
        lines.append(f"out{k} = {v}")
    return lines


def _short_attrs(attrs):
    return "[" + ", ".join(f"{k}={np.dtype(v).name if k == 'dtype' else v}"
                           for k, v in sorted(attrs.items())) + "]"
