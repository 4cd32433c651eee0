"""adjit: trace a NumPy loss into a graph, derive its adjoint, and generate fast code.

>>> import numpy as np, adjit
>>> adjit.grad(lambda w: np.mean((w * 2.0 - 1.0) ** 2))(np.array([0.0, 1.0]))
array([-2.,  2.])
"""
from .backends.runtime import MemoryReport, Program, measure_peak_memory, tune_malloc
from .frontend.api import (Compiled, compile, grad, gradcheck, hessian, hvp, jacobian,
                           jvp, value_and_grad, vjp, vmap)
from .frontend.custom import custom_jvp, custom_vjp
from .frontend.functions import (erf, erfc, logsumexp, log_softmax, one_hot, relu, sigmoid,
                                 softmax, softplus, stop_gradient, where)
from .frontend.trace import trace
from .ir.errors import (AdjitError, AdjitWarning, BudgetError, GradError, LibraryError,
                        OptionError, ShapeError, TraceError, UnsupportedError, VerifyError)
from .ir.graph import Graph

__all__ = ["AdjitError", "AdjitWarning", "BudgetError", "Compiled", "Graph", "GradError", "LibraryError", "MemoryReport", "OptionError",
           "Program", "ShapeError", "TraceError", "UnsupportedError", "VerifyError",
           "compile", "custom_jvp", "custom_vjp", "grad", "gradcheck", "hessian", "hvp", "jacobian", "jvp",
           "erf", "erfc", "log_softmax", "logsumexp", "measure_peak_memory", "one_hot", "relu", "sigmoid",
           "softmax", "softplus", "stop_gradient", "trace", "tune_malloc", "value_and_grad", "vjp", "vmap",
           "where"]
__version__ = "0.1.0"


def __getattr__(name):
    # `import adjit` then `adjit.nn.Adam`: the training package loads on first use
    if name == "nn":
        import importlib
        return importlib.import_module(".nn", __name__)
    raise AttributeError(f"module 'adjit' has no attribute {name!r}")
