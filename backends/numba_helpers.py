"""The scalar helpers that the `scalar` spellings in ir/ops.py name (SCALAR_HELPERS), for numba.

Generated kernel modules import them from here, so numba's on-disk cache can find them. Each is
inlined into the kernel loop, which stays free of calls and so can be vectorised.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import types
from numba.extending import overload

_f32 = np.float32


@numba.njit(inline="always", cache=True)
def _rt_sign(x):
    # NaN fails both tests and x - x is NaN, as np.sign gives; -0.0 - -0.0 is +0.0, as np.sign
    return 1 if x > 0 else (-1 if x < 0 else x - x)


@numba.njit(inline="always", cache=True)
def _rt_maximum(x, y):
    # np.maximum propagates NaN from either side; Python's max would drop one
    return x if (x > y or x != x) else y


@numba.njit(inline="always", cache=True)
def _rt_minimum(x, y):
    return x if (x < y or x != x) else y


@numba.njit(inline="always", cache=True)
def _tanh_f32(x):
    """tanh in float32 as a rational function (Eigen's ptanh_float): no libm call, so the loop
    vectorises (math.tanh does not, lacking a vector math library); within 2 ulp of NumPy.
    inline="always": numba's parallel loops vectorise only calls inlined at its IR level."""
    c = _f32(7.90531110763549805)
    # selects written so that NaN passes through and +-inf clamp to +-c (tanh = +-1 there)
    y = c if x > c else x
    y = -c if y < -c else y
    y2 = y * y
    p = y2 * _f32(-2.76076847742355e-16) + _f32(2.00018790482477e-13)
    p = p * y2 + _f32(-8.60467152213735e-11)
    p = p * y2 + _f32(5.12229709037114e-08)
    p = p * y2 + _f32(1.48572235717979e-05)
    p = p * y2 + _f32(6.37261928875436e-04)
    p = p * y2 + _f32(4.89352455891786e-03)
    p = p * y
    q = y2 * _f32(1.19825839466702e-06) + _f32(1.18534705686654e-04)
    q = q * y2 + _f32(2.26843463243900e-03)
    q = q * y2 + _f32(4.89352518554385e-03)
    # near 0 the ratio is x (1 - 1.3e-7): one ulp, so no separate branch is needed
    return p / q


def _rt_tanh(x):
    return math.tanh(x)


@overload(_rt_tanh, inline="always")
def _tanh_impl(x):
    if x == types.float32:
        return lambda x: _tanh_f32(x)
    return lambda x: math.tanh(x)


@numba.njit(inline="always", cache=True)
def _rt_sigmoid(x):
    # one exp of -|x| <= 0 (no overflow); for x < 0 the exact form exp(x) / (1 + exp(x))
    e = math.exp(-abs(x))
    d = 1 / (1 + e)
    return d if x >= 0 else e * d


@numba.njit(inline="always", cache=True)
def _rt_logaddexp(x, y):
    # NumPy's npy_logaddexp: equal arguments (infinities too) without inf - inf
    if x == y:
        return x + 0.6931471805599453
    d = x - y
    if d > 0:
        return x + math.log1p(math.exp(-d))
    if d <= 0:
        return y + math.log1p(math.exp(d))
    return d                                  # a NaN


@numba.njit(inline="always", cache=True)
def _rt_logaddexp2(x, y):
    if x == y:
        return x + 1.0
    d = x - y
    if d > 0:
        return x + 1.4426950408889634 * math.log1p(math.exp2(-d))
    if d <= 0:
        return y + 1.4426950408889634 * math.log1p(math.exp2(d))
    return d


_B2K = np.array([1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6])


@numba.njit(inline="always", cache=True)
def _rt_polygamma(n, x):
    # ir/special.py's algorithm: reflection (digamma of x < 0), the upward recurrence to
    # x >= 10 + 2n, then the asymptotic series; the poles as SciPy has them
    xf = np.float64(x)
    if xf != xf:
        return xf
    if xf <= 0 and xf == math.floor(xf):
        if n == 0:     # SciPy's psi(0.0) is -inf, psi(-0.0) inf
            return (math.copysign(math.inf, -xf) if xf == 0 else math.nan)
        return math.inf if n % 2 == 1 else -math.inf
    if xf == math.inf:
        return math.inf if n == 0 else 0.0
    if xf == -math.inf:
        return math.nan
    res = 0.0
    if n == 0 and xf < 0:
        res = -math.pi / math.tan(math.pi * xf)
        xf = 1.0 - xf
    sign = 1.0 if n % 2 == 1 else -1.0
    fact = 1.0
    for i in range(2, n + 1):
        fact *= i
    target = 10.0 + 2.0 * n
    while xf < target:
        res += -1.0 / xf if n == 0 else sign * fact / xf ** (n + 1)
        xf += 1.0
    if n == 0:
        r = math.log(xf) - 0.5 / xf
        x2 = xf * xf
        p = x2
        for k in range(7):
            r -= _B2K[k] / (2 * (k + 1) * p)
            p *= x2
        return res + r
    f1 = fact / n                     # (n-1)!
    r = f1 / xf ** n + fact / (2 * xf ** (n + 1))
    c = fact * (n + 1) / 2            # (2k + n - 1)! / (2k)! at k = 1: (n + 1)! / 2
    for k in range(1, 8):
        if k > 1:                     # (2k+n-1)!/(2k)! from (2k+n-3)!/(2k-2)!
            c = c * (2 * k + n - 2) * (2 * k + n - 1) / ((2 * k - 1) * (2 * k))
        r += _B2K[k - 1] * c / xf ** (2 * k + n)
    return res + sign * r


@numba.njit(inline="always", cache=True)
def _rt_gammaln(x):
    # SciPy's gammaln(-inf) is -inf; C's lgamma (numba's math.lgamma) gives +inf
    return -math.inf if x == -math.inf else math.lgamma(x)


HELPERS = ("_rt_sign", "_rt_tanh", "_rt_maximum", "_rt_minimum", "_rt_sigmoid",
           "_rt_logaddexp", "_rt_logaddexp2", "_rt_polygamma", "_rt_gammaln")
