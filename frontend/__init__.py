"""Frontend: tracing NumPy code into IR (tracer, NumPy dispatch, functions, API)."""
from . import numpy_api  # noqa: F401 - installs the operators and methods on Tracer
