"""The special functions of the op table: erf, erfc, expit (sigmoid), gammaln, polygamma(n, x).

SciPy computes them where it is installed (it is not a dependency: users reach these ops
through scipy.special); otherwise the NumPy code below does, by the same algorithm the numba
and CUDA helpers use (backends/numba_helpers.py `_rt_polygamma`, backends/cuda_source.py):
shift x up with the recurrence psi^(n)(x) = psi^(n)(x + 1) + (-1)^(n+1) n! / x^(n+1) until it
is large, then sum the asymptotic series

    psi(x)      ~ ln x - 1/(2x) - sum_k B_2k / (2k x^2k)
    psi^(n)(x)  ~ (-1)^(n+1) [(n-1)!/x^n + n!/(2 x^(n+1)) + sum_k B_2k (2k+n-1)!/((2k)! x^(2k+n))]

with the Bernoulli numbers B_2 .. B_14; digamma of a negative x uses the reflection
psi(x) = psi(1 - x) - pi / tan(pi x). Values at the poles follow SciPy: psi(0) = -inf, psi at a
negative integer nan, psi^(n) at a non-positive integer inf for odd n and -inf for even n.
"""
from __future__ import annotations

import math

import numpy as np

# B_2, B_4, ..., B_14
BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6)


def shift_target(n: int) -> float:
    """x is shifted up to at least this before the asymptotic series (more terms matter for
    higher derivatives)."""
    return 10.0 + 2.0 * n


def _series(n, x):
    """The asymptotic series at x >= shift_target(n) (arrays)."""
    if n == 0:
        r = np.log(x) - 0.5 / x
        x2 = x * x
        p = x2
        for k, b in enumerate(BERNOULLI, 1):
            r = r - b / (2 * k * p)
            p = p * x2
        return r
    sign = 1.0 if n % 2 else -1.0
    r = math.factorial(n - 1) / x ** n + math.factorial(n) / (2 * x ** (n + 1))
    for k, b in enumerate(BERNOULLI, 1):
        c = b * math.factorial(2 * k + n - 1) / math.factorial(2 * k)
        r = r + c / x ** (2 * k + n)
    return sign * r


def polygamma_numpy(x, n):
    """psi^(n)(x) elementwise, n >= 0 (the op's reference without SciPy)."""
    x = np.asarray(x, dtype=np.float64)
    out_shape = x.shape
    x = x.reshape(-1).copy()
    res = np.zeros_like(x)
    pole = (x <= 0) & (x == np.floor(x))
    if n == 0:
        # reflection for negative x: psi(x) = psi(1 - x) - pi / tan(pi x)
        neg = (x < 0) & ~pole
        refl = np.where(neg, np.pi / np.tan(np.pi * np.where(neg, x, 0.5)), 0.0)
        x = np.where(neg, 1.0 - x, x)
        res = res - refl
    sign = 1.0 if n % 2 else -1.0
    fact = float(math.factorial(n))
    target = shift_target(n)
    ok = ~pole & np.isfinite(x)
    while True:
        low = ok & (x < target)
        if not low.any():
            break
        xs = np.where(low, x, 1.0)
        step = -1.0 / xs if n == 0 else sign * fact / xs ** (n + 1)
        res = res + np.where(low, step, 0.0)
        x = np.where(low, x + 1.0, x)
    with np.errstate(all="ignore"):
        res = res + np.where(ok, _series(n, np.where(ok, x, target)), 0.0)
    # the poles, nan and the infinities as SciPy has them
    if n == 0:
        res = np.where(pole, np.where(x == 0, -np.inf, np.nan), res)
        res = np.where(np.isposinf(x), np.inf, res)
    else:
        res = np.where(pole, np.inf if n % 2 else -np.inf, res)
        res = np.where(np.isposinf(x), 0.0, res)
    res = np.where(np.isnan(x) | np.isneginf(x), np.nan, res)
    return res.reshape(out_shape)


_SCIPY = {}


def _scipy(name):
    if name not in _SCIPY:
        try:
            from scipy import special
            _SCIPY[name] = getattr(special, name)
        except ImportError:
            _SCIPY[name] = None
    return _SCIPY[name]


def _float_dtype(x):
    return x.dtype if x.dtype.kind == "f" else np.dtype(np.float64)


def _elementwise(name, fallback, x):
    """SciPy's `name` of x, else fallback(x), in x's float dtype (float64 for integers)."""
    x = np.asarray(x)
    fn = _scipy(name)
    r = fn(x) if fn is not None else fallback(x)
    return np.asarray(r).astype(_float_dtype(x), copy=False)


def gammaln(x):
    """log |Gamma(x)| (scipy.special.gammaln)."""
    return _elementwise("gammaln", np.vectorize(_lgamma, otypes=[np.float64]), x)


def erf(x):
    return _elementwise("erf", np.vectorize(math.erf, otypes=[np.float64]), x)


def erfc(x):
    return _elementwise("erfc", np.vectorize(math.erfc, otypes=[np.float64]), x)


def expit(x):
    """1 / (1 + exp(-x)), exact in relative terms for x < 0 too (exp(x) / (1 + exp(x)))."""
    x = np.asarray(x)
    return _elementwise("expit", _expit, x if x.dtype.kind == "f" else x.astype(np.float64))


def _expit(x):
    e = np.asarray(np.exp(-np.abs(x)))
    r = np.add(e, 1, out=np.empty_like(e))    # an array also for a 0-d x
    num = np.ones_like(e)
    np.copyto(num, e, where=x < 0)            # one division, as SciPy's: e / (1 + e) below 0
    return np.divide(num, r, out=r)


def _lgamma(v):
    if v == -math.inf:     # SciPy's value (Python's lgamma gives inf)
        return v
    try:
        return math.lgamma(v)
    except ValueError:     # the poles
        return math.inf


def polygamma(x, n):
    """psi^(n)(x) (scipy.special.polygamma; n = 0 is digamma)."""
    x = np.asarray(x)
    fn = _scipy("polygamma")
    r = fn(n, x) if fn is not None else polygamma_numpy(x, n)
    return np.asarray(r).astype(_float_dtype(x), copy=False)
