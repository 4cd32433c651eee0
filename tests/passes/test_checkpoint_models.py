"""Checkpointing as users call it, table-driven: models beyond MLPs (a transformer block, an
unrolled RNN, a sliding-window CNN, aux outputs, unused parameters, scalars), every
transformation, bad options, budgets, the plan's note, and the estimate against measurement."""
import math

import numpy as np
import pytest

import adjit
from adjit.frontend import pytree
from adjit.ir.errors import BudgetError, OptionError

R = np.random.default_rng(0)


def rand(*s, dt=np.float32, sc=1.0):
    return (R.normal(size=s) * sc).astype(dt)


def mlp_params(depth, w, dt=np.float32):
    p = {f"W{i}": rand(w, w, dt=dt, sc=1 / np.sqrt(w)) for i in range(depth)}
    p.update({f"b{i}": rand(w, dt=dt, sc=0.1) for i in range(depth)})
    return p


def relu_mlp(p, x):
    h = x
    for i in range(len(p) // 2):
        h = adjit.relu(h @ p[f"W{i}"] + p[f"b{i}"])
    return np.mean(h * h)


def residual(p, x):
    h = x
    for i in range(len(p) // 2):
        h = h + np.tanh(h @ p[f"W{i}"] + p[f"b{i}"])
    return np.mean(h * h)


def _layernorm(h, g, b):
    mu = np.mean(h, axis=-1, keepdims=True)
    var = np.mean((h - mu) ** 2, axis=-1, keepdims=True)
    return (h - mu) / np.sqrt(var + 1e-5) * g + b


def transformer(p, x):
    h = x
    for l in range(2):
        a = _layernorm(h, p[f"g{l}"], p[f"c{l}"])
        q, k, v = a @ p[f"Wq{l}"], a @ p[f"Wk{l}"], a @ p[f"Wv{l}"]
        z = np.einsum("btd,bsd->bts", q, k) / np.sqrt(q.shape[-1])
        e = np.exp(z - np.max(z, axis=-1, keepdims=True))
        h = h + ((e / np.sum(e, axis=-1, keepdims=True)) @ v) @ p[f"Wo{l}"]
        h = h + np.tanh(_layernorm(h, p[f"g{l}"], p[f"c{l}"]) @ p[f"W1{l}"]) @ p[f"W2{l}"]
    return np.mean(h ** 2)


def transformer_params(d, dt=np.float32):
    p = {}
    for l in range(2):
        for n in "qkvo":
            p[f"W{n}{l}"] = rand(d, d, dt=dt, sc=1 / np.sqrt(d))
        p[f"W1{l}"] = rand(d, 2 * d, dt=dt, sc=1 / np.sqrt(d))
        p[f"W2{l}"] = rand(2 * d, d, dt=dt, sc=1 / np.sqrt(2 * d))
        p[f"g{l}"], p[f"c{l}"] = np.ones(d, dt), np.zeros(d, dt)
    return p


def rnn(p, xs):
    h = np.zeros((xs.shape[1], p["Wh"].shape[0]), xs.dtype)
    for t in range(30):
        h = np.tanh(xs[t] @ p["Wx"] + h @ p["Wh"] + p["b"])
    return np.mean(h ** 2)


def cnn(p, x):
    h = x
    for i in range(len(p)):
        k = p[f"k{i}"]
        n = h.shape[1] - k.shape[0] + 1
        win = np.stack([h[:, j:j + n] for j in range(k.shape[0])], axis=-1)
        h = np.tanh(np.einsum("blk,k->bl", win, k))
    return np.mean(h ** 2)


def two_losses(p, x):
    h, mid = x, None
    for i in range(len(p) // 2):
        h = np.tanh(h @ p[f"W{i}"] + p[f"b{i}"])
        if i == 2:
            mid = h
    return np.mean(h ** 2) + 0.5 * np.mean(np.abs(mid))


def with_aux(p, x):
    h = x
    for i in range(len(p) // 2):
        h = np.tanh(h @ p[f"W{i}"] + p[f"b{i}"])
    return np.mean(h ** 2), {"mean": np.mean(h, axis=0)}


def unused_last(p, x):
    h = x
    for i in range(len(p) // 2 - 1):
        h = np.tanh(h @ p[f"W{i}"] + p[f"b{i}"])
    return np.mean(h ** 2)


def scalar_chain(w, x):
    h = x
    for _ in range(12):
        h = np.tanh(h * w + 0.1)
    return h * h


MODELS = {
    "relu_f64": (relu_mlp, lambda: (mlp_params(6, 16, np.float64), rand(8, 16, dt=np.float64)), {}),
    "residual": (residual, lambda: (mlp_params(6, 16), rand(8, 16)), {}),
    "transformer": (transformer, lambda: (transformer_params(8), rand(2, 6, 8)), {}),
    "rnn": (rnn, lambda: ({"Wx": rand(4, 8), "Wh": rand(8, 8, sc=.3), "b": rand(8)},
                          rand(30, 3, 4)), {}),
    "cnn": (cnn, lambda: ({f"k{i}": rand(3, sc=.5) for i in range(3)}, rand(4, 32)), {}),
    "two_losses": (two_losses, lambda: (mlp_params(6, 16), rand(8, 16)), {}),
    "aux": (with_aux, lambda: (mlp_params(6, 16), rand(8, 16)), {"has_aux": True}),
    "unused": (unused_last, lambda: (mlp_params(6, 16), rand(8, 16)), {}),
    "batch1": (relu_mlp, lambda: (mlp_params(6, 16), rand(1, 16)), {}),
    "scalar": (scalar_chain, lambda: (np.float64(0.7), np.float64(0.3)), {}),
}


def assert_identical(a, b):
    la, lb = pytree.flatten(a)[0], pytree.flatten(b)[0]
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True)


@pytest.mark.parametrize("transform", ["grad", "value_and_grad"])
@pytest.mark.parametrize("name", list(MODELS))
def test_models_bit_identical_under_every_checkpoint_option(name, transform):
    fn, make, kw = MODELS[name]
    args = make()
    t = getattr(adjit, transform)
    ref = t(fn, backend="numpy", **kw)(*args)
    for opt in (dict(checkpoint="sqrt"), dict(checkpoint=1), dict(checkpoint=2),
                dict(checkpoint=1000)):
        c = t(fn, backend="numpy", **opt, **kw)
        assert_identical(ref, c(*args))
        plan = c.lower(*args).memory.plan
        k = opt["checkpoint"]
        if k != "sqrt":
            assert plan["segments"] == min(k, plan["candidates"] + 1)


def test_train_step_with_donated_parameters_is_bit_identical():
    def step(p, x):
        g = adjit.grad(residual)(p, x)
        return {k: p[k] - 0.1 * g[k] for k in p}
    p, x = mlp_params(6, 16), rand(8, 16)
    want = adjit.compile(step, backend="numpy")(p, x)
    for opt in (dict(checkpoint="sqrt"), dict(checkpoint=3)):
        q = {k: v.copy() for k, v in p.items()}
        got = adjit.compile(step, backend="numpy", donate_argnums=0, **opt)(q, x)
        assert_identical(want, got)


BAD = [("checkpoint", "foo"), ("checkpoint", 0), ("checkpoint", -3), ("checkpoint", 2.5),
       ("checkpoint", True), ("checkpoint", [2]), ("memory_budget", -1), ("memory_budget", 0),
       ("memory_budget", "1MB"), ("memory_budget", float("nan")),
       ("memory_budget", float("inf")), ("memory_budget", True)]


@pytest.mark.parametrize("option,value", BAD, ids=[f"{o}={v!r}" for o, v in BAD])
@pytest.mark.parametrize("transform", ["grad", "value_and_grad", "compile"])
def test_bad_options_name_the_option_at_once(transform, option, value):
    with pytest.raises(OptionError, match=f"^{option} must be") as e:
        getattr(adjit, transform)(relu_mlp, backend="numpy", **{option: value})
    assert isinstance(e.value, ValueError)
    if option == "checkpoint":
        assert "'sqrt'" in str(e.value)
    else:
        assert "bytes" in str(e.value)


def test_numpy_integer_and_float_options_are_accepted():
    p, x = mlp_params(4, 16), rand(8, 16)
    ref = adjit.grad(relu_mlp, backend="numpy")(p, x)
    assert_identical(ref, adjit.grad(relu_mlp, backend="numpy", checkpoint=np.int64(2))(p, x))
    assert_identical(ref, adjit.grad(relu_mlp, backend="numpy", memory_budget=1e9)(p, x))


# -- memory: estimate against measurement, budgets, the plan's note ------------------------------
def test_sliding_window_cnn_estimate_matches_measurement():
    # a reshape that only adds or drops unit axes is a view in NumPy even of a strided slice:
    # counting it as a copy overestimated the checkpointed peak by a fifth
    p, x = {f"k{i}": rand(5, sc=.5) for i in range(3)}, rand(32, 2048)
    full = adjit.grad(cnn, backend="numpy").lower(p, x).memory.peak_bytes
    for opt in ("sqrt", 2):
        c = adjit.grad(cnn, backend="numpy", checkpoint=opt)
        est = c.lower(p, x).memory.peak_bytes
        assert abs(adjit.measure_peak_memory(c, p, x) - est) <= 0.1 * est
        assert est < full


def test_transformer_checkpointing_lowers_the_measured_peak():
    p, x = transformer_params(32), rand(8, 64, 32)
    ref = adjit.grad(transformer, backend="numpy")
    full = adjit.measure_peak_memory(ref, p, x)
    c = adjit.grad(transformer, backend="numpy", checkpoint="sqrt")
    prog = c.lower(p, x)
    got = adjit.measure_peak_memory(c, p, x)
    assert abs(got - prog.memory.peak_bytes) <= 0.1 * prog.memory.peak_bytes
    assert got < 0.7 * full and 0 < prog.memory.recompute_ratio < 1
    budget = (full + prog.memory.peak_bytes) // 2
    b = adjit.grad(transformer, backend="numpy", memory_budget=budget)
    assert adjit.measure_peak_memory(b, p, x) <= budget
    assert_identical(ref(p, x), b(p, x))


def test_impossible_budget_names_the_function_and_a_budget_that_fits():
    p, x = mlp_params(6, 16), rand(64, 16)
    with pytest.raises(BudgetError, match=r"too small for grad_residual: .* Raise the budget "
                                          r"to at least memory_budget=(\d+)") as e:
        adjit.grad(residual, backend="numpy", memory_budget=1000)(p, x)
    low = int(str(e.value).split("at least memory_budget=")[1].split(",")[0])
    c = adjit.grad(residual, backend="numpy", memory_budget=low)
    assert c.lower(p, x).memory.peak_bytes <= low


def test_plan_note_says_why_checkpointing_did_not_help():
    def tangled(w, x):
        return np.sum(np.tanh(x * w) * x + w)
    m = adjit.grad(tangled, backend="numpy", checkpoint="sqrt").lower(np.ones(5),
                                                                      np.ones(5)).memory
    assert "no candidate cut points" in m.plan["note"] and "no candidate" in str(m)
    # the RNN's input projections bypass every hidden state: one candidate, which saves
    # nothing (known limitation: they are not yet moved into the segments that read them)
    p, xs = MODELS["rnn"][1]()
    m = adjit.grad(rnn, backend="numpy", checkpoint="sqrt").lower(p, xs).memory
    assert "would not lower the static peak" in m.plan["note"]
    assert m.recomputed_flops == 0 and "graph is unchanged" in m.plan["note"]
    m = adjit.grad(rnn, backend="numpy", checkpoint=2).lower(p, xs).memory
    assert "do not lower the static peak" in m.plan["note"] and m.recomputed_flops > 0
    p, x = mlp_params(6, 64), rand(2, 64)
    m = adjit.grad(relu_mlp, backend="numpy", memory_budget=2**30).lower(p, x).memory
    assert m.recomputed_flops == 0 and "fits the budget" in m.plan["note"]
    p, x = mlp_params(6, 16), rand(512, 16)
    m = adjit.grad(relu_mlp, backend="numpy", checkpoint="sqrt").lower(p, x).memory
    assert m.plan["segments"] > 1 and m.plan["note"] is None


def test_source_names_segment_and_checkpoint_of_each_recomputation():
    p, x = transformer_params(8), rand(2, 6, 8)
    prog = adjit.grad(transformer, backend="numpy", checkpoint=3).lower(p, x)
    heads = [ln.strip() for ln in prog.source.splitlines()
             if ln.strip().startswith("# recompute segment")]
    assert heads and all(" of 3 from " in h for h in heads)
    assert all("checkpoint v" in h or "the inputs" in h for h in heads)
    kept = [w for w in prog.memory.checkpoints.values() if w.startswith("checkpoint ")]
    assert len(kept) == 2 and math.isfinite(prog.memory.recompute_ratio)
