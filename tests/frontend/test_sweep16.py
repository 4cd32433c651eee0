"""Regressions from the seventh session's sweep: code ported from HIPS/autograd's examples and
tests, google/tangent's test functions, JAX's NumPy op records, and the GPU path."""
import numpy as np
import pytest

import adjit


@pytest.mark.parametrize("fn", [lambda x: np.dot(2.0, x), lambda x: np.dot(x, 2.0),
                                lambda x: x.dot(np.float32(2.0)), lambda x: np.dot(x[0, 0, 0], x)])
def test_dot_of_a_0d_and_an_nd_array_is_a_product(fn):
    x = np.arange(24.0).reshape(2, 3, 4)
    got, want = adjit.compile(fn, backend="numpy")(x), fn(x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
