"""The docstring examples of the nn modules and the command line run as written."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize("mod", ["adjit.nn", "adjit.nn.layers", "adjit.nn.losses",
                                 "adjit.nn.optim", "adjit.nn.train", "adjit.nn.commands"])
def test_docstring_examples_run(mod):
    res = doctest.testmod(importlib.import_module(mod),
                          optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0 and res.attempted > 0
