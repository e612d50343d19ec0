"""Executors run a solver's work. The in-process executor is the oracle for all others."""

from .._errors import ValidationError
from ._dask import DaskExecutor
from ._inprocess import InProcessExecutor
from .base import Executor, row_blocks

__all__ = ["DaskExecutor", "Executor", "InProcessExecutor", "get_executor", "row_blocks"]


def get_executor(name: str = "inprocess", **kwargs):
    """Executor by name (the Dask executor imports distributed when it starts)."""
    if name == "inprocess":
        return InProcessExecutor(**kwargs)
    if name == "dask":
        return DaskExecutor(**kwargs)
    raise ValidationError(f"executor: {name!r} is not available; choose 'inprocess' or 'dask'")
