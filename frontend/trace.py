"""Tracing a Python function into an ir.Graph, and replaying a Graph into the current trace.

trace(fn, *args) -> Graph whose inputs are the array leaves of the non-static arguments (named
after the parameters and pytree paths) and whose outputs are the leaves of fn's result.
"""
from __future__ import annotations

import ast
import functools
import inspect
import os
import re

import numpy as np

from ..ir.errors import (AdjitError, AdjitWarning, GradError, LibraryError, TraceError,
                         UnsupportedError)
from ..ir.graph import Where
from . import pytree
from .buffer import resolve
from .tracer import (_INTERNAL, _INTERNAL_FILES, _LIBRARIES, _SCIPY, TraceContext, Tracer,
                     _at, _inside, _library_call, user_where, where_override)

_ASSIGN = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?::[^=]*)?=(?!=)")


def _definition(fn):
    """Where the user's function is defined (its inputs' place in printed IR and code)."""
    try:
        f = inspect.unwrap(fn)
    except ValueError:
        return None
    while isinstance(f, functools.partial):
        f = inspect.unwrap(f.func)
    code = getattr(f, "__code__", None)
    if code is None or code.co_filename.startswith(_ADJIT_DIRS):
        return None
    return Where(code.co_filename, code.co_firstlineno)


def arg_names(fn, n):
    """Parameter names of fn for n positional arguments (arg<i> where unknown)."""
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        names = [p.name for p in params][:n]
    except (TypeError, ValueError):
        names = []
    return names + [f"arg{i}" for i in range(len(names), n)]


_GENERATORS = (np.random.RandomState, np.random.Generator, np.random.BitGenerator)


def refuse_generator(v, what):
    """A random generator passed in (as an array or a static argument) would draw once, while
    tracing: every call of the program would reuse those numbers, silently."""
    if isinstance(v, _GENERATORS):
        raise TraceError(
            f"{what} is a random generator ({type(v).__name__}): a compiled function draws "
            "only while it is traced, so every call would reuse the same numbers (as in JAX). "
            "Draw the noise outside (eps = rs.randn(n, d)) and pass it in as an argument.")


def warn_generators(fn):
    """Warn when fn (or a Python function it calls by a global name, two levels deep) reads
    a NumPy random generator from a global or closure variable (rs.randn(...) inside a loss):
    the draws are made once, while tracing, and every call reuses them. np.random.* calls
    warn where they happen (numpy_api._warning_random); a generator's methods cannot be
    wrapped, so its use is found from the code's names."""
    import inspect
    import types
    import warnings
    seen, found = set(), []

    def visit(f, depth):
        f = inspect.unwrap(f)
        code = getattr(f, "__code__", None)
        if code is None or code in seen or not isinstance(f, types.FunctionType):
            return
        seen.add(code)
        if f.__module__ and f.__module__.split(".")[0] in ("adjit", "numpy", "scipy"):
            return
        cells = dict(zip(code.co_freevars, f.__closure__ or ()))
        codes = [code] + [c for c in code.co_consts if isinstance(c, types.CodeType)]
        for co in codes:
            for name in co.co_names + co.co_freevars:
                if name in cells:
                    try:
                        v = cells[name].cell_contents
                    except ValueError:
                        continue
                else:
                    v = f.__globals__.get(name)
                if isinstance(v, _GENERATORS):
                    found.append((name, type(v).__name__, f))
                elif depth and isinstance(v, types.FunctionType):
                    visit(v, depth - 1)
    visit(fn, 2)
    if found:
        name, kind, f = found[0]
        code = f.__code__
        warnings.warn_explicit(
            f"{getattr(f, '__name__', 'the function')} reads the random generator {name!r} "
            f"({kind}): its draws are made once, while adjit traces, and every call of the "
            "compiled function reuses those numbers (as in JAX). Draw the noise outside and "
            "pass it in as an argument.", AdjitWarning, code.co_filename, code.co_firstlineno)


def leaf_spec(leaf, what):
    """(shape, dtype, weak) of an argument leaf; Python scalars are weakly typed."""
    if isinstance(leaf, Tracer):  # a nested transformation: a weak argument stays weak
        from .functions import _is_weak
        return leaf.shape, leaf.dtype, _is_weak(leaf)
    if isinstance(leaf, (bool, int, float)) and not isinstance(leaf, np.generic):
        if isinstance(leaf, int) and not isinstance(leaf, bool) and \
                not -2**63 <= leaf < 2**64:
            raise OverflowError(f"argument {what} is the Python integer {leaf}, beyond int64 "
                                "and uint64; pass it as a float")
        return (), np.asarray(leaf).dtype, True
    refuse_generator(leaf, f"argument {what}")
    if hasattr(leaf, "__cuda_array_interface__"):   # a CuPy array refuses np.asarray
        if np.dtype(leaf.dtype).kind == "c":
            raise TraceError(f"argument {what} is a complex CuPy array: pass its real and "
                             "imaginary parts (z.real, z.imag) as two arrays, or a NumPy "
                             "array (complex NumPy arguments are split by adjit)")
        return tuple(leaf.shape), np.dtype(leaf.dtype), False
    if isinstance(leaf, np.matrix):
        raise TraceError(f"argument {what} is an np.matrix, whose * is a matrix product: adjit "
                         "traces plain arrays. Pass np.asarray(m) and write products with @")
    if isinstance(leaf, np.ma.MaskedArray):
        raise TraceError(f"argument {what} is a masked array: adjit traces plain arrays. Pass "
                         "the data and the mask as two arrays (np.ma.getdata(m), "
                         "np.ma.getmaskarray(m)) and select with np.where")
    try:
        a = np.asarray(leaf)
    except Exception as e:  # noqa: BLE001 - reported with the argument's name
        raise TraceError(f"argument {what} is not an array ({type(leaf).__name__}): {e}")
    if a.dtype == object or a.dtype.kind not in "biufc":
        hint = ""
        if a.dtype == object and a.ndim == 0:
            hint = (f" A {type(leaf).__name__} is not a container adjit looks into: arguments "
                    "may be arrays, numbers, and dicts, lists, tuples, namedtuples and "
                    "dataclass instances of them (pass its arrays in one of those; a hashable "
                    "configuration object may be static).")
            if what == "self":
                hint += (" For a compiled method, static_argnums=0 makes the instance static: "
                         "the arrays it holds are read at the first call, so pass parameters "
                         "that change (trained weights) as arguments.")
        if a.dtype == object and a.ndim > 0 and _numeric_objects(a):
            hint = (" Its elements are numbers (an array of Python objects, as mixed-type "
                    "loading makes): convert it with np.asarray(x, dtype=np.float64) or "
                    "x.astype(float) before the call.")
            raise TraceError(f"argument {what} has dtype object; adjit traces numeric arrays "
                             f"only.{hint}")
        if a.dtype.kind in "US":
            raise TraceError(
                f"argument {what} is an array of strings ({a.dtype}); adjit traces numeric "
                "arrays only, and a static argument must be hashable (not an array). For "
                "labels, compute integer codes before the call (u, codes = np.unique(labels, "
                "return_inverse=True)) and pass codes, or pass tuple(labels) with "
                "static_argnums (one compiled program per distinct tuple), or let the "
                "function read the array from a global or its closure")
        raise TraceError(f"argument {what} has dtype {a.dtype}; adjit traces numeric arrays "
                         f"only (pass other values as static arguments: static_argnums=...).{hint}")
    if a.dtype.kind == "c":  # pytree.py splits complex arrays; another complex object is not
        raise TraceError(f"argument {what} is complex ({a.dtype}) in a form adjit does not "
                         "split: pass a NumPy array, or its real and imaginary parts")
    # the program computes in the machine's byte order (a '>f8' argument is converted)
    return a.shape, (a.dtype if a.dtype.isnative else a.dtype.newbyteorder("=")), False


def _numeric(x) -> bool:
    from ..ir.errors import AdjitError
    try:
        a = np.asarray(x)
    except AdjitError:
        raise
    except Exception:  # noqa: BLE001 - not an array at all
        return False
    return a.dtype != object and a.dtype.kind in "biuf"


def trace(fn, *args, static_argnums=(), differentiated=False):
    """Trace fn on arguments like args into a Graph (values are only used for shapes/dtypes).

    A trace that fails because NumPy itself asked a traced value for its numbers (a plain
    array indexed by traced positions, class_weights[labels], gives NumPy no way to ask
    adjit) is traced once more with the arrays the user's modules and fn's closure hold seen
    as Tables (numpy_api.Table: indexable by traced positions); programs that trace without
    them never see a Table.

    >>> import numpy as np, adjit
    >>> g = adjit.trace(lambda x: np.sum(np.exp(x)), np.zeros(3))
    >>> [g[n]["op"] for n in g.nodes()]
    ['input', 'exp', 'sum']
    """
    from . import numpy_api
    from .tracer import current
    if current() is not None or numpy_api.tables_on():
        return _trace(fn, args, static_argnums, differentiated)
    try:
        return _trace(fn, args, static_argnums, differentiated)
    except TraceError as e:
        if not str(e).startswith(_TABLE_ERRORS):
            raise
        first = e
    with numpy_api.seeing_tables():
        try:
            return _trace(fn, args, static_argnums, differentiated)
        except TraceError as e:
            if str(e).startswith(_TABLE_ERRORS):
                raise first from None   # the same kind of failure: the first one's line
            raise   # the second trace got past the first's failure: the next problem


# the errors a second trace with Tables may avoid: NumPy asked a traced value for its
# numbers (table[idx]), or a traced value went into a copy a method made (W.copy())
_TABLE_ERRORS = ("converting to a concrete", "a traced value is stored into a NumPy array")


def _trace(fn, args, static_argnums, differentiated):
    static = {static_argnums} if isinstance(static_argnums, (int, np.integer)) else \
        set(static_argnums)
    names = arg_names(fn, len(args))
    defined = _definition(fn)
    ctx = TraceContext(differentiated)
    call_args = []
    in_trees = []
    arg_tracers = []
    with ctx:
        for i, (a, name) in enumerate(zip(args, names)):
            if i in static:
                call_args.append(a)
                in_trees.append(None)
                continue
            leaves, treedef, paths = pytree.flatten(a, name)
            tracers = []
            for leaf, path in zip(leaves, paths):
                shape, dtype, weak = leaf_spec(leaf, path)
                t = ctx.input(shape, dtype, path, where=defined)
                arg_tracers.append((path, t, t.id))
                if weak:
                    ctx.graph[t.id]["attrs"]["weak"] = True
                if _fortran(leaf):
                    ctx.graph[t.id]["attrs"]["fortran"] = True   # ravel('A') would read it so
                t.arg_strides = _arg_strides(leaf)
                if t.arg_strides is not None:     # a backend that copies strided values
                    ctx.graph[t.id]["attrs"]["strides"] = t.arg_strides   # counts the copy
                tracers.append(t)
            in_trees.append(treedef)
            call_args.append(pytree.unflatten(treedef, tracers))
        before = _containers(call_args, names)
        warn_generators(fn)
        from . import numpy_api
        tables = numpy_api.closure_tables(fn)   # a second trace: its closure's arrays as Tables
        try:
            out = fn(*call_args)
        except UserWarning as e:
            if not re.match(numpy_api._SHUFFLE_WARNING, str(e)):
                raise
            frames, tb = [], e.__traceback__
            while tb is not None:
                frames.append(tb.tb_frame)
                tb = tb.tb_next
            raise numpy_api._generic_shuffle(e, frames) from None
        except (AdjitError, AttributeError, TypeError, ValueError, IndexError) as e:
            if isinstance(e, ValueError) and isinstance(e.__cause__, TraceError) and \
                    "setting an array element" in str(e):
                # NumPy's own message for NumPy_array[i] = traced: float() of the tracer failed
                if "is stored into a NumPy array" in str(e.__cause__):
                    raise e.__cause__.with_traceback(None) from None   # names the line
                w = getattr(e.__cause__, "where", None)
                frames, tb = [], e.__traceback__
                while tb is not None:
                    frames.append(tb.tb_frame)
                    tb = tb.tb_next
                lib = _library_call(frames[::-1])
                if lib is not None:     # NumPy's own code stored it (np.polynomial.polyder)
                    raise TraceError(f"a traced value was stored into a NumPy array (NumPy "
                                     f"asked for its number){f' at {w}' if w else ''}"
                                     f"{_inside(lib)}") from e
                raise TraceError(
                    f"storing a traced value into a NumPy array made outside the function"
                    f"{f' at {w}' if w else ''} (NumPy asked for its number): create the array "
                    "inside the function (np.zeros(...)) and return it, or collect the values "
                    "in a list and np.stack them") from e
            _name_the_library(e)
            _name_the_unbound_method(e)
            _name_the_prebound_numpy(e)
            _name_the_post_init(e)
            _name_the_array_wrapper(e)
            raise
        finally:
            tables()
        _warn_mutated(before, fn, out)
        try:
            _warn_stored_in_objects(fn, ctx)
        except Exception:  # noqa: BLE001 - a look for a user's mistake must never fail a trace
            pass
        out_leaves, out_tree, _out_paths = pytree.flatten(out, "out")
        outs, weak_out = [], []
        from .functions import _is_weak
        for k, (leaf, path) in enumerate(zip(out_leaves, _out_paths)):
            leaf = resolve(leaf)
            if _is_weak(leaf):
                # a Python number (or arithmetic on Python-number arguments only) comes back as
                # one, as in NumPy: a step counter `t + 1` passed back in stays weak
                weak_out.append(k)
            if not isinstance(leaf, Tracer) and not _numeric(leaf):
                raise TraceError(
                    f"{getattr(fn, '__name__', 'the function')} returned "
                    f"{type(leaf).__name__} {leaf!r:.40}"
                    f"{'' if path == 'out' else ' as ' + path.replace('out', 'result', 1)}; "
                    "results (aux outputs included) must be arrays or numbers")
            if not isinstance(leaf, Tracer):
                from . import functions as F
                leaf = F.const(leaf)
            outs.append(leaf.id)
    _warn_written(arg_tracers, outs, fn)
    g = ctx.graph
    g.outputs = outs
    g.meta.update(in_trees=in_trees, out_tree=out_tree, fn_name=getattr(fn, "__name__", "fn"),
                  weak_out=tuple(weak_out))
    name_assignments(g)
    return g


def _fortran(x) -> bool:
    """Is x a Fortran-ordered (not C-ordered) array, whose order='A'/'K' reshapes NumPy reads
    column by column? A tracer of an enclosing trace (grad inside compile) counts as one when
    it is computed from a transposed or Fortran-ordered array, as the enclosing trace reads it."""
    if isinstance(x, Tracer):
        from .numpy_api import _transposed_upstream
        return len(x.shape) > 1 and _transposed_upstream(x)
    flags = getattr(x, "flags", None)
    if getattr(x, "ndim", 0) < 2 or flags is None or flags.c_contiguous:
        return False
    if flags.f_contiguous:
        return True
    # contiguous in neither order: an order='K' ravel reads its axes by decreasing stride, so
    # one whose strides do not decrease (every other column of a Fortran array, permuted
    # axes) is read in another order than C's
    strides = [abs(s) for s, d in zip(x.strides, x.shape) if d > 1]
    return any(a < b for a, b in zip(strides, strides[1:]))


def _arg_strides(leaf):
    """The strides in elements of an argument that is not C-contiguous (None for one that
    is): its tracer reshapes and copies as NumPy would (frontend/tracer.py's base_probe). An
    enclosing trace's tracer (grad inside compile, the inner trace of a transformation)
    passes on the layout it has there."""
    if isinstance(leaf, Tracer):
        if leaf.base is None and leaf.arg_strides is None:
            return None
        probe = leaf.layout_probe()
        return None if probe.flags.c_contiguous else tuple(int(s) for s in probe.strides)
    flags = getattr(leaf, "flags", None)
    if flags is None or getattr(leaf, "ndim", 0) < 1 or flags.c_contiguous \
            or not hasattr(leaf, "strides"):
        return None
    return tuple(int(st) // leaf.itemsize for st in leaf.strides)


def _numeric_objects(a) -> bool:
    """Does an object array hold only numbers (a float array loaded as objects)?"""
    import numbers
    return all(isinstance(v, numbers.Number) for v in a.flat[:1000])


def _containers(args, names):
    """(path, container, snapshot) of every dict and list the traced function receives."""
    found = []

    def walk(t, path):
        if isinstance(t, dict):
            found.append((path, t, {k: id(v) for k, v in t.items()}))
            for k, v in t.items():
                walk(v, f"{path}[{k!r}]")
        elif isinstance(t, list):
            found.append((path, t, [id(v) for v in t]))
            for i, v in enumerate(t):
                walk(v, f"{path}[{i}]")
        elif isinstance(t, tuple):
            for i, v in enumerate(t):
                walk(v, f"{path}[{i}]")
    for a, name in zip(args, names):
        walk(a, name)
    return found


def _warn_mutated(before, fn, out=None):
    """A dict or list argument changed by the traced function (bn_param['running_mean'] =
    ..., params[k] = new_w) and not returned: NumPy would have changed the caller's
    container; a compiled function cannot, so say so rather than drop the change silently.
    One that is returned (for k in p: p[k] = ...; return p) reaches the caller that way."""
    import warnings
    returned = {id(t) for _, t, _ in _containers([out], ["out"])}
    changed = []
    for path, t, snap in before:
        now = {k: id(v) for k, v in t.items()} if isinstance(t, dict) else [id(v) for v in t]
        if now != snap and id(t) not in returned:
            changed.append((path, t))
    if changed:
        w = user_where()
        kinds = sorted({type(t).__name__ for _, t in changed})
        warnings.warn_explicit(
            f"{getattr(fn, '__name__', 'the function')} changed its argument"
            f"{'s' if len(changed) > 1 else ''} {', '.join(p for p, _ in changed[:4])} (a "
            f"{' and a '.join(kinds)}) while being traced without returning "
            f"{'them' if len(changed) > 1 else 'it'}; the caller's {' and '.join(kinds)} is "
            "not updated by a compiled function (as in JAX). Return the new values (for "
            "running statistics or optimizer state) and assign them outside.",
            AdjitWarning, w.file if w else "<adjit>", w.line if w else 0)


_SCAN_LIMIT = 2000      # objects _warn_stored_in_objects looks at, at most


def _warn_stored_in_objects(fn, ctx):
    """A traced value left in an attribute of an object from outside the function (an
    optimizer's self.m = b1 * self.m + ..., layer.W = W - lr * dW in a compiled training
    step): the compiled program does not update the object between calls, so its state is
    the traced one every time and training silently stands still. Looked for in the objects
    the function closes over or names as globals and its bound instance, a few levels deep
    (not its arguments: their lists and dicts are the traced inputs themselves)."""
    import types
    import warnings
    user = fn
    while hasattr(user, "__wrapped__"):
        user = user.__wrapped__
    code = getattr(user, "__code__", None)
    roots = []
    for name, cell in zip(getattr(code, "co_freevars", ()), getattr(user, "__closure__", None)
                          or ()):
        try:
            roots.append((cell.cell_contents, name))
        except ValueError:           # a cell not yet assigned
            pass
    if getattr(user, "__self__", None) is not None:
        roots.append((user.__self__, "self"))
    glob = getattr(user, "__globals__", {})
    roots += [(glob[n], n) for n in getattr(code, "co_names", ()) if n in glob]
    plain = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type,
             types.MethodType, np.ndarray, np.generic, str, bytes, int, float, complex, bool)

    def ours(v):
        if isinstance(v, Tracer):
            return v.ctx is ctx
        return getattr(type(v), "_adjit_complex", False) and getattr(v.re, "ctx", None) is ctx

    seen, found, todo = set(), [], [(v, n, 0) for v, n in roots]
    while todo and len(seen) < _SCAN_LIMIT:
        obj, path, depth = todo.pop()
        if id(obj) in seen or obj is None or isinstance(obj, plain) or isinstance(obj, Tracer):
            continue
        seen.add(id(obj))
        if isinstance(obj, (list, tuple)):
            items = [(v, f"{path}[{k}]") for k, v in enumerate(obj[:64])]
        elif isinstance(obj, dict):
            items = [(v, f"{path}[{k!r}]") for k, v in list(obj.items())[:64]]
        else:
            attrs = getattr(obj, "__dict__", None)
            if not isinstance(attrs, dict) or type(obj).__module__.split(".")[0] in (
                    "builtins", "numpy", "scipy", "adjit", "functools"):
                continue
            items = [(v, f"{path}.{k}") for k, v in list(attrs.items())[:64]]
        for v, p in items:
            if ours(v):
                found.append(p)
            elif depth < 3:
                todo.append((v, p, depth + 1))
    if found:
        w = user_where()
        warnings.warn_explicit(
            f"{getattr(fn, '__name__', 'the function')} left traced values in "
            f"{', '.join(found[:4])}{' ...' if len(found) > 4 else ''} (attributes or items of "
            "objects from outside the function). A compiled function does not update such attributes "
            "between calls: state kept there (optimizer moments, weights updated in place) "
            "starts from the same traced values at every call, so training stands still. "
            "Return the new state and assign it outside, as in JAX (values cached there for "
            "use within the same call are fine).",
            AdjitWarning, w.file if w else "<adjit>", w.line if w else 0)


def _warn_written(arg_tracers, outs, fn):
    """An array argument written in place (param += -lr * dparam, x[0] = 0) whose new value
    is not returned: NumPy would have changed the caller's array, a compiled function does
    not (as in JAX), so the update would be lost silently."""
    import warnings
    lost = [path for path, t, first in arg_tracers if t.id != first and t.id not in outs]
    if lost:
        import inspect
        code = getattr(inspect.unwrap(fn), "__code__", None)
        warnings.warn_explicit(
            f"{getattr(fn, '__name__', 'the function')} wrote into its argument"
            f"{'s' if len(lost) > 1 else ''} {', '.join(lost[:4])} in place without returning "
            "the new value; the caller's array is not updated by a compiled function (as in "
            "JAX). Return the new values (params, optimizer state) and assign them outside "
            "(donate_argnums=... reuses the buffers).", AdjitWarning,
            code.co_filename if code else "<adjit>", code.co_firstlineno if code else 0)


_ADJIT_DIRS = _INTERNAL + _INTERNAL_FILES + _LIBRARIES


def _name_the_unbound_method(e):
    """np.ndarray.copy(x) (NumPy's method called through the class) on a traced array:
    Python's own TypeError names neither the line nor what to write."""
    m = re.search(r"descriptor '(\w+)' for 'numpy.ndarray' objects doesn't apply to a "
                  r"'(Tracer|Buffer)' object", str(e)) if isinstance(e, TypeError) else None
    if m is None:
        return
    tb, frame, masked = e.__traceback__, None, False
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not name.startswith(_ADJIT_DIRS):
            frame = tb.tb_frame
        masked = masked or f"{os.sep}numpy{os.sep}ma{os.sep}" in name
        tb = tb.tb_next
    where = _at(user_where(frame)) if frame is not None else ""
    if masked:      # np.ma.masked_array(x, mask) & co. of a traced x: NumPy's view of it
        raise TraceError(
            f"a masked array of a traced array (np.ma){where}: adjit traces plain arrays, and "
            "a masked array's operations skip its masked entries. Use the data and the mask "
            "as two arrays: np.where(mask, fill, x) to set the masked entries, "
            "np.sum(np.where(mask, 0, x)) for a masked sum, np.sum(~mask) for the count"
        ) from e
    name = m.group(1)
    raise TraceError(
        f"np.ndarray.{name}(x) calls NumPy's own method on a traced array"
        f"{_at(user_where(frame)) if frame is not None else ''}; traced arrays are not "
        f"np.ndarray instances (as in JAX). Write x.{name}(...)"
        f"{f' or np.{name}(x)' if hasattr(np, name) else ''} instead") from e


# NumPy functions without __array_function__ dispatch that adjit wraps on the np module while
# tracing: bound before (from numpy import kaiser) they run NumPy's own code on tracers
_WRAPPED_NUMPY = ("kaiser", "polyint")


def _name_the_prebound_numpy(e):
    if not isinstance(e, TraceError):
        return
    tb = e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name in _WRAPPED_NUMPY and os.sep + "numpy" + os.sep in code.co_filename:
            raise TraceError(
                f"np.{code.co_name} ran NumPy's own code on a traced array"
                f"{_at(user_where(tb.tb_frame.f_back))}: adjit follows it when called as "
                f"np.{code.co_name}(...) inside the function, not when bound before tracing "
                f"(from numpy import {code.co_name})") from e
        tb = tb.tb_next


def _innermost_user_frame(e):
    """The innermost frame of e's traceback that runs a line of the user's code, or None."""
    tb, frame = e.__traceback__, None
    while tb is not None:
        w = user_where(tb.tb_frame)
        if w is not None and w.file == tb.tb_frame.f_code.co_filename:
            frame = tb.tb_frame
        tb = tb.tb_next
    return frame


def _name_the_post_init(e):
    """An attribute that a dataclass argument's __post_init__ sets outside its fields is
    missing: adjit rebuilds dataclass arguments from their fields (traced) without calling
    __init__ or __post_init__. Say so, and what to do (only for a class with a
    __post_init__: another missing attribute is a misspelling, which Python's message says)."""
    import dataclasses
    obj, name = getattr(e, "obj", None), getattr(e, "name", None)
    if not isinstance(e, AttributeError) or name is None or obj is None or \
            not dataclasses.is_dataclass(obj) or isinstance(obj, type) or \
            name in {f.name for f in dataclasses.fields(obj)} or \
            not hasattr(type(obj), "__post_init__"):
        return      # (a misspelt attribute: Python's own message says it)
    cls = type(obj).__name__
    frame = _innermost_user_frame(e)      # where the attribute was read
    raise TraceError(
        f"{cls} has no attribute {name!r} here{_at(user_where(frame))}: adjit passes a dataclass "
        f"argument as its fields (traced) and rebuilds it without calling __init__ or "
        f"__post_init__, so attributes those set outside the fields are not there. Declare "
        f"it a field ({name}: np.ndarray = dataclasses.field(init=False), set in "
        f"__post_init__ before the call) or compute it inside the function") from e


def _name_the_array_wrapper(e):
    """NumPy's bare "object __array__ method not producing an array": a user's array-like
    object (a Param wrapping its values) gave a traced array from __array__ to a NumPy
    function. np.asarray(p) unwraps it (numpy_api._array_of_wrapper); say so."""
    if not isinstance(e, ValueError) or "__array__ method not producing an array" not in str(e):
        return
    frame = _innermost_user_frame(e)
    raise TraceError(
        f"a NumPy function received an object whose __array__ returns a traced array"
        f"{_at(user_where(frame)) if frame is not None else ''}: traced arrays are not "
        f"np.ndarray instances (as in JAX), so NumPy refuses it. Unwrap the object first: "
        f"np.asarray(obj) gives its traced array, or pass the array it holds (obj.a)") from e


def _name_the_library(e):
    """An error raised inside SciPy's code on traced arrays names the SciPy function the user
    called (scipy.linalg.solve_triangular, scipy.stats.norm.logpdf) and what adjit traces.
    The original error stays as the cause."""
    if getattr(e, "_adjit_library", False):
        return
    if isinstance(e, AdjitError) and not isinstance(e, (TraceError, UnsupportedError)):
        return      # a shape or option error inside a SciPy function adjit follows
    tb, frames = e.__traceback__, []
    in_user, called = False, None
    direct = True         # no user frame yet: adjit.compile(scipy.signal.fftconvolve) itself
    while tb is not None:
        fn = tb.tb_frame.f_code.co_filename
        if fn == "<stringsource>":      # Cython's own helpers (memoryviews) inside SciPy
            tb = tb.tb_next
            continue
        if _SCIPY in fn or fn.startswith("scipy" + os.sep):    # also Cython's frames
            if (in_user or direct) and called is None:
                called, frames = tb.tb_frame, []
            frames.append(tb.tb_frame)
        else:
            in_user = not fn.startswith(_ADJIT_DIRS)
            direct = direct and not in_user
            if called is not None and in_user:
                called = None       # SciPy called back into user code: the user's own error
        tb = tb.tb_next
    if called is None:
        return
    # the SciPy function the user called: the outermost frame that is not a decorator's
    named = next((f for f in frames if f.f_code.co_name not in _WRAPPERS and
                  not f.f_code.co_name.endswith("_wrapper")), called)
    mod = named.f_globals.get("__name__", "scipy")
    public = ".".join(p for p in mod.split(".") if not p.startswith("_")) or "scipy"
    name = f"{public}.{getattr(named.f_code, 'co_qualname', named.f_code.co_name)}"
    inner = named.f_locals.get("hypotest_fun_in")
    if named.f_code.co_name.endswith("_wrapper") and hasattr(inner, "__name__"):
        # scipy.stats' axis_nan_policy decorator, failing before it calls the function
        mod = getattr(inner, "__module__", None) or mod
        public = ".".join(p for p in mod.split(".") if not p.startswith("_")) or "scipy"
        name = f"{public}.{inner.__name__}"
    where = _at(user_where(called.f_back))
    method = named.f_locals.get("method") if named.f_code.co_name == "__ua_function__" else None
    if method is not None and hasattr(method, "__name__"):    # scipy.fft's uarray dispatch
        name = f"{getattr(method, '__module__', 'scipy.fft') or 'scipy.fft'}.{method.__name__}"
        name = name.replace("scipy.fft._realtransforms", "scipy.fft").replace(
            "scipy.fft._basic", "scipy.fft")
    if public.startswith(("scipy.fft", "scipy.fftpack")):
        instead = ("np.fft's transforms, or scipy.fft's fft/ifft/rfft/irfft/hfft and their "
                   "2-d and n-d forms, which adjit traces; a DCT-II is a matrix product with "
                   "the constant matrix 2 cos(pi k (2n + 1) / 2N), x @ C.T")
    elif public.startswith("scipy.signal"):
        instead = ("np.convolve or np.correlate for 1-d signals (scipy.signal picks an FFT "
                   "for large ones, which adjit cannot trace), or a sum of shifted slices or "
                   "np.einsum over sliding windows for 2-d")
    elif public.startswith("scipy.sparse"):
        instead = ("a dense constant, A.toarray() @ x, or the COO form: A = A.tocoo(); out = "
                   "np.zeros((A.shape[0],) + x.shape[1:]); np.add.at(out, A.row, "
                   "A.data[:, None] * x[A.col]) (adjit traces np.add.at)")
    elif public.startswith("scipy.spatial.transform"):
        instead = ("the rotation written out: a unit quaternion (x, y, z, w)'s matrix is "
                   "[[1 - 2(y^2 + z^2), 2(xy - zw), 2(xz + yw)], ...], a rotation vector's "
                   "Rodrigues' formula I + sin(t) K + (1 - cos(t)) K @ K")
    elif public.startswith("scipy.spatial"):
        instead = ("pairwise distances written with broadcasting: np.sqrt(np.sum((X[:, None] "
                   "- Y[None]) ** 2, -1)), or from X @ Y.T and the squared norms")
    elif public.startswith("scipy.stats") and named.f_code.co_name in (
            "pdf", "logpdf", "cdf", "logcdf", "sf", "logsf", "ppf", "isf", "pmf", "logpmf") \
            and isinstance(getattr(named.f_locals.get("self"), "name", None), str):
        dist = named.f_locals["self"].name
        instead = (f"call it as scipy.stats.{dist}.{named.f_code.co_name}(...) inside the "
                   f"function: adjit follows the distributions' methods then, not a method "
                   f"bound before tracing ({named.f_code.co_name} = "
                   f"{dist}.{named.f_code.co_name})")
    elif public.startswith("scipy.stats"):
        instead = ("the statistic or log-density written out: a log-density is a few "
                   "gammaln, xlogy and log terms of scipy.special, which adjit traces")
    elif public.startswith("scipy.special"):
        instead = ("the formula written out with the scipy.special functions adjit traces: "
                   "gammaln, digamma, xlogy, erf, ndtr, log_ndtr, expit, logsumexp, ...")
    else:
        instead = ("np.linalg.solve for triangular and Cholesky solves, np.linalg.cholesky, "
                   "the log-density formula written out")
    msg = (f"{name} (SciPy) needs concrete arrays, which a traced function does not have"
           f"{where}: adjit traces NumPy, scipy.special's elementwise functions and "
           "scipy.stats' univariate distributions, multivariate_normal, multinomial and "
           "dirichlet, not other SciPy routines (scipy.linalg, scipy.stats' statistics and "
           f"other distributions). Write it with NumPy ({instead}). (Inside SciPy: "
           f"{type(e).__name__}: {str(e)[:120]})")
    cls = type(e) if isinstance(e, AdjitError) and not isinstance(e, (
        TraceError, UnsupportedError)) else LibraryError
    try:
        new = cls(msg)
    except TypeError:
        return
    new._adjit_library = True
    raise new from e


_WRAPPERS = frozenset(("wrapper", "inner", "wrapped", "decorator", "decorated", "__call__",
                       "<lambda>", "fun", "func", "_wrapper"))


def name_assignments(g):
    """Give the last node of each `h = ...` source line the name `h` (shown as h_v12)."""
    last = {}
    for n in g.nodes():
        d = g[n]
        w = d["where"]
        if w is None or w.role or d["op"] in ("input", "const") or d["name"]:
            continue
        last[(w.file, w.line)] = n
    for (file, line), n in last.items():
        name = _assigned_name(Where(file, line).text)
        if name is not None:
            g[n]["name"] = name


@functools.lru_cache(maxsize=4096)
def _assigned_name(text):
    """`h` for a line that is one statement `h = ...` (or `h: T = ...`); None for a line of
    several statements (`e = np.exp(c); f = e * 2`: its last value is f, not e), for a part
    of a statement over several lines, and for other statements."""
    m = _ASSIGN.match(text)
    if not m or m.group(1) == "_":
        return None
    try:
        body = ast.parse(text).body
    except SyntaxError:
        return None
    if len(body) != 1 or not isinstance(body[0], (ast.Assign, ast.AnnAssign)):
        return None
    return m.group(1)


def _is_weak(t):
    from .functions import _is_weak as weak
    return weak(t)


def replay(graph, inputs, role=None, env=None, consume=()):
    """Emit graph's nodes into the current trace with `inputs` for its inputs.

    Returns (outputs, env) where env maps graph node ids to the new tracers. With `role`, the
    new nodes are marked (e.g. "recompute"); otherwise they keep their roles. `consume`:
    custom-rule nodes (frontend/custom.py) that the caller differentiates by their rules
    here; the new graph reads their primal value instead, so a later derivative goes through
    the code that computed it (fwd's), as JAX differentiates a rule's primal at an outer
    level.
    """
    env = dict(env or {})
    assert len(inputs) == len(graph.inputs)
    env.update(zip(graph.inputs, inputs))
    from .tracer import current
    ctx = current() or (inputs[0].ctx if inputs else None)
    for n in graph.nodes():
        if n in env:
            continue
        d = graph[n]
        if n in consume:
            env[n] = env[custom_primal(graph, n)]
            continue
        w = d["where"]
        if role is not None and w is not None:
            w = w.with_role(role)
        with where_override(w):
            env[n] = ctx.emit(d["op"], [env[a] for a in d["args"]], d["attrs"], where=w,
                              name=d["name"])
        if d["shape"] == () and d["args"] and all(
                _is_weak(env[a]) or graph[a]["op"] == "const" for a in d["args"]) and any(
                _is_weak(env[a]) for a in d["args"]):
            # arithmetic on Python-number arguments stays a Python number when a
            # transformation replays it (the aux value t + 1 of grad(..., has_aux=True));
            # arithmetic on constants alone does not (a cotangent seeded with 1.0)
            ctx.weak.add(env[n].id)
    for k in graph.meta.get("weak_out", ()):
        # a Python-number result of the replayed function (a literal, k + 1 of a static k)
        ctx.weak.add(env[graph.outputs[k]].id)
    return [env[o] for o in graph.outputs], env


def custom_primal(graph, n):
    """The value a custom-rule node n stands for: its first argument, seen through the
    stop_gradient that keeps the node's own level from differentiating it."""
    a = graph[n]["args"][0]
    return graph[a]["args"][0] if graph[a]["op"] == "stop_gradient" else a


def check_differentiable(graph, positions, fn_name):
    for p in positions:
        d = graph[graph.inputs[p]]
        if d["dtype"].kind == "c":
            raise GradError(
                f"cannot differentiate {fn_name} with respect to {d['name']} of dtype "
                f"{d['dtype']}: adjit differentiates real floating-point inputs only; pass "
                "the real and imaginary parts as separate float arrays")
        if d["dtype"].kind not in "fc":
            raise GradError(
                f"cannot differentiate {fn_name} with respect to {d['name']} of dtype "
                f"{d['dtype']}: only floating-point inputs have gradients. Convert it with "
                ".astype(np.float64) (for a Python number: pass 3.0, not 3), or leave it out "
                "of argnums (integer labels need no gradient; inside a dict or list that is "
                "differentiated, move them to an argument of their own).")
