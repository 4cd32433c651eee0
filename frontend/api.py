"""The public API: trace, compile, grad, value_and_grad, vjp, jvp, jacobian, hessian, hvp.

Every transformation is a traced function: it traces the user's function into a graph,
transforms the graph (passes/autodiff.py) and replays the result into the enclosing trace. So
transformations nest (hessian = jacobian of grad), and `compile` turns any of them into a
Program per signature of argument shapes, dtypes and static values.
"""
from __future__ import annotations

import collections
import functools
import gc
import math
import os

import numpy as np

from ..ir.errors import GradError, OptionError, ShapeError, TraceError
from ..ir.ops import OPS, with_stack
from . import functions as F
from . import pytree
from .batching import live_nodes, replay_batched
from .trace import _arg_strides, check_differentiable, leaf_spec, replay, trace
from .tracer import Tracer, current

_DEBUG = os.environ.get("DEBUG", "0") or "0"
_DEBUG = int(_DEBUG) if _DEBUG.isdigit() else 1 if _DEBUG.lower() in ("true", "yes", "on") \
    else 0   # DEBUG=1..3 (another tool's DEBUG=true or DEBUG=* must not break the import)


# -- compilation ------------------------------------------------------------------------------
def _has_tracer(args):
    leaves, _, _ = pytree.flatten(list(args))
    return any(isinstance(x, Tracer) for x in leaves)


def _leaf_key(x):
    if type(x) is np.ndarray:
        if not x.flags.c_contiguous:
            # traced with its strides: reshapes and copies of it follow them as NumPy's do,
            # and order='A'/'K' reads of a Fortran-like one are refused
            return (x.shape, x.dtype.str, _arg_strides(x))
        return (x.shape, x.dtype.str)
    if isinstance(x, Tracer):
        return (x.shape, x.dtype.str)
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        return ("weak", type(x).__name__)
    if hasattr(x, "__cuda_array_interface__"):                  # CuPy arrays
        if not x.flags.c_contiguous:
            return (tuple(x.shape), np.dtype(x.dtype).str, _arg_strides(x))
        return (tuple(x.shape), np.dtype(x.dtype).str)
    a = np.asarray(x)      # also a torch tensor, whose dtype is not NumPy's
    if not a.flags.c_contiguous:        # an np.memmap or other subclass: as an ndarray
        return (a.shape, a.dtype.str, _arg_strides(a))
    return (a.shape, a.dtype.str)


def _static_key(v, which=None):
    from .trace import refuse_generator
    refuse_generator(v, "a static argument")
    key = pytree.typed_key(v)
    try:
        hash(key)
    except TypeError:
        arg = "a static argument"
        if which is not None:
            from .trace import arg_names
            i, fn = which
            try:
                arg = f"static argument {i} ({arg_names(fn, i + 1)[i]!r})"
            except Exception:  # noqa: BLE001 - a name for the message only
                arg = f"static argument {i}"
        if isinstance(v, np.ndarray) and v.dtype.kind in "US":
            raise TypeError(
                f"{arg} is an array of strings (shape {v.shape}), which cannot be static: "
                "static arguments are cached by value and must be hashable. Pass "
                "tuple(labels) instead (one compiled program per distinct tuple), or integer "
                "codes computed before the call (u, codes = np.unique(labels, "
                "return_inverse=True)) as a traced argument") from None
        if isinstance(v, np.ndarray) or hasattr(v, "__array_interface__"):
            raise TypeError(
                f"{arg} is an array (shape {tuple(np.shape(v))}), which cannot be static: "
                "static arguments are configuration values that programs are cached by (a "
                "number, string or tuple). Leave it out of static_argnums: an array argument "
                "is traced (with vmap, give it in_axes None to share it), or pass a tuple "
                "of its numbers if they really select the program") from None
        raise TypeError(f"{arg} {v!r:.80} must be hashable (a number, string or tuple, "
                        "or a dict or list of them) so compiled programs can be cached by its "
                        "value") from None
    return ("static", key)


def pick_backend(name):
    from ..backends import registry
    return registry.resolve(name)


class Compiled:
    """A function compiled per signature; calling it with traced values inlines it instead."""

    def __init__(self, fn, traced=None, *, backend="auto", fuse=True, checkpoint=None,
                 memory_budget=None, static_argnums=(), name=None, **backend_options):
        from ..passes.checkpoint import check_options
        checkpoint, memory_budget = check_options(checkpoint, memory_budget)
        _check_options(fn, fuse, backend_options)
        self.fn = fn
        self._traced = traced or fn
        self.options = dict(backend=backend, fuse=fuse, checkpoint=checkpoint,
                            memory_budget=memory_budget, **backend_options)
        self.static_argnums = _static(static_argnums, fn)
        self.__name__ = name or _fn_name(fn)
        self.__wrapped__ = fn
        self.__doc__ = getattr(fn, "__doc__", None)
        self._cache = {}

    def _flatten(self, args):
        """-> (key, leaves, any_tracer) in one pass over the arguments."""
        key, leaves = [], []
        for i, a in enumerate(args):
            if i in self.static_argnums:
                key.append(_static_key(a, (i, self.__wrapped__)))
            else:
                ls, treedef, _ = pytree.flatten(a)
                leaves.extend(ls)
                key.append((treedef, tuple(_leaf_key(x) for x in ls)))
        return tuple(key), leaves

    def _key(self, args):
        return self._flatten(args)[0]

    # how to make this same transformation of another function (set by the public
    # transformations); keyword-only arguments are bound with functools.partial through it
    _rebuild = None
    # traced as the primal of a derivative (adjit.vjp's): custom rules give their values
    _differentiated = False

    def _with_keywords(self, kw_only):
        """This transformation of fn with its keyword-only arguments bound: they are static
        configuration (numbers, strings), one program per value, as static_argnums."""
        try:
            # by type and value, as static_argnums: 1, 1.0 and True are equal but trace apart
            # in the order given: f(x, **steps) may loop over steps.items()
            key = tuple((k, pytree.typed_key(v)) for k, v in kw_only.items())
            hash(key)
        except TypeError:
            key = None
        if key is None or self._rebuild is None or any(
                isinstance(v, (np.ndarray, Tracer)) for v in kw_only.values()):
            bad = [k for k, v in kw_only.items() if not _hashable(v)]
            names = ", ".join(bad or kw_only)
            raise TypeError(
                f"{self.__name__}() got keyword-only argument(s) {names} holding arrays (or "
                "unhashable values); adjit binds keyword-only arguments as static "
                "configuration (numbers, strings, tuples). Pass arrays positionally, or bind "
                "them first with functools.partial")
        cache = self.__dict__.setdefault("_kw_cache", {})
        sub = cache.get(key)
        if sub is None:
            sub = cache[key] = self._rebuild(functools.partial(self.fn, **kw_only))
        return sub

    def __get__(self, obj, objtype=None):
        # a compiled method: the instance is its first argument (static_argnums=0 makes it
        # static configuration; otherwise the error names `self` and says so)
        return self if obj is None else functools.partial(self, obj)

    def __call__(self, *args, **kwargs):
        if kwargs:
            owner, args = self._keywords(args, kwargs)
            if owner is not self:
                return owner(*args)
        if any(type(a) is str or type(a) is bool for a in args):
            owner = self._with_flags(args)
            if owner is not self:
                return owner(*args)
        key, leaves = self._flatten(args)
        if current() is not None or any(isinstance(x, Tracer) for x in leaves):
            # inside a trace (traced arguments, or concrete ones while tracing an enclosing
            # function that this one may close over): inline into that trace
            return self._traced(*args)
        prog = self._cache.get(key)
        if prog is None:
            prog = self._cache[key] = self._build(args)
        return prog.run_flat(leaves)

    # a keyword the transformation adds after fn's arguments (hvp's h(*args, v)): passed by
    # that name, it is the last position, whatever fn's own parameters are called
    _tail_keyword = None

    def _keywords(self, args, kwargs):
        """(the Compiled to use, positional args): keyword-only arguments select the program
        bound to their values, other keywords become positions."""
        tail = ()
        if self._tail_keyword in kwargs:
            kwargs = dict(kwargs)
            tail = (kwargs.pop(self._tail_keyword),)
            if not kwargs:
                return self, tuple(args) + tail
        elif self._tail_keyword is not None and args:
            # h(x, v, scale=3.0): the last positional argument is the tail (v), not the
            # parameter after x that the keywords would otherwise fill
            args, tail = tuple(args[:-1]), (args[-1],)
        kw_only = _keyword_only(self.fn, kwargs)
        owner = self
        if kw_only:
            kwargs = {k: v for k, v in kwargs.items() if k not in kw_only}
            owner = self._with_keywords(kw_only)
            if not kwargs:
                return owner, tuple(args) + tail
        skipped = []
        args = bind_keywords(owner.fn, owner.__name__, args, kwargs, skipped)
        return owner._with_defaults(skipped, len(args)), tuple(args) + tail

    def _with_flags(self, args):
        """A string argument (an activation's name, a mode) cannot be traced: it is static
        configuration wherever it is passed, as if named in static_argnums (one program per
        value), unless argnums differentiates it (refused there). So is a Python bool
        (`f(W, X, training=False)` read by `if training:`; sweep 29): a flag, not data."""
        return self._with_defaults([(i, a) for i, a in enumerate(args)
                                    if type(a) is str or type(a) is bool], len(args))

    # the positions a transformation differentiates (argnums), which stay traced
    _argnums = None

    def _with_defaults(self, skipped, nargs):
        """This transformation with the parameters a keyword call skipped (filled with their
        defaults) static: f(W, X, rate=0.5) leaves training=True a Python value, as a call
        without keywords does (not a traced argument that `if training:` cannot read).
        A skipped parameter that argnums differentiates stays traced (at its default)."""
        nums = self._argnums
        nums = set() if nums is None else {
            a % nargs if isinstance(a, int) and -nargs <= a < nargs else a
            for a in (nums if isinstance(nums, (tuple, list)) else (nums,))}
        extra = tuple(sorted(p for p, v in skipped if p not in self.static_argnums and
                             p not in nums and _hashable(v)))
        if not extra or self._rebuild is None:
            return self
        cache = self.__dict__.setdefault("_default_cache", {})
        sub = cache.get(extra)
        if sub is None:
            sub = cache[extra] = self._rebuild(self.fn, tuple(self.static_argnums) + extra)
        return sub

    def trace(self, *args, **kwargs):
        """The graph of this function for these arguments, before any pass."""
        if kwargs:
            owner, args = self._keywords(args, kwargs)
            if owner is not self:
                return owner.trace(*args)
        return trace(self._traced_named(), *args, static_argnums=self.static_argnums,
                     differentiated=self._differentiated)

    def lower(self, *args, **kwargs):
        """The Program (source, IR, memory estimate) for these arguments."""
        if kwargs:
            owner, args = self._keywords(args, kwargs)
            if owner is not self:
                return owner.lower(*args)
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
        # compiling allocates some 10^5 small dicts and tuples that live until it ends: the
        # cyclic collector's passes over them took a third of a long loop's compile time
        collecting = gc.isenabled()
        gc.disable()
        try:
            g = self.trace(*args)
            return compile_graph(g, Program, self.static_argnums, name=self.__name__,
                                 **self.options)
        finally:
            if collecting:
                gc.enable()


def _keyword_only(fn, kwargs) -> dict:
    """The keyword arguments that fn takes by keyword only (after * or through **kwargs)."""
    import inspect
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    var_kw = any(p.kind == p.VAR_KEYWORD for p in params.values())
    return {k: v for k, v in kwargs.items()
            if (k in params and params[k].kind == params[k].KEYWORD_ONLY)
            or (k not in params and var_kw)}


def _hashable(v) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return not isinstance(v, (np.ndarray, Tracer))


def bind_keywords(fn, name, args, kwargs, skipped=None):
    """Positional arguments for fn(*args, **kwargs): keyword arguments naming positional
    parameters take their place (argnums and static_argnums count them by position), and
    parameters skipped between take their defaults (listed in `skipped` as (position,
    default))."""
    import inspect
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    index = {p.name: i for i, p in enumerate(positional) if p.kind != p.POSITIONAL_ONLY}
    for k in kwargs:
        if k not in index and not any(p.name == k for p in params):
            import difflib
            close = difflib.get_close_matches(k, [p.name for p in params], 1)
            raise TypeError(f"{name}() got an unexpected keyword argument {k!r}"
                            + (f"; did you mean {close[0]!r}?" if close else ""))
        if k not in index and any(p.name == k and p.kind == p.POSITIONAL_ONLY
                                  for p in params):
            raise TypeError(f"{name}() got {k!r} by keyword, but it is a positional-only "
                            f"parameter of {_fn_name(fn)}: pass it by position")
        if k not in index:
            raise TypeError(
                f"{name}() got keyword argument {k!r}, which is not a positional parameter of "
                f"{_fn_name(fn)}; adjit passes arguments by position (argnums and "
                "static_argnums count positions), so pass it positionally or bind it first "
                "with functools.partial")
        if index[k] < len(args):
            raise TypeError(f"{name}() got multiple values for argument {k!r}")
    out = list(args)
    for i in range(len(args), max(index[k] for k in kwargs) + 1):
        p = positional[i]
        if p.name in kwargs:
            out.append(kwargs[p.name])
        elif p.default is not p.empty:
            if skipped is not None:
                skipped.append((i, p.default))
            out.append(p.default)
        else:
            raise TypeError(f"{name}() missing argument {p.name!r}")
    return tuple(out)


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


_ALL_OPTIONS = ("backend", "fuse", "checkpoint", "memory_budget", "static_argnums",
                "argnums", "has_aux") + tuple(sorted(BACKEND_OPTIONS))


def _check_options(fn, fuse, options):
    """Options checked when the function is wrapped, not at its first call."""
    import difflib
    if not callable(fn):
        raise OptionError(f"adjit needs a function to compile, got {type(fn).__name__} "
                          f"{fn!r:.60}")
    for k in sorted(set(options) - BACKEND_OPTIONS):
        if k in _ALL_OPTIONS:        # a transformation's own option given to another one
            compile_options = [o for o in _ALL_OPTIONS if o not in ("argnums", "has_aux")]
            raise OptionError(f"{k!r} is not an option of this transformation (adjit.grad "
                              f"and value_and_grad take argnums and has_aux; the compile "
                              f"options are {', '.join(compile_options)})")
        near = difflib.get_close_matches(k, _ALL_OPTIONS, n=1)
        raise OptionError(f"unknown compile option {k!r}" + (f"; did you mean {near[0]!r}?"
                                                              if near else "") +
                          f" (options: {', '.join(_ALL_OPTIONS)})")
    if not isinstance(fuse, (bool, np.bool_)):
        raise OptionError(f"fuse must be True or False, got {fuse!r}")
    cg = options.get("cuda_graph")
    if cg is not None and not isinstance(cg, (bool, np.bool_)):
        raise OptionError(f"cuda_graph must be True, False or None, got {cg!r}")
    d = options.get("donate_argnums", ())
    nums = () if d is None else d if isinstance(d, (tuple, list)) else (d,)   # None: JAX's
    if any(not isinstance(k, (int, np.integer)) or isinstance(k, bool) for k in nums):
        raise OptionError(f"donate_argnums must be an int or a tuple of ints (argument "
                          f"positions), got {d!r}")


def _backend_options(be, options):
    import inspect
    if options.get("cuda_graph") and be.NAME != "cupy":
        import warnings
        from ..ir.errors import AdjitWarning
        warnings.warn(f"cuda_graph=True has no effect on the {be.NAME} backend (CUDA graphs "
                      "are for backend='cupy' on a GPU)", AdjitWarning, stacklevel=4)
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
    static = _static(static_argnums, fn)
    if isinstance(fn, Compiled) and fn.static_argnums:
        # compile(grad(f, static_argnums=1)): the inner function's static arguments stay so
        static = tuple(sorted(set(static) | set(fn.static_argnums)))
    opts = dict(backend=backend, fuse=fuse, checkpoint=checkpoint, memory_budget=memory_budget,
                static_argnums=static, **backend_options)
    c = _cached("compile", fn, lambda: Compiled(fn, **opts), opts)
    if isinstance(fn, Compiled):
        c._tail_keyword = fn._tail_keyword   # compile(hvp(f))(x, v, scale=3.0): v stays last
    c._rebuild = lambda f, new=None: compile(
        f, backend=backend, fuse=fuse, checkpoint=checkpoint, memory_budget=memory_budget,
        static_argnums=static if new is None else new, **backend_options)
    return c


# -- helpers for the transformations ----------------------------------------------------------
def _norm_argnums(argnums, nargs, static):
    many = isinstance(argnums, (tuple, list))
    nums = tuple(argnums) if many else (argnums,)
    out = []
    for a in nums:
        if not isinstance(a, (int, np.integer)) or isinstance(a, bool):
            raise GradError(f"argnums must be an int or a tuple of ints, got {argnums!r}")
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
    # arrays of enclosing traces that fn closes over come last (TraceContext.capture)
    return out + list(g.meta.get("captured", ()))


def _n_arg_inputs(g):
    """How many of g.inputs are leaves of the arguments (the rest are captured arrays)."""
    return len(g.inputs) - len(g.meta.get("captured", ()))


def _fn_name(fn):
    """The name the user knows fn by: a partial's function, a callable object's class."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    name = getattr(fn, "__name__", None)
    if name is None and callable(fn):
        name = type(fn).__name__
    return name or "fn"


def _defined_at(fn):
    """' (defined at file:line (source))' for a Python function, '' otherwise."""
    from ..ir.graph import Where
    code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
    return f" (defined at {Where(code.co_filename, code.co_firstlineno)})" if code else ""


def _returned_at(g, k=0):
    w = g[g.outputs[k]]["where"] if len(g.outputs) > k else None
    return f" at {w}" if w is not None else ""


def _scalar_loss_check(g, fn, has_aux):
    name = _fn_name(fn) + _defined_at(fn)
    if has_aux:
        tree = g.meta["out_tree"]
        if tree[0] not in ("tuple", "list") or tree[1] != 2:
            raise GradError(f"{name} was called with has_aux=True, so it must return "
                            f"a pair (loss, aux){_returned_at(g)}")
    elif g.meta["out_tree"][0] == "none":
        raise GradError(f"grad needs a scalar output, but {name} returned None; return the "
                        "loss")
    elif g.meta["out_tree"][0] == "complex" or (has_aux and g.meta["out_tree"][2][0][0] ==
                                                "complex"):
        raise GradError(f"grad needs a real scalar loss, but {name} returned a complex value"
                        f"{_returned_at(g)}; return a real one (np.abs(z) ** 2, z.real, "
                        "np.vdot(z, z).real)")
    elif g.meta["out_tree"][0] != "leaf":
        err = GradError(
            f"grad needs a scalar output, but {name} returned a "
            f"{g.meta['out_tree'][0]} of {len(g.outputs)} arrays; return the loss alone, or "
            "return (loss, aux) and pass has_aux=True")
        err.array_output = True      # hessian nests two jacobians (a pytree of Hessians)
        raise err
    if not g.outputs or (has_aux and pytree.num_leaves(g.meta["out_tree"][2][0]) != 1):
        raise GradError(f"{name} must return one scalar loss"
                        + (" as the first item of (loss, aux)" if has_aux else ""))
    d = g[g.outputs[0]]
    if d["shape"] != ():
        err = GradError(
            f"grad needs a scalar output, but {name} returned shape {d['shape']}"
            f"{_returned_at(g)}; reduce it (.sum() or .mean()), or use adjit.vjp / "
            "adjit.jacobian for non-scalar outputs")
        err.array_output = True      # hessian then nests two jacobians, as jax.hessian
        raise err
    if d["dtype"].kind not in "fc":
        raise GradError(f"grad needs a floating-point output, but {name} returned "
                        f"{d['dtype']}{_returned_at(g)}; compute the loss in floats (an "
                        "integer or Python int argument has no gradient: pass 3.0, not 3)")


def _grad_traced(fn, argnums, has_aux, with_value, static):
    from ..passes.autodiff import derive_adjoint

    @functools.wraps(fn)
    def traced(*args):
        nums, many = _norm_argnums(argnums, len(args), static)
        g = trace(fn, *args, static_argnums=static, differentiated=True)
        _scalar_loss_check(g, fn, has_aux)
        pos = _leaf_positions(g, args, static)
        wrt = [p for a in nums for p in pos[a]]
        check_differentiable(g, wrt, _fn_name(fn) + _defined_at(fn))
        j = derive_adjoint(g, wrt, outputs=[0])
        leaves = _outer_leaves(args, static, g)
        _note_parameters([leaves[p] for p in wrt])
        outs, _ = replay(j, leaves)
        n = len(g.outputs)
        for k in range(n, len(outs)):
            if F._is_weak(outs[k]):
                # a gradient is an array like its argument, even when it is the value of
                # a Python-number argument (d(x * t)/dx = t): it does not come back as a float
                outs[k] = outs[k].copy_()
                outs[k].ctx.weak.discard(outs[k].id)
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
def grad(fn=None, argnums=0, *, has_aux=False, static_argnums=(), **compile_options):
    """The gradient of a scalar function, with the structure of args[argnums].

    >>> import numpy as np, adjit
    >>> adjit.grad(lambda x: np.sum(x ** 2))(np.array([1.0, 2.0]))
    array([2., 4.])
    """
    if fn is None:      # @adjit.grad(argnums=1): a decorator with options
        return lambda f: grad(f, argnums, has_aux=has_aux, static_argnums=static_argnums,
                              **compile_options)
    return _transformation(grad, fn, argnums, static_argnums, compile_options,
                           lambda static: _make_grad(fn, argnums, has_aux, static,
                                                     compile_options), has_aux=has_aux)


def _transformation(public, fn, argnums, static_argnums, compile_options, make, **flags):
    """One Compiled per (transformation, function, options), made by make(static); keyword-
    only arguments rebuild the transformation through `public` on a functools.partial."""
    static = _static(static_argnums, fn)
    if isinstance(fn, Compiled) and fn.static_argnums:
        # grad(compile(f, static_argnums=1)): the compiled function's static arguments stay
        # static (as jax.grad(jax.jit(f, static_argnums=1)))
        static = tuple(sorted(set(static) | set(fn.static_argnums)))
    key = dict(compile_options, argnums=argnums, static=static, **flags)
    c = _cached(public.__name__, fn, lambda: make(static), key)
    c._argnums = argnums
    c._rebuild = lambda f, new=None: public(
        f, argnums, static_argnums=static if new is None else new, **flags,
        **compile_options)
    return c


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


def value_and_grad(fn=None, argnums=0, *, has_aux=False, static_argnums=(), **compile_options):
    """(fn(*args), grad) in one program; with has_aux, fn returns (loss, aux).

    >>> import numpy as np, adjit
    >>> v, g = adjit.value_and_grad(lambda x: np.sum(x * x))(np.array([3.0]))
    >>> float(v), g
    (9.0, array([6.]))
    """
    if fn is None:      # @adjit.value_and_grad(argnums=1): a decorator with options
        return lambda f: value_and_grad(f, argnums, has_aux=has_aux,
                                        static_argnums=static_argnums, **compile_options)
    return _transformation(value_and_grad, fn, argnums, static_argnums, compile_options,
                           lambda static: Compiled(
                               fn, _grad_traced(fn, argnums, has_aux, True, static),
                               static_argnums=static, name=f"value_and_grad_{_fn_name(fn)}",
                               **compile_options), has_aux=has_aux)


def _static(s, fn=None):
    """static_argnums as a tuple of non-negative positions; negative ones count from the end
    of fn's positional parameters, as in JAX. Checked against fn's signature when it has a
    fixed number of them."""
    import inspect
    try:
        nums = (s,) if isinstance(s, (int, np.integer)) else tuple(s)
    except TypeError:
        raise OptionError(f"static_argnums must be ints or a tuple of ints, got {s!r}") from None
    if any(not isinstance(a, (int, np.integer)) or isinstance(a, bool) for a in nums):
        raise OptionError(f"static_argnums must be ints or a tuple of ints, got {s!r}")
    try:
        params = inspect.signature(fn).parameters.values() if fn is not None else None
    except (TypeError, ValueError):
        params = None
    if params is None or any(p.kind == p.VAR_POSITIONAL for p in params):
        if any(a < 0 for a in nums):
            raise OptionError(f"static_argnums {s!r}: negative positions need a function "
                              "with a fixed number of positional parameters")
        return tuple(int(a) for a in nums)
    n = sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    for a in nums:
        if not -n <= a < n:
            raise OptionError(f"static_argnums {a} is out of range: "
                              f"{getattr(fn, '__name__', 'the function')} takes {n} "
                              "positional arguments")
    return tuple(int(a) % n for a in nums)


_TRANSFORMS = collections.OrderedDict()
# the most recently used transformations kept: each holds its function (and the arrays the
# function closes over), so a new lambda per training step must not pile up
_TRANSFORMS_KEPT = 32


def _cached(kind, fn, make, options):
    """One Compiled per (transformation, function, options): adjit.grad(loss)(...) inside a
    training loop then reuses its programs instead of compiling every step."""
    if getattr(fn, "__self__", None) is not None and not isinstance(
            fn.__self__, (type, type(os))):
        # a bound method reads its object's arrays (self.W), which change between calls of
        # adjit.grad(model.loss) in a training loop: each such call traces anew, as JAX does
        return make()
    key = (kind, fn, tuple(sorted((k, repr(v)) for k, v in options.items())))
    try:
        c = _TRANSFORMS.get(key)
    except TypeError:
        return make()
    if c is None:
        c = _TRANSFORMS[key] = make()
        while len(_TRANSFORMS) > _TRANSFORMS_KEPT:
            _TRANSFORMS.popitem(last=False)
    else:
        _TRANSFORMS.move_to_end(key)
    return c


def _float_positions(g):
    return [k for k in range(_n_arg_inputs(g)) if g[g.inputs[k]]["dtype"].kind in "fc"]


def _aux_split(g, fn, has_aux, what):
    """(number of leading output leaves that are differentiated, their treedef, aux treedef)"""
    tree = g.meta["out_tree"]
    if not has_aux:
        return len(g.outputs), tree, None
    if tree[0] not in ("tuple", "list") or tree[1] != 2:
        raise GradError(f"{what} of {_fn_name(fn)} was called with has_aux=True, so "
                        f"{_fn_name(fn)} must return a pair (output, aux)")
    return pytree.num_leaves(tree[2][0]), tree[2][0], tree[2][1]


def _lift_like(x, node, what):
    """x (a cotangent or tangent leaf) as a tracer with the shape and dtype of `node`:
    a float64 cotangent for a float32 output is cast, as the output's own would be."""
    shape = x.shape if isinstance(x, Tracer) else np.shape(x)
    if tuple(shape) != tuple(node["shape"]):
        raise ShapeError(f"{what} has shape {tuple(shape)}, expected {tuple(node['shape'])}")
    if isinstance(x, Tracer):
        return x if x.dtype == node["dtype"] else F.cast(x, node["dtype"])
    return F.lift(x, node["dtype"], current())


def vjp(fn, *primals, has_aux=False, **compile_options):
    """(fn(*primals), vjp_fn) where vjp_fn(cotangent) gives one cotangent per primal; with
    has_aux, fn returns (output, aux) and vjp returns (output, vjp_fn, aux).

    The cotangent has the structure of fn's output (dict keys in any order); each leaf is
    cast to the output's dtype. Integer primals get None.

    >>> import numpy as np, adjit
    >>> y, f_vjp = adjit.vjp(lambda x: x * 3.0, np.array([1.0, 2.0]))
    >>> f_vjp(np.array([1.0, 1.0]))
    (array([3., 3.]),)
    """
    from ..passes.autodiff import derive_adjoint
    if compile_options.get("donate_argnums"):
        raise OptionError("adjit.vjp does not take donate_argnums: its pullback reads the "
                          "primals again, so their buffers cannot receive the results; donate "
                          "in a compiled step instead (adjit.compile(step, donate_argnums=...))")
    out = _cached("vjp_primal", fn, lambda: _primal_program(fn, compile_options),
                  compile_options)(*primals)
    if has_aux:
        _aux_pair(out, fn, "vjp")

    def make():
        @functools.wraps(fn)
        def traced(primals, cotangent):
            g = trace(fn, *primals, differentiated=True)
            n_main, main_tree, _ = _aux_split(g, fn, has_aux, "vjp")
            pos = _float_positions(g)
            main = list(range(n_main))
            j = derive_adjoint(g, pos, seed="inputs", outputs=main)
            ct_leaves = pytree.flatten_like(cotangent, main_tree, "vjp cotangent")
            cts = [_lift_like(x, g[g.outputs[k]], f"vjp: the cotangent for output {k}")
                   for k, x in zip(main, ct_leaves)]
            outs, _ = replay(j, _outer_leaves(primals, (), g) + cts)
            res = list(outs[len(g.outputs):])
            leaves = [res.pop(0) if k in pos else None for k in range(_n_arg_inputs(g))]
            result, k = [], 0
            for tree in g.meta["in_trees"]:
                m = pytree.num_leaves(tree)
                result.append(pytree.unflatten(tree, leaves[k:k + m]))
                k += m
            return tuple(result)
        return Compiled(traced, name=f"vjp_{_fn_name(fn)}", **compile_options)

    back = _cached("vjp" + ("_aux" if has_aux else ""), fn, make, compile_options)
    # the pullback belongs to these primals: a copy, so that the caller updating them in
    # place (or rebinding a dict entry) before calling vjp_fn does not move the point
    vjp_fn = functools.partial(_call_vjp, back, pytree.copy_arrays(tuple(primals)))
    return (out[0], vjp_fn, out[1]) if has_aux else (out, vjp_fn)


def _call_vjp(back, primals, cotangent):
    return back(primals, cotangent)


def _aux_pair(out, fn, what):
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise GradError(f"{what} of {_fn_name(fn)} was called with has_aux=True, so "
                        f"{_fn_name(fn)} must return a pair (output, aux)")


def jvp(fn, primals, tangents, **compile_options):
    """(fn(*primals), J tangents): forward mode. tangents has the structure of primals;
    each leaf is cast to its primal's dtype.

    >>> import numpy as np, adjit
    >>> adjit.jvp(lambda x: x ** 3, (np.array(2.0),), (np.array(1.0),))
    (array(8.), array(12.))
    """
    from ..passes.autodiff import derive_tangent
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("jvp(fn, primals, tangents): primals and tangents must be tuples or "
                        "lists with one entry per argument of fn, e.g. jvp(f, (x,), (v,))")

    def make():
        @functools.wraps(fn)
        def traced(primals, tangents):
            g = trace(fn, *primals, differentiated=True)
            pos = _float_positions(g)
            trees = tuple(g.meta["in_trees"])
            t_leaves = pytree.flatten_like(tuple(tangents), ("tuple", len(trees), trees),
                                           "jvp tangents (they need the structure of primals)")
            ts = [_lift_like(t_leaves[k], g[g.inputs[k]],
                             f"jvp: the tangent for {g[g.inputs[k]]['name']}") for k in pos]
            tg = derive_tangent(g, pos)
            outs, _ = replay(tg, _outer_leaves(primals, (), g) + ts)
            n = len(g.outputs)
            tree = g.meta["out_tree"]
            return pytree.unflatten(tree, outs[:n]), pytree.unflatten(tree, outs[n:])
        return Compiled(traced, name=f"jvp_{_fn_name(fn)}", **compile_options)

    _check_integer_tangents(primals, tangents)
    return _cached("jvp", fn, make, compile_options)(tuple(primals), tuple(tangents))


def _primal_program(fn, compile_options):
    """fn compiled as the primal of a derivative: traced as differentiated, so a custom
    rule's function takes the rule's primal value (as in value_and_grad and JAX's vjp)."""
    c = Compiled(fn, **compile_options)
    c._differentiated = True
    return c


def _check_integer_tangents(primals, tangents):
    """A nonzero float tangent for an integer primal (jvp(f, (3,), (1.0,))) would be dropped
    silently (integers carry no derivative): refused, as JAX does; zeros (data) pass."""
    p_leaves = pytree.flatten(tuple(primals))[0]
    t_leaves = pytree.flatten(tuple(tangents))[0]
    for k, (p, t) in enumerate(zip(p_leaves, t_leaves)):
        if isinstance(p, Tracer) or isinstance(t, Tracer):
            continue
        if np.dtype(leaf_dtype(p)).kind in "biu" and np.dtype(leaf_dtype(t)).kind in "fc" \
                and np.any(_host(t) != 0):
            raise GradError(
                f"jvp: primal {k} has dtype {np.dtype(leaf_dtype(p))}, which carries no "
                "derivative, but its tangent is a nonzero float: pass the primal as a float "
                "(3.0, np.arange(4.0), x.astype(float)); data such as labels take a zero "
                "tangent (np.zeros_like(labels))")


def jacobian(fn=None, argnums=0, *, has_aux=False, static_argnums=(), **compile_options):
    """The Jacobian of fn with respect to args[argnums], structured as in JAX: for each
    output leaf of shape S and each input leaf of shape T an array of shape S + T, nested as
    the output's structure holding args[argnums]'s structure (a tuple of them when argnums is
    a tuple). With has_aux, fn returns (output, aux) and the result is (jacobian, aux).

    Uses reverse mode when the outputs are smaller than the inputs, forward mode otherwise.

    >>> import numpy as np, adjit
    >>> adjit.jacobian(lambda x: x * x)(np.array([1.0, 2.0]))
    array([[2., 0.],
           [0., 4.]])
    """
    if fn is None:      # @adjit.jacobian(argnums=1): a decorator with options
        return lambda f: jacobian(f, argnums, has_aux=has_aux,
                                  static_argnums=static_argnums, **compile_options)
    return _transformation(jacobian, fn, argnums, static_argnums, compile_options,
                           lambda static: _make_jacobian(fn, argnums, has_aux, static,
                                                         compile_options), has_aux=has_aux)


def _has_complex(td) -> bool:
    return td is not None and (td[0] == "complex" or (
        td[0] not in ("leaf", "none", "static") and any(_has_complex(c) for c in td[2])))


def _make_jacobian(fn, argnums, has_aux, static, compile_options):
    @functools.wraps(fn)
    def traced(*args):
        nums, many = _norm_argnums(argnums, len(args), static)
        g = trace(fn, *args, static_argnums=static, differentiated=True)
        n_main, main_tree, aux_tree = _aux_split(g, fn, has_aux, "jacobian")
        if _has_complex(main_tree) or any(_has_complex(g.meta["in_trees"][a]) for a in nums):
            raise GradError(
                f"jacobian (or hessian) of {_fn_name(fn)}{_defined_at(fn)} with complex "
                "arguments or results: a complex Jacobian has no single convention "
                "(holomorphic or not), so adjit gives none; pass and return the real and "
                "imaginary parts as real arrays (grad, vjp and jvp take complex values)")
        pos = _leaf_positions(g, args, static)
        wrt = [p for a in nums for p in pos[a]]
        check_differentiable(g, wrt, _fn_name(fn) + _defined_at(fn))
        outs_ = [g[g.outputs[k]] for k in range(n_main)]
        for k, d in enumerate(outs_):
            if d["dtype"].kind not in "fc":
                raise GradError(f"jacobian of {_fn_name(fn)}: output {k} has dtype "
                                f"{d['dtype']}; only floating-point outputs have derivatives")
        leaves = _outer_leaves(args, static, g)
        blocks = _jacobian_blocks(g, leaves, wrt, n_main)
        per_out = []
        for k in range(n_main):
            per_arg, q = [], 0
            for a in nums:
                m = len(pos[a])
                per_arg.append(pytree.unflatten(g.meta["in_trees"][a], blocks[k][q:q + m]))
                q += m
            per_out.append(tuple(per_arg) if many else per_arg[0])
        jac = pytree.unflatten(main_tree, per_out)
        if not has_aux:
            return jac
        prim, _ = replay(g, leaves)
        return jac, pytree.unflatten(aux_tree, prim[n_main:])
    return Compiled(fn, traced, static_argnums=static, name=f"jacobian_{_fn_name(fn)}",
                    **compile_options)


# the elements of the largest intermediate of one chunk of a Jacobian's stacked sweeps (32 MiB
# of float64; a backward holds several such at once): a bigger Jacobian is built in chunks
_STACK_ELEMENTS = 1 << 22


def _jacobian_blocks(g, leaves, wrt, n_main):
    """blocks[k][q]: d output k / d input wrt[q], shape out_k.shape + in_q.shape."""
    from ..passes.autodiff import derive_adjoint, derive_tangent
    ins = [g[g.inputs[p]] for p in wrt]
    outs = [g[g.outputs[k]] for k in range(n_main)]
    size = lambda d: int(math.prod(d["shape"]))  # noqa: E731
    n_in, n_out = sum(map(size, ins)), sum(map(size, outs))
    if n_in == 0 or n_out == 0:
        return [[F.zeros(tuple(do["shape"]) + tuple(di["shape"]), di["dtype"]) for di in ins]
                for do in outs]
    # an op that serves reverse mode only (a custom_vjp's rule: its bwd need not be linear)
    reverse = n_out <= n_in or any(OPS[g[n]["op"]].reverse_only for n in g.nodes())
    if reverse:     # a row of the Jacobian per output element: seeds are cotangents
        lin = derive_adjoint(g, wrt, seed="inputs", outputs=list(range(n_main)))
        seeded, got = outs, range(len(wrt))
    else:           # a column per input element: seeds are tangents
        lin = derive_tangent(g, wrt)
        seeded, got = ins, range(n_main)
    total = sum(map(size, seeded))
    varying, live = set(lin.inputs[len(leaves):]), live_nodes(lin)
    for n in lin.nodes():
        if n in live and any(a in varying for a in lin.args(n)):
            varying.add(n)
    # all basis seeds at once as one stack (frontend/batching.py), in chunks that keep the
    # largest stacked intermediate near _STACK_ELEMENTS (the shared ones are not stacked)
    widest = max([int(math.prod(lin[n]["shape"])) for n in varying] + [1])
    chunk = max(1, min(total, _STACK_ELEMENTS // widest))
    eye_rows = lambda lo, hi, d, off: np.eye(hi - lo, size(d), lo - off,  # noqa: E731
                                             dtype=d["dtype"])
    shared, pieces = None, [[] for _ in got]
    for lo in range(0, total, chunk):
        hi, off, seeds = min(total, lo + chunk), 0, []
        for d in seeded:
            seeds.append(F.lift(eye_rows(lo, hi, d, off).reshape((hi - lo,) + tuple(d["shape"])),
                                d["dtype"], current()))
            off += size(d)
        res, stacked, env = replay_batched(lin, leaves + seeds, [False] * len(leaves) +
                                           [True] * len(seeds), hi - lo, env=shared)
        if shared is None:      # the primal part, emitted once for all chunks
            shared = {n: t for n, t in env.items() if n not in varying}
        for j in got:
            r = len(g.outputs) + j
            pieces[j].append(with_stack(hi - lo, res[r], stacked[r]))
    full = [p[0] if len(p) == 1 else F.concatenate(p, 0) for p in pieces]
    parts = [[None] * len(wrt) for _ in outs]
    off = 0
    for s_, d in enumerate(seeded):
        for j in got:
            piece = F.slice_(full[j], (slice(off, off + size(d)),))     # (size(d), *shape_j)
            k, q = (s_, j) if reverse else (j, s_)
            parts[k][q] = piece
        off += size(d)
    blocks = []
    for k, do in enumerate(outs):
        row = []
        for q, di in enumerate(ins):
            shape = tuple(do["shape"]) + tuple(di["shape"])
            p = parts[k][q]
            if not reverse:     # (in size, *out shape): the input's axes go last
                p = F.reshape(p, (size(di), size(do)))
                p = F.transpose(p, (1, 0))
            # the input's dtype in both modes, as jax.jacobian (reverse mode) gives
            row.append(F.cast(F.reshape(p, shape), di["dtype"]))
        blocks.append(row)
    return blocks


def hessian(fn=None, argnums=0, *, has_aux=False, static_argnums=(), **compile_options):
    """The Hessian of a scalar fn with respect to args[argnums]: shape x.shape + x.shape
    (nested like jacobian for pytrees and argnums tuples, as in JAX). With has_aux, fn
    returns (loss, aux) and the result is (hessian, aux).

    >>> import numpy as np, adjit
    >>> adjit.hessian(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0]))
    array([[ 6.,  0.],
           [ 0., 12.]])
    """
    if fn is None:      # @adjit.hessian(argnums=1): a decorator with options
        return lambda f: hessian(f, argnums, has_aux=has_aux,
                                 static_argnums=static_argnums, **compile_options)
    def make(static):
        inner = _make_jacobian(_make_grad(fn, argnums, has_aux, static, {}), argnums, has_aux,
                               static, {})
        nested = _make_jacobian(_make_jacobian(fn, argnums, has_aux, static, {}), argnums,
                                has_aux, static, {})

        @functools.wraps(fn)
        def traced(*args):
            try:
                return inner._traced(*args)
            except GradError as e:
                if not getattr(e, "array_output", False):
                    raise
            # an array output: the Hessian of each element, shape out.shape + x.shape * 2
            return nested._traced(*args)
        return Compiled(fn, traced, static_argnums=static,
                        name=f"hessian_{_fn_name(fn)}", **compile_options)
    return _transformation(hessian, fn, argnums, static_argnums, compile_options, make,
                           has_aux=has_aux)


def hvp(fn=None, argnums=0, *, static_argnums=(), **compile_options):
    """h(*args, v) = (Hessian of fn at args) @ v, by forward mode over reverse mode; v has
    the structure of args[argnums] (a tuple of them when argnums is a tuple).

    >>> import numpy as np, adjit
    >>> adjit.hvp(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0]), np.array([1.0, 0.0]))
    array([6., 0.])
    """
    if fn is None:      # @adjit.hvp(argnums=1): a decorator with options
        return lambda f: hvp(f, argnums, static_argnums=static_argnums, **compile_options)
    if "has_aux" in compile_options:
        raise OptionError("hvp takes no has_aux: pass a function that returns the loss alone "
                          "(functools.partial or a lambda that drops the aux value)")
    return _transformation(hvp, fn, argnums, static_argnums, compile_options,
                           lambda static: _make_hvp(fn, argnums, static, compile_options))


def _make_hvp(fn, argnums, static, compile_options):
    from ..passes.autodiff import derive_tangent
    g_fn = _make_grad(fn, argnums, False, static, {})

    @functools.wraps(fn)
    def traced(*args_v):
        if len(args_v) < 2:
            raise TypeError(f"hvp of {_fn_name(fn)} is called as h(*args, v): the arguments "
                            "of the function, then the vector v")
        args, v = args_v[:-1], args_v[-1]
        nums, many = _norm_argnums(argnums, len(args), static)
        try:
            g = trace(g_fn, *args, static_argnums=static, differentiated=True)
        except (GradError, ShapeError) as e:
            if len(args_v) < 3:
                raise
            # SciPy's minimize calls hessp(x, p, *args): p lands among fn's arguments
            raise type(e)(f"{e} (hvp of {_fn_name(fn)} is called as h(*args, v), v last; "
                          "as SciPy's hessp, which receives (x, p, *args), pass "
                          "hessp=lambda x, p, *a: h(x, *a, p))") from None
        pos = _leaf_positions(g, args, static)
        wrt = [p for a in nums for p in pos[a]]
        trees = tuple(g.meta["in_trees"][a] for a in nums)
        v_leaves = pytree.flatten_like(v, ("tuple", len(trees), trees) if many else trees[0],
                                       "hvp: v (it needs the structure of args[argnums])")
        vs = [_lift_like(x, g[g.inputs[k]], "hvp: v (the last argument: h(*args, v); SciPy's "
                     "hessp(x, p, *args) is lambda x, p, *a: h(x, *a, p))")
          for x, k in zip(v_leaves, wrt)]
        n = len(g.outputs)
        # a custom rule's node was differentiated by its rule in the gradient: forward mode
        # goes through the code the rule ran (fwd and bwd), as JAX's jvp of grad does
        t = derive_tangent(g, wrt)
        outs, _ = replay(t, _outer_leaves(args, static, g) + vs)
        return pytree.unflatten(g.meta["out_tree"], outs[n:])
    c = Compiled(fn, traced, static_argnums=static, name=f"hvp_{_fn_name(fn)}",
                 **compile_options)
    c._tail_keyword = "v"
    return c


def vmap(fn=None, in_axes=0, out_axes=0, *, static_argnums=(), **compile_options):
    """fn mapped over an axis of its arguments, as jax.vmap: vmap(fn)(xs) stacks fn(x) for
    each x along xs's first axis, computed as one program over the stack (no Python loop).

    in_axes: an int (the mapped axis of every argument), None (not mapped: shared by all), or
    a tuple with one entry per positional argument, each an int, None, or a dict/list/tuple
    of them matching that argument's structure. out_axes: where the stack axis goes in each
    output (an int, or a structure matching the output). vmap composes with grad both ways:
    vmap(grad(loss), in_axes=(None, 0, 0))(w, X, y) gives per-example gradients, and
    grad(lambda w: np.sum(vmap(f, (None, 0))(w, X)))(w) differentiates through it.

    >>> import numpy as np, adjit
    >>> adjit.vmap(lambda a, b: a @ b, in_axes=(0, None))(np.ones((3, 2)), np.arange(2.0))
    array([1., 1., 1.])
    """
    if fn is None:      # @adjit.vmap(in_axes=...): a decorator with options
        return lambda f: vmap(f, in_axes, out_axes, static_argnums=static_argnums,
                              **compile_options)
    if "has_aux" in compile_options or "argnums" in compile_options:
        bad = "has_aux" if "has_aux" in compile_options else "argnums"
        raise OptionError(f"vmap takes no {bad}: in_axes says which arguments are mapped "
                          "(None for a shared one)")
    for bad in ("axis_size", "axis_name", "spmd_axis_name"):
        if bad in compile_options:
            raise OptionError(
                f"adjit.vmap has no {bad} (JAX's): the stack's length comes from the mapped "
                "arguments, and there are no collective operations over it; to map a function "
                "of no array, map an argument np.arange(n). vmap's options: in_axes, out_axes, "
                "static_argnums and the compile options (backend, fuse, checkpoint, ...)")
    for name, spec in (("in_axes", in_axes), ("out_axes", out_axes)):
        _check_axes_spec(spec, name)
    static = _static(static_argnums, fn)
    key = dict(compile_options, in_axes=in_axes, out_axes=out_axes, static=static)
    c = _cached("vmap", fn, lambda: Compiled(fn, _vmap_traced(fn, in_axes, out_axes, static),
                                            static_argnums=static,
                                            name=f"vmap_{_fn_name(fn)}", **compile_options),
                key)
    c._rebuild = lambda f, new=None: vmap(f, in_axes, out_axes,
                                          static_argnums=static if new is None else new,
                                          **compile_options)
    return c


def _is_axis(a):
    return a is None or (isinstance(a, (int, np.integer)) and not isinstance(a, bool))


def _check_axes_spec(spec, name):
    if _is_axis(spec):
        return
    if isinstance(spec, dict):
        children = spec.values()
    elif isinstance(spec, (tuple, list)):
        children = spec
    else:
        raise OptionError(f"vmap: {name} must be an int, None, or a tuple/list/dict of them "
                          f"matching the arguments' structure, got {spec!r}")
    for c in children:
        _check_axes_spec(c, name)


def _leaf_axes(spec, td, what):
    """The mapped axis of each leaf of a value with treedef td, spec being a prefix of its
    structure (an int or None for a whole subtree), as JAX reads in_axes and out_axes."""
    if _is_axis(spec):
        return [None if spec is None else int(spec)] * pytree.num_leaves(td)
    kind = td[0]
    if kind == "dict" and isinstance(spec, dict):
        keys = td[1]
        if set(spec) != set(keys):
            raise OptionError(f"vmap: {what} is a dict with keys {sorted(map(str, spec))}, the "
                              f"value's keys are {sorted(map(str, keys))}")
        return [a for k, c in zip(keys, td[2]) for a in _leaf_axes(spec[k], c, f"{what}[{k!r}]")]
    if kind in ("tuple", "list", "namedtuple") and isinstance(spec, (tuple, list)) and \
            len(spec) == len(td[2]):
        return [a for i, (sp, c) in enumerate(zip(spec, td[2]))
                for a in _leaf_axes(sp, c, f"{what}[{i}]")]
    shown = {"dict": "a dict", "tuple": "a tuple", "list": "a list", "namedtuple": "a namedtuple",
             "dataclass": "a dataclass", "complex": "a complex array", "leaf": "an array",
             "none": "None"}.get(kind, kind)
    n = f" of {len(td[2])}" if kind in ("tuple", "list", "namedtuple") else ""
    raise OptionError(f"vmap: {what} is {spec!r}, which does not match the value ({shown}"
                      f"{n}): give an int or None for the whole value, or the same structure")


def _mapped_value_needed(e, fn, args, specs):
    """A value needed while tracing (x[:n], np.arange(n)) that is a mapped argument of vmap:
    the usual advice (make it static) cannot apply, as each element has its own value."""
    from .trace import arg_names
    head, arg = getattr(e, "needed", (None, None))
    names = arg_names(fn, len(args))
    if arg is None or not any(spec is not None and i < len(names) and names[i] == arg
                              for i, spec in specs.items()):
        return
    raise TraceError(
        f"{head}, but {arg!r} is mapped by vmap: each element of the stack has its own value, "
        "so the value is not known while tracing and cannot be static. Write the computation "
        "for every length at once with a mask: x[:n].sum() is "
        "np.where(np.arange(len(x)) < n, x, 0).sum(), and np.arange(n) or np.zeros(n) become "
        "a fixed-length arange compared with n") from None


def _none_at(in_axes, i, n):
    """in_axes with None for argument i (for a message): a tuple with one entry each."""
    spec = list(in_axes) if isinstance(in_axes, (tuple, list)) else [in_axes] * n
    spec[i] = None
    return repr(tuple(spec))


def _vmap_traced(fn, in_axes, out_axes, static):
    @functools.wraps(fn)
    def traced(*args):
        name = _fn_name(fn) + _defined_at(fn)
        pos = [i for i in range(len(args)) if i not in static]
        if isinstance(in_axes, (tuple, list)):
            if len(in_axes) != len(args):
                raise OptionError(
                    f"vmap of {name}: in_axes {in_axes!r} has {len(in_axes)} entries for "
                    f"{len(args)} arguments; give one per positional argument (None for one "
                    "that is not mapped)")
            specs = {i: in_axes[i] for i in pos}
            for i in static:
                if in_axes[i] is not None:
                    raise OptionError(f"vmap of {name}: argument {i} is static "
                                      "(static_argnums), so its in_axes must be None")
        else:
            specs = {i: in_axes for i in pos}
        full, example, flags, sizes = [], list(args), [], []
        for i in pos:
            leaves, td, paths = pytree.flatten(args[i], f"argument {i}")
            axes = _leaf_axes(specs[i], td, f"in_axes for argument {i}")
            ex = []
            for x, a, path in zip(leaves, axes, paths):
                if a is None:
                    full.append(x)
                    flags.append(False)
                    ex.append(x)
                    continue
                shape = tuple(np.shape(x))
                if not -len(shape) <= a < len(shape):
                    fix = (f"give None for argument {i} to share it with every element "
                           f"(in_axes={_none_at(in_axes, i, len(args))})" if not shape else
                           f"give an axis from {-len(shape)} to {len(shape) - 1}, or None to "
                           "share it")
                    raise ShapeError(f"vmap of {name}: in_axes {a} for {path}, which has shape "
                                     f"{shape}: there is no such axis to map over; {fix}")
                a %= len(shape)
                if shape[a] == 0:
                    raise ShapeError(f"vmap of {name}: the mapped axis of {path} has length 0; "
                                     "adjit traces fn on one element of the stack, so it needs "
                                     "at least one")
                xt = x if isinstance(x, Tracer) else F.lift(np.asarray(x),
                                                             np.asarray(x).dtype, current())
                moved = F.transpose(xt, (a,) + tuple(k for k in range(len(shape)) if k != a))
                sizes.append((shape[a], path))
                full.append(moved)
                flags.append(True)
                ex.append(F.slice_(moved, (0,)))
            example[i] = pytree.unflatten(td, ex)
        if not sizes:
            raise OptionError(f"vmap of {name}: no argument is mapped (in_axes {in_axes!r}); "
                              "map at least one (an int in in_axes), or call the function "
                              "itself")
        n = sizes[0][0]
        for m, path in sizes[1:]:
            if m != n:
                raise ShapeError(f"vmap of {name}: the mapped axes differ in size: "
                                 f"{sizes[0][1]} has {n}, {path} has {m}; every mapped "
                                 "axis must have the same length")
        try:
            g = trace(fn, *example, static_argnums=static)
        except TraceError as e:
            _mapped_value_needed(e, fn, args, specs)
            raise
        inputs = [x if isinstance(x, Tracer) else F.lift(x, g[nid]["dtype"], current())
                  for x, nid in zip(full, g.inputs)] + list(g.meta.get("captured", ()))
        flags += [False] * len(g.meta.get("captured", ()))
        outs, stacked, _ = replay_batched(g, inputs, flags, n)
        axes = _leaf_axes(out_axes, g.meta["out_tree"], "out_axes")
        result = []
        for k, (y, b, a) in enumerate(zip(outs, stacked, axes)):
            if a is None:
                if b:
                    raise OptionError(
                        f"vmap of {name}: out_axes is None for output {k}, but it differs "
                        "along the mapped axis; give it an axis (0) or return a value that "
                        "does not depend on the mapped arguments")
                result.append(y)
                continue
            y = with_stack(n, y, b)
            nd = y.ndim
            if not -nd <= a < nd:
                raise ShapeError(f"vmap of {name}: out_axes {a} for output {k} of shape "
                                 f"{tuple(y.shape[1:])}: the stacked result has {nd} axes")
            a %= nd
            perm = list(range(1, nd))
            perm.insert(a, 0)
            result.append(F.transpose(y, tuple(perm)))
        return pytree.unflatten(g.meta["out_tree"], result)
    return traced


def gradcheck(fn, *args, argnums=0, eps=1e-6, has_aux=False, static_argnums=(),
              backend="numpy", **kwargs):
    """Largest relative error |g - n| / max(|g|, |n|, 1e-8) between adjit's gradient on
    `backend` and central differences of the NumPy backend's program, in float64 (the seeds'
    formula); CuPy arguments are copied to the host first. It checks the derivative of what
    adjit computes: compare the value with fn run eagerly to check the forward too. With has_aux, fn returns (loss,
    aux) as for grad. Central differences carry a noise of about |f| 1e-16 / eps: an entry
    of the gradient far smaller than that (a weight that barely moves the loss) reads as a
    large relative error although it is right; compare such gradients another way. A
    function that computes in float32 whatever its arguments (x.astype(np.float32)) is
    differenced with eps = 1e-3 when eps is left at its default (1e-6 would measure float32
    rounding). Other keyword arguments are passed to fn.

    >>> import numpy as np, adjit
    >>> adjit.gradcheck(lambda x: np.sum(np.sin(x)), np.array([0.3, 1.2])) < 1e-8
    True
    """
    if kwargs:
        fn = functools.partial(fn, **kwargs)
    default_eps = eps == 1e-6
    if any(type(a) is str for a in args):     # a mode or an activation's name: static
        static_argnums = tuple(_static(static_argnums, fn)) + tuple(
            i for i, a in enumerate(args) if type(a) is str)
    def f64(x):
        a = _host(x)
        return a.astype(np.float64) if a.dtype.kind == "f" else a
    static = _static(static_argnums, fn)
    args = [a if i in static else
            pytree.unflatten(pytree.flatten(a)[1], [f64(x) for x in pytree.flatten(a)[0]])
            for i, a in enumerate(args)]
    nums, _ = _norm_argnums(argnums, len(args), static)
    gs = grad(fn, tuple(nums), has_aux=has_aux, static_argnums=static, backend=backend)(*args)
    if has_aux:
        gs = gs[0]
    f = compile(fn, backend="numpy", static_argnums=static)
    if default_eps:
        out = pytree.flatten(f(*args))[0]
        kind = np.asarray(out[0]).dtype if out else np.dtype(np.float64)
        if kind.kind == "f" and kind.itemsize < 8:
            eps = 1e-3 if kind.itemsize == 4 else 3e-2
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
            gx = _host(gx).astype(np.float64).reshape(-1)
            with np.errstate(invalid="ignore"):
                err = np.abs(gx - num) / np.maximum(np.maximum(np.abs(gx), np.abs(num)), 1e-8)
            # a nan on one side only is an infinite error (max() would skip it); equal
            # infinities and nan on both sides agree
            err = np.where((gx == num) | (np.isnan(gx) & np.isnan(num)), 0.0, err)
            err = np.where(np.isnan(err), np.inf, err)
            worst = max(worst, float(err.max()) if err.size else 0.0)
    return worst


def leaf_dtype(x):
    """The dtype of a leaf: a CuPy array's without a copy, else as the frontend reads it (a
    Python float's is float64)."""
    if hasattr(x, "__cuda_array_interface__"):
        return np.dtype(x.dtype)
    return F._dtype_of(x)


def _host(x):
    """A NumPy array of x (a CuPy array's copy on the host)."""
    return np.asarray(x.get() if hasattr(x, "__cuda_array_interface__") else x)


def leaf_shape(x):
    return leaf_spec(x, "x")[0]
