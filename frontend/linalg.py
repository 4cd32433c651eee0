"""np.linalg for tracers: inv, solve, det, slogdet, cholesky, eigh and eigvalsh.

Each takes Tracers or NumPy arrays of shape (..., n, n) (batched as NumPy batches) and returns
what NumPy would; with no Tracer among the arguments it simply calls NumPy. Integer inputs
become float64 and float32 stays float32, as in NumPy. A singular matrix raises NumPy's
LinAlgError when the program runs. The helpers at the end build the VJP and JVP rules of these
ops in ir/ops.py (Giles 2008; Murray 2016 for cholesky). svd, qr, pinv, lstsq and what is built
on them live in decompositions.py.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..ir.errors import ShapeError, UnsupportedError
from . import functions as F
from ..ir.ops import OPS
from .tracer import Tracer, _at, user_where

SlogdetResult = namedtuple("SlogdetResult", ["sign", "logabsdet"])
EighResult = namedtuple("EighResult", ["eigenvalues", "eigenvectors"])


def _traced(*xs):
    return any(isinstance(x, Tracer) for x in xs)


def _float(what, *xs):
    """xs lifted into one trace with NumPy's linalg dtype: float32 or float64."""
    dt = F.result_dtype(*xs)
    if dt.kind in "biu":
        dt = np.dtype(np.float64)
    if dt.kind != "f" or dt.itemsize < 4:
        raise UnsupportedError(f"np.linalg.{what} of {dt} arrays{_at(user_where())}; adjit "
                               "supports float32 and float64 (convert with .astype)")
    ctx = F._ctx(xs)
    return [F.lift(x, dt, ctx) for x in xs]


def _square(what, a):
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"np.linalg.{what}: expected square matrices (..., n, n), got shape "
                         f"{a.shape}{_at(user_where())}")
    return a


def _emit(op, args, **attrs):
    return args[0].ctx.emit(op, list(args), attrs)


def inv(a):
    """The inverse of each matrix in a.

    >>> import numpy as np, adjit
    >>> adjit.grad(lambda a: np.sum(np.linalg.inv(a)), backend="numpy")(2.0 * np.eye(2))
    array([[-0.25, -0.25],
           [-0.25, -0.25]])
    """
    if not _traced(a):
        return np.linalg.inv(a)
    (a,) = _float("inv", a)
    return _emit("inv", [_square("inv", a)])


def solve(a, b):
    """x with a @ x = b; b is a vector (n,) or a stack of matrices (..., n, k), as in NumPy 2.

    >>> import numpy as np, adjit
    >>> adjit.compile(np.linalg.solve, backend="numpy")(2.0 * np.eye(2), np.array([1.0, 4.0]))
    array([0.5, 2. ])
    """
    if not _traced(a, b):
        return np.linalg.solve(a, b)
    a, b = _float("solve", a, b)
    n = _square("solve", a).shape[-1]
    shown, vector = b.shape, b.ndim == 1
    if vector:
        b = F.reshape(b, (b.shape[0], 1))
    if b.ndim < 2 or b.shape[-2] != n:
        raise ShapeError(f"np.linalg.solve: b of shape {shown} does not "
                         f"fit a of shape {a.shape}; b must be (n,) or (..., n, k) with "
                         f"n = {n}{_at(user_where())}")
    batch = F._broadcast_shape("np.linalg.solve", [a.shape[:-2], b.shape[:-2]])
    a, b = F.broadcast_to(a, batch + a.shape[-2:]), F.broadcast_to(b, batch + b.shape[-2:])
    lower = _triangle(a)
    x = _emit("solve", [a, b]) if lower is None else \
        _emit("solve_triangular", [a, b], lower=lower)
    return F.reshape(x, x.shape[:-1]) if vector else x


def _triangle(a):
    """True (False) when a is a Cholesky factor (its transpose) of this trace: lower (upper)
    triangular, so a solve with it is a triangular solve (GP likelihoods solve with L and
    L.T). None otherwise."""
    g, n = a.ctx.graph, a.id
    swaps = 0
    while True:
        d = g[n]
        nd = len(d["shape"])
        if d["op"] == "transpose" and tuple(d["attrs"]["perm"]) == tuple(range(nd - 2)) + (
                nd - 1, nd - 2):
            swaps += 1
        elif d["op"] not in ("broadcast_to", "stop_gradient"):
            break
        n = d["args"][0]
    if g[n]["op"] == "cholesky":
        return swaps % 2 == 0
    return None


def solve_triangular(a, b, lower):
    """x with tri(a) @ x = b (b: (..., n, k)), the triangle of a chosen by lower."""
    a, b = _float("solve", a, b)
    return _emit("solve_triangular", [a, b], lower=bool(lower))


def tril(x):
    """The lower triangle of each matrix (a constant mask)."""
    return F.mul(x, _mask(x, 1.0))


def det(a):
    """The determinant of each matrix in a (shape a.shape[:-2])."""
    if not _traced(a):
        return np.linalg.det(a)
    (a,) = _float("det", a)
    return _emit("det", [_square("det", a)])


def slogdet(a):
    """(sign, logabsdet) of each matrix in a; the sign has no gradient.

    >>> import numpy as np, adjit
    >>> adjit.grad(lambda a: np.linalg.slogdet(a)[1], backend="numpy")(2.0 * np.eye(2))
    array([[0.5, 0. ],
           [0. , 0.5]])
    """
    if not _traced(a):
        return np.linalg.slogdet(a)
    (a,) = _float("slogdet", a)
    _square("slogdet", a)
    return SlogdetResult(_emit("slogdet", [a], part="sign"),
                         _emit("slogdet", [a], part="logabsdet"))


def cholesky(a, upper=False):
    """The lower Cholesky factor L (a = L @ L.T) of each matrix, from its lower triangle as
    NumPy reads it; upper=True gives L.T, from the upper triangle."""
    if not _traced(a):
        return np.linalg.cholesky(a, upper=upper) if upper else np.linalg.cholesky(a)
    (a,) = _float("cholesky", a)
    _square("cholesky", a)
    if upper:
        # the upper triangle of a is the lower triangle of a.T
        return F.swap_last(_emit("cholesky", [F.swap_last(a)]))
    return _emit("cholesky", [a])


def eigh(a, UPLO="L"):  # noqa: N803 - NumPy's name
    """(eigenvalues ascending, eigenvectors as columns) of each symmetric matrix, read from
    its lower triangle (UPLO="L") or upper one, by the same LAPACK call as NumPy, so the
    eigenvectors' signs agree. Gradients need distinct eigenvalues."""
    if not _traced(a):
        return np.linalg.eigh(a, UPLO)
    a, attrs = _uplo("eigh", a, UPLO)
    return EighResult(_emit("eigh", [a], part="eigenvalues", **attrs),
                      _emit("eigh", [a], part="eigenvectors", **attrs))


def eigvalsh(a, UPLO="L"):  # noqa: N803 - NumPy's name
    """The eigenvalues (ascending) of each symmetric matrix in a."""
    if not _traced(a):
        return np.linalg.eigvalsh(a, UPLO)
    a, attrs = _uplo("eigvalsh", a, UPLO)
    return _emit("eigh", [a], part="eigenvalues", **attrs)


def _uplo(what, a, uplo):
    (a,) = _float(what, a)
    _square(what, a)
    if uplo not in ("L", "U"):
        raise ShapeError(f"np.linalg.{what}: UPLO must be 'L' or 'U', got {uplo!r}"
                         f"{_at(user_where())}")
    # the default "L" is left out of the attributes: one spelling per program
    return a, ({"uplo": "U"} if uplo == "U" else {})


# -- helpers of the VJP and JVP rules (ir/ops.py) -----------------------------------------------
def _mask(x, diag):
    """A constant (n, n) in x's dtype: ones below the diagonal, `diag` on it, zeros above."""
    n = x.shape[-1]
    return F.lift(np.tril(np.ones((n, n)), -1) + diag * np.eye(n), x.dtype, x.ctx)


def phi(x):
    """The lower triangle with the diagonal halved (Murray 2016, eq. 8)."""
    return F.mul(x, _mask(x, 0.5))


def from_lower(t):
    """The symmetric matrix that a tangent t means to an op reading only the lower triangle."""
    return F.add(F.mul(t, _mask(t, 1.0)), F.swap_last(F.mul(t, _mask(t, 0.0))))


def to_lower(s):
    """The adjoint of from_lower: a cotangent s folded onto the lower triangle."""
    # mask before transposing: a fused group that reads both s and its transposed view may
    # overwrite s while the view is still to be read (numpy backend, as of this change)
    upper = F.swap_last(_mask(s, 0.0))
    return F.add(F.mul(s, _mask(s, 1.0)), F.swap_last(F.mul(s, upper)))


def cofactor(a):
    """det(a) inv(a).T, finite for singular matrices too (the det's cotangent direction)."""
    if not isinstance(a, Tracer):
        return OPS["cofactor"].numpy(np.asarray(a))
    return _emit("cofactor", [a])


def inv_t(a):
    """inv(a).T (the cotangent direction of det and slogdet)."""
    return F.swap_last(inv(a))


def trace_of(x, y):
    """trace(x.T @ y) of each matrix pair: sum(x * y) over the last two axes."""
    return F.sum(F.mul(x, y), axis=(-2, -1))


def matrix_scale(g, x):
    """g (...) scaling each matrix of x (..., n, n)."""
    return F.mul(F.reshape(g, tuple(g.shape) + (1, 1)), x)


def eigh_gaps(w):
    """F_ij = 1 / (w_j - w_i) off the diagonal and 0 on it (eigenvector derivatives), and 0
    for a repeated eigenvalue: LAPACK returns a pair that is equal in exact arithmetic
    (ZCA whitening of a covariance with equal variances) some n eps |w| apart, whose 1 / gap
    would swamp the gradient (NaN from 0 * inf, or noise). The term is then exact for a
    function whose cotangent does not mix the pair's eigenvectors (a projector onto the top
    k with the repeated pair outside them); for a spectral function V g(w) V^T (C ** -1/2)
    the exact term is the limit (g_j - g_i) / (w_j - w_i) = g'(w), which eigenvector
    cotangents cannot tell: write such a function so that it does not pass through the
    eigenvectors of a repeated eigenvalue."""
    n = w.shape[-1]
    zeros, ones = (F.lift(np.full((n, n), v), w.dtype, w.ctx) for v in (0.0, 1.0))
    diff = F.sub(F.reshape(w, w.shape[:-1] + (1, n)), F.reshape(w, w.shape[:-1] + (n, 1)))
    top = F.reshape(F.max(F.abs(w), axis=-1, keepdims=True), w.shape[:-1] + (1, 1))
    same = F.le(F.abs(diff), F.mul(top, 4.0 * n * float(np.finfo(w.dtype).eps)))
    # the diagonal and the repeated pairs divide 0 by 1, away from 0 / 0
    return F.div(F.where(same, zeros, ones), F.where(same, ones, diff))
