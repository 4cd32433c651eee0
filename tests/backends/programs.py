"""Programs the CuPy backend tests compile: the fuzzer's random programs, an MLP loss, an Adam
training step written as a user writes it (plain NumPy); shared by the host and GPU tests.
"""
import numpy as np

import adjit


def fuzz_programs(count):
    """The differential fuzzer's random programs (tests/fuzzgen.py), drawn reproducibly:
    -> [(name, objective(*xs) -> (loss, output), inputs)] with the loss a weighted sum; none
    where hypothesis is missing (the GPU machine has no test extras)."""
    try:
        from hypothesis import HealthCheck, given, settings
        from fuzzgen import programs
    except ImportError:
        return []
    drawn = []

    @settings(max_examples=count, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(programs())
    def collect(program):
        drawn.append(program)
    collect()
    out = []
    for k, program in enumerate(drawn):
        fn, xs = program.function(), program.inputs()
        with np.errstate(all="ignore"):
            value = np.asarray(fn(*xs))
        if not np.all(np.isfinite(value)):
            continue
        c = np.random.default_rng(program.seed + 1).normal(size=value.shape)

        def objective(*a, fn=fn, c=c.astype(program.dtype)):
            v = fn(*a)
            return np.sum(v * c), v
        objective.__name__ = f"fuzz{k}"
        out.append((f"fuzz{k}-{program.dtype}", objective, xs))
    return out


# -- an MLP and an Adam step ---------------------------------------------------------------------
def mlp_params(sizes, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    p = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]), 1):
        p[f"W{i}"] = (rng.normal(size=(b, a)) / np.sqrt(a)).astype(dtype)
        p[f"b{i}"] = (rng.normal(size=b) * 0.1).astype(dtype)
    return p


def mlp_loss(params, X, y):
    n = len(params) // 2
    h = X
    for i in range(1, n):
        h = adjit.relu(h @ params[f"W{i}"].T + params[f"b{i}"])
    z = h @ params[f"W{n}"].T + params[f"b{n}"]
    return -np.mean(adjit.log_softmax(z, axis=1)[np.arange(len(y)), y])


def mlp_loss_one_hot(params, X, y):
    """The same loss written as adjit.nn.softmax_cross_entropy does: one-hot targets."""
    n = len(params) // 2
    h = X
    for i in range(1, n):
        h = adjit.relu(h @ params[f"W{i}"].T + params[f"b{i}"])
    z = h @ params[f"W{n}"].T + params[f"b{n}"]
    target = adjit.one_hot(y, z.shape[1], z.dtype)
    return -np.mean(np.sum(adjit.log_softmax(z, axis=1) * target, axis=1))


def adam_init(params):
    zeros = {k: np.zeros_like(v) for k, v in params.items()}
    return {"t": np.zeros((), np.float32), "m": zeros, "v": dict(zeros)}


def adam_step(params, state, X, y, lr):
    """One training step: loss, gradient and Adam update (Kingma and Ba 2015, Algorithm 1)."""
    loss, grads = adjit.value_and_grad(mlp_loss)(params, X, y)
    b1, b2, eps = 0.9, 0.999, 1e-8
    t = state["t"] + 1
    new_p, new_m, new_v = {}, {}, {}
    for k in params:
        g = grads[k]
        m = b1 * state["m"][k] + (1 - b1) * g
        v = b2 * state["v"][k] + (1 - b2) * g * g
        m_hat = m / (1 - b1 ** t)
        v_hat = v / (1 - b2 ** t)
        new_p[k] = params[k] - lr * m_hat / (np.sqrt(v_hat) + eps)
        new_m[k], new_v[k] = m, v
    return loss, new_p, {"t": t, "m": new_m, "v": new_v}


def sgd_step(params, X, y, lr):
    loss, grads = adjit.value_and_grad(mlp_loss)(params, X, y)
    return loss, {k: params[k] - lr * grads[k] for k in params}


def mnist_like(n, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 784)).astype(dtype), rng.integers(0, 10, size=n)
