"""Backend lookup: "numpy" | "numba" | "cupy" | "auto" -> a backend module with build()."""
from __future__ import annotations

import importlib
import logging

from ..ir.errors import AdjitError

_MODULES = {"numpy": "numpy_backend", "numba": "numba_backend", "cupy": "cupy_backend"}
_log = logging.getLogger("adjit")


def available(name) -> bool:
    try:
        mod = importlib.import_module(f"adjit.backends.{_MODULES[name]}")
    except ImportError:
        return False
    return getattr(mod, "usable", lambda: True)()


def resolve(name):
    """The backend module for `name`; "auto" is cupy with a GPU, else numba, else numpy."""
    if name == "auto":
        for cand in ("cupy", "numba", "numpy"):
            if cand in _MODULES and available(cand):
                name = cand
                break
    if name not in _MODULES:
        raise AdjitError(f"unknown backend {name!r}; choose one of numpy, numba, cupy, auto")
    try:
        mod = importlib.import_module(f"adjit.backends.{_MODULES[name]}")
    except ImportError as e:
        raise AdjitError(f"backend {name!r} is not available: {e}") from None
    if not getattr(mod, "usable", lambda: True)():
        raise AdjitError(f"backend {name!r} cannot run here: {mod.why_unusable()}")
    return mod
