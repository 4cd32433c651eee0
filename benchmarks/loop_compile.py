"""Unrolled time-stepping loops written with preallocate-and-fill: compile time and step time
of value_and_grad, against JAX (jit, `.at[].set`) and PyTorch eager (autograd through index
assignment), measured in the same run.

Usage: python benchmarks/loop_compile.py [--steps 100,500] [--repeat 20]

Two programs, each written the way users write them in NumPy:
  ode: a damped oscillator integrated with explicit Euler into `x = np.zeros((T, 2))`,
       loss = sum of squared positions; gradient w.r.t. (x0, v0, k).
  rnn: a tanh RNN (batch 32, hidden 64) whose states fill `hs = np.zeros((T, 32, 64))`,
       loss = mean of squares; gradient w.r.t. W.
  rk4: a Lotka-Volterra system integrated with RK4, its state packed with np.array and
       unpacked by indexing (`np.array([a*y[0] - b*y[0]*y[1], ...])`); gradient w.r.t. the
       four rates.
Prints, per program and T: compile (trace + passes + codegen + first call) and the median
time of one value_and_grad call, with ratios against JAX and PyTorch.
"""
import argparse
import statistics
import time

import numpy as np

import adjit

B, H = 32, 64


def ode(p, T):
    x = np.zeros((T, 2))
    x[0] = p[:2]
    for i in range(T - 1):
        pos, vel = x[i, 0], x[i, 1]
        x[i + 1, 0] = pos + 0.01 * vel
        x[i + 1, 1] = vel - 0.01 * (p[2] * pos + 0.1 * vel)
    return np.sum(x[:, 0] ** 2)


def rnn(W, xs):
    T = xs.shape[0]
    h = np.zeros((B, H))
    hs = np.zeros((T, B, H))
    for t in range(T):
        h = np.tanh(h @ W + xs[t])
        hs[t] = h
    return np.mean(hs ** 2)


def _lv(y, p, xp):
    return xp.stack([p[0] * y[0] - p[1] * y[0] * y[1], -p[2] * y[1] + p[3] * y[0] * y[1]])


def rk4(p, T, xp=np):
    y, h = xp.array([1.0, 0.5]) if xp is np else xp.asarray([1.0, 0.5]), 0.01
    f = (lambda y: np.array([p[0] * y[0] - p[1] * y[0] * y[1],
                             -p[2] * y[1] + p[3] * y[0] * y[1]])) if xp is np else \
        (lambda y: _lv(y, p, xp))
    for _ in range(T):
        k1 = f(y)
        k2 = f(y + h / 2 * k1)
        k3 = f(y + h / 2 * k2)
        k4 = f(y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return y[0] + 2 * y[1]


def _time(fn, repeat):
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _adjit(f, args, backend, repeat):
    g = adjit.value_and_grad(f, backend=backend)
    t0 = time.perf_counter()
    g(*args)
    compile_s = time.perf_counter() - t0
    return compile_s, _time(lambda: g(*args), repeat)


def _jax(prog, T, args, repeat):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    if prog == "ode":
        def f(p):
            x = jnp.zeros((T, 2)).at[0].set(p[:2])
            for i in range(T - 1):
                pos, vel = x[i, 0], x[i, 1]
                x = x.at[i + 1, 0].set(pos + 0.01 * vel)
                x = x.at[i + 1, 1].set(vel - 0.01 * (p[2] * pos + 0.1 * vel))
            return jnp.sum(x[:, 0] ** 2)
    elif prog == "rk4":
        def f(p):
            return rk4(p, T, jnp)
    else:
        def f(W, xs):
            h = jnp.zeros((B, H))
            hs = jnp.zeros((T, B, H))
            for t in range(T):
                h = jnp.tanh(h @ W + xs[t])
                hs = hs.at[t].set(h)
            return jnp.mean(hs ** 2)
    g = jax.jit(jax.value_and_grad(f))
    jargs = [jnp.asarray(a) for a in args]
    t0 = time.perf_counter()
    jax.block_until_ready(g(*jargs))
    compile_s = time.perf_counter() - t0
    return compile_s, _time(lambda: jax.block_until_ready(g(*jargs)), repeat)


def _torch(prog, T, args, repeat):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    if prog == "ode":
        def run():
            p = torch.tensor(args[0], requires_grad=True)
            x = torch.zeros((T, 2), dtype=torch.float64)
            x[0] = p[:2]
            for i in range(T - 1):
                pos, vel = x[i, 0].clone(), x[i, 1].clone()
                x[i + 1, 0] = pos + 0.01 * vel
                x[i + 1, 1] = vel - 0.01 * (p[2] * pos + 0.1 * vel)
            loss = torch.sum(x[:, 0] ** 2)
            loss.backward()
            return loss, p.grad
    elif prog == "rk4":
        def run():
            p = torch.tensor(args[0], requires_grad=True)
            loss = rk4(p, T, torch)
            loss.backward()
            return loss, p.grad
    else:
        xs = torch.tensor(args[1])

        def run():
            W = torch.tensor(args[0], requires_grad=True)
            h = torch.zeros((B, H), dtype=torch.float64)
            hs = torch.zeros((T, B, H), dtype=torch.float64)
            for t in range(T):
                h = torch.tanh(h @ W + xs[t])
                hs[t] = h
            loss = torch.mean(hs ** 2)
            loss.backward()
            return loss, W.grad
    return 0.0, _time(run, repeat)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="100,500")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--backend", default="numpy")
    ap.add_argument("--jax-rk4", action="store_true",
                    help="also compile rk4 with JAX (at T = 100 it ran over 5 minutes on the "
                         "project's machine, 2026-11-30, and was stopped)")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"adjit backend {a.backend}; times in ms; compile = trace + passes + codegen + first "
          "call; step = one value_and_grad call (median)")
    print(f"{'program':<10}{'T':>5}{'adjit compile':>15}{'JAX compile':>13}{'adjit step':>12}"
          f"{'JAX step':>10}{'torch step':>12}{'vs JAX':>8}{'vs torch':>10}")
    for T in [int(s) for s in a.steps.split(",")]:
        cases = {"ode": (lambda p, T=T: ode(p, T), (np.array([1.0, 0.0, 2.0]),)),
                 "rnn": (rnn, (rng.normal(size=(H, H)) * 0.1, rng.normal(size=(T, B, H)))),
                 "rk4": (lambda p, T=T: rk4(p, T), (np.array([1.1, 0.4, 0.4, 0.1]),))}
        for prog, (f, args) in cases.items():
            ac, at = _adjit(f, args, a.backend, a.repeat)
            j = _jax(prog, T, args, a.repeat) if prog != "rk4" or a.jax_rk4 else None
            t = _torch(prog, T, args, a.repeat)
            jc, jt = j if j else (float("nan"), float("nan"))
            tt = t[1] if t else float("nan")
            print(f"{prog:<10}{T:>5}{1e3 * ac:>15.0f}{1e3 * jc:>13.0f}{1e3 * at:>12.2f}"
                  f"{1e3 * jt:>10.2f}{1e3 * tt:>12.2f}{at / jt:>8.2f}{at / tt:>10.2f}")


if __name__ == "__main__":
    main()
