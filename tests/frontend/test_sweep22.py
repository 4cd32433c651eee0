"""Regressions from the eleventh session (sweep 22)."""
import numpy as np
import pytest

import adjit


def _numgrad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def _thomas(a, b, c, d):
    n = len(d)
    cp, dp, x = np.zeros(n), np.zeros(n), np.zeros(n)
    cp[0] = c[0] / b[0]
    dp[0] = d[0] / b[0]
    for i in range(1, n):
        m = b[i] - a[i] * cp[i - 1]
        cp[i] = c[i] / m
        dp[i] = (d[i] - a[i] * dp[i - 1]) / m
    x[-1] = dp[-1]
    for i in range(n - 2, -1, -1):          # back substitution: written last to first
        x[i] = dp[i] - cp[i] * x[i + 1]
    return x


def test_elements_written_last_to_first_are_joined_in_order_without_a_gather():
    rng = np.random.default_rng(0)
    n = 40
    a, c, d = rng.normal(size=(3, n))
    b = 4 + rng.random(n)
    loss = lambda b: np.sum(_thomas(a, b, c, d) ** 2)
    np.testing.assert_allclose(adjit.compile(lambda b: _thomas(a, b, c, d))(b),
                               _thomas(a, b, c, d), rtol=1e-13)
    g = adjit.grad(loss)
    np.testing.assert_allclose(g(b), _numgrad(loss, b), rtol=1e-6, atol=1e-9)
    ops = [g.lower(b).graph[n]["op"] for n in g.lower(b).graph.nodes()]
    # the writes were joined in the array's order: no gather, so no scatter in the backward
    # and no guards for cotangents that might be structural zeros (they are not)
    assert "gather" not in ops and "scatter_add" not in ops and "where" not in ops


@pytest.mark.parametrize("order", ["reversed", "shuffled", "pairs", "scattered"])
def test_writes_in_any_order_read_back_as_numpy(order):
    rng = np.random.default_rng(1)
    n = 30
    if order == "reversed":
        keys = [slice(i, i + 1) for i in range(n - 1, -1, -1)]
    elif order == "shuffled":
        keys = [int(i) for i in rng.permutation(n)]
    elif order == "pairs":
        keys = [slice(i, i + 2) for i in range(n - 2, -1, -2)]
    else:
        keys = [int(i) for i in rng.choice(n, 12, replace=False)]

    def fill(x):
        y = np.full(n, 0.5)
        for k, key in enumerate(keys):
            y[key] = x[key] * (k + 1.0)
        return y * x

    x = rng.normal(size=n)
    np.testing.assert_array_equal(adjit.compile(fill)(x), fill(x))
    loss = lambda x: np.sum(np.sin(fill(x)))
    np.testing.assert_allclose(adjit.grad(loss)(x), _numgrad(loss, x), rtol=1e-6, atol=1e-9)
