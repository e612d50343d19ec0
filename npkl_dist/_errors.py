"""Error and warning hierarchy.

Every error raised on user input names the argument, the value received and how to fix it.
Leaves also subclass the matching builtin so that ``except ValueError`` keeps working.
"""

from __future__ import annotations

__all__ = [
    "NpklError",
    "ValidationError",
    "ConstraintError",
    "GraphError",
    "InputFileError",
    "NpklWarning",
    "GraphWarning",
    "ConstraintWarning",
    "ConvergenceWarning",
]


class NpklError(Exception):
    """Base class of every error raised by npkl-dist."""


class ValidationError(NpklError, ValueError):
    """A parameter or array has a bad value (NaN, out of range, wrong shape, ...)."""


class ConstraintError(ValidationError):
    """The pairwise constraints are invalid or contradict each other.

    Attributes
    ----------
    pairs : list of tuple
        The offending ``(i, j, type)`` triples (possibly truncated in the message).
    """

    def __init__(self, message: str, pairs=()):
        super().__init__(message)
        self.pairs = list(pairs)


class GraphError(ValidationError):
    """The manifold graph or edge list is unusable."""


class InputFileError(NpklError, OSError):
    """A file given on the command line cannot be read in the expected format."""


class NpklWarning(UserWarning):
    """Base class of npkl-dist warnings (the test suite turns them into errors)."""


class GraphWarning(NpklWarning):
    """The graph works but has isolated points or several connected components."""


class ConstraintWarning(NpklWarning):
    """Constraints were merged (duplicates) or are unusually sparse."""


class ConvergenceWarning(NpklWarning):
    """A solver stopped at its iteration limit before meeting its tolerance."""


def fmt_value(value, limit: int = 80) -> str:
    """Short ``repr`` of a value for error messages."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
