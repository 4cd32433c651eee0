"""Tests for adjit.nn.optim: updates against hand formulas (seed 004) and against PyTorch."""

import importlib.util

import numpy as np
import pytest

import adjit
from adjit.nn import MLP, SGD, Adam, AdamW, Trainer, make_optimizer, softmax_cross_entropy

HAS_TORCH = importlib.util.find_spec("torch") is not None


def tree(seed, shapes=(("w", (3, 2)), ("b", (2,)))):
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s) for k, s in shapes}


def run(opt, steps=3):
    params, state = tree(0), None
    state = opt.init(params)
    for t in range(steps):
        params, state = opt.update(params, tree(10 + t), state)
    return params, state


def test_sgd_matches_hand_formula():
    params, state = run(SGD(0.1, backend="numpy"))
    expected = tree(0)
    for t in range(3):
        for k in expected:
            expected[k] = expected[k] - 0.1 * tree(10 + t)[k]
    for k in expected:
        np.testing.assert_allclose(params[k], expected[k], rtol=1e-14)
    assert float(state["step"]) == 3


@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_matches_hand_formula(nesterov):
    opt = SGD(0.05, momentum=0.9, nesterov=nesterov, weight_decay=0.01, backend="numpy")
    params, state = run(opt)
    p, m = tree(0), {k: 0.0 for k in tree(0)}
    for t in range(3):
        for k in p:
            g = tree(10 + t)[k] + 0.01 * p[k]
            m[k] = 0.9 * m[k] + g                        # m_t = mu m_{t-1} + g_t
            p[k] = p[k] - 0.05 * (g + 0.9 * m[k] if nesterov else m[k])
    for k in p:
        np.testing.assert_allclose(params[k], p[k], rtol=1e-13)
        np.testing.assert_allclose(state["momentum"][k], m[k], rtol=1e-13)


@pytest.mark.parametrize("cls, wd", [(Adam, 0.0), (Adam, 0.1), (AdamW, 0.1)])
def test_adam_matches_the_seed_formulas(cls, wd):
    params, state = run(cls(0.01, weight_decay=wd, backend="numpy"))
    p, m, v = tree(0), {k: 0.0 for k in tree(0)}, {k: 0.0 for k in tree(0)}
    b1, b2, eps, lr = 0.9, 0.999, 1e-8, 0.01
    for t in range(1, 4):
        for k in p:
            g = tree(9 + t)[k]
            if cls is AdamW:
                p[k] = p[k] * (1 - lr * wd)
            else:
                g = g + wd * p[k]
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * g ** 2
            m_hat, v_hat = m[k] / (1 - b1 ** t), v[k] / (1 - b2 ** t)
            p[k] = p[k] - lr * m_hat / (np.sqrt(v_hat) + eps)
    for k in p:
        np.testing.assert_allclose(params[k], p[k], rtol=1e-13)
        np.testing.assert_allclose(state["m"][k], m[k], rtol=1e-13)
        np.testing.assert_allclose(state["v"][k], v[k], rtol=1e-13)


def test_compiled_update_equals_eager_apply_and_keeps_dtype():
    opt = Adam(1e-3, backend="numpy")
    params = {k: v.astype(np.float32) for k, v in tree(0).items()}
    grads = {k: v.astype(np.float32) for k, v in tree(1).items()}
    state = opt.init(params)
    p1, s1 = opt.update(params, grads, state)
    p2, s2 = opt.apply(params, grads, state, opt.hyper())
    for k in params:
        assert p1[k].dtype == np.float32 and s1["m"][k].dtype == np.float32
        np.testing.assert_allclose(p1[k], p2[k], rtol=1e-6)


def test_learning_rate_and_step_do_not_recompile():
    opt = Adam(1e-3, backend="numpy")
    params, state = tree(0), opt.init(tree(0))
    for lr in (1e-3, 5e-4, 1e-4):
        params, state = opt.update(params, tree(1), state, lr=lr)
    assert len(opt._compiled._cache) == 1


def test_update_is_one_program_with_the_parameter_names():
    opt = Adam(1e-3, backend="numpy")
    params = tree(0)
    prog = opt.lower(params, tree(1), opt.init(params))
    assert "def adam_update(params_w, params_b, grads_w, grads_b, state_step" in prog.source
    assert "optim.py" in prog.source                     # comments name the update's lines


def test_structure_mismatch_is_a_clear_error():
    opt = SGD(0.1, backend="numpy")
    params = tree(0)
    with pytest.raises(ValueError, match="structure of params"):
        opt.update(params, {"w": params["w"]}, opt.init(params))
    with pytest.raises(ValueError, match="has shape"):
        opt.update(params, {"w": params["w"], "b": np.zeros(3)}, opt.init(params))


@pytest.mark.parametrize("make, match", [
    (lambda: SGD(0.0), "learning rate"), (lambda: SGD(0.1, momentum=1.0), "momentum"),
    (lambda: SGD(0.1, nesterov=True), "Nesterov"), (lambda: Adam(b2=1.0), "b2"),
    (lambda: make_optimizer("rmsprop"), "unknown optimizer"),
])
def test_bad_hyperparameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()


# -- against PyTorch, weight for weight, float64 ----------------------------------------------
def torch_step(sizes, params, batches, make_opt):
    import torch
    layers = []
    for i in range(1, len(sizes)):
        lin = torch.nn.Linear(sizes[i - 1], sizes[i]).double()
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(params[f"W{i}"]))
            lin.bias.copy_(torch.from_numpy(params[f"b{i}"]))
        layers += [lin, torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    opt = make_opt(model.parameters())
    for X, y in batches:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.from_numpy(X)),
                                          torch.from_numpy(y)).backward()
        opt.step()
    out = {}
    for i, lin in enumerate(model[::2], start=1):
        out[f"W{i}"] = lin.weight.detach().numpy()
        out[f"b{i}"] = lin.bias.detach().numpy()
    return out


def max_rel_error(a, b):
    return max(float(np.max(np.abs(a[k] - b[k]) / np.maximum(np.abs(b[k]), 1e-30)))
               for k in b)


CASES = {
    "momentum": (lambda: SGD(0.05, momentum=0.9, backend="numpy"),
                 lambda ps: __import__("torch").optim.SGD(ps, lr=0.05, momentum=0.9)),
    "adam": (lambda: Adam(1e-2, backend="numpy"),
             lambda ps: __import__("torch").optim.Adam(ps, lr=1e-2)),
    "adamw": (lambda: AdamW(1e-2, weight_decay=0.1, backend="numpy"),
              lambda ps: __import__("torch").optim.AdamW(ps, lr=1e-2, weight_decay=0.1)),
}


@pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed")
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("fused_step", [True, False], ids=["train_step", "grad+update"])
def test_training_steps_equal_pytorch_in_float64(name, fused_step):
    sizes = [6, 8, 7, 4]
    net = MLP(sizes, dtype=np.float64)
    params = net.init(0)
    params = {k: v + 0.01 for k, v in params.items()}       # nonzero biases
    rng = np.random.default_rng(1)
    batches = [(rng.standard_normal((5, 6)), rng.integers(0, 4, 5)) for _ in range(3)]
    make_adjit, make_torch = CASES[name]
    opt = make_adjit()
    state = opt.init(params)
    ours = params
    if fused_step:
        trainer = Trainer(net, opt, backend="numpy")
        for X, y in batches:
            _, _, ours, state = trainer.step(ours, state, X, y)
    else:
        def loss(p, X, y):
            return softmax_cross_entropy(net.apply(p, X), y)
        vg = adjit.value_and_grad(loss, backend="numpy")
        for X, y in batches:
            _, grads = vg(ours, X, y)
            ours, state = opt.update(ours, grads, state)
    theirs = torch_step(sizes, params, batches, make_torch)
    assert max_rel_error(ours, theirs) < 1e-10
    assert max_rel_error(ours, params) > 1e-4                # the steps did move the weights


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam", "adamw"])
def test_with_fusion_each_parameter_update_is_one_kernel(name):
    params = MLP([12, 8, 3]).init(0)
    opt = make_optimizer(name, backend="numpy")
    g = opt.lower(params, params, opt.init(params)).graph
    kernels = {g[n]["attrs"]["kernel"] for n in g.nodes()
               if g[n]["op"] == "fused" and g[n]["shape"] != ()}
    if not kernels:
        pytest.skip("this build does not fuse elementwise operations yet")
    assert len(kernels) == len(params)


@pytest.mark.parametrize("lr", [float("inf"), float("nan"), -1.0, 0.0])
def test_learning_rate_must_be_positive_and_finite(lr):
    with pytest.raises(ValueError, match="positive and finite"):
        SGD(lr, backend="numpy")


def test_per_step_learning_rate_is_checked():
    opt = SGD(0.1, backend="numpy")
    p = {"w": np.ones(2)}
    opt.update(p, {"w": np.ones(2)}, opt.init(p), lr=0.0)
    for lr in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="for this step must be >= 0 and finite"):
            opt.update(p, {"w": np.ones(2)}, opt.init(p), lr=lr)


def test_integer_parameters_are_refused():
    import pytest
    from adjit.nn import SGD
    opt = SGD(0.1, backend="numpy")
    p = {"w": np.array([1, 2])}
    with pytest.raises(ValueError, match="floating point"):
        opt.update(p, {"w": np.array([1.0, -1.0])}, opt.init(p))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("eps", [5e-7, 1e-8])
def test_float16_adam_steps_where_eps_underflows(backend, eps):
    """eps * sqrt(1 - b2^t) is 0 in float16 (and eps = 1e-8 itself): a zero gradient gave
    0 / 0 (sweep 24; PyTorch's too). float16 parameters take their step in float32."""
    opt = Adam(1e-3, eps=eps, backend=backend)
    p = {"w": np.array([1.0, 1.0], np.float16)}
    g = {"w": np.array([0.0, 0.5], np.float16)}
    s = opt.init(p)
    for _ in range(3):
        p, s = opt.update(p, g, s)
    assert p["w"].dtype == np.float16
    np.testing.assert_allclose(p["w"], [1.0, 0.997], atol=2e-3)
    assert p["w"][0] == 1.0


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("cls", [Adam, AdamW])
def test_float16_adam_keeps_its_moments_in_float32(cls, backend):
    # sweep 29: v = b2 v + (1 - b2) g^2 in float16 underflowed to 0 for |g| < 8e-3, and the
    # step was ~1e6 g (weights moved by -100 and -1000 at lr 0.01)
    opt = cls(0.01, backend=backend, weight_decay=0.0)
    p = {"w": np.ones(3, np.float16)}
    g = {"w": np.array([1e-4, 1e-3, 1e-1], np.float16)}
    s = opt.init(p)
    assert s["m"]["w"].dtype == np.float32 and s["v"]["w"].dtype == np.float32
    new, s = opt.update(p, g, s)
    assert new["w"].dtype == np.float16
    np.testing.assert_allclose(new["w"].astype(np.float64) - 1.0, [-0.01] * 3, rtol=0.05)
    # a state made before (float16 slots) steps the same
    old = {"step": np.zeros(()), "m": {"w": np.zeros(3, np.float16)},
           "v": {"w": np.zeros(3, np.float16)}}
    again, _ = opt.update(p, g, old)
    np.testing.assert_array_equal(again["w"], new["w"])
