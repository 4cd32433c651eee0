"""The public API: trace, compile, grad, value_and_grad, vjp, jvp, jacobian, hessian, hvp.

Every transformation is a traced function: it traces the user's function into a graph,
transforms the graph (passes/autodiff.py) and replays the result into the enclosing trace. So
transformations nest (hessian = jacobian of grad), and `compile` turns any of them into a
Program per signature of argument shapes, dtypes and static values.
"""
from __future__ import annotations

import functools
import os

import numpy as np

from ..ir.errors import GradError, ShapeError, UnsupportedError
from . import functions as F
from . import pytree
from .trace import check_differentiable, leaf_spec, replay, trace
from .tracer import Tracer, current

_DEBUG = int(os.environ.get("DEBUG", "0") or 0)


# -- compilation ------------------------------------------------------------------------------
def _has_tracer(args):
    leaves, _, _ = pytree.flatten(list(args))
    return any(isinstance(x, Tracer) for x in leaves)


def _leaf_key(x):
    if type(x) is np.ndarray:
        return (x.shape, x.dtype.str)
    if isinstance(x, Tracer):
        return (x.shape, x.dtype.str)
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        return ("weak", type(x).__name__)
    dtype = x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
    shape = x.shape if hasattr(x, "__cuda_array_interface__") else np.shape(x)  # CuPy arrays
    return (tuple(shape), np.dtype(dtype).str)


def _static_key(v):
    try:
        hash(v)
    except TypeError:
        raise TypeError(f"static argument {v!r} must be hashable (a number, string or tuple) "
                        "so compiled programs can be cached by its value") from None
    return ("static", type(v), v)


def pick_backend(name):
    from ..backends import registry
    return registry.resolve(name)


class Compiled:
    """A function compiled per signature; calling it with traced values inlines it instead."""

    def __init__(self, fn, traced=None, *, backend="auto", fuse=True, checkpoint=None,
                 memory_budget=None, static_argnums=(), name=None, **backend_options):
        self.fn = fn
        self._traced = traced or fn
        self.options = dict(backend=backend, fuse=fuse, checkpoint=checkpoint,
                            memory_budget=memory_budget, **backend_options)
        self.static_argnums = tuple(static_argnums) if not isinstance(static_argnums, int) \
            else (static_argnums,)
        self.__name__ = name or getattr(fn, "__name__", "fn")
        self.__wrapped__ = fn
        self.__doc__ = getattr(fn, "__doc__", None)
        self._cache = {}

    def _flatten(self, args):
        """-> (key, leaves, any_tracer) in one pass over the arguments."""
        key, leaves = [], []
        for i, a in enumerate(args):
            if i in self.static_argnums:
                key.append(_static_key(a))
            else:
                ls, treedef, _ = pytree.flatten(a)
                leaves.extend(ls)
                key.append((treedef, tuple(_leaf_key(x) for x in ls)))
        return tuple(key), leaves

    def _key(self, args):
        return self._flatten(args)[0]

    def __call__(self, *args):
        key, leaves = self._flatten(args)
        if any(isinstance(x, Tracer) for x in leaves):
            return self._traced(*args)
        prog = self._cache.get(key)
        if prog is None:
            prog = self._cache[key] = self._build(args)
        return prog.run_flat(leaves)

    def trace(self, *args):
        """The graph of this function for these arguments, before any pass."""
        return trace(self._traced_named(), *args, static_argnums=self.static_argnums)

    def lower(self, *args):
        """The Program (source, IR, memory estimate) for these arguments."""
        key = self._key(args)
        prog = self._cache.get(key)
        if prog is None:
            prog = self._cache[key] = self._build(args)
        return prog

    def _traced_named(self):
        traced = self._traced

        @functools.wraps(self.fn)
        def named(*a):
            return traced(*a)
        named.__name__ = self.__name__
        return named

    def _build(self, args):
        from ..backends.runtime import Program
        g = self.trace(*args)
        return compile_graph(g, Program, self.static_argnums, name=self.__name__,
                             **self.options)


def compile_graph(g, Program, static_argnums=(), name="fn", backend="auto", fuse=True,
                  checkpoint=None, memory_budget=None, **backend_options):
    """Run the pass pipeline and a backend over a traced graph; -> Program."""
    from ..backends.codegen import ident
    from ..passes.pipeline import run_pipeline
    be = pick_backend(backend)
    g = run_pipeline(g, be, fuse=fuse, checkpoint=checkpoint, memory_budget=memory_budget,
                     debug=_DEBUG, donate_argnums=backend_options.get("donate_argnums", ()))
    built = be.build(g, ident(name, "fn"), **_backend_options(be, backend_options))
    if _DEBUG >= 3:
        print(built["source"])
    from ..passes.pipeline import memory_report
    return Program(built["fn"], built["source"], g, memory_report(g), g.meta["in_trees"],
                   g.meta["out_tree"], static_argnums, be.NAME, built["kernels"],
                   built["prepare"], built["finish"])


# options some backend's build() takes; the others ignore them, so one set of options works
# whichever backend "auto" picks (cuda_graph only matters on a GPU)
BACKEND_OPTIONS = {"cuda_graph", "donate_argnums", "min_kernel_size", "parallel_size"}


def _backend_options(be, options):
    import inspect
    unknown = sorted(set(options) - BACKEND_OPTIONS)
    if unknown:
        from ..ir.errors import AdjitError
        raise AdjitError(f"unknown compile option {', '.join(unknown)}; backend options are "
                         f"{', '.join(sorted(BACKEND_OPTIONS))}")
    params = inspect.signature(be.build).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return dict(options)
    return {k: v for k, v in options.items() if k in params}


def compile(fn=None, *, backend="auto", fuse=True, checkpoint=None, memory_budget=None,  # noqa: A001
            static_argnums=(), **backend_options):
    """Compile fn: trace on the first call for each signature, run the generated program.

    >>> import numpy as np, adjit
    >>> f = adjit.compile(lambda x: np.tanh(x) * 2, backend="numpy")
    >>> f(np.zeros(2))
    array([0., 0.])
    """
    if fn is None:
        return lambda f: compile(f, backend=backend, fuse=fuse, checkpoint=checkpoint,
                                 memory_budget=memory_budget, static_argnums=static_argnums,
                                 **backend_options)
    opts = dict(backend=backend, fuse=fuse, checkpoint=checkpoint, memory_budget=memory_budget,
                static_argnums=_static(static_argnums), **backend_options)
    return _cached("compile", fn, lambda: Compiled(fn, **opts), opts)


# -- helpers for the transformations ----------------------------------------------------------
def _norm_argnums(argnums, nargs, static):
    many = isinstance(argnums, (tuple, list))
    nums = tuple(argnums) if many else (argnums,)
    out = []
    for a in nums:
        if not -nargs <= a < nargs:
            raise GradError(f"argnums {a} is out of range for {nargs} arguments")
        a %= nargs
        if a in static:
            raise GradError(f"argument {a} is static; it cannot also be differentiated")
        out.append(a)
    return tuple(out), many


def _leaf_positions(g, args, static):
    """Input positions (in g.inputs) of the leaves of each non-static argument."""
    return {i: list(r) for i, r in pytree.leaf_ranges(g.meta["in_trees"]).items()}


def _outer_leaves(args, static, g):
    """The leaves of args as tracers of the current trace (constants lifted)."""
    leaves = []
    for i, a in enumerate(args):
        if i not in static:
            leaves.extend(pytree.flatten(a)[0])
    out = []
    for x, n in zip(leaves, g.inputs):
        out.append(x if isinstance(x, Tracer) else F.lift(x, g[n]["dtype"], current()))
    return out


def _fn_name(fn):
    return getattr(fn, "__name__", "fn")


def _scalar_loss_check(g, fn, has_aux):
    if has_aux:
        tree = g.meta["out_tree"]
        if tree[0] not in ("tuple", "list") or tree[1] != 2:
            raise GradError(f"{_fn_name(fn)} was called with has_aux=True, so it must return "
                            "a pair (loss, aux)")
    if not g.outputs:
        raise GradError(f"{_fn_name(fn)} returned no array to differentiate")
    d = g[g.outputs[0]]
    if d["shape"] != ():
        raise GradError(
            f"grad needs a scalar output, but {_fn_name(fn)} returned shape {d['shape']}; "
            "reduce it (.sum() or .mean()), or use adjit.vjp / adjit.jacobian for "
            "non-scalar outputs")
    if d["dtype"].kind not in "fc":
        raise GradError(f"grad needs a floating-point output, but {_fn_name(fn)} returned "
                        f"{d['dtype']}")


def _grad_traced(fn, argnums, has_aux, with_value, static):
    from ..passes.autodiff import derive_adjoint

    @functools.wraps(fn)
    def traced(*args):
        nums, many = _norm_argnums(argnums, len(args), static)
        g = trace(fn, *args, static_argnums=static)
        _scalar_loss_check(g, fn, has_aux)
        pos = _leaf_positions(g, args, static)
        wrt = [p for a in nums for p in pos[a]]
        check_differentiable(g, wrt, _fn_name(fn))
        j = derive_adjoint(g, wrt, outputs=[0])
        leaves = _outer_leaves(args, static, g)
        _note_parameters([leaves[p] for p in wrt])
        outs, _ = replay(j, leaves)
        n = len(g.outputs)
        grads, k = [], n
        for a in nums:
            m = len(pos[a])
            grads.append(pytree.unflatten(g.meta["in_trees"][a], outs[k:k + m]))
            k += m
        grads = tuple(grads) if many else grads[0]
        if not with_value:
            return grads
        value = pytree.unflatten(g.meta["out_tree"], outs[:n])
        return value, grads
    return traced


def _note_parameters(tracers):
    """Record which inputs of the enclosing trace are differentiated (parameters), by
    position: gradient checkpointing treats the other inputs as data (passes/checkpoint.py)."""
    graph = current().graph
    pos = {n: k for k, n in enumerate(graph.inputs)}
    marked = set(graph.meta.get("parameters", ()))
    marked.update(pos[t.id] for t in tracers if t.id in pos)
    graph.meta["parameters"] = tuple(sorted(marked))


# -- public transformations -------------------------------------------------------------------
def grad(fn, argnums=0, *, has_aux=False, static_argnums=(), **compile_options):
    """The gradient of a scalar function, with the structure of args[argnums].

    >>> import numpy as np, adjit
    >>> adjit.grad(lambda x: np.sum(x ** 2))(np.array([1.0, 2.0]))
    array([2., 4.])
    """
    static = _static(static_argnums)
    key = dict(compile_options, argnums=argnums, has_aux=has_aux, static=static)
    return _cached("grad", fn, lambda: _make_grad(fn, argnums, has_aux, static,
                                                  compile_options), key)


def _make_grad(fn, argnums, has_aux, static, compile_options):
    traced = _grad_traced(fn, argnums, has_aux, has_aux, static)
    if has_aux:
        inner = traced

        def traced(*args):  # noqa: F811 - grad with aux returns (grads, aux) as in JAX
            (value, aux), grads = inner(*args)
            return grads, aux
        traced = functools.wraps(fn)(traced)
    return Compiled(fn, traced, static_argnums=static, name=f"grad_{_fn_name(fn)}",
                    **compile_options)


def value_and_grad(fn, argnums=0, *, has_aux=False, static_argnums=(), **compile_options):
    """(fn(*args), grad) in one program; with has_aux, fn returns (loss, aux).

    >>> import numpy as np, adjit
    >>> v, g = adjit.value_and_grad(lambda x: np.sum(x * x))(np.array([3.0]))
    >>> float(v), g
    (9.0, array([6.]))
    """
    static = _static(static_argnums)
    key = dict(compile_options, argnums=argnums, has_aux=has_aux, static=static)
    return _cached("value_and_grad", fn, lambda: Compiled(
        fn, _grad_traced(fn, argnums, has_aux, True, static), static_argnums=static,
        name=f"value_and_grad_{_fn_name(fn)}", **compile_options), key)


def _static(s):
    return (s,) if isinstance(s, int) else tuple(s)


_TRANSFORMS = {}


def _cached(kind, fn, make, options):
    """One Compiled per (transformation, function, options): adjit.grad(loss)(...) inside a
    training loop then reuses its programs instead of compiling every step."""
    key = (kind, fn, tuple(sorted((k, repr(v)) for k, v in options.items())))
    try:
        c = _TRANSFORMS.get(key)
    except TypeError:
        return make()
    if c is None:
        if len(_TRANSFORMS) > 256:
            _TRANSFORMS.clear()
        c = _TRANSFORMS[key] = make()
    return c


def _float_positions(g):
    return [k for k, n in enumerate(g.inputs) if g[n]["dtype"].kind in "fc"]


def vjp(fn, *primals, **compile_options):
    """(fn(*primals), vjp_fn) where vjp_fn(cotangent) gives one cotangent per primal.

    >>> import numpy as np, adjit
    >>> y, f_vjp = adjit.vjp(lambda x: x * 3.0, np.array([1.0, 2.0]))
    >>> f_vjp(np.array([1.0, 1.0]))
    (array([3., 3.]),)
    """
    from ..passes.autodiff import derive_adjoint
    out = _cached("compile", fn, lambda: Compiled(fn, **compile_options),
                  compile_options)(*primals)

    def make():
        @functools.wraps(fn)
        def traced(primals, cotangent):
            g = trace(fn, *primals)
            pos = _float_positions(g)
            j = derive_adjoint(g, pos, seed="inputs")
            cts = [x if isinstance(x, Tracer) else F.lift(x, g[o]["dtype"], current())
                   for x, o in zip(pytree.flatten(cotangent)[0], g.outputs)]
            if len(cts) != len(g.outputs):
                raise ShapeError(f"vjp: the cotangent has {len(cts)} leaves but "
                                 f"{_fn_name(fn)} returns {len(g.outputs)}")
            for c, o in zip(cts, g.outputs):
                if c.shape != g[o]["shape"]:
                    raise ShapeError(f"vjp: cotangent shape {c.shape} differs from the output "
                                     f"shape {g[o]['shape']}")
            outs, _ = replay(j, _outer_leaves(primals, (), g) + cts)
            res = list(outs[len(g.outputs):])
            leaves = [res.pop(0) if k in pos else None for k in range(len(g.inputs))]
            result, k = [], 0
            for tree in g.meta["in_trees"]:
                m = pytree.num_leaves(tree)
                result.append(pytree.unflatten(tree, leaves[k:k + m]))
                k += m
            return tuple(result)
        return Compiled(traced, name=f"vjp_{_fn_name(fn)}", **compile_options)

    back = _cached("vjp", fn, make, compile_options)
    return out, lambda cotangent: back(tuple(primals), cotangent)


def jvp(fn, primals, tangents, **compile_options):
    """(fn(*primals), J tangents): forward mode.

    >>> import numpy as np, adjit
    >>> adjit.jvp(lambda x: x ** 3, (np.array(2.0),), (np.array(1.0),))
    (array(8.), array(12.))
    """
    from ..passes.autodiff import derive_tangent

    def make():
        @functools.wraps(fn)
        def traced(primals, tangents):
            g = trace(fn, *primals)
            pos = _float_positions(g)
            t_leaves = pytree.flatten(list(tangents))[0]
            if len(t_leaves) != len(g.inputs):
                raise ShapeError(f"jvp: tangents must have the structure of the primals "
                                 f"({len(g.inputs)} arrays), got {len(t_leaves)}")
            ts = []
            for k in pos:
                t, n = t_leaves[k], g.inputs[k]
                if np.shape(t) != g[n]["shape"] if not isinstance(t, Tracer) \
                        else t.shape != g[n]["shape"]:
                    raise ShapeError(f"jvp: tangent for {g[n]['name']} has shape "
                                     f"{np.shape(t)}, expected {g[n]['shape']}")
                ts.append(t if isinstance(t, Tracer) else F.lift(t, g[n]["dtype"], current()))
            tg = derive_tangent(g, pos)
            outs, _ = replay(tg, _outer_leaves(primals, (), g) + ts)
            n = len(g.outputs)
            tree = g.meta["out_tree"]
            return pytree.unflatten(tree, outs[:n]), pytree.unflatten(tree, outs[n:])
        return Compiled(traced, name=f"jvp_{_fn_name(fn)}", **compile_options)

    return _cached("jvp", fn, make, compile_options)(tuple(primals), tuple(tangents))


def _single(g, what, fn):
    if len(g.outputs) != 1:
        raise UnsupportedError(f"{what} of {_fn_name(fn)}: it must return one array "
                               f"(got {len(g.outputs)} arrays)")


def jacobian(fn, argnums=0, **compile_options):
    """The Jacobian of fn with respect to args[argnums]: shape out.shape + x.shape.

    Uses reverse mode when the output is smaller than the input, forward mode otherwise.

    >>> import numpy as np, adjit
    >>> adjit.jacobian(lambda x: x * x)(np.array([1.0, 2.0]))
    array([[2., 0.],
           [0., 4.]])
    """
    from ..passes.autodiff import derive_adjoint, derive_tangent

    @functools.wraps(fn)
    def traced(*args):
        g = trace(fn, *args)
        _single(g, "jacobian", fn)
        pos = _leaf_positions(g, args, ())
        if argnums not in pos or len(pos[argnums]) != 1:
            raise UnsupportedError("jacobian needs args[argnums] to be a single array")
        p = pos[argnums][0]
        check_differentiable(g, [p], _fn_name(fn))
        leaves = _outer_leaves(args, (), g)
        xs, os_ = g[g.inputs[p]], g[g.outputs[0]]
        n_in, n_out = int(np.prod(xs["shape"])), int(np.prod(os_["shape"]))
        rows = []
        if n_out <= n_in:
            j = derive_adjoint(g, [p], seed="inputs")
            for i in range(n_out):
                e = np.zeros(n_out, os_["dtype"])
                e[i] = 1
                ct = F.lift(e.reshape(os_["shape"]), os_["dtype"], current())
                rows.append(F.reshape(replay(j, leaves + [ct])[0][1], (-1,)))
            jac = F.stack(rows, 0) if rows else F.zeros((0, n_in), xs["dtype"])
        else:
            t = derive_tangent(g, [p])
            for i in range(n_in):
                e = np.zeros(n_in, xs["dtype"])
                e[i] = 1
                tan = F.lift(e.reshape(xs["shape"]), xs["dtype"], current())
                rows.append(F.reshape(replay(t, leaves + [tan])[0][1], (-1,)))
            jac = F.stack(rows, 1)
        return F.reshape(jac, tuple(os_["shape"]) + tuple(xs["shape"]))
    return Compiled(fn, traced, name=f"jacobian_{_fn_name(fn)}", **compile_options)


def hessian(fn, argnums=0, **compile_options):
    """The Hessian of a scalar fn with respect to args[argnums]: shape x.shape + x.shape.

    >>> import numpy as np, adjit
    >>> adjit.hessian(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0]))
    array([[ 6.,  0.],
           [ 0., 12.]])
    """
    inner = jacobian(grad(fn, argnums), argnums)
    return Compiled(fn, inner._traced, name=f"hessian_{_fn_name(fn)}", **compile_options)


def hvp(fn, argnums=0, **compile_options):
    """h(*args, v) = (Hessian of fn at args) @ v, by forward mode over reverse mode.

    >>> import numpy as np, adjit
    >>> adjit.hvp(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0]), np.array([1.0, 0.0]))
    array([6., 0.])
    """
    from ..passes.autodiff import derive_tangent
    g_fn = grad(fn, argnums)

    @functools.wraps(fn)
    def traced(*args_v):
        args, v = args_v[:-1], args_v[-1]
        g = trace(g_fn, *args)
        pos = _leaf_positions(g, args, ())
        nums, _ = _norm_argnums(argnums, len(args), ())
        wrt = pos[nums[0]]
        v_leaves = pytree.flatten(v)[0]
        if len(v_leaves) != len(wrt):
            raise ShapeError("hvp: v must have the structure of args[argnums]")
        vs = [x if isinstance(x, Tracer) else F.lift(x, g[g.inputs[k]]["dtype"], current())
              for x, k in zip(v_leaves, wrt)]
        t = derive_tangent(g, wrt)
        outs, _ = replay(t, _outer_leaves(args, (), g) + vs)
        n = len(g.outputs)
        return pytree.unflatten(g.meta["out_tree"], outs[n:])
    return Compiled(fn, traced, name=f"hvp_{_fn_name(fn)}", **compile_options)


def gradcheck(fn, *args, argnums=0, eps=1e-6):
    """Largest relative error |g - n| / max(|g|, |n|, 1e-8) between adjit's gradient and
    central differences, in float64.

    >>> import numpy as np, adjit
    >>> adjit.gradcheck(lambda x: np.sum(np.sin(x)), np.array([0.3, 1.2])) < 1e-8
    True
    """
    def f64(x):
        a = np.asarray(x)
        return a.astype(np.float64) if a.dtype.kind == "f" else a
    args = [pytree.unflatten(pytree.flatten(a)[1], [f64(x) for x in pytree.flatten(a)[0]])
            for a in args]
    nums = argnums if isinstance(argnums, (tuple, list)) else (argnums,)
    gs = grad(fn, tuple(nums), backend="numpy")(*args)
    f = compile(fn, backend="numpy")
    worst = 0.0
    for a, ga in zip(nums, gs):
        leaves, tree, _ = pytree.flatten(args[a])
        g_leaves = pytree.flatten(ga)[0]
        for li, (x, gx) in enumerate(zip(leaves, g_leaves)):
            x = np.array(x, dtype=np.float64)
            num = np.zeros(x.size)
            for k in range(x.size):
                vals = []
                flat = x.reshape(-1)
                # divide by the step actually taken: x + eps rounds, and that error is
                # larger than the truncation error of the central difference
                hi, lo = flat[k] + eps, flat[k] - eps
                for v in (hi, lo):
                    xp = flat.copy()
                    xp[k] = v
                    new_leaves = list(leaves)
                    new_leaves[li] = xp.reshape(x.shape)
                    call = list(args)
                    call[a] = pytree.unflatten(tree, new_leaves)
                    out = f(*call)
                    vals.append(float(np.asarray(pytree.flatten(out)[0][0])))
                num[k] = (vals[0] - vals[1]) / (hi - lo)
            gx = np.asarray(gx, dtype=np.float64).reshape(-1)
            err = np.abs(gx - num) / np.maximum(np.maximum(np.abs(gx), np.abs(num)), 1e-8)
            worst = max(worst, float(err.max()) if err.size else 0.0)
    return worst


def leaf_shape(x):
    return leaf_spec(x, "x")[0]
