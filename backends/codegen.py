"""Helpers shared by the code generators: identifiers, comments, literals, module loading.

Invariant: no user string reaches generated code except through `ident` (a sanitized
identifier) or `comment` (a line with control characters escaped, after a '#').
"""
from __future__ import annotations

import builtins
import hashlib
import keyword
import linecache
import re
import unicodedata

import numpy as np

from ..ir.printer import safe_text

# names the generated code reads: a user's argument called `float` or `range` is renamed
RESERVED = {"np", "math", "numba", "cupy", "cp", "prange"} | set(dir(builtins))


def ident(raw, fallback="a") -> str:
    """A Python identifier derived from a user string (argument name, dict key, path): its
    word characters (letters of any script: a user's α stays α, NFKC-normalized as Python
    reads identifiers), the rest replaced by _."""
    s = re.sub(r"\W+", "_", unicodedata.normalize("NFKC", str(raw))).strip("_")
    if s and not s.isidentifier():
        s = re.sub(r"\W+", "_", s, flags=re.ASCII).strip("_")
    if not s:
        s = fallback
    if s[0].isdigit():
        s = "_" + s
    if s.startswith("_"):
        s = fallback + s
    if keyword.iskeyword(s) or s in RESERVED or keyword.issoftkeyword(s):
        s += "_"
    return s


class Names:
    """Variable names for graph nodes: inputs keep the user's names, others are v<id>."""

    def __init__(self, g):
        self.g = g
        self.names = {}
        used = set()
        for i in g.inputs:
            base = ident(g[i]["name"] or f"in{i}")
            if re.fullmatch(r"(.*_)?v\d+", base) or base in used:
                base = f"{base}_in{i}"
                while base in used:    # f(x_in2, x, x_): x_ is x, and x_in2 is taken
                    base += "_"
            used.add(base)
            self.names[i] = base

    def __getitem__(self, n) -> str:
        if n not in self.names:
            name = self.g[n]["name"]
            self.names[n] = f"{ident(name)}_v{n}" if name else f"v{n}"
        return self.names[n]


def comment(text) -> str:
    return "# " + safe_text(text)


def node_comment(g, n) -> str:
    """`v12 = matmul(v3, v7)    mlp.py:18  h = x @ w1`, or the vjp/recompute variant."""
    d = g[n]
    args = ", ".join(f"v{a}" for a in d["args"])
    head = f"v{n} = {d['op']}({args})"
    w = d["where"]
    if w is None:
        return comment(head)
    if w.role:
        fwd = w.role
        return comment(f"{head:<32}  {fwd} ({w.short}  {w.text})")
    return comment(f"{head:<32}  {w.short}  {w.text}")


def literal(value, dtype) -> str:
    """Source for a scalar constant of the given dtype (only numbers reach this)."""
    dt = np.dtype(dtype)
    v = np.asarray(value).astype(dt).item()
    if dt.kind == "b":
        return "np.True_" if v else "np.False_"
    if dt.kind == "f" and dt.itemsize > 8:
        # a long double: its digits as a string, which np.longdouble parses in full (a
        # Python float literal would round it to float64's 17 digits)
        x = np.asarray(value).astype(dt)[()]
        if not np.isfinite(x):
            return f"np.{dt.name}({'np.nan' if np.isnan(x) else '-np.inf' if x < 0 else 'np.inf'})"
        return f"np.{dt.name}({np.format_float_positional(x, unique=True)!r})"
    if dt.kind == "f":
        r = repr(float(v))
        if r in ("inf", "-inf", "nan"):
            r = {"inf": "np.inf", "-inf": "-np.inf", "nan": "np.nan"}[r]
        return f"np.{dt.name}({r})"
    if dt.kind in "iu":
        return f"np.{dt.name}({int(v)})"
    raise TypeError(f"no literal for dtype {dt}")


def fmt_attr(v) -> str:
    """Source for an attribute value (ints, bools, tuples of ints, dtypes, index tuples)."""
    if isinstance(v, np.dtype):
        return f"np.{v.name}"
    if isinstance(v, (bool, np.bool_)):
        return repr(bool(v))
    if isinstance(v, (int, np.integer)):
        return repr(int(v))
    if isinstance(v, tuple):
        inner = ", ".join(fmt_attr(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    raise TypeError(f"attribute {v!r} has no source form")


def index_code(index) -> str:
    parts = []
    for k in index:
        if k is None:
            parts.append("None")
        elif isinstance(k, slice):
            s = "" if k.start is None else str(int(k.start))
            s += ":" + ("" if k.stop is None else str(int(k.stop)))
            parts.append(s if k.step is None else f"{s}:{int(k.step)}")
        else:
            parts.append(str(int(k)))
    return ", ".join(parts) + ("," if len(parts) == 1 else "")


def load_module(source: str, name: str, namespace: dict):
    """Exec generated source under a linecache-registered filename; returns the namespace."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:10]
    filename = f"<adjit:{name}:{digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    code = compile(source, filename, "exec")
    ns = dict(namespace)
    exec(code, ns)  # noqa: S102 - our own generated source, user strings escaped
    return ns, filename


def _extent(x):
    """[lo, hi) of the bytes array x can touch, or None when it has none."""
    if x.size == 0:
        return None
    lo = hi = x.__array_interface__["data"][0]
    for n, s in zip(x.shape, x.strides):
        if s < 0:
            lo += s * (n - 1)
        else:
            hi += s * (n - 1)
    return lo, hi + x.itemsize


def donatable_each(donated, others, contiguous=False) -> tuple:
    """For each array of `donated`: may a program write results over it? It must be a
    writable ndarray (C-contiguous if asked) whose memory overlaps no other argument's: a
    donated array passed twice, or a view of another argument, would be read after it was
    written. Each is judged alone, so one read-only or strided parameter does not keep the
    others from being updated in place. Overlap is judged by byte extents after one sort, so
    a step with hundreds of parameters checks them in microseconds (np.may_share_memory on
    every pair would take milliseconds)."""
    ok = []
    spans = []
    for d, group in ((True, donated), (False, others)):
        for x in group:
            k = len(ok) if d else None
            if d:
                ok.append(isinstance(x, np.ndarray) and x.flags.writeable
                          and (not contiguous or x.flags.c_contiguous))
            if not isinstance(x, np.ndarray):
                continue
            e = _extent(x)
            if e is not None:
                spans.append((e[0], e[1], k))
    spans.sort(key=lambda s: (s[0], s[1]))
    reach = -1
    for j, (lo, hi, k) in enumerate(spans):
        # overlaps an earlier span, or the next one (the later span starting first)
        if k is not None and (lo < reach or (j + 1 < len(spans) and spans[j + 1][0] < hi)):
            ok[k] = False
        reach = max(reach, hi)
    return tuple(ok)
