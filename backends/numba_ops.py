"""Runtime ops that the numba backend runs as compiled loops in place of the registry's NumPy
reference (ir/ops.py), where NumPy has no fast call for them.

scatter_add, the VJP of a gather (an embedding lookup E[ids], x[rows, cols], take): the
reference's np.add.at handles repeated positions one element at a time, 28.8 ms for 50,000 rows
of 64 into a 10,000-row table where a loop adding whole rows takes 2.5 ms (JAX 2.2, PyTorch 5.0).
Keys of leading index arrays followed by whole slices (the common case) take the loop; any other
key, and dtypes the loop does not cover, take the reference.
"""
from __future__ import annotations

import numba
import numpy as np

from ..ir.ops import _scatter_add as _reference

_FLOATS = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


@numba.njit(cache=True, nogil=True)
def _add_rows(z, rows, g):
    """z[rows[i], :] += g[i, :] for each i in order (repeats add up), z and g 2-d C-ordered."""
    for i in range(rows.size):
        r = rows[i]
        for j in range(g.shape[1]):
            z[r, j] += g[i, j]


def _rows(key, idx, shape):
    """The flat row of z each of g's rows adds to, and the row length, when the key is index
    arrays on z's leading axes followed only by whole slices; else None."""
    k = 0
    while k < len(key) and key[k][0] == "a":
        k += 1
    if k == 0 or any(item[0] != "s" or item[1] != slice(None) for item in key[k:]):
        return None
    arrays = [np.asarray(idx[item[1]]) for item in key[:k]]
    if any(a.dtype.kind not in "iu" for a in arrays):
        return None
    arrays = np.broadcast_arrays(*arrays)
    for a, n in zip(arrays, shape):
        # the gather is not always run (a gradient alone may not need its value): positions
        # out of bounds take the reference, which raises NumPy's IndexError
        if a.size and (a.min() < -n or a.max() >= n):
            return None
    # negative positions count from the end, as NumPy's do
    arrays = [np.where(a < 0, a + n, a) if a.dtype.kind == "i" and a.size and a.min() < 0
              else a for a, n in zip(arrays, shape)]
    rows = np.ravel_multi_index(arrays, shape[:k]) if k > 1 else arrays[0]
    return np.ascontiguousarray(rows, dtype=np.intp).reshape(-1), int(np.prod(shape[k:]))


def scatter_add(g, *idx, key, shape, unique=False):
    g = np.asarray(g)
    if unique or g.dtype not in _FLOATS:
        return _reference(g, *idx, key=key, shape=shape, unique=unique)
    found = _rows(key, idx, tuple(shape))
    if found is None:
        return _reference(g, *idx, key=key, shape=shape, unique=unique)
    rows, width = found
    z = np.zeros(shape, dtype=g.dtype)
    if rows.size and width:
        _add_rows(z.reshape(-1, width), rows,
                  np.ascontiguousarray(g).reshape(rows.size, width))
    return z


OPS = {"scatter_add": scatter_add}
