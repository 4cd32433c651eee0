"""Pytrees: nested dicts, lists and tuples of arrays, flattened to leaves and rebuilt.

A treedef is hashable, so it is part of the compile cache key; leaf paths give inputs
readable names (`params['W1']`).
"""
from __future__ import annotations

LEAF = ("leaf",)


def flatten(tree, path="x"):
    """-> (leaves, treedef, paths). None is an empty subtree."""
    leaves, paths = [], []
    treedef = _flatten(tree, path, leaves, paths)
    return leaves, treedef, paths


def _flatten(t, path, leaves, paths):
    if isinstance(t, dict):
        keys = tuple(t.keys())
        return ("dict", keys, tuple(_flatten(t[k], f"{path}[{k!r}]", leaves, paths)
                                    for k in keys))
    if isinstance(t, tuple) and hasattr(t, "_fields"):
        return ("namedtuple", type(t), tuple(_flatten(v, f"{path}.{f}", leaves, paths)
                                             for f, v in zip(t._fields, t)))
    if isinstance(t, (list, tuple)):
        kind = "list" if isinstance(t, list) else "tuple"
        return (kind, len(t), tuple(_flatten(v, f"{path}[{i}]", leaves, paths)
                                    for i, v in enumerate(t)))
    if t is None:
        return ("none",)
    leaves.append(t)
    paths.append(path)
    return LEAF


def unflatten(treedef, leaves):
    it = iter(leaves)
    out = _unflatten(treedef, it)
    return out


def _unflatten(td, it):
    kind = td[0]
    if kind == "leaf":
        return next(it)
    if kind == "none":
        return None
    if kind == "dict":
        return {k: _unflatten(c, it) for k, c in zip(td[1], td[2])}
    if kind == "namedtuple":
        return td[1](*[_unflatten(c, it) for c in td[2]])
    children = [_unflatten(c, it) for c in td[2]]
    return children if kind == "list" else tuple(children)


def num_leaves(treedef) -> int:
    if treedef[0] == "leaf":
        return 1
    if treedef[0] == "none":
        return 0
    return sum(num_leaves(c) for c in treedef[2])


def leaf_ranges(in_trees):
    """Argument index -> range of its leaves among the flattened inputs (static arguments,
    whose treedef is None, have none)."""
    ranges, pos = {}, 0
    for i, tree in enumerate(in_trees):
        if tree is not None:
            n = num_leaves(tree)
            ranges[i] = range(pos, pos + n)
            pos += n
    return ranges
