"""Runtime ops that the numba backend runs as compiled loops in place of the registry's NumPy
reference (ir/ops.py), where NumPy has no fast call for them.

scatter_add, the VJP of a gather (an embedding lookup E[ids], x[rows, cols], take): the
reference's np.add.at handles repeated positions one element at a time, 28.8 ms for 50,000 rows
of 64 into a 10,000-row table where a loop adding whole rows takes 2.5 ms (JAX 2.2, PyTorch 5.0).
A key of one index array on the first axis followed by whole slices (the common case) takes
the loop; any other key, dtype or layout takes the reference.

place_add, the cotangent of overlapping slices of one array (x[1:] - x[:-1], a 5-point
stencil): the reference adds each piece in its own pass over the result (9 passes, 2.0 ms of a
512x512 stencil gradient's 8.1, one thread); the loop adds every piece to one row of the result
while the row is in cache (0.9 ms), in the same order, so the bits are the same.
1-d and 2-d results with unit-step slices take it; others the reference.
"""
from __future__ import annotations

import numba
import numpy as np

from ..ir.ops import _place_add as _place_reference
from ..ir.ops import _scatter_add as _reference

_FLOATS = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


@numba.njit(cache=True, nogil=True)
def _add_rows(z, rows, g):
    """z[rows[i], :] += g[i, :] for each i in order (repeats add up; a negative row counts
    from the end), z and g 2-d C-ordered, rows checked to lie in [-len(z), len(z))."""
    n = z.shape[0]
    for i in range(rows.size):
        r = rows[i]
        if r < 0:
            r += n
        for j in range(g.shape[1]):
            z[r, j] += g[i, j]


def scatter_add(g, *idx, key, shape, unique=False):
    """The loop for z[ids] += g with one integer array ids on z's first axis followed only by
    whole slices (E[ids], E[ids, :]), without new arrays beside the result (the schedule
    counts none: a copy of the positions would be memory it does not see); any other key,
    dtype or layout takes the reference."""
    g, shape = np.asarray(g), tuple(shape)
    ids = np.asarray(idx[0]) if len(idx) == 1 else None
    if unique or g.dtype not in _FLOATS or ids is None or key[0] != ("a", 0) or \
            any(item[0] != "s" or item[1] != slice(None) for item in key[1:]) or \
            ids.dtype.kind not in "iu" or not ids.flags.c_contiguous or \
            not g.flags.c_contiguous or not shape:
        return _reference(g, *idx, key=key, shape=shape, unique=unique)
    n = shape[0]
    # the gather is not always run (a gradient alone may not need its value): positions out
    # of bounds take the reference, which raises NumPy's IndexError
    if ids.size and (ids.min() < -n or ids.max() >= n):
        return _reference(g, *idx, key=key, shape=shape, unique=unique)
    z = np.zeros(shape, dtype=g.dtype)
    width = int(np.prod(shape[1:]))
    if ids.size and width:
        _add_rows(z.reshape(n, width), ids.reshape(-1), g.reshape(ids.size, width))
    return z


# -- place_add: the cotangent of overlapping slices (x[1:] - x[:-1], a 5-point stencil) ---------
@numba.njit(cache=True, nogil=True)
def _place_rows(z, pieces, boxes):
    """z[r0:r0 + nr, c0:c0 + nc] += piece for each piece and box (r0, nr, c0, nc), a row of z at
    a time: the row stays in cache while every piece adds to it (one pass over z where NumPy's
    z[index] += piece makes one per piece). The inner loop runs over two 1-d views from 0, so
    LLVM sees unit strides and no negative index and vectorises it (indexing z[i, c0 + j]
    did not: 2.6 ms for a 512 x 512 stencil's nine pieces, 0.9 ms so)."""
    for i in range(z.shape[0]):
        row = z[i]
        for k in range(len(pieces)):
            r = i - boxes[k, 0]
            if r >= 0 and r < boxes[k, 1]:
                c0 = boxes[k, 2]
                dst = row[c0:c0 + boxes[k, 3]]
                src = pieces[k][r]
                for j in range(dst.shape[0]):
                    dst[j] += src[j]


def _box(index, shape):
    """(r0, nr, c0, nc) of a basic index of unit steps into a 2-d shape, else None."""
    index = index if isinstance(index, tuple) else (index,)
    if len(index) > 2 or any(type(k) is not slice for k in index):
        return None
    index = index + (slice(None),) * (2 - len(index))
    box = []
    for k, n in zip(index, shape):
        start, stop, step = k.indices(n)
        if step != 1:
            return None
        box += [start, max(stop - start, 0)]
    return box


def place_add(*pieces, indices, shape):
    shape = tuple(shape)
    dt = np.result_type(*pieces) if pieces else None
    if len(shape) not in (1, 2) or len(pieces) < 2 or dt not in _FLOATS or \
            any(np.dtype(getattr(p, "dtype", None) or np.float64) != dt for p in pieces):
        return _place_reference(*pieces, indices=indices, shape=shape)
    shape2 = shape if len(shape) == 2 else (1,) + shape
    boxes, arrays = [], []
    for p, index in zip(pieces, indices):
        if len(shape) == 1:
            index = (slice(None),) + (index if isinstance(index, tuple) else (index,))
        box = _box(index, shape2)
        p = np.asarray(p)
        # a strided piece (a column of complex parts) takes the reference: a contiguous copy
        # would be memory the schedule does not count
        if box is None or p.shape != tuple(box[1::2])[-p.ndim:] or \
                p.size != box[1] * box[3] or not p.flags.c_contiguous:
            return _place_reference(*pieces, indices=indices, shape=shape)
        boxes.append(box)
        arrays.append(p.reshape(box[1], box[3]))
    z = np.zeros(shape2, dt)
    _place_rows(z, tuple(arrays), np.array(boxes, dtype=np.intp))
    return z.reshape(shape)


OPS = {"scatter_add": scatter_add, "place_add": place_add}
