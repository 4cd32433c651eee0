"""Statistics built from the elementary functions: np.cov, np.corrcoef, np.quantile and
np.percentile (sort, then a constant-index gather and a linear interpolation), and the
NaN-aware variance, standard deviation and arg-extremes.

Each follows NumPy's own formula step by step, so values agree to rounding and dtypes agree
exactly; constants that shape the result (q, weights, ddof) must be NumPy values.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from ..ir.errors import ShapeError, UnsupportedError
from . import composites as C
from . import functions as F
from . import numeric as N
from .tracer import Tracer, _at, user_where

_shape_of, _dtype_of = F._shape_of, F._dtype_of


def _ndim(x):
    return len(_shape_of(x))


def _ndmin2(x):
    s = tuple(_shape_of(x))
    return F.reshape(x, (1,) * (2 - len(s)) + s) if len(s) < 2 else x


def _cov_weights(w, what, nobs):
    """NumPy's checks of constant fweights / aweights, as float64."""
    if isinstance(w, Tracer):
        # traced weights (a mixture model's responsibilities): their values cannot be checked
        if what == "fweights":
            raise UnsupportedError(f"np.cov(..., fweights=...) with traced weights"
                                   f"{_at(user_where())}; frequency weights are integer "
                                   "counts: pass them as a NumPy array, or use aweights=")
        if w.ndim != 1 or w.shape[0] != nobs:
            raise ShapeError(f"np.cov: {what} of shape {w.shape} do not fit {nobs} "
                             f"observations{_at(user_where())}")
        return w
    w = np.asarray(w, dtype=float)
    if what == "fweights" and not np.all(w == np.around(w)):
        raise ShapeError(f"np.cov: fweights must be integer{_at(user_where())}")
    if w.ndim != 1 or w.shape[0] != nobs:
        raise ShapeError(f"np.cov: {what} of shape {w.shape} do not fit {nobs} observations"
                         f"{_at(user_where())}")
    if np.any(w < 0):
        raise ShapeError(f"np.cov: {what} cannot be negative{_at(user_where())}")
    return w


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *,
        dtype=None):
    """Covariance matrix of the rows (or, with rowvar=False, the columns) of m, as np.cov.

    >>> import numpy as np, adjit
    >>> adjit.compile(lambda m: np.cov(m), backend="numpy")(np.array([[0., 1., 2.], [2., 1., 0.]]))
    array([[ 1., -1.],
           [-1.,  1.]])
    """
    if ddof is not None and ddof != int(ddof):
        raise ShapeError(f"np.cov: ddof must be an integer{_at(user_where())}")
    for v in (m, y):
        if v is not None and _ndim(v) > 2:
            raise ShapeError(f"np.cov of an array with more than 2 dimensions"
                             f"{_at(user_where())}")
    if dtype is None:
        dtype = np.result_type(*[_dtype_of(v) for v in (m, y) if v is not None], np.float64)
    X = _ndmin2(F.cast(m, dtype))
    if not rowvar and _ndim(m) != 1:
        X = F.transpose(X)
    if _shape_of(X)[0] == 0:
        return np.array([]).reshape(0, 0)
    if y is not None:
        Y = _ndmin2(F.cast(y, dtype))
        if not rowvar and _shape_of(Y)[0] != 1:
            Y = F.transpose(Y)
        X = F.concatenate([X, Y], axis=0)
    if ddof is None:
        ddof = 0 if bias else 1
    nobs = _shape_of(X)[1]
    w = None
    if fweights is not None:
        w = _cov_weights(fweights, "fweights", nobs)
    if aweights is not None:
        aweights = _cov_weights(aweights, "aweights", nobs)
        w = aweights if w is None else w * aweights
    traced = isinstance(w, Tracer)   # traced aweights (fweights are refused traced)
    if w is None:
        avg, fact = F.mean(X, axis=1), nobs - ddof
    else:
        w = F.cast(w, dtype) if traced else w
        w_sum = F.sum(w) if traced else w.sum(dtype=np.result_type(dtype, w.dtype))
        avg = F.div(F.sum(F.mul(X, w), axis=1), w_sum)
        if ddof == 0:
            fact = w_sum
        elif aweights is None:
            fact = w_sum - ddof
        else:
            fact = F.sub(w_sum, F.div(F.mul(ddof, F.sum(F.mul(w, aweights))), w_sum)) \
                if traced else w_sum - ddof * np.sum(w * aweights) / w_sum
    Xc = F.cast(F.sub(X, F.reshape(avg, (-1, 1))), _dtype_of(X))   # in place in NumPy
    Xt = F.transpose(Xc if w is None else F.mul(Xc, w))
    if traced:
        return F.squeeze(F.div(F.matmul(Xc, Xt), fact))
    if fact <= 0:
        warnings.warn("Degrees of freedom <= 0 for slice", RuntimeWarning, stacklevel=3)
        fact = 0.0
    with np.errstate(divide="ignore"):
        scale = float(np.true_divide(1, fact))
    return F.squeeze(F.mul(F.matmul(Xc, Xt), scale))


def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    """Pearson correlation coefficients, cov / (std std^T) clipped to [-1, 1], as np.corrcoef.

    >>> import numpy as np, adjit
    >>> m = np.array([[0., 1., 2.], [0., 2., 5.]])
    >>> adjit.compile(lambda m: np.corrcoef(m), backend="numpy")(m).round(4)
    array([[1.    , 0.9934],
           [0.9934, 1.    ]])
    """
    c = cov(x, y, rowvar, dtype=dtype)
    if _ndim(c) == 0:
        return F.div(c, c)
    s = F.sqrt(F.diagonal(c))
    c = F.div(F.div(c, F.reshape(s, (-1, 1))), F.reshape(s, (1, -1)))
    return F.minimum(F.maximum(c, -1), 1)


# -- quantiles -----------------------------------------------------------------------------------
def _axes_first(a, axis):
    """(arr, a's shape, the reduced axes): the reduced axes of a merged into axis 0, the
    others kept after it, as in NumPy's quantile implementation."""
    shape = tuple(_shape_of(a))
    nd = len(shape)
    axes = tuple(range(nd)) if axis is None else F._axes(a, axis)
    keep = [i for i in range(nd) if i not in axes]
    arr = F.reshape(F.transpose(a, list(axes) + keep),
                    (_count(shape, axes),) + tuple(shape[i] for i in keep))
    return arr, shape, axes


def _count(shape, axes):
    """How many values the axes of shape hold (an explicit -1: other axes may be empty)."""
    return int(math.prod([shape[i] for i in axes]))


def _hyndman_fan(alpha, beta):
    return lambda n, q: n * q + (alpha + q * (1 - alpha - beta)) - 1


def _boundaries(index, condition):
    """NumPy's _discrete_interpolation_to_boundaries: the order statistic below the virtual
    index where condition(gamma, index) holds, else the one above (0 at least); NumPy's
    functions, so n may be traced (nanquantile's count per slice)."""
    prev = np.floor(index)
    pick = np.where(condition(index - prev, index), prev, prev + 1)
    return np.maximum(pick, 0).astype(np.intp)


# method -> (virtual index of quantiles q in n sorted values, gamma from (gamma, index) or None
# where the index is an integer): NumPy's table (the discrete H&F methods 1-3 included)
_METHODS = {
    "inverted_cdf": (lambda n, q: _boundaries(n * q - 1, lambda g, i: g == 0), None),
    "averaged_inverted_cdf": (lambda n, q: n * q - 1,
                              lambda g, i: np.where(g == 0, 0.5, 1.0)),
    "closest_observation": (lambda n, q: _boundaries(
        n * q - 1 - 0.5, lambda g, i: (g == 0) & (np.floor(i) % 2 == 1)), None),
    "linear": (lambda n, q: (n - 1) * q, lambda g, i: g),
    "lower": (lambda n, q: np.floor((n - 1) * q).astype(np.intp), None),
    "higher": (lambda n, q: np.ceil((n - 1) * q).astype(np.intp), None),
    "nearest": (lambda n, q: np.around((n - 1) * q).astype(np.intp), None),
    "midpoint": (lambda n, q: 0.5 * (np.floor((n - 1) * q) + np.ceil((n - 1) * q)),
                 lambda g, i: np.where(i % 1 == 0, 0.0, 0.5)),
    "interpolated_inverted_cdf": (_hyndman_fan(0, 1), lambda g, i: g),
    "hazen": (_hyndman_fan(0.5, 0.5), lambda g, i: g),
    "weibull": (_hyndman_fan(0, 0), lambda g, i: g),
    "median_unbiased": (_hyndman_fan(1 / 3.0, 1 / 3.0), lambda g, i: g),
    "normal_unbiased": (_hyndman_fan(3 / 8.0, 3 / 8.0), lambda g, i: g),
}


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
             keepdims=False, *, weights=None, interpolation=None, _name="quantile", _scale=1):
    """q-th quantiles along axis: sort, gather the neighbours of each virtual index and
    interpolate linearly between them, as np.quantile. q must be a constant.

    >>> import numpy as np, adjit
    >>> adjit.grad(lambda a: np.quantile(a, 0.25), backend="numpy")(np.array([4., 1., 3., 2.]))
    array([0.  , 0.25, 0.  , 0.75])
    """
    where = _at(user_where())
    weak_q, qa = _quantile_args(q, out, weights, interpolation, method, _name, _scale, where)
    if not (np.all(qa >= 0) and np.all(qa <= 1)) or qa.ndim > 2:
        raise ShapeError(f"np.{_name}: q must be a scalar, 1-d or 2-d with values in "
                         f"[0, {_scale}]{where}")
    arr, shape, axes = _axes_first(a, axis)
    n = _shape_of(arr)[0]
    vfun, fix_gamma = _METHODS[method]
    virtual = np.asanyarray(vfun(n, qa))
    srt = C.sort(arr, 0)
    # an integer index is taken as it is only where NumPy does (the discrete methods, and
    # linear); the others clip it into [0, n - 1] (weibull's q = 0 gives -1, q = 1 gives n)
    if virtual.dtype.kind in "iu" and (fix_gamma is None or method == "linear"):
        vals = F.getitem(srt, int(virtual) if virtual.ndim == 0 else virtual)
    else:
        vals = _interpolate(srt, virtual, n, fix_gamma, weak_q)
    if _dtype_of(arr).kind == "f":   # NaNs sort last; NumPy's answer for such a slice is NaN
        vals = F.where(C.isnan(F.getitem(srt, -1)), math.nan, vals)
    if keepdims:
        vals = F.reshape(vals, qa.shape + tuple(1 if i in axes else d
                                                for i, d in enumerate(shape)))
    return vals


def _quantile_args(q, out, weights, interpolation, method, name, scale, where):
    """The checks np.quantile and np.nanquantile share: (q is a Python number, q / scale)."""
    if weights is not None:
        raise UnsupportedError(
            f"np.{name} with weights={where} is not supported by adjit; write the weighted "
            "inverted-CDF quantile (NumPy's) directly: i = np.argsort(x); c = np.cumsum(w[i]); "
            "x[i][np.minimum(np.searchsorted(c / c[-1], q), len(x) - 1)]")
    if out is not None or interpolation is not None:
        raise UnsupportedError(f"np.{name} with out= or interpolation={where}: compute the "
                               "result and assign it (out[...] = ...); interpolation= is "
                               "method= since NumPy 1.22")
    if isinstance(q, Tracer):
        raise UnsupportedError(f"np.{name} with a traced q{where}; q must be a constant "
                               f"(a number, list or NumPy array){q.argument_hint()}")
    if method not in _METHODS:
        raise UnsupportedError(f"np.{name} with method={method!r}{where}; supported: "
                               f"{', '.join(_METHODS)} (the default is 'linear')")
    # a Python number keeps the array's float dtype
    return type(q) in (int, float), (np.true_divide(q, scale) if scale != 1
                                     else np.asanyarray(q))


def _interpolate(srt, virtual, n, fix_gamma, weak_q):
    """NumPy's _get_indexes + _lerp: neighbours of each virtual index, weighted by gamma."""
    prev = np.floor(virtual)
    gamma = np.asanyarray(fix_gamma(np.asanyarray(virtual - prev), virtual),
                          dtype=virtual.dtype)
    prev = prev.astype(np.intp)
    nxt = prev + 1
    above, below = virtual >= n - 1, virtual < 0
    prev, nxt = np.where(above, n - 1, np.where(below, 0, prev)), \
        np.where(above, n - 1, np.where(below, 0, nxt))
    pick = (lambda i: F.getitem(srt, int(i))) if virtual.ndim == 0 else \
        (lambda i: F.getitem(srt, i))
    lo, hi = pick(prev), pick(nxt)
    extra = (1,) * (len(_shape_of(srt)) - 1)
    t = float(gamma) if weak_q else gamma.reshape(gamma.shape + extra)
    d = F.sub(hi, lo)
    # two forms of the same line: each exact at its end, as in NumPy's _lerp
    up, down = F.add(lo, F.mul(d, t)), F.sub(hi, F.mul(d, np.subtract(1, t)))
    upper = np.asarray(t) >= 0.5
    if upper.all() or not upper.any():
        return up if not upper.any() else F.cast(down, _dtype_of(up))
    return F.where(upper, F.cast(down, _dtype_of(up)), up)


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
               keepdims=False, *, weights=None, interpolation=None):
    """q-th percentiles (q in [0, 100]) along axis, as np.percentile: np.quantile of q / 100.

    >>> import numpy as np, adjit
    >>> float(adjit.compile(lambda a: np.percentile(a, 50), backend="numpy")(np.arange(5.)))
    2.0
    """
    return quantile(a, q, axis, out, overwrite_input, method, keepdims, weights=weights,
                    interpolation=interpolation, _name="percentile", _scale=100)


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                keepdims=False, *, weights=None, interpolation=None, _name="nanquantile",
                _scale=1):
    """q-th quantiles of the non-NaN values along axis, as np.nanquantile (NaN where a slice
    has none). NaNs sort last, so each slice's count k of numbers is traced and the virtual
    index of q among them, and its neighbours, are computed from k in the program.

    >>> import numpy as np, adjit
    >>> x = np.array([4., np.nan, 1., 3., 2.])
    >>> adjit.grad(lambda a: np.nanquantile(a, 0.25), backend="numpy")(x)
    array([0.  , 0.  , 0.25, 0.  , 0.75])
    """
    where = _at(user_where())
    plain = _name.replace("nan", "", 1)
    if _dtype_of(a).kind != "f" or not isinstance(a, Tracer):   # no NaN to skip
        return quantile(a, q, axis, out, overwrite_input, method, keepdims, weights=weights,
                        interpolation=interpolation, _name=plain, _scale=_scale)
    weak_q, qa = _quantile_args(q, out, weights, interpolation, method, _name, _scale, where)
    if not (np.all(qa >= 0) and np.all(qa <= 1)) or qa.ndim > 2:
        raise ShapeError(f"np.{_name}: q must be a scalar, 1-d or 2-d with values in "
                         f"[0, {_scale}]{where}")
    if not _count(_shape_of(a), range(_ndim(a))):
        return _empty_nan(a, axis, keepdims)
    kq, pick, dtype, finish = _nan_sorted(a, axis, qa.shape, keepdims)
    vfun, fix_gamma = _METHODS[method]
    virtual = vfun(kq, qa.reshape(qa.shape + (1,) * (len(_shape_of(kq)) - qa.ndim)))
    if fix_gamma is None:
        vals = pick(virtual)
    else:
        prev = F.floor(virtual)
        gamma = fix_gamma(F.sub(virtual, prev), virtual)
        lo, hi = pick(prev), pick(F.add(prev, 1))
        t = F.cast(gamma, dtype if weak_q else np.float64)
        d = F.sub(hi, lo)
        vals = F.where(F.ge(t, 0.5), F.sub(hi, F.mul(d, F.sub(1, t))),
                       F.add(lo, F.mul(d, t)))
    return finish(vals)


def _empty_nan(a, axis, keepdims):
    """NumPy's answer for an empty array: np.nanmean's, NaN in nanmean's shape (whatever q)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = np.nanmean(np.empty(_shape_of(a), _dtype_of(a)), axis, keepdims=keepdims)
    return F.full_like(F.zeros(np.shape(want), want.dtype), math.nan)


def _nan_sorted(a, axis, qshape, keepdims):
    """What the NaN-skipping quantiles share: the reduced axes of a merged into axis 0 and
    sorted (NaNs last); kq, each slice's count of numbers shaped qshape-broadcastable; pick(i),
    the sorted values at traced indices i (clipped into the numbers) of shape qshape + rest;
    the array's dtype; and finish(vals), which gives slices without numbers NaN and applies
    keepdims."""
    arr, shape, axes = _axes_first(a, axis)
    rest = tuple(_shape_of(arr)[1:])
    full = tuple(qshape) + rest
    srt = C.sort(arr, 0)
    kq = F.reshape(F.sum(C.logical_not(C.isnan(arr)), 0), (1,) * len(qshape) + rest)
    last = F.maximum(F.sub(kq, 1), 0)

    def pick(i):
        if not _shape_of(srt)[0]:      # nothing to pick from: finish makes it NaN
            return F.full_like(F.zeros(full, _dtype_of(srt)), math.nan)
        i = F.broadcast_to(F.maximum(F.minimum(F.cast(i, np.intp), last), 0), full)
        got = F.take_along_axis(srt, F.reshape(i, (_count(full, range(len(qshape))),) + rest),
                                0)
        return F.reshape(got, full)

    def finish(vals):
        vals = F.where(F.broadcast_to(F.eq(kq, 0), full), math.nan, vals)
        if keepdims:
            vals = F.reshape(vals, tuple(qshape) + tuple(1 if i in axes else d
                                                         for i, d in enumerate(shape)))
        return vals
    return kq, pick, _dtype_of(arr), finish


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                  keepdims=False, *, weights=None, interpolation=None):
    """q-th percentiles (q in [0, 100]) of the non-NaN values along axis, as np.nanpercentile.

    >>> import numpy as np, adjit
    >>> float(adjit.compile(lambda a: np.nanpercentile(a, 50), backend="numpy")(
    ...     np.array([0., np.nan, 1., 2.])))
    1.0
    """
    return nanquantile(a, q, axis, out, overwrite_input, method, keepdims, weights=weights,
                       interpolation=interpolation, _name="nanpercentile", _scale=100)


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """Median of the non-NaN values along axis, as np.nanmedian: the mean of the middle one
    or two of each slice's numbers (NaN where a slice has none).

    >>> import numpy as np, adjit
    >>> float(adjit.compile(np.nanmedian, backend="numpy")(np.array([3., np.nan, 1., 2., 9.])))
    2.5
    """
    if out is not None:
        raise UnsupportedError(f"np.nanmedian with out={_at(user_where())}")
    if _dtype_of(a).kind != "f" or not isinstance(a, Tracer):
        return C.median(a, axis, keepdims)
    if not _count(_shape_of(a), range(_ndim(a))):
        return _empty_nan(a, axis, keepdims)
    kq, pick, _, finish = _nan_sorted(a, axis, (), keepdims)
    lo, hi = pick(N.floor_divide(F.sub(kq, 1), 2)), pick(N.floor_divide(kq, 2))
    # an odd count's middle value itself, as NumPy (its mean with itself can overflow)
    return finish(F.where(F.eq(lo, hi), lo, F.div(F.add(lo, hi), 2)))


# -- NaN-aware moments and arg-extremes -------------------------------------------------------
def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None,
           mean=None, correction=None):
    """Variance of the non-NaN values, as np.nanvar (NaN where a slice has no values).

    >>> import numpy as np, adjit
    >>> float(adjit.compile(np.nanvar, backend="numpy")(np.array([1., np.nan, 3.])))
    1.0
    """
    if out is not None or where is not None or mean is not None:
        raise UnsupportedError(f"np.nanvar with out=, where= or mean={_at(user_where())}")
    if correction is not None:
        ddof = correction
    if dtype is not None:
        a = F.cast(a, dtype)
    elif _dtype_of(a).kind not in "fc":
        a = F.cast(a, np.float64)
    ok = C.logical_not(C.isnan(a))
    cnt = F.sum(ok, axis, keepdims=True)
    avg = F.div(C.nansum(a, axis, keepdims=True), F.cast(cnt, _dtype_of(a)))
    d = F.where(ok, F.sub(a, avg), F.zeros_like(a))
    sq = F.sum(F.mul(d, d), axis, keepdims)
    dof = F.sub(F.cast(F.sum(ok, axis, keepdims), _dtype_of(a)), ddof)
    return F.div(sq, F.where(F.gt(dof, 0), dof, math.nan))


def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None,
           mean=None, correction=None):
    """sqrt(np.nanvar(...)), as np.nanstd (derivative 0 at a constant slice, as np.std's)."""
    return F.sqrt_of_variance(nanvar(a, axis, dtype, out, ddof, keepdims, where=where,
                                     mean=mean, correction=correction))


def nanargmax(a, axis=None, out=None, *, keepdims=False, _neg=False):
    """Index of the largest non-NaN value, as np.nanargmax (an all-NaN slice, which NumPy
    refuses, gives 0 here: the check would need concrete values)."""
    if out is not None or keepdims:
        raise UnsupportedError(f"np.nanargmax with out= or keepdims={_at(user_where())}")
    x = F.reversed_order(a) if _neg else a
    fill = -math.inf if _dtype_of(x).kind == "f" else 0
    return F.argmax(F.where(C.isnan(x), fill, x), axis)


def nanargmin(a, axis=None, out=None, *, keepdims=False):
    """Index of the smallest non-NaN value, as np.nanargmin."""
    return nanargmax(a, axis, out, keepdims=keepdims, _neg=True)
