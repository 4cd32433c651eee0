"""User-style NumPy programs: adjit value_and_grad against eager NumPy, JAX and PyTorch, same run.

Usage: python benchmarks/user_programs.py [--repeat 10] [--quick] [--threads N]
                                          [--only gp,rosenbrock,...]

Loss functions, each written the way a NumPy user writes it (float64 throughout):
  gp          GP negative log marginal likelihood, RBF kernel of 3-d inputs, Cholesky and two
              triangular solves; gradient w.r.t. the two log hyperparameters (n = 800)
  rosenbrock  np.sum(100*(x[1:]-x[:-1]**2)**2 + (1-x[:-1])**2)           (n = 1e6)
  trimmed     np.mean(np.sort(x**2)[:90000])                              (n = 1e5)
  segmax      out = np.full(10, -1e9); np.maximum.at(out, labels, x); np.sum(out**2)
  heat        2-D Laplacian of a zero-padded copy (u[1:-1, 1:-1] = x), sum of squares (512^2)
  huber       np.sum(np.where(a < 1, 0.5*d*d, a - 0.5)), d = x - y, a = |d|  (n = 1e5)
  reflectpad  np.sum(np.pad(x, ((0,0),(3,3)), mode="reflect")**2)         (512 x 1024)
  drawdown    np.sum(np.maximum.accumulate(x) - x)                        (n = 2e5)
  interp      np.sum(np.interp(v, xp, fp)), traced v, 1,000 constant knots (n = 1e5)
  fir         np.sum(np.convolve(x, k, "same")**2), a constant 63-tap kernel (n = 16,000)
  frames      np.sum((sliding_window_view(x, 400)[::160] * window)**2)    (n = 16,000)
  ola         overlap-add loop y[i*256:i*256+512] += frames[i] * window, 251 frames
  gmm         Gaussian-mixture negative log-likelihood, 8 components, logsumexp by hand
              (exp and log of every point and component; n = 20,000)
  reaction    8 explicit steps of u + 0.1 (laplacian(u) + tanh(u) - u^3 / 3), np.roll
              stencil (256^2)
  embed       word2vec-style: rows E[ids] and C[ctx] of two 10,000 x 64 tables, 50,000 pairs
              with repeats, np.sum((np.sum(E[ids] * C[ctx], 1) - 1)**2); gradient w.r.t. E
  gelu        layer norm then the tanh GELU (its x**3), 1024 x 512
  i0          np.sum(np.i0(x) * np.exp(-np.abs(x))), the scaled Bessel function (n = 1e5)
  stencil     5-point Laplacian of u by slices, squared, plus total variation (512^2)
Peers: eager NumPy forward only (the program itself), JAX jax.jit(jax.value_and_grad) with
x64 (a jax.numpy mirror of each program), PyTorch eager float64 forward + backward; a peer
that is not installed is skipped with a line. adjit compile = the first call of
adjit.value_and_grad (trace, passes, codegen, first run); step = median of --repeat calls
after warm-up (benchmarks/common.py); the numba backend's first call is printed per program
(its kernels are cached on disk, so a second run finds them compiled). Checks: adjit's value
against eager NumPy (rtol 1e-9) and its gradient against JAX's (rtol 1e-7, atol 1e-12 of the
gradient's largest entry); a failed check prints a MISMATCH line. BLAS, OpenMP, numba, XLA
and PyTorch use one thread unless --threads is given. Constants (the labels, the knots, the
trimmed count) are closed over, so adjit bakes them in; the PyTorch interp mirror is
searchsorted + lerp (torch has no interp).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import threads  # noqa: E402,F401 - sets the thread counts before NumPy is imported

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402


from common import machine, median_ms, optional, table, tune_malloc  # noqa: E402

import adjit  # noqa: E402


# -- the programs, as a NumPy user writes them ------------------------------------------------
NOISE = 1e-2


def gp_nll(theta, X, y):
    ell, sf2 = np.exp(theta[0]), np.exp(2 * theta[1])
    d2 = np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
    K = sf2 * np.exp(-0.5 * d2 / ell ** 2) + NOISE * np.eye(len(y))
    L = np.linalg.cholesky(K)
    a = np.linalg.solve(L.T, np.linalg.solve(L, y))
    return 0.5 * y @ a + np.sum(np.log(np.diag(L)))


def rosenbrock(x):
    return np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def trimmed(x, k):
    return np.mean(np.sort(x ** 2)[:k])


def segmax(x, labels):
    out = np.full(10, -1e9)
    np.maximum.at(out, labels, x)
    return np.sum(out ** 2)


def heat(x):
    n = x.shape[0]
    u = np.zeros((n + 2, n + 2))
    u[1:-1, 1:-1] = x
    lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * x
    return np.sum(lap ** 2)


def huber(x, y):
    d = x - y
    a = np.abs(d)
    return np.sum(np.where(a < 1, 0.5 * d * d, a - 0.5))


def reflectpad(x):
    return np.sum(np.pad(x, ((0, 0), (3, 3)), mode="reflect") ** 2)


def drawdown(x):
    return np.sum(np.maximum.accumulate(x) - x)


def interp(v, xp, fp):
    return np.sum(np.interp(v, xp, fp))


def fir(x, k):
    return np.sum(np.convolve(x, k, "same") ** 2)


def frames(x, window):
    return np.sum((np.lib.stride_tricks.sliding_window_view(x, 400)[::160] * window) ** 2)


def ola(fr, window):
    hop, n = 256, fr.shape[1]
    y = np.zeros((fr.shape[0] - 1) * hop + n)
    for i in range(fr.shape[0]):
        y[i * hop:i * hop + n] += fr[i] * window
    return np.sum(y ** 2)


def spectral(x, target):
    # a spectral loss: magnitudes of the rfft of 512-sample frames against target magnitudes
    return np.sum((np.abs(np.fft.rfft(x.reshape(-1, 512), axis=-1)) - target) ** 2)


def fftconv(x, k):
    # linear convolution by FFT, zero-padded to the full length
    n = x.shape[0] + k.shape[0] - 1
    return np.sum(np.fft.irfft(np.fft.rfft(x, n) * np.fft.rfft(k, n), n) ** 2)


def ema(x):
    # a recurrence written element by element into np.zeros (IIR filters, returns, GAE)
    y = np.zeros(x.shape[0])
    for i in range(1, x.shape[0]):
        y[i] = 0.9 * y[i - 1] + x[i]
    return np.sum(y ** 2)


def thomas(b, a, c, d):
    # a tridiagonal solve by the Thomas algorithm, written element by element (the back
    # substitution writes x from the last element to the first)
    n = d.shape[0]
    cp, dp, x = np.zeros(n), np.zeros(n), np.zeros(n)
    cp[0], dp[0] = c[0] / b[0], d[0] / b[0]
    for i in range(1, n):
        m = b[i] - a[i] * cp[i - 1]
        cp[i] = c[i] / m
        dp[i] = (d[i] - a[i] * dp[i - 1]) / m
    x[-1] = dp[-1]
    for i in range(n - 2, -1, -1):
        x[i] = dp[i] - cp[i] * x[i + 1]
    return np.sum(x ** 2)


def assembly(E, f):
    # finite elements: a bar's stiffness matrix assembled element by element into np.zeros,
    # then the compliance f . K^-1 f (the first node held)
    n = E.shape[0] + 1
    K = np.zeros((n, n))
    for e in range(n - 1):
        K[e:e + 2, e:e + 2] += E[e] * KE
    return f[1:] @ np.linalg.solve(K[1:, 1:], f[1:])


KE = np.array([[1.0, -1.0], [-1.0, 1.0]])


def gmm(p, x):
    k = p.shape[0] // 3
    logw = p[:k] - np.log(np.sum(np.exp(p[:k])))
    z = (x[:, None] - p[k:2 * k]) * np.exp(-p[2 * k:])
    lp = logw - 0.5 * z ** 2 - p[2 * k:]
    m = np.max(lp, axis=1, keepdims=True)
    return -np.sum(np.log(np.sum(np.exp(lp - m), axis=1)) + m[:, 0])


def reaction(u):
    for _ in range(8):
        lap = np.roll(u, 1, 0) + np.roll(u, -1, 0) + np.roll(u, 1, 1) + np.roll(u, -1, 1) - 4 * u
        u = u + 0.1 * (lap + np.tanh(u) - u ** 3 / 3)
    return np.sum(u ** 2)


def embed(E, C, ids, ctx):
    s = np.sum(E[ids] * C[ctx], axis=1)
    return np.sum((s - 1.0) ** 2)


def gelu(x, g):
    mu = np.mean(x, axis=-1, keepdims=True)
    h = (x - mu) / np.sqrt(np.var(x, axis=-1, keepdims=True) + 1e-5) * g
    return np.sum(0.5 * h * (1 + np.tanh(0.7978845608 * (h + 0.044715 * h ** 3))))


def i0(x):
    return np.sum(np.i0(x) * np.exp(-np.abs(x)))


def stencil(u):
    lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
    return np.sum(lap ** 2) + 0.1 * np.sum(np.abs(u[1:] - u[:-1])) + \
        0.1 * np.sum(np.abs(u[:, 1:] - u[:, :-1]))


# -- JAX mirrors --------------------------------------------------------------------------------
def jax_mirrors(jax):
    jnp = jax.numpy

    def j_embed(E, C, ids, ctx):
        return jnp.sum((jnp.sum(E[ids] * C[ctx], axis=1) - 1.0) ** 2)

    def j_gelu(x, g):
        mu = jnp.mean(x, axis=-1, keepdims=True)
        h = (x - mu) / jnp.sqrt(jnp.var(x, axis=-1, keepdims=True) + 1e-5) * g
        return jnp.sum(0.5 * h * (1 + jnp.tanh(0.7978845608 * (h + 0.044715 * h ** 3))))

    def j_stencil(u):
        lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
        return jnp.sum(lap ** 2) + 0.1 * jnp.sum(jnp.abs(u[1:] - u[:-1])) + \
            0.1 * jnp.sum(jnp.abs(u[:, 1:] - u[:, :-1]))

    def j_gp(theta, X, y):
        ell, sf2 = jnp.exp(theta[0]), jnp.exp(2 * theta[1])
        d2 = jnp.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
        K = sf2 * jnp.exp(-0.5 * d2 / ell ** 2) + NOISE * jnp.eye(len(y))
        L = jnp.linalg.cholesky(K)
        a = jnp.linalg.solve(L.T, jnp.linalg.solve(L, y))
        return 0.5 * y @ a + jnp.sum(jnp.log(jnp.diag(L)))

    def j_segmax(x, labels):
        return jnp.sum(jnp.full(10, -1e9).at[labels].max(x) ** 2)

    def j_heat(x):
        n = x.shape[0]
        u = jnp.zeros((n + 2, n + 2)).at[1:-1, 1:-1].set(x)
        lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * x
        return jnp.sum(lap ** 2)

    def j_huber(x, y):
        d = x - y
        a = jnp.abs(d)
        return jnp.sum(jnp.where(a < 1, 0.5 * d * d, a - 0.5))

    def j_frames(x, window):
        idx = np.arange(400) + 160 * np.arange((x.shape[0] - 400) // 160 + 1)[:, None]
        return jnp.sum((x[idx] * window) ** 2)

    def j_ola(fr, window):
        hop, n = 256, fr.shape[1]
        y = jnp.zeros((fr.shape[0] - 1) * hop + n)
        for i in range(fr.shape[0]):
            y = y.at[i * hop:i * hop + n].add(fr[i] * window)
        return jnp.sum(y ** 2)

    def j_fftconv(x, k):
        n = x.shape[0] + k.shape[0] - 1
        return jnp.sum(jnp.fft.irfft(jnp.fft.rfft(x, n) * jnp.fft.rfft(k, n), n) ** 2)

    def j_thomas(b, a, c, d):
        n = d.shape[0]
        cp = jnp.zeros(n).at[0].set(c[0] / b[0])
        dp = jnp.zeros(n).at[0].set(d[0] / b[0])
        for i in range(1, n):
            m = b[i] - a[i] * cp[i - 1]
            cp = cp.at[i].set(c[i] / m)
            dp = dp.at[i].set((d[i] - a[i] * dp[i - 1]) / m)
        x = jnp.zeros(n).at[-1].set(dp[-1])
        for i in range(n - 2, -1, -1):
            x = x.at[i].set(dp[i] - cp[i] * x[i + 1])
        return jnp.sum(x ** 2)

    def j_assembly(E, f):
        n = E.shape[0] + 1
        K = jnp.zeros((n, n))
        for e in range(n - 1):
            K = K.at[e:e + 2, e:e + 2].add(E[e] * KE)
        return f[1:] @ jnp.linalg.solve(K[1:, 1:], f[1:])

    def j_ema(x):
        y = jnp.zeros(x.shape[0])
        for i in range(1, x.shape[0]):
            y = y.at[i].set(0.9 * y[i - 1] + x[i])
        return jnp.sum(y ** 2)

    def j_gmm(p, x):
        k = p.shape[0] // 3
        logw = p[:k] - jnp.log(jnp.sum(jnp.exp(p[:k])))
        z = (x[:, None] - p[k:2 * k]) * jnp.exp(-p[2 * k:])
        lp = logw - 0.5 * z ** 2 - p[2 * k:]
        m = jnp.max(lp, axis=1, keepdims=True)
        return -jnp.sum(jnp.log(jnp.sum(jnp.exp(lp - m), axis=1)) + m[:, 0])

    def j_reaction(u):
        for _ in range(8):
            lap = (jnp.roll(u, 1, 0) + jnp.roll(u, -1, 0) + jnp.roll(u, 1, 1)
                   + jnp.roll(u, -1, 1) - 4 * u)
            u = u + 0.1 * (lap + jnp.tanh(u) - u ** 3 / 3)
        return jnp.sum(u ** 2)

    return {
        "gmm": j_gmm, "reaction": j_reaction,
        "embed": j_embed, "gelu": j_gelu, "stencil": j_stencil,
        "i0": lambda x: jnp.sum(jnp.i0(x) * jnp.exp(-jnp.abs(x))),
        "ema": j_ema,
        "thomas": j_thomas,
        "assembly": j_assembly,
        "spectral": lambda x, target: jnp.sum(
            (jnp.abs(jnp.fft.rfft(x.reshape(-1, 512), axis=-1)) - target) ** 2),
        "fftconv": j_fftconv,
        "fir": lambda x, k: jnp.sum(jnp.convolve(x, k, mode="same") ** 2),
        "frames": j_frames, "ola": j_ola,
        "gp": j_gp,
        "rosenbrock": lambda x: jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2),
        "trimmed": lambda x, k: jnp.mean(jnp.sort(x ** 2)[:k]),
        "segmax": j_segmax,
        "heat": j_heat,
        "huber": j_huber,
        "reflectpad": lambda x: jnp.sum(jnp.pad(x, ((0, 0), (3, 3)), mode="reflect") ** 2),
        "drawdown": lambda x: jnp.sum(jax.lax.cummax(x, axis=0) - x),
        "interp": lambda v, xp, fp: jnp.sum(jnp.interp(v, xp, fp)),
    }


# -- PyTorch mirrors (eager, float64) -------------------------------------------------------------
def torch_mirrors(torch):
    F = torch.nn.functional

    def t_gp(theta, X, y):
        ell, sf2 = torch.exp(theta[0]), torch.exp(2 * theta[1])
        d2 = torch.sum((X[:, None, :] - X[None, :, :]) ** 2, dim=-1)
        K = sf2 * torch.exp(-0.5 * d2 / ell ** 2) + NOISE * torch.eye(len(y), dtype=X.dtype)
        L = torch.linalg.cholesky(K)
        a = torch.linalg.solve(L.T, torch.linalg.solve(L, y))
        return 0.5 * y @ a + torch.sum(torch.log(torch.diagonal(L)))

    def t_segmax(x, labels):
        out = torch.full((10,), -1e9, dtype=x.dtype)
        return torch.sum(out.scatter_reduce(0, labels, x, reduce="amax") ** 2)

    def t_heat(x):
        n = x.shape[0]
        u = torch.zeros((n + 2, n + 2), dtype=x.dtype)
        u[1:-1, 1:-1] = x
        lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * x
        return torch.sum(lap ** 2)

    def t_huber(x, y):
        d = x - y
        a = torch.abs(d)
        return torch.sum(torch.where(a < 1, 0.5 * d * d, a - 0.5))

    def t_interp(v, xp, fp):
        # np.interp for queries inside [xp[0], xp[-1]] (as here): searchsorted + lerp
        i = torch.clamp(torch.searchsorted(xp, v, right=True), 1, len(xp) - 1)
        x0, x1, f0, f1 = xp[i - 1], xp[i], fp[i - 1], fp[i]
        return torch.sum(f0 + (v - x0) / (x1 - x0) * (f1 - f0))

    def t_fir(x, k):
        m = k.shape[0]
        y = F.conv1d(x[None, None], torch.flip(k, (0,))[None, None], padding=m // 2)[0, 0]
        return torch.sum(y ** 2)

    def t_ola(fr, window):
        hop, n = 256, fr.shape[1]
        y = torch.zeros((fr.shape[0] - 1) * hop + n, dtype=fr.dtype)
        for i in range(fr.shape[0]):
            y[i * hop:i * hop + n] += fr[i] * window
        return torch.sum(y ** 2)

    def t_fftconv(x, k):
        n = x.shape[0] + k.shape[0] - 1
        return torch.sum(torch.fft.irfft(torch.fft.rfft(x, n) * torch.fft.rfft(k, n), n) ** 2)

    def t_ema(x):
        y = torch.zeros(x.shape[0], dtype=x.dtype)
        for i in range(1, x.shape[0]):
            y[i] = 0.9 * y[i - 1] + x[i]
        return torch.sum(y ** 2)

    def t_thomas(b, a, c, d):
        n = d.shape[0]
        cp, dp = [c[0] / b[0]], [d[0] / b[0]]
        for i in range(1, n):
            m = b[i] - a[i] * cp[-1]
            cp.append(c[i] / m)
            dp.append((d[i] - a[i] * dp[-1]) / m)
        x = [dp[-1]]
        for i in range(n - 2, -1, -1):
            x.append(dp[i] - cp[i] * x[-1])
        return torch.sum(torch.stack(x) ** 2)

    def t_assembly(E, f):
        n = E.shape[0] + 1
        K = torch.zeros((n, n), dtype=E.dtype)
        ke = torch.from_numpy(KE)
        for e in range(n - 1):
            K[e:e + 2, e:e + 2] += E[e] * ke
        return f[1:] @ torch.linalg.solve(K[1:, 1:], f[1:])

    def t_gmm(p, x):
        k = p.shape[0] // 3
        logw = p[:k] - torch.log(torch.sum(torch.exp(p[:k])))
        z = (x[:, None] - p[k:2 * k]) * torch.exp(-p[2 * k:])
        lp = logw - 0.5 * z ** 2 - p[2 * k:]
        m = torch.max(lp, dim=1, keepdim=True).values
        return -torch.sum(torch.log(torch.sum(torch.exp(lp - m), dim=1)) + m[:, 0])

    def t_reaction(u):
        for _ in range(8):
            lap = (torch.roll(u, 1, 0) + torch.roll(u, -1, 0) + torch.roll(u, 1, 1)
                   + torch.roll(u, -1, 1) - 4 * u)
            u = u + 0.1 * (lap + torch.tanh(u) - u ** 3 / 3)
        return torch.sum(u ** 2)

    def t_embed(E, C, ids, ctx):
        return torch.sum((torch.sum(E[ids] * C[ctx], dim=1) - 1.0) ** 2)

    def t_gelu(x, g):
        mu = torch.mean(x, dim=-1, keepdim=True)
        h = (x - mu) / torch.sqrt(torch.var(x, dim=-1, keepdim=True, unbiased=False) + 1e-5) * g
        return torch.sum(0.5 * h * (1 + torch.tanh(0.7978845608 * (h + 0.044715 * h ** 3))))

    def t_stencil(u):
        lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
        return torch.sum(lap ** 2) + 0.1 * torch.sum(torch.abs(u[1:] - u[:-1])) + \
            0.1 * torch.sum(torch.abs(u[:, 1:] - u[:, :-1]))

    return {
        "gmm": t_gmm, "reaction": t_reaction,
        "embed": t_embed, "gelu": t_gelu, "stencil": t_stencil,
        "i0": lambda x: torch.sum(torch.special.i0(x) * torch.exp(-torch.abs(x))),
        "thomas": t_thomas,
        "assembly": t_assembly,
        "ema": t_ema,
        "spectral": lambda x, target: torch.sum(
            (torch.abs(torch.fft.rfft(x.reshape(-1, 512), dim=-1)) - target) ** 2),
        "fftconv": t_fftconv,
        "fir": t_fir,
        "frames": lambda x, window: torch.sum((x.unfold(0, 400, 160) * window) ** 2),
        "ola": t_ola,
        "gp": t_gp,
        "rosenbrock": lambda x: torch.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2),
        "trimmed": lambda x, k: torch.mean(torch.sort(x ** 2).values[:k]),
        "segmax": t_segmax,
        "heat": t_heat,
        "huber": t_huber,
        "reflectpad": lambda x: torch.sum(F.pad(x, (3, 3), mode="reflect") ** 2),
        "drawdown": lambda x: torch.sum(torch.cummax(x, dim=0).values - x),
        "interp": t_interp,
    }


# -- the cases: (name, size label, numpy fn, traced args, constant args) --------------------------
def cases(quick, rng):
    out = []
    n = 200 if quick else 800
    X = rng.uniform(-3, 3, size=(n, 3))
    y = np.sin(X[:, 0]) + 0.5 * np.cos(2 * X[:, 1]) * X[:, 2] + 0.1 * rng.normal(size=n)
    out.append(("gp", f"n={n}", gp_nll, (np.array([0.3, -0.2]), X, y), {}))
    n = 10 ** 5 if quick else 10 ** 6
    out.append(("rosenbrock", f"n={n:.0e}", rosenbrock, (rng.uniform(-2, 2, size=n),), {}))
    n = 10 ** 4 if quick else 10 ** 5
    k = 9 * n // 10
    out.append(("trimmed", f"n={n:.0e}, k={k}", trimmed, (rng.normal(size=n),), {"k": k}))
    n = 10 ** 4 if quick else 10 ** 5
    out.append(("segmax", f"n={n:.0e}, 10 labels", segmax,
                (rng.normal(size=n),), {"labels": rng.integers(0, 10, size=n)}))
    n = 128 if quick else 512
    out.append(("heat", f"{n}x{n}", heat, (rng.normal(size=(n, n)),), {}))
    n = 10 ** 4 if quick else 10 ** 5
    out.append(("huber", f"n={n:.0e}", huber,
                (rng.normal(size=n) * 2, rng.normal(size=n)), {}))
    shape = (128, 256) if quick else (512, 1024)
    out.append(("reflectpad", f"{shape[0]}x{shape[1]}", reflectpad, (rng.normal(size=shape),), {}))
    n = 2 * 10 ** 4 if quick else 2 * 10 ** 5
    out.append(("drawdown", f"n={n:.0e}", drawdown, (np.cumsum(rng.normal(size=n)),), {}))
    n = 10 ** 4 if quick else 10 ** 5
    xp = np.sort(rng.uniform(0, 10, size=1000))
    xp[0], xp[-1] = 0.0, 10.0
    fp = np.sin(xp) + 0.1 * xp
    out.append(("interp", f"n={n:.0e}, 1000 knots", interp,
                (rng.uniform(0, 10, size=n),), {"xp": xp, "fp": fp}))
    n = 4000 if quick else 16000
    out.append(("fir", f"n={n}, 63 taps", fir, (rng.normal(size=n),),
                {"k": rng.normal(size=63)}))
    out.append(("frames", f"n={n}, 400/160", frames, (rng.normal(size=n),),
                {"window": np.hanning(400)}))
    nf = 60 if quick else 251
    out.append(("ola", f"{nf} frames of 512", ola, (rng.normal(size=(nf, 512)),),
                {"window": np.hanning(512)}))
    n = 200 if quick else 1000
    out.append(("ema", f"n={n}", ema, (rng.normal(size=n),), {}))
    n = 100 if quick else 300
    out.append(("thomas", f"n={n}", thomas, (4 + rng.random(n),),
                {"a": rng.normal(size=n), "c": rng.normal(size=n), "d": rng.normal(size=n)}))
    n = 100 if quick else 300
    out.append(("assembly", f"{n} elements", assembly, (1 + rng.random(n),),
                {"f": rng.normal(size=n + 1)}))
    nf = 16 if quick else 128
    out.append(("spectral", f"{nf} frames of 512", spectral, (rng.normal(size=nf * 512),),
                {"target": rng.uniform(0, 20, size=(nf, 257))}))
    n = 4000 if quick else 16000
    out.append(("fftconv", f"n={n}, 1001 taps", fftconv, (rng.normal(size=n),),
                {"k": rng.normal(size=1001)}))
    n = 2000 if quick else 20000
    out.append(("gmm", f"n={n}, 8 comps", gmm, (rng.normal(size=24) * 0.5,),
                {"x": rng.normal(size=n) * 2}))
    n = 64 if quick else 256
    out.append(("reaction", f"{n}x{n}, 8 steps", reaction, (rng.normal(size=(n, n)),), {}))
    rows, pairs = (1000, 5000) if quick else (10000, 50000)
    out.append(("embed", f"{rows}x64 tables, {pairs} pairs", embed,
                (rng.normal(size=(rows, 64)) * 0.1, rng.normal(size=(rows, 64)) * 0.1),
                {"ids": rng.integers(0, rows, pairs), "ctx": rng.integers(0, rows, pairs)}))
    shape = (128, 512) if quick else (1024, 512)
    out.append(("gelu", f"{shape[0]}x{shape[1]}", gelu, (rng.normal(size=shape),),
                {"g": 1 + 0.1 * rng.normal(size=shape[1])}))
    n = 10 ** 4 if quick else 10 ** 5
    out.append(("i0", f"n={n:.0e}", i0, (rng.uniform(-20, 20, size=n),), {}))
    n = 128 if quick else 512
    out.append(("stencil", f"{n}x{n}", stencil, (rng.normal(size=(n, n)),), {}))
    return out


def close(a, b, rtol, atol_frac=0.0):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    atol = atol_frac * float(np.max(np.abs(b))) if b.size else 0.0
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol))


def _conv(consts, to_array):
    return {k: (v if isinstance(v, int) else to_array(v)) for k, v in consts.items()}


def run_case(case, repeat, jax, jm, torch, tm):
    """Constants (labels, knots, the trimmed count) are closed over, as a user's closure or
    global would be: adjit bakes them into the program, JAX and PyTorch see constants too."""
    name, size, fn, args, consts = case
    mismatches = []
    np_fn = (lambda f, c: lambda *a: f(*a, **c))(fn, consts)
    res = {}
    ref_value = float(np_fn(*args))
    res["eager"] = median_ms(lambda: np_fn(*args), repeat=repeat)

    adj_vals = {}
    for be in ("numpy", "numba"):
        res[be] = res[f"compile_{be}"] = None
        f = adjit.value_and_grad(np_fn, backend=be)
        t0 = time.perf_counter()
        try:
            v, g = f(*args)
        except Exception as e:  # noqa: BLE001 - report and go on with the other programs
            print(f"# {name}: adjit {be} failed: {type(e).__name__}: {str(e)[:300]}")
            continue
        res[f"compile_{be}"] = time.perf_counter() - t0
        adj_vals[be] = (v, g)
        if not close(v, ref_value, 1e-9):
            mismatches.append(f"MISMATCH {name} adjit {be}: value {float(v)!r} vs eager NumPy "
                              f"{ref_value!r}")
        res[be] = median_ms((lambda f: lambda: f(*args))(f), repeat=repeat)

    res["jax"] = None
    if jax is not None:
        jnp = jax.numpy
        jc = _conv(consts, jnp.asarray)
        jf = jax.jit(jax.value_and_grad((lambda f, c: lambda *a: f(*a, **c))(jm[name], jc)))
        jargs = [jnp.asarray(a) for a in args]
        jv, jg = jax.block_until_ready(jf(*jargs))
        jg = np.asarray(jg)
        if not close(jv, ref_value, 1e-9):
            print(f"# note: {name}: JAX value {float(jv)!r} vs eager NumPy {ref_value!r}")
        for be, (v, g) in adj_vals.items():
            if not close(g, jg, 1e-7, 1e-12):
                err = float(np.max(np.abs(np.asarray(g) - jg)) / np.max(np.abs(jg)))
                mismatches.append(f"MISMATCH {name} adjit {be}: gradient differs from JAX's "
                                  f"(largest difference {err:.2e} of the largest entry)")
        res["jax"] = median_ms(lambda: jax.block_until_ready(jf(*jargs)), repeat=repeat)

    res["torch"] = None
    if torch is not None:
        tc = _conv(consts, lambda a: torch.from_numpy(np.ascontiguousarray(a)))
        tfn = (lambda f, c: lambda *a: f(*a, **c))(tm[name], tc)
        targs = [torch.from_numpy(np.ascontiguousarray(a)) for a in args]
        tx = targs[0].clone().requires_grad_(True)
        rest = targs[1:]

        def tstep():
            tx.grad = None
            out = tfn(tx, *rest)
            out.backward()
            return out, tx.grad
        tv, tg = tstep()
        if not close(tv.item(), ref_value, 1e-9):
            print(f"# note: {name}: PyTorch value {tv.item()!r} vs eager NumPy {ref_value!r}")
        res["torch"] = median_ms(tstep, repeat=repeat)
    return res, mismatches


def fmt(t, digits=2):
    return "-" if t is None else f"{t:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    ap.add_argument("--threads", type=int, default=None,
                    help="BLAS/OpenMP/numba/XLA/PyTorch threads (default 1)")
    ap.add_argument("--only", default=None, help="comma-separated program names")
    args = ap.parse_args()
    threads = args.threads or 1
    torch, jax = optional("torch"), optional("jax")
    if jax is not None:
        jax.config.update("jax_enable_x64", True)
        jm = jax_mirrors(jax)
    else:
        jm = None
    tm = None
    if torch is not None:
        torch.set_num_threads(threads)
        tm = torch_mirrors(torch)
    print("\n".join("# " + line for line in machine()))
    print(f"# glibc malloc tuned as by the adjit command (benchmarks/common.py): {tune_malloc()}")
    env_threads = os.environ.get("OMP_NUM_THREADS")
    print(f"# threads: {threads} (OPENBLAS/OMP/MKL/NUMBA_NUM_THREADS={env_threads}"
          f"{', XLA single-threaded' if threads == 1 else ''}); float64; median of "
          f"{args.repeat} calls after warm-up{'; --quick sizes' if args.quick else ''}")
    rng = np.random.default_rng(0)
    todo = cases(args.quick, rng)
    if args.only:
        keep = set(args.only.split(","))
        todo = [c for c in todo if c[0] in keep]
    rows, all_mm = [], []
    t_start = time.perf_counter()
    for case in todo:
        res, mm = run_case(case, args.repeat, jax, jm, torch, tm)
        for line in mm:
            print(line)
        all_mm += mm
        ok = [res[b] for b in ("numpy", "numba") if res[b] is not None]
        best = min(ok) if ok else None
        rows.append([case[0], case[1], fmt(res["numpy"]), fmt(res["numba"]), fmt(res["eager"]),
                     fmt(res["jax"]), fmt(res["torch"]), fmt(res["compile_numpy"], 3),
                     "-" if best is None else f"{best / res['eager']:.2f}",
                     "-" if best is None or res["jax"] is None else f"{best / res['jax']:.2f}"])
        print(f"# {case[0]} done ({time.perf_counter() - t_start:.0f} s so far; adjit numba "
              f"first call {fmt(res['compile_numba'])} s)", flush=True)
    print("\n### value_and_grad step, ms (adjit-best = the faster adjit backend)\n")
    print(table(["program", "size", "adjit numpy ms", "adjit numba ms", "eager NumPy fwd ms",
                 "JAX ms", "torch ms", "adjit compile s (numpy)", "adjit-best / eager",
                 "adjit-best / JAX"], rows))
    print(f"\n# {len(all_mm)} MISMATCH line(s); total {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
