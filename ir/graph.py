"""The IR: a `Graph` of elementary operations, viewable as a networkx MultiDiGraph.

Nodes are ints created in increasing order, so id order is always a topological order (every
argument of a node has a smaller id). Node attributes: op, shape, dtype, attrs, name, where,
args (ordered argument ids). `Graph.nx` is the networkx MultiDiGraph of it (one edge per
argument, whose `arg` attribute is the position; multi: `x * x` uses one node twice), built
when asked for. The graph itself keeps plain dicts (node data, users): compiling a long
unrolled loop adds some 100,000 nodes across the passes, and networkx's bookkeeping for each
edge was a fifth of the compile time.
"""
from __future__ import annotations

import math
import linecache
from dataclasses import dataclass

import networkx as nx
import numpy as np


@dataclass(frozen=True)
class Where:
    """The user's source location that created a node; `role` marks backward/recomputed nodes."""
    file: str
    line: int
    role: str = ""

    @property
    def short(self) -> str:
        """file.py:12 (the file's base name made safe for a comment: a name may hold a newline)."""
        from .printer import safe_text
        return safe_text(f"{self.file.replace(chr(92), '/').rsplit('/', 1)[-1]}:{self.line}")

    @property
    def text(self) -> str:
        return linecache.getline(self.file, self.line).strip()

    def with_role(self, role: str) -> "Where":
        return Where(self.file, self.line, role)

    def __str__(self) -> str:
        text = self.text
        return f"{self.short} ({text})" if text else self.short


class Graph:
    """A dataflow graph of ops; `inputs` and `outputs` are ordered lists of node ids."""

    def __init__(self):
        self._data: dict[int, dict] = {}      # nid -> its attributes
        self._users: dict[int, list] = {}     # nid -> the nodes reading it, once per use
        self._nx = None
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.meta: dict = {}
        self._next = 0

    # -- building -------------------------------------------------------------------------
    def add(self, op, args, shape, dtype, attrs=None, name=None, where=None) -> int:
        nid = self._next
        self._next += 1
        args = tuple(args)
        self._data[nid] = dict(op=op, args=args, shape=tuple(shape), dtype=np.dtype(dtype),
                               attrs=dict(attrs or {}), name=name, where=where)
        self._users[nid] = []
        for a in args:
            self._users[a].append(nid)
        self._nx = None
        return nid

    # -- reading --------------------------------------------------------------------------
    def __getitem__(self, nid) -> dict:
        return self._data[nid]

    def __contains__(self, nid) -> bool:
        return nid in self._data

    def __len__(self) -> int:
        return len(self._data)

    def nodes(self) -> list[int]:
        """Node ids in creation order, which is a topological order."""
        return list(self._data)

    def args(self, nid) -> tuple:
        return self._data[nid]["args"]

    def users(self, nid) -> list[int]:
        return sorted(set(self._users[nid]))

    @property
    def nx(self) -> nx.MultiDiGraph:
        """The graph as a networkx MultiDiGraph (node attributes as above, one edge per
        argument keyed and attributed by its position), for networkx's algorithms and
        drawing. A snapshot: changing it does not change the Graph."""
        if self._nx is None:
            G = nx.MultiDiGraph()
            G.add_nodes_from(self._data.items())
            G.add_edges_from((a, n, pos, {"arg": pos}) for n, d in self._data.items()
                             for pos, a in enumerate(d["args"]))
            self._nx = G
        return self._nx

    def nbytes(self, nid) -> int:
        d = self._data[nid]
        return math.prod(d["shape"]) * d["dtype"].itemsize

    def input_names(self) -> list[str]:
        return [self[i]["name"] for i in self.inputs]

    def copy(self) -> "Graph":
        g = Graph()
        g._data = {n: dict(d, attrs=dict(d["attrs"])) for n, d in self._data.items()}
        g._users = {n: list(u) for n, u in self._users.items()}
        g.inputs, g.outputs = list(self.inputs), list(self.outputs)
        g.meta = dict(self.meta)
        g._next = self._next
        return g

    def __str__(self) -> str:
        from .printer import format_graph
        return format_graph(self)

    __repr__ = __str__

    def to_dot(self) -> str:
        from .printer import to_dot
        return to_dot(self)
