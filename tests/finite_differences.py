"""Central differences for the tests that compare a gradient element by element."""
import numpy as np


def numgrad(f, x, eps=1e-6):
    """d f / d x by central differences, one element of x at a time (x float64)."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g
