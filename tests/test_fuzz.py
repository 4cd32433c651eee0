"""Differential fuzzing: random programs agree across backends and with central differences.

A short, reproducible run for CI (derandomized); `python benchmarks/fuzz.py --minutes 10` runs
the same check for longer with fresh random programs. Bugs the fuzzer found have regression
tests at the end of this file.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import adjit
from fuzzgen import check, programs

pytest.importorskip("numba")


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                 HealthCheck.data_too_large])
@given(programs())
def test_random_programs_agree(program):
    check(program)


# -- regressions: programs the fuzzer found ------------------------------------------------------
def test_no_cycle_through_a_third_group():
    """Group A's value reaches group B through a broadcast, and B's reaches A through a
    reduction: merging inside B must see the path through A (fusion made a cycle)."""
    def f(x0, x1):
        v0 = x0 / (x1 * x1 + 0.5)
        v3 = np.abs(np.abs(x0))
        return v0 + v3
    x0, x1 = np.array([0.7]), np.array([[-1.3]])
    vg = adjit.value_and_grad(lambda a, b: np.sum(f(a, b)), argnums=(0, 1))
    ref = adjit.value_and_grad(lambda a, b: np.sum(f(a, b)), argnums=(0, 1), backend="numpy",
                               fuse=False)(x0, x1)
    got = vg(x0, x1)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-14)
    for o, r in zip(got[1], ref[1]):
        np.testing.assert_allclose(o, r, rtol=1e-14)
