"""Exception types for mistakes in user code or input; one place, so users can catch them.

Internal invariants use `assert`; everything a user can cause raises one of these, with a
message that names the user's file:line, the values involved, and what to do next.
"""


class AdjitError(Exception):
    """Base class of every error adjit raises for user input."""


class TraceError(AdjitError):
    """The function could not be traced (data-dependent control flow, unsupported call)."""


class ShapeError(AdjitError, ValueError):
    """Shapes or dtypes of operands do not fit the operation."""


class OutOfBoundsError(ShapeError, IndexError):
    """An index or axis outside the array: an IndexError too, as NumPy's are (its AxisError is
    a ValueError and an IndexError), so `except IndexError` in traced code behaves the same."""


class UnsupportedError(AdjitError, NotImplementedError):
    """A NumPy function or feature that adjit does not support."""


class LibraryError(UnsupportedError, TraceError):
    """A library routine (scipy.linalg, most of scipy.stats' statistics) that needs concrete
    values received traced ones: unsupported, and a tracing error, however it is caught."""


class GradError(AdjitError, TypeError):
    """A gradient was asked for something that has none (integer input, non-scalar output)."""


class VerifyError(AdjitError):
    """A graph broke an IR invariant; names the node and the pass that produced it."""


class BudgetError(AdjitError):
    """No checkpoint schedule fits under the requested memory budget."""


class OptionError(AdjitError, ValueError, TypeError):
    """A compile option has a value of the wrong kind or out of range (checkpoint=0,
    memory_budget="1MB"); the message names the option and what to pass."""


class AdjitWarning(UserWarning):
    """Something a compiled function does differently from NumPy's eager run, said rather
    than done silently (an argument dict changed inside a traced function)."""
