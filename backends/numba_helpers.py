"""The scalar helpers that the `scalar` spellings in ir/ops.py name (SCALAR_HELPERS), for numba.

Generated kernel modules import them from here, so numba's on-disk cache can find them. Each is
inlined into the kernel loop, which stays free of calls and so can be vectorised.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from llvmlite import ir
from numba.extending import intrinsic, overload

_f32 = np.float32


@intrinsic
def _select(typingctx, c, a, b):
    """c ? a : b as LLVM's select, both already computed. numba's conditional expression is
    a branch, which LLVM keeps in a loop it does not vectorise (one carrying a float sum in
    order): on data whose signs are random each mispredicted branch costs ~15 cycles, so a
    fused gradient with np.sign and a sum ran 6x slower than this form."""
    if not isinstance(c, types.Boolean) or a != b:
        return None

    def codegen(context, builder, signature, args):
        return builder.select(args[0], args[1], args[2])
    return a(c, a, b), codegen


@intrinsic
def _rt_radd(typingctx, acc, x):
    """acc + x as an fadd that may be reassociated: the add of a kernel's running sum. A sum
    added in order keeps LLVM from vectorising the loop (each add waits for the last: 0.84 ms
    for a million squared differences); reassociating only this add lets it keep several
    partial sums in vector lanes (0.22 ms, and closer to the exact sum, as NumPy's pairwise
    summation is) while every other operation of the kernel stays exactly as written."""
    if not isinstance(acc, types.Float) or acc != x:
        return None

    def codegen(context, builder, signature, args):
        return builder.fadd(args[0], args[1], flags=("reassoc",))
    return acc(acc, x), codegen


def _rt_sign(x):
    return np.sign(x)


@overload(_rt_sign, inline="always")
def _sign_impl(x):
    if isinstance(x, types.Float):
        one = np.dtype(x.name).type(1)
        # NaN fails both tests and x - x is NaN, as np.sign gives; -0.0 - -0.0 is +0.0
        return lambda x: _select(x > 0, one, _select(x < 0, -one, x - x))
    return lambda x: 1 if x > 0 else (-1 if x < 0 else x - x)


def _rt_maximum(x, y):
    return np.maximum(x, y)


@overload(_rt_maximum, inline="always")
def _maximum_impl(x, y):
    # np.maximum propagates NaN from either side; Python's max would drop one
    if isinstance(x, types.Float) and x == y:
        return lambda x, y: _select((x > y) | (x != x), x, y)
    return lambda x, y: x if (x > y or x != x) else y


def _rt_minimum(x, y):
    return np.minimum(x, y)


@overload(_rt_minimum, inline="always")
def _minimum_impl(x, y):
    if isinstance(x, types.Float) and x == y:
        return lambda x, y: _select((x < y) | (x != x), x, y)
    return lambda x, y: x if (x < y or x != x) else y


@numba.njit(inline="always", cache=True)
def _tanh_f32(x):
    """tanh in float32 as a rational function (Eigen's ptanh_float): no libm call, so the loop
    vectorises (math.tanh does not, lacking a vector math library); within 8 ulp of NumPy
    (near |x| = 5 to 8), and exactly +-1 from |x| = 7.9 (so its derivative is 0 there).
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
    # near 0 tanh(x) is x to float32's precision (x^3 / 3 below half an ulp), and the
    # polynomials' terms would go subnormal (76 ulp off at 1e-38): Eigen's cut-off
    return x if abs(x) < _f32(0.0004) else p / q


# -- exp, expm1, log, log1p and tanh without C library calls ----------------------------------
# numba calls the C library's exp, log, tanh for each element, and without a vector math
# library (SVML) a loop holding such a call is not vectorised: math.tanh cost 32 ns an element
# here against NumPy's 3.6 (its own SIMD loops). These are branch-free arithmetic emitted as
# LLVM IR straight into the kernel (numba intrinsics: no numba-level inlining, which added
# 0.15 s of compile per helper per kernel), so LLVM vectorises the kernel's loop; float64
# within 2 ulp of NumPy, the same special values (inf, nan, signed zeros, subnormals). float32
# has its own forms for exp, expm1, log and log1p (twice the vector lanes, no conversions: 3x
# faster than computing in float64), within 1.5 ulp of the exact value where NumPy's own
# float32 loops are within 2.9. tests/backends/test_numba.py sweeps them.
_F64, _I64, _F32, _I32 = ir.DoubleType(), ir.IntType(64), ir.FloatType(), ir.IntType(32)


def _is_float(t):
    return isinstance(t, (ir.FloatType, ir.DoubleType))


def _int_of(t):
    """The integer type of a float type's width (a float32's bits are an int32)."""
    return _I32 if isinstance(t, ir.FloatType) else _I64


def _float_of(t):
    return _F32 if t.width == 32 else _F64


class _V:
    """A float64/float32 or int64/int32 LLVM value inside a helper's body, with Python's
    operators, so the bodies below read as the formulas they are (Cody-Waite exp, fdlibm's
    log, Cephes' tanh, expf and logf)."""

    def __init__(self, b, v):
        self.b, self.v = b, v

    def _of(self, o):
        if isinstance(o, _V):
            return o.v
        return ir.Constant(self.v.type, float(o) if _is_float(self.v.type) else int(o))

    def _op(self, fop, iop, o, swap=False):
        x, y = self.v, self._of(o)
        if swap:
            x, y = y, x
        return _V(self.b, getattr(self.b, fop if _is_float(self.v.type) else iop)(x, y))

    def __add__(self, o):
        return self._op("fadd", "add", o)

    def __radd__(self, o):
        return self._op("fadd", "add", o, True)

    def __sub__(self, o):
        return self._op("fsub", "sub", o)

    def __rsub__(self, o):
        return self._op("fsub", "sub", o, True)

    def __mul__(self, o):
        return self._op("fmul", "mul", o)

    def __rmul__(self, o):
        return self._op("fmul", "mul", o, True)

    def __truediv__(self, o):
        return self._op("fdiv", "sdiv", o)

    def __rtruediv__(self, o):
        return self._op("fdiv", "sdiv", o, True)

    def __rshift__(self, k):
        return self._op(None, "ashr", k)

    def __lshift__(self, k):
        return self._op(None, "shl", k)

    def __and__(self, o):
        return self._op(None, "and_", o)

    def __or__(self, o):
        return self._op(None, "or_", o)

    def _cmp(self, op, o):
        if _is_float(self.v.type):    # ordered: false when either side is NaN
            return _V(self.b, self.b.fcmp_ordered(op, self.v, self._of(o)))
        return _V(self.b, self.b.icmp_signed(op, self.v, self._of(o)))

    def __lt__(self, o):
        return self._cmp("<", o)

    def __gt__(self, o):
        return self._cmp(">", o)

    def __ge__(self, o):
        return self._cmp(">=", o)

    def equals(self, o):
        return self._cmp("==", o)

    def isnan(self):
        return _V(self.b, self.b.fcmp_unordered("uno", self.v, self.v))

    def to_int(self):
        return _V(self.b, self.b.fptosi(self.v, _int_of(self.v.type)))

    def to_float(self):
        return _V(self.b, self.b.sitofp(self.v, _float_of(self.v.type)))

    def bits(self):
        return _V(self.b, self.b.bitcast(self.v, _int_of(self.v.type)))

    def from_bits(self):
        return _V(self.b, self.b.bitcast(self.v, _float_of(self.v.type)))

    def _call(self, name, *more):
        t = self.v.type
        fnty = ir.FunctionType(t, [t] * (1 + len(more)))
        suffix = "f32" if t == _F32 else "f64"
        fn = cgutils.get_or_insert_function(self.b.module, fnty, f"llvm.{name}.{suffix}")
        return _V(self.b, self.b.call(fn, [self.v] + [m.v for m in more]))

    def floor(self):
        return self._call("floor")

    def fabs(self):
        return self._call("fabs")

    def copysign(self, sign):
        return self._call("copysign", sign)


def _sel(c, a, b, like=None):
    """c ? a : b, either of a and b a constant of the other's type (of like's, or float64
    when both are constants)."""
    t = a.v.type if isinstance(a, _V) else b.v.type if isinstance(b, _V) else \
        like.v.type if like is not None else _F64
    x, y = (v.v if isinstance(v, _V) else ir.Constant(t, float(v) if _is_float(t) else int(v))
            for v in (a, b))
    return _V(c.b, c.b.select(c.v, x, y))


_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10


def _reduce(x):
    """x clamped to exp's range (NaN to -746: the caller passes NaN on), as n ln2 + r with
    |r| <= ln2 / 2 (Cody-Waite: ln2 in two parts, so n ln2 is exact enough)."""
    x = _sel(x > -746.0, x, -746.0)
    x = _sel(x < 710.0, x, 710.0)
    n = (x * _LOG2E + 0.5).floor()
    return n, x - n * _LN2_HI - n * _LN2_LO


def _expm1_poly(r):
    """exp(r) - 1 for |r| <= ln2 / 2: Taylor's series to r^13 (truncation below 2e-18)."""
    p = r * (1.0 / math.factorial(13)) + 1.0 / math.factorial(12)
    for k in range(11, 1, -1):
        p = p * r + 1.0 / math.factorial(k)
    return r + r * (p * r)


def _pow2(k):
    """2^k for an int64 k in [-1022, 1023], from its bits."""
    return ((k + 1023) << 52).from_bits()


def _exp_forms(reduce, poly, pow2, top, bottom):
    """(exp, expm1) bodies from a reduction x = n ln2 + r, a polynomial for e^r - 1 and 2^k
    from bits, for float64 and float32 alike. expm1 is 2^n (e^r - 1) + (2^n - 1), 2^n - 1
    exact for n in [bottom, top] (beyond: e^x itself above, -1 below)."""
    def exp_body(x):
        n, r = reduce(x)
        ni = n.to_int()
        h = ni >> 1      # 2^n in two factors: n may be just above the largest exponent
        y = (poly(r) + 1.0) * pow2(h) * pow2(ni - h)     # (a finite result) or below it
        return _sel(x.isnan(), x, y)

    def expm1_body(x):
        n, r = reduce(x)
        em = poly(r)
        ni = n.to_int()
        h = ni >> 1
        big = (em + 1.0) * pow2(h) * pow2(ni - h)
        s = pow2(_sel(ni > top, top, _sel(ni < bottom, bottom, ni)))
        y = _sel(ni > top, big, s * em + (s - 1.0))
        y = _sel(ni < bottom, -1.0, y)
        return _sel(x.equals(0.0) | x.isnan(), x, y)    # -0.0 stays -0.0
    return exp_body, expm1_body


# float64: 2^n - 1 is exact up to n = 53, and e^x - 1 is e^x beyond 60; -1 below -60
_exp_body, _expm1_body = _exp_forms(_reduce, _expm1_poly, _pow2, 60, -60)


_LG = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
       2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
       1.479819860511658591e-01)


def _parts_of(mant, bias, tiny):
    """The split of a float type with `mant` significand bits and exponent `bias`: u > 0
    finite (subnormal too) -> (k, f): u = 2^k (1 + f), 1 + f in [sqrt2 / 2, sqrt2)."""
    shift = mant + 1                            # subnormals times 2^(mant + 1) first
    low, one = (1 << mant) - 1, bias << mant

    def parts(u):
        sub = u < tiny
        b = _sel(sub, u * float(2 ** shift), u).bits()
        k = (b >> mant) - bias - _sel(sub, shift, 0, like=b)
        m = ((b & low) | one).from_bits()
        big = m > 1.4142135623730951
        return _sel(big, k + 1, k), _sel(big, m * 0.5, m) - 1.0   # m - 1 is exact
    return parts


_log_parts = _parts_of(52, 1023, 2.2250738585072014e-308)


def _log_core(f, k, c):
    """log(2^k (1 + f)) + c: fdlibm's e_log.c and s_log1p.c kernel (under 1 ulp)."""
    hfsq = f * f * 0.5
    s = f / (f + 2.0)
    z = s * s
    w = z * z
    t1 = w * (w * (w * _LG[5] + _LG[3]) + _LG[1])
    t2 = z * (w * (w * (w * _LG[6] + _LG[4]) + _LG[2]) + _LG[0])
    dk = k.to_float()
    return dk * _LN2_HI - ((hfsq - (s * (hfsq + (t2 + t1)) + (dk * _LN2_LO + c))) - f)


def _log_forms(parts, core, digits):
    """(log, log1p) bodies from a split u = 2^k (1 + f) and a kernel log(2^k (1 + f)) + c, for
    float64 and float32 alike; `digits` is the significand's length (past 2^digits nothing
    of 1 + x is lost)."""
    def log_body(x):
        ok = (x > 0.0) & (x < math.inf)
        k, f = parts(_sel(ok, x, 1.0))
        # inf and NaN give themselves (this form of the special cases vectorises well:
        # comparing x with inf as well made the loop twice as slow)
        return _sel(ok, core(f, k, 0.0),
                    _sel(x.equals(0.0), -math.inf, _sel(x < 0.0, math.nan, x)))

    def log1p_body(x):
        ok = (x > -1.0) & (x < math.inf)
        xs = _sel(ok, x, 0.0)
        u = xs + 1.0
        k, f = parts(u)
        # what rounding 1 + x lost, relative to u (fdlibm's c; Sterbenz: u - xs is exact
        # from u = 2 on, where it was taken from sqrt(2) on: 2 ulp off at x = 0.42)
        c = _sel(u >= 2.0, 1.0 - (u - xs), xs - (u - 1.0)) / u
        y = _sel(ok, core(f, k, _sel(k > digits, 0.0, c)),
                 _sel(x.equals(-1.0), -math.inf, _sel(x < -1.0, math.nan, x)))
        return _sel(x.equals(0.0), x, y)        # -0.0 stays -0.0
    return log_body, log1p_body


_log_body, _log1p_body = _log_forms(_log_parts, _log_core, 53)


_TP = (-9.64399179425052238628e-1, -9.92877231001918586564e1, -1.61468768441708447952e3)
_TQ = (1.12811678491632931402e2, 2.23548839060100448583e3, 4.84406305325125486048e3)


def _tanh_body(x):
    a = x.fabs()
    a = _sel(a < 40.0, a, 40.0)          # tanh is 1 to the last bit from 19.1 on
    z = a * a
    small = a + a * z * ((z * _TP[0] + _TP[1]) * z + _TP[2]) / \
        (((z + _TQ[0]) * z + _TQ[1]) * z + _TQ[2])                 # Cephes, |x| < 0.625
    large = 1.0 - 2.0 / (_exp_body(a * 2.0) + 1.0)
    return _sel(x.isnan(), x, _sel(a < 0.625, small, large).copysign(x))


# -- float32: Cephes' expf and logf (Moshier), expm1 and log1p built on them as above ----------
_LN2_HI32, _LN2_LO32 = 0.693359375, -2.12194440e-4       # ln2 = hi + lo, hi of 9 bits
_EP32 = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
         1.6666665459e-1, 5.0000001201e-1)
_LP32 = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
         1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
         3.3333331174e-1)


def _reduce32(x):
    """x clamped to expf's range (NaN to -104), as n ln2 + r, |r| <= ln2 / 2."""
    x = _sel(x > -104.0, x, -104.0)
    x = _sel(x < 89.0, x, 89.0)
    n = (x * _LOG2E + 0.5).floor()
    return n, x - n * _LN2_HI32 - n * _LN2_LO32


def _expm1_poly32(r):
    """exp(r) - 1 for |r| <= ln2 / 2 (Cephes' expf polynomial: under 1 ulp of float32)."""
    p = r * _EP32[0] + _EP32[1]
    for c in _EP32[2:]:
        p = p * r + c
    return r + p * (r * r)


def _pow2_32(k):
    """2^k for an int32 k in [-126, 127], from its bits."""
    return ((k + 127) << 23).from_bits()


# float32: 2^n - 1 exact from n = -24 to 24 (at -25 half an ulp off, still within 1.5 ulp)
_exp32_body, _expm132_body = _exp_forms(_reduce32, _expm1_poly32, _pow2_32, 24, -25)


_log32_parts = _parts_of(23, 127, 1.1754943508222875e-38)


def _log32_core(f, k, c):
    """log(2^k (1 + f)) + c: Cephes' logf."""
    z = f * f
    p = f * _LP32[0] + _LP32[1]
    for coef in _LP32[2:]:
        p = p * f + coef
    dk = k.to_float()
    y = f * z * p + (dk * _LN2_LO32 + c) - z * 0.5
    return f + y + dk * _LN2_HI32


_log32_body, _log1p32_body = _log_forms(_log32_parts, _log32_core, 24)


def _helper(body, body32=None):
    """A numba intrinsic computing body in float64: float32 in and out by body32 in float32
    (or, without one, in float64 rounded once), integers and booleans in, float64 out (NumPy's
    result dtype)."""
    @intrinsic
    def helper(typingctx, x):
        if isinstance(x, types.Float) and x.bitwidth == 32:
            ret = types.float32
        elif isinstance(x, (types.Float, types.Integer, types.Boolean)):
            ret = types.float64
        else:
            return None

        def codegen(context, builder, signature, args):
            v = args[0]
            if ret == types.float32 and body32 is not None:
                return body32(_V(builder, v)).v
            if isinstance(x, types.Float):
                v = builder.fpext(v, _F64) if x.bitwidth == 32 else v
            elif isinstance(x, types.Integer) and x.signed:
                v = builder.sitofp(v, _F64)
            else:
                v = builder.uitofp(v, _F64)
            y = body(_V(builder, v)).v
            return builder.fptrunc(y, _F32) if ret == types.float32 else y
        return ret(x), codegen
    helper.__name__ = body.__name__.replace("_body", "")
    return helper


_rt_exp = _helper(_exp_body, _exp32_body)
_rt_expm1 = _helper(_expm1_body, _expm132_body)
_rt_log = _helper(_log_body, _log32_body)
_rt_log1p = _helper(_log1p_body, _log1p32_body)
_tanh64 = _helper(_tanh_body)


def _rt_tanh(x):
    return math.tanh(x)


@overload(_rt_tanh, inline="always")
def _tanh_impl(x):
    if x == types.float32:
        return lambda x: _tanh_f32(x)    # Eigen's float32 rational form
    return lambda x: _tanh64(x)


def _rt_sigmoid(x):
    return 1 / (1 + np.exp(-x))


@overload(_rt_sigmoid, inline="always")
def _sigmoid_impl(x):
    # one exp of -|x| <= 0 (no overflow); for x < 0 the exact form exp(x) / (1 + exp(x))
    if isinstance(x, types.Float):
        one = np.dtype(x.name).type(1)

        def sigmoid(x):
            e = _rt_exp(-abs(x))
            d = one / (one + e)
            return _select(x >= 0, d, e * d)
        return sigmoid

    def sigmoid(x):
        e = _rt_exp(-abs(x))
        d = 1 / (1 + e)
        return d if x >= 0 else e * d
    return sigmoid


def _rt_logaddexp(x, y):
    return np.logaddexp(x, y)


@overload(_rt_logaddexp, inline="always")
def _logaddexp_impl(x, y):
    if isinstance(x, types.Float) and x == y:
        ln2 = np.dtype(x.name).type(0.6931471805599453)

        def logaddexp(x, y):
            # NumPy's npy_logaddexp without branches: the larger plus log1p(exp(-|x - y|));
            # equal arguments (infinities too) x + ln2, without inf - inf; NaN gives NaN
            d = x - y
            r = _select(d > 0, x, y) + _rt_log1p(_rt_exp(-abs(d)))
            return _select(x == y, x + ln2, r)
        return logaddexp

    def logaddexp(x, y):
        if x == y:
            return x + 0.6931471805599453
        d = x - y
        if d > 0:
            return x + _rt_log1p(_rt_exp(-d))
        if d <= 0:
            return y + _rt_log1p(_rt_exp(d))
        return d                                  # a NaN
    return logaddexp


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


HELPERS = ("_rt_sign", "_rt_exp", "_rt_expm1", "_rt_log", "_rt_log1p", "_rt_tanh",
           "_rt_maximum", "_rt_minimum", "_rt_sigmoid",
           "_rt_logaddexp", "_rt_logaddexp2", "_rt_polygamma", "_rt_gammaln", "_rt_radd")
