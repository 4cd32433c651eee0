"""Complex values and np.fft inside traced functions (frontend/complex.py, registry op fft):
values against NumPy, gradients against central differences (the seeds' error), both CPU
backends; complex arguments and results; what stays refused."""
import numpy as np
import pytest

import adjit

_RNG = np.random.default_rng(3)
_X = _RNG.standard_normal(12)
_Y = _RNG.standard_normal((4, 6))
_K = np.cos(np.arange(12.0))
_M = np.array([1, 0, 1, 1], bool)
_DFT = np.exp(-2j * np.pi * np.outer(np.arange(12), np.arange(12)) / 12)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("fn, x", [
    # spectral losses and FFT convolution, the usual reasons to meet np.fft in a loss
    (lambda x: np.sum(np.abs(np.fft.rfft(x)) ** 2), _X),
    (lambda x: np.sum(np.fft.irfft(np.fft.rfft(x) * np.fft.rfft(_K), n=12) ** 2), _X),
    (lambda x: np.sum(np.fft.irfft(np.fft.rfft(x), n=11) * np.cos(np.arange(11))), _X),
    (lambda x: np.sum(np.abs(np.fft.rfft(x, n=20))) + np.sum(np.abs(np.fft.rfft(x, n=7))), _X),
    (lambda x: np.sum(np.fft.fft(x, norm="ortho").real * np.arange(12)), _X),
    (lambda x: np.sum(np.fft.ifft(x, norm="forward").imag * np.arange(12)), _X),
    (lambda x: np.sum(np.real(np.fft.ifft(np.fft.fft(x) * np.exp(-np.arange(12.0)))) ** 2), _X),
    (lambda x: np.sum(np.abs(np.fft.fftshift(np.fft.fft(x))) * np.arange(12)), _X),
    (lambda x: np.sum(np.fft.ifftshift(x) * np.arange(12)), _X),
    (lambda x: np.sum(np.fft.hfft(x[:7] + 1j * x[5:]) ** 2), _X),
    (lambda x: np.sum(np.abs(np.fft.ihfft(x)) ** 2), _X),
    (lambda y: np.sum(np.abs(np.fft.fft2(y)) ** 2 * np.arange(6)), _Y),
    (lambda y: np.sum(np.fft.irfft2(np.fft.rfft2(y) * 0.5, s=y.shape) * y), _Y),
    (lambda y: np.sum(np.abs(np.fft.fftn(y, axes=(0,)))), _Y),
    (lambda y: np.sum(np.abs(np.fft.rfft(y, axis=0))), _Y),
    (lambda y: np.sum(np.fft.irfftn(np.fft.rfftn(y)) ** 3), _Y),
    (lambda y: np.sum(np.abs(np.fft.ifftn(y * 1j + 1, s=(5, 8), axes=(0, 1))) ** 2), _Y),
    # complex arithmetic
    (lambda x: np.abs(np.sum(np.exp(1j * x) * x)) ** 2, _X),
    (lambda x: np.sum(np.real((x + 2j) / (x[::-1] - 1j * x) * (3 - 1j))), _X),
    (lambda x: np.sum(np.angle(x[:6] + 1j * x[6:], deg=True)), _X),
    (lambda x: np.sum(np.real(np.log(x + 3j)) + np.imag(np.sqrt(x - 0.5j))), _X),
    (lambda x: np.sum(np.real(np.sqrt(-4 + x * 1j)) + np.imag(np.sqrt(-1 - 0.1j * x))), _X),
    (lambda x: np.sum(np.abs((x + 1j) ** 3) + np.real((x + 1j) ** -2)), _X),
    (lambda x: np.sum(np.real((x + 1j) ** 1.5) + np.imag(2.0 ** (x * 1j))), _X),
    (lambda x: np.sum(np.real(np.sin(x + 1j)) * np.imag(np.cos(x - 0.5j))), _X),
    (lambda x: np.sum(np.abs(_DFT @ x) ** 2) + np.sum(np.abs(x @ _DFT)), _X),
    (lambda x: np.real(np.vdot(x + 1j, np.fft.fft(x))), _X),
    (lambda x: np.real(np.sum(np.fft.fft(x) * np.conj(np.fft.fft(x ** 2)))), _X),
    (lambda x: np.sum(np.abs(np.einsum("ij,j->i", _DFT, x * (1 + 1j))) ** 2), _X),
    (lambda x: np.linalg.norm(np.fft.fft(x)) + np.linalg.norm(x * 1j, 1), _X),
    (lambda y: np.sum(np.abs(np.concatenate([y * 1j, y]).reshape(6, 8).T[1:, ::2]) ** 2), _Y),
    (lambda y: np.sum(np.abs(np.where(y > 0, y * 1j, y + 1j).mean(axis=0))), _Y),
    (lambda y: np.sum(np.abs(np.pad(np.exp(1j * y), 1, constant_values=2j).sum(1))), _Y),
    (lambda y: np.sum(np.real(np.stack([np.fft.fft(r) for r in y]).conj() ** 2)), _Y),
])
def test_complex_values_and_ffts_match_numpy_with_gradients(fn, x, backend):
    value, g = adjit.value_and_grad(fn, backend=backend)(x)
    np.testing.assert_allclose(value, fn(x), rtol=1e-10)
    assert adjit.gradcheck(fn, x, backend=backend, eps=1e-6) < 1e-6


@pytest.mark.parametrize("fn", [
    lambda x: np.fft.rfft(x), lambda x: np.fft.fft(x * (1 + 0.5j), n=16, norm="ortho"),
    lambda x: np.fft.ifft(x), lambda x: np.exp(1j * x) / (x + 1j),
    lambda x: np.fft.fft2(x.reshape(3, 4)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_complex_results_come_back_complex_in_numpys_dtype(fn, dtype):
    x = _X.astype(dtype)
    got, want = adjit.compile(fn)(x), fn(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-5 if dtype == np.float32 else 1e-12)


def test_complex_arguments_and_their_gradients():
    """A complex argument is its two parts; its gradient is dL/dRe + i dL/dIm, the direction
    of steepest ascent (PyTorch's convention: z -= lr * g descends)."""
    z = _RNG.standard_normal(5) + 1j * _RNG.standard_normal(5)
    A = _RNG.standard_normal((5, 5)) + 1j * _RNG.standard_normal((5, 5))

    def loss(z):
        return np.sum(np.abs(A @ z - 1) ** 2)
    g = adjit.grad(loss)(z)
    assert g.dtype == np.complex128
    eps = 1e-6
    want = [(loss(z + eps * e) - loss(z - eps * e)) / (2 * eps)
            + 1j * (loss(z + 1j * eps * e) - loss(z - 1j * eps * e)) / (2 * eps)
            for e in np.eye(5)]
    np.testing.assert_allclose(g, want, rtol=1e-6)
    np.testing.assert_allclose(adjit.compile(lambda z, w: np.fft.fft(z) * w)(z, 2 + 1j),
                               np.fft.fft(z) * (2 + 1j), rtol=1e-12)
    params = {"z": z, "x": np.ones(3)}
    _, grads = adjit.value_and_grad(lambda p: np.sum(np.abs(p["z"]) ** 2) + np.sum(p["x"]))(params)
    np.testing.assert_allclose(grads["z"], 2 * z)


def test_ffts_inside_checkpointed_and_nested_transformations():
    x = _RNG.standard_normal(32)

    def deep(x):
        for _ in range(10):
            x = np.tanh(np.fft.irfft(np.fft.rfft(x) * (0.9 + 0.1j), n=32))
        return np.sum(x ** 2)
    plain = adjit.grad(deep)(x)
    np.testing.assert_allclose(adjit.grad(deep, checkpoint="sqrt")(x), plain, rtol=1e-12)
    np.testing.assert_allclose(adjit.grad(deep, backend="numba")(x), plain, rtol=1e-12)
    assert adjit.gradcheck(deep, x, eps=1e-6) < 1e-6
    # the power spectrum is quadratic: its Hessian is constant, 2 F^H F restricted to rfft
    h = adjit.hessian(lambda x: np.sum(np.abs(np.fft.fft(x)) ** 2))(x[:6])
    np.testing.assert_allclose(h, 12 * np.eye(6), atol=1e-12)


def test_the_backward_of_an_fft_reads_as_the_inverse_transform():
    src = adjit.grad(lambda x: np.sum(np.abs(np.fft.fft(x)) ** 2),
                     backend="numpy").lower(np.ones(8)).source
    assert "_rt_ops['fft'](v3, axis=0, inverse=False, norm='backward')" in src
    assert "inverse=True, norm='forward')" in src      # the adjoint: the unscaled inverse


def test_a_complex_loss_and_unsupported_complex_operations_name_the_line():
    with pytest.raises(adjit.GradError, match=r"real scalar loss.*np\.abs\(z\) \*\* 2"):
        adjit.grad(lambda x: np.sum(np.fft.fft(x)))(_X)
    cases = [(lambda x: np.maximum(x * 1j, 0), r"np\.maximum of complex"),
             (lambda x: np.sort(np.fft.fft(x)), r"np\.sort of complex"),
             (lambda x: np.fft.fft(x) < 1, r"ordering comparison"),
             (lambda x: np.fft.fft(x).astype(float), r"z\.real"),
             (lambda x: np.real_if_close(np.fft.fft(x)), r"real_if_close")]
    for fn, msg in cases:
        with pytest.raises(adjit.UnsupportedError, match=msg) as info:
            adjit.compile(fn)(_X)
        assert "test_complex.py" in str(info.value)
    with pytest.raises(TypeError, match="rfft of complex"):
        adjit.compile(lambda x: np.fft.rfft(x * 1j))(_X)


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_second_derivatives_through_real_transforms_in_every_norm(norm):
    """The VJPs' own transforms carry a numeric scale; their VJPs must keep it (sweep 21)."""
    x = _RNG.standard_normal(8)
    fns = [lambda x: np.sum(np.sin(np.abs(np.fft.rfft(x, norm=norm)))),
           lambda x: np.sum(np.sin(np.fft.irfft(np.fft.rfft(x) * 1j + 1, norm=norm))),
           lambda x: np.sum(np.sin(np.fft.hfft(x[:5] + 1j * x[3:], norm=norm))),
           lambda x: np.sum(np.cos(np.abs(np.fft.ihfft(x, norm=norm))))]
    for f in fns:
        g, eps = adjit.grad(f), 1e-5
        want = np.array([(g(x + eps * e) - g(x - eps * e)) / (2 * eps) for e in np.eye(8)])
        np.testing.assert_allclose(adjit.hessian(f)(x), want, atol=1e-6 * np.abs(want).max())


def test_astype_complex_and_complex_stores_into_numpy_arrays():
    x = np.array([1.0, 2.0])
    for f in (lambda x: x.astype(complex) * 1j, lambda x: np.asarray(x, dtype=complex) + 2,
              lambda x: np.exp(x.astype(np.complex64)), lambda x: np.array(x, dtype=complex)):
        got, want = adjit.compile(f)(x), f(x)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6)

    def store(x):
        y = np.zeros(3, complex)
        y[1:] = np.fft.fft(x)[:2]
        return y
    np.testing.assert_allclose(adjit.compile(store)(np.arange(4.0)), store(np.arange(4.0)))
    z = np.array([1 + 2j, 3 - 1j])
    for transform in (adjit.hessian, adjit.jacobian):
        with pytest.raises(adjit.GradError, match="no single convention"):
            transform(lambda z: np.sum(np.abs(z) ** 2 * np.real(z)))(z)
    with pytest.raises(adjit.GradError, match="no single convention"):
        adjit.jacobian(lambda x: np.fft.fft(x))(np.ones(4))


def test_a_spectrum_preallocated_and_filled_as_in_fourier_neural_operators():
    """neuraloperator's SpectralConv1d in NumPy: out_ft = np.zeros(..., dtype=complex) filled
    with the low modes, then irfft; complex arrays made inside follow traced writes."""
    rng = np.random.default_rng(0)

    def fno(Wr, Wi, x):
        W = Wr + 1j * Wi
        xft = np.fft.rfft(x)
        out_ft = np.zeros((x.shape[0], W.shape[1], x.shape[-1] // 2 + 1), dtype=complex)
        out_ft[:, :, :4] = np.einsum("bix,iox->box", xft[:, :, :4], W)
        return np.mean(np.fft.irfft(out_ft, n=x.shape[-1]) ** 2)
    Wr, Wi, x = rng.normal(size=(3, 2, 4)), rng.normal(size=(3, 2, 4)), rng.normal(size=(2, 3, 16))
    np.testing.assert_allclose(adjit.compile(fno)(Wr, Wi, x), fno(Wr, Wi, x), rtol=1e-12)
    assert adjit.gradcheck(lambda Wr: fno(Wr, Wi, x), Wr) < 1e-6

    def shaped_like(x):
        X = np.fft.fft(x)
        o = np.zeros(X.shape, X.dtype)
        o[0] = X[0]
        o[3:] = X[3:] * 2j
        e = np.empty_like(X)
        e[:] = X
        return np.fft.ifft(o) + e

    def constants_only(x):          # a complex array no traced value reaches stays NumPy's
        A = np.zeros((2, 2), complex)
        A[0, 0], A[1, 1] = 1, 2j
        return x[:2] @ np.linalg.inv(A).real
    for fn in (shaped_like, constants_only):
        np.testing.assert_allclose(adjit.compile(fn)(x[0, 0]), fn(x[0, 0]), rtol=1e-12)


@pytest.mark.parametrize("fn", [
    lambda z: np.sum(z, where=_M), lambda z: np.mean(z, where=_M), lambda z: np.sum(z, initial=1j),
    lambda z: z.sum(where=_M), lambda z: np.sum(z, dtype=np.complex64), lambda z: z ** np.arange(4),
    lambda z: np.full_like(z, 2j) * z, lambda z: (1 + 1j) ** z, lambda z: 1j ** z,
    lambda z: np.array([z[0], z[1]]), lambda z: np.asarray(z, dtype=np.complex64),
    lambda z: np.sqrt(-np.abs(z) - 0j), lambda z: np.angle(-np.abs(z) * 0j),
    lambda z: z / np.array([1e300 + 1e299j, 1e-300j, 3, 0]),
    lambda z: adjit.where(np.abs(z) > 1, z, 2j), lambda z: adjit.stop_gradient(z) * 2])
def test_complex_reductions_powers_signed_zeros_and_division_as_numpy(fn):
    z = np.array([0.3 + 0.7j, -1.2 + 0.1j, 2 - 0.5j, -0.4j])
    with np.errstate(all="ignore"):
        got, want = adjit.compile(fn)(z), fn(z)
    assert got.dtype == np.asarray(want).dtype
    np.testing.assert_allclose(got, want, rtol=1e-6 if got.dtype == np.complex64 else 1e-14)
    np.testing.assert_array_equal(np.signbit(np.imag(got)), np.signbit(np.imag(want)))


def test_in_place_operators_and_part_setters_write_through_views():
    z = np.array([0.3 + 0.7j, -1.2 + 0.1j, 2 - 0.5j, -0.4j])

    def views(z):
        y = z * 1.0
        v = y[1:]
        y *= 2
        y += 1j
        return v

    def parts(z):
        y = z * 1.0
        y.imag = np.arange(4.0)
        y.real *= -1
        return y
    for fn in (views, parts):
        np.testing.assert_array_equal(adjit.compile(fn)(z), fn(z))
    x = np.array([0.0, 1.0])
    np.testing.assert_array_equal(
        adjit.grad(lambda x: np.sum(np.real((x + 0j) ** 2.0)))(x), [0.0, 2.0])
    np.testing.assert_array_equal(
        adjit.grad(lambda x: np.sum(np.real((x + 0j) ** 1.5)))(x), [0.0, 1.5])


def test_scipy_fft_transforms_trace_as_numpys():
    sf = pytest.importorskip("scipy.fft")

    def f(x):
        return (np.sum(np.abs(sf.rfft(x)) ** 2) + np.sum(sf.irfft(sf.rfft(x) * 1j, n=12) ** 2)
                + np.sum(np.abs(sf.fftshift(sf.fft(x, norm="ortho"))) * np.arange(12)))
    np.testing.assert_allclose(adjit.compile(f)(_X), f(_X), rtol=1e-12)
    assert adjit.gradcheck(f, _X, eps=1e-6) < 1e-5
    np.testing.assert_allclose(sf.rfft(_X), np.fft.rfft(_X))    # restored after tracing


def test_writes_through_views_of_a_complex_array_with_a_constant_part():
    def field(x):                       # a phase plate on the centre pixels, through a view
        u = x.astype(complex)
        center = u[2:5]
        center *= np.exp(0.5j)
        return np.sum(np.abs(np.fft.fft(u)[1:3]) ** 2)

    def frames(x):
        S = x.reshape(2, 4).astype(complex)
        for r in S:
            r *= np.hanning(4)
        return S, x                     # x itself is untouched: astype copies
    x = np.arange(8.0)
    np.testing.assert_allclose(adjit.compile(field)(x), field(x), rtol=1e-12)
    assert adjit.gradcheck(field, x) < 1e-6
    for got, want in zip(adjit.compile(frames)(x), frames(x)):
        np.testing.assert_allclose(got, want)


def test_masked_in_place_updates_of_a_spectrum():
    def soft(x):                        # spectral soft-thresholding
        X = np.fft.fft(x)
        X[np.abs(X) < 3] *= 0.5
        m = np.abs(X) > 3
        X[m] = np.exp(X[m] * 0.1j) + 1
        X[~m] += 1
        return X
    x = np.arange(8.0) - 3.5
    np.testing.assert_allclose(adjit.compile(soft)(x), soft(x), rtol=1e-12)
    assert adjit.gradcheck(lambda x: np.sum(np.abs(soft(x))), x) < 1e-6
    with pytest.raises(adjit.UnsupportedError, match="length depends on the data"):
        adjit.compile(lambda x: np.sum(np.fft.fft(x)[np.abs(np.fft.fft(x)) > 3]))(x)


_Z8 = np.array([0.3, 0.7, 1.1, -0.4, 0.2, 0.5, 0.9, -1.0])


def _filled(z):
    w = np.zeros(8, complex)
    w[:] = np.exp(1j * z)
    return np.sum(np.imag(w * 2))


def _updated(z):
    u = np.ones(8, complex)
    u *= np.exp(1j * z)
    return np.sum(np.real(u) * np.arange(8))


def _parts_set(z):
    w = np.empty(8, complex)
    w.real = z
    w.imag = 0.0
    return np.sum(np.abs(w * 1j) ** 2)


@pytest.mark.parametrize("fn", [
    lambda z: np.sum(np.abs(np.exp(1j * np.sqrt(np.arange(4.0)) * z[0]) + 1) ** 2),
    lambda z: np.sum(np.abs(np.ones(8, complex) * np.exp(1j * z)) ** 2 * np.arange(8)),
    lambda z: np.sum(np.abs(np.zeros(8, complex) + z) ** 2),
    lambda z: np.sum(np.abs(np.exp(-1j * np.outer(np.linspace(0, 1, 8), np.ones(8)))
                            * np.exp(1j * z)) ** 2),
    lambda z: np.sum(np.abs(np.exp(-2j * np.pi * np.outer(np.arange(8), np.arange(8)) / 8) @ z)
                     ** 2), _filled, _updated, _parts_set])
def test_complex_arrays_made_inside_meet_traced_values(fn):
    np.testing.assert_allclose(adjit.compile(fn)(_Z8), fn(_Z8), rtol=1e-12)
    assert adjit.gradcheck(fn, _Z8) < 1e-6


def test_float16_signals_transform_in_complex64_and_scipy_transforms_adjit_lacks_are_named():
    x16 = np.arange(8, dtype=np.float16) * 0.3
    for fn in (np.fft.fft, lambda x: np.abs(np.fft.rfft(x)), lambda x: np.fft.irfft(np.fft.rfft(x))):
        got, want = adjit.compile(fn)(x16), fn(x16)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    sf = pytest.importorskip("scipy.fft")
    with pytest.raises(adjit.UnsupportedError, match=r"scipy\.fft\.dct .*np\.fft"):
        adjit.compile(lambda x: sf.dct(x))(np.ones(8))


def test_complex_copies_signed_zeros_zero_powers_and_views_of_arrays_made_inside():
    w = np.array([0.5 + 1j, -1 - 2j, 2 + 4j])

    def copies(z):
        u = z.astype(complex)
        u[0] = 0
        c = np.conj(z)
        z2 = z * 1.0
        z2[1:] *= 2
        return z, c, z2

    for got, want in zip(adjit.compile(copies)(w), copies(w)):
        np.testing.assert_array_equal(got, want)
    x = np.array([0.5, 0.0, 2.0])
    cases = [lambda x: np.sqrt((x * -1j) ** 2), lambda x: np.angle(x * (-1 - 1j)),
             lambda x: (x + 0j) ** np.array([0.5, 2.0, 1.0]), lambda x: (x + 0j) ** 0j,
             lambda x: (x + 0j) ** (2 + 0j), lambda x: 0.0 ** (x + 0j),
             lambda x: np.zeros_like(x + 0j, shape=(2,), dtype=np.complex64),
             lambda x: np.array([1j, x[0]]), lambda x: np.zeros_like(x, dtype=complex) + x,
             lambda x: np.full_like(x, 2j, dtype=complex) * x]
    for fn in cases:
        with np.errstate(all="ignore"):
            got, want = adjit.compile(fn)(x), fn(x)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want)
        for part in (np.real, np.imag):
            np.testing.assert_array_equal(np.signbit(part(got)), np.signbit(part(want)))

    def views(x):
        u = np.zeros(8, complex)
        u[2:] += x[2:]
        v = np.ones(8, complex)
        s = v[::2]
        s *= np.exp(1j * x[::2])
        return u + v
    np.testing.assert_allclose(adjit.compile(views)(_Z8), views(_Z8))
    assert adjit.gradcheck(lambda x: np.sum(np.abs(views(x) + 1j) ** 2), _Z8) < 1e-6


def test_python_numbers_stay_weak_in_complex64_division_and_powers():
    b = np.array([1 + 2j, -3.5 + 0.25j], np.complex64)
    x32 = np.array([1.0, -0.0], np.float32)
    for fn, a in [(lambda b: b / 2.0, b), (lambda x: x / 1j, x32), (lambda b: 2 ** b, b),
                  (lambda b: (1 + 1j) ** b, b), (lambda b: b / (1 + 1j), b)]:
        got, want = adjit.compile(fn)(a), fn(a)
        assert got.dtype == want.dtype == np.complex64
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_np_array_of_complex_values_copies_and_takes_ndmin():
    z = np.array([1 + 2j, 3j])

    def f(z):
        u = np.array(z)
        u[0] = 0
        return z, np.array(z, ndmin=2)
    for got, want in zip(adjit.compile(f)(z), f(z)):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_writes_through_the_real_and_imaginary_views_of_a_complex_array_made_inside():
    def parts(x):
        u = np.ones(8, complex)
        u.real *= x
        u.imag += x ** 2
        v = np.zeros((2, 4), complex)
        v.imag[1, ::2] = x[:2]
        v.real[0] = x[4:]
        return u, v * 1j, u.real * x
    for got, want in zip(adjit.compile(parts)(_Z8), parts(_Z8)):
        np.testing.assert_allclose(got, want)
    assert adjit.gradcheck(lambda x: sum(np.sum(np.abs(r + 1j) ** 2) for r in parts(x)),
                           _Z8) < 1e-6
