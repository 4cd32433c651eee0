"""Hand-written NumPy backpropagation for an MLP: the baseline adjit is benchmarked against.

These are the modules of the seed text 001 ("Layers as modules with forward and backward"):
Linear, ReLU, Tanh, a fused SoftmaxCrossEntropy and a Sequential container, with the batch
rules of that text (rows are examples, W stored (out, in) as in PyTorch's nn.Linear):

    Z = A W^T + 1 b^T        grad W = G^T A,   grad b = column sums of G,   dL/dA = G W
    ReLU: G * [Z > 0]        Tanh: G * (1 - T^2)
    mean softmax cross-entropy: dL/dZ = (P - Y) / n   (the 1/n enters once, at the top)

Written as a competent engineer would write it by hand: forward caches only what backward
needs (the input of each Linear, whose ReLU mask is recovered from it, and the output of
each Tanh), temporaries are updated in place where nothing else needs them, no gradient is
computed for the input X, and caches are dropped as soon as backward has used them, so the
peak memory is that of an ordinary hand-written training step.

    params = make_mlp([784, 256, 256, 10], seed=0, dtype=np.float32)
    loss, grads = loss_and_grads(params, X, labels)     # grads has the keys of params

Run this file to check the gradients against central differences in float64.
"""

import time

import numpy as np

__all__ = ["Linear", "ReLU", "Tanh", "SoftmaxCrossEntropy", "Sequential",
           "make_mlp", "build_mlp", "forward", "loss_and_grads"]


class Linear:
    """Z = A W^T + b for a batch A of shape (n, in); W has shape (out, in)."""

    __slots__ = ("w", "b", "A")

    def __init__(self, w_name, b_name):
        self.w, self.b, self.A = w_name, b_name, None

    def forward(self, params, A):
        self.A = A                                   # cache the input: grad W needs it
        Z = A @ params[self.w].T
        Z += params[self.b]
        return Z

    def backward(self, params, G, grads, need_input_grad=True):
        grads[self.w] = G.T @ self.A                 # (out, n) @ (n, in) = (out, in)
        grads[self.b] = G.sum(axis=0)                # column sums
        self.A = None
        return G @ params[self.w] if need_input_grad else None   # (n, out) @ (out, in)


class ReLU:
    """max(Z, 0), computed in place; backward multiplies by the mask [output > 0]."""

    __slots__ = ("out",)

    def __init__(self):
        self.out = None

    def forward(self, params, Z):
        self.out = np.maximum(Z, 0, out=Z)           # Z is a temporary of the Linear before
        return self.out

    def backward(self, params, G, grads, need_input_grad=True):
        np.multiply(G, self.out > 0, out=G)          # [out > 0] == [Z > 0]
        self.out = None
        return G


class Tanh:
    """tanh(Z), computed in place; caches its output T, backward multiplies by 1 - T^2."""

    __slots__ = ("out",)

    def __init__(self):
        self.out = None

    def forward(self, params, Z):
        self.out = np.tanh(Z, out=Z)
        return self.out

    def backward(self, params, G, grads, need_input_grad=True):
        d = np.multiply(self.out, self.out)
        np.subtract(1, d, out=d)
        G *= d
        self.out = None
        return G


class SoftmaxCrossEntropy:
    """Mean cross-entropy of logits against integer labels, fused with the softmax.

    Stable through the log-sum-exp: L = mean(log sum_j exp(z_j - m) - (z_y - m)).
    The logits array is overwritten with the probabilities P, which backward turns into
    (P - Y) / n in place."""

    __slots__ = ("P", "labels")

    def __init__(self):
        self.P = self.labels = None

    def forward(self, Z, labels):
        n = Z.shape[0]
        Z -= Z.max(axis=1, keepdims=True)
        picked = Z[np.arange(n), labels]             # z_y - m, before exp overwrites Z
        np.exp(Z, out=Z)
        s = Z.sum(axis=1)
        loss = float(np.mean(np.log(s) - picked))
        Z /= s[:, None]
        self.P, self.labels = Z, labels
        return loss

    def backward(self):
        G, n = self.P, self.P.shape[0]
        G[np.arange(n), self.labels] -= 1            # P - Y
        G *= G.dtype.type(1.0 / n)                   # the 1/n of the mean
        self.P = self.labels = None
        return G


class Sequential:
    """Runs the modules forward in order and backward in reverse."""

    def __init__(self, *layers):
        self.layers = layers

    def forward(self, params, X):
        for layer in self.layers:
            X = layer.forward(params, X)
        return X

    def backward(self, params, G, grads):
        first = 0                                    # no gradient for the data X
        for k in range(len(self.layers) - 1, -1, -1):
            G = self.layers[k].backward(params, G, grads, need_input_grad=k != first)
        return grads


_ACTIVATIONS = {"relu": ReLU, "tanh": Tanh}


def _n_layers(params):
    n = 0
    while f"W{n + 1}" in params:
        n += 1
    if n == 0:
        raise ValueError("params must hold W1, b1, W2, b2, ...")
    return n


def build_mlp(n_layers, activation="relu"):
    """Linear, activation, Linear, ..., Linear over the keys W1, b1, ..., W{n}, b{n}."""
    act = _ACTIVATIONS[activation]
    layers = []
    for k in range(1, n_layers + 1):
        layers.append(Linear(f"W{k}", f"b{k}"))
        if k < n_layers:
            layers.append(act())
    return Sequential(*layers)


def make_mlp(sizes, seed, dtype=np.float32, activation="relu"):
    """Parameters {"W1", "b1", "W2", ...} of an MLP with layer widths `sizes`.

    W_k has shape (sizes[k], sizes[k-1]) (out, in), drawn from N(0, 2/in) for ReLU (He) or
    N(0, 1/in) for tanh, in float64 and then cast, so float32 and float64 networks made
    with the same seed hold the same numbers; biases start at zero."""
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, not {dtype}")
    gain = 2.0 if activation == "relu" else 1.0
    rng = np.random.default_rng(seed)
    params = {}
    for k, (d_in, d_out) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
        params[f"W{k}"] = (rng.standard_normal((d_out, d_in)) * np.sqrt(gain / d_in)).astype(dtype)
        params[f"b{k}"] = np.zeros(d_out, dtype=dtype)
    return params


def _prepare(params, X):
    dtype = params["W1"].dtype
    return np.asarray(X, dtype=dtype)


def forward(params, X, activation="relu"):
    """The logits of the MLP, (n, classes)."""
    return build_mlp(_n_layers(params), activation).forward(params, _prepare(params, X))


def loss_and_grads(params, X, labels, activation="relu"):
    """Mean softmax cross-entropy of the MLP on (X, labels) and its gradient.

    Returns (loss as a Python float, {"W1": ..., "b1": ..., ...}) with every gradient in the
    dtype and shape of its parameter."""
    net = build_mlp(_n_layers(params), activation)
    head = SoftmaxCrossEntropy()
    labels = np.asarray(labels, dtype=np.intp)
    loss = head.forward(net.forward(params, _prepare(params, X)), labels)
    grads = net.backward(params, head.backward(), {})
    return loss, {key: grads[key] for key in params}


# --------------------------------------------------------------------------------------
# self-check
# --------------------------------------------------------------------------------------

def _central_differences(params, X, labels, activation, eps=1e-5):
    numeric = {}
    for key, P in params.items():
        g = np.zeros_like(P)
        for idx in np.ndindex(P.shape):
            old = P[idx]
            P[idx] = old + eps
            up = loss_and_grads(params, X, labels, activation)[0]
            P[idx] = old - eps
            down = loss_and_grads(params, X, labels, activation)[0]
            P[idx] = old
            g[idx] = (up - down) / (2 * eps)
        numeric[key] = g
    return numeric


def relative_error(grads, numeric):
    """The seeds' gradient-check error: max |g - n| / max(|g|, |n|, 1e-8)."""
    worst = 0.0
    for key in grads:
        g, n = grads[key], numeric[key]
        worst = max(worst, float(np.max(np.abs(g - n) / np.maximum(np.maximum(np.abs(g), np.abs(n)), 1e-8))))
    return worst


def _self_check(eps=1e-5):
    """eps = 1e-5 is the best central step found in seed 003 ('Numerical differentiation');
    with 1e-6 the round-off of the differences (~1e-10) shows as a relative error of about
    2e-6 on the smallest gradient entries (~5e-5) of this network, a false alarm."""
    rng = np.random.default_rng(1)
    sizes, n = [5, 7, 6, 4], 9
    X = rng.standard_normal((n, sizes[0]))
    labels = rng.integers(0, sizes[-1], n)
    ok = True
    for activation in ("relu", "tanh"):
        params = make_mlp(sizes, seed=0, dtype=np.float64, activation=activation)
        params = {k: v + 0.1 * rng.standard_normal(v.shape) for k, v in params.items()}  # nonzero biases
        loss, grads = loss_and_grads(params, X, labels, activation)
        err = relative_error(grads, _central_differences(params, X, labels, activation, eps))
        n_params = sum(p.size for p in params.values())
        print(f"{activation}: MLP {sizes}, batch {n}, {n_params} parameters, loss {loss:.6f}; "
              f"largest relative error vs central differences (eps {eps:g}, float64): {err:.1e}")
        ok &= err < 1e-6
        # float32 gives the same gradients to single precision
        p32 = {k: v.astype(np.float32) for k, v in params.items()}
        loss32, g32 = loss_and_grads(p32, X, labels, activation)
        assert all(g32[k].dtype == np.float32 and g32[k].shape == params[k].shape for k in params)
        err32 = max(float(np.max(np.abs(g32[k] - grads[k]))) / max(float(np.max(np.abs(grads[k]))), 1e-30)
                    for k in params)
        print(f"      float32 vs float64: loss {abs(loss32 - loss):.1e} apart, gradients {err32:.1e} (relative to max)")
        ok &= err32 < 1e-4
    # the 001 running network: batch of two from the worked example
    p = {"W1": np.array([[1, -0.5], [-0.5, 1]]), "b1": np.array([0.5, -0.5]),
         "W2": np.array([[1, 1], [-1, 0.5]]), "b2": np.array([-0.5, 0.0])}
    loss, grads = loss_and_grads(p, np.array([[1.0, 2.0], [-1.0, 1.0]]), np.array([1, 0]))
    print(f"001 batch of two: loss {loss:.3f}, dW1 {np.round(grads['W1'], 3).tolist()} "
          f"(text: 1.003, [[0.731, 1.462], [0.308, 0.241]])")
    ok &= abs(loss - 1.003) < 5e-4 and np.allclose(grads["W1"], [[0.731, 1.462], [0.308, 0.241]], atol=5e-4)
    # a rough timing at MNIST size
    params = make_mlp([784, 256, 256, 10], seed=0, dtype=np.float32)
    X = rng.standard_normal((256, 784)).astype(np.float32)
    labels = rng.integers(0, 10, 256)
    loss_and_grads(params, X, labels)
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        loss_and_grads(params, X, labels)
    dt = (time.perf_counter() - t0) / reps
    print(f"timing: MLP [784, 256, 256, 10], batch 256, float32: {1e3 * dt:.2f} ms per loss_and_grads")
    print("self-check", "passed" if ok else "FAILED")
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if _self_check() else 1)
