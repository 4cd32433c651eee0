"""Symbolic arrays: a `Tracer` records every NumPy operation applied to it into an ir.Graph.

`TraceContext` owns the graph being built; `emit` adds one node after checking its shape rule.
Each node remembers the user's file:line (the first stack frame outside adjit's internals).
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import sys
import threading

import numpy as np

from ..ir.errors import ShapeError, TraceError, UnsupportedError
from ..ir.graph import Graph, Where
from ..ir.ops import OPS

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# frames in these folders are adjit's machinery; nn/ counts as user code so its lines show
_INTERNAL = tuple(os.path.join(_PKG, d) + os.sep for d in ("ir", "frontend", "passes",
                                                          "backends"))
_INTERNAL_FILES = (os.path.join(_PKG, "__init__.py"),)
# NumPy's and SciPy's own Python code calls NumPy on the user's behalf: the user's line is
# further out
_LIBRARIES = (os.path.dirname(os.path.abspath(np.__file__)) + os.sep,)
_SCIPY = os.sep + "scipy" + os.sep

_state = threading.local()
# a source line that stores into an indexed array: `a[i] = ...`, `a[i] += ...`
# collected writes whose result is at most this many contiguous runs of the old value and
# the written ones are joined from slices (else one gather)
_RUNS = 8
_SOURCES = 16    # collected writes one read may gather from (Tracer.read_pending) at most
_BOXES = 4      # collected writes placed box by box (see Tracer._boxes) at most


def _is_zero_const(g, n):
    """Is node n a constant of zeros, +0.0 (seen through broadcasts and reshapes)?"""
    from ..passes.simplify import constant_value
    v = constant_value(g, n)
    return v is not None and v.dtype.kind in "biuf" and not v.any() and \
        not np.signbit(v).any()
_STORE = re.compile(r"\]\s*(?:[-+*/@%&|^]|//|\*\*)?=(?!=)")
# X.dot(W) with X a NumPy array and W traced: ndarray.dot asks W for its numbers
_DOT = ("If X.dot(W) on this line has X a NumPy array and W traced, write X @ W or "
        "np.dot(X, W) (NumPy's ndarray.dot asks W for its numbers, not adjit). Else: ")
# a NumPy scalar type called on the line (np.float64(np.sum(x)), numpy.int32(n))
_SCALAR_TYPE = re.compile(r"\b(?:np|numpy)\.((?:float|int|uint|complex)(?:8|16|32|64|128)?|"
                          r"double|single|half|longdouble|intp|bool_?)\s*\(")


def _stack():
    if not hasattr(_state, "stack"):
        _state.stack = []
    return _state.stack


def current():
    """The innermost active TraceContext, or None."""
    s = _stack()
    return s[-1] if s else None


def user_where(frame=None) -> Where | None:
    """The user's file:line: the first frame outside adjit's internals (and NumPy's and
    SciPy's code), from `frame` outwards (default: the caller)."""
    override = getattr(_state, "where", None)
    if override is not None and frame is None:
        return override
    f = frame if frame is not None else sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if (not fn.startswith(_INTERNAL) and fn not in _INTERNAL_FILES and "importlib" not in fn
                and not fn.startswith(_LIBRARIES) and _SCIPY not in fn):
            return Where(fn, f.f_lineno)
        f = f.f_back
    return None


@contextlib.contextmanager
def where_override(where: Where | None):
    """Attribute every node emitted inside to `where` (used by VJP rules and replays)."""
    old = getattr(_state, "where", None)
    _state.where = where
    try:
        yield
    finally:
        _state.where = old


class TraceContext:
    """Builds one Graph; `with ctx:` makes it the target of NumPy calls on tracers."""

    def __init__(self, differentiated=False):
        self.graph = Graph()
        # will this graph be differentiated (traced by grad, jacobian, jvp, ...), or is it
        # made inside one that will? Then its own backward passes keep second derivatives
        # (see passes/autodiff.py's _guarded)
        outer = current()
        self.differentiated = differentiated or (outer is not None and outer.differentiated)
        # arrays of enclosing traces that the traced function closes over: outer tracer ->
        # the input of this graph that stands for it (see `capture`)
        self.captured = {}
        # 0-d values computed from Python scalar arguments alone (1 + t, 0.9 ** t): they stay
        # weakly typed, as the Python numbers they stand for would (a float32 array stays
        # float32 when combined with them)
        self.weak = set()
        # Buffers that received traced values (frontend/buffer.py): their memory is NaN, so a
        # NumPy view of one taken before (np.broadcast_to(c, ...)) must not become a constant
        self.promoted = []
        self.buffers = []     # weak references to the Buffers made in this trace
        self.tables = {}      # numpy_api.Table constants of this trace, by memory layout

    def capture(self, t: "Tracer") -> "Tracer":
        """An input of this graph standing for `t`, a tracer of an enclosing (still active)
        trace that the function closes over, as in `grad(lambda y: f(x, y))(y0)` inside a
        traced function of x. Inside this trace it is a constant (no gradient flows to it
        here); whoever replays this graph passes `t` for it (`graph.meta["captured"]`), so
        enclosing transformations still differentiate through it."""
        key = (id(t.ctx), t.id)
        got = self.captured.get(key)
        if got is None:
            node = t.ctx.graph[t.id]
            got = self.input(t.shape, t.dtype, f"captured_{node['name'] or 'v%d' % t.id}",
                             where=node["where"])
            if (node["op"] == "input" and node["attrs"].get("weak")) or t.id in t.ctx.weak:
                self.graph[got.id]["attrs"]["weak"] = True
            self.captured[key] = got
            # a snapshot: `t` itself may be assigned into later (x[i] = ...) in its trace
            self.graph.meta.setdefault("captured", []).append(Tracer(t.ctx, t.id))
        return got

    def __enter__(self):
        from .numpy_api import constructors_accept_tracers
        self._restore = constructors_accept_tracers()
        _stack().append(self)
        return self

    def __exit__(self, *exc):
        _stack().pop()
        self._restore()

    def input(self, shape, dtype, name, where=None) -> "Tracer":
        nid = self.graph.add("input", (), shape, dtype, {"shape": tuple(shape),
                             "dtype": np.dtype(dtype)}, name=name, where=where)
        self.graph.inputs.append(nid)
        return Tracer(self, nid)

    def emit(self, op, args, attrs=None, where=None, name=None) -> "Tracer":
        """Add one node; args are Tracers of this context. Checks the op's shape rule."""
        attrs = attrs or {}
        opdef = OPS[op]
        stack = _stack()
        if not stack:
            raise TraceError(
                f"{'' if op == 'const' else op + ': '}an array traced inside a function was "
                "used after that function's "
                f"trace ended{_at(where or user_where())}; a traced value escaped (stored in "
                "an object attribute, a global or a container). Return the values you need "
                "from the traced function (has_aux=True for a gradient) and use those.")
        if stack[-1] is not self:
            # an operation on a closed-over array of an enclosing trace (or on one that
            # escaped a finished trace): it belongs to the innermost trace, which captures
            # the array as an input, or refuses it below
            return stack[-1].emit(op, args, attrs, where, name)
        if any(a.ctx is not self for a in args):
            args = list(args)
            for i, a in enumerate(args):
                if a.ctx is self:
                    continue
                if any(c is a.ctx for c in stack):
                    args[i] = self.capture(a)
                    continue
                raise TraceError(
                    f"{op}: an array from a trace that has already finished was used here"
                    f"{_at(where or user_where())}; a traced value escaped its function (stored "
                    "in a global, a default argument or an object attribute). Pass it to the "
                    "function as an argument instead, or return it from the traced function.")
        shapes = [a.shape for a in args]
        dtypes = [a.dtype for a in args]
        where = where or user_where()
        try:
            shape = tuple(int(d) for d in opdef.shape(shapes, attrs))
            dtype = opdef.dtype(dtypes, attrs)
        except (AssertionError, ValueError, IndexError, TypeError) as e:
            shown = " and ".join(str(s) for s in shapes)
            raise ShapeError(f"{op}: shapes {shown} do not fit{_at(where)}: {e}") from None
        nid = self.graph.add(op, [a.id for a in args], shape, dtype, attrs, name, where)
        out = Tracer(self, nid)
        if opdef.alias is not None and args and not _scalar(args[0]) and not (
                opdef.alias == "view-or-copy" and _copies(args[0], opdef, attrs)):
            # NumPy returns a view here: remember how it derives from the array that owns the
            # data, so assignments through either side are seen by the other (see Tracer)
            out.view_of(args[0], op, attrs, writable=opdef.alias != "read-only")
        return out


def _scalar(t) -> bool:
    """A 0-d tracer that is not a view stands for a NumPy scalar (np.sum(x), x[i] of a 1-D
    array, Python-number arithmetic): immutable, so `acc += v` makes a new value and a
    reshape of it is a copy. (0-d arrays made with np.zeros(()) or np.array(...) are Buffers,
    which keep NumPy's in-place rules.)"""
    return not t.shape and t.base is None


def _copies(src, opdef, attrs) -> bool:
    """Does NumPy copy when applying this op to src (a reshape of a transposed or strided
    view)? Asked of an array with src's strides (np.empty: no memory is touched)."""
    if src.base is None and src.arg_strides is None:
        return False  # adjit's own arrays are C-contiguous
    probe = src.layout_probe()
    return not np.may_share_memory(opdef.numpy(probe, **attrs), probe)


def base_probe(t) -> np.ndarray:
    """An int8 array laid out as the array t stands for (t owns its data): C-contiguous, or
    with the strides of the argument it stands for (`arg_strides`, in elements, set when the
    argument is not C-contiguous: a Fortran array, every other row)."""
    strides = t.arg_strides
    if strides is None:
        return np.empty(t.shape, np.int8)
    shape = tuple(t.shape)
    if 0 in shape:
        return np.empty(shape, np.int8, order="F" if strides != tuple(sorted(
            strides, reverse=True)) else "C")
    lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
    buf = np.empty(hi - lo + 1, np.int8)
    return np.lib.stride_tricks.as_strided(buf[-lo:], shape, strides)


def _at(where) -> str:
    return f" at {where}" if where is not None else ""


def _at_lib(where) -> str:
    """_at(where), naming the NumPy function the user called when the caller runs inside
    NumPy's own Python code: for the errors of a value adjit cannot give there (a bool, a
    concrete array, an unsupported function), not for a user's shape or axis mistake."""
    lib = _library_call() if where is not None else None
    return _at(where) + (_inside(lib) if lib is not None else "")


# what to write instead of a NumPy function whose own Python code adjit cannot follow
_INSTEAD = {"poly1d": "np.polyval(c, x) evaluates a polynomial of traced coefficients c"}


def _inside(lib):
    hint = next((f"; {v}" for k, v in _INSTEAD.items() if f".{k}." in f".{lib}."), "")
    return (f", inside {lib} (NumPy's own Python code for it, which ran on the traced array: "
            "adjit does not implement this function; compute it outside the traced function, "
            f"or write it with the NumPy functions adjit supports{hint})")


def _library_call(frames=None):
    """The NumPy function the user called ('numpy.polynomial.polynomial.polyadd') when the
    caller (or the innermost of `frames`, listed innermost first) is inside NumPy's own
    Python code, else None. SciPy's are named by trace.py's _name_the_library."""
    if frames is None:
        frames, f = [], sys._getframe(2)
        while f is not None:
            frames.append(f)
            f = f.f_back
    name = None
    for f in frames:
        fn = f.f_code.co_filename
        if fn.startswith(_INTERNAL) or fn in _INTERNAL_FILES or "importlib" in fn:
            continue
        if _SCIPY in fn:
            return None
        if not fn.startswith(_LIBRARIES):
            return name     # the user's frame: the outermost NumPy frame was the call
        name = f"{f.f_globals.get('__name__', '?')}.{f.f_code.co_qualname}"
    return None


_NUMPY_TESTING = os.path.join(os.path.dirname(np.__file__), "testing") + os.sep


def _numpy_testing_call():
    """The np.testing function the user called, when a traced value reached one."""
    f, name = sys._getframe(2), None
    while f is not None:
        if f.f_code.co_filename.startswith(_NUMPY_TESTING):
            name = f.f_code.co_name
        elif name is not None and not f.f_code.co_filename.startswith(
                (os.path.dirname(np.__file__),) + _INTERNAL):
            return name
        f = f.f_back
    return None


class _LayoutError(UnsupportedError, AttributeError):
    """x.strides & co. of a traced array: an AttributeError too, so hasattr(x, "strides") in a
    library is False, as for any attribute a Tracer lacks."""


class Tracer:
    """A symbolic array: shape and dtype known, value not. Supports NumPy's protocols.

    Assignment (`x[i] = v`, `x += v`, `out=x`) is functional underneath: the tracer object is
    rebound to a new node (`assign`) and its version `ver` goes up. A tracer made by a view op
    (basic indexing, reshape, transpose) keeps NumPy's aliasing: `base` is the tracer owning
    the data, `chain` the view ops from it, and `bver` the version it was derived from. A view
    whose base changed is re-derived from the base on its next use; an assignment into a view
    writes through to the base.
    """
    __slots__ = ("ctx", "_id", "_shape", "dtype", "base", "chain", "bver", "ver", "_pending",
                 "_zero_known", "arg_strides")
    __array_priority__ = 1000

    def __init__(self, ctx, nid):
        node = ctx.graph[nid]
        self.ctx, self._id, self._shape, self.dtype = ctx, nid, node["shape"], node["dtype"]
        self.base, self.chain, self.bver, self.ver = None, (), 0, 0
        # the strides (in elements) of the argument this tracer stands for, when it is not
        # C-contiguous (set by the trace; see base_probe)
        self.arg_strides = None
        self._pending, self._zero_known = None, (None, False)

    @property
    def shape(self):
        return self._shape

    @shape.setter
    def shape(self, value):
        raise UnsupportedError(f"setting x.shape reshapes the array in place{_at(user_where())}; "
                               "write x = x.reshape(...) instead")

    @property
    def id(self):
        """The node holding this array's current value."""
        if self._pending is not None:
            self._materialize()
        b = self.base
        if b is not None and b.ver != self.bver:
            self._rederive()
        return self._id

    # -- assignment --------------------------------------------------------------------------
    def assign(self, value: "Tracer"):
        """Make this array hold `value` (same shape and dtype) from now on, as NumPy's in-place
        writes do: views of it, and the array it is a view of, see the change."""
        assert value.shape == self.shape and value.dtype == self.dtype
        if self.base is not None:
            self.base.assign_at(self.positions(), value)
            return
        value = self._own(value)
        self._pending, self._id = None, value.id
        self.ver += 1

    def _own(self, value: "Tracer") -> "Tracer":
        """value as a tracer of this array's trace: a closed-over value of an enclosing trace
        written into an array made in this one (h[:, 0] = x in a grad of a closure over x) is
        captured as an input here, as any op on it would be; its node id is the other
        trace's."""
        if value.ctx is self.ctx:
            return value
        if not any(c is value.ctx for c in _stack()):
            raise TraceError(
                f"an array from a trace that has already finished was written here"
                f"{_at(user_where())}; a traced value escaped its function (stored in a global, "
                "a default argument or an object attribute). Pass it to the function as an "
                "argument instead, or return it from the traced function.")
        return self.ctx.capture(value)

    def assign_at(self, pos: np.ndarray, value: "Tracer"):
        """Write `value` (shape pos.shape, this array's dtype) at the flat positions `pos` of
        this array; where a position is listed twice the last write wins, as in NumPy.
        Writes are collected and become nodes on the next read (`_materialize`), so a loop
        filling rows costs one concatenation instead of one full-size select per row."""
        assert value.shape == pos.shape and value.dtype == self.dtype
        if self.base is not None:
            self.base.assign_at(self.positions().reshape(-1)[pos], value)
            return
        if pos.size == 0:
            return
        value = self._own(value)
        vid = value.id  # the value as of now (reading it may re-derive a view of self first)
        if self._pending is None:
            # the base, the writes, and for each position the last write to it (-1: none)
            self._pending = (self._id, [], np.full(self.size, -1, np.intp))
        writes, last = self._pending[1], self._pending[2]
        last[pos.reshape(-1)] = len(writes)
        writes.append((pos.reshape(-1), vid, user_where()))
        self.ver += 1

    def read_pending(self, pos: np.ndarray):
        """The node for the elements at flat positions `pos` (any shape) from the few
        collected writes (and the old value) that hold them, joined, so reading needs no
        materialization: `out[i-1]` after `out[i-1] = ...` is that write's value, and
        `y[a:b] += frame` in an overlap-add loop reads the tail of the previous frame and
        untouched zeros rather than all of y for every frame. Elements in many runs from a
        few writes (an element block K[np.ix_(dofs, dofs)] += ke in an assembly loop) are
        gathered write by write and put in order. Untouched elements of a fresh np.zeros
        array are zeros, not a read of it. None when there are no collected writes, or the
        elements come from too many writes."""
        if self._pending is None or pos.size == 0:
            return None
        flat = pos.reshape(-1)
        w = self._pending[2][flat]
        bounds = np.flatnonzero(np.diff(w)) + 1
        where = user_where()
        if len(bounds) + 1 <= _RUNS:
            starts, ends = np.r_[0, bounds], np.r_[bounds, flat.size]
            vid = self._joined([self._piece(int(w[a]), flat[a:b], where)
                                for a, b in zip(starts, ends)], where)
        else:
            # (a large part of the array read back in many runs, a stencil's u[1:-1, :-2]
            # after u[1:-1, 1:-1] = ...: materialized, the writes placed as boxes)
            sources = np.unique(w)
            if len(sources) > _SOURCES or 4 * flat.size > self.size:
                return None
            order = np.argsort(w, kind="stable")
            ws = w[order]
            cuts = np.flatnonzero(np.diff(ws)) + 1
            pieces = [self._piece(int(ws[a]), flat[order[a:b]], where)
                      for a, b in zip(np.r_[0, cuts], np.r_[cuts, flat.size])]
            joined = self._joined(pieces, where)
            back = np.empty_like(order)
            back[order] = np.arange(order.size)      # element i of pos is joined[back[i]]
            c = self.ctx.graph.add("const", [], back.shape, back.dtype,
                                   {"value": back, "dtype": back.dtype}, None, where)
            vid = self._node("gather", [joined, c], {"key": (("a", 0),)}, where)
        return vid if pos.shape == (flat.size,) else self._node("reshape", [vid],
                                                                {"shape": pos.shape}, where)

    def _piece(self, k, want, where):
        """The node of the elements at flat positions `want` as write k left them (k < 0:
        the value before the writes)."""
        g = self.ctx.graph
        base_id, writes, _ = self._pending
        if k < 0:
            if self._zero_base():
                z = np.zeros((), self.dtype)
                c = g.add("const", [], (), self.dtype, {"value": z, "dtype": self.dtype},
                          None, where)
                return self._node("broadcast_to", [c], {"shape": (want.size,)}, where)
            src, j = base_id, want
        else:
            wpos, src, _ = writes[k]
            order = np.argsort(wpos, kind="stable")
            j = order[np.searchsorted(wpos[order], want, side="right") - 1]  # last write
        n = int(math.prod(g[src]["shape"]))
        if g[src]["shape"] != (n,):
            src = self._node("reshape", [src], {"shape": (n,)}, where)
        if j.size == n and (np.diff(j) == 1).all() and j[0] == 0:
            return src                  # the whole value of one write
        if j.size == 1 or (np.diff(j) == 1).all():
            return self._node("slice", [src], {"index": (slice(int(j[0]),
                                                                int(j[0]) + j.size),)}, where)
        c = g.add("const", [], j.shape, j.dtype, {"value": j, "dtype": j.dtype}, None, where)
        return self._node("gather", [src, c], {"key": (("a", 0),)}, where)

    def _joined(self, pieces, where):
        return pieces[0] if len(pieces) == 1 else self._node("concatenate", pieces,
                                                             {"axis": 0}, where)

    def _zero_base(self) -> bool:
        """Is the value before the collected writes a constant of zeros (np.zeros)? Known
        once per run of writes (the base is the same until they are materialized)."""
        base_id = self._pending[0]
        if self._zero_known[0] != base_id:
            self._zero_known = (base_id, _is_zero_const(self.ctx.graph, base_id))
        return self._zero_known[1]

    def unwritten(self, pos: np.ndarray) -> bool:
        """Do the collected writes leave the flat positions `pos` untouched?"""
        return self._pending is not None and bool(
            (self._pending[2][pos.reshape(-1)] < 0).all())

    def positions(self) -> np.ndarray:
        """The flat positions in `base` of each element of this view (shape: self.shape)."""
        for op, _, _, writable in self.chain:
            if not writable:
                raise UnsupportedError(f"assignment destination is read-only: this view "
                                       f"({op}: np.broadcast_to or np.diagonal) cannot be "
                                       f"written, as in NumPy{_at(user_where())}")
        return self._chain_positions()

    def _chain_positions(self) -> np.ndarray:
        from .functions import flat_positions
        pos = flat_positions(self.base.shape)
        for op, attrs, consts, _ in self.chain:
            pos = OPS[op].numpy(pos, *consts, **attrs)
        return np.asarray(pos)

    def _node(self, op, ids, attrs, where=None):
        g = self.ctx.graph
        d = [g[i] for i in ids]
        shape = tuple(int(v) for v in OPS[op].shape([x["shape"] for x in d], attrs))
        return g.add(op, ids, shape, OPS[op].dtype([x["dtype"] for x in d], attrs), attrs,
                     None, where or user_where())

    def _materialize(self):
        """The collected writes as nodes: the written values (and what is left of the old
        value) concatenated flat in the array's order, else concatenated as written and
        gathered once."""
        base_id, writes, _ = self._pending
        self._pending = None
        where = writes[-1][2]  # the nodes are the writes': named after the last one's line
        size = self.size
        idx = np.arange(size, dtype=np.intp)
        sources, offset = [(base_id, size)], size
        for pos, vid, _ in writes:
            idx[pos] = offset + np.arange(pos.size)
            sources.append((vid, pos.size))
            offset += pos.size
        used = np.zeros(offset, bool)
        used[idx] = True
        remap, kept, start, n_kept = np.full(offset, -1, np.intp), [], 0, 0
        for sid, n in sources:
            if used[start:start + n].any():
                remap[start:start + n] = n_kept + np.arange(n)
                kept.append(sid if self.ctx.graph[sid]["shape"] == (n,) else
                            self._node("reshape", [sid], {"shape": (n,)}, where))
                n_kept += n
            start += n
        idx = remap[idx]

        def joined():
            return kept[0] if len(kept) == 1 else self._node("concatenate", kept, {"axis": 0},
                                                             where)
        if n_kept == size and np.array_equal(idx, np.arange(size)):
            flat = joined()
        else:
            starts = np.concatenate([[0], np.flatnonzero(np.diff(idx) != 1) + 1])
            if len(starts) <= _RUNS:
                # a few contiguous runs (hs[:t] *= c, a block of rows): slices joined, one
                # copy, where a gather by an index array is several times slower
                whole = joined()
                ends = np.append(starts[1:], size)
                parts = [self._node("slice", [whole], {"index": (slice(int(idx[a]),
                                                                       int(idx[a]) + int(b - a)),)},
                                    where) for a, b in zip(starts, ends)]
                flat = parts[0] if len(parts) == 1 else self._node(
                    "concatenate", parts, {"axis": 0}, where)
            else:
                boxed = self._boxes(base_id, writes, where)
                if boxed is not None:
                    self._id = boxed
                    return
                flat = self._in_order(kept, idx, where)
                if flat is None:
                    c = self.ctx.graph.add("const", [], idx.shape, idx.dtype,
                                           {"value": idx, "dtype": idx.dtype}, None, where)
                    flat = self._node("gather", [joined(), c], {"key": (("a", 0),)}, where)
        self._id = flat if self.shape == (size,) else self._node("reshape", [flat],
                                                                  {"shape": self.shape}, where)

    def _in_order(self, kept, idx, where):
        """The kept sources (flat, laid end to end: idx indexes them) cut where the array's
        order leaves one and joined in that order: elements written from the last to the
        first (a back substitution x[i] = ... for i = n-1, ..., 0) become one concatenation
        of the writes, with no gather after it (whose backward would not know that every
        element is read once). None when that takes many more pieces than there are
        sources (scattered single writes into a large array: one gather is cheaper)."""
        sizes = np.array([int(math.prod(self.ctx.graph[k]["shape"]))
                          for k in kept], np.intp)
        first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        begins = np.zeros(idx.size, bool)
        begins[0] = True
        begins[1:] = np.diff(idx) != 1
        source_starts = np.zeros(int(sizes.sum()), bool)
        source_starts[first] = True
        begins |= source_starts[idx]
        starts = np.flatnonzero(begins)
        if len(starts) > len(kept) + _RUNS:
            return None
        ends = np.append(starts[1:], idx.size)
        which = np.searchsorted(first, idx[starts], side="right") - 1
        pieces = []
        for a, b, k in zip(starts.tolist(), ends.tolist(), which.tolist()):
            off = int(idx[a] - first[k])
            if off == 0 and b - a == sizes[k]:
                pieces.append(kept[k])
            else:
                pieces.append(self._node("slice", [kept[k]],
                                         {"index": (slice(off, off + b - a),)}, where))
        return pieces[0] if len(pieces) == 1 else self._node("concatenate", pieces,
                                                             {"axis": 0}, where)

    def _boxes(self, base_id, writes, where):
        """A few writes that each fill a box of the array in C order (u[1:-1, 1:-1] = x, a
        column, a border row) as one unslice each, selected over the old value (nothing to
        select over a fresh zeros array): one strided copy per write, where a gather would
        read an index table as large as the array. None when the writes are not such."""
        if len(writes) > _BOXES or not self.shape:
            return None
        from .functions import basic_positions
        boxes = []
        for pos, vid, _ in writes:
            coords = np.unravel_index(pos, self.shape)
            lo = [int(c.min()) for c in coords]
            hi = [int(c.max()) + 1 for c in coords]
            index = tuple(slice(a, b) for a, b in zip(lo, hi))
            box = tuple(b - a for a, b in zip(lo, hi))
            if int(np.prod(box)) != pos.size or not np.array_equal(
                    pos, basic_positions(self.shape, index)):
                return None
            boxes.append((index, box, vid))
        g = self.ctx.graph
        cur = base_id if g[base_id]["shape"] == self.shape else self._node(
            "reshape", [base_id], {"shape": self.shape}, where)
        zeros = _is_zero_const(g, base_id)
        for k, (index, box, vid) in enumerate(boxes):
            if g[vid]["shape"] != box:
                vid = self._node("reshape", [vid], {"shape": box}, where)
            placed = self._node("unslice", [vid], {"index": index, "shape": self.shape}, where)
            if k == 0 and zeros:
                cur = placed
                continue
            mask = np.zeros(self.shape, bool)
            mask[index] = True
            m = g.add("const", [], mask.shape, mask.dtype, {"value": mask, "dtype": mask.dtype},
                      None, where)
            cur = self._node("where", [m, placed, cur], {}, where)
        return cur

    def _rederive(self):
        b = self.base
        if b._pending is not None:
            # the base has collected writes: its value here may still be one write's value
            nid = b.read_pending(self._chain_positions())
            if nid is not None:
                self._id, self.bver = nid, b.ver
                return
        nid = self.base.id
        g = self.ctx.graph
        for op, attrs, consts, _ in self.chain:
            cids = [g.add("const", [], c.shape, c.dtype, {"value": c, "dtype": c.dtype}, None,
                          user_where()) for c in consts]
            nid = self._node(op, [nid] + cids, attrs)
        self._id, self.bver = nid, self.base.ver

    def view_of(self, src: "Tracer", op, attrs, consts=(), writable=True):
        """Mark this array as NumPy's view of src made by op (consts: its index arrays;
        writable=False for a read-only view)."""
        self.base = src.base if src.base is not None else src
        self.chain = src.chain + ((op, attrs, tuple(consts), writable),)
        self.bver = self.base.ver

    def layout_probe(self) -> np.ndarray:
        """An int8 array with this view's shape and strides relative to its base. A view made
        by a gather (np.diagonal, an einsum diagonal, windows) is no strided view NumPy would
        keep contiguous: its probe is a strided one (contiguous in neither order)."""
        probe = base_probe(self.base if self.base is not None else self)
        for op, attrs, consts, _ in self.chain:
            probe = OPS[op].numpy(probe, *consts, **attrs)
        if any(op == "gather" for op, _, _, _ in self.chain) and probe.size > 1:
            probe = np.empty(tuple(d * 2 for d in probe.shape), np.int8)[
                tuple(slice(None, None, 2) for _ in probe.shape)]
        return probe

    def copy_(self) -> "Tracer":
        """A new array with this one's current value (NumPy's copy: no aliasing). A copy of a
        closed-over array of an enclosing trace made inside an inner one (g = a.copy() in a
        grad of a closure) belongs to the inner trace, which may then write into it."""
        cur = current()
        if cur is not None and cur is not self.ctx and any(c is self.ctx for c in _stack()):
            return Tracer(cur, cur.capture(self).id)
        return Tracer(self.ctx, self.id)

    # -- array attributes -----------------------------------------------------------------
    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(math.prod(self.shape))

    @property
    def T(self):
        from . import functions as F
        return F.transpose(self)

    @property
    def mT(self):
        from . import functions as F
        return F.swap_last(self)

    def __len__(self):
        if not self.shape:
            raise TypeError(f"len() of unsized object (a 0-d traced array){_at(user_where())}, "
                            "as in NumPy: a 0-d array has no length or items")
        return self.shape[0]

    def __round__(self, ndigits=None):
        """round(x, 2) of an array is np.round(x, 2), as in NumPy (an array, not a number)."""
        from . import functions as F
        return F.round_(self, ndigits or 0)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __repr__(self):
        from ..ir.printer import type_str
        return f"Tracer(v{self.id}: {type_str(self.shape, self.dtype)})"

    # -- values are unknown while tracing ---------------------------------------------------
    def argument_hint(self) -> str:
        """For an error about a value that must be a constant: when this one is (computed
        from) a Python number argument, a sentence saying to make that argument static."""
        from .functions import _is_weak
        if not _is_weak(self) and not (self.ctx.graph[self.id]["op"] == "input" and
                                       not self.shape):
            return ""
        d = self.ctx.graph[self.id]
        which = (f"the argument {d['name']!r}" if d["op"] == "input" else
                 "Python number arguments")
        return (f". It comes from {which}, and arguments are traced: a number that "
                "configures the computation (a quantile level, a bin count) is static "
                "configuration: mark it static (static_argnums=...) or make it keyword-only "
                "(def f(x, *, q=0.9)), one program per value")

    def _from_float_input(self):
        """Whether a float argument feeds this value (`if a > 0` on a float a is control flow
        on data, not configuration)."""
        g, seen, todo = self.ctx.graph, {self.id}, [self.id]
        while todo:
            n = todo.pop()
            if g[n]["op"] == "input" and np.dtype(g[n]["dtype"]).kind in "fc":
                return True
            for a in g.args(n):
                if a not in seen:
                    seen.add(a)
                    todo.append(a)
        return False

    def _concrete(self, what):
        w = user_where()
        if not _stack():
            # no trace runs: the value escaped one (model.params = params inside the loss)
            raise TraceError(
                f"{what}: an array traced inside a function was used after that function's "
                f"trace ended{_at_lib(w)}; a traced value escaped (stored in an object attribute, "
                "a global or a container: after adjit.grad, the model's attributes set inside "
                "the loss still hold traced values). Return the values you need from the "
                "traced function (has_aux=True for a gradient) and set them outside.")
        testing = _numpy_testing_call()
        if testing is not None:
            raise TraceError(
                f"np.testing.{testing} checks numbers, and a traced value has none while "
                f"tracing{_at_lib(w)}. Check the values the compiled function returns, outside it "
                "(return them, with has_aux=True for a gradient), or leave the assertion out "
                "of the traced function.")
        from .functions import _is_weak
        d = self.ctx.graph[self.id]
        if self.dtype.kind in "biu" and (_is_weak(self) or d["op"] == "input" and not
                                         self.shape) and not self._from_float_input():
            # a Python int argument, or an np.int64 one (range(n) with n = np.int64(3))
            which = (f"the value of the argument {d['name']!r}" if d["op"] == "input"
                     else "a value computed from Python int arguments")
            e = TraceError(
                f"{what} needs {which}{_at_lib(w)}, but arguments are traced: their "
                "values are not known while tracing. A Python int that sets an axis, a shape, "
                "a count or a position is configuration: mark it static (static_argnums=...) "
                "or make it keyword-only (def f(x, *, axis=1)), one program per value (a "
                "dataclass field: dataclasses.field(metadata={'static': True})). A "
                "number that changes every call (a step counter that picks the minibatch) "
                "would compile a program per call: take the batch outside (X[idx]) and pass "
                "it in as an argument.")
            # for vmap, whose mapped arguments cannot be static (api._mapped_value_needed):
            # what needed the value, and the argument's name
            e.needed = (f"{what} needs {which}{_at_lib(w)}",
                        d["name"] if d["op"] == "input" else None)
            raise e
        dot = _DOT if w is not None and ".dot(" in w.text and what.startswith(
            ("converting", "float", "int")) else ""
        if w is not None and _STORE.search(w.text) and what.startswith(("converting", "float",
                                                                          "int")):
            raise TraceError(
                f"{dot}a traced value is stored into a NumPy array{_at_lib(w)}, and a NumPy "
                "array can only hold numbers. adjit follows float arrays created inside the function "
                "with np.zeros, np.empty, np.ones, np.full, np.array (or the *_like forms), "
                "not the constructor np.ndarray(shape) (write np.empty(shape)); create the "
                "array there (an integer or boolean array cannot hold traced "
                "values: make it float), or collect the values in a list and np.stack them. "
                "A copy of an array from outside made by a method (X.copy(), X.astype(float), "
                "X * 1.0) is a plain NumPy array: copy it with np.array(X) or np.copy(X). "
                "Structured (record) dtypes are not followed: keep one array per field.")
        scalar = _SCALAR_TYPE.search(w.text) if w is not None and what.startswith(
            ("converting", "float", "int")) else None
        if scalar is not None:
            name = scalar.group(1)
            raise TraceError(
                f"np.{name}(...) of a traced value{_at_lib(w)}: NumPy's scalar types need a "
                f"number, which a traced value has only when the compiled function runs. Write "
                f"x.astype(np.{name}) (a 0-d traced value stays traced) or np.asarray(x, "
                f"np.{name}).")
        if dot and what.startswith("converting"):
            raise TraceError(f"X.dot(W) with X a NumPy array and W traced{_at_lib(w)}: NumPy's "
                             "ndarray.dot asks W for its numbers (it does not hand the call to "
                             "adjit); write X @ W or np.dot(X, W).")
        if what.startswith("converting"):
            advice = ("A NumPy or library function that adjit does not follow received a "
                      "traced array here, often inside a Python list: np.exp([a, b]) needs "
                      "np.stack([a, b]) first; X.dot(W) with X a NumPy array and W traced "
                      "needs X @ W or np.dot(X, W); np.float64(x), np.int64(x) (any NumPy "
                      "scalar type) of a traced value is x.astype(np.float64) (np.int64); "
                      "a NumPy array indexed by traced integers (table[idx]) must be an "
                      "argument, a copy made inside the function (np.array(table)[idx]), an "
                      "array a global or closure variable names directly, or one held up to "
                      "two levels into the dicts, lists and objects they name (TABLES['a'][idx], "
                      "self.params['w'][idx]); one held deeper or made by a NumPy function "
                      "((edges * 2)[idx]) is not. Use the NumPy "
                      "functions adjit supports (see adjit.frontend.numpy_api.FUNCTIONS), or "
                      "make the argument static "
                      "(static_argnums=...) if it is a configuration value.")
        elif what.startswith(("float", "int")):
            advice = ("math.exp, math.sqrt, float(), int() and np.float64() need a number: use "
                      "the NumPy function (np.exp, np.sqrt, ...) on the array instead, or make "
                      "the argument static (static_argnums=...) if it is a configuration value. "
                      "To print or log a value (the loss of a training step), return it "
                      "(has_aux=True for a gradient) and convert it outside.")
        elif what.startswith((".item", "formatting")):
            advice = ("The numbers exist only when the compiled function runs: return the value "
                      "(has_aux=True for a gradient) and format it outside.")
        elif what.startswith(("an index", "using")):
            advice = ("A shape or position that depends on traced values cannot be compiled: "
                      "keep the shape static and select with a mask instead (x[:k] becomes "
                      "adjit.where(np.arange(len(x)) < k, x, 0)), pick elements with traced "
                      "integer arrays (x[idx], np.take_along_axis), or make the argument static "
                      "(static_argnums=...; counts or sizes held in an array: pass them as a "
                      "tuple of numbers, one program per tuple).")
        else:
            advice = ("Python control flow on traced values cannot be compiled: use "
                      "adjit.where(cond, a, b) for an elementwise choice (np.maximum / "
                      "np.minimum instead of the builtins max(a, b) / min(a, b); np.max(x) / "
                      "np.min(x) for the largest or smallest element of one array x, "
                      "builtin max(x)), or make the argument "
                      "static (static_argnums=...) if it is a configuration value (a number "
                      "or a string: an array cannot be static, so branch on it with np.where).")
        kind = "a traced array" if self.shape else "a traced number"
        err = TraceError(f"{what} needs the value of {kind}, which is not known while "
                         f"tracing{_at_lib(w)}. {advice}")
        err.where = w
        raise err

    def __getattr__(self, name):
        # only reached for attributes a Tracer lacks: NumPy's array methods adjit does not
        # implement (x.searchsorted, x.put, x.resize, ...) are named, with the user's line
        if name == "__array_interface__" and \
                "stride_tricks" in sys._getframe(1).f_code.co_filename:   # as_strided
            raise UnsupportedError(
                f"as_strided (or another use of the raw memory layout) on a traced array"
                f"{_at(user_where())}: adjit has no strided views of its own making; use "
                "np.lib.stride_tricks.sliding_window_view, or im2col by fancy indexing")
        if name in ("strides", "ctypes", "data"):
            raise _LayoutError(
                f"x.{name} of a traced array{_at(user_where())}: adjit's arrays have no raw "
                "memory layout to read; frame a signal with np.lib.stride_tricks."
                "sliding_window_view(x, n)[::hop] (or fancy indexing, x[np.arange(n) + hop * "
                "np.arange(frames)[:, None]]) instead of as_strided with strides")
        if name == "at":
            raise AttributeError(
                f"x.at[...] is JAX's functional update, not NumPy's{_at(user_where())}: write "
                "y = x.copy(); y[i] = v (or y[i] += v, np.add.at(y, i, v)); adjit traces "
                "assignment as a functional update")
        if name.startswith("_") or not hasattr(np.ndarray, name):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raise AttributeError(f"the array method x.{name} is not supported by adjit on traced "
                             f"arrays{_at(user_where())}; write it with the NumPy functions "
                             "adjit supports (see adjit.frontend.numpy_api.FUNCTIONS)")

    def __format__(self, spec):
        if not spec:
            return str(self)
        self._concrete(f"formatting with {spec!r} (f\"{{x:{spec}}}\")")

    def __bool__(self):
        self._concrete("`if`/`while`/`and`/`or` (bool of an array)")

    def __float__(self):
        self._concrete("float()")

    def __int__(self):
        self._concrete("int()")

    def __index__(self):
        self._concrete("using a traced value as an index, count or size")

    def __array__(self, dtype=None, copy=None):
        self._concrete("converting to a concrete NumPy array (np.asarray, .item, printing)")

    def item(self, *args):
        self._concrete(".item()")

    def __copy__(self):
        return self.copy_()     # copy.copy of an array is a copy, not a view

    def __deepcopy__(self, memo):
        return self.copy_()

    @property
    def device(self):
        """The array API's device attribute (SciPy asks for it): adjit traces on the host."""
        return "cpu"

    def to_device(self, device, /, *, stream=None):
        return self

    def __array_namespace__(self, *, api_version=None):
        """The array API namespace of a traced array is NumPy's: its functions dispatch to the
        tracer (`__array_function__`, `__array_ufunc__`). SciPy's array-API code
        (`scipy.special.logsumexp`, `scipy.stats`) asks for it, and for whether the array may be
        assigned into, which a tracer may."""
        return np

    def tolist(self):
        self._concrete(".tolist()")

    # -- NumPy protocols: implemented in numpy_api.py ---------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        from .numpy_api import array_ufunc
        return array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        from .numpy_api import array_function
        return array_function(func, args, kwargs)

    __hash__ = object.__hash__
