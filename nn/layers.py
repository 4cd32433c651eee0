"""Layers built from adjit's NumPy-compatible ops: a multilayer perceptron (MLP).

Input: layer widths and an activation name; output: parameters as a dict of arrays (a pytree
that adjit.grad and the optimizers walk) and `apply(params, X) -> logits`, which traces under
adjit.grad/compile and also runs eagerly on NumPy arrays. Weights are stored (out, in), as in
PyTorch's nn.Linear, so a layer computes `X @ W.T + b`.
"""

import numpy as np

from ..frontend.functions import relu, sigmoid
from ..ir.errors import ShapeError

__all__ = ["MLP", "ACTIVATIONS"]

# name -> (function, initialization): He for ReLU, which zeroes about half of its inputs;
# Xavier (Glorot) for the bounded, zero-centred ones (seed 004, "Backpropagation").
ACTIVATIONS = {
    "relu": (relu, "he"),
    "tanh": (np.tanh, "xavier"),
    "sigmoid": (sigmoid, "xavier"),
}


def _is_width(s):
    if isinstance(s, bool):
        return False
    if isinstance(s, (int, np.integer)):
        return s > 0
    return isinstance(s, (float, np.floating)) and float(s).is_integer() and s > 0


class MLP:
    """A fully connected network: `sizes[0]` inputs, hidden layers, `sizes[-1]` outputs.

    Hidden layers apply `activation`; the output layer is linear (logits).

    >>> import numpy as np
    >>> net = MLP([4, 8, 3])
    >>> params = net.init(seed=0)
    >>> sorted((k, v.shape) for k, v in params.items())
    [('W1', (8, 4)), ('W2', (3, 8)), ('b1', (8,)), ('b2', (3,))]
    >>> net.apply(params, np.ones((2, 4), np.float32)).shape
    (2, 3)
    """

    def __init__(self, sizes, activation="relu", dtype=np.float32):
        given = list(sizes)
        # whole numbers only: int(2.5) or int("a") would build another network or fail
        # with a message that does not say which argument is wrong
        if len(given) < 2 or not all(_is_width(s) for s in given):
            raise ValueError(f"MLP sizes must be at least two positive whole-number widths "
                             f"(inputs, ..., outputs), got {given}")
        sizes = [int(s) for s in given]
        if not np.issubdtype(np.dtype(dtype), np.floating):
            raise ValueError(f"MLP dtype must be a floating-point type such as np.float32, "
                             f"got {np.dtype(dtype)} (integer weights cannot be trained)")
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose one of "
                             f"{', '.join(ACTIVATIONS)}")
        self.sizes, self.activation, self.dtype = sizes, activation, np.dtype(dtype)

    @property
    def num_layers(self):
        return len(self.sizes) - 1

    def init(self, seed=0):
        """Parameters {"W1": (out, in), "b1": (out,), ...}: He or Xavier weights, zero biases.

        He: normal with variance 2 / n_in. Xavier: uniform on +-sqrt(6 / (n_in + n_out)),
        variance 2 / (n_in + n_out) (Glorot and Bengio 2010, eq. 16).
        """
        if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed < 0:
            raise ValueError(f"MLP.init: the seed must be a non-negative integer, got {seed}")
        rng = np.random.default_rng(seed)
        scheme = ACTIVATIONS[self.activation][1]
        params = {}
        for i, (n_in, n_out) in enumerate(zip(self.sizes[:-1], self.sizes[1:]), start=1):
            if scheme == "he":
                w = rng.standard_normal((n_out, n_in)) * np.sqrt(2.0 / n_in)
            else:
                limit = np.sqrt(6.0 / (n_in + n_out))
                w = rng.uniform(-limit, limit, (n_out, n_in))
            params[f"W{i}"] = w.astype(self.dtype)
            params[f"b{i}"] = np.zeros(n_out, self.dtype)
        return params

    def apply(self, params, X):
        """Logits for a batch X of shape (n, sizes[0])."""
        if X.shape[-1] != self.sizes[0]:
            raise ShapeError(f"MLP{self.sizes}: the input has {X.shape[-1]} features per "
                             f"example (shape {tuple(X.shape)}), the first layer expects "
                             f"{self.sizes[0]}")
        missing = [k for i in range(1, self.num_layers + 1) for k in (f"W{i}", f"b{i}")
                   if k not in params]
        if missing:
            raise KeyError(f"MLP{self.sizes}: params has no {', '.join(missing)} (it has "
                           f"{', '.join(map(str, params)) or 'nothing'}); make them with "
                           "MLP.init, for the same sizes")
        act = ACTIVATIONS[self.activation][0]
        h = X
        for i in range(1, self.num_layers + 1):
            W, b = params[f"W{i}"], params[f"b{i}"]
            z = h @ W.T + b
            h = act(z) if i < self.num_layers else z
        return h

    __call__ = apply

    def num_params(self):
        return sum(o * i + o for i, o in zip(self.sizes[:-1], self.sizes[1:]))

    def __repr__(self):
        return f"MLP({self.sizes}, activation={self.activation!r})"
