"""Errors and warnings of the run store (leaves of npkl_dist's hierarchy)."""

from __future__ import annotations

from .._errors import NpklError, NpklWarning

__all__ = [
    "StoreError",
    "RunNotFoundError",
    "StoreLockedError",
    "StoreVersionError",
    "StoreWarning",
]


class StoreError(NpklError, OSError):
    """A run store cannot be created, opened, read or written.

    Subclasses ``OSError`` so that ``except OSError`` keeps working; when the cause was an
    ``OSError`` (disk full, permission denied, ...) its ``errno`` is copied onto this error.
    """


class RunNotFoundError(StoreError):
    """There is no run at the URL (nothing to open, resume, export or extend).

    Attributes
    ----------
    url : str
        Where the run was looked for.
    """

    def __init__(self, message: str, url: str = ""):
        super().__init__(message)
        self.url = url


class StoreLockedError(StoreError):
    """Another process holds the run's writer lock (one writer per run).

    Attributes
    ----------
    holder : dict
        The lock object's content: ``host``, ``pid``, ``since`` (ISO time), ``token``.
    """

    def __init__(self, message: str, holder: dict | None = None):
        super().__init__(message)
        self.holder = dict(holder or {})


class StoreVersionError(StoreError):
    """The run was written with another store format version."""


class StoreDamagedError(StoreError):
    """A stage's stored data no longer matches what was written (a lost, truncated or
    changed chunk): the message names the stage, the array and the repair."""


class StoreWarning(NpklWarning):
    """Something in a store needed repair: a stale lock taken over, a torn checkpoint skipped."""
