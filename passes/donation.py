"""Donation: which results of a program may take the buffers of which arguments.

`pairs(g, donate_argnums)` matches the leaves of the donated arguments to results (graph ->
pairs; the graph is not changed). The schedule (passes/schedule.py) then decides which of
those a backend writes in place, and runs such in-place updates as early as their inputs
allow; the CUDA-graph runner (backends/cuda_graph.py) copies the rest into the buffers.
"""
from __future__ import annotations

from ..frontend import pytree
from ..ir.errors import AdjitError


def leaf_ranges(g):
    """Argument index -> range of its leaves among g.inputs (static arguments have none)."""
    trees = g.meta.get("in_trees")
    if trees is None:
        return {k: range(k, k + 1) for k in range(len(g.inputs))}
    return pytree.leaf_ranges(trees)


def normalize(donate_argnums) -> tuple:
    if donate_argnums is None:
        return ()
    return (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)


def pairs(g, donate_argnums) -> list:
    """(output index, input leaf index) of each result that goes into a donated buffer.

    A donated argument is matched to the first part of the result with the same structure,
    shapes and dtypes (a step returning `(loss, params, state)` for arguments `params,
    state`); leaves left over are matched as JAX does, to the first unmatched result of the
    same shape and dtype."""
    donate_argnums = normalize(donate_argnums)
    ranges = leaf_ranges(g)
    trees = g.meta.get("in_trees")
    if trees:  # negative positions count from the end, as in argnums
        n = len(trees)
        donate_argnums = tuple(a % n if -n <= a < 0 else a for a in donate_argnums)
    for a in donate_argnums:
        if a not in ranges:
            raise AdjitError(f"donate_argnums names argument {a}, but the function's array "
                             f"arguments are {sorted(ranges)}")
    used, out = set(), []

    def fits(k, leaf):
        o, i = g.outputs[k], g.inputs[leaf]
        return k not in used and g[o]["shape"] == g[i]["shape"] and \
            g[o]["dtype"] == g[i]["dtype"]
    rest = []
    for a in donate_argnums:
        rng = list(ranges[a])
        for tree, off in _subtrees(g.meta.get("out_tree")) if trees else []:
            if tree == trees[a] and all(fits(off + j, leaf) for j, leaf in enumerate(rng)):
                out += [(off + j, leaf) for j, leaf in enumerate(rng)]
                used.update(range(off, off + len(rng)))
                break
        else:
            rest += rng
    for leaf in rest:
        k = next((k for k in range(len(g.outputs)) if fits(k, leaf)), None)
        if k is not None:
            out.append((k, leaf))
            used.add(k)
    out.sort(key=lambda p: p[1])
    return out


def candidates(g, donate_argnums) -> dict:
    """{output node: input node} for the pairs whose output node is computed by the program
    (not an input or a constant passed through) and returned once."""
    got = {}
    for k, leaf in pairs(g, donate_argnums):
        o, i = g.outputs[k], g.inputs[leaf]
        if o != i and g.outputs.count(o) == 1 and g[o]["op"] not in ("input", "const") \
                and o not in got and i not in g.outputs:
            got[o] = i
    return got


def _subtrees(tree, offset=0):
    """(subtree, index of its first leaf) for tree and every subtree, outermost first."""
    if tree is None:
        return
    yield tree, offset
    if tree[0] in ("dict", "namedtuple", "dataclass", "list", "tuple"):
        for child in tree[2]:
            yield from _subtrees(child, offset)
            offset += pytree.num_leaves(child)
