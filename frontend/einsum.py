"""np.einsum for one or two operands, lowered to transpose, sum, reshape and one batched matmul.

Letters in both operands and the output are batch axes, in both but not the output are
contracted (the matmul's inner axis), in one operand only are free (or summed first when the
output lacks them). The result is ordinary IR, so it differentiates like any other.
"""
from __future__ import annotations

import numpy as np

from ..ir.errors import UnsupportedError, ShapeError
from . import functions as F
from .tracer import _at, user_where


def _parse(subscripts, n):
    s = subscripts.replace(" ", "")
    if "..." in s:
        raise UnsupportedError(f"np.einsum with '...'{_at(user_where())}; write the axes out")
    if "->" in s:
        ins, out = s.split("->")
    else:
        ins = s
        letters = ins.replace(",", "")
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    ins = ins.split(",")
    if len(ins) != n:
        raise ShapeError(f"np.einsum: {len(ins)} subscripts for {n} operands{_at(user_where())}")
    return ins, out


def _reduce_alone(x, sub, keep):
    """Sum out letters of x that appear nowhere else; take diagonals of repeated letters."""
    if len(set(sub)) != len(sub):
        raise UnsupportedError(f"np.einsum with a repeated index in one operand ({sub})"
                               f"{_at(user_where())}")
    axes = tuple(i for i, c in enumerate(sub) if c not in keep)
    if axes:
        x = F.sum(x, axis=axes)
        sub = "".join(c for c in sub if c in keep)
    return x, sub


def einsum(subscripts, *ops):
    if len(ops) not in (1, 2):
        raise UnsupportedError(f"np.einsum with {len(ops)} operands{_at(user_where())}; "
                               "chain two-operand einsums instead")
    ins, out = _parse(subscripts, len(ops))
    for sub, x in zip(ins, ops):
        if len(sub) != len(F._shape_of(x)):
            raise ShapeError(f"np.einsum: '{sub}' has {len(sub)} letters for an operand of "
                             f"shape {F._shape_of(x)}{_at(user_where())}")
    if len(ops) == 1:
        x, sub = _reduce_alone(ops[0], ins[0], set(out))
        return F.transpose(x, [sub.index(c) for c in out]) if sub != out else x
    (a, b), (sa, sb) = ops, ins
    a, sa = _reduce_alone(a, sa, set(out) | set(sb))
    b, sb = _reduce_alone(b, sb, set(out) | set(sa))
    batch = [c for c in sa if c in sb and c in out]
    contr = [c for c in sa if c in sb and c not in out]
    fa = [c for c in sa if c not in sb]
    fb = [c for c in sb if c not in sa]
    size = dict(zip(sa, F._shape_of(a)))
    size.update(zip(sb, F._shape_of(b)))
    for c in set(sa) & set(sb):
        if dict(zip(sa, F._shape_of(a)))[c] != dict(zip(sb, F._shape_of(b)))[c]:
            raise ShapeError(f"np.einsum: axis '{c}' has different sizes"
                             f"{_at(user_where())}")

    def prod(cs):
        return int(np.prod([size[c] for c in cs], dtype=np.int64))
    a3 = F.reshape(F.transpose(a, [sa.index(c) for c in batch + fa + contr]),
                   (prod(batch), prod(fa), prod(contr)))
    b3 = F.reshape(F.transpose(b, [sb.index(c) for c in batch + contr + fb]),
                   (prod(batch), prod(contr), prod(fb)))
    r = F.reshape(F.matmul(a3, b3), tuple(size[c] for c in batch + fa + fb))
    have = batch + fa + fb
    return F.transpose(r, [have.index(c) for c in out]) if have != list(out) else r
