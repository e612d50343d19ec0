"""What every executor provides: the written protocol the solvers program against.

An executor runs a solver's work over blocks of rows of V. Two kinds of primitive:

* **General row-block primitives** (any solver, present or coming: an inductive kernel's
  chunked transform, an embedding's per-block gradients). ``row_blocks`` cuts ``n`` rows
  into ranges whose starts are multiples of an alignment (the checkpoint shards, the
  per-chunk sums of ``linalg._reductions``), so that every executor cuts the same ranges;
  ``map_row_blocks`` calls a function on each range and returns its results in row order.
  A function whose result depends only on its range gives the same list, bit for bit, on
  every executor and thread count: that is what the conformance tests check
  (tests/executors/test_protocol.py), as the store's tests do for its backends.
* **Sessions** of the iterative solvers that keep their state where the rows live for the
  length of a fit (``bcd_session``, ``block_session``, ``admm_session``), and the whole-V
  reductions the solvers stop on (``objective``, ``smooth``, ``kkt``). These belong to the
  solvers whose kernels they run (``solvers/*/_local.py`` is the in-process oracle); a new
  solver should build on the general primitives instead of adding a session here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..linalg._rowops import SUM_BLOCK

__all__ = ["Executor", "row_blocks"]

T = TypeVar("T")


def row_blocks(n_rows: int, block_rows: int = SUM_BLOCK) -> list[tuple[int, int]]:
    """Rows ``0..n_rows-1`` as consecutive ranges (start, stop) of ``block_rows`` rows, the
    last one possibly shorter; none for 0 rows. The caller picks ``block_rows`` (a Zarr
    array's chunk, a multiple of ``SUM_BLOCK``), never the executor: so every executor maps
    the same ranges."""
    for nm, val, lo in (("n_rows", n_rows, 0), ("block_rows", block_rows, 1)):
        if isinstance(val, bool) or not isinstance(val, int) or val < lo:
            raise ValueError(f"{nm}: expected an integer >= {lo}, got {val!r}")
    return [(s, min(s + block_rows, n_rows)) for s in range(0, n_rows, block_rows)]


@runtime_checkable
class Executor(Protocol):
    """The interface of :class:`~npkl_dist.executors.InProcessExecutor` and
    :class:`~npkl_dist.executors.DaskExecutor`."""

    #: ``"inprocess"`` or ``"dask"``: how results and errors name the executor
    name: str
    #: runs the block-exact BCD method (``method='block'``)
    supports_block: bool

    # -- general row-block primitives -------------------------------------------------
    def map_row_blocks(
        self, fn: Callable[[int, int], T], blocks: Sequence[tuple[int, int]]
    ) -> list[T]:
        """``[fn(start, stop) for (start, stop) in blocks]``, in that order, the calls spread
        over the executor's threads or workers (``blocks``: e.g. :func:`row_blocks`). ``fn``
        must be picklable for the Dask executor (a module-level function or a
        ``functools.partial`` of one) and should release the GIL for the in-process one
        (numba ``nogil`` kernels, numpy). An exception in any call is raised as is."""
        ...

    # -- the iterative solvers' sessions and reductions ------------------------------------
    def bcd_session(self, prep, plan, V) -> Any:
        """A BCD fit's state: ``sweep(colour_order)``, ``objective()``, ``kkt()``,
        ``gather()``, ``assign(V)``, ``write_checkpoint_blocks(...)``, ``close()``."""
        ...

    def block_session(self, prep, layout, V, precond: str = ..., **options) -> Any:
        """A block-exact BCD fit's state (``npkl_dist.solvers.block._session``)."""
        ...

    def admm_session(self, prep, V, U, Lam) -> Any:
        """A KL-ADMM fit's state: ``iterate``/``run``, ``objective``, ``gather``, ..."""
        ...
