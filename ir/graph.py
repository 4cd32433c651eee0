"""The IR: a `Graph` of elementary operations over a networkx MultiDiGraph.

Nodes are ints created in increasing order, so id order is always a topological order (every
argument of a node has a smaller id). Node attributes: op, shape, dtype, attrs, name, where,
args (ordered argument ids, mirrored by edges whose `arg` attribute is the position).
"""
from __future__ import annotations

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
        return f"{self.file.replace(chr(92), '/').rsplit('/', 1)[-1]}:{self.line}"

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
        self.nx = nx.MultiDiGraph()
        self._data: dict[int, dict] = {}   # nid -> its attribute dict (the one networkx holds)
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.meta: dict = {}
        self._next = 0

    # -- building -------------------------------------------------------------------------
    def add(self, op, args, shape, dtype, attrs=None, name=None, where=None) -> int:
        nid = self._next
        self._next += 1
        self.nx.add_node(nid, op=op, args=tuple(args), shape=tuple(shape),
                         dtype=np.dtype(dtype), attrs=dict(attrs or {}), name=name, where=where)
        self._data[nid] = self.nx.nodes[nid]
        # the position is the edge's key: x * x has two edges, and networkx need not search
        # for a free key
        self.nx.add_edges_from((a, nid, pos, {"arg": pos}) for pos, a in enumerate(args))
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
        return sorted(self._data)

    def args(self, nid) -> tuple:
        return self._data[nid]["args"]

    def users(self, nid) -> list[int]:
        return sorted(set(self.nx.successors(nid)))

    def nbytes(self, nid) -> int:
        d = self._data[nid]
        return int(np.prod(d["shape"], dtype=np.int64)) * d["dtype"].itemsize

    def input_names(self) -> list[str]:
        return [self[i]["name"] for i in self.inputs]

    def copy(self) -> "Graph":
        g = Graph()
        g.nx = self.nx.copy()
        g._data = dict(g.nx.nodes(data=True))
        for d in g._data.values():
            d["attrs"] = dict(d["attrs"])
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
