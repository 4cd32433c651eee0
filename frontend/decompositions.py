"""np.linalg for tracers, part two: svd, qr, pinv, lstsq, matrix_rank, cond and the 2-norm,
-2-norm and nuclear norm of matrices (through the singular values), plus the VJP and JVP rules
of the ops "svd", "qr" and "pinv" (ir/ops.py registers them).

Inputs are (..., m, n) stacks of Tracers or arrays as NumPy batches them; with no Tracer among
the arguments each function simply calls NumPy. Integer inputs become float64 and float32 stays
float32. Gradients of singular vectors need distinct, nonzero singular values (Townsend 2016):
repeated ones make the rotation inside their subspace arbitrary, and the rules divide by
s_j^2 - s_i^2. The gradient of pinv (Golub and Pereyra 1973) needs only a constant rank.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..ir.errors import GradError, ShapeError, UnsupportedError
from . import functions as F
from .linalg import _emit, _float, _mask, _traced, eigh_gaps, solve
from .tracer import _at, user_where

SVDResult = namedtuple("SVDResult", ["U", "S", "Vh"])
QRResult = namedtuple("QRResult", ["Q", "R"])
_DEFAULT = object()  # NumPy's "argument not given" (pinv's rtol)


def _matrices(what, a):
    if a.ndim < 2:
        raise ShapeError(f"np.linalg.{what}: expected matrices (..., m, n), got shape "
                         f"{a.shape}{_at(user_where())}")
    return a


def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """(U, S, Vh) with a = U * S @ Vh, S descending; compute_uv=False gives S alone.

    hermitian=True takes a as symmetric (its lower triangle) and gives NumPy's factors for it:
    U the eigenvectors by descending |eigenvalue|, Vh = (U * sign(eigenvalue)).T. Gradients
    through U or Vh need distinct, nonzero singular values.

    >>> import numpy as np, adjit
    >>> a = np.array([[3.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    >>> adjit.grad(lambda a: np.sum(np.linalg.svd(a, compute_uv=False)), backend="numpy")(a)
    array([[1., 0.],
           [0., 1.],
           [0., 0.]])
    """
    if not _traced(a):
        return np.linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv,
                             hermitian=hermitian)
    (a,) = _float("svd", a)
    _matrices("svd", a)
    herm = {"hermitian": True} if hermitian else {}
    if not compute_uv:
        return _emit("svd", [a], part="S", **herm)
    m, n = a.shape[-2:]
    parts = [_emit("svd", [a], part=p, **herm) for p in ("U", "S", "Vh")]
    if full_matrices and m != n:
        # NumPy's default: the square factor on the longer side has columns (rows) that a
        # does not determine (a null space basis, `np.linalg.svd(A)[2][-1]`): its values are
        # NumPy's; a gradient through it raises
        k = 0 if m > n else 2
        parts[k] = _emit("svd", [a], part="Ufull" if k == 0 else "Vhfull")
    return SVDResult(*parts)


def svdvals(x):
    """The singular values (descending) of each matrix, as np.linalg.svdvals."""
    return svd(x, compute_uv=False)


def qr(a, mode="reduced"):
    """(Q, R) with a = Q @ R, Q with orthonormal columns and R upper triangular (NumPy's signs);
    mode="r" gives R alone. Gradients need the first min(m, n) columns of a independent.

    >>> import numpy as np, adjit
    >>> a = np.array([[3.0, 1.0], [4.0, 2.0]])
    >>> adjit.compile(lambda a: np.linalg.qr(a).R, backend="numpy")(a)
    array([[-5. , -2.2],
           [ 0. ,  0.4]])
    """
    if not _traced(a):
        return np.linalg.qr(a, mode=mode)
    (a,) = _float("qr", a)
    m, n = _matrices("qr", a).shape[-2:]
    if mode not in ("reduced", "r") and not (mode == "complete" and m <= n):
        raise UnsupportedError(
            f"np.linalg.qr(a, mode={mode!r}) of a {m} x {n} matrix{_at(user_where())}; adjit "
            "supports mode='reduced' and 'r' ('complete' only where it equals 'reduced', "
            "m <= n: the extra columns of Q are not determined by a)")
    if m >= n:
        q, r = _emit("qr", [a], part="Q"), _emit("qr", [a], part="R")
    else:
        # a = [x | y] with x square: Householder QR of a reflects x's columns alone, so Q is
        # x's and R = [R_x | Q^T y]; the op then only meets m >= n
        x, y = a[..., :m], a[..., m:]
        q = _emit("qr", [x], part="Q")
        r = F.concatenate([_emit("qr", [x], part="R"), F.matmul(F.swap_last(q), y)], axis=-1)
    return r if mode == "r" else QRResult(q, r)


def _rcond(what, a, rcond, rtol):
    if rcond is None:
        rcond = (1e-15 if rtol is _DEFAULT else
                 max(a.shape[-2:]) * np.finfo(a.dtype).eps if rtol is None else rtol)
    elif rtol is not _DEFAULT:
        raise ValueError("`rtol` and `rcond` can't be both set.")
    if _traced(rcond) or np.ndim(rcond) != 0:
        raise UnsupportedError(f"np.linalg.{what} with a traced or array rcond/rtol"
                               f"{_at(user_where())}; adjit takes one Python float")
    return float(rcond)


def pinv(a, rcond=None, hermitian=False, *, rtol=_DEFAULT):
    """The Moore-Penrose pseudo-inverse of each matrix (NumPy's cutoff: singular values at most
    rcond * max(s) count as 0). Its gradient holds where the rank does not change.

    >>> import numpy as np, adjit
    >>> adjit.compile(np.linalg.pinv, backend="numpy")(np.array([[2.0], [0.0]]))
    array([[0.5, 0. ]])
    """
    if not _traced(a):
        if rtol is _DEFAULT:
            return np.linalg.pinv(a, rcond, hermitian)
        return np.linalg.pinv(a, rcond, hermitian, rtol=rtol)
    (a,) = _float("pinv", a)
    return _emit("pinv", [_matrices("pinv", a)], rcond=_rcond("pinv", a, rcond, rtol))


def _rank(s, tol):
    """How many singular values of each stack exceed tol (an int64 Tracer, no gradient)."""
    return F.sum(F.gt(s, tol), axis=-1)


def lstsq(a, b, rcond=None):
    """(x, residuals, rank, s) as np.linalg.lstsq, with x = pinv(a, rcond) @ b traced.

    For a constant a, rank and s are NumPy's own (rank a Python-usable integer, `if rank <
    n:` reads it) and residuals are traced where NumPy gives them (a full-rank a, m > n) and
    empty elsewhere, as in NumPy. For a traced a, rank and s are traced, and so is the
    residuals' shape question: NumPy's answer (empty for a rank-deficient a) depends on the
    values, so adjit gives the squared residual norms where a has full rank and NaN where it
    has not (m > n; empty for m <= n, as in NumPy).
    """
    if not _traced(a, b):
        return np.linalg.lstsq(a, b, rcond=rcond)
    constant = not _traced(a)
    a_value = np.asarray(a) if constant else None
    a, b = _float("lstsq", a, b)
    if a.ndim != 2 or b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        raise ShapeError(f"np.linalg.lstsq: a of shape {a.shape} and b of shape {b.shape}; "
                         "expected a (m, n) and b (m,) or (m, k)" + _at(user_where()))
    m, n = a.shape
    if rcond is None:
        rcond = np.finfo(a.dtype).eps * max(m, n)
    elif not _traced(rcond) and np.ndim(rcond) == 0 and rcond < 0:
        rcond = np.finfo(a.dtype).eps  # LAPACK's reading of a negative cutoff
    p = _emit("pinv", [a], rcond=_rcond("lstsq", a, rcond, _DEFAULT))
    x = F.matmul(p, b)
    if constant and not _traced(rcond):
        # NumPy's rank and singular values of the constant a (a zero right-hand side: the
        # same factorization)
        _, _, rank, s = np.linalg.lstsq(a_value.astype(a.dtype), np.zeros(m, a.dtype),
                                        rcond=rcond)
        full = bool(rank == n)
    else:
        s = svd(a, compute_uv=False)
        rank = F.cast(_rank(s, F.mul(F.max(s), rcond)), np.int32)  # LAPACK's int, as NumPy
        full = None
    if m > n and full is not False:
        r = F.sub(F.matmul(a, x), b)
        residuals = F.sum(F.mul(r, r), axis=0, keepdims=b.ndim == 1)
        if full is None:    # a traced a: NaN where NumPy's residuals are empty (rank < n)
            residuals = F.where(F.eq(rank, n), residuals, np.nan)
    else:
        residuals = np.empty((0,), a.dtype)
    return x, residuals, rank, s


def matrix_rank(A, tol=None, hermitian=False, *, rtol=None):  # noqa: N803 - NumPy's name
    """How many singular values exceed tol (default max(s) * max(m, n) * eps), as an int64
    Tracer: usable in arithmetic and as a result, not in Python control flow."""
    if not _traced(A, tol):
        return np.linalg.matrix_rank(A, tol, hermitian, rtol=rtol)
    if A.ndim < 2:
        return F.cast(F.gt(F.sum(F.ne(A, 0)), 0), np.int64)
    s = svd(A, compute_uv=False)
    if tol is None:
        if rtol is None:
            rtol = max(A.shape[-2:]) * np.finfo(s.dtype).eps
        tol = F.mul(F.max(s, axis=-1, keepdims=True), rtol)
    else:
        tol = F.expand_dims(F.lift(tol, s.dtype, s.ctx), -1)
    return _rank(s, tol)


def singular_value_norm(x, ord, axes, keepdims):  # noqa: A002 - NumPy's name
    """np.linalg.norm of the matrices on axes (r, c) for ord 2 (largest singular value), -2
    (smallest) or 'nuc' (their sum)."""
    r, c = axes
    nd = x.ndim
    rest = [d for d in range(nd) if d not in (r, c)]
    s = svd(F.transpose(x, tuple(rest) + (r, c)), compute_uv=False)
    out = {2: F.max, -2: F.min, "nuc": F.sum}[ord](s, axis=-1)
    if keepdims:
        out = F.reshape(out, tuple(1 if d in (r, c) else x.shape[d] for d in range(nd)))
    return out


def cond(x, p=None):
    """The condition number of each matrix: s_max / s_min for p None or 2, s_min / s_max for
    -2, else norm(x, p) * norm(inv(x), p) of a square x."""
    if not _traced(x):
        return np.linalg.cond(x, p)
    (x,) = _float("cond", x)
    _matrices("cond", x)
    if p in (None, 2, -2):
        s = svd(x, compute_uv=False)
        big, small = s[..., 0], s[..., -1]
        return F.div(small, big) if p == -2 else F.div(big, small)
    from .linalg import inv
    return F.mul(np.linalg.norm(x, p, axis=(-2, -1)), np.linalg.norm(inv(x), p, axis=(-2, -1)))


def _complex(what):
    def refuse(a, *args, **kw):
        if not _traced(a):
            return getattr(np.linalg, what)(a, *args, **kw)
        raise UnsupportedError(
            f"np.linalg.{what} of a general matrix{_at(user_where())}: its eigenvalues and "
            "eigenvectors may be complex, a decomposition adjit does not trace. For a symmetric matrix "
            "use np.linalg.eigh or np.linalg.eigvalsh (real results, with gradients); for the "
            "magnitudes of a general matrix's spectrum, np.linalg.svd may serve")
    refuse.__name__ = what
    return refuse


eig, eigvals = _complex("eig"), _complex("eigvals")


# -- helpers and rules of the ops svd, qr and pinv (ir/ops.py) ----------------------------------
def _row(v):
    return F.reshape(v, v.shape[:-1] + (1, v.shape[-1]))


def _col(v):
    return F.reshape(v, v.shape + (1,))


def _diag_part(x):
    """The diagonal of each (..., k, k) matrix, (..., k)."""
    return F.sum(F.mul(x, F.lift(np.eye(x.shape[-1]), x.dtype, x.ctx)), axis=-1)


def _full_factor(part):
    raise GradError(f"a gradient through the full {part[:-4]} of np.linalg.svd of a non-square "
                    f"matrix{_at(user_where())}: its extra singular vectors are not "
                    "determined by the matrix; use full_matrices=False (the reduced SVD "
                    "reconstructs it just the same)")


def svd_vjp(g, out, a, part, hermitian=False):
    if part.endswith("full"):
        _full_factor(part)
    # a = U S Vh (Townsend 2016, real case), with F_ij = 1 / (s_j^2 - s_i^2), J = U^T U_bar,
    # K = Vh Vh_bar^T: a_bar = U [diag(s_bar) + (F o (J - J^T)) S + S (F o (K - K^T))] Vh
    #   + (I - U U^T) U_bar S^-1 Vh  (m > n)  + U S^-1 Vh_bar (I - Vh^T Vh)  (n > m)
    u, s, vh = svd(a, full_matrices=False, hermitian=hermitian)
    m, n = a.shape[-2:]
    if part == "S":
        return [F.matmul(F.mul(u, _row(g)), vh)]
    gaps = eigh_gaps(F.mul(s, s))
    if part == "U":
        j = F.matmul(F.swap_last(u), g)
        inner = F.mul(F.mul(gaps, F.sub(j, F.swap_last(j))), _row(s))
        left = F.matmul(u, inner)
        if m > n:
            left = F.add(left, F.div(F.sub(g, F.matmul(u, j)), _row(s)))
        return [F.matmul(left, vh)]
    k = F.matmul(vh, F.swap_last(g))
    right = F.matmul(F.mul(_col(s), F.mul(gaps, F.sub(k, F.swap_last(k)))), vh)
    if n > m:
        right = F.add(right, F.div(F.sub(g, F.matmul(F.swap_last(k), vh)), _col(s)))
    return [F.matmul(u, right)]


def svd_jvp(t, out, a, part, hermitian=False):
    if part.endswith("full"):
        _full_factor(part)
    # dS = U^T da V: ds = diag(dS), dU = U (F o (dS S + S dS^T)) + (I - U U^T) da V S^-1,
    # dV = V (F o (S dS + dS^T S)) + (I - V V^T) da^T U S^-1 (JAX's svd_jvp_rule)
    u, s, vh = svd(a, full_matrices=False, hermitian=hermitian)
    m, n = a.shape[-2:]
    dav = F.matmul(t[0], F.swap_last(vh))
    ds = F.matmul(F.swap_last(u), dav)
    if part == "S":
        return _diag_part(ds)
    gaps = eigh_gaps(F.mul(s, s))
    if part == "U":
        du = F.matmul(u, F.mul(gaps, F.add(F.mul(ds, _row(s)),
                                           F.mul(_col(s), F.swap_last(ds)))))
        if m > n:
            du = F.add(du, F.div(F.sub(dav, F.matmul(u, ds)), _row(s)))
        return du
    inner = F.mul(gaps, F.add(F.mul(_col(s), ds), F.mul(F.swap_last(ds), _row(s))))
    dvh = F.matmul(F.swap_last(inner), vh)
    if n > m:
        utda = F.matmul(F.swap_last(u), t[0])
        dvh = F.add(dvh, F.div(F.sub(utda, F.matmul(ds, vh)), _col(s)))
    return dvh


def _times_r_inv(x, r):
    """x R^-1 for upper triangular R (a solve, so it differentiates like one)."""
    return F.swap_last(solve(F.swap_last(r), F.swap_last(x)))


def _times_r_inv_t(x, r):
    """x R^-T."""
    return F.swap_last(solve(r, F.swap_last(x)))


def qr_vjp(g, out, a, part):
    # m >= n. From the JVP below: a_bar = (Q_bar + Q N) R^-T with M = Q^T Q_bar - R_bar R^T
    # and N = tril(M - M^T, -1) - M (Walter and Lehmann 2018; Townsend's QR note)
    q, r = qr(a)
    if part == "Q":
        mm = F.matmul(F.swap_last(q), g)
    else:
        mm = F.neg(F.matmul(g, F.swap_last(r)))
    lower = F.mul(F.sub(mm, F.swap_last(mm)), _mask(mm, 0.0))
    qn = F.matmul(q, F.sub(lower, mm))
    return [_times_r_inv_t(F.add(g, qn) if part == "Q" else qn, r)]


def qr_jvp(t, out, a, part):
    # m >= n (JAX's qr_jvp_rule): C = Q^T da R^-1, O = tril(C, -1) - tril(C, -1)^T,
    # dQ = Q (O - C) + da R^-1, dR = (C - O) R
    q, r = qr(a)
    dar = _times_r_inv(t[0], r)
    c = F.matmul(F.swap_last(q), dar)
    low = F.mul(c, _mask(c, 0.0))
    o = F.sub(low, F.swap_last(low))
    if part == "Q":
        return F.add(F.matmul(q, F.sub(o, c)), dar)
    return F.matmul(F.sub(c, o), r)


def pinv_vjp(g, out, a, rcond):
    # X = pinv(a): a_bar = -X^T G X^T + (I - a X) G^T X X^T + X^T X G^T (I - X a)
    x, gt = out, F.swap_last(g)
    xt = F.swap_last(x)
    t1 = F.neg(F.matmul(F.matmul(xt, g), xt))
    t2 = F.matmul(F.sub(gt, F.matmul(a, F.matmul(x, gt))), F.matmul(x, xt))
    t3 = F.matmul(F.matmul(xt, x), F.sub(gt, F.matmul(F.matmul(gt, x), a)))
    return [F.add(F.add(t1, t2), t3)]


def pinv_jvp(t, out, a, rcond):
    # dX = -X da X + X X^T da^T (I - a X) + (I - X a) da^T X^T X (Golub and Pereyra 1973)
    x, dat = out, F.swap_last(t[0])
    xt = F.swap_last(x)
    t1 = F.neg(F.matmul(F.matmul(x, t[0]), x))
    t2 = F.matmul(F.matmul(x, xt), F.sub(dat, F.matmul(F.matmul(dat, a), x)))
    t3 = F.matmul(F.sub(dat, F.matmul(x, F.matmul(a, dat))), F.matmul(xt, x))
    return F.add(F.add(t1, t2), t3)
