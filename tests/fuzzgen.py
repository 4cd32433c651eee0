"""Random programs for the differential fuzzer (tests/test_fuzz.py, benchmarks/fuzz.py).

`programs()` is a hypothesis strategy of small NumPy functions over arrays of random
broadcastable shapes and one float dtype: elementwise ops (kept inside their domains),
broadcasting, casts, comparisons and where, reductions, softmax-like composites, transposes and
matrix products. `check(program)` runs each one on the NumPy backend unfused (the reference), on
the NumPy backend fused, and on the numba backend with every group a kernel, and compares values
and gradients (float64 to 1e-12, float32 to 1e-5 relative, against the largest reference value)
and, in float64, the gradient with central differences.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import assume, note
from hypothesis import strategies as st

import adjit

RTOL = {"float64": 1e-12, "float32": 1e-5}

# name -> source template; every op keeps values finite and moderate for any finite input
UNARY = {
    "neg": "-{0}", "exp": "np.exp(np.tanh({0}))", "log": "np.log({0} * {0} + 0.5)",
    "sqrt": "np.sqrt({0} * {0} + 0.25)", "tanh": "np.tanh({0})", "sin": "np.sin({0})",
    "cos": "np.cos({0})", "abs": "np.abs({0})", "sign": "np.sign({0}) * {0}",
    "expm1": "np.expm1(np.tanh({0}))", "log1p": "np.log1p({0} * {0})",
    "relu": "adjit.relu({0})", "sigmoid": "adjit.sigmoid({0})", "softplus": "adjit.softplus({0})",
    "square": "{0} ** 2", "affine": "{0} * 0.5 + 1.25", "cast": "{0}.astype(OTHER).astype(DT)",
    "scalar_div": "2.0 / ({0} * {0} + 1.0)",
}
BINARY = {
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / ({1} * {1} + 0.5)",
    "maximum": "np.maximum({0}, {1})", "minimum": "np.minimum({0}, {1})",
    "pow": "({0} * {0} + 0.5) ** np.tanh({1})", "where_gt": "np.where({0} > {1}, {0}, {1} * 2.0)",
    "where_le": "adjit.where({0} <= {1}, {1}, 0.0)",
}
REDUCE = {
    "sum": "np.sum({0}, axis={axis}, keepdims={keep})", "max": "np.max({0}, axis={axis}, "
    "keepdims={keep})", "mean": "np.mean({0}, axis={axis}, keepdims={keep})",
    "logsumexp": "adjit.logsumexp({0}, axis={axis}, keepdims={keep})",
    "softmax": "adjit.softmax({0}, axis={axis})",
    "log_softmax": "adjit.log_softmax({0}, axis={axis})",
}
OTHER = {"float64": "np.float32", "float32": "np.float64"}


@dataclass
class Program:
    source: str                 # def f(x0, x1, ...): ... return v<k>
    shapes: list
    dtype: str
    seed: int
    parallel: bool

    def function(self):
        ns = {"np": np, "adjit": adjit}
        exec(compile(self.source, "<fuzz program>", "exec"), ns)  # noqa: S102 - our own text
        return ns["f"]

    def inputs(self):
        rng = np.random.default_rng(self.seed)
        return [rng.normal(size=s).astype(self.dtype) for s in self.shapes]


def _shape_of(expr, env):
    return np.shape(eval(expr, {"np": np, "adjit": adjit}, env))  # noqa: S307 - our own text


@st.composite
def programs(draw, max_steps=8):
    dtype = draw(st.sampled_from(["float64", "float32"]))
    rank = draw(st.integers(0, 3))
    base = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 5, 8]), min_size=rank, max_size=rank)))
    if rank >= 2 and draw(st.booleans()):
        # square matrices: a value and its transpose then meet in one elementwise group
        base = base[:-1] + base[-2:-1]
    n_in = draw(st.integers(1, 3))
    shapes = []
    for _ in range(n_in):
        drop = draw(st.integers(0, rank))
        s = [d if not draw(st.booleans()) or d == 1 else (1 if draw(st.booleans()) else d)
             for d in base[drop:]]
        shapes.append(tuple(s))
    names = [f"x{i}" for i in range(n_in)]
    env = {n: np.zeros(s, dtype) for n, s in zip(names, shapes)}
    lines = []
    for k in range(draw(st.integers(1, max_steps))):
        kind = draw(st.sampled_from(["unary", "unary", "binary", "binary", "binary", "reduce",
                                     "layout"]))
        a = draw(st.sampled_from(names))
        sa = env[a].shape
        if kind == "unary":
            expr = UNARY[draw(st.sampled_from(sorted(UNARY)))].format(a).replace(
                "OTHER", OTHER[dtype]).replace("DT", f"np.{dtype}")
        elif kind == "binary":
            ok = [b for b in names if _broadcasts(sa, env[b].shape)]
            b = draw(st.sampled_from(ok))
            expr = BINARY[draw(st.sampled_from(sorted(BINARY)))].format(a, b)
        elif kind == "reduce":
            if not sa:
                continue
            axis = draw(st.integers(-len(sa), len(sa) - 1))
            op = draw(st.sampled_from(sorted(REDUCE)))
            expr = REDUCE[op].format(a, axis=axis, keep=draw(st.booleans()))
        else:
            if len(sa) >= 2 and draw(st.booleans()):
                expr = f"np.swapaxes({a}, -1, -2)"
                mats = [b for b in names if len(env[b].shape) >= 2 and env[b].shape[-2] == sa[-1]
                        and _batch_ok(sa, env[b].shape)]
                if mats and draw(st.booleans()):
                    expr = f"{a} @ {draw(st.sampled_from(mats))}"
            else:
                expr = f"{a}.reshape(-1)" if sa else f"{a} * np.ones(3, np.{dtype})"
        name = f"v{k}"
        lines.append(f"    {name} = {expr}")
        env[name] = eval(expr, {"np": np, "adjit": adjit}, env)  # noqa: S307 - our own text
        names.append(name)
    out = names[-1]
    if out.startswith("x"):
        lines.append(f"    v_out = {out} * 1.5")
        out = "v_out"
    source = f"def f({', '.join(f'x{i}' for i in range(n_in))}):\n" + "\n".join(lines) + \
        f"\n    return {out}\n"
    return Program(source, shapes, dtype, draw(st.integers(0, 2**16)), draw(st.booleans()))


def _broadcasts(a, b):
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def _batch_ok(a, b):
    return _broadcasts(a[:-2], b[:-2])


def close(got, ref, rtol, what):
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} vs {ref.shape}"
    assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype} vs {ref.dtype}"
    scale = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * scale, err_msg=what)


def check(program: Program):
    """Values and gradients agree across backends, and with central differences (float64)."""
    note(program.source)
    note(f"shapes {program.shapes}, {program.dtype}, seed {program.seed}")
    fn = program.function()
    xs = program.inputs()
    with np.errstate(all="ignore"):
        out = np.asarray(fn(*xs))
    assume(np.all(np.isfinite(out)))
    c = np.random.default_rng(program.seed + 1).normal(size=out.shape).astype(program.dtype)

    def loss(*a):
        return np.sum(fn(*a) * c)
    nums = tuple(range(len(xs)))
    rtol = RTOL[program.dtype]
    numba_opts = dict(min_kernel_size=0, parallel_size=64 if program.parallel else 1 << 40)
    runs = {"numpy fused": dict(backend="numpy", fuse=True),
            "numba fused": dict(backend="numba", fuse=True, **numba_opts)}
    ref = adjit.value_and_grad(loss, argnums=nums, backend="numpy", fuse=False)(*xs)
    ref_out = adjit.compile(fn, backend="numpy", fuse=False)(*xs)
    close(ref_out, out, rtol, "numpy backend vs plain NumPy")
    for what, opts in runs.items():
        got = adjit.value_and_grad(loss, argnums=nums, **opts)(*xs)
        close(got[0], ref[0], rtol, f"{what}: value")
        for i, (o, r) in enumerate(zip(got[1], ref[1])):
            close(o, r, rtol, f"{what}: gradient of x{i}")
        close(adjit.compile(fn, **opts)(*xs), ref_out, rtol, f"{what}: output")
    # a round trip through float32 makes a float64 function a staircase: no derivative to check
    if program.dtype == "float64" and "astype(np.float32)" not in program.source:
        _check_differences(loss, xs, ref[1], program.seed)


def _check_differences(loss, xs, grads, seed):
    """<grad, t> against central differences along a random t, where the function is smooth
    (two step sizes must agree, or the direction crosses a kink and the check is skipped)."""
    rng = np.random.default_rng(seed + 2)
    ts = [rng.normal(size=np.shape(x)) for x in xs]
    lhs = sum(float(np.sum(g * t)) for g, t in zip(grads, ts))

    def fd(eps):
        hi = float(loss(*[x + eps * t for x, t in zip(xs, ts)]))
        lo = float(loss(*[x - eps * t for x, t in zip(xs, ts)]))
        return (hi - lo) / (2 * eps)
    a, b = fd(1e-5), fd(1e-6)
    scale = max(abs(a), abs(b), 1e-3)
    assume(abs(a - b) <= 1e-6 * scale)
    assert abs(lhs - a) <= 1e-5 * max(abs(lhs), abs(a), 1.0), (lhs, a)
