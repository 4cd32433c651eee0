"""Complex arrays while tracing, held as their real and imaginary parts.

adjit's IR is real. A complex value a traced function makes (`1j * x`, `np.exp(1j * theta)`,
`np.fft.rfft(x)`, a complex NumPy constant meeting a traced value, a complex array made inside
that receives traced values) is a `ComplexTracer`: its real and imaginary parts, two traced
arrays of one shape (a constant part is traced too, so writes through views reach both).
Complex arithmetic is spelled on the parts with the ordinary NumPy functions, as NumPy computes
it (Smith's division, the +0.0 imaginary part of a real operand, so signed zeros and branch
cuts agree), and the gradient rules, fusion, checkpointing and every backend apply unchanged.
Fourier transforms and magnitudes are the registry ops `fft`, `rfft`, `irfft` and `cabs` on the
parts interleaved (..., 2), NumPy's memory layout of complex numbers. np.fft (and scipy.fft's
transforms) also take real traced arrays.

Complex arguments and results are split into their parts and rebuilt by the pytree layer
(compile answers complex arrays); a loss for grad must be real (np.abs(z) ** 2, z.real, ...).
Everything on complex values that is not listed here is refused naming the user's line, never
computed on the real part alone.
"""
from __future__ import annotations

import cmath
import math
import numbers

import numpy as np

from ..ir.errors import UnsupportedError
from . import buffer as B
from . import functions as F
from .tracer import Tracer, _at, user_where


class ComplexTracer:
    """A traced complex array: `re + 1j * im` (see the module docstring)."""

    __array_priority__ = 1001
    _adjit_complex = True       # pytree.py's mark (it cannot import this module)

    def __init__(self, re, im):
        self.re, self.im = re, im
        self._parts = None

    @property
    def flat(self):
        """z.flat: writes go to z's elements in C order, reads are copies (as in NumPy)."""
        from .buffer import FlatIter
        return FlatIter(lambda: self.reshape(-1), self.shape, self)

    @flat.setter
    def flat(self, value):
        from .buffer import FlatIter
        FlatIter(lambda: self.reshape(-1), self.shape, self)[...] = value

    def parts(self):
        """The parts (..., 2) as one traced array: the transform's result this came from
        while neither part has been written since, else the two stacked."""
        if self._parts is not None:
            whole, ids = self._parts
            if (self.re.id, self.im.id) == ids:
                return whole
        return np.stack([self.re, self.im], axis=-1)

    # -- attributes ------------------------------------------------------------------------
    @property
    def shape(self):
        return tuple(np.shape(self.re))

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(math.prod(self.shape))

    @property
    def dtype(self):
        return np.result_type(F._dtype_of(self.re), np.complex64)

    @property
    def real(self):
        return self.re

    @real.setter
    def real(self, value):
        self._set_part(self.re, value, "real")

    @property
    def imag(self):
        return self.im

    @imag.setter
    def imag(self, value):
        self._set_part(self.im, value, "imag")

    def _set_part(self, part, value, name):
        if not isinstance(part, Tracer):
            raise _refuse(f"setting z.{name} of a complex array whose {name} part is not "
                          "traced", f"build it as re + 1j * im")
        value = B.resolve(value)
        if is_complex(value):
            raise TypeError(f"z.{name} = a complex value{_at(user_where())}: NumPy would drop "
                            "its imaginary part; give a real value")
        if value is not part:       # y.imag *= -1 has written into the part already
            part[...] = value

    @property
    def T(self):
        return _parts(np.transpose, self)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self):
        return f"ComplexTracer(shape={self.shape}, dtype={self.dtype})"

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise _refuse(f"z.{name} of a complex traced array")

    def __bool__(self):
        raise _concrete("`if`/`while` (bool of an array)")

    def __float__(self):
        raise _concrete("float()")

    def __complex__(self):
        raise _concrete("complex()")

    def __array__(self, dtype=None, copy=None):
        raise _concrete("converting to a concrete NumPy array")

    # -- methods -----------------------------------------------------------------------------
    def __getitem__(self, key):
        key = B.resolve(key)
        if isinstance(self.re, Tracer) and F.traced_mask(self.re, key) is not None:
            # z[mask] with a traced mask: usable only to be written back, z[mask] *= 0.5
            return _Masked(key, F.traced_mask(self.re, key), self)
        return make(self.re[key], self.im[key])

    def __setitem__(self, key, value):
        if isinstance(value, _Masked):
            if value.key is not key and not (isinstance(key, Tracer) and isinstance(
                    value.key, Tracer) and key.id == value.key.id):
                raise _refuse("z[mask] = w[other_mask] with traced masks",
                              "write np.where(mask, new_values, z)")
            m = value.mask
            m = F.reshape(m, tuple(m.shape) + (1,) * (self.ndim - m.ndim))
            self[...] = where_(m, value.full, self)
            return
        vr, vi = split(value)
        for part, v in ((self.re, vr), (self.im, vi)):
            if not isinstance(part, Tracer):
                raise _refuse("writing into a complex array whose real or imaginary part is "
                              "not traced", "make it with the traced values (np.stack, "
                              "np.concatenate) or keep the two parts in two float arrays")
            part[key] = 0.0 if v is None else v

    def conj(self):
        return make(self.re.copy_(), -self.im)     # a new array: no part shared with z

    conjugate = conj

    def copy(self):
        return make(np.copy(self.re), np.copy(self.im))

    def copy_(self):
        return make(self.re.copy_(), self.im.copy_())

    # methods whose function forms NumPy dispatches to the structural functions below
    def trace(self, *args, **kw):
        return np.trace(self, *args, **kw)

    def diagonal(self, *args, **kw):
        return np.diagonal(self, *args, **kw)

    def repeat(self, *args, **kw):
        return np.repeat(self, *args, **kw)

    def take(self, *args, **kw):
        return np.take(self, *args, **kw)

    def fill(self, value):
        self[...] = value

    def reshape(self, *shape, **kw):
        return _parts(lambda p: np.reshape(p, shape[0] if len(shape) == 1 else shape, **kw),
                      self)

    def transpose(self, *axes):
        return _parts(lambda p: np.transpose(p, axes[0] if len(axes) == 1 else axes or None),
                      self)

    def ravel(self, order="C"):
        return _parts(lambda p: np.ravel(p, order), self)

    def flatten(self, order="C"):
        return _parts(lambda p: np.reshape(p, -1, order=order).copy_(), self)

    def squeeze(self, axis=None):
        return _parts(lambda p: np.squeeze(p, axis), self)

    def swapaxes(self, a, b):
        return _parts(lambda p: np.swapaxes(p, a, b), self)

    def sum(self, axis=None, dtype=None, out=None, keepdims=False, **kw):
        return _sum(self, axis, dtype, out, keepdims, **kw)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, **kw):
        return _mean(self, axis, dtype, out, keepdims, **kw)

    def cumsum(self, axis=None, dtype=None, out=None):
        _no_out(out, "z.cumsum")
        return _parts(lambda p: np.cumsum(p, axis), self)

    def astype(self, dtype, copy=True, **kw):
        dtype = np.dtype(dtype)
        if dtype.kind != "c":
            raise _refuse(f"z.astype({dtype}) of a complex traced array (NumPy drops the "
                          "imaginary part with a warning)", "take z.real explicitly")
        part = np.finfo(dtype).dtype
        if part == self.re.dtype and copy is False:
            return self
        return make(*(_copied(F.cast(p, part), p) for p in (self.re, self.im)))

    def dot(self, other):
        return bilinear(np.dot, self, other)

    # -- operators ---------------------------------------------------------------------------
    def __add__(self, o): return add(self, o)
    def __radd__(self, o): return add(o, self)
    def __sub__(self, o): return sub(self, o)
    def __rsub__(self, o): return sub(o, self)
    def __mul__(self, o): return mul(self, o)
    def __rmul__(self, o): return mul(o, self)
    def __truediv__(self, o): return div(self, o)
    def __rtruediv__(self, o): return div(o, self)
    def __pow__(self, o): return power(self, o)
    def __rpow__(self, o): return power(o, self)
    def __matmul__(self, o): return bilinear(np.matmul, self, o)
    def __rmatmul__(self, o): return bilinear(np.matmul, o, self)
    def __iadd__(self, o): return self._inplace(add(self, o))
    def __isub__(self, o): return self._inplace(sub(self, o))
    def __imul__(self, o): return self._inplace(mul(self, o))
    def __itruediv__(self, o): return self._inplace(div(self, o))
    def __ipow__(self, o): return self._inplace(power(self, o))

    def _inplace(self, r):
        """y op= v writes into y, so its views see the change (as NumPy's in-place ops)."""
        if isinstance(self.re, Tracer) and isinstance(self.im, Tracer) and \
                isinstance(r, ComplexTracer) and r.shape == self.shape:
            self[...] = r
            return self
        return r

    def __neg__(self): return make(-self.re, -self.im)
    def __pos__(self): return make(self.re.copy_(), self.im.copy_())
    def __abs__(self): return absolute(self)
    def __eq__(self, o): return equal(self, o)
    def __ne__(self, o): return np.logical_not(equal(self, o))
    __hash__ = object.__hash__

    def __lt__(self, o):
        raise _refuse("ordering comparison (<, >) of complex traced values")
    __le__ = __gt__ = __ge__ = __lt__

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return array_function(func, args, kwargs)


class _Masked:
    """z[mask] of a complex array with a traced mask: the values where the mask holds are not
    an array of known length, so only the in-place forms are taken (z[mask] *= 0.5: the op
    on all of z, selected back by z[mask] = ...), as masked.py does for real arrays."""

    def __init__(self, key, mask, full):
        self.key, self.mask, self.full = key, mask, full

    def _op(self, fn, o):
        if isinstance(o, _Masked):
            o = o.full
        return _Masked(self.key, self.mask, fn(self.full, o))

    def _rop(self, fn, o):
        return _Masked(self.key, self.mask, fn(o.full if isinstance(o, _Masked) else o,
                                               self.full))

    # elementwise work on the selected values is done on all of z (z[m] = z[m] * 1j + 1)
    __iadd__ = __add__ = lambda s, o: s._op(add, o)
    __isub__ = __sub__ = lambda s, o: s._op(sub, o)
    __imul__ = __mul__ = lambda s, o: s._op(mul, o)
    __itruediv__ = __truediv__ = lambda s, o: s._op(div, o)
    __pow__ = lambda s, o: s._op(power, o)
    __radd__ = lambda s, o: s._rop(add, o)
    __rsub__ = lambda s, o: s._rop(sub, o)
    __rmul__ = lambda s, o: s._rop(mul, o)
    __rtruediv__ = lambda s, o: s._rop(div, o)
    __neg__ = lambda s: _Masked(s.key, s.mask, -s.full)

    def __getattr__(self, name):
        raise _refuse("z[mask] of a complex array with a traced mask, used as an array (its "
                      "length depends on the data)", "write z[mask] op= v, z[mask] = v, "
                      "z[mask] = f(z[mask]) for elementwise f, or np.where(mask, f(z), z)")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs or ufunc not in _UFUNCS:
            self.__getattr__("ufunc")
        return _Masked(self.key, self.mask, _UFUNCS[ufunc](
            *[x.full if isinstance(x, _Masked) else x for x in inputs]))

    def __array_function__(self, *a, **k):
        self.__getattr__("function")


# -- the parts of any operand ----------------------------------------------------------------------
def is_complex(x) -> bool:
    """A complex operand: a ComplexTracer, a complex NumPy array or scalar, a Python complex."""
    if isinstance(x, ComplexTracer):
        return True
    if isinstance(x, complex):
        return True
    return isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind == "c"


def involves(args) -> bool:
    """Whether a ufunc's or function's arguments (lists one level deep) hold a ComplexTracer,
    or a complex constant next to a traced value."""
    flat = []
    for a in args:
        flat.extend(B.resolve(v) for v in (a if isinstance(a, (list, tuple)) else [a]))
    if any(isinstance(a, ComplexTracer) for a in flat):
        return True
    return any(is_complex(a) for a in flat) and any(isinstance(a, Tracer) for a in flat)


def holds(obj) -> bool:
    """Does obj (a value, or lists and tuples of them) hold a ComplexTracer, or a complex
    constant beside a traced value (np.array([1j, x[0]]))?"""
    def leaves(o):
        if isinstance(o, (list, tuple)):
            for v in o:
                yield from leaves(v)
        else:
            yield B.resolve(o)
    items = list(leaves(obj))
    return any(isinstance(v, ComplexTracer) for v in items) or (
        any(is_complex(v) for v in items) and any(isinstance(v, Tracer) for v in items))


def from_nested(obj):
    """np.array / np.asarray of obj holding ComplexTracers: the items stacked."""
    if isinstance(obj, (list, tuple)):
        items = [from_nested(v) for v in obj]
        if any(isinstance(v, (ComplexTracer, Tracer)) for v in items):
            return np.stack(items)
        return np.asarray(items)
    return B.resolve(obj)


def split(x):
    """-> (real part, imaginary part or None for a real operand)."""
    x = B.resolve(x)
    if isinstance(x, ComplexTracer):
        return x.re, x.im
    if isinstance(x, Tracer):
        return x, None
    if isinstance(x, complex):
        return x.real, x.imag
    if isinstance(x, (list, tuple)):
        x = np.asarray(x)
    if isinstance(x, (np.ndarray, np.generic)):
        if x.dtype.kind == "c":
            return np.array(x.real), np.array(x.imag)
        return x, None
    if isinstance(x, numbers.Number) and not isinstance(x, numbers.Complex):
        return x, None
    if isinstance(x, (bool, int, float)):
        return x, None
    raise _refuse(f"a {type(x).__name__} in complex arithmetic")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, (bool, np.generic))


def _copied(p, original):
    """p, a new array where it is the original's own Tracer (astype copies)."""
    return p.copy_() if p is original else p


def _float(p):
    """Integer and boolean parts become float64, as NumPy's complex128 holds them; float16
    parts float32 (NumPy has no complex32: np.fft of float16 computes in complex64)."""
    if isinstance(p, Tracer):
        return F.cast(p, np.float64) if p.dtype.kind in "biu" else \
            F.cast(p, np.float32) if p.dtype == np.float16 else p
    if isinstance(p, (bool, int)) and not isinstance(p, np.generic):
        return float(p)
    a = np.asarray(p)
    return a.astype(np.float64) if a.dtype.kind in "biu" else \
        a.astype(np.float32) if a.dtype == np.float16 else p


def make(re, im):
    """The complex array re + 1j * im: a ComplexTracer when a part is traced, else NumPy's."""
    re, im = _float(re), _float(0.0 if im is None else im)
    if not isinstance(re, Tracer) and not isinstance(im, Tracer):
        return np.asarray(re) + 1j * np.asarray(im) if np.ndim(re) or np.ndim(im) else \
            complex(re, im) if type(re) is float and type(im) is float else re + 1j * im
    shape = np.broadcast_shapes(np.shape(re), np.shape(im))
    dt = F.result_dtype(re, im)
    ctx = (re if isinstance(re, Tracer) else im).ctx
    re, im = (_shaped(p, shape, dt, ctx) for p in (re, im))
    return ComplexTracer(re, im)


def _shaped(p, shape, dt, ctx):
    """A part as a traced array of the complex array's shape and dtype. A constant part (the
    zero imaginary part of x.astype(complex)) is traced too, an array of its own, so writes
    through views of the complex array reach both parts (u = x + 0j; u[2:5] *= 1j)."""
    if isinstance(p, Tracer):
        p = F.cast(p, dt) if p.dtype != dt else p
        return p if p.shape == shape else F.broadcast_to(p, shape)
    return F.broadcast_to(F.lift(np.asarray(p, dt), dt, ctx), shape).copy_()


def _parts(f, z):
    """f applied to both parts of z (a function linear over the reals: a reshape, a sum)."""
    re, im = split(z)
    if im is None:
        im = np.zeros_like(re)
    return make(f(re), f(im))


def _add(x, y):
    return x if y is None else y if x is None else x + y


def _sub(x, y):
    return x if y is None else -y if x is None else x - y


def _zero(p):
    """A real operand's imaginary part: NumPy casts it to complex, x + 0j, and computes with
    that +0.0 (so signed zeros and branch cuts come out as NumPy's: sqrt(-4 - 0j) is -2j)."""
    return 0.0 if p is None else p


# -- arithmetic ------------------------------------------------------------------------------------
def add(a, b):
    (ar, ai), (br, bi) = split(a), split(b)
    return make(ar + br, _zero(ai) + _zero(bi))


def sub(a, b):
    (ar, ai), (br, bi) = split(a), split(b)
    return make(ar - br, _zero(ai) - _zero(bi))


def mul(a, b):
    (ar, ai), (br, bi) = split(a), split(b)
    ai, bi = _zero(ai), _zero(bi)
    return make(ar * br - ai * bi, ar * bi + ai * br)


def div(a, b):
    """NumPy's complex division (Smith's algorithm: the larger part of b divides first, so
    neither overflows nor underflows where the quotient does not)."""
    (ar, ai), (br, bi) = split(a), split(b)
    ai, bi = _zero(ai), _zero(bi)
    if _number(br) and _number(bi):
        # a Python number divides: the branch is chosen here and the numbers stay weak
        # (complex64 / 2.0 stays complex64)
        wide = abs(br) >= abs(bi)
        big, small = (br, bi) if wide else (bi, br)
        ratio = small / (big if big != 0 else 1.0)
        d = big + small * ratio
        return make((ar + ai * ratio if wide else ar * ratio + ai) / d,
                    (ai - ar * ratio if wide else ai * ratio - ar) / d)
    wide = np.abs(br) >= np.abs(bi)
    # where |br| >= |bi|: r = bi / br, d = br + bi r; else r = br / bi, d = bi + br r
    big, small = np.where(wide, br, bi), np.where(wide, bi, br)
    ratio = small / np.where(big == 0, 1.0, big)
    d = big + small * ratio
    re = np.where(wide, ar + ai * ratio, ar * ratio + ai) / d
    im = np.where(wide, ai - ar * ratio, ai * ratio - ar) / d
    return make(re, im)


def bilinear(f, a, b, conj_a=False, conj_b=False, **kw):
    """f(a, b) of a function f bilinear over the reals (matmul, dot, einsum of two, outer)."""
    (ar, ai), (br, bi) = split(a), split(b)
    ai = -ai if conj_a and ai is not None else ai
    bi = -bi if conj_b and bi is not None else bi
    re = f(ar, br, **kw)
    if ai is not None and bi is not None:
        re = re - f(ai, bi, **kw)
    return make(re, _add(None if bi is None else f(ar, bi, **kw),
                         None if ai is None else f(ai, br, **kw)))


def absolute(z):
    """np.abs: np.hypot of the parts, computed by the registry op cabs (NumPy's vectorized
    complex absolute on the parts' memory)."""
    re, im = split(z)
    if im is None:
        return np.abs(re)
    if not isinstance(z, ComplexTracer):
        z = make(re, im)
        if not isinstance(z, ComplexTracer):
            return np.abs(z)
    parts = z.parts()
    return parts.ctx.emit("cabs", [parts])


def _from_parts(out):
    """The ComplexTracer of a transform's result out (..., 2), remembering out."""
    z = make(out[..., 0], out[..., 1])
    z._parts = (out, (z.re.id, z.im.id))
    return z


def angle(z, deg=False):
    re, im = split(z)
    a = np.arctan2(np.zeros_like(re) if im is None else im, re)
    return a * (180 / np.pi) if deg else a


def exp(z):
    re, im = split(z)
    e = np.exp(re)
    return make(e, None) if im is None else make(e * np.cos(im), e * np.sin(im))


def log(z):
    if isinstance(z, (int, float, complex)) and not isinstance(z, (bool, np.generic)):
        return cmath.log(z)     # a Python number: a (weak) Python complex (2 ** z of complex64)
    re, im = split(z)
    return make(np.log(absolute(z)), angle(z))


def sqrt(z):
    # the principal root, as NumPy: t = sqrt((|z| + |re|) / 2) is the larger part's size,
    # the other is |im| / (2 t); the imaginary part has im's sign (-0.0 included)
    # (derivatives: |re| and |im| are written as the branch used, so sqrt(2 + 0j) and
    # sqrt(2j) keep the analytic derivative; on the cut, the side of im's sign)
    # (|z| + |re| overflows from 9e307 on, and subnormal parts lose digits: both are scaled
    # by a power of 4 first, whose root scales the result exactly; an infinite imaginary part
    # gives inf + im j for any re, NaN included, as C99's csqrt)
    re, im = split(z)
    if im is None:
        im = np.zeros_like(re)
    m = np.maximum(np.abs(re), np.abs(im))
    big, tiny = m > 2.0 ** 1020, m < 2.0 ** -1020
    s_in = np.where(big, 0.25, np.where(tiny, 2.0 ** 108, 1.0))
    s_out = np.where(big, 2.0, np.where(tiny, 2.0 ** -54, 1.0))
    re_s, im_s = re * s_in, im * s_in
    pos = re >= 0
    t = np.sqrt((np.hypot(re_s, im_s) + np.where(pos, re_s, -re_s)) / 2)
    safe = np.where(t == 0, 1.0, 2 * t)
    along = im_s / safe                                      # re >= 0: the imaginary part
    across = np.where(np.signbit(im), -im_s, im_s) / safe    # re < 0: the real part, |im|/(2t)
    r_re = np.where(pos, t, across) * s_out
    r_im = np.where(pos, along, np.copysign(t, im)) * s_out
    inf_im = np.isinf(im)
    return make(np.where(inf_im, np.inf, r_re), np.where(inf_im, im, r_im))


def sin(z):
    re, im = split(z)
    if im is None:
        return make(np.sin(re), None)
    return make(np.sin(re) * np.cosh(im), np.cos(re) * np.sinh(im))


def cos(z):
    re, im = split(z)
    if im is None:
        return make(np.cos(re), None)
    return make(np.cos(re) * np.cosh(im), -(np.sin(re) * np.sinh(im)))


def power(a, p):
    p = B.resolve(p)
    if isinstance(p, (float, np.floating)) and float(p).is_integer() and abs(p) <= 64 and \
            not isinstance(a, (int, float, complex)):
        p = int(p)      # z ** 2.0 is z * z, as NumPy computes it (exact, and 0 at z = 0)
    if isinstance(p, (int, np.integer)) and not isinstance(p, bool) and abs(int(p)) <= 64:
        if isinstance(p, np.integer) and isinstance(a, ComplexTracer):
            dt = np.result_type(a.dtype, p)     # a NumPy integer is strong: c64 ** int64
            if dt != a.dtype:                   # is complex128
                a = a.astype(dt)
        n = abs(int(p))
        r, base = None, a
        while n:             # NumPy's complex power by squaring for small integer powers
            if n & 1:
                r = base if r is None else mul(r, base)
            n >>= 1
            if n:
                base = mul(base, base)
        if r is None:
            re, _ = split(a)
            return make(np.ones_like(re), None)
        return div(1.0, r) if p < 0 else +r if r is a else r     # z ** 1 is a new array
    scalar = not is_complex(p) and not isinstance(p, Tracer) and np.ndim(p) == 0
    if scalar and float(p) == 0.5:
        return sqrt(a)
    if (_number(a) or type(a) is complex) and a != 0:
        return exp(mul(p, cmath.log(a)))   # a Python base: its log a weak Python complex
    # exp(p log a), and at a = 0 NumPy's values: 1 for p = 0, 0 where p's real part is > 0
    # (C99's cpow: 0 ** (2 + 1j) is 0), else nan
    # (through log 0 the value and the derivative would be nan)
    re, im = split(a)
    pr, pi = split(p)
    zero = np.logical_and(re == 0, _zero(im) == 0)
    safe = make(np.where(zero, 1.0, re), np.where(zero, 0.0, _zero(im)))
    r = exp(mul(p, log(safe)))
    if not isinstance(r, ComplexTracer):
        return r
    p_zero = np.logical_and(pr == 0, _zero(pi) == 0)
    to_zero = pr > 0
    at_zero = np.where(p_zero, 1.0, np.where(to_zero, 0.0, np.nan))
    return make(np.where(zero, at_zero, r.re), np.where(zero, 0.0, r.im))


def equal(a, b):
    (ar, ai), (br, bi) = split(a), split(b)
    return np.logical_and(ar == br, (0.0 if ai is None else ai) == (0.0 if bi is None else bi))


# -- NumPy dispatch --------------------------------------------------------------------------------
_UFUNCS = {
    np.add: add, np.subtract: sub, np.multiply: mul, np.divide: div, np.power: power,
    np.negative: lambda z: -make(*split(z)), np.positive: lambda z: +make(*split(z)),
    np.conjugate: lambda z: make(*split(z)).conj(),
    np.absolute: absolute, np.exp: exp, np.log: log, np.sqrt: sqrt, np.sin: sin, np.cos: cos,
    np.square: lambda z: mul(z, z), np.reciprocal: lambda z: div(1.0, z),
    np.matmul: lambda a, b: bilinear(np.matmul, a, b),
    np.equal: equal, np.not_equal: lambda a, b: np.logical_not(equal(a, b)),
    np.isfinite: lambda z: np.logical_and(*[np.isfinite(p) for p in _both(z)]),
    np.isnan: lambda z: np.logical_or(*[np.isnan(p) for p in _both(z)]),
    np.isinf: lambda z: np.logical_or(*[np.isinf(p) for p in _both(z)]),
}


def _neg(x):
    return None if x is None else -x


def _both(z):
    re, im = split(z)
    return re, np.zeros_like(re) if im is None else im


# the functional form of an elementwise op name (functions.py's _elementwise routes here)
_ELEMENTWISE = {"add": add, "sub": sub, "mul": mul, "div": div, "pow": power}


def elementwise(op, xs):
    fn = _ELEMENTWISE.get(op)
    if fn is None:
        raise _refuse(f"the operation {op!r} on complex values")
    return fn(*xs)


def array_ufunc(ufunc, method, inputs, kwargs):
    if method == "at" and ufunc in (np.add, np.subtract) and not kwargs and \
            isinstance(inputs[0], ComplexTracer) and len(inputs) == 3:
        # np.add.at(z, idx, v): each part accumulates v's part (repeated indices add up)
        z, idx, v = inputs
        for part, pv in zip((z.re, z.im), split(v)):
            if pv is not None:
                ufunc.at(part, idx, pv)
        return None
    fn = _UFUNCS.get(ufunc)
    if method != "__call__" or fn is None:
        what = f"np.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
        raise _refuse(f"{what} of complex values")
    if kwargs.pop("out", None) is not None:
        raise _refuse(f"np.{ufunc.__name__}(..., out=...) of complex values",
                      "write z = ... instead")
    for k in ("casting", "order", "subok", "dtype"):
        kwargs.pop(k, None)
    if kwargs.get("where", True) is not True or set(kwargs) - {"where"}:
        raise _refuse(f"np.{ufunc.__name__} of complex values with {sorted(kwargs)}")
    return fn(*inputs)


def _first(f):
    """A function linear over the reals in its first argument (the rest static)."""
    return lambda z, *args, **kw: _parts(lambda p: f(p, *args, **kw), z)


def _listwise(f):
    """A function of a list of arrays, linear in each (np.concatenate, np.stack)."""
    def fn(arrays, *args, **kw):
        pairs = [split(a) for a in arrays]
        re = [r for r, _ in pairs]
        im = [np.zeros_like(r) if i is None else i for r, i in pairs]
        return make(f(re, *args, **kw), f(im, *args, **kw))
    return fn


def where_(cond, a=None, b=None):
    if a is None or b is None:
        raise _refuse("np.where(condition) of a complex condition")
    (ar, ai), (br, bi) = split(a), split(b)
    return make(np.where(cond, ar, br), np.where(cond, 0.0 if ai is None else ai,
                                                 0.0 if bi is None else bi))


def _einsum(subscripts, *operands, **kw):
    if len(operands) == 1:
        return _parts(lambda p: np.einsum(subscripts, p, **kw), operands[0])
    if len(operands) == 2:
        return bilinear(lambda x, y: np.einsum(subscripts, x, y, **kw), *operands)
    raise _refuse("np.einsum of more than two operands with complex values",
                  "split it into einsums of two")


def _norm(x, ord=None, axis=None, keepdims=False):
    # vector norms and the Frobenius norm depend on the magnitudes alone
    vector = isinstance(axis, (int, np.integer)) or (axis is None and np.ndim(x) == 1)
    if not vector and ord not in (None, "fro"):
        raise _refuse(f"np.linalg.norm(z, ord={ord!r}) of a complex matrix",
                      "use ord=None or 'fro', or a vector norm along an axis")
    return np.linalg.norm(absolute(x), ord, axis, keepdims)


def _vdot(a, b):
    return bilinear(lambda x, y: np.sum(x * y), np.ravel(a) if not isinstance(
        a, ComplexTracer) else a.ravel(), np.ravel(b) if not isinstance(
        b, ComplexTracer) else b.ravel(), conj_a=True)


def _like(fill):
    def fn(z, dtype=None, order="K", subok=True, shape=None):
        re, _ = split(z)
        if dtype is not None and np.dtype(dtype).kind != "c":
            return {"zeros": np.zeros_like, "ones": np.ones_like}[fill](re, dtype=dtype,
                                                                         shape=shape)
        part = np.finfo(dtype).dtype if dtype is not None else F._dtype_of(re)
        base = np.zeros_like(re, dtype=part, shape=shape)
        return make(base + 1.0 if fill == "ones" else base,
                    np.zeros_like(re, dtype=part, shape=shape))
    return fn


def _full_like(z, fill_value, dtype=None, order="K", subok=True, shape=None):
    if dtype is not None and np.dtype(dtype).kind != "c":
        return np.full_like(split(z)[0], fill_value, dtype=dtype, shape=shape)
    base = _like("zeros")(z, dtype, shape=shape)
    r = add(base, fill_value)
    return r if r.dtype == base.dtype else r.astype(base.dtype)   # z's dtype, as NumPy


def _real_if_close(a, tol=100):
    raise _refuse("np.real_if_close of a traced complex array (whether the result is real "
                  "depends on the values)", "take z.real")


def _in_dtype(a, dtype):
    if dtype is None:
        return a
    if np.dtype(dtype).kind != "c":
        raise _refuse(f"a sum of complex values in {np.dtype(dtype)} (NumPy drops the "
                      "imaginary part with a warning)", "take z.real first")
    return a.astype(dtype) if isinstance(a, ComplexTracer) else make(*split(a)).astype(dtype)


def _sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    _no_out(out, "np.sum")
    a = _in_dtype(a, dtype)
    r = _parts(lambda p: np.sum(p, axis, keepdims=keepdims, where=where), a)
    return r if initial is None else add(r, initial)


def _mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    _no_out(out, "np.mean")
    a = _in_dtype(a, dtype)
    return _parts(lambda p: np.mean(p, axis, keepdims=keepdims, where=where), a)


_FUNCTIONS = {
    np.real: lambda z: split(z)[0],
    np.imag: lambda z: _both(z)[1],
    np.conj: lambda z: make(*split(z)).conj(),
    np.angle: angle, np.abs: absolute, np.absolute: absolute,
    np.iscomplexobj: lambda z: True, np.isrealobj: lambda z: False,
    np.iscomplex: lambda z: _both(z)[1] != 0, np.isreal: lambda z: _both(z)[1] == 0,
    np.real_if_close: _real_if_close,
    np.sum: _sum, np.mean: _mean,
    np.where: where_, np.einsum: _einsum, np.linalg.norm: _norm, np.vdot: _vdot,
    np.dot: lambda a, b: bilinear(np.dot, a, b),
    np.matmul: lambda a, b: bilinear(np.matmul, a, b),
    np.inner: lambda a, b: bilinear(np.inner, a, b),
    np.outer: lambda a, b: bilinear(np.outer, a, b),
    np.kron: lambda a, b: bilinear(np.kron, a, b),
    np.tensordot: lambda a, b, axes=2: bilinear(np.tensordot, a, b, axes=axes),
    np.convolve: lambda a, v, mode="full": bilinear(np.convolve, a, v, mode=mode),
    # NumPy's correlate conjugates its second argument for complex input
    np.correlate: lambda a, v, mode="valid": bilinear(np.correlate, a, v, conj_b=True,
                                                       mode=mode),
    np.zeros_like: _like("zeros"), np.ones_like: _like("ones"), np.empty_like: _like("zeros"),
    np.full_like: _full_like,
    np.copy: lambda z, *a, **k: _parts(np.copy, z),
    np.shape: lambda z: np.shape(split(z)[0]), np.ndim: lambda z: np.ndim(split(z)[0]),
    np.size: lambda z, axis=None: np.size(split(z)[0], axis),
}
for _f in (np.reshape, np.transpose, np.swapaxes, np.moveaxis, np.squeeze, np.expand_dims,
           np.ravel, np.flip, np.fliplr, np.flipud, np.roll, np.rot90, np.cumsum, np.trace,
           np.diagonal, np.diag, np.broadcast_to, np.tile, np.repeat, np.take,
           np.take_along_axis, np.triu, np.tril, np.atleast_1d, np.atleast_2d, np.atleast_3d,
           np.diff):
    _FUNCTIONS[_f] = _first(_f)
for _f in (np.concatenate, np.stack, np.hstack, np.vstack, np.dstack, np.column_stack):
    _FUNCTIONS[_f] = _listwise(_f)


def _pad(array, pad_width, mode="constant", constant_values=0, **kw):
    if mode == "constant":
        cr, ci = split(constant_values)
        re, im = _both(array)
        return make(np.pad(re, pad_width, mode, constant_values=cr),
                    np.pad(im, pad_width, mode, constant_values=0.0 if ci is None else ci))
    if mode in ("edge", "reflect", "symmetric", "wrap") and not kw:
        return _parts(lambda p: np.pad(p, pad_width, mode), array)
    raise _refuse(f"np.pad(..., mode={mode!r}) of a complex traced array")


_FUNCTIONS[np.pad] = _pad


def _stores_parts(func, k, name):
    """np.copyto, np.put, np.putmask, np.fill_diagonal into a complex array: a store, linear
    in the values, so each part stores the values' part (0 for a real value's imaginary)."""
    def store(a, *args, **kw):
        if not isinstance(a, ComplexTracer):
            raise _refuse(f"{_name(func)} of complex values into a real array",
                          "store into a complex array (np.zeros(n, complex))")
        args = list(args)
        v = args[k] if len(args) > k else kw.pop(name)
        for part, pv in zip((a.re, a.im), split(v)):
            pv = 0.0 if pv is None else pv
            if len(args) > k:
                func(part, *(args[:k] + [pv] + args[k + 1:]), **kw)
            else:
                func(part, *args, **dict(kw, **{name: pv}))
    return store


for _f, _k, _name_of_value in ((np.copyto, 0, "src"), (np.put, 1, "v"),
                               (np.putmask, 1, "values"), (np.fill_diagonal, 0, "val")):
    _FUNCTIONS[_f] = _stores_parts(_f, _k, _name_of_value)


def array_function(func, args, kwargs):
    if kwargs.get("out") is not None:
        raise _refuse(f"{_name(func)}(..., out=...) with complex values", "write z = ...")
    kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    fn = _FUNCTIONS.get(func) or FFT.get(func)
    if fn is None:
        raise _refuse(f"{_name(func)} of complex values")
    return fn(*args, **kwargs)


def _name(func):
    mod = getattr(func, "__module__", "") or ""
    sub = "fft." if "fft" in mod else "linalg." if "linalg" in mod else ""
    return f"np.{sub}{getattr(func, '__name__', func)}"


# -- np.fft ----------------------------------------------------------------------------------------
def _norm_name(norm):
    norm = "backward" if norm is None else norm
    if norm not in ("backward", "ortho", "forward"):
        raise ValueError(f'Invalid norm value {norm}; should be "backward", "ortho" or '
                         '"forward".')
    return norm


def _resized(p, n, axis):
    """p cut or zero-padded at the end to length n along axis, as np.fft does."""
    m = np.shape(p)[axis]
    if n == m:
        return p
    if n < m:
        return np.take(p, np.arange(n), axis=axis) if not isinstance(p, Tracer) else \
            p[(slice(None),) * (axis % np.ndim(p)) + (slice(0, n),)]
    width = [(0, 0)] * np.ndim(p)
    width[axis] = (0, n - m)
    return np.pad(p, width)


def _axis(a, axis):
    nd = np.ndim(split(a)[0])
    if not -nd <= axis < nd:
        raise np.exceptions.AxisError(axis, nd)
    return axis % nd


def _c2c(a, n, axis, norm, inverse):
    norm = _norm_name(norm)
    axis = _axis(a, axis)
    re, im = split(a)
    n = np.shape(re)[axis] if n is None else int(n)
    if n < 1:
        raise ValueError(f"Invalid number of FFT data points ({n}) specified.")
    re = _float(_resized(re, n, axis))
    im = np.zeros_like(re) if im is None else _float(_resized(im, n, axis))
    return _from_parts(F.fft(_parts_of(a, re, im), axis, inverse, norm))


def _parts_of(a, re, im):
    """The parts (..., 2) of re + 1j * im, which are a's own when untouched (no resizing)."""
    if isinstance(a, ComplexTracer) and re is a.re and im is a.im:
        return a.parts()
    return np.stack([re, im], axis=-1)


def fft(a, n=None, axis=-1, norm=None, out=None):
    _no_out(out, "np.fft.fft")
    return _c2c(a, n, axis, norm, False)


def ifft(a, n=None, axis=-1, norm=None, out=None):
    _no_out(out, "np.fft.ifft")
    return _c2c(a, n, axis, norm, True)


def rfft(a, n=None, axis=-1, norm=None, out=None):
    _no_out(out, "np.fft.rfft")
    if is_complex(a):
        raise TypeError(f"np.fft.rfft of complex input{_at(user_where())} (as NumPy: use "
                        "np.fft.fft)")
    norm = _norm_name(norm)
    axis = _axis(a, axis)
    n = np.shape(a)[axis] if n is None else int(n)
    if n < 1:
        raise ValueError(f"Invalid number of FFT data points ({n}) specified.")
    return _from_parts(F.rfft(_float(_resized(a, n, axis)), axis, norm))


def irfft(a, n=None, axis=-1, norm=None, out=None):
    """The real signal of length n (default 2 * (m - 1)) whose spectrum's first half is a
    (cut or zero-padded to n // 2 + 1 terms; the imaginary parts of the zero and Nyquist terms
    are ignored, as NumPy does)."""
    _no_out(out, "np.fft.irfft")
    axis = _axis(a, axis)
    m_in = np.shape(split(a)[0])[axis]
    n = 2 * (m_in - 1) if n is None else int(n)
    if n < 1:
        raise ValueError(f"Invalid number of FFT data points ({n}) specified.")
    m = n // 2 + 1
    re, im = _both(a)
    re, im = _float(_resized(re, m, axis)), _float(_resized(im, m, axis))
    return F.irfft(_parts_of(a, re, im), axis, n, _norm_name(norm))


def hfft(a, n=None, axis=-1, norm=None, out=None):
    _no_out(out, "np.fft.hfft")
    re, im = _both(a)
    return irfft(make(re, -im), n, axis, _SWAP[_norm_name(norm)])


def ihfft(a, n=None, axis=-1, norm=None, out=None):
    _no_out(out, "np.fft.ihfft")
    z = rfft(a, n, axis, _SWAP[_norm_name(norm)])
    return make(z.re, -z.im)


_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def _nd_args(a, s, axes):
    nd = np.ndim(split(a)[0])
    if s is not None:
        s = [int(v) for v in s]
        if axes is None:
            axes = list(range(-len(s), 0))
    if axes is None:
        axes = list(range(nd))
    axes = [int(x) for x in axes]
    if s is None:
        s = [np.shape(split(a)[0])[x] for x in axes]
    if len(s) != len(axes):
        raise ValueError("Shape and axes have different lengths.")
    return s, axes


def _c2c_nd(inverse):
    def fn(a, s=None, axes=None, norm=None, out=None):
        _no_out(out, "np.fft")
        s, axes = _nd_args(a, s, axes)
        for n, axis in reversed(list(zip(s, axes))):
            a = _c2c(a, n, axis, norm, inverse)
        return a
    return fn


def _2d(fn):
    return lambda a, s=None, axes=(-2, -1), norm=None, out=None: fn(a, s, axes, norm, out)


def rfftn(a, s=None, axes=None, norm=None, out=None):
    _no_out(out, "np.fft.rfftn")
    s, axes = _nd_args(a, s, axes)
    a = rfft(a, s[-1], axes[-1], norm)
    for n, axis in zip(s[:-1], axes[:-1]):
        a = _c2c(a, n, axis, norm, False)
    return a


def irfftn(a, s=None, axes=None, norm=None, out=None):
    _no_out(out, "np.fft.irfftn")
    given = s is not None
    s, axes = _nd_args(a, s, axes)
    if not given:
        s[-1] = 2 * (np.shape(split(a)[0])[axes[-1]] - 1)
    for n, axis in zip(s[:-1], axes[:-1]):
        a = _c2c(a, n, axis, norm, True)
    return irfft(a, s[-1], axes[-1], norm)


def fftshift(x, axes=None):
    """np.fft.fftshift: the zero frequency moved to the middle, a roll by n // 2 (real traced
    arrays too)."""
    return _shift(x, axes, lambda n: n // 2)


def ifftshift(x, axes=None):
    return _shift(x, axes, lambda n: -(n // 2))


def _shift(x, axes, by):
    shape = np.shape(split(x)[0])
    axes = tuple(range(len(shape))) if axes is None else \
        (axes,) if isinstance(axes, (int, np.integer)) else tuple(axes)
    return np.roll(x, [by(shape[a]) for a in axes], axes)


fftn, ifftn = _c2c_nd(False), _c2c_nd(True)
FFT = {np.fft.fftshift: fftshift, np.fft.ifftshift: ifftshift,
       np.fft.fft: fft, np.fft.ifft: ifft, np.fft.rfft: rfft, np.fft.irfft: irfft,
       np.fft.hfft: hfft, np.fft.ihfft: ihfft, np.fft.fftn: fftn, np.fft.ifftn: ifftn,
       np.fft.rfftn: rfftn, np.fft.irfftn: irfftn, np.fft.fft2: _2d(fftn),
       np.fft.ifft2: _2d(ifftn), np.fft.rfft2: _2d(rfftn), np.fft.irfft2: _2d(irfftn)}


# -- errors ----------------------------------------------------------------------------------------
def _no_out(out, what):
    if out is not None:
        raise _refuse(f"{what}(..., out=...) while tracing", "write z = ... instead")


def _refuse(what, fix=None):
    return UnsupportedError(
        f"{what} is not supported by adjit{_at(user_where())}: complex arrays are traced as "
        "their real and imaginary parts and support arithmetic, abs/angle/exp/log/sqrt, "
        "conj/real/imag, reshaping, sums, matrix products and np.fft; "
        + (fix or "write it on z.real and z.imag"))


def _concrete(what):
    from ..ir.errors import TraceError
    from .tracer import _STORE
    w = user_where()
    if w is not None and _STORE.search(w.text or ""):
        advice = ("A NumPy array cannot hold traced values, and adjit follows arrays made "
                  "inside the function for real values only: build the complex array from "
                  "its pieces (np.concatenate, np.stack, np.pad), or fill two float arrays "
                  "re and im (np.zeros) and combine them, re + 1j * im.")
    else:
        advice = ("A NumPy or library function adjit does not follow received a traced "
                  "complex array: adjit traces complex arithmetic, np.fft and matrix products "
                  "(README); write the step on z.real and z.imag.")
    return TraceError(f"{what} needs the value of a traced complex array, which is not known "
                      f"while tracing{_at(w)}. {advice}")
