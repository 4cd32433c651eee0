"""Reading the backward code adjit generates for a two-layer network.

Seed 004 derives the backward pass of a layer by hand: with Z = X W^T + b and an error G of
the layer's output, grad W = G^T X, grad b = the column sums of G, and the error of X is
G W; a tanh layer multiplies the error by 1 - tanh(Z)^2. This script prints the program
adjit generates for the loss's value and gradient: the statements under `# backward`
are those formulas, each commented with the forward line it differentiates. It then
checks them against the hand-written formulas.

Run: python examples/read_backward.py
"""
import numpy as np

import adjit


def loss(params, X, y):
    h = np.tanh(X @ params["W1"].T + params["b1"])
    out = h @ params["W2"].T + params["b2"]
    return np.mean((out - y) ** 2)


def by_hand(params, X, y):
    """The backward pass of seed 004, written out."""
    h = np.tanh(X @ params["W1"].T + params["b1"])
    out = h @ params["W2"].T + params["b2"]
    G2 = 2 * (out - y) / out.size                     # d mean((out - y)^2) / d out
    G1 = (G2 @ params["W2"]) * (1 - h ** 2)           # through W2, then tanh'
    return {"W1": G1.T @ X, "b1": G1.sum(0), "W2": G2.T @ h, "b2": G2.sum(0)}


def main(backend="numpy"):
    rng = np.random.default_rng(0)
    params = {"W1": rng.standard_normal((8, 3)), "b1": np.zeros(8),
              "W2": rng.standard_normal((1, 8)), "b2": np.zeros(1)}
    X, y = rng.standard_normal((16, 3)), rng.standard_normal((16, 1))

    value_and_grad = adjit.value_and_grad(loss, backend=backend)
    program = value_and_grad.lower(params, X, y)
    backward = program.source[program.source.index("# backward"):]
    print("The backward half of the generated code:\n")
    print("    " + backward.strip())
    value, grads = value_and_grad(params, X, y)
    expected = by_hand(params, X, y)
    worst = max(float(np.max(np.abs(grads[k] - expected[k]))) for k in expected)
    print(f"\nlargest difference from the hand-written backward pass: {worst:.1e}")
    return worst


if __name__ == "__main__":
    main()
