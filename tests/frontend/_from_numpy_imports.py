"""A user module that imports NumPy's constructors by name (test_sweep22)."""
import numpy as np
from numpy import max, mean, r_, sum as npsum, zeros


def filled(x):
    y = zeros(3)
    y[0] = x[0]
    return y


def complex_filled(x):
    m = zeros((2, 2), dtype=complex)
    m[0, 0] = np.exp(1j * x[0])
    return m


def joined(x):
    return npsum(r_[0.0, x, 1.0] ** 2) + npsum(np.stack([x[0], x[1]]))


def pooled(x, how=max):
    # a NumPy function compared by identity stays NumPy's own while tracing
    if how is max:
        return np.sum(max(x) * x)
    return np.sum(mean(x) * x)
