"""The op test table: every op in OPS has a row with an input domain and shape cases.

Rows are plain functions of float64 arrays written with NumPy (or adjit's frontend for ops a
user cannot reach directly). Shared by the op tests and the backend tests.
"""
import numpy as np

import adjit
from adjit.frontend import functions as F

SCALAR, VEC, MAT = (), (5,), (3, 4)
BCAST = [((3, 4), (4,)), ((3, 1), (3, 4)), ((), (3, 4)), ((2, 3, 4), (3, 4))]


def domain(name, shape, rng):
    if name == "any":
        return rng.normal(size=shape)
    if name == "positive":
        return rng.uniform(0.5, 2.0, size=shape)
    if name == "away0":  # away from kinks at 0
        return rng.choice([-1, 1], size=shape) * rng.uniform(0.3, 1.5, size=shape)
    if name == "gtm1":
        return rng.uniform(-0.5, 1.5, size=shape)
    if name == "small":
        return rng.uniform(-1.0, 1.0, size=shape)
    if name == "unit":  # inside (-1, 1), away from the poles of arcsin' and arctanh'
        return rng.uniform(-0.8, 0.8, size=shape)
    if name == "gt1":
        return rng.uniform(1.2, 3.0, size=shape)
    if name == "gt2":  # past gammaln's minimum at 1.46, where its derivative is near 0
        return rng.uniform(2.0, 5.0, size=shape)
    if name == "spd":  # (..., n, n) symmetric, eigenvalues in [1, n + 1) at least 0.5 apart
        n = shape[-1]
        q = np.linalg.qr(rng.normal(size=shape))[0]
        w = 1.0 + np.arange(n) + rng.uniform(0.0, 0.5, size=shape[:-1])
        return (q * w[..., None, :]) @ np.swapaxes(q, -1, -2)
    if name == "svd":  # (..., m, n), singular values in [1, k + 1) at least 0.5 apart
        m, n = shape[-2:]
        k = min(m, n)
        u = np.linalg.qr(rng.normal(size=shape[:-2] + (m, k)))[0]
        v = np.linalg.qr(rng.normal(size=shape[:-2] + (n, k)))[0]
        s = 1.0 + np.arange(k) + rng.uniform(0.0, 0.5, size=shape[:-2] + (k,))
        return (u * s[..., None, :]) @ np.swapaxes(v, -1, -2)
    if name == "invertible":  # (..., n, n) near 2 I: well conditioned, not symmetric
        return 2.0 * np.eye(shape[-1]) + domain("away0", shape, rng) / 3.0
    raise KeyError(name)


def _u(op_fn, dom="any", shapes=(SCALAR, VEC, MAT, (2, 3, 4))):
    return {"fn": op_fn, "inputs": [[(s, dom)] for s in shapes]}


def _b(op_fn, dom="any", dom2=None):
    return {"fn": op_fn, "inputs": [[(a, dom), (b, dom2 or dom)] for a, b in
                                    [(SCALAR, SCALAR), (VEC, VEC)] + BCAST]}


_IDX = np.array([2, 0, 1])


# custom rules (adjit.custom_vjp / custom_jvp): the node is an identity whose derivative is
# the user's rule; these rules are the true derivatives, so differences check them
@adjit.custom_vjp
def _sin_x(x):
    return np.sin(x) * x


_sin_x.defvjp(lambda x: (np.sin(x) * x, x), lambda x, g: (g * (np.cos(x) * x + np.sin(x)),))


@adjit.custom_jvp
def _tanh2(x):
    return np.tanh(2.0 * x)


_tanh2.defjvp(lambda p, t: (_tanh2(p[0]), t[0] * 2.0 / np.cosh(2.0 * p[0]) ** 2))


def _gather(x):
    return x[np.arange(3), _IDX]


def _scatter(x):
    # scatter_add is the VJP of gather; reached directly through the frontend here
    return F.scatter_add(x, [np.arange(3), _IDX], (("a", 0), ("a", 1)), (3, 4)) * 2.0


def _cofactor(a):
    from adjit.frontend import linalg
    return linalg.cofactor(a)


def _gammaln(x):
    return F.gammaln(x)


def _digamma(x):
    # polygamma 0 and 1 (digamma's derivative is trigamma: gradients reach n = 2)
    return F.polygamma(0, x) + 0.5 * F.polygamma(1, x)


def _onehot(x):
    return adjit.one_hot(np.array([1, 3, 0]), 4, dtype=np.float64) * x


# op name -> {"fn": f(*xs), "inputs": list of cases, each a list of (shape, domain)}
def _segment_extremes(x):
    flat = x.reshape(-1)
    labels = np.arange(flat.size) % 3
    hi, lo = np.full(3, -10.0), np.full(3, 10.0)
    np.maximum.at(hi, labels, flat)
    np.minimum.at(lo, labels, flat * 2.0)
    return hi * 3.0 + lo


TABLE = {
    "neg": _u(lambda x: -x),
    "exp": _u(np.exp),
    "expm1": _u(np.expm1),
    "exp2": _u(np.exp2),
    "cbrt": _u(np.cbrt, "away0"),
    "log": _u(np.log, "positive"),
    "log2": _u(lambda x: np.log2(x), "positive"),
    "log10": _u(lambda x: np.log10(x), "positive"),
    "log1p": _u(np.log1p, "gtm1"),
    "sin": _u(np.sin),
    "cos": _u(np.cos),
    "tan": _u(np.tan, "small"),
    "sinh": _u(np.sinh),
    "cosh": _u(np.cosh),
    "tanh": _u(np.tanh),
    "sqrt": _u(np.sqrt, "positive"),
    "abs": _u(np.abs, "away0"),
    "arctan": _u(np.arctan, "small"),
    "arcsin": _u(np.arcsin, "unit"),
    "arccos": _u(np.arccos, "unit"),
    "arcsinh": _u(np.arcsinh, "small"),
    "arccosh": _u(np.arccosh, "gt1"),
    "arctanh": _u(np.arctanh, "unit"),
    "sigmoid": _u(adjit.sigmoid, "away0"),  # both branches (x < 0 and x >= 0)
    "gammaln": _u(_gammaln, "gt2"),
    "polygamma": _u(_digamma, "positive"),
    "erf": _u(adjit.erf, "small"),  # where erf' is not tiny: central differences resolve it
    "erfc": _u(adjit.erfc, "small"),
    "arctan2": _b(np.arctan2, "away0"),
    # kinks where x / y is whole: y away from 0 and x spread over several multiples of y
    "fmod": _b(lambda x, y: np.fmod(x * 4.0, y), "any", "away0"),
    "argsort": {"fn": lambda x: np.take_along_axis(x, np.argsort(x), -1) * 2.0
                + np.take_along_axis(x, np.argsort(x, axis=0), 0),
                "inputs": [[(VEC, "any")], [(MAT, "any")], [((2, 3, 4), "any")]]},
    # piecewise constant factors: the knots (and x's own sorted values, for side="right")
    # lie away from the points central differences move
    "searchsorted": {"fn": lambda x: x * np.searchsorted(np.linspace(-1.0, 1.0, 5), x)
                     + x * np.searchsorted(np.sort(np.ravel(x)), x * 0.5, side="right"),
                     "inputs": [[(VEC, "any")], [(MAT, "any")]]},
    # the running extremes of random data change hands away from ties
    "accumulate": {"fn": lambda x: np.maximum.accumulate(x, axis=-1) * 2.0
                   + np.minimum.accumulate(x, axis=0) + np.fmax.accumulate(x, axis=0) * x,
                   "inputs": [[(VEC, "any")], [(MAT, "any")], [((2, 3, 4), "any")]]},
    # a segment max and min: the derivative goes to each segment's extreme
    "extreme_at": {"fn": _segment_extremes, "inputs": [[(VEC, "any")], [(MAT, "any")]]},
    "sort": {"fn": lambda x: np.sort(x) * 2.0 + np.sort(x, axis=0),
             "inputs": [[(VEC, "any")], [(MAT, "any")], [((2, 3, 4), "any")]]},
    "sign": _u(lambda x: np.sign(x) * x * x, "away0"),
    # the derivative ignores the stopped factor, so differences cannot check it
    "stop_gradient": dict(_u(lambda x: adjit.stop_gradient(x) * x), fd=False),
    # reverse mode only, as JAX's custom_vjp (jvp refuses it; hvp goes through fwd and bwd)
    "custom_vjp": dict(_u(lambda x: _sin_x(x) * x), jvp=False),
    "custom_jvp": _u(lambda x: _tanh2(x) + x * _tanh2(x)),
    "add": _b(lambda x, y: x + y),
    "sub": _b(lambda x, y: x - y),
    "mul": _b(lambda x, y: x * y),
    "div": _b(lambda x, y: x / y, "any", "away0"),
    "pow": _b(lambda x, y: x ** y, "positive", "small"),
    "maximum": _b(np.maximum),
    "logaddexp": _b(np.logaddexp),
    "hypot": _b(np.hypot, "away0"),
    "logaddexp2": _b(np.logaddexp2),
    "minimum": _b(np.minimum),
    "gt": _b(lambda x, y: np.where(x > y, x, y * 2.0)),
    "ge": _b(lambda x, y: np.where(x >= y, x * y, y)),
    "lt": _b(lambda x, y: np.where(x < y, x, y * 3.0)),
    "le": _b(lambda x, y: np.where(x <= y, x * x, y)),
    "eq": _b(lambda x, y: np.where(x == y, x, x * y)),
    "ne": _b(lambda x, y: np.where(x != y, x * y, y)),
    "signbit": _u(lambda x: np.where(np.signbit(x), x * x, x)),
    "fmax": _b(lambda x, y: np.fmax(x, np.where(y > 1.0, np.nan, y)) * y),
    "fmin": _b(lambda x, y: np.fmin(np.where(x > 1.0, np.nan, x), y) * x),
    # bitwise operations of integers made from the data: masks that select, no derivative
    "bitand": _b(lambda x, y: np.where((np.floor(x * 8).astype(np.int64)
                                        & np.floor(y * 8).astype(np.int64)) > 2, x, y)),
    "bitor": _b(lambda x, y: np.where((np.floor(x * 8).astype(np.int64)
                                       | np.floor(y * 8).astype(np.int64)) > 2, x, y)),
    "bitxor": _b(lambda x, y: np.where((np.floor(x * 8).astype(np.int64)
                                        ^ np.floor(y * 8).astype(np.int64)) > 2, x, y)),
    "lshift": _b(lambda x, y: np.where((np.floor(x * 8).astype(np.int64)
                                        << np.clip(np.floor(y * 2 + 3), 0, 6).astype(np.int64))
                                       > 9, x, y)),
    "rshift": _b(lambda x, y: np.where((np.floor(x * 64).astype(np.int64)
                                        >> np.clip(np.floor(y * 2 + 3), 0, 6).astype(np.int64))
                                       > 1, x, y)),
    "invert": _u(lambda x: np.where(~np.floor(x * 8).astype(np.int64) > 0, x, x * x)),
    "where": {"fn": lambda c, x, y: np.where(c > 0, x, y),
              "inputs": [[(VEC, "any")] * 3, [(MAT, "any"), ((4,), "any"), (SCALAR, "any")]]},
    "cast": _u(lambda x: (x.astype(np.float32).astype(np.float64) - x.astype(np.float32))
               * 1.0 + x * x),
    "broadcast_to": {"fn": lambda x: np.broadcast_to(x, (2, 3, 4)) * 2.0,
                     "inputs": [[((4,), "any")], [((3, 1), "any")], [(SCALAR, "any")]]},
    "reshape": {"fn": lambda x: x.reshape(4, -1) * x.reshape(4, -1),
                "inputs": [[((2, 6), "any")], [((12,), "any")]]},
    "transpose": {"fn": lambda x: np.transpose(x) * 2.0,
                  "inputs": [[(MAT, "any")], [((2, 3, 4), "any")]]},
    "slice": {"fn": lambda x: x[1:, ::2] * x[:-1, 1::2],
              "inputs": [[((4, 6), "any")], [((3, 4, 2), "any")]]},
    "unslice": {"fn": lambda x: F.unslice(x, (slice(1, 3), slice(None)), (5, 4)) * 3.0,
                "inputs": [[((2, 4), "any")]]},
    # overlapping pieces added into zeros (the cotangent of x[1:] and x[:-1])
    "place_add": {"fn": lambda x, y: F.place_add(
        [x, y * y, x[::-1]], [(slice(1, 3), slice(None)), (slice(0, 3), slice(1, 3)),
                              (slice(2, 4), slice(None, None, -1))], (5, 4)) * 3.0,
                  "inputs": [[((2, 4), "any"), ((3, 2), "any")]]},
    "concatenate": {"fn": lambda x, y: np.concatenate([x, y * y, x], axis=-1),
                    "inputs": [[(VEC, "any"), ((3,), "any")], [(MAT, "any"), ((3, 2), "any")]]},
    "gather": {"fn": _gather, "inputs": [[(MAT, "any")]]},
    "scatter_add": {"fn": _scatter, "inputs": [[((3,), "any")]]},
    "one_hot": {"fn": _onehot, "inputs": [[((3, 4), "any")], [((4,), "any")]]},
    "sum": {"fn": lambda x: [np.sum(x), x.sum(axis=0), x.sum(axis=-1, keepdims=True)][
        min(x.ndim, 2)] if x.ndim else np.sum(x),
            "inputs": [[(SCALAR, "any")], [(VEC, "any")], [(MAT, "any")],
                       [((2, 3, 4), "any")]]},
    "max": {"fn": lambda x: np.max(x) if x.ndim < 2 else x.max(axis=1, keepdims=x.ndim > 2),
            "inputs": [[(VEC, "any")], [(MAT, "any")], [((2, 3, 4), "any")]]},
    "min": {"fn": lambda x: np.min(x) if x.ndim < 2 else x.min(axis=1, keepdims=x.ndim > 2),
            "inputs": [[(VEC, "any")], [(MAT, "any")], [((2, 3, 4), "any")]]},
    "cumsum": {"fn": lambda x: np.cumsum(x, axis=-1) * x.cumsum(axis=0),
               "inputs": [[(VEC, "any")], [(MAT, "any")], [((2, 3, 4), "any")]]},
    "cumprod": {"fn": lambda x: np.cumprod(x, axis=-1) + np.cumprod(x, axis=0) * x,
                "inputs": [[(VEC, "small")], [(MAT, "small")], [((2, 3, 4), "small")],
                           [((3, 40), "positive")]]},
    # rounding has derivative zero almost everywhere: the rows multiply by x to see that
    "floor": _u(lambda x: np.floor(x * 3.0) * x, "any", (VEC, MAT)),
    "ceil": _u(lambda x: np.ceil(x * 3.0) * x, "any", (VEC, MAT)),
    "round": _u(lambda x: np.round(x * 3.0) * x, "any", (VEC, MAT)),
    "trunc": _u(lambda x: np.trunc(x * 3.0) * x, "any", (VEC, MAT)),
    "copysign": _b(lambda x, y: np.copysign(x, y) * y, "away0", "away0"),
    "argmax": {"fn": lambda x: x * np.argmax(x, axis=-1)[..., None],
               "inputs": [[(MAT, "any")], [((2, 3, 4), "any")]]},
    "matmul": {"fn": lambda x, y: x @ y,
               "inputs": [[((3, 4), "any"), ((4, 2), "any")], [((4,), "any"), ((4, 2), "any")],
                          [((3, 4), "any"), ((4,), "any")],
                          [((2, 3, 4), "any"), ((4, 5), "any")],
                          [((2, 3, 4), "any"), ((2, 4, 5), "any")]]},
}


def _slogdet(a):
    sign, logabsdet = np.linalg.slogdet(a)
    return sign * logabsdet + sign


def _eigh(a):
    # squared eigenvectors do not depend on the signs LAPACK picks
    w, v = np.linalg.eigh(a)
    return w[..., None, :] * v ** 2 + w[..., :, None]


def _svd(a):
    # products of a singular vector's entries with themselves do not depend on LAPACK's signs
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return (u ** 2 * s[..., None, :]) @ vh ** 2 + np.sum(s, axis=-1)[..., None, None]


def _qr(a):
    q, r = np.linalg.qr(a)
    return q ** 2 @ r + np.sum(r ** 2, axis=-2)[..., None, :]


# batched 2 x 2: the cofactors are entries of a, so no gradient element is near 0, where the
# element-wise relative error of test_gradcheck would measure rounding
_SQUARE = [[((3, 3), "invertible")], [((2, 2, 2), "invertible")]]
_SPD = [[((3, 3), "spd")], [((2, 4, 4), "spd")]]
_RECT = [[((3, 3), "svd")], [((4, 3), "svd")], [((3, 4), "svd")], [((2, 4, 3), "svd")],
         [((2, 3, 5), "svd")]]
# linear algebra on stacks of matrices; the rows keep inputs well conditioned
TABLE.update({
    "inv": {"fn": np.linalg.inv, "inputs": _SQUARE},
    "solve": {"fn": np.linalg.solve,
              "inputs": [[((3, 3), "invertible"), ((3,), "any")],
                         [((3, 3), "invertible"), ((3, 2), "any")],
                         [((2, 3, 3), "invertible"), ((3,), "any")],
                         [((2, 3, 3), "invertible"), ((3, 2), "any")],
                         [((3, 3), "invertible"), ((2, 3, 2), "any")]]},
    "det": {"fn": np.linalg.det, "inputs": _SQUARE},
    # np.convolve / np.correlate in their three modes, the kernel shorter and longer
    "correlate": {"fn": lambda a, v: np.convolve(a, v) * 0.5 + np.correlate(a, v, "same")[
        :1] + np.sum(np.correlate(v, a, "valid")) + np.convolve(a, v, "valid")[0],
        "inputs": [[((7,), "any"), ((3,), "any")], [((2,), "any"), ((5,), "any")],
                   [((1,), "any"), ((1,), "any")]]},
    # np.fft on real arrays (a complex result is its two parts), along either axis, every
    # norm, the length cut and padded; irfft completes the Hermitian half
    "fft": {"fn": lambda x: np.concatenate([
        np.fft.fft(x).real.ravel(), np.fft.ifft(x, norm="ortho").imag.ravel(),
        np.abs(np.fft.rfft(x, n=7, axis=0, norm="forward")).ravel() ** 2,
        np.fft.irfft(np.fft.rfft(x, axis=0) * (1 + 2j), n=len(x), axis=0).ravel(),
        np.fft.fft2(x * 1j + 1).real.ravel() if x.ndim == 2 else np.fft.hfft(x, 6)]),
        "inputs": [[((5,), "any")], [((4, 3), "any")], [((1,), "any")]]},
    "rfft": {"fn": lambda x: np.fft.rfft(x, axis=0, norm="ortho").imag * 2 + np.fft.rfft(
        x, axis=0).real, "inputs": [[((6,), "any")], [((5, 3), "any")]]},
    "irfft": {"fn": lambda x: np.fft.irfft(x * (1 - 0.5j), axis=0) + np.fft.irfft(
        x * 1j, n=2 * len(x) - 1, axis=0, norm="forward")[:2 * len(x) - 2],
        "inputs": [[((4,), "any")], [((3, 2), "any")]]},
    # np.abs of a complex array (away from 0, where it has a kink)
    "cabs": {"fn": lambda x, y: np.abs(x + 1j * y) + np.abs(np.fft.rfft(x)[..., :1]) * 0.5,
             "inputs": [[((5,), "away0"), ((5,), "any")], [((2, 3), "any"), ((2, 3), "away0")]]},
    # NaN-skipping extremes of floats (a row of NaN only is NaN, its cotangent 0)
    "nanmax": {"fn": lambda x: np.nanmax(np.where(x > 1.2, np.nan, x), axis=-1) + np.nanmax(x),
               "inputs": [[((5,), "any")], [((3, 4), "any")]]},
    "nanmin": {"fn": lambda x: np.nanmin(np.where(x < -1.2, np.nan, x), axis=0, keepdims=True),
               "inputs": [[((5,), "any")], [((3, 4), "any")]]},
    # reached through det's derivative; reached directly here
    "cofactor": {"fn": _cofactor, "inputs": _SQUARE},
    "slogdet": {"fn": _slogdet, "inputs": _SQUARE + [[((3, 3), "spd")]]},
    "cholesky": {"fn": np.linalg.cholesky, "inputs": _SPD},
    # a solve with a Cholesky factor (and its transpose) is triangular; 70 rows take two
    # blocks of the blocked substitution
    "solve_triangular": {"fn": lambda a, b: np.linalg.solve(
        np.swapaxes(np.linalg.cholesky(a), -1, -2), np.linalg.solve(np.linalg.cholesky(a), b)),
        "inputs": [[((3, 3), "spd"), ((3,), "any")], [((2, 4, 4), "spd"), ((2, 4, 1), "any")],
                   [((70, 70), "spd"), ((70, 2), "any")]]},
    "eigh": {"fn": _eigh, "inputs": _SPD},
    # square, tall, wide and batched: the rules have extra terms where m != n
    "svd": {"fn": _svd, "inputs": _RECT},
    "qr": {"fn": _qr, "inputs": _RECT},   # wide a: qr of its square left block
    "pinv": {"fn": np.linalg.pinv, "inputs": _RECT},
})


def cases():
    for name, row in TABLE.items():
        for k, spec in enumerate(row["inputs"]):
            yield name, k, row["fn"], spec


def make_inputs(spec, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [domain(dom, shape, rng).astype(dtype) for shape, dom in spec]
