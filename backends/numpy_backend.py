"""NumPy backend: scheduled graph -> a readable Python module, one statement per node.

Input: a graph with meta["schedule"]. Output: (source, namespace). Statements follow the
schedule; each has a comment naming its IR node and user line; values are `del`-ed after their
last use so memory measurements are real. Broadcasts that NumPy does implicitly are elided.
"""
from __future__ import annotations

import numpy as np

from ..ir.ops import OPS
from .codegen import Names, comment, fmt_attr, index_code, literal, node_comment
from . import fused_numpy
from .fused_numpy import numpy_group, same_group


def _has_backward(g, n) -> bool:
    """Does node n do backward work (a vjp, or a fused group holding one)?"""
    d = g[n]
    if d["op"] != "fused":
        return d["where"] is not None and d["where"].role.startswith("vjp")
    return any(i.where is not None and i.where.role.startswith("vjp")
               for i in d["attrs"]["expr"] if i.op not in ("const", "broadcast_to"))


def _elided_broadcasts(g, sched):
    """broadcast_to nodes every consumer of which broadcasts implicitly the same way."""
    users = {}
    for n in sched.order:
        for a in g.args(n):
            users.setdefault(a, []).append(n)
    cand = {n for n in sched.order if g[n]["op"] == "broadcast_to" and n not in g.outputs}
    for n in sorted(cand):
        for u in users.get(n, []):
            if OPS[g[u]["op"]].kind != "elementwise":
                cand.discard(n)
                break
    # a consumer must still get its full shape from the implicit broadcast of its arguments
    changed = True
    while changed:
        changed = False
        for n in sorted(cand):
            for u in users.get(n, []):
                shapes = [g[g.args(a)[0]]["shape"] if a in cand else g[a]["shape"]
                          for a in g.args(u)]
                if tuple(np.broadcast_shapes(*shapes)) != g[u]["shape"]:
                    cand.discard(n)
                    changed = True
                    break
    return cand


def _scalar_stacks(g, sched):
    """(pieces, stacks): concatenate nodes along axis 0 of 0-d values each reshaped to (1,)
    (the elements a loop wrote one by one, `y[i] = ...`), written np.array([s0, s1, ...]) of
    the 0-d values (25x faster than concatenating 1,000 one-element arrays), and those
    reshapes, which then emit nothing."""
    users = {}
    for n in sched.order:
        for a in g.args(n):
            users.setdefault(a, []).append(n)

    def piece(a):
        d = g[a]
        return d["op"] == "reshape" and tuple(d["shape"]) == (1,) and \
            tuple(g[d["args"][0]]["shape"]) == () and a not in g.outputs

    def number(a):      # an element never written (y[0] of np.zeros): a constant
        return g[a]["op"] == "const" and tuple(g[a]["shape"]) == (1,)
    stacks = {n for n in sched.order if g[n]["op"] == "concatenate" and
              g[n]["attrs"].get("axis", 0) == 0 and len(g[n]["shape"]) == 1 and
              len(g.args(n)) > 1 and all(piece(a) or number(a) for a in g.args(n)) and
              sum(piece(a) for a in g.args(n)) > 1}
    # a piece read elsewhere stays a reshape, and so do the stacks that read it, and the
    # pieces those share with other stacks: repeated until nothing changes
    while True:
        pieces = {a for n in stacks for a in g.args(n) if piece(a)}
        dropped = {u for a in pieces if any(v not in stacks for v in users.get(a, []))
                   for u in users.get(a, []) if u in stacks}
        if not dropped:
            return pieces, stacks
        stacks -= dropped


class Codegen:
    """Statements for a scheduled graph; a backend subclass changes how fused runs are run."""

    backend = "numpy"

    def __init__(self, g, fn_name="program", **options):
        self.g, self.fn_name, self.options = g, fn_name, options
        self.sched = g.meta["schedule"]
        self.names = Names(g)
        self.consts, self.attrs_tab = [], []
        self.expr = {}        # nodes inlined as expressions (scalar constants, elided broadcasts)
        self.namespace = {"np": np, "_rt_consts": self.consts, "_rt_attrs": self.attrs_tab,
                          "_rt_ops": {name: od.numpy for name, od in OPS.items()}}
        self.imports = ["import numpy as np"]
        self.in_place = self.sched.in_place   # node -> argument whose buffer it takes
        self.spare = self.sched.spare         # unit -> dying arguments its temporaries take
        self.contiguous_donations = False     # must donated arrays be C-contiguous?
        self.donated_slot = {}                # donated input -> its index in _rt_in_place

    def arg(self, a):
        return self.expr.get(a, self.names[a])

    def generate(self):
        """-> (source, namespace) of the module defining fn_name."""
        g, sched = self.g, self.sched
        self.elided = elided = _elided_broadcasts(g, sched)
        pieces, self.stacks = _scalar_stacks(g, sched)
        # the 0-d values the stacks read stay alive to the end (they are numbers)
        kept = {g.args(a)[0] for a in pieces}
        body = self.donation_check()
        in_backward = False
        recomputing = ""
        order = sched.order
        step = 0
        while step < len(order):
            n = order[step]
            d = g[n]
            op = d["op"]
            run = [n]
            if op == "fused":
                while step + len(run) < len(order) and same_group(g, n, order[step + len(run)]):
                    run.append(order[step + len(run)])
            steps = range(step, step + len(run))
            step += len(run)
            if op == "input":
                continue
            if op == "const":
                value = d["attrs"]["value"]
                if np.ndim(value) == 0:
                    self.expr[n] = literal(value, d["dtype"])
                    continue
                self.consts.append(value)
                self.expr[n] = f"_rt_consts[{len(self.consts) - 1}]"
                continue
            if n in elided or n in pieces:
                self.expr[n] = self.arg(d["args"][0])
                continue
            if self.inlined_transpose(n):
                continue
            role = d["where"].role if d["where"] is not None else ""
            if not in_backward and _has_backward(g, n):
                # before the first backward work, also when a fused group holds the forward's
                # last values and the backward's first (its comments say which, line by line)
                body += ["", "# backward"]
                in_backward = True
            if role.startswith("recompute") and role != recomputing:
                # passes/checkpoint.py: a segment whose values the forward did not keep
                body += ["", comment(f"{role}: its values were not kept by the forward")]
            recomputing = role
            if op == "fused":
                body += self.emit_group(run)
            else:
                body += self.emit_node(n)
            dead = [self.names[m] for s in steps for m in sched.frees.get(s, [])
                    if m not in self.expr and m not in kept and
                    g[m]["op"] not in ("input", "const")]
            if dead:
                body.append("del " + ", ".join(dead))
        outs = [self.arg(o) for o in g.outputs]
        params = ", ".join(self.names[i] for i in g.inputs)
        lines = [comment(f"generated by adjit ({self.backend} backend) from "
                         f"{g.meta.get('fn_name', 'fn')}")] + self.imports
        lines += ["", "", f"def {self.fn_name}({params}):"]
        lines += ["    " + b if b else "" for b in body]
        lines.append("    return (" + "".join(o + ", " for o in outs).rstrip(" ") + ")")
        return "\n".join(lines) + "\n", self.namespace

    def inlined_transpose(self, n):
        """A 2-d transpose read by one matrix product only is written into it (`g.T @ X`),
        as one reads the formula, not as a statement of its own: a view either way."""
        g = self.g
        d = g[n]
        if d["op"] != "transpose" or len(d["shape"]) != 2 or n in g.outputs \
                or n in self.in_place or tuple(d["attrs"]["perm"]) != (1, 0):
            return False
        users = g.users(n)
        if len(users) != 1 or g[users[0]]["op"] != "matmul" or len(set(g.args(users[0]))) != 2:
            return False
        x = self.arg(d["args"][0])
        if not x.isidentifier():
            return False
        self.expr[n] = f"{x}.T"
        return True

    def donation_check(self):
        """Lines deciding once per call whether results may go into donated arguments."""
        if not self.in_place:
            return []
        from .codegen import donatable_each
        self.namespace["_rt_donatable"] = donatable_each
        mine = {x for x in self.in_place.values() if self.g[x]["op"] == "input"}
        if not mine:
            return []
        donated = [i for i in self.g.inputs if i in mine]
        self.donated_slot = {i: k for k, i in enumerate(donated)}
        args = "".join(self.names[i] + ", " for i in donated)
        rest = "".join(self.names[i] + ", " for i in self.g.inputs if i not in mine)
        return [comment("each donated argument is overwritten by its results (`out=`) when it "
                        "is a writable array sharing no memory with another argument"),
                f"_rt_in_place = _rt_donatable(({args}), ({rest}), "
                f"{self.contiguous_donations})"]

    def donation_test(self, x):
        """The run-time test that donated argument x may be written: `_rt_in_place[k]`."""
        return f"_rt_in_place[{self.donated_slot[x]}]"

    def emit_node(self, n):
        g = self.g
        if n in self.in_place:
            from .fused_numpy import into_code, ufunc_name
            args = ", ".join(self.arg(a) for a in g.args(n))
            into = into_code(self, self.in_place[n]).format("None")
            return [node_comment(g, n), f"{self.names[n]} = {ufunc_name(g[n]['op'])}({args}, "
                    f"out={into})"]
        if n in self.stacks:
            dt = np.dtype(g[n]["dtype"])
            items = ", ".join(
                literal(np.asarray(g[a]["attrs"]["value"]).reshape(()), g[a]["dtype"])
                if g[a]["op"] == "const" else self.arg(a) for a in g.args(n))
            return [node_comment(g, n), f"{self.names[n]} = np.array([{items}], "
                                        f"dtype=np.dtype({dt.str!r}))"]
        rhs = _expression(g, n, [self.arg(a) for a in g.args(n)], self.attrs_tab)
        if n in g.outputs and g[n]["op"] == "broadcast_to":
            # a broadcast view is read-only; results must be writable
            rhs = _filled(g, n) or f"np.array({rhs})"
        return [node_comment(g, n), f"{self.names[n]} = {rhs}"]

    def emit_group(self, run):
        """Statements computing the fused nodes `run` (consecutive outputs of one group)."""
        return numpy_group(self, run)


def generate(g, fn_name="program"):
    """-> (source, namespace, names) for the scheduled graph g."""
    cg = Codegen(g, fn_name)
    source, namespace = cg.generate()
    return source, namespace, cg.names


def _expression(g, n, args, attrs_tab):
    d = g[n]
    if d["op"] == "reshape" and g[d["args"][0]]["op"] != "input":
        # the method: np.reshape's dispatch costs 0.5 us, 7x the reshape itself, which adds
        # up in small-array loops (an argument may be a Python number, without the method)
        return f"{args[0]}.reshape({fmt_attr(tuple(d['attrs']['shape']))})"
    return op_expression(d["op"], d["attrs"], args, attrs_tab)


def op_expression(op, attrs, args, attrs_tab):
    """NumPy source for OPS[op] applied to argument expressions `args`."""
    opdef = OPS[op]
    if opdef.code is None:
        if not attrs:
            return f"_rt_ops[{op!r}]({', '.join(args)})"
        attrs_tab.append(dict(attrs))
        return f"_rt_ops[{op!r}]({', '.join(args)}, **_rt_attrs[{len(attrs_tab) - 1}])"
    if opdef.kind == "elementwise" and len(args) > 1:
        args = [a if _simple(a) else f"({a})" for a in args]
    if callable(opdef.code):
        return opdef.code(args, attrs)
    fields = {}
    for k, v in attrs.items():
        if k == "index":
            fields["index_code"] = index_code(v)
        else:
            fields[k] = fmt_attr(v)
    return opdef.code.format(*args, **fields)


def _filled(g, n):
    """`np.zeros((4,), dtype=np.float64)` for a result that is a broadcast scalar constant
    (the gradient of an input the loss does not read), `np.full(...)` for another value."""
    (a,) = g.args(n)
    if g[a]["op"] != "const" or np.ndim(g[a]["attrs"]["value"]) != 0:
        return None
    v, dt = g[a]["attrs"]["value"], np.dtype(g[n]["dtype"])
    shape = fmt_attr(tuple(int(d) for d in g[n]["shape"]))
    if dt.kind not in "biuf":
        return None
    if v == 0 and not np.signbit(v):
        return f"np.zeros({shape}, dtype=np.{dt.name})"
    return f"np.full({shape}, {literal(v, dt)})"


def _simple(a):
    if a.startswith("np.") and a.endswith(")") and " " not in a:
        return True  # a literal such as np.float32(0.5)
    return a.replace("_", "").replace(".", "").replace("[", "").replace("]", "").isalnum()


def build(g, fn_name="program", **options):
    """Generate and load the module; -> dict(fn, source, kernels, prepare, finish).

    options: those of other backends (numba's kernel thresholds) are accepted and ignored,
    so one set of compile options works whichever backend "auto" picks.
    """
    from .codegen import load_module
    source, namespace = Codegen(g, fn_name).generate()
    ns, filename = load_module(source, fn_name, namespace)
    fn = ns[fn_name]
    fn.__source__ = source
    return {"fn": fn, "source": source, "kernels": {}, "prepare": as_array, "finish": as_array}


def as_array(x):
    # Python scalars come in and NumPy scalars come out of 0-d operations: both become arrays
    if type(x) is np.ndarray and x.dtype.isnative:
        return x
    x = np.asarray(x)
    # arrays in the other byte order ('>f8') are converted: kernels compute in the native one
    return x if x.dtype.isnative else x.astype(x.dtype.newbyteorder("="))


NAME = "numpy"
FUSES = True
# a fused reduction would still materialise its prologue in NumPy: no gain
FUSION_OPTIONS = {"reductions": False, "min_size": 2}
# bytes a fused group's NumPy code holds besides its first result, for the schedule
scratch_bytes = fused_numpy.scratch_bytes
# which results it can write into a donated argument's buffer (passes/schedule.py)
in_place_ok = fused_numpy.in_place_ok
