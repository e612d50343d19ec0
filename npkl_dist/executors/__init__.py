"""Executors run a solver's plan. The in-process executor is the oracle for all others."""

from ._inprocess import InProcessExecutor

__all__ = ["InProcessExecutor", "get_executor"]


def get_executor(name: str = "inprocess", **kwargs):
    """Executor by name. Optional engines (Dask) are imported lazily."""
    if name == "inprocess":
        return InProcessExecutor(**kwargs)
    if name == "dask":
        from ._dask import DaskExecutor

        return DaskExecutor(**kwargs)
    from .._errors import ValidationError

    raise ValidationError(f"executor: {name!r} is not available; choose 'inprocess' or 'dask'")
