"""Error and warning hierarchy.

Every error raised on user input names the argument, the value received and how to fix it.
Leaves also subclass the matching builtin so that ``except ValueError`` keeps working.
"""

from __future__ import annotations

import contextlib

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
    "fix",
    "interface",
]

#: The interfaces a fix can be written for: the library ("python"), the ``npkl`` command
#: line ("cli": npkl fit and the commands that take flags), a TOML configuration ("toml":
#: npkl run / resume, whose user edits the file).
INTERFACES = ("python", "cli", "toml")
_INTERFACE = ["python"]


@contextlib.contextmanager
def interface(name: str):
    """Within the block, :func:`fix` writes advice for interface ``name`` (the ``npkl``
    command sets "cli" or "toml" for the whole command); restored afterwards."""
    if name not in INTERFACES:
        raise ValueError(f"interface: {name!r} is not one of {', '.join(INTERFACES)}")
    previous = _INTERFACE[0]
    _INTERFACE[0] = name
    try:
        yield
    finally:
        _INTERFACE[0] = previous


def current_interface() -> str:
    return _INTERFACE[0]


def fix(python: str, cli: str | None = None, toml: str | None = None) -> str:
    """The fix of a warning or error in the syntax of the interface in use: ``python`` (a
    keyword or call), ``cli`` (a flag of ``npkl fit``) or ``toml`` (a configuration key); an
    interface without its own form gets the Python one."""
    which = _INTERFACE[0]
    if which == "cli" and cli is not None:
        return cli
    if which == "toml" and toml is not None:
        return toml
    return python


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
