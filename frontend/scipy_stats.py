"""scipy.stats distributions with traced arguments: the densities, mass functions and
distribution functions of a Bayesian model's likelihood and priors
(`scipy.stats.gamma.logpdf(x, a, scale=s)`, `scipy.stats.poisson.logpmf(k, mu)`,
`scipy.stats.t(df, loc, scale).logpdf(x)`, `scipy.stats.multivariate_normal.logpdf(X, m, S)`).

SciPy's public methods need concrete arrays (they place results into NumPy arrays where the
parameters are valid); its private per-distribution formulas (`gamma._logpdf`) are mostly
plain ufunc expressions, which adjit traces. While tracing, the public methods of
rv_continuous and rv_discrete do their work here: standardize x, evaluate the private
formula (or adjit's own where SciPy's is not traceable, _OWN), and choose with np.where what
SciPy places: the formula on the support, -inf / 0 / 1 off it, NaN where a parameter is
invalid (SciPy's badvalue). Results are float64, as SciPy's. scipy.stats.norm keeps its own
methods (numpy_api._norm_method). A distribution whose private formula is not traceable
(gamma.cdf calls gammainc, which adjit does not differentiate) raises an error naming it.
"""
import math

import numpy as np

from ..ir.errors import ShapeError, TraceError, UnsupportedError
from . import buffer as B
from . import composites as C
from . import functions as F
from . import linalg as LA
from .tracer import Tracer, _at, user_where

CONTINUOUS = ("pdf", "logpdf", "cdf", "logcdf", "sf", "logsf", "ppf", "isf")
SUMMARIES = ("entropy", "mean", "var", "std")
DISCRETE = ("pmf", "logpmf", "cdf", "logcdf", "sf", "logsf")
MULTIVARIATE = ("pdf", "logpdf")


def _special(name):
    from .numpy_api import _SCIPY_SPECIAL
    return _SCIPY_SPECIAL[name]


def _t_logpdf(z, df):
    # SciPy's goes through sc.poch and a data-dependent branch for df = inf (the normal).
    # gammaln((df + 1) / 2) - gammaln(df / 2) - log(pi) / 2 is -betaln(df / 2, 1 / 2), whose
    # Stirling form keeps its digits at large df (the difference cancels: at df = 1e15 it
    # kept none)
    finite = C.isfinite(df)
    d = F.where(finite, df, 1.0)
    half = F.mul(F.add(d, 1.0), 0.5)
    t = F.sub(F.neg(_special("betaln")(F.mul(d, 0.5), 0.5)),
              F.add(F.mul(F.log(d), 0.5), F.mul(half, F.log1p(F.div(F.mul(z, z), d)))))
    normal = F.sub(F.mul(F.mul(z, z), -0.5), 0.5 * math.log(2 * math.pi))
    return F.where(finite, t, normal)


def _log_gauss_mass(a, b):
    """log(Phi(b) - Phi(a)) as SciPy's truncnorm computes it (its cases by masks): in the left
    tail by log_ndtr differences, the right by symmetry, else log1p(-Phi(a) - Phi(-b))."""
    log_ndtr, ndtr = _special("log_ndtr"), _special("ndtr")

    def left(a, b):
        la, lb = log_ndtr(a), log_ndtr(b)
        return F.add(lb, F.log1p(F.neg(F.exp(F.sub(la, lb)))))
    left_case, right_case = F.le(b, 0), F.gt(a, 0)
    central = F.log1p(F.sub(F.neg(ndtr(a)), ndtr(F.neg(b))))
    return F.where(left_case, left(a, b), F.where(right_case, left(F.neg(b), F.neg(a)),
                                                   central))


def _truncnorm_logcdf(x, a, b, upper=False):
    """truncnorm's log cdf (log sf with upper), log1p(-exp(the other)) near 0, as SciPy's."""
    mass = _log_gauss_mass(a, b)
    cdf = F.sub(_log_gauss_mass(a, x), mass)
    sf = F.sub(_log_gauss_mass(x, b), mass)
    mine, other = (sf, cdf) if upper else (cdf, sf)
    return F.where(F.gt(mine, -0.1), F.log1p(F.neg(F.exp(other))), mine)


def _truncnorm_logpdf(x, a, b):
    return F.sub(F.sub(F.mul(F.mul(x, x), -0.5), 0.5 * math.log(2 * math.pi)),
                 _log_gauss_mass(a, b))


# adjit's own standardized formulas where SciPy's private ones do not trace
_OWN = {
    ("t", "_logpdf"): _t_logpdf,
    ("t", "_pdf"): lambda z, df: F.exp(_t_logpdf(z, df)),
    # truncnorm's select their cases with masks of a and b
    ("truncnorm", "_logpdf"): _truncnorm_logpdf,
    ("truncnorm", "_pdf"): lambda x, a, b: F.exp(_truncnorm_logpdf(x, a, b)),
    ("truncnorm", "_logcdf"): _truncnorm_logcdf,
    ("truncnorm", "_cdf"): lambda x, a, b: F.exp(_truncnorm_logcdf(x, a, b)),
    ("truncnorm", "_logsf"): lambda x, a, b: _truncnorm_logcdf(x, a, b, upper=True),
    ("truncnorm", "_sf"): lambda x, a, b: F.exp(_truncnorm_logcdf(x, a, b, upper=True)),
}


def traced(args) -> bool:
    from .numpy_api import _holds_tracer
    return any(_holds_tracer(a) for a in args)


def _f64(a):
    from .numpy_api import _holds_tracer, _from_nested, _originals
    if _holds_tracer(a):
        a = B.resolve(_from_nested(a, _originals["asarray"]))
        return F.cast(a, np.float64) if F._dtype_of(a) != np.float64 else a
    return np.asarray(a, np.float64)


def _private(dist, method, kind):
    """dist's private formula `method` (SciPy's, or adjit's own), called on traced values
    with SciPy's failures said as what they are."""
    own = _OWN.get((dist.name, method))
    fn = getattr(dist, method)

    def call(*args, **kw):
        try:
            return own(*args, **kw) if own is not None else fn(*args, **kw)
        except (TraceError, UnsupportedError, TypeError, IndexError, ValueError) as e:
            # (TypeError: a Cython routine's argument; IndexError, ValueError: SciPy's code
            # meeting adjit's arrays where it expects its own; not a ShapeError of the user's)
            if isinstance(e, ShapeError) and not isinstance(e, (TypeError, IndexError)):
                raise
            raise _refusal(dist, kind, f"formula ({dist.name}.{method}) uses a function adjit "
                           "does not trace", e) from None
    return call


def _refusal(dist, kind, what, e):
    err = UnsupportedError(
        f"scipy.stats.{dist.name}.{kind} of traced arguments{_at(user_where())}: SciPy's "
        f"{what} ({str(e).split(' at ')[0][:160]}). Write the formula with NumPy and "
        "scipy.special's elementwise functions instead")
    err._adjit_stats = True
    err._adjit_library = True      # adjit's own message (trace.py keeps it inside SciPy frames)
    return err


def refusing(family):
    """family(kind, dist, ...) with SciPy's own checks that need concrete values (erlang's
    integer test of its shape) refused by name; the user's errors (shapes that do not
    broadcast) stay theirs."""
    def run(kind, dist, *rest):
        dist._parse_args(*rest[-2], **rest[-1])   # a missing or unknown parameter: SciPy's
        try:
            return family(kind, dist, *rest)
        except (TraceError, UnsupportedError, TypeError, IndexError, ValueError) as e:
            if getattr(e, "_adjit_stats", False) or isinstance(e, ShapeError):
                raise
            raise _refusal(dist, kind, "checks of the parameters need their values", e) \
                from None
    return run


def _valid(dist, shapes):
    """SciPy's _argcheck (every shape parameter > 0 unless the distribution says otherwise)."""
    check = getattr(type(dist), "_argcheck")
    from scipy.stats._distn_infrastructure import rv_generic
    if check is rv_generic._argcheck:
        ok = True
        for s in shapes:
            ok = C.logical_and(ok, F.gt(s, 0))
        return ok
    return dist._argcheck(*shapes)


def continuous(kind, dist, x, args, kwds):
    """rv_continuous.<kind>(x, *shapes, loc=0, scale=1) of traced arguments."""
    shapes, loc, scale = dist._parse_args(*args, **kwds)
    shapes = tuple(_f64(s) for s in shapes)
    x, loc, scale = _f64(x), _f64(loc), _f64(scale)
    good = C.logical_and(_valid(dist, shapes), F.gt(scale, 0))
    if kind in ("ppf", "isf"):
        q = x
        a, b = dist._get_support(*shapes)
        inner = C.logical_and(F.gt(q, 0), F.lt(q, 1))
        # the formula away from q in {0, 1}, where SciPy gives the support's ends
        qq = F.where(inner, q, 0.5)
        z = _private(dist, "_" + kind, kind)(qq, *shapes)
        lo, hi = (a, b) if kind == "ppf" else (b, a)
        z = F.where(inner, z, F.where(F.eq(q, 0), lo, hi))
        ok = C.logical_and(good, C.logical_and(F.ge(q, 0), F.le(q, 1)))
        return F.where(ok, F.add(F.mul(z, scale), loc), np.nan)
    z = F.div(F.sub(x, loc), scale)
    inside = C.logical_and(dist._support_mask(z, *shapes), F.gt(scale, 0))
    a, b = dist._get_support(*shapes)
    # the formula at points of the support only (its value elsewhere may be NaN or raise)
    zz = F.where(inside, z, _a_point(a, b))
    if kind in ("pdf", "logpdf"):
        r = _density(dist, kind, zz, shapes)
        r = F.sub(r, F.log(scale)) if kind == "logpdf" else F.div(r, scale)
        off = -np.inf if kind == "logpdf" else 0.0
        out = F.where(inside, r, off)
    else:
        # SciPy's: the formula inside the open support, the distribution's value at and beyond
        # its ends (so at +-inf too)
        inside = C.logical_and(dist._open_support_mask(z, *shapes), F.gt(scale, 0))
        zz = F.where(inside, z, _a_point(a, b))
        r = _private(dist, "_" + kind, kind)(zz, *shapes)
        ends = F.ge(z, b) if kind in ("cdf", "logcdf") else F.le(z, a)
        out = F.where(inside, r, _off_support(kind, ends))
    return F.where(C.logical_and(good, C.logical_not(C.isnan(z))), out, np.nan)


def _off_support(kind, ends):
    """cdf, logcdf, sf, logsf where the formula is not evaluated: 1 (log 0) at the ends (at
    and beyond the upper end for the cdf, below the lower one for the sf), else 0 (log -inf)."""
    return F.where(ends, 0.0 if kind.startswith("log") else 1.0,
                   -np.inf if kind.startswith("log") else 0.0)


def _density(dist, kind, z, shapes):
    """dist._pdf (_logpdf, _pmf, _logpmf), or the exponential of dist's own _logpdf
    (_logpmf) where SciPy's _pdf (_pmf) calls a routine adjit does not trace (beta's and
    binom's Boost functions)."""
    try:
        return _private(dist, "_" + kind, kind)(z, *shapes)
    except UnsupportedError:
        from scipy.stats import rv_continuous, rv_discrete
        log = "_log" + kind
        if kind not in ("pdf", "pmf") or getattr(type(dist), log) is getattr(
                rv_continuous if kind == "pdf" else rv_discrete, log):
            raise
        return F.exp(_private(dist, log, kind)(z, *shapes))


def _a_point(a, b):
    """A point inside [a, b] (finite): where off-support values are evaluated harmlessly."""
    a, b = np.asarray(a, np.float64) if not isinstance(a, Tracer) else a, \
        np.asarray(b, np.float64) if not isinstance(b, Tracer) else b
    if isinstance(a, Tracer) or isinstance(b, Tracer):
        mid = F.mul(F.add(a, b), 0.5)
        return F.where(C.isfinite(mid), mid, F.where(C.isfinite(a), F.add(a, 1.0),
                                                     F.where(C.isfinite(b), F.sub(b, 1.0),
                                                             0.0)))
    with np.errstate(invalid="ignore"):
        mid = (a + b) / 2
    return np.where(np.isfinite(mid), mid,
                    np.where(np.isfinite(a), a + 1.0, np.where(np.isfinite(b), b - 1.0, 0.0)))


def discrete(kind, dist, k, args, kwds):
    """rv_discrete.<kind>(k, *shapes, loc=0) of traced arguments."""
    shapes, loc, _ = dist._parse_args(*args, **kwds)
    shapes = tuple(_f64(s) for s in shapes)
    k, loc = _f64(k), _f64(loc)
    a, b = dist._get_support(*shapes)
    k = F.sub(k, loc)
    good = _valid(dist, shapes)
    if kind in ("pmf", "logpmf"):
        on = C.logical_and(C.logical_and(F.ge(k, a), F.le(k, b)), F.eq(F.floor(k), k))
        r = _density(dist, kind, F.where(on, k, _a_point(a, b)), shapes)
        out = F.where(on, r, -np.inf if kind == "logpmf" else 0.0)
    else:
        # SciPy's: the formula for finite a <= k < b, the ends' values at and beyond them
        on = C.logical_and(C.logical_and(F.ge(k, a), F.lt(k, b)), C.isfinite(k))
        r = _private(dist, "_" + kind, kind)(F.floor(F.where(on, k, _a_point(a, b))), *shapes)
        if kind in ("cdf", "sf"):
            r = F.minimum(F.maximum(r, 0.0), 1.0)       # SciPy clips them
        ends = F.ge(k, b) if kind in ("cdf", "logcdf") else F.lt(k, a)
        out = F.where(on, r, _off_support(kind, ends))
    return F.where(C.logical_and(good, C.logical_not(C.isnan(k))), out, np.nan)


def summary(kind, dist, args, kwds):
    """entropy, mean, var or std of a distribution with traced parameters: SciPy's private
    _entropy (+ log scale) and _stats (mean mu scale + loc, variance mu2 scale^2); NaN where
    a parameter is invalid."""
    shapes, loc, scale = dist._parse_args(*args, **kwds)
    shapes = tuple(_f64(s) for s in shapes)
    loc, scale = _f64(loc), _f64(scale)
    # SciPy's: NaN at invalid parameters and a NaN loc, the result broadcast with loc too
    good = C.logical_and(C.logical_and(_valid(dist, shapes), F.gt(scale, 0)), F.eq(loc, loc))
    if kind == "entropy":
        r = F.add(_private(dist, "_entropy", kind)(*shapes), F.log(scale))
    else:
        import inspect
        moments = "moments" in inspect.signature(dist._stats).parameters
        stats = _private(dist, "_stats", kind)(*shapes, **({"moments": "mv"} if moments
                                                           else {}))
        mu, mu2 = stats[0], stats[1]
        if mu is None or mu2 is None:
            raise _refusal(dist, kind, f"{dist.name}._stats gives no closed form (SciPy "
                           "integrates)", TypeError("None"))
        r = F.add(F.mul(mu, scale), loc) if kind == "mean" else F.mul(mu2, F.mul(scale, scale))
        r = F.sqrt(r) if kind == "std" else r
    return F.where(good, r, np.nan)


# -- multivariate ----------------------------------------------------------------------------
def mvn(kind, x, mean=None, cov=1, allow_singular=False):
    """multivariate_normal.logpdf / pdf: -(rank log 2 pi + log pdet S + |whiten(x - m)|^2) / 2.
    A constant cov (or a scipy.stats.Covariance) is SciPy's own factor (allow_singular as
    SciPy: -inf off a singular cov's support); a traced one goes through its Cholesky factor.
    Points and the squeezed result are SciPy's (a 1-d x is one point, or points of a 1-d
    distribution)."""
    from scipy.stats import _multivariate as mv
    cov_traced, mean_traced = traced([cov]), mean is not None and traced([mean])
    if cov_traced:
        if allow_singular:
            raise UnsupportedError(f"multivariate_normal with allow_singular=True and a traced "
                                   f"cov{_at(user_where())}: the pseudo-determinant's gradient "
                                   "is not followed; for a nonsingular cov drop "
                                   "allow_singular=True")
        cov = _f64(cov)
        sc = F._shape_of(cov)
        dim = (F._shape_of(_f64(mean))[-1] if mean is not None and F._shape_of(_f64(mean))
               else sc[0] if sc else 1)
        if len(sc) < 2:                      # a number, or a vector of the diagonal
            cov = F.mul(cov, np.eye(dim))
        L = LA.cholesky(cov)
        rank, logdet = dim, F.mul(F.sum(F.log(F.diagonal(L)), axis=None), 2.0)
        whiten, support = _cholesky_whiten(L, dim), None
    else:
        shape = None if mean is None else np.shape(B.resolve(mean)) if not mean_traced \
            else F._shape_of(B.resolve(mean))
        dim, _, c = mv.multivariate_normal._process_parameters(
            None if mean is None else np.zeros(shape) if mean_traced else mean, cov,
            allow_singular)
        rank, logdet, whiten = c.rank, c.log_pdet, c.whiten
        if type(c).__name__ == "CovViaCholesky":
            # its whitening is scipy.linalg.solve_triangular (concrete arrays only)
            whiten = _cholesky_whiten(np.linalg.cholesky(np.asarray(c.covariance)), dim)
        psd = getattr(c, "_psd", None)      # SciPy's _PSD: V spans the null space
        support = None if np.all(rank == dim) or psd is None else (psd.V, psd.eps)
        if support is None and np.any(rank < dim):
            raise UnsupportedError(f"multivariate_normal with a singular {type(c).__name__} "
                                   f"of traced points{_at(user_where())}; give the "
                                   "covariance matrix itself")
    mean = np.zeros(dim) if mean is None else _f64(mean)
    x = _f64(x)
    xs = F._shape_of(x)
    if len(xs) == 0:
        x = F.reshape(x, (1,))
    elif len(xs) == 1:
        x = F.reshape(x, (xs[0], 1) if dim == 1 else (1, xs[0]))
    dev = F.sub(x, mean)
    w = whiten(dev)
    maha = F.sum(F.mul(w, w), axis=-1)
    out = F.mul(F.add(F.add(maha, logdet), float(rank) * math.log(2 * math.pi)), -0.5)
    if support is not None:
        # SciPy's: -inf off the support of a singular covariance
        null, eps = support
        res = F.sqrt(F.sum(F.mul(F.matmul(dev, null), F.matmul(dev, null)), axis=-1))
        out = F.where(F.lt(res, eps), out, -np.inf)
    out = F.exp(out) if kind == "pdf" else out
    shape = F._shape_of(out)
    return F.reshape(out, tuple(d for d in shape if d != 1)) if 1 in shape else out


def _cholesky_whiten(L, dim):
    """dev -> L^-1 dev over dev's last axis (L lower triangular, dim x dim)."""
    def whiten(dev):
        flat = F.reshape(dev, (-1, dim))
        y = LA.solve_triangular(L, F.transpose(flat, (1, 0)), lower=True)
        return F.reshape(F.transpose(y, (1, 0)), F._shape_of(dev))
    return whiten


def dirichlet(kind, x, alpha):
    """dirichlet.logpdf / pdf: sum((alpha - 1) log x) - log B(alpha) over the first axis; x
    one entry short gets 1 - sum(x) as its last, as SciPy's. SciPy's checks of constant
    arguments raise as SciPy's; a traced alpha <= 0 gives NaN (a traced x is not checked)."""
    from scipy.stats import _multivariate as mv
    x, alpha = _f64(x), _f64(alpha)
    n = F._shape_of(alpha)[0] if len(F._shape_of(alpha)) == 1 else None
    if n is not None and F._shape_of(x) and F._shape_of(x)[0] == n - 1:
        last = F.sub(1.0, F.sum(x, axis=0, keepdims=True))
        x = F.concatenate([x, last], 0) if isinstance(x, Tracer) or isinstance(last, Tracer) \
            else np.concatenate([x, last], 0)
    if not isinstance(alpha, Tracer):
        mv._dirichlet_check_parameters(alpha)
    if not isinstance(x, Tracer):
        mv._dirichlet_check_input(alpha if not isinstance(alpha, Tracer) else
                                  np.full(F._shape_of(alpha), 2.0), x)
    gl = _special("gammaln")
    lnb = F.sub(F.sum(gl(alpha), axis=None), gl(F.sum(alpha, axis=None)))
    a = alpha if len(F._shape_of(x)) == 1 else F.reshape(alpha, (-1, 1))
    out = F.sub(F.sum(_special("xlogy")(F.sub(a, 1.0), x), axis=0), lnb)
    if isinstance(alpha, Tracer):
        out = F.where(F.gt(F.min(alpha, axis=None), 0), out, np.nan)
    return F.exp(out) if kind == "pdf" else out


def multinomial(kind, x, n, p):
    """multinomial.logpmf / pmf: gammaln(n + 1) + sum(xlogy(x, p) - gammaln(x + 1)) over the
    last axis, as SciPy's: a row of p that does not sum to 1 takes 1 - the others' sum as
    its last entry, -inf where x is not nonnegative integers summing to n, NaN where p is
    outside [0, 1] or n < 0."""
    # SciPy's tolerance is of p's own type (float32 p: 1.2e-6), n truncated to an integer
    eps = np.finfo(np.result_type(F._dtype_of(B.resolve(p)) if traced([p]) else
                                  np.asarray(p).dtype, np.float32)).eps * 10
    p = _f64(p)
    n = F.cast(F.cast(B.resolve(n), np.int64), np.float64) if traced([n]) else \
        np.asarray(n, dtype=int).astype(np.float64)
    head = F.getitem(p, (Ellipsis, slice(None, -1)))
    fixed = F.concatenate([head, F.sub(1.0, F.sum(head, axis=-1, keepdims=True))], -1)
    off = F.gt(F.abs(F.sub(1.0, F.sum(p, axis=-1, keepdims=True))), eps)
    p = F.where(off, fixed, p)
    bad = C.logical_or(C.logical_or(F.lt(F.min(p, axis=-1), 0), F.gt(F.max(p, axis=-1), 1)),
                       F.lt(n, 0))
    if not traced([x]):
        x = np.asarray(x)
        if x.ndim == 0:
            raise ValueError("x must be an array.")
        xx = x.astype(int)
        outside = (np.any(xx != x, axis=-1) | np.any(xx < 0, axis=-1))
        x = xx.astype(np.float64)
    else:
        x = _f64(x)
        outside = C.logical_or(F.gt(F.max(F.abs(F.sub(x, F.floor(x))), axis=-1), 0),
                               F.lt(F.min(x, axis=-1), 0))
    outside = C.logical_or(outside, C.logical_not(F.eq(F.sum(x, axis=-1), n)))
    gl = _special("gammaln")
    out = F.add(gl(F.add(n, 1.0)), F.sum(F.sub(_special("xlogy")(x, p), gl(F.add(x, 1.0))),
                                         axis=-1))
    out = F.where(bad, np.nan, F.where(outside, -np.inf, out))
    return F.exp(out) if kind == "pmf" else out


class _Frozen:
    """A frozen distribution of traced parameters: pdf and logpdf; its other methods (cdf,
    rvs, entropy) are refused by name."""
    _name = ""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise UnsupportedError(f"scipy.stats.{self._name}(...).{name} with traced parameters"
                               f"{_at(user_where())}: adjit follows its pdf and logpdf")


class FrozenMVN(_Frozen):
    """multivariate_normal(mean, cov) with traced parameters."""
    _name = "multivariate_normal"

    def __init__(self, mean=None, cov=1, allow_singular=False, seed=None):
        self.mean, self.cov, self.allow_singular = mean, cov, allow_singular

    def logpdf(self, x):
        return mvn("logpdf", x, self.mean, self.cov, self.allow_singular)

    def pdf(self, x):
        return mvn("pdf", x, self.mean, self.cov, self.allow_singular)


class FrozenMultinomial(_Frozen):
    """multinomial(n, p) with traced parameters."""
    _name = "multinomial"

    def __init__(self, n, p, seed=None):
        self.n, self.p = n, p

    def logpmf(self, x):
        return multinomial("logpmf", x, self.n, self.p)

    def pmf(self, x):
        return multinomial("pmf", x, self.n, self.p)


class FrozenDirichlet(_Frozen):
    """dirichlet(alpha) with a traced alpha."""
    _name = "dirichlet"

    def __init__(self, alpha, seed=None):
        self.alpha = alpha

    def logpdf(self, x):
        return dirichlet("logpdf", x, self.alpha)

    def pdf(self, x):
        return dirichlet("pdf", x, self.alpha)
