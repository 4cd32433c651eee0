"""First call of value_and_grad on an empty kernel cache: adjit's numba and numpy backends
against jax.jit, same run.

Usage: python benchmarks/cold_compile.py [--models vae,lstm]
vae: a VAE 784-400-20 (tanh, exp, logaddexp), batch 256; lstm: 30 steps of an LSTM cell
(sigmoids as 1 / (1 + exp(-z)), tanh), batch 64, hidden 128; float64. Each adjit backend runs
in a fresh process with a fresh ADJIT_CACHE_DIR (numba compiles every kernel: the cost a new
model pays once per machine), CPU seconds of that process for the first call (the library's
import, trace, passes, codegen, kernel compiles, one run) and for the second call; JAX: jit(value_and_grad) first and
second call, in a fresh process too. One thread for every library.
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402

from common import table  # noqa: E402

CHILD = r'''
import os, resource, sys, time
sys.path.insert(0, {bench!r})
import threads  # noqa: F401
import numpy as np

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

def vae(p, x, eps, xp):
    h = xp.tanh(x @ p["We"] + p["be"])
    mu, logvar = h @ p["Wm"], h @ p["Wv"]
    z = mu + xp.exp(0.5 * logvar) * eps
    logits = xp.tanh(z @ p["Wd1"]) @ p["Wd2"]
    rec = xp.sum(x * logits - xp.logaddexp(0, logits), 1)
    kl = -0.5 * xp.sum(1 + logvar - mu ** 2 - xp.exp(logvar), 1)
    return -xp.mean(rec - kl)

def lstm(p, xs, xp):
    h = xp.zeros((64, 128))
    c = xp.zeros((64, 128))
    tot = 0.0
    for t in range(30):
        z = xs[t] @ p["Wx"] + h @ p["Wh"] + p["b"]
        i, f, o, g = xp.split(z, 4, axis=1)
        i, f, o = (1 / (1 + xp.exp(-v)) for v in (i, f, o))
        c = f * c + i * xp.tanh(g)
        h = o * xp.tanh(c)
        tot = tot + xp.sum(h * h)
    return tot / 30

rng = np.random.default_rng(0)
model, who = sys.argv[1], sys.argv[2]
if model == "vae":
    D, H, Z = 784, 400, 20
    p = {{"We": rng.normal(size=(D, H)) / 28, "be": np.zeros(H),
         "Wm": rng.normal(size=(H, Z)) / 20, "Wv": rng.normal(size=(H, Z)) / 20,
         "Wd1": rng.normal(size=(Z, H)) / 5, "Wd2": rng.normal(size=(H, D)) / 20}}
    args = (p, (rng.random((256, D)) > 0.5).astype(float), rng.normal(size=(256, Z)))
    fn = vae
else:
    p = {{"Wx": rng.normal(size=(64, 512)) / 8, "Wh": rng.normal(size=(128, 512)) / 8,
         "b": rng.normal(size=512) * 0.1}}
    args = (p, rng.normal(size=(30, 64, 64)))
    fn = lstm
c0 = cpu()
if who == "jax":
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    f = jax.jit(jax.value_and_grad(lambda *a: fn(*a, jnp)))
    run = lambda: jax.block_until_ready(f(*args))
else:
    import adjit
    f = adjit.value_and_grad(lambda *a: fn(*a, np), backend=who)
    run = lambda: f(*args)
run()
c1 = cpu()
run()
print(c1 - c0, cpu() - c1)
'''


def child(model, who):
    bench = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, ADJIT_CACHE_DIR=cache)
        out = subprocess.run([sys.executable, "-c", CHILD.format(bench=bench), model, who],
                             env=env, capture_output=True, text=True)
    if out.returncode:
        return None
    first, second = (float(v) for v in out.stdout.split()[-2:])
    return first, second


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="vae,lstm")
    args = ap.parse_args()
    rows = []
    for model in args.models.split(","):
        got = {who: child(model, who) for who in ("numba", "numpy", "jax")}
        cell = {who: (f"{v[0]:.2f} / {1e3 * v[1]:.0f}" if v else "-") for who, v in got.items()}
        ratio = (f"{got['numba'][0] / got['jax'][0]:.2f}"
                 if got["numba"] and got["jax"] else "-")
        rows.append([model, cell["numba"], cell["numpy"], cell["jax"], ratio])
    print("\n### first call CPU s / second call CPU ms, fresh process and kernel cache\n")
    print(table(["model", "adjit numba", "adjit numpy", "JAX jit", "numba first / JAX first"],
                rows))


if __name__ == "__main__":
    main()
