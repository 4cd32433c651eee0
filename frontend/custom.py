"""Custom derivative rules: `adjit.custom_vjp` and `adjit.custom_jvp`, as JAX's.

A call of a decorated function inside a trace that will be differentiated becomes one
`custom_vjp` (or `custom_jvp`) node: its first argument is the function's own result (the
primal, with no gradient of its own), the others are the traced leaves of the arguments. Its
forward is that first argument, so simplification removes the node after autodiff
(ir/ops.py); its VJP and JVP rules call the user's rules, held in the node's `rule`
attribute (a `_Rule`), on the replayed values, when the node is differentiated:
- custom_vjp: the VJP runs fwd (for the residuals) and bwd. Forward mode is refused, as in
  JAX (bwd need not be linear in g: clip_gradient); jacobian uses reverse mode for it.
- custom_jvp: the JVP is the user's; the VJP is J^T g = d/dt <jvp(primals, t), g> at t = 0
  (the rule is linear in the tangents), computed with adjit's own grad.
A derivative pass that differentiates a node by its rule replays the node as its primal value
(passes/autodiff.py, `consume`), so the next derivative goes through the code the rules ran
(fwd, bwd, the jvp rule), as JAX differentiates them at an outer level; a call of the function
inside its own rules (fwd returning f(x), a jvp's `ans = f(x)`) is a node again, so that
derivative takes its rule.

Several float results are packed into one vector for the node (the rules see them apart);
integer and boolean results carry no derivative and bypass it.
"""
from __future__ import annotations

import functools
import inspect

import numpy as np

from ..ir.errors import GradError, TraceError
from . import functions as F
from . import pytree
from .buffer import Buffer, resolve
from .tracer import Tracer, _at, current, user_where, where_override


def _defined(fn):
    code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
    return f" (defined at {code.co_filename}:{code.co_firstlineno})" if code else ""


def _name(fn):
    return getattr(fn, "__name__", None) or type(fn).__name__


class _Custom:
    """What custom_vjp and custom_jvp share: calling, the nondiff arguments, the packing."""

    kind = ""

    def __init__(self, fun, nondiff_argnums=()):
        if not callable(fun):
            raise TypeError(f"adjit.{self.kind} needs a function, got {type(fun).__name__}")
        nums = (nondiff_argnums,) if isinstance(nondiff_argnums, int) else tuple(nondiff_argnums)
        if any(not isinstance(k, int) or isinstance(k, bool) or k < 0 for k in nums):
            raise TypeError(f"adjit.{self.kind}: nondiff_argnums must be non-negative ints "
                            f"(argument positions), got {nondiff_argnums!r}")
        self.fun = fun
        self._inside = 0      # > 0 while one of its rules runs (see _traced_call)
        try:
            self._signature = inspect.signature(fun)
        except (TypeError, ValueError):    # a builtin without one: arguments as given
            self._signature = None
        self.nondiff_argnums = tuple(sorted(set(nums)))
        functools.update_wrapper(self, fun)

    def __get__(self, obj, objtype=None):      # a decorated method: bind self
        return self if obj is None else functools.partial(self, obj)

    def __repr__(self):
        return f"<adjit.{self.kind} of {_name(self.fun)}{_defined(self.fun)}>"

    def __call__(self, *args, **kwargs):
        args = self._bind(args, kwargs)
        if any(k >= len(args) for k in self.nondiff_argnums):
            raise TypeError(f"adjit.{self.kind} function {_name(self.fun)}: nondiff_argnums "
                            f"{self.nondiff_argnums} names an argument it was not given "
                            f"({len(args)} arguments)")
        ctx = current()
        self._check_rules()
        if ctx is None or not ctx.differentiated or not _traced(args):
            # plain NumPy, a trace nobody differentiates, or constants only: the function
            return self.fun(*args)
        return self._traced_call(args)

    def _rule(self, fn, *args):
        """fn(*args), a rule of this function: calls of the function inside it are nodes
        valued by the function itself (see _traced_call)."""
        self._inside += 1
        try:
            return fn(*args)
        finally:
            self._inside -= 1

    def _bind(self, args, kwargs):
        """The arguments by position, defaults filled in (as JAX's rules receive them)."""
        sig = self._signature
        if sig is None:
            if kwargs:
                raise TypeError(f"adjit.{self.kind} function {_name(self.fun)} got keyword "
                                f"arguments {sorted(kwargs)}: pass them by position")
            return tuple(args)
        if any(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in sig.parameters.values()):
            raise TypeError(f"adjit.{self.kind} function {_name(self.fun)}"
                            f"{_defined(self.fun)} has keyword-only parameters: the rules "
                            "receive arguments by position, so make them positional (or bind "
                            "them with functools.partial before decorating)")
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{_name(self.fun)}(): {e}") from None
        bound.apply_defaults()
        return tuple(bound.args)

    def _check_rules(self):
        raise NotImplementedError

    def _traced_call(self, args):
        """The node. Its value is the rule's primal result, as JAX's (fwd's, or the jvp
        rule's at zero tangents: a stable formula there gives a finite value where the
        function overflows); a call of the function from inside one of its rules (fwd
        returning f(x), a jvp rule's `ans = f(x)`) is a node whose value is the function's,
        which later differentiation takes through the rules again."""
        leaves, tree, diff = self._split(args)
        y = self.fun(*args) if self._inside else self._primal(args)
        y_leaves, out_tree, _ = pytree.flatten(y, "result")
        if tree_has_complex(out_tree):
            raise GradError(f"adjit.{self.kind} function {_name(self.fun)}{_at(user_where())} "
                            "returned a complex value: custom rules give real arrays")
        return self._node(self.kind, y_leaves, out_tree, leaves, tree, diff)

    def _split(self, args):
        """-> (leaves, tree, diff) for the arguments: diff[i] says whether leaf i is a traced
        float of a differentiated argument (it gets a cotangent)."""
        leaves, tree, _ = pytree.flatten(tuple(args), "args")
        if tree_has_complex(tree):
            raise GradError(f"adjit.{self.kind} function {_name(self.fun)}{_at(user_where())} "
                            "got a complex argument: custom rules take real arrays (pass the "
                            "real and imaginary parts)")
        leaves = [resolve(x) if isinstance(x, Buffer) else x for x in leaves]
        owner = _leaf_owners(tree)
        diff = [isinstance(x, Tracer) and x.dtype.kind == "f" and owner[i] not in
                self.nondiff_argnums for i, x in enumerate(leaves)]
        return leaves, tree, diff

    def _node(self, op, y_leaves, out_tree, arg_leaves, arg_tree, diff):
        """Emit the node over the packed float results; -> the result tree."""
        floats = [i for i, y in enumerate(y_leaves) if _is_float(y)]
        ys = [_as_tracer(y_leaves[i]) for i in floats]
        if not ys:
            return pytree.unflatten(out_tree, y_leaves)
        traced = [i for i, x in enumerate(arg_leaves) if isinstance(x, Tracer)]
        rule = _Rule(self, out_tree, [(y.shape, y.dtype) for y in ys], floats, len(y_leaves),
                     arg_leaves, arg_tree, traced, [diff[i] for i in traced])
        packed = rule.pack(ys)
        node = current().emit(op, [F.stop_gradient(packed)] + [arg_leaves[i] for i in traced],
                              {"rule": rule})
        outs = list(y_leaves)
        for i, y in zip(floats, rule.unpack(node)):
            outs[i] = y
        return pytree.unflatten(out_tree, outs)


def tree_has_complex(td):
    return td[0] == "complex" or (td[0] not in ("leaf", "none", "static")
                                   and any(tree_has_complex(c) for c in td[2]))


def _leaf_owners(tree):
    """The top-level argument each leaf of flatten(tuple(args)) belongs to."""
    owner = []
    for k, child in enumerate(tree[2]):
        owner += [k] * pytree.num_leaves(child)
    return owner


def _traced(args):
    return any(isinstance(x, (Tracer, Buffer)) for x in pytree.flatten(tuple(args), "args")[0])


def _is_float(y):
    if hasattr(y, "dtype"):
        return np.dtype(y.dtype).kind == "f"
    return isinstance(y, float) or isinstance(y, np.floating)


def _zero_tangent(x):
    """Zeros shaped like a numeric leaf (float zeros for integers, as JAX's float0 stands
    for); None for a non-numeric one (a function, a string)."""
    if isinstance(x, Buffer):
        x = resolve(x)
    if isinstance(x, Tracer):
        return F.zeros(x.shape, x.dtype if x.dtype.kind == "f" else np.float64)
    if isinstance(x, (np.ndarray, np.generic, int, float)):
        dt = np.asarray(x).dtype
        return F.zeros(np.shape(x), dt if dt.kind == "f" else np.float64)
    return None


def _as_tracer(y):
    if isinstance(y, Tracer):
        return y
    y = resolve(y) if isinstance(y, Buffer) else y
    return y if isinstance(y, Tracer) else F.const(np.asarray(y))


class custom_vjp(_Custom):  # noqa: N801 (named as JAX's)
    """A function with a reverse-mode rule of your own, as `jax.custom_vjp`:

    >>> import numpy as np, adjit
    >>> @adjit.custom_vjp
    ... def clip_gradient(x):
    ...     return x
    >>> def fwd(x):
    ...     return x, None                  # (result, residuals for bwd)
    >>> def bwd(res, g):
    ...     return (np.clip(g, -1.0, 1.0),)  # one cotangent per argument
    >>> clip_gradient.defvjp(fwd, bwd)
    >>> adjit.grad(lambda x: np.sum(3.0 * clip_gradient(x)))(np.ones(2))
    array([1., 1.])

    fwd(*args) returns (result, residuals); bwd(residuals, g) returns a tuple with one
    cotangent per argument, each shaped like that argument (None for zeros). With
    nondiff_argnums (configuration: functions, numbers, strings), those arguments come first:
    bwd(*nondiff, residuals, g). Called outside a differentiated trace the function itself
    runs; differentiated, its value is fwd's result, and fwd runs again in the backward for
    the residuals. As in JAX the rule serves reverse mode only (bwd need not be linear in g):
    grad, vjp, jacobian, hessian and hvp work, jvp is refused. The rules may not close over
    arrays traced outside them: pass those as arguments or residuals.
    """

    kind = "custom_vjp"

    def __init__(self, fun, nondiff_argnums=()):
        super().__init__(fun, nondiff_argnums)
        self.fwd = self.bwd = None

    def defvjp(self, fwd, bwd):
        if not callable(fwd) or not callable(bwd):
            raise TypeError("defvjp(fwd, bwd) takes two functions: fwd(*args) -> (result, "
                            "residuals) and bwd(residuals, g) -> one cotangent per argument")
        self.fwd, self.bwd = fwd, bwd

    def _check_rules(self):
        if self.fwd is None:
            raise GradError(f"adjit.custom_vjp function {_name(self.fun)}"
                            f"{_defined(self.fun)} has no rule: call "
                            f"{_name(self.fun)}.defvjp(fwd, bwd) before using it")

    def _primal(self, args):
        got = self._rule(self.fwd, *args)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise GradError(f"the fwd rule of {_name(self.fun)}{_defined(self.fwd)} must return "
                            f"(result, residuals), a pair; it returned {type(got).__name__}")
        return got[0]

    def _split(self, args):
        got = super()._split(args)
        leaves, tree, _ = got
        owner = _leaf_owners(tree)
        for i, x in enumerate(leaves):
            if isinstance(x, Tracer) and owner[i] in self.nondiff_argnums:
                raise GradError(
                    f"argument {owner[i]} of {_name(self.fun)}{_at(user_where())} is in its "
                    "nondiff_argnums but holds a traced array: a custom_vjp's nondiff "
                    "arguments are configuration (a function, a number, a string), as in JAX; "
                    "pass arrays as regular arguments (bwd may give None as their cotangent)")
        return got


class custom_jvp(_Custom):  # noqa: N801 (named as JAX's)
    """A function with a forward-mode rule of your own, as `jax.custom_jvp`:

    >>> import numpy as np, adjit
    >>> @adjit.custom_jvp
    ... def log1pexp(x):
    ...     return np.log1p(np.exp(x))
    >>> @log1pexp.defjvp
    ... def log1pexp_jvp(primals, tangents):
    ...     (x,), (t,) = primals, tangents
    ...     return log1pexp(x), t / (1.0 + np.exp(-x))
    >>> adjit.grad(lambda x: np.sum(log1pexp(x)))(np.array([800.0]))
    array([1.])

    jvp(primals, tangents) gets two tuples (one entry per argument) and returns (result,
    tangent of the result); `defjvps(f0, f1, ...)` gives one rule per argument instead,
    f_k(t_k, result, *args). Reverse mode (grad) goes through the JVP as well (it is linear
    in the tangents). With nondiff_argnums, those arguments come first: jvp(*nondiff,
    primals, tangents), and the tuples hold the others. The rules may not close over arrays
    traced outside them: pass those as arguments.
    """

    kind = "custom_jvp"

    def __init__(self, fun, nondiff_argnums=()):
        super().__init__(fun, nondiff_argnums)
        self.jvp = None

    def defjvp(self, jvp):
        if not callable(jvp):
            raise TypeError("defjvp(jvp) takes a function jvp(primals, tangents) -> (result, "
                            "tangent of the result)")
        self.jvp = jvp
        return jvp

    def defjvps(self, *rules):
        """One rule per (differentiated) argument: rules[k](t_k, result, *args) -> its part
        of the result's tangent (None: the result does not depend on that argument)."""
        if self.nondiff_argnums:
            raise TypeError(f"{_name(self.fun)}: defjvps cannot be used with nondiff_argnums "
                            "(as in JAX); write one rule with defjvp")

        def jvp(primals, tangents):
            ans = self(*primals)
            out = None
            for rule, t in zip(rules, tangents):
                if rule is None:
                    continue
                part = rule(t, ans, *primals)
                out = part if out is None else pytree.unflatten(
                    pytree.flatten(out)[1], [a + b for a, b in zip(pytree.flatten(out)[0],
                                                                 pytree.flatten(part)[0])])
            return ans, out
        self.jvp = jvp
        return jvp

    def _primal(self, args):
        nd = [args[k] for k in self.nondiff_argnums]
        primals = tuple(a for k, a in enumerate(args) if k not in self.nondiff_argnums)
        leaves, tree, _ = pytree.flatten(primals, "args")
        tangents = pytree.unflatten(tree, [_zero_tangent(x) for x in leaves])
        got = self._rule(self.jvp, *nd, primals, tangents)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise GradError(f"the jvp rule of {_name(self.fun)}{_defined(self.jvp)} must return "
                            "(result, tangent of the result), a pair")
        return got[0]

    def _check_rules(self):
        if self.jvp is None:
            raise GradError(f"adjit.custom_jvp function {_name(self.fun)}"
                            f"{_defined(self.fun)} has no rule: decorate its JVP with "
                            f"@{_name(self.fun)}.defjvp before using it")


class _Rule:
    """The node's attribute: the user's rules and how to rebuild their arguments from the
    node's (replayed) argument values."""

    def __init__(self, owner, out_tree, metas, floats, n_out, arg_leaves, arg_tree, traced,
                 diff):
        self.owner = owner
        self.out_tree, self.metas, self.floats, self.n_out = out_tree, metas, floats, n_out
        self.arg_tree, self.traced, self.diff = arg_tree, traced, diff
        # constants stay in place; traced leaves are filled from the node's arguments
        self.arg_leaves = [None if isinstance(x, Tracer) else x for x in arg_leaves]
        self.arg_meta = [(x.shape, x.dtype) if isinstance(x, Tracer) else None
                         for x in arg_leaves]
        self.dtype = np.result_type(*[d for _, d in metas])

    @property
    def name(self):
        return _name(self.owner.fun)

    def __repr__(self):
        return f"{self.owner.kind}({self.name})"

    # -- packing the float results into one vector -------------------------------------
    def pack(self, ys):
        if len(ys) == 1:
            return ys[0]
        return F.concatenate([F.reshape(F.cast(y, self.dtype), (-1,)) for y in ys], 0)

    def unpack(self, p):
        if len(self.metas) == 1:
            return [p]
        out, at = [], 0
        for shape, dtype in self.metas:
            n = int(np.prod(shape))
            out.append(F.cast(F.reshape(F.slice_(p, (slice(at, at + n),)), shape), dtype))
            at += n
        return out

    def result_tree(self, floats_values):
        """The result's structure holding floats_values; None for the integer results."""
        leaves = [None] * self.n_out
        for i, v in zip(self.floats, floats_values):
            leaves[i] = v
        return pytree.unflatten(self.out_tree, leaves)

    # -- rebuilding the rules' arguments ---------------------------------------------------
    def args(self, values):
        """The call's arguments (a tuple), its traced leaves replaced by `values`."""
        leaves = list(self.arg_leaves)
        for i, v in zip(self.traced, values):
            leaves[i] = v
        return pytree.unflatten(self.arg_tree, leaves)

    def _nondiff_and_rest(self, full):
        """(the nondiff arguments, the others) of an argument tuple."""
        nd = self.owner.nondiff_argnums
        return ([full[k] for k in nd], tuple(a for k, a in enumerate(full) if k not in nd))

    def _call(self, what, fn, *args):
        """The user's rule: what it emits keeps the role of the derivative being built (its
        comment says "vjp of custom_vjp") with the rule's own lines, so an error inside it
        names the rule's line, not the call of the function."""
        ctx = current()
        outer = user_where()
        start = ctx.graph._next
        try:
            with where_override(None):
                out = self.owner._rule(fn, *args)
        except TraceError as e:
            if "already finished" not in str(e) and "escaped" not in str(e):
                raise
            raise TraceError(f"the {what} rule of {self.name}{_defined(fn)} uses an array "
                             "traced outside it (a closure over a value of the function that "
                             f"calls {self.name}): pass it as an argument of the custom "
                             "function (and, for a VJP, return it among the residuals)") from None
        role = outer.role if outer is not None and outer.role else ""
        if role:
            g = ctx.graph
            for n in range(start, g._next):
                if n in g and g[n]["where"] is not None and not g[n]["where"].role:
                    g[n]["where"] = g[n]["where"].with_role(role)
        return out

    # -- the cotangents of the differentiated arguments from per-argument trees ----------
    def _leaf_cotangents(self, cts, what):
        """cts: one tree per non-nondiff argument (None: zeros) -> the cotangent of each
        traced leaf that gets one (None: zero)."""
        nd = self.owner.nondiff_argnums
        kept = [k for k in range(len(self.arg_tree[2])) if k not in nd]
        if not isinstance(cts, (tuple, list)) or len(cts) != len(kept):
            example = "(g_x,)" if len(kept) == 1 else "(g_x, g_y)" if len(kept) == 2 else \
                "(g_x, g_y, ...)"
            got = type(cts).__name__ + (f" of length {len(cts)}"
                                        if isinstance(cts, (tuple, list)) else "")
            raise GradError(f"the {what} rule of {self.name}{_defined(self.owner.bwd)} must "
                            f"return a tuple with one cotangent per argument ({len(kept)} of "
                            f"them, {example}; None for an argument without one); it returned "
                            f"{got}")
        per_arg = {}
        for k, ct in zip(kept, cts):
            sub = self.arg_tree[2][k]
            if ct is None:
                per_arg[k] = [None] * pytree.num_leaves(sub)
                continue
            try:
                per_arg[k] = list(pytree.flatten_like(ct, sub, f"the cotangent of argument {k}"))
            except (GradError, ValueError, TypeError) as e:
                raise GradError(f"the {what} rule of {self.name}: the cotangent for argument "
                                f"{k} does not have that argument's structure: {e}") from None
        full = []
        for k in range(len(self.arg_tree[2])):
            full += per_arg.get(k, [None] * pytree.num_leaves(self.arg_tree[2][k]))
        out = []
        for i, d in zip(self.traced, self.diff):
            c = full[i]
            if not d or c is None:
                out.append(None)
                continue
            shape, dtype = self.arg_meta[i]
            c = _as_tracer(c)
            if tuple(c.shape) != tuple(shape):
                raise GradError(f"the {what} rule of {self.name} gave a cotangent of shape "
                                f"{tuple(c.shape)} for an argument of shape {tuple(shape)}; "
                                "each cotangent has its argument's shape")
            out.append(F.cast(c, dtype))
        return out

    # -- the node's derivative rules (ir/ops.py) ------------------------------------------
    def vjp(self, g, xs):
        """Cotangents of the node's arguments [y, *traced leaves of the arguments]."""
        if self.owner.kind == "custom_jvp":
            # J^T g = d/dt <jvp(primals, t), g> at t = 0
            return [None] + self._transpose_jvp(g, xs)
        full = self.args(xs)
        nd, _ = self._nondiff_and_rest(full)
        got = self._call("fwd", self.owner.fwd, *full)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise GradError(f"the fwd rule of {self.name}{_defined(self.owner.fwd)} must return "
                            f"(result, residuals), a pair; it returned {type(got).__name__}")
        cts = self._call("bwd", self.owner.bwd, *nd, got[1], self.result_tree(self.unpack(g)))
        return [None] + self._leaf_cotangents(cts, "bwd")

    def jvp(self, ts, xs):
        """The tangent of the node's result from its arguments' tangents (ts[0], that of the
        function's own result, is not used: the rule's is)."""
        if self.owner.kind == "custom_vjp":
            raise GradError(
                f"forward-mode differentiation (jvp, hvp, a Jacobian by columns) of "
                f"{self.name}{_defined(self.owner.fun)}, an adjit.custom_vjp function: its "
                "rule is a VJP, which need not be linear in the cotangent (clip_gradient), so "
                "as in JAX it serves reverse mode only (adjit.grad, vjp, jacobian and hessian "
                "use reverse mode for it; for a Hessian-vector product whose rule calls "
                f"{self.name} itself, adjit.hessian(f)(x) @ v); give it an adjit.custom_jvp "
                "rule for forward mode")
        return self._jvp(xs, list(ts[1:]))

    def _tangent_args(self, xs, ts):
        """(nondiff arguments, primals, tangents) for the user's jvp: a tangent of zeros for
        a numeric leaf without one, None for a non-numeric one (a function, a string)."""
        primals = self.args(xs)
        tl = [None] * len(self.arg_leaves)
        for i, t in zip(self.traced, ts):
            tl[i] = t
        leaves = [_zero_tangent(x) if t is None else t
                  for x, t in zip(pytree.flatten(tuple(primals), "args")[0], tl)]
        tangents = pytree.unflatten(self.arg_tree, leaves)
        nd, p = self._nondiff_and_rest(primals)
        _, t = self._nondiff_and_rest(tangents)
        return nd, p, t

    def _jvp(self, xs, ts):
        nd, p, t = self._tangent_args(xs, ts)
        got = self._call("jvp", self.owner.jvp, *nd, p, t)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise GradError(f"the jvp rule of {self.name}{_defined(self.owner.jvp)} must return "
                            "(result, tangent of the result), a pair")
        try:
            leaves = pytree.flatten_like(got[1], self.out_tree, "the tangent of the result")
        except (GradError, ValueError, TypeError) as e:
            raise GradError(f"the jvp rule of {self.name}: the tangent of the result does not "
                            f"have the result's structure: {e}") from None
        out = []
        for i, (shape, dtype) in zip(self.floats, self.metas):
            t_i = leaves[i]
            t_i = F.zeros(shape, dtype) if t_i is None else _as_tracer(t_i)
            if tuple(t_i.shape) != tuple(shape):
                # not broadcast: a scalar tangent for a vector result is a rule's mistake
                # (JAX refuses it too), and broadcasting it would be a wrong derivative
                raise GradError(f"the jvp rule of {self.name} gave a tangent of shape "
                                f"{tuple(t_i.shape)} for a result of shape {tuple(shape)}; a "
                                "tangent has its result's shape")
            out.append(F.cast(t_i, dtype))
        return self.pack(out)

    def _transpose_jvp(self, g, xs):
        from .api import grad
        want = [i for i, d in enumerate(self.diff) if d]
        if not want:
            return [None] * len(self.traced)
        zeros = [F.zeros(*self.arg_meta[self.traced[i]]) for i in want]

        def inner(tw):
            ts = [None] * len(self.traced)
            for i, t in zip(want, tw):
                ts[i] = t
            return F.sum(F.mul(self._jvp(xs, ts), g))
        got = grad(inner)(zeros)
        out = [None] * len(self.traced)
        for i, c in zip(want, got):
            out[i] = c
        return out
