"""np.einsum lowered to transpose, sum, reshape and batched matmuls, two operands at a time.

Letters in both operands and the output are batch axes, in both but not the output are
contracted (the matmul's inner axis), in one operand only are free (or summed first when the
output lacks them). A letter repeated in one operand takes a diagonal; '...' becomes letters;
three or more operands contract pairwise in NumPy's greedy order (np.einsum_path). The result is ordinary IR.
"""
from __future__ import annotations

import math
import numpy as np

from ..ir.errors import ShapeError
from . import functions as F
from .tracer import Tracer, _at, user_where


def _parse(subscripts, shapes):
    s = subscripts.replace(" ", "")
    ins, out = s.split("->") if "->" in s else (s, None)
    ins = ins.split(",")
    if len(ins) != len(shapes):
        raise ShapeError(f"np.einsum: {len(ins)} subscripts for {len(shapes)} operands"
                         f"{_at(user_where())}")
    free = [c for c in _SPARE if c not in s]
    n_ell = max([len(shp) - len(sub.replace("...", "")) for sub, shp in zip(ins, shapes)
                 if "..." in sub] or [0])
    ell = "".join(free[:n_ell])
    # '...' stands for the trailing letters of `ell` that this operand's rank leaves room for
    ins = [sub.replace("...", ell[n_ell - (len(shp) - len(sub.replace("...", ""))):]
                       if len(shp) > len(sub.replace("...", "")) else "")
           for sub, shp in zip(ins, shapes)]
    if out is None:
        letters = "".join(ins)
        out = ell + "".join(sorted(c for c in set(letters) if letters.count(c) == 1
                                   and c not in ell))
    else:
        out = out.replace("...", ell)
        letters = "".join(ins)
        for c in out:
            if c not in letters:
                raise ShapeError(f"np.einsum: output subscript '{c}' does not appear in the "
                                 f"inputs{_at(user_where())}")
            if out.count(c) > 1:
                raise ShapeError(f"np.einsum: output subscript '{c}' appears more than once"
                                 f"{_at(user_where())}")
    return ins, out


_SPARE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _diagonals(x, sub):
    """Take the diagonal for each letter repeated in one operand ('ii->i', 'ii->')."""
    while len(set(sub)) != len(sub):
        c = next(ch for ch in sub if sub.count(ch) > 1)
        p, q = [i for i, ch in enumerate(sub) if ch == c][:2]
        rest = [i for i in range(len(sub)) if i not in (p, q)]
        x = F.transpose(x, rest + [p, q])
        n = F._shape_of(x)[-1]
        if F._shape_of(x)[-2] != n:
            raise ShapeError(f"np.einsum: repeated index '{c}' on axes of different sizes"
                             f"{_at(user_where())}")
        x = F.getitem(x, (Ellipsis, np.arange(n), np.arange(n)))
        sub = "".join(sub[i] for i in rest) + c
    return x, sub


def _view(x, sub, out):
    """One operand, nothing summed ('ii->i', 'ij->ji', 'iij->ji'): NumPy's einsum returns a
    writable view of x, so writes through it reach x (np.einsum('ii->i', K)[...] += s2)."""
    if len(set(sub)) == len(sub):
        return F.transpose(x, [sub.index(c) for c in out])
    shape = F._shape_of(x)
    for c in set(sub):
        if len({shape[i] for i, ch in enumerate(sub) if ch == c}) > 1:
            raise ShapeError(f"np.einsum: repeated index '{c}' on axes of different sizes"
                             f"{_at(user_where())}")
    index = [np.arange(shape[i]).reshape([-1 if k == out.index(ch) else 1
                                          for k in range(len(out))])
             for i, ch in enumerate(sub)]
    r = F.getitem(x, tuple(index))
    key = tuple(("a", k) for k in range(len(sub)))
    r.view_of(x, "gather", {"key": key}, index, writable=True)
    return r


def _reduce_alone(x, sub, keep):
    """Sum out letters of x that appear nowhere else."""
    axes = tuple(i for i, c in enumerate(sub) if c not in keep)
    if axes:
        x = F.sum(x, axis=axes)
        sub = "".join(c for c in sub if c in keep)
    return x, sub


def einsum(subscripts, *ops):
    if not ops:
        raise ShapeError(f"np.einsum needs at least one operand{_at(user_where())}")
    ins, out = _parse(subscripts, [F._shape_of(x) for x in ops])
    for sub, x in zip(ins, ops):
        if len(sub) != len(F._shape_of(x)):
            raise ShapeError(f"np.einsum: '{sub}' has {len(sub)} letters for an operand of "
                             f"shape {F._shape_of(x)}{_at(user_where())}")
    if len(ops) == 1 and isinstance(ops[0], Tracer) and set(ins[0]) == set(out):
        return _view(ops[0], ins[0], out)
    ops, ins = list(ops), list(ins)
    for k in range(len(ops)):
        ops[k], ins[k] = _diagonals(ops[k], ins[k])
    if len(ops) == 1:
        x, sub = _reduce_alone(ops[0], ins[0], set(out))
        return F.transpose(x, [sub.index(c) for c in out]) if sub != out else x
    if len(ops) > 2:
        # NumPy's greedy order (np.einsum_path on stand-ins of the shapes): 'ab,cd,bc->ad'
        # contracts b first instead of building the (a, b, c, d) outer product
        for pair in _order(ins, out, ops):
            i, j = sorted(pair)
            rest = [t for k, t in enumerate(ins) if k not in (i, j)]
            later = set(out).union(*[set(t) for t in rest])
            mid = "".join(dict.fromkeys(c for c in ins[i] + ins[j] if c in later))
            r = _pair(ops[i], ops[j], ins[i], ins[j], mid, subscripts)
            ops = [x for k, x in enumerate(ops) if k not in (i, j)] + [r]
            ins = rest + [mid]
            if len(ops) == 2:
                break
    return _pair(ops[0], ops[1], ins[0], ins[1], out, subscripts)


def _order(ins, out, ops):
    """The pairs of operand positions to contract, in NumPy's greedy order (each pair's
    result goes last, as np.einsum_path counts)."""
    standins = [np.lib.stride_tricks.as_strided(np.zeros(1), F._shape_of(x),
                                                (0,) * len(F._shape_of(x))) for x in ops]
    path = np.einsum_path(",".join(ins) + "->" + out, *standins, optimize="greedy")[0]
    return [p for p in path[1:] if len(p) == 2] or [(0, 1)] * (len(ops) - 1)


def _stretch(x, axis, n):
    shape = list(F._shape_of(x))
    shape[axis] = n
    return F.broadcast_to(x, tuple(shape))


def _pair(a, b, sa, sb, out, user=""):
    a, sa = _reduce_alone(a, sa, set(out) | set(sb))
    b, sb = _reduce_alone(b, sb, set(out) | set(sa))
    batch = [c for c in sa if c in sb and c in out]
    contr = [c for c in sa if c in sb and c not in out]
    fa = [c for c in sa if c not in sb]
    fb = [c for c in sb if c not in sa]
    for c in sorted(set(sa) & set(sb)):
        na, nb = F._shape_of(a)[sa.index(c)], F._shape_of(b)[sb.index(c)]
        if na != nb:
            # a length-1 axis broadcasts, as in NumPy
            if na == 1:
                a = _stretch(a, sa.index(c), nb)
            elif nb == 1:
                b = _stretch(b, sb.index(c), na)
            else:
                # letters the user did not write stand for the axes of '...'
                name = f"'{c}'" if c in user else "of '...'"
                raise ShapeError(f"np.einsum: axis {name} has sizes {na} and {nb}, which do not "
                                 f"broadcast{_at(user_where())}")
    size = dict(zip(sa, F._shape_of(a)))
    size.update(zip(sb, F._shape_of(b)))

    def prod(cs):
        return int(math.prod([size[c] for c in cs]))
    if not contr:
        # nothing summed: a broadcast product ('ij,j->ij', 'i,i->i', an outer product), not
        # batched 1 x 1 matrix products
        ones_b, ones_a = (1,) * len(fb), (1,) * len(fa)
        at = F.reshape(F.transpose(a, [sa.index(c) for c in batch + fa]),
                       tuple(size[c] for c in batch + fa) + ones_b)
        bt = F.reshape(F.transpose(b, [sb.index(c) for c in batch + fb]),
                       tuple(size[c] for c in batch) + ones_a + tuple(size[c] for c in fb))
        r = F.mul(at, bt)
        have = batch + fa + fb
        return F.transpose(r, [have.index(c) for c in out]) if have != list(out) else r
    a3 = F.reshape(F.transpose(a, [sa.index(c) for c in batch + fa + contr]),
                   (prod(batch), prod(fa), prod(contr)))
    b3 = F.reshape(F.transpose(b, [sb.index(c) for c in batch + contr + fb]),
                   (prod(batch), prod(contr), prod(fb)))
    r = F.reshape(F.matmul(a3, b3), tuple(size[c] for c in batch + fa + fb))
    have = batch + fa + fb
    return F.transpose(r, [have.index(c) for c in out]) if have != list(out) else r
