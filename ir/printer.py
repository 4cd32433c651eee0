"""Text and Graphviz forms of a Graph: one line per node, in topological order.

`v7: f32[256,10] = add v5 v6    # loss.py:12  z = h @ W2.T + b2`
"""
from __future__ import annotations

import functools
import unicodedata

import numpy as np

_SHORT = {"float16": "f16", "float32": "f32", "float64": "f64", "int8": "i8", "int16": "i16",
          "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "bool"}


def type_str(shape, dtype) -> str:
    dt = _SHORT.get(np.dtype(dtype).name, np.dtype(dtype).name)
    return f"{dt}[{','.join(str(d) for d in shape)}]"


@functools.lru_cache(maxsize=4096)
def _safe(s: str) -> str:
    if s.isprintable():   # Python's printable: no Unicode Other or Separator but the space
        return s
    return "".join(c if unicodedata.category(c)[0] not in "CZ" or c == " " else
                   repr(c)[1:-1] for c in s)


def safe_text(s) -> str:
    """A user string made safe for a comment or a label: no line breaks or control chars."""
    return _safe(str(s))


def format_attrs(op, attrs) -> str:
    if not attrs:
        return ""
    from .ops import OPS
    if op in OPS and OPS[op].show is not None:
        shown = OPS[op].show(attrs)
        return shown if shown.startswith("[") else f"[{shown}]"
    parts = []
    for k, v in sorted(attrs.items()):
        if k == "value":
            v = np.asarray(v)
            v = repr(v.item()) if v.ndim == 0 else f"<{type_str(v.shape, v.dtype)}>"
        elif k == "dtype":
            v = np.dtype(v).name
        elif k == "key" or k == "index":
            v = safe_text(v)
        parts.append(f"{k}={v}")
    return "[" + ", ".join(parts) + "]"


def format_node(g, n) -> str:
    d = g[n]
    lhs = f"v{n}: {type_str(d['shape'], d['dtype'])}"
    rhs = d["op"] + format_attrs(d["op"], d["attrs"])
    if d["op"] == "input":
        rhs = f"input {safe_text(d['name'])!s}"
    args = " ".join(f"v{a}" for a in d["args"])
    line = f"{lhs} = {rhs} {args}".rstrip()
    w = d["where"]
    if w is not None:
        role = f"[{w.role}] " if w.role else ""
        line = f"{line:<44}  # {role}{w.short}  {safe_text(w.text)}"
    return line


def format_graph(g) -> str:
    lines = [format_node(g, n) for n in g.nodes()]
    lines.append("return " + ", ".join(f"v{o}" for o in g.outputs))
    return "\n".join(lines)


def _dot_escape(s) -> str:
    # inside a DOT string only backslash and the double quote are special
    return s.replace("\\", "\\\\").replace('"', '\\"')


def to_dot(g) -> str:
    out = ["digraph adjit {", "  node [shape=box, fontname=monospace];"]
    for n in g.nodes():
        d = g[n]
        head = _dot_escape(safe_text(d["name"])) if d["op"] == "input" else f"v{n} {d['op']}"
        label = f"{head}\\n{type_str(d['shape'], d['dtype'])}"
        style = ', style=filled, fillcolor="#dde8ff"' if n in g.outputs else ""
        out.append(f'  v{n} [label="{label}"{style}];')
        for pos, a in enumerate(d["args"]):
            out.append(f'  v{a} -> v{n} [label="{pos}"];')
    out.append("}")
    return "\n".join(out)
