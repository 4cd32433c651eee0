"""The worked examples of the seed texts, checked through adjit's public API.

Every example is written the way a user would write it: a plain NumPy function
(``np.exp``, ``np.maximum``, ``@``, ``.sum()``, ``np.tanh`` ...), weights stored
(out, in) as in the texts, float64 arrays in.  The numbers printed in the seed
texts (``/work/shared/seeds/``, also ``shared/seeds/`` next to the repository) are
checked to the precision they are printed with.

Most tests run in two modes (the ``mode`` parameter):

* ``reference``: the same numbers from a hand-derived NumPy backward pass written
  in this file (the seeds' rules: ``G^T A``, ``G W``, column sums, ``p - e_y``,
  the ReLU mask, ``1 - tanh^2``, Pearlmutter's R-operator for Hessian-vector
  products).  It never calls adjit, and it also checks the hand derivation
  against central differences of the user's NumPy function.  This validates the
  table of expected numbers independently of the library.
* ``adjit``: the numbers from ``adjit.grad`` / ``value_and_grad`` / ``jvp`` /
  ``vjp`` / ``jacobian`` / ``hessian`` / ``hvp`` / ``gradcheck`` applied to the
  user's NumPy function; besides the printed numbers, every quantity is also
  compared with the hand-derived one at a tight tolerance (so derivatives the
  text does not print, such as the bias gradients it leaves out, are checked too).
"""

import functools
import math
from types import SimpleNamespace

import numpy as np
import pytest

import adjit

S000 = "000_933731ef10d713a1.txt"
S001 = "001_11a3e2b601532854.txt"
S003 = "003_3202502544e00e7d.txt"
S004 = "004_51de4f2ed164e734.txt"


@pytest.fixture(params=["adjit", "reference"])
def mode(request):
    return request.param


# --------------------------------------------------------------------------------------
# helpers: tolerances matching the printed digits, pytrees, central differences
# --------------------------------------------------------------------------------------

def dec(value, decimals):
    """A number printed with `decimals` digits after the point: (value, atol)."""
    return np.asarray(value, dtype=float), 0.5 * 10.0 ** -decimals * (1 + 1e-9) + 1e-15


def sig(value, digits):
    """A number printed with `digits` significant digits, e.g. 1.7e-02: (value, atol)."""
    value = float(value)
    exponent = math.floor(math.log10(abs(value)))
    return np.asarray(value), 0.5 * 10.0 ** (exponent - digits + 1) * (1 + 1e-9)


def check_printed(got, expected, where):
    """Compare every key of `expected` ({key: (value, atol)}) with `got[key]`."""
    for key, (value, atol) in expected.items():
        assert key in got, f"{where}: {key!r} not computed"
        actual = np.asarray(got[key], dtype=float)
        assert actual.shape == value.shape, f"{where}: {key!r} has shape {actual.shape}, text {value.shape}"
        np.testing.assert_allclose(actual, value, rtol=0, atol=atol,
                                   err_msg=f"{where}: {key!r} differs from the number printed in the text")


def check_agree(got, ref, where, rtol=1e-9, atol=1e-12):
    """adjit's quantities against the hand-derived ones, for every key both computed."""
    common = [key for key in got if key in ref]
    assert common, f"{where}: nothing to compare"
    for key in common:
        np.testing.assert_allclose(np.asarray(got[key], dtype=float), np.asarray(ref[key], dtype=float),
                                   rtol=rtol, atol=atol,
                                   err_msg=f"{where}: adjit and hand-derived backprop differ on {key!r}")


def run_example(mode, adjit_fn, reference_fn, expected, where, forward_expected=None,
                rtol=1e-9, atol=1e-12):
    """Run one worked example in the given mode and check it.

    `expected` holds the printed derivatives and losses (checked in both modes);
    `forward_expected` holds printed forward intermediates that involve no
    differentiation (checked in reference mode only)."""
    ref = reference_fn()
    if mode == "reference":
        check_printed(ref, expected, where + " [hand-derived]")
        if forward_expected:
            check_printed(ref, forward_expected, where + " [hand-derived forward]")
        return ref
    got = adjit_fn()
    check_printed(got, expected, where + " [adjit]")
    check_agree(got, ref, where, rtol=rtol, atol=atol)
    return got


def _leaves(tree):
    if isinstance(tree, dict):
        return [leaf for key in tree for leaf in _leaves(tree[key])]
    if isinstance(tree, (list, tuple)):
        return [leaf for item in tree for leaf in _leaves(item)]
    return [tree]


def _copy_tree(tree):
    if isinstance(tree, dict):
        return {key: _copy_tree(value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_copy_tree(item) for item in tree)
    return np.array(tree, dtype=float)


def numeric_grad(fn, args, argnum=0, eps=1e-6):
    """Central differences of fn(*args) with respect to args[argnum] (any pytree)."""
    args = list(args)
    work = _copy_tree(args[argnum])
    args[argnum] = work
    out = _copy_tree(work)
    for leaf, gleaf in zip(_leaves(work), _leaves(out)):
        for idx in np.ndindex(leaf.shape):
            old = leaf[idx].copy()
            leaf[idx] = old + eps
            up = float(fn(*args))
            leaf[idx] = old - eps
            down = float(fn(*args))
            leaf[idx] = old
            gleaf[idx] = (up - down) / (2 * eps)
    return out


def rel_error(g, n):
    """The seeds' gradient-check error: max |g - n| / max(|g|, |n|, 1e-8)."""
    worst = 0.0
    for a, b in zip(_leaves(g), _leaves(n)):
        a, b = np.asarray(a, float), np.asarray(b, float)
        worst = max(worst, float(np.max(np.abs(a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1e-8))))
    return worst


def assert_matches_central_differences(fn, args, argnum, hand, tol=1e-5):
    """Validate a hand-derived gradient against central differences of the user's fn.

    1e-5 is far below the order-one errors of a wrong derivative and above the round-off
    of central differences (eps = 1e-6) on small gradient entries."""
    err = rel_error(hand, numeric_grad(fn, args, argnum))
    assert err < tol, f"hand-derived gradient vs central differences: relative error {err:.1e}"


def logsumexp_rows(Z):
    m = Z.max(axis=1, keepdims=True)
    return m + np.log(np.exp(Z - m).sum(axis=1, keepdims=True))


def f64(x):
    """A float64 array (0-d for a Python number)."""
    return np.array(x, dtype=np.float64)


# ======================================================================================
# 000: backpropagation notes
# ======================================================================================

# --- the sigmoid unit with squared error --------------------------------------------

def sigmoid_unit_loss(w, b, x, y):
    z = w * x + b
    act = 1 / (1 + np.exp(-z))
    return (act - y) ** 2


UNIT = dict(x=f64(1.5), w=f64(0.8), b=f64(-0.2), y=f64(1.0))


def _sigmoid_unit_reference():
    x, w, b, y = UNIT["x"], UNIT["w"], UNIT["b"], UNIT["y"]
    z = w * x + b
    act = 1 / (1 + np.exp(-z))
    L = (act - y) ** 2
    abar = 2 * (act - y)
    dsig = act * (1 - act)
    zbar = abar * dsig
    assert_matches_central_differences(sigmoid_unit_loss, (w, b, x, y), 0, zbar * x)
    assert_matches_central_differences(sigmoid_unit_loss, (w, b, x, y), 1, zbar)
    return dict(z=z, a=act, L=L, abar=abar, dsigma=dsig, zbar=zbar, dw=zbar * x, db=zbar)


def _sigmoid_unit_adjit():
    x, w, b, y = UNIT["x"], UNIT["w"], UNIT["b"], UNIT["y"]
    L, (dw, db) = adjit.value_and_grad(sigmoid_unit_loss, argnums=(0, 1))(w, b, x, y)
    z = w * x + b
    act = 1 / (1 + np.exp(-z))
    abar = adjit.grad(lambda u: (u - y) ** 2)(act)
    dsig = adjit.grad(lambda u: 1 / (1 + np.exp(-u)))(z)
    zbar = adjit.grad(lambda u: (1 / (1 + np.exp(-u)) - y) ** 2)(z)
    return dict(L=L, abar=abar, dsigma=dsig, zbar=zbar, dw=dw, db=db)


def test_000_sigmoid_unit(mode):
    """000_933731ef10d713a1.txt, 'The computational graph', worked example 'one unit':
    z = wx + b, a = sigma(z), L = (a - y)^2 at x = 1.5, w = 0.8, b = -0.2, y = 1.
    Printed: z = 1.0, a = 0.731, L = 0.0723; abar = -0.538, sigma'(z) = 0.197,
    zbar = -0.106, wbar = -0.159, bbar = -0.106."""
    expected = dict(L=dec(0.0723, 4), abar=dec(-0.538, 3), dsigma=dec(0.197, 3), zbar=dec(-0.106, 3),
                    dw=dec(-0.159, 3), db=dec(-0.106, 3))
    forward = dict(z=dec(1.0, 1), a=dec(0.731, 3))
    run_example(mode, _sigmoid_unit_adjit, _sigmoid_unit_reference, expected, "000 sigmoid unit", forward)


# --- the two-layer network -----------------------------------------------------------

def cross_entropy_of_logits(z2, y):
    """-log softmax(z2)[y] for one example, stable: L = logZ - z2[y]."""
    m = z2.max()
    logZ = m + np.log(np.exp(z2 - m).sum())
    return logZ - z2[y]


def two_layer_tail_from_h(h, params, y):
    return cross_entropy_of_logits(params["W2"] @ h + params["b2"], y)


def two_layer_tail_from_z1(z1, params, y):
    return two_layer_tail_from_h(np.maximum(z1, 0), params, y)


def two_layer_loss(params, x, y):
    z1 = params["W1"] @ x + params["b1"]
    h = np.maximum(z1, 0)
    z2 = params["W2"] @ h + params["b2"]
    return cross_entropy_of_logits(z2, y)


TWO_X = f64([1.0, 2.0])
TWO_Y = 0  # the true class, "y = 1 (the first)" in the text


def two_layer_params():
    return dict(W1=f64([[1.0, 0.0], [-1.0, 1.0], [0.5, -1.0]]), b1=np.zeros(3),
                W2=f64([[1.0, -1.0, 2.0], [0.5, 1.0, -1.0]]), b2=np.zeros(2))


def _two_layer_backward(params, x, y, mask=True):
    """The seed's hand-written backward pass; mask=False plants its bug."""
    z1 = params["W1"] @ x + params["b1"]
    h = np.maximum(z1, 0)
    z2 = params["W2"] @ h + params["b2"]
    p = np.exp(z2 - z2.max())
    p /= p.sum()
    dz2 = p - np.eye(len(z2))[y]
    dh = params["W2"].T @ dz2
    dz1 = dh * (z1 > 0) if mask else dh
    grads = dict(W1=np.outer(dz1, x), b1=dz1, W2=np.outer(dz2, h), b2=dz2)
    return dict(z1=z1, h=h, z2=z2, p=p, L=-np.log(p[y]), dz2=dz2, dh=dh, dz1=dz1), grads


def _two_layer_reference():
    params = two_layer_params()
    vals, grads = _two_layer_backward(params, TWO_X, TWO_Y)
    assert_matches_central_differences(lambda P: two_layer_loss(P, TWO_X, TWO_Y), (params,), 0, grads)
    return dict(vals, dW1=grads["W1"], db1=grads["b1"], dW2=grads["W2"], db2=grads["b2"])


def _two_layer_adjit():
    params = two_layer_params()
    L, g = adjit.value_and_grad(lambda P, x: two_layer_loss(P, x, TWO_Y))(params, TWO_X)
    assert set(g) == set(params)
    z1 = params["W1"] @ TWO_X
    h = np.maximum(z1, 0)
    z2 = params["W2"] @ h
    dz2 = adjit.grad(lambda z: cross_entropy_of_logits(z, TWO_Y))(z2)
    dh = adjit.grad(lambda u: two_layer_tail_from_h(u, params, TWO_Y))(h)
    dz1 = adjit.grad(lambda u: two_layer_tail_from_z1(u, params, TWO_Y))(z1)
    return dict(L=L, dz2=dz2, dh=dh, dz1=dz1, dW1=g["W1"], db1=g["b1"], dW2=g["W2"], db2=g["b2"])


def test_000_two_layer_network(mode):
    """000_933731ef10d713a1.txt, 'A two-layer network, forward and backward', Worked example:
    x = (1, 2), y = the first class, W1 = [[1,0],[-1,1],[0.5,-1]], W2 = [[1,-1,2],[0.5,1,-1]],
    zero biases.  Printed: p = (0.182, 0.818), L = 1.701, zbar2 = (-0.818, 0.818),
    Wbar2 rows (-0.818,-0.818,0), (0.818,0.818,0), hbar = (-0.409, 1.635, -2.453),
    zbar1 = (-0.409, 1.635, 0), Wbar1 rows (-0.409,-0.818), (1.635,3.270), (0,0);
    bbar1 = zbar1 and bbar2 = zbar2 ('b1 = z1' in the backward equations)."""
    expected = dict(
        L=dec(1.701, 3), dz2=dec([-0.818, 0.818], 3), db2=dec([-0.818, 0.818], 3),
        dW2=dec([[-0.818, -0.818, 0.0], [0.818, 0.818, 0.0]], 3),
        dh=dec([-0.409, 1.635, -2.453], 3), dz1=dec([-0.409, 1.635, 0.0], 3),
        db1=dec([-0.409, 1.635, 0.0], 3), dW1=dec([[-0.409, -0.818], [1.635, 3.270], [0.0, 0.0]], 3))
    forward = dict(z1=dec([1, 1, -1.5], 1), h=dec([1, 1, 0], 0), z2=dec([0, 1.5], 1), p=dec([0.182, 0.818], 3))
    run_example(mode, _two_layer_adjit, _two_layer_reference, expected, "000 two-layer network", forward)


def test_000_gradient_check(mode):
    """000_933731ef10d713a1.txt, 'Checking gradients by finite differences' and the Code section:
    the backward pass of the worked example agrees with central differences (eps = 1e-6)
    on all 17 parameters to a relative error of 3.6e-10 (|g-n| / max(|g|,|n|,1e-8));
    removing the ReLU mask (a planted bug) raises it to 1.0."""
    params = two_layer_params()
    loss = lambda P, x: two_layer_loss(P, x, TWO_Y)
    if mode == "reference":
        numeric = numeric_grad(loss, (params, TWO_X), 0, eps=1e-6)
        good = rel_error(_two_layer_backward(params, TWO_X, TWO_Y)[1], numeric)
        bad = rel_error(_two_layer_backward(params, TWO_X, TWO_Y, mask=False)[1], numeric)
        assert good < 1e-8  # printed 3.6e-10; the exact value is round-off
        check_printed(dict(bad=bad), dict(bad=sig(1.0, 2)), "000 planted bug")
    else:
        assert sum(leaf.size for leaf in _leaves(params)) == 17
        err = adjit.gradcheck(loss, params, TWO_X, argnums=0, eps=1e-6)
        assert 0 <= err < 1e-7, err


def test_000_forward_mode_17_passes():
    """000_933731ef10d713a1.txt, 'Why reverse mode costs about one forward pass' and the Code
    section: the 17 partial derivatives of the worked example computed by 17 forward-mode
    passes (Jacobian-vector products along e_i) equal the one reverse-mode gradient
    ('17 True').  Uses adjit.jvp on the parameters as one flat vector."""
    params = two_layer_params()
    theta = np.concatenate([params[k].ravel() for k in ("W1", "b1", "W2", "b2")])
    assert theta.size == 17

    def L_of(th):
        W1, b1 = th[0:6].reshape(3, 2), th[6:9]
        W2, b2 = th[9:15].reshape(2, 3), th[15:17]
        return two_layer_loss(dict(W1=W1, b1=b1, W2=W2, b2=b2), TWO_X, TWO_Y)

    reverse = adjit.grad(L_of)(theta)
    forward = []
    for i in range(17):
        out, tangent = adjit.jvp(L_of, (theta,), (np.eye(17)[i],))
        np.testing.assert_allclose(out, 1.7014132779827524, rtol=1e-12)
        forward.append(float(tangent))
    forward = np.array(forward)
    np.testing.assert_allclose(forward, reverse, rtol=1e-12, atol=1e-14)
    printed = np.array([-0.409, -0.818, 1.635, 3.270, 0, 0, -0.409, 1.635, 0,
                        -0.818, -0.818, 0, 0.818, 0.818, 0, -0.818, 0.818])
    np.testing.assert_allclose(forward, printed, rtol=0, atol=0.5e-3 + 1e-12)


def test_000_relu_convention_and_simple_gradient():
    """000_933731ef10d713a1.txt, Code section, 'autograd details': the ReLU has derivative 0
    at 0 (PyTorch's convention, printed 0.0); d(w^2)/dw at w = 3 is 6 (the text's 12.0 is
    two accumulated backward calls, 6 + 6; a functional grad does not accumulate)."""
    assert float(adjit.grad(adjit.relu)(f64(0.0))) == 0.0
    assert float(adjit.grad(adjit.relu)(f64(2.0))) == 1.0
    assert float(adjit.grad(lambda w: w ** 2)(f64(3.0))) == pytest.approx(6.0, abs=1e-12)


def softmax_expected_index(s):
    """The expected index under a softmax with temperature 0.5: a differentiable argmax."""
    e = np.exp(s / 0.5)
    p = e / e.sum()
    return p @ np.arange(3.0)


def _surrogate_reference():
    s = f64([1.0, 3.0, 2.0])
    p = np.exp(s / 0.5)
    p /= p.sum()
    k = np.arange(3.0)
    value = p @ k
    grad = p * (k - value) / 0.5  # softmax Jacobian applied to k, chain rule through s / 0.5
    assert_matches_central_differences(softmax_expected_index, (s,), 0, grad)
    return dict(value=value, grad=grad)


def _surrogate_adjit():
    value, grad = adjit.value_and_grad(softmax_expected_index)(f64([1.0, 3.0, 2.0]))
    return dict(value=value, grad=grad)


def test_000_argmax_surrogate(mode):
    """000_933731ef10d713a1.txt, Code section, last cell: a softmax with temperature 0.5 as a
    differentiable surrogate of argmax over s = (1, 3, 2); the expected index is 1.101 and
    its gradient is printed as [-0.035, -0.176, 0.211]."""
    expected = dict(value=dec(1.101, 3), grad=dec([-0.035, -0.176, 0.211], 3))
    run_example(mode, _surrogate_adjit, _surrogate_reference, expected, "000 argmax surrogate")


# ======================================================================================
# 001: layers as modules, batch rules G^T A, G W, column sums
# ======================================================================================

def running_params():
    """The running network of 001 ('Code', def running): W stored (out, in)."""
    return dict(W1=f64([[1, -0.5], [-0.5, 1]]), b1=f64([0.5, -0.5]),
                W2=f64([[1, 1], [-1, 0.5]]), b2=f64([-0.5, 0]))


def mean_softmax_cross_entropy(Z, labels):
    """Mean cross-entropy of logits Z (rows are examples) against integer labels."""
    Z = Z - Z.max(axis=1, keepdims=True)
    logP = Z - np.log(np.exp(Z).sum(axis=1, keepdims=True))
    n = Z.shape[0]
    return -logP[np.arange(n), labels].mean()


def running_tail_from_A1(A1, params, labels):
    return mean_softmax_cross_entropy(A1 @ params["W2"].T + params["b2"], labels)


def running_tail_from_Z1(Z1, params, labels):
    return running_tail_from_A1(np.maximum(Z1, 0), params, labels)


def running_loss(params, X, labels):
    Z1 = X @ params["W1"].T + params["b1"]
    A1 = np.maximum(Z1, 0)
    Z2 = A1 @ params["W2"].T + params["b2"]
    return mean_softmax_cross_entropy(Z2, labels)


def running_loss_tanh(params, X, labels):
    Z2 = np.tanh(X @ params["W1"].T + params["b1"]) @ params["W2"].T + params["b2"]
    return mean_softmax_cross_entropy(Z2, labels)


def _running_reference(X, labels, check_fd=True):
    """The modules of 001 by hand: Linear (G^T A, column sums, G W), ReLU mask, (P - Y)/n."""
    P_ = running_params()
    Z1 = X @ P_["W1"].T + P_["b1"]
    mask = Z1 > 0
    A1 = Z1 * mask
    Z2 = A1 @ P_["W2"].T + P_["b2"]
    Zs = Z2 - Z2.max(axis=1, keepdims=True)
    P = np.exp(Zs) / np.exp(Zs).sum(axis=1, keepdims=True)
    n = len(labels)
    Y = np.eye(Z2.shape[1])[labels]
    losses = -np.log(P[np.arange(n), labels])
    G2 = (P - Y) / n
    dW2, db2, GA = G2.T @ A1, G2.sum(axis=0), G2 @ P_["W2"]
    G1 = GA * mask
    dW1, db1 = G1.T @ X, G1.sum(axis=0)
    if check_fd:
        assert_matches_central_differences(running_loss, (P_, X, labels), 0,
                                           dict(W1=dW1, b1=db1, W2=dW2, b2=db2))
    return dict(Z1=Z1, A1=A1, P=P, losses=losses, L=losses.mean(), G2=G2, dW2=dW2, db2=db2,
                G2W2=GA, G1=G1, dW1=dW1, db1=db1, dX=G1 @ P_["W1"], mask=mask.astype(float))


def _running_tanh_reference_grads(X, labels):
    """The same modules with Tanh instead of ReLU: the backward multiplies by 1 - T^2."""
    P_ = running_params()
    T1 = np.tanh(X @ P_["W1"].T + P_["b1"])
    Z2 = T1 @ P_["W2"].T + P_["b2"]
    P = np.exp(Z2 - logsumexp_rows(Z2))
    G2 = (P - np.eye(2)[labels]) / len(labels)
    G1 = (G2 @ P_["W2"]) * (1 - T1 ** 2)
    return dict(W1=G1.T @ X, b1=G1.sum(0), W2=G2.T @ T1, b2=G2.sum(0))


def _running_adjit(X, labels):
    params = running_params()
    L, g = adjit.value_and_grad(running_loss)(params, X, labels)
    Z1 = X @ params["W1"].T + params["b1"]
    A1 = np.maximum(Z1, 0)
    Z2 = A1 @ params["W2"].T + params["b2"]
    G2 = adjit.grad(mean_softmax_cross_entropy)(Z2, labels)
    GA = adjit.grad(running_tail_from_A1)(A1, params, labels)
    G1 = adjit.grad(running_tail_from_Z1)(Z1, params, labels)
    dX = adjit.grad(running_loss, argnums=1)(params, X, labels)
    assert dX.shape == X.shape
    return dict(L=L, G2=G2, G2W2=GA, G1=G1, dW1=g["W1"], db1=g["b1"], dW2=g["W2"], db2=g["b2"],
                dX=dX)


X_ONE, Y_ONE = f64([[1.0, 2.0]]), np.array([1])
X_TWO, Y_TWO = f64([[1.0, 2.0], [-1.0, 1.0]]), np.array([1, 0])


def test_001_running_network_batch_of_one(mode):
    """001_11a3e2b601532854.txt, Code, 'The running network, and a batch of one': x = (1, 2)
    with class 2 (label 1).  Printed: loss 1.313, dW1 [[1.462, 2.924], [0.366, 0.731]],
    db2 [0.731, -0.731]; the same dW1 appears in 'Pitfalls' (right-hand timeline).  The
    gradients of every weight and bias (dW2, db1 too) are compared with hand backprop."""
    expected = dict(L=dec(1.313, 3), dW1=dec([[1.462, 2.924], [0.366, 0.731]], 3),
                    db2=dec([0.731, -0.731], 3))
    forward = dict(P=dec([[0.731, 0.269]], 3))
    run_example(mode, lambda: _running_adjit(X_ONE, Y_ONE), lambda: _running_reference(X_ONE, Y_ONE),
                expected, "001 batch of one", forward)


def test_001_running_network_batch_of_two(mode):
    """001_11a3e2b601532854.txt, 'Worked example' (and figure DL01.5.2-F4): the batch of two,
    (1, 2) with class 2 and (-1, 1) with class 1 (labels [1, 0]).  Printed: Z1 rows (0.5, 1),
    (-1, 1); A1 rows (0.5, 1), (0, 1); P rows (0.731, 0.269), (0.5, 0.5); losses 1.313 and
    0.693, mean 1.003; G2 = (P - Y)/2 rows (0.366, -0.366), (-0.25, 0.25); grad W2 rows
    (0.183, 0.116), (-0.183, -0.116); grad b2 (0.116, -0.116); G2 W2 rows (0.731, 0.183),
    (-0.5, -0.125); mask rows (1, 1), (0, 1); G1 rows (0.731, 0.183), (0, -0.125); grad W1
    rows (0.731, 1.462), (0.308, 0.241); grad b1 (0.731, 0.058)."""
    expected = dict(
        L=dec(1.003, 3), G2=dec([[0.366, -0.366], [-0.25, 0.25]], 3),
        dW2=dec([[0.183, 0.116], [-0.183, -0.116]], 3), db2=dec([0.116, -0.116], 3),
        G2W2=dec([[0.731, 0.183], [-0.5, -0.125]], 3), G1=dec([[0.731, 0.183], [0.0, -0.125]], 3),
        dW1=dec([[0.731, 1.462], [0.308, 0.241]], 3), db1=dec([0.731, 0.058], 3))
    forward = dict(Z1=dec([[0.5, 1], [-1, 1]], 1), A1=dec([[0.5, 1], [0, 1]], 1),
                   P=dec([[0.731, 0.269], [0.5, 0.5]], 3), losses=dec([1.313, 0.693], 3),
                   mask=dec([[1, 1], [0, 1]], 0))
    got = run_example(mode, lambda: _running_adjit(X_TWO, Y_TWO), lambda: _running_reference(X_TWO, Y_TWO),
                      expected, "001 batch of two", forward)
    # 'Check against DL01.5.1': row 1 of grad W1 is half of (1.462, 2.924)
    one = _running_reference(X_ONE, Y_ONE, check_fd=False)
    np.testing.assert_allclose(got["dW1"][0], one["dW1"][0] / 2, rtol=1e-12)


def make_moons(n_samples, noise, random_state):
    """sklearn.datasets.make_moons(n_samples, noise=noise, random_state=random_state),
    re-implemented (sklearn is not a dependency): same points, same order, same noise."""
    n_out = n_samples // 2
    n_in = n_samples - n_out
    gen = np.random.RandomState(random_state)
    outer = np.linspace(0, np.pi, n_out)
    inner = np.linspace(0, np.pi, n_in)
    X = np.vstack([np.append(np.cos(outer), 1 - np.cos(inner)),
                   np.append(np.sin(outer), 1 - np.sin(inner) - 0.5)]).T
    y = np.hstack([np.zeros(n_out, dtype=np.intp), np.ones(n_in, dtype=np.intp)])
    order = np.arange(n_samples)
    gen.shuffle(order)
    X, y = X[order], y[order]
    X = X + gen.normal(scale=noise, size=X.shape)
    return X, y


def moons8():
    X, y = make_moons(200, 0.2, 0)
    return X[:8], y[:8]


def test_001_batch_of_eight_moons(mode):
    """001_11a3e2b601532854.txt, Code, 'a batch of eight: the first eight points of the
    course's two moons' (make_moons(200, noise=0.2, random_state=0)[:8]).  Printed: loss
    2.259, dW1 [[1.457, -0.363], [0.0, 0.0]] (hidden unit 2 is off for all eight: a dead
    unit); 'mean of eight one-example gradients equals the batch gradient: True'; the
    gradients agree with central differences ('largest gap 4.6e-11'), also for the tanh
    network ('tanh network, largest gap: 1.3e-11')."""
    X8, y8 = moons8()
    expected = dict(L=dec(2.259, 3), dW1=dec([[1.457, -0.363], [0.0, 0.0]], 3))
    got = run_example(mode, lambda: _running_adjit(X8, y8), lambda: _running_reference(X8, y8),
                      expected, "001 batch of eight")
    assert np.all(got["dW1"][1] == 0.0), "dead hidden unit 2 must get exactly zero gradient"
    if mode == "reference":
        loop = sum(_running_reference(X8[i:i + 1], y8[i:i + 1], check_fd=False)["dW1"] for i in range(8)) / 8
        np.testing.assert_allclose(loop, got["dW1"], rtol=1e-12, atol=1e-15)
        hand_tanh = _running_tanh_reference_grads(X8, y8)
        assert rel_error(hand_tanh, numeric_grad(running_loss_tanh, (running_params(), X8, y8), 0)) < 1e-6
    else:
        g_one = adjit.grad(running_loss)
        loop = sum(g_one(running_params(), X8[i:i + 1], y8[i:i + 1])["W1"] for i in range(8)) / 8
        np.testing.assert_allclose(loop, got["dW1"], rtol=1e-12, atol=1e-15)
        assert adjit.gradcheck(running_loss, running_params(), X_TWO, Y_TWO) < 1e-6
        assert adjit.gradcheck(running_loss, running_params(), X8, y8) < 1e-6
        assert adjit.gradcheck(running_loss_tanh, running_params(), X8, y8) < 1e-6


def sigmoid_rows(Z):
    return 1 / (1 + np.exp(-Z))


def test_001_sigmoid_module_exercise(mode):
    """001_11a3e2b601532854.txt, 'Exercises', 2: a Sigmoid module's backward for
    Z = [[0, ln 3]] and G = [[4, 4]] returns G * S * (1 - S) = [[1, 0.75]]: a
    vector-Jacobian product (adjit.vjp)."""
    Z, G = f64([[0.0, math.log(3.0)]]), f64([[4.0, 4.0]])
    if mode == "reference":
        S = sigmoid_rows(Z)
        out, back = S, G * S * (1 - S)
    else:
        out, vjp_fn = adjit.vjp(sigmoid_rows, Z)
        (back,) = vjp_fn(G)
    check_printed(dict(S=out, back=back), dict(S=dec([[0.5, 0.75]], 12), back=dec([[1.0, 0.75]], 12)),
                  f"001 sigmoid exercise [{mode}]")


def linear_layer_loss(params, A, G):
    """A scalar whose gradient at Z = A W^T + b is exactly G: sum(G * Z)."""
    return (G * (A @ params["W"].T + params["b"])).sum()


def test_001_linear_layer_shapes_and_bias_as_weight(mode):
    """001_11a3e2b601532854.txt, 'The formal statement' and 'Exercises' 1 and 3: for a Linear
    layer 64 -> 32 on a batch of 100, grad W = G^T A is (32, 64), grad b = column sums of G
    is (32,), dL/dA = G W is (100, 64); and the bias gradient equals the last column of the
    weight gradient when the bias is an extra weight on an input fixed at 1."""
    rng = np.random.default_rng(0)
    params = dict(W=rng.normal(size=(32, 64)), b=rng.normal(size=32))
    A, G = rng.normal(size=(100, 64)), rng.normal(size=(100, 32))
    if mode == "reference":
        gp, gA = dict(W=G.T @ A, b=G.sum(axis=0)), G @ params["W"]
        gWt = G.T @ np.hstack([A, np.ones((100, 1))])
        assert_matches_central_differences(linear_layer_loss, (dict(W=params["W"][:2, :3].copy(),
                                                                      b=params["b"][:2].copy()),
                                                                 A[:5, :3], G[:5, :2]), 0,
                                           dict(W=G[:5, :2].T @ A[:5, :3], b=G[:5, :2].sum(axis=0)))
    else:
        gp, gA = adjit.grad(linear_layer_loss, argnums=(0, 1))(params, A, G)
        A1 = np.hstack([A, np.ones((100, 1))])
        Wt = np.hstack([params["W"], params["b"][:, None]])
        gWt = adjit.grad(lambda W, X, H: (H * (X @ W.T)).sum())(Wt, A1, G)
        np.testing.assert_allclose(gp["W"], G.T @ A, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(gp["b"], G.sum(axis=0), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(gA, G @ params["W"], rtol=1e-10, atol=1e-10)
    assert gp["W"].shape == (32, 64) and gp["b"].shape == (32,) and gA.shape == (100, 64)
    np.testing.assert_allclose(gWt[:, -1], gp["b"], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(gWt[:, :-1], gp["W"], rtol=1e-10, atol=1e-10)


# ======================================================================================
# 003: backpropagation course module (Bishop-style), Jacobian, Hessian, forward/reverse AD
# ======================================================================================

DAG_PARENTS = {3: [1, 2], 4: [1, 2], 5: [1, 3, 4], 6: [3, 5], 7: [5, 6], 8: [4, 5]}
DAG_OUTPUTS = [7, 8]


def _linear_init(rng, d_in, d_out, gain=1.0):
    """The seed's Linear(d_in, d_out, rng, gain): W ~ N(0, gain/d_in), shape (out, in), b = 0."""
    return rng.normal(0.0, math.sqrt(gain / d_in), (d_out, d_in)), np.zeros(d_out)


@functools.lru_cache(maxsize=None)
def seed003_rng8():
    """Replays every draw from the module's rng = np.random.default_rng(8), in order, so the
    random examples of 003 (whose numbers it prints) are reproduced exactly."""
    rng = np.random.default_rng(8)
    ns = SimpleNamespace()
    ns.X32 = rng.normal(size=(32, 5))                   # softmax regression
    ns.t32 = rng.integers(0, 4, 32)
    ns.W_sr = rng.normal(size=(4, 5))
    ns.dag_w = {f"w{j}{i}": f64(rng.normal()) for j in DAG_PARENTS for i in DAG_PARENTS[j]}
    ns.dag_b = {f"b{j}": f64(0.5 * rng.normal()) for j in DAG_PARENTS}
    net = {}
    for k, (d_in, d_out, gain) in enumerate([(5, 8, 1.0), (8, 6, 2.0), (6, 3, 1.0)], start=1):
        net[f"W{k}"], net[f"b{k}"] = _linear_init(rng, d_in, d_out, gain)
    ns.net123 = net
    ns.X16 = rng.normal(size=(16, 5))
    ns.t16 = rng.integers(0, 3, 16)
    _linear_init(rng, 2, 2)                               # 'small' (weights overwritten)
    _linear_init(rng, 2, 2)
    jac = {}
    jac["W1"], jac["b1"] = _linear_init(rng, 4, 6)
    jac["W2"], jac["b2"] = _linear_init(rng, 6, 3)
    ns.jac = jac
    ns.x0 = rng.normal(size=4)
    ns.dx = 1e-3 * rng.normal(size=4)
    ns.v13 = rng.normal(size=13)                          # Hessian-vector products
    return ns


# --- softmax regression ----------------------------------------------------------------

def softmax_regression_error(W, X, t):
    """Summed cross-entropy (reduction='sum') of softmax regression A = X W^T."""
    A = X @ W.T
    A = A - A.max(axis=1, keepdims=True)
    logY = A - np.log(np.exp(A).sum(axis=1, keepdims=True))
    return -logY[np.arange(X.shape[0]), t].sum()


def test_003_softmax_regression_gradient(mode):
    """003_3202502544e00e7d.txt, 'Single-layer networks': for softmax regression with the summed
    cross-entropy, grad W = (Y - T)^T X, 'gradient shape: (4, 5)' (N, D, K = 32, 5, 4 from
    default_rng(8)); the text checks it against torch.autograd to 3.6e-15."""
    ns = seed003_rng8()
    A = ns.X32 @ ns.W_sr.T
    Y = np.exp(A - logsumexp_rows(A))
    closed = (Y - np.eye(4)[ns.t32]).T @ ns.X32
    if mode == "reference":
        g = closed
        small = (ns.W_sr[:2, :3].copy(), ns.X32[:6, :3], ns.t32[:6] % 2)
        A2 = small[1] @ small[0].T
        Y2 = np.exp(A2 - logsumexp_rows(A2))
        assert_matches_central_differences(softmax_regression_error, small, 0,
                                           (Y2 - np.eye(2)[small[2]]).T @ small[1])
    else:
        g = adjit.grad(softmax_regression_error)(ns.W_sr, ns.X32, ns.t32)
        np.testing.assert_allclose(g, closed, rtol=1e-12, atol=1e-12)
    assert g.shape == (4, 5)


# --- the DAG network ---------------------------------------------------------------------

def dag_error(w, b, x, t):
    """The seed's network with no layer structure: units 3..8, tanh hidden, linear outputs
    7 and 8, sum-of-squares error; w[f"w{j}{i}"] is the weight from unit i to unit j."""
    z = {1: x[0], 2: x[1]}
    for j in sorted(DAG_PARENTS):
        act = sum(w[f"w{j}{i}"] * z[i] for i in DAG_PARENTS[j]) + b[f"b{j}"]
        z[j] = act if j in DAG_OUTPUTS else np.tanh(act)
    return 0.5 * sum((z[k] - tk) ** 2 for k, tk in zip(DAG_OUTPUTS, t))


DAG_X, DAG_T = f64([0.7, -1.2]), f64([0.5, -0.3])


def _dag_reference():
    ns = seed003_rng8()
    w = {key: float(v) for key, v in ns.dag_w.items()}
    bias = {key: float(v) for key, v in ns.dag_b.items()}
    children = {i: [j for j in DAG_PARENTS if i in DAG_PARENTS[j]] for i in range(1, 9)}
    z = {1: DAG_X[0], 2: DAG_X[1]}
    for j in sorted(DAG_PARENTS):
        act = sum(w[f"w{j}{i}"] * z[i] for i in DAG_PARENTS[j]) + bias[f"b{j}"]
        z[j] = act if j in DAG_OUTPUTS else math.tanh(act)
    delta = {}
    for j in sorted(DAG_PARENTS, reverse=True):
        if j in DAG_OUTPUTS:
            delta[j] = z[j] - DAG_T[DAG_OUTPUTS.index(j)]
        else:
            delta[j] = (1 - z[j] ** 2) * sum(w[f"w{k}{j}"] * delta[k] for k in children[j])
    gw = {f"w{j}{i}": delta[j] * z[i] for j in DAG_PARENTS for i in DAG_PARENTS[j]}
    gb = {f"b{j}": delta[j] for j in DAG_PARENTS}
    assert_matches_central_differences(dag_error, (ns.dag_w, ns.dag_b, DAG_X, DAG_T), 0, gw)
    assert_matches_central_differences(dag_error, (ns.dag_w, ns.dag_b, DAG_X, DAG_T), 1, gb)
    out = {f"delta{j}": delta[j] for j in DAG_PARENTS}
    out.update({f"grad_{k}": v for k, v in gw.items()})
    return out


def _dag_adjit():
    ns = seed003_rng8()
    gw, gb = adjit.grad(dag_error, argnums=(0, 1))(ns.dag_w, ns.dag_b, DAG_X, DAG_T)
    assert set(gw) == set(ns.dag_w) and set(gb) == set(ns.dag_b)
    assert len(gw) + len(gb) == 19
    out = {f"delta{key[1:]}": v for key, v in gb.items()}  # bias gradients are the errors
    out.update({f"grad_{k}": v for k, v in gw.items()})
    return out


def test_003_dag_network_errors(mode):
    """003_3202502544e00e7d.txt, 'General feed-forward networks': the network with no layer
    structure (parents {3:[1,2], 4:[1,2], 5:[1,3,4], 6:[3,5], 7:[5,6], 8:[4,5]}), weights from
    default_rng(8), x = (0.7, -1.2), t = (0.5, -0.3).  Printed errors (= bias gradients):
    {3: 0.6498, 4: -0.0274, 5: 0.4008, 6: 0.0481, 7: -0.038, 8: -0.2057}; 19 parameters."""
    printed = {3: 0.6498, 4: -0.0274, 5: 0.4008, 6: 0.0481, 7: -0.038, 8: -0.2057}
    expected = {f"delta{j}": dec(v, 4) for j, v in printed.items()}
    run_example(mode, _dag_adjit, _dag_reference, expected, "003 DAG network")


# --- the 123-parameter network with a softmax cross-entropy head --------------------------

def net123_error(params, X, t):
    A = np.tanh(X @ params["W1"].T + params["b1"])
    B = np.maximum(A @ params["W2"].T + params["b2"], 0)
    C = B @ params["W3"].T + params["b3"]
    return mean_softmax_cross_entropy(C, t)


def _net123_reference():
    ns = seed003_rng8()
    P_, X, t = ns.net123, ns.X16, ns.t16
    A = np.tanh(X @ P_["W1"].T + P_["b1"])
    Zb = A @ P_["W2"].T + P_["b2"]
    B = np.maximum(Zb, 0)
    C = B @ P_["W3"].T + P_["b3"]
    logY = C - logsumexp_rows(C)
    E = -logY[np.arange(16), t].mean()
    G3 = (np.exp(logY) - np.eye(3)[t]) / 16
    G2 = (G3 @ P_["W3"]) * (Zb > 0)
    G1 = (G2 @ P_["W2"]) * (1 - A ** 2)
    g = dict(W1=G1.T @ X, b1=G1.sum(0), W2=G2.T @ A, b2=G2.sum(0), W3=G3.T @ B, b3=G3.sum(0))
    assert_matches_central_differences(net123_error, (P_, X, t), 0, g)
    return dict(E=E, **{f"d{k}": v for k, v in g.items()})


def _net123_adjit():
    ns = seed003_rng8()
    E, g = adjit.value_and_grad(net123_error)(ns.net123, ns.X16, ns.t16)
    assert sum(v.size for v in g.values()) == 123
    return dict(E=E, **{f"d{k}": v for k, v in g.items()})


def test_003_network_123_parameters(mode):
    """003_3202502544e00e7d.txt, 'Layered networks and mini-batches': Sequential(Linear(5, 8),
    Tanh(), Linear(8, 6, gain=2), ReLU(), Linear(6, 3)) with a mean softmax cross-entropy on
    16 points, all from default_rng(8).  Printed: 'W = 123 parameters, E = 1.174043'."""
    run_example(mode, _net123_adjit, _net123_reference, dict(E=dec(1.174043, 6)), "003 123-parameter network")


# --- the tanh example with every number ---------------------------------------------------

def tanh_net_error(params, x, t):
    z = np.tanh(params["W1"] @ x + params["b1"])
    y = params["W2"] @ z + params["b2"]
    return 0.5 * np.sum((y - t) ** 2)


TANH_X, TANH_T = f64([1.0, -2.0]), f64([0.5, -0.5])


def tanh_params():
    return dict(W1=f64([[0.2, -0.4], [0.7, 0.1]]), b1=f64([0.1, -0.2]),
                W2=f64([[0.6, -0.3], [-0.5, 0.8]]), b2=f64([0.0, 0.2]))


def _tanh_reference():
    P_ = tanh_params()
    act = P_["W1"] @ TANH_X + P_["b1"]
    z = np.tanh(act)
    y = P_["W2"] @ z + P_["b2"]
    E = 0.5 * np.sum((y - TANH_T) ** 2)
    d_out = y - TANH_T
    back = P_["W2"].T @ d_out
    d_hid = (1 - z ** 2) * back
    g = dict(W1=np.outer(d_hid, TANH_X), b1=d_hid, W2=np.outer(d_out, z), b2=d_out)
    assert_matches_central_differences(tanh_net_error, (P_, TANH_X, TANH_T), 0, g)
    return dict(a=act, z=z, y=y, E=E, delta_k=d_out, delta_j=d_hid, dW2=g["W2"], dW1=g["W1"],
                back1=back[0], slope1=1 - z[0] ** 2)


def _tanh_adjit():
    P_ = tanh_params()
    E, g = adjit.value_and_grad(tanh_net_error)(P_, TANH_X, TANH_T)
    z = np.tanh(P_["W1"] @ TANH_X + P_["b1"])
    dz = adjit.grad(lambda u: 0.5 * np.sum((P_["W2"] @ u + P_["b2"] - TANH_T) ** 2))(z)
    slope = adjit.grad(np.tanh)(f64(1.1))
    return dict(E=E, delta_k=g["b2"], delta_j=g["b1"], dW2=g["W2"], dW1=g["W1"], back1=dz[0], slope1=slope)


def test_003_tanh_simple_example(mode):
    """003_3202502544e00e7d.txt, 'A simple example': D = M = K = 2, tanh hidden units, linear
    outputs, sum-of-squares error for one point, x = (1, -2), t = (0.5, -0.5).  Printed:
    a = [1.1 0.3], z = [0.8005 0.2913], y = [0.3929 0.0328], E = 0.1477, delta_k =
    [-0.1071 0.5328] (= dE/db2), delta_j = [-0.1188 0.4195] (= dE/db1), dE/dW2 =
    [[-0.0857 -0.0312] [0.4265 0.1552]], dE/dW1 = [[-0.1188 0.2375] [0.4195 -0.8389]];
    in the paragraph after it, hidden unit 1 collects -0.3307 and its slope is 0.3592."""
    expected = dict(E=dec(0.1477, 4), delta_k=dec([-0.1071, 0.5328], 4), delta_j=dec([-0.1188, 0.4195], 4),
                    dW2=dec([[-0.0857, -0.0312], [0.4265, 0.1552]], 4),
                    dW1=dec([[-0.1188, 0.2375], [0.4195, -0.8389]], 4),
                    back1=dec(-0.3307, 4), slope1=dec(0.3592, 4))
    forward = dict(a=dec([1.1, 0.3], 4), z=dec([0.8005, 0.2913], 4), y=dec([0.3929, 0.0328], 4))
    run_example(mode, _tanh_adjit, _tanh_reference, expected, "003 tanh example", forward)


# --- the Jacobian of a softmax network -----------------------------------------------------

def softmax_net(x, W1, b1, W2, b2):
    h = np.tanh(W1 @ x + b1)
    y = W2 @ h + b2
    e = np.exp(y - y.max())
    return e / e.sum()


def _jacobian_reference():
    ns = seed003_rng8()
    P_ = ns.jac
    # K = 3 backward passes run as one batch seeded with the identity (jacobian_backprop)
    X = np.tile(ns.x0, (3, 1))
    H = np.tanh(X @ P_["W1"].T + P_["b1"])
    A = H @ P_["W2"].T + P_["b2"]
    Y = np.exp(A - logsumexp_rows(A))
    G = np.eye(3)
    dA = Y * (G - (G * Y).sum(axis=1, keepdims=True))
    J = ((dA @ P_["W2"]) * (1 - H ** 2)) @ P_["W1"]
    f = lambda x: softmax_net(x, P_["W1"], P_["b1"], P_["W2"], P_["b2"])
    for k in range(3):
        assert_matches_central_differences(lambda x: f(x)[k], (ns.x0,), 0, J[k])
    return dict(J=J, colsum=J.sum(axis=0))


def _jacobian_adjit():
    ns = seed003_rng8()
    P_ = ns.jac
    J = adjit.jacobian(softmax_net)(ns.x0, P_["W1"], P_["b1"], P_["W2"], P_["b2"])
    assert J.shape == (3, 4)
    return dict(J=J, colsum=J.sum(axis=0))


def test_003_jacobian_of_softmax_network(mode):
    """003_3202502544e00e7d.txt, 'The Jacobian matrix': Sequential(Linear(4, 6), Tanh(),
    Linear(6, 3), Softmax()) at x0, from default_rng(8).  Printed: the 3 x 4 Jacobian
    [[0.024 -0.0252 0.0264 -0.0322] [-0.0801 0.0219 -0.0382 0.129] [0.0562 0.0034 0.0118
    -0.0968]]; column sums [0 -0 0 0]; for dx = 1e-3 * N(0, 1), output change 6.39e-05 and
    error of the estimate J dx 2.2e-08."""
    expected = dict(J=dec([[0.024, -0.0252, 0.0264, -0.0322], [-0.0801, 0.0219, -0.0382, 0.129],
                           [0.0562, 0.0034, 0.0118, -0.0968]], 4),
                    colsum=dec([0, 0, 0, 0], 12))
    got = run_example(mode, _jacobian_adjit, _jacobian_reference, expected, "003 Jacobian", rtol=1e-9, atol=1e-14)
    ns = seed003_rng8()
    f = lambda x: softmax_net(x, **ns.jac)
    dy = f(ns.x0 + ns.dx) - f(ns.x0)
    check_printed(dict(change=np.abs(dy).max(), err=np.abs(dy - got["J"] @ ns.dx).max()),
                  dict(change=sig(6.39e-05, 3), err=sig(2.2e-08, 2)), f"003 Jacobian estimate [{mode}]")


# --- the Hessian of a tiny regression network -------------------------------------------------

def regression_output(w, X):
    """The 2-3-1 tanh regression network of the Hessian section, parameters as one flat vector
    in the order W1 (3x2), b1, W2 (1x3), b2."""
    W1, b1 = w[0:6].reshape(3, 2), w[6:9]
    W2, b2 = w[9:12].reshape(1, 3), w[12:13]
    return (np.tanh(X @ W1.T + b1) @ W2.T + b2)[:, 0]


def regression_error(w, X, T):
    """Sum-of-squares error E = 1/2 sum (y_n - t_n)^2 of that network."""
    return 0.5 * ((regression_output(w, X) - T[:, 0]) ** 2).sum()


def _hess_unpack(w):
    return w[0:6].reshape(3, 2), w[6:9], w[9:12].reshape(1, 3), w[12:13]


def hand_regression_grad(w, X, T):
    W1, b1, W2, b2 = _hess_unpack(w)
    Z = np.tanh(X @ W1.T + b1)
    R = Z @ W2.T + b2 - T
    dA = (R @ W2) * (1 - Z ** 2)
    return np.concatenate([(dA.T @ X).ravel(), dA.sum(0), (R.T @ Z).ravel(), R.sum(0)])


def hand_regression_hvp(w, X, T, v):
    """Pearlmutter's R-operator applied by hand to the backward pass above (forward-over-reverse)."""
    W1, b1, W2, b2 = _hess_unpack(w)
    V1, c1, V2, c2 = _hess_unpack(v)
    Z = np.tanh(X @ W1.T + b1)
    R = Z @ W2.T + b2 - T
    S = 1 - Z ** 2
    dZ = R @ W2
    Zd = S * (X @ V1.T + c1)                   # R{Z}
    Rd = Zd @ W2.T + Z @ V2.T + c2             # R{R}
    dZd = Rd @ W2 + R @ V2                     # R{dZ}
    dAd = dZd * S - dZ * 2 * Z * Zd            # R{dA}, dA = dZ * (1 - Z^2)
    return np.concatenate([(dAd.T @ X).ravel(), dAd.sum(0), (Rd.T @ Z + R.T @ Zd).ravel(), Rd.sum(0)])


def hand_regression_output_grads(w, X):
    """Rows b_n = gradient of the single output y(x_n, w) with respect to w: (N, 13)."""
    W1, b1, W2, b2 = _hess_unpack(w)
    Z = np.tanh(X @ W1.T + b1)
    dA = W2 * (1 - Z ** 2)
    n = X.shape[0]
    return np.concatenate([(dA[:, :, None] * X[:, None, :]).reshape(n, 6), dA, Z, np.ones((n, 1))], axis=1)


@functools.lru_cache(maxsize=None)
def seed003_hessian_setup():
    """rng_h = default_rng(1): 30 inputs in [-2, 2]^2, targets sin(x1) cos(x2) + 0.1 noise,
    Sequential(Linear(2, 3), Tanh(), Linear(3, 1)); and the weights after the text's 4000
    steps of gradient descent with momentum (lr 0.002, mu 0.9), run with the hand gradient."""
    rng_h = np.random.default_rng(1)
    X = rng_h.uniform(-2, 2, size=(30, 2))
    T = np.sin(X[:, :1]) * np.cos(X[:, 1:]) + 0.1 * rng_h.normal(size=(30, 1))
    W1, b1 = _linear_init(rng_h, 2, 3)
    W2, b2 = _linear_init(rng_h, 3, 1)
    w0 = np.concatenate([W1.ravel(), b1, W2.ravel(), b2])
    w, vel = w0.copy(), np.zeros_like(w0)
    for _ in range(4000):
        vel = 0.9 * vel + hand_regression_grad(w, X, T)
        w = w - 0.002 * vel
    for arr in (X, T, w0, w):
        arr.setflags(write=False)
    return X, T, w0, w


def _hand_hessian(w, X, T):
    return np.stack([hand_regression_hvp(w, X, T, e) for e in np.eye(w.size)], axis=1)


def _hessian_summary(H, B, w, X, T):
    lam = np.linalg.eigvalsh(H)
    off = H - np.diag(np.diag(H))
    H_gn = B.T @ B
    resid = regression_output(w, X) - T[:, 0]
    return dict(H=H, eig=lam, min_eig=lam[0], off_share=np.linalg.norm(off) / np.linalg.norm(H),
                n_negative=float((lam < 0).sum()), rms=np.sqrt(np.mean(resid ** 2)),
                gn_rel=np.linalg.norm(H_gn - H) / np.linalg.norm(H), gn_min_eig=np.linalg.eigvalsh(H_gn)[0])


def _hessian_reference(which):
    X, T, w0, w_fit = seed003_hessian_setup()
    w = w0 if which == "start" else w_fit
    assert_matches_central_differences(regression_error, (w, X, T), 0, hand_regression_grad(w, X, T))
    H = _hand_hessian(w, X, T)
    # the hand R-operator against central differences of the hand gradient (the text's hessian_fd)
    H_fd = np.stack([(hand_regression_grad(w + 1e-5 * e, X, T) - hand_regression_grad(w - 1e-5 * e, X, T)) / 2e-5
                     for e in np.eye(13)], axis=1)
    assert np.linalg.norm(0.5 * (H_fd + H_fd.T) - H) / np.linalg.norm(H) < 1e-8
    return _hessian_summary(H, hand_regression_output_grads(w, X), w, X, T)


def _hessian_adjit(which):
    X, T, w0, w_fit = seed003_hessian_setup()
    w = np.array(w0 if which == "start" else w_fit)
    H = adjit.hessian(regression_error)(w, X, T)
    assert H.shape == (13, 13)
    B = adjit.jacobian(regression_output)(w, X)
    assert B.shape == (30, 13)
    out = _hessian_summary(H, B, w, X, T)
    out["B"] = B
    return out


def test_003_hessian_at_random_start(mode):
    """003_3202502544e00e7d.txt, 'The Hessian matrix': W = 13; eigenvalues at the random start
    [-40.16 -35.55 -22.62 -15.11 -0.9 -0.28 0.1 0.21 4.23 21.92 35.43 36.96 51.16] (six
    negative); share of the Hessian off the diagonal 0.92.  'The outer-product approximation':
    at the random start RMS residual 1.143, outer product vs exact relative difference 8.7e-01,
    smallest eigenvalue exact -4.0e+01 (the approximation is PSD)."""
    expected = dict(eig=dec([-40.16, -35.55, -22.62, -15.11, -0.9, -0.28, 0.1, 0.21, 4.23, 21.92,
                             35.43, 36.96, 51.16], 2),
                    off_share=dec(0.92, 2), n_negative=dec(6, 0), rms=dec(1.143, 3),
                    gn_rel=sig(8.7e-01, 2), min_eig=sig(-4.0e+01, 2))
    got = run_example(mode, lambda: _hessian_adjit("start"), lambda: _hessian_reference("start"),
                      expected, "003 Hessian at the random start", rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got["H"], got["H"].T, rtol=0, atol=1e-10)
    assert got["gn_min_eig"] > -1e-9  # positive semidefinite up to round-off (printed +1.1e-06)


def test_003_hessian_after_training(mode):
    """003_3202502544e00e7d.txt, 'The outer-product approximation': after 4000 steps of gradient
    descent with momentum, 'trained  RMS residual 0.098   outer product vs exact: relative
    difference 6.5e-03   smallest eigenvalue exact +1.7e-02, approx +3.1e-03'."""
    expected = dict(rms=dec(0.098, 3), gn_rel=sig(6.5e-03, 2), min_eig=sig(1.7e-02, 2),
                    gn_min_eig=sig(3.1e-03, 2))
    got = run_example(mode, lambda: _hessian_adjit("trained"), lambda: _hessian_reference("trained"),
                      expected, "003 Hessian after training", rtol=1e-9, atol=1e-9)
    assert np.all(got["eig"] > 0)  # 'both matrices are positive definite'


def test_003_hessian_vector_products(mode):
    """003_3202502544e00e7d.txt, 'Hessian-vector products': at the trained weights and a random
    v (default_rng(8)), gradient differences, double backprop and forward-over-reverse all
    agree with the explicit product H v ('max relative error 7.2e-09 / 2.2e-15 / 1.7e-15').
    adjit.hvp is checked against the explicit Hessian; the hand R-operator is the reference."""
    X, T, _, w = seed003_hessian_setup()
    v = seed003_rng8().v13
    w = np.array(w)
    fd = (hand_regression_grad(w + 1e-5 * v, X, T) - hand_regression_grad(w - 1e-5 * v, X, T)) / 2e-5
    rel = lambda u, ref: float(np.max(np.abs(u - ref) / np.maximum(np.abs(u) + np.abs(ref), 1e-12)))
    if mode == "reference":
        H = _hand_hessian(w, X, T)
        Hv = hand_regression_hvp(w, X, T, v)
    else:
        H = adjit.hessian(regression_error)(w, X, T)
        Hv = adjit.hvp(regression_error)(w, X, T, v)
        assert Hv.shape == (13,)
        np.testing.assert_allclose(Hv, hand_regression_hvp(w, X, T, v), rtol=1e-9, atol=1e-12)
    exact = H @ v
    # exact to round-off, like double backprop and forward-over-reverse (printed 2.2e-15, 1.7e-15)
    assert np.linalg.norm(Hv - exact) / np.linalg.norm(exact) < 1e-10
    # gradient differences: the usual finite-difference accuracy (printed 7.2e-09)
    assert rel(fd, exact) < 1e-6


def test_003_hvp_by_composing_transformations():
    """003_3202502544e00e7d.txt, 'Hessian-vector products': the two automatic routes, written
    with adjit's transformations composed: forward-over-reverse jvp(grad(E)) and
    reverse-over-reverse grad(v . grad(E)), both equal to H v to round-off."""
    X, T, _, w = seed003_hessian_setup()
    v = seed003_rng8().v13
    w = np.array(w)
    Hv = hand_regression_hvp(w, X, T, v)
    grad_E = adjit.grad(regression_error)
    _, Hv_fr = adjit.jvp(lambda u: grad_E(u, X, T), (w,), (v,))
    np.testing.assert_allclose(Hv_fr, Hv, rtol=1e-9, atol=1e-12)
    Hv_rr = adjit.grad(lambda u: grad_E(u, X, T) @ v)(w)
    np.testing.assert_allclose(Hv_rr, Hv, rtol=1e-9, atol=1e-12)


# --- the running example f(x1, x2) of automatic differentiation -------------------------------

def f_running(x1, x2):
    return (x1 * x2 + np.sin(x1)) * np.exp(-x2)


def f_tail(v3, v4, v6):
    """f after the trace's first steps: v5 = v3 + v4, v7 = v5 * v6."""
    return (v3 + v4) * v6


F_X1, F_X2 = f64(1.5), f64(0.5)


def _f_reference():
    x1, x2 = float(F_X1), float(F_X2)
    v1, v2 = x1, x2
    v3, v4 = v1 * v2, math.sin(v1)
    v5, v6 = v3 + v4, math.exp(-v2)
    v7 = v5 * v6
    # forward sweep with seed x1, then seed x2 (tangents by hand)
    def tangent(t1, t2):
        t3 = t1 * v2 + v1 * t2
        t4 = t1 * math.cos(v1)
        t6 = -t2 * v6
        return (t3 + t4) * v6 + v5 * t6
    # reverse sweep (adjoints by hand)
    a7 = 1.0
    a6, a5 = a7 * v5, a7 * v6
    a4 = a3 = a5
    a2 = a3 * v1 - a6 * v6
    a1 = a3 * v2 + a4 * math.cos(v1)
    return dict(trace=np.array([v1, v2, v3, v4, v5, v6, v7]), f=v7, df_dx1=a1, df_dx2=a2,
                tangent_x1=tangent(1.0, 0.0), tangent_x2=tangent(0.0, 1.0),
                adjoints=np.array([a1, a2, a3, a4, a5, a6, a7]),
                hand_dx1=(x2 + math.cos(x1)) * math.exp(-x2),
                hand_dx2=(x1 - x1 * x2 - math.sin(x1)) * math.exp(-x2))


def _f_adjit():
    f, (g1, g2) = adjit.value_and_grad(f_running, argnums=(0, 1))(F_X1, F_X2)
    p1, t1 = adjit.jvp(f_running, (F_X1, F_X2), (f64(1.0), f64(0.0)))
    p2, t2 = adjit.jvp(f_running, (F_X1, F_X2), (f64(0.0), f64(1.0)))
    np.testing.assert_allclose([p1, p2], [f, f], rtol=1e-15)
    v3, v4, v6 = F_X1 * F_X2, np.sin(F_X1), np.exp(-F_X2)
    a3, a4, _ = adjit.grad(f_tail, argnums=(0, 1, 2))(v3, v4, v6)
    a5, a6 = adjit.grad(lambda v5, v6_: v5 * v6_, argnums=(0, 1))(v3 + v4, v6)
    a7 = adjit.grad(lambda v7: v7)(f)
    return dict(f=f, df_dx1=g1, df_dx2=g2, tangent_x1=t1, tangent_x2=t2,
                adjoints=np.array([g1, g2, a3, a4, a5, a6, a7], dtype=float))


def test_003_running_function_forward_and_reverse(mode):
    """003_3202502544e00e7d.txt, 'Evaluation traces', 'Forward-mode automatic differentiation',
    'Reverse-mode automatic differentiation': f(x1, x2) = (x1 x2 + sin x1) exp(-x2) at
    (1.5, 0.5).  Printed: v1..v7 = [1.5 0.5 0.75 0.9975 1.7475 0.6065 1.0599];
    f(1.5, 0.5) = 1.059909; df/dx1 = 0.346170, df/dx2 = -0.150113 (by hand, by dual numbers
    with seeds (1, 0) and (0, 1), and by one reverse sweep); adjoints a1..a7 =
    [0.3462 -0.1501 0.6065 0.6065 0.6065 1.7475 1] (a3, a4, a6 by differentiating
    (v3 + v4) v6; a5 = a3 is the same adjoint)."""
    expected = dict(f=dec(1.059909, 6), df_dx1=dec(0.346170, 6), df_dx2=dec(-0.150113, 6),
                    tangent_x1=dec(0.346170, 6), tangent_x2=dec(-0.150113, 6),
                    adjoints=dec([0.3462, -0.1501, 0.6065, 0.6065, 0.6065, 1.7475, 1.0], 4))
    forward = dict(trace=dec([1.5, 0.5, 0.75, 0.9975, 1.7475, 0.6065, 1.0599], 4),
                   hand_dx1=dec(0.346170, 6), hand_dx2=dec(-0.150113, 6))
    run_example(mode, _f_adjit, _f_reference, expected, "003 f(x1, x2)", forward, rtol=1e-12)


def F2(x1, x2):
    """Two outputs that share the intermediate value u (a tuple: a pytree result)."""
    u = x1 * x2 + np.sin(x1)
    return u * np.exp(-x2), u / (1 + x2 ** 2)


def F2_vector(x):
    u = x[0] * x[1] + np.sin(x[0])
    return np.stack([u * np.exp(-x[1]), u / (1 + x[1] ** 2)])


R_DIR = (0.3, -1.2)


def _F2_reference():
    x1, x2 = 1.5, 0.5
    u = x1 * x2 + math.sin(x1)
    du = np.array([x2 + math.cos(x1), x1])                         # du/dx
    e, q = math.exp(-x2), 1 / (1 + x2 ** 2)
    J = np.array([du * e + np.array([0.0, -u * e]),
                  du * q + np.array([0.0, -u * 2 * x2 * q ** 2])])
    for k in range(2):
        assert_matches_central_differences(lambda x: F2_vector(x)[k], (f64([x1, x2]),), 0, J[k])
    return dict(col1=J[:, 0], Jr=J @ np.array(R_DIR), J=J)


def _F2_adjit():
    _, col1 = adjit.jvp(F2, (f64(1.5), f64(0.5)), (f64(1.0), f64(0.0)))
    _, Jr = adjit.jvp(F2, (f64(1.5), f64(0.5)), (f64(R_DIR[0]), f64(R_DIR[1])))
    _, Jr_vec = adjit.jvp(F2_vector, (f64([1.5, 0.5]),), (f64(R_DIR),))
    J = adjit.jacobian(F2_vector)(f64([1.5, 0.5]))
    np.testing.assert_allclose(np.asarray(Jr, float), Jr_vec, rtol=1e-13)
    return dict(col1=np.asarray(col1, float), Jr=np.asarray(Jr, float), J=J)


def test_003_forward_mode_two_outputs(mode):
    """003_3202502544e00e7d.txt, 'Forward-mode automatic differentiation', F2(x1, x2) = (u e^-x2,
    u / (1 + x2^2)), u = x1 x2 + sin x1, at (1.5, 0.5): one pass seeded with e_1 gives
    'column 1 of J: [0.3462 0.4566]'; one pass seeded with r = (0.3, -1.2) gives
    'J r: [0.284 0.0391]' (adjit.jvp with tuple outputs, and adjit.jacobian)."""
    expected = dict(col1=dec([0.3462, 0.4566], 4), Jr=dec([0.284, 0.0391], 4))
    run_example(mode, _F2_adjit, _F2_reference, expected, "003 F2 forward mode", rtol=1e-12)


def newton_sqrt(a_, iters):
    y = a_
    for _ in range(iters):
        y = 0.5 * (y + a_ / y)
    return y


NEWTON_PRINTED = {1: (1.5000000000, 0.5000000000), 2: (1.4166666667, 0.3611111111),
                  3: (1.4142156863, 0.3535659362), 5: (1.4142135624, 0.3535533906)}


@pytest.mark.parametrize("iters", sorted(NEWTON_PRINTED), ids=lambda k: f"{k}_steps")
def test_003_newton_sqrt_through_loop(mode, iters):
    """003_3202502544e00e7d.txt, 'Forward-mode automatic differentiation' (dual numbers through
    control flow) and 'A small autograd engine' (the same in reverse mode): sqrt(2) by
    Newton steps y <- (y + a/y)/2 from y = a, a Python loop unrolled by tracing.  Printed:
    1 step 1.5000000000 / 0.5000000000, 2 steps 1.4166666667 / 0.3611111111, 3 steps
    1.4142156863 / 0.3535659362, 5 steps 1.4142135624 / 0.3535533906 (value / derivative),
    and 'd sqrt(a)/da at a = 2 through 5 Newton steps: 0.3535533906' in reverse mode."""
    value, deriv = NEWTON_PRINTED[iters]
    expected = dict(value=dec(value, 10), deriv=dec(deriv, 10))

    def reference():
        a_, y, dy = 2.0, 2.0, 1.0
        for _ in range(iters):   # tangent recursion by hand: d(a/y) = 1/y - a dy / y^2
            y, dy = 0.5 * (y + a_ / y), 0.5 * (dy + 1 / y - a_ * dy / y ** 2)
        return dict(value=y, deriv=dy, fwd_value=y, fwd_deriv=dy)

    def with_adjit():
        fn = lambda s: newton_sqrt(s, iters)
        val, d = adjit.value_and_grad(fn)(f64(2.0))
        fval, fd = adjit.jvp(fn, (f64(2.0),), (f64(1.0),))
        return dict(value=val, deriv=d, fwd_value=fval, fwd_deriv=fd)

    run_example(mode, with_adjit, reference, expected, f"003 Newton sqrt, {iters} steps", rtol=1e-13)


# --- training a network with the engine ------------------------------------------------------

def softplus_np(x):
    """ln(1 + e^x), written stably as in the text."""
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def rings_mlp_logits(params, X):
    W1, b1, W2, b2, W3, b3 = params
    h = np.tanh(X @ W1.T + b1)
    h = np.tanh(h @ W2.T + b2)
    return (h @ W3.T + b3)[:, 0]


def rings_bce(params, X, t):
    """Mean binary cross-entropy (1/N) sum ln(1 + e^a) - t a from the output pre-activation a."""
    act = rings_mlp_logits(params, X)
    return (softplus_np(act) - t * act).mean()


def seed003_rings():
    """rng_v = default_rng(3): make_rings(100) then ValueMLP([2, 8, 8, 1]) (scalar draws in
    row order); returns the generator too, for the training permutations that follow."""
    rng_v = np.random.default_rng(3)
    t = rng_v.integers(0, 2, 100)
    r = np.where(t == 1, 1.5, 0.7) + 0.25 * rng_v.normal(size=100)
    theta = rng_v.uniform(0, 2 * np.pi, 100)
    X = np.column_stack([r * np.cos(theta), r * np.sin(theta)])
    params = []
    for d_in, d_out in [(2, 8), (8, 8), (8, 1)]:
        W = np.array([[rng_v.normal(0, 1 / math.sqrt(d_in)) for _ in range(d_in)] for _ in range(d_out)])
        params += [W, np.zeros(d_out)]
    return X, t.astype(np.float64), params, rng_v


def hand_rings_grad(params, X, t):
    W1, b1, W2, b2, W3, b3 = params
    h1 = np.tanh(X @ W1.T + b1)
    h2 = np.tanh(h1 @ W2.T + b2)
    act = (h2 @ W3.T + b3)[:, 0]
    da = (1 / (1 + np.exp(-act)) - t)[:, None] / len(t)   # softplus' = sigmoid
    g2 = (da @ W3) * (1 - h2 ** 2)
    g1 = (g2 @ W2) * (1 - h1 ** 2)
    return [g1.T @ X, g1.sum(0), g2.T @ h1, g2.sum(0), da.T @ h2, da.sum(0)]


def _rings_run(grad_fn):
    X, t, params, rng_v = seed003_rings()
    E0 = rings_bce(params, X, t)
    g0 = grad_fn(params, X, t)
    vel = [np.zeros_like(p) for p in params]
    curve = {}
    for epoch in range(1, 31):
        for idx in np.split(rng_v.permutation(len(X)), 4):
            g = grad_fn(params, X[idx], t[idx])
            vel = [0.9 * v_ + gk for v_, gk in zip(vel, g)]
            params = [p - 0.1 * v_ for p, v_ in zip(params, vel)]
        if epoch in (1, 5, 10, 20, 30):
            curve[epoch] = (rings_bce(params, X, t), np.mean((rings_mlp_logits(params, X) > 0) == t))
    out = dict(E0=E0, **{f"g0_{k}": gk for k, gk in enumerate(g0)})
    out.update({f"error_epoch{e}": c[0] for e, c in curve.items()})
    out.update({f"accuracy_epoch{e}": c[1] for e, c in curve.items()})
    return out


def _rings_reference():
    X, t, params, _ = seed003_rings()
    assert_matches_central_differences(rings_bce, (params, X[:10], t[:10]), 0, hand_rings_grad(params, X[:10], t[:10]))
    return _rings_run(hand_rings_grad)


def _rings_adjit():
    g = adjit.grad(rings_bce)
    X, t, params, _ = seed003_rings()
    assert len(g(params, X, t)) == 6 and sum(p.size for p in params) == 105
    return _rings_run(g)


def test_003_training_with_the_engine(mode):
    """003_3202502544e00e7d.txt, 'Training a network with the engine': a tanh MLP [2, 8, 8, 1] on
    two noisy rings (default_rng(3)), mean binary cross-entropy from the output pre-activation.
    Printed: '105 weights', 'E = 0.813321'; training with mini-batches of 25, lr 0.1, momentum
    0.9: epoch 1 0.7230 / 0.53, epoch 5 0.6100 / 0.69, epoch 10 0.4429 / 0.83, epoch 20
    0.1553 / 0.96, epoch 30 0.0763 / 0.99 (training error / accuracy); here the gradients come
    from adjit.grad (or by hand) instead of the scalar engine."""
    expected = dict(E0=dec(0.813321, 6))
    for epoch, (err, acc) in {1: (0.7230, 0.53), 5: (0.6100, 0.69), 10: (0.4429, 0.83),
                              20: (0.1553, 0.96), 30: (0.0763, 0.99)}.items():
        expected[f"error_epoch{epoch}"] = dec(err, 4)
        expected[f"accuracy_epoch{epoch}"] = dec(acc, 2)
    run_example(mode, _rings_adjit, _rings_reference, expected, "003 training on rings", rtol=1e-7, atol=1e-10)


# ======================================================================================
# 004: deep networks post
# ======================================================================================

def one_neuron_loss(w1, b1, w2, b2, x, y):
    x1 = np.maximum(0, w1 * x + b1)
    return (y - (w2 * x1 + b2)) ** 2


NEURON = dict(w1=f64(1.0), b1=f64(0.0), w2=f64(0.5), b2=f64(0.0), x=f64(2.0), y=f64(3.0))


def _neuron_after_step(w1, w2, dw1, dw2, eta=0.05):
    w1, w2 = w1 - eta * dw1, w2 - eta * dw2
    out = w2 * np.maximum(0, w1 * NEURON["x"])
    return dict(w1_new=w1, w2_new=w2, out_new=out, L_new=(NEURON["y"] - out) ** 2)


def _neuron_reference():
    n = NEURON
    z1 = n["w1"] * n["x"] + n["b1"]
    x1 = np.maximum(0, z1)
    x2 = n["w2"] * x1 + n["b2"]
    L = (n["y"] - x2) ** 2
    d2 = -2 * (n["y"] - x2)
    d1 = d2 * n["w2"] * (z1 > 0)
    args = tuple(n[k] for k in ("w1", "b1", "w2", "b2", "x", "y"))
    for i, g in enumerate([d1 * n["x"], d1, d2 * x1, d2]):
        assert_matches_central_differences(one_neuron_loss, args, i, g)
    return dict(z1=z1, x1=x1, x2=x2, L=L, delta2=d2, delta1=d1, dw2=d2 * x1, dw1=d1 * n["x"], db2=d2, db1=d1,
                **_neuron_after_step(n["w1"], n["w2"], d1 * n["x"], d2 * x1))


def _neuron_adjit():
    n = NEURON
    args = tuple(n[k] for k in ("w1", "b1", "w2", "b2", "x", "y"))
    L, (dw1, db1, dw2, db2) = adjit.value_and_grad(one_neuron_loss, argnums=(0, 1, 2, 3))(*args)
    x1 = np.maximum(0, n["w1"] * n["x"])
    delta2 = adjit.grad(lambda z2: (n["y"] - z2) ** 2)(n["w2"] * x1)
    delta1 = adjit.grad(lambda z1: (n["y"] - n["w2"] * np.maximum(0, z1)) ** 2)(n["w1"] * n["x"])
    return dict(L=L, delta2=delta2, delta1=delta1, dw2=dw2, dw1=dw1, db2=db2, db1=db1,
                **_neuron_after_step(n["w1"], n["w2"], dw1, dw2))


def test_004_one_neuron_per_layer(mode):
    """004_51de4f2ed164e734.txt, 'Backpropagation', the example with one neuron per layer:
    x = 2, w1 = 1 with a ReLU, w2 = 0.5 linear output, zero biases, y = 3, L = (y - x2)^2.
    Printed: z1 = 2, x1 = 2, x2 = 1, loss 4; delta2 = -4, delta1 = -2; dL/dw2 = -8,
    dL/dw1 = -4, bias derivatives -4 and -2; one step with eta = 0.05 gives w1 = 1.2,
    w2 = 0.9, output 2.16 and loss 0.71."""
    expected = dict(L=dec(4, 12), delta2=dec(-4, 12), delta1=dec(-2, 12), dw2=dec(-8, 12), dw1=dec(-4, 12),
                    db2=dec(-4, 12), db1=dec(-2, 12), w1_new=dec(1.2, 12), w2_new=dec(0.9, 12),
                    out_new=dec(2.16, 12), L_new=dec(0.71, 2))
    forward = dict(z1=dec(2, 12), x1=dec(2, 12), x2=dec(1, 12))
    run_example(mode, _neuron_adjit, _neuron_reference, expected, "004 one neuron per layer", forward, rtol=1e-14)


def mml_f(x):
    """f(x) = sqrt(x^2 + exp(x^2)) + cos(x^2 + exp(x^2)) with the intermediate variables."""
    a_ = x ** 2
    b_ = np.exp(a_)
    c_ = a_ + b_
    return np.sqrt(c_) + np.cos(c_)


def _mml_reference():
    x = 1.0
    a_ = x ** 2
    b_ = math.exp(a_)
    c_ = a_ + b_
    d_, e_ = math.sqrt(c_), math.cos(c_)
    f_c = 1 / (2 * d_) - math.sin(c_)         # df/dc = df/dd dd/dc + df/de de/dc
    f_b = f_c
    f_a = b_ * f_b + f_c
    f_x = 2 * x * f_a
    closed = 2 * x * (1 / (2 * math.sqrt(c_)) - math.sin(c_)) * (1 + math.exp(x ** 2))
    assert abs(closed - f_x) < 1e-12
    return dict(a=a_, b=b_, c=c_, d=d_, e=e_, f=d_ + e_, df_dc=f_c, df_db=f_b, df_da=f_a, df_dx=f_x)


def _mml_adjit():
    f, df_dx = adjit.value_and_grad(mml_f)(f64(1.0))
    a_ = f64(1.0)
    b_ = np.exp(a_)
    c_ = a_ + b_
    df_dc = adjit.grad(lambda c: np.sqrt(c) + np.cos(c))(c_)
    df_db = adjit.grad(lambda b, a1: np.sqrt(a1 + b) + np.cos(a1 + b))(b_, a_)
    df_da = adjit.grad(lambda a1: np.sqrt(a1 + np.exp(a1)) + np.cos(a1 + np.exp(a1)))(a_)
    return dict(f=f, df_dx=df_dx, df_dc=df_dc, df_db=df_db, df_da=df_da)


def test_004_autodiff_graph_example(mode):
    """004_51de4f2ed164e734.txt, 'Automatic Differentiation' (Mathematics for Machine Learning,
    example 5.14): f(x) = sqrt(x^2 + exp(x^2)) + cos(x^2 + exp(x^2)) at x = 1.  Printed:
    a = 1, b = 2.718, c = 3.718, d = 1.928, e = -0.838, f = 1.090; df/dc = 0.805,
    df/db = 0.805, df/da = 2.992, df/dx = 5.98."""
    expected = dict(f=dec(1.090, 3), df_dc=dec(0.805, 3), df_db=dec(0.805, 3), df_da=dec(2.992, 3),
                    df_dx=dec(5.98, 2))
    forward = dict(a=dec(1, 12), b=dec(2.718, 3), c=dec(3.718, 3), d=dec(1.928, 3), e=dec(-0.838, 3))
    run_example(mode, _mml_adjit, _mml_reference, expected, "004 autodiff graph", forward, rtol=1e-12)
