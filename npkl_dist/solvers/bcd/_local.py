"""BCD's in-process execution: numba kernels on one machine, threads across the units of a
sweep step. :class:`~npkl_dist.executors.InProcessExecutor` is this class with KL-ADMM's
primitives added; a solver given no executor runs on it (the oracle of the Dask executor)."""

from __future__ import annotations

from contextlib import contextmanager

import numba
import numpy as np

from ..._errors import ValidationError, fmt_value
from ...linalg._reductions import chunked_sums, ordered_total
from ...linalg._rowops import CHUNK
from ...problem._terms import pair_terms, smooth_terms
from .._kkt import kkt_residual
from .._sweeps import sweep_units, sweep_units_serial
from ..block._session import BlockSession

#: A BCD fit of fewer rows runs on one thread (``InProcessExecutor.fit_threads``; the same
#: values: every sum is blocked as on one thread): on a busy machine each parallel call waits
#: for a preempted thread (docs/decisions/small-fit-times.md).
FIT_PARALLEL_MIN_N = 2 * CHUNK + 1


class LocalBCD:
    """Runs sweeps of a :class:`~npkl_dist.solvers._plan.SweepPlan` with numba threads.

    Parameters
    ----------
    n_threads : int, optional
        Threads per sweep step; default all of numba's threads. Set explicitly per call,
        never as an import side effect.
    """

    name = "inprocess"
    supports_block = True

    def __init__(self, n_threads: int | None = None):
        if n_threads is not None and (
            isinstance(n_threads, bool)
            or not isinstance(n_threads, (int, np.integer))
            or not 1 <= n_threads <= numba.config.NUMBA_NUM_THREADS
        ):
            raise ValidationError(
                f"n_threads: expected an integer in [1, {numba.config.NUMBA_NUM_THREADS}], got "
                f"{fmt_value(n_threads)}"
            )
        self.n_threads = int(n_threads or numba.config.NUMBA_NUM_THREADS)

    def sweep(self, prep, plan, V, colour_order):
        """One Gauss-Seidel sweep in the given colour order, in place.

        Each colour step runs the colour's units (see :class:`~npkl_dist.solvers._plan.SweepPlan`)
        on the executor's threads; the units are independent, so the result does not depend
        on the thread count.

        Returns
        -------
        delta2, norm2 : float
            ||V_new - V_old||_F^2 and ||V_new||_F^2 (chunked canonical sums).
        """
        n = V.shape[0]
        delta2 = np.empty(n)
        norm2 = np.empty(n)
        previous = numba.get_num_threads()
        numba.set_num_threads(self.n_threads)
        try:
            for c in colour_order:
                rows, ptr = plan.units(int(c))
                # a parallel region costs more than it saves below a few chunks of rows
                kernel = (
                    sweep_units
                    if self.n_threads > 1 and ptr.shape[0] > 2 and rows.shape[0] > 2 * CHUNK
                    else sweep_units_serial
                )
                kernel(
                    rows,
                    ptr,
                    0,
                    prep.indptr,
                    prep.indices,
                    prep.data,
                    prep.diag,
                    prep.cptr,
                    prep.cidx,
                    prep.csgn,
                    V,
                    prep.loss_code,
                    prep.gamma,
                    prep.bound,
                    prep.pmax,
                    delta2,
                    norm2,
                )
        finally:
            numba.set_num_threads(previous)
        return ordered_total(chunked_sums(delta2)), ordered_total(chunked_sums(norm2))

    def objective(self, prep, V) -> float:
        """NPKL objective of V (internal order); per-row terms summed in a fixed order."""
        n = V.shape[0]
        sm = np.empty(n)
        pairs = np.empty(prep.pi.shape[0])
        previous = numba.get_num_threads()
        # small problems: one thread (a parallel region costs more than it saves)
        numba.set_num_threads(self.n_threads if n > 64 * CHUNK else 1)
        try:
            smooth_terms(prep.indptr, prep.indices, prep.data, prep.diag, V, sm)
            pair_terms(prep.pi, prep.pj, prep.pt, V, prep.loss_code, pairs)
        finally:
            numba.set_num_threads(previous)
        return ordered_total(chunked_sums(sm)) + prep.gamma * _pair_total(pairs, prep.pi, n)

    def smooth(self, prep, V, kernel=smooth_terms) -> float:
        """tr(V' L V), per-row terms summed in a fixed order (``kernel``: ``smooth_terms``,
        or ``admm_smooth_terms`` for KL-ADMM's arithmetic)."""
        n = V.shape[0]
        sm = np.empty(n)
        previous = numba.get_num_threads()
        numba.set_num_threads(self.n_threads if n > 64 * CHUNK else 1)
        try:
            kernel(prep.indptr, prep.indices, prep.data, prep.diag, V, sm)
        finally:
            numba.set_num_threads(previous)
        return ordered_total(chunked_sums(sm))

    # -- sessions: the executor owns the factor(s) for the length of a fit -----------------
    @contextmanager
    def fit_threads(self, n_points):
        """numba's threads for a whole fit of ``n_points`` rows: one below
        ``FIT_PARALLEL_MIN_N``, else unchanged (the kernels set their own counts)."""
        if n_points is None or n_points >= FIT_PARALLEL_MIN_N or self.n_threads == 1:
            yield
            return
        previous = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            yield
        finally:
            numba.set_num_threads(previous)

    def bcd_session(self, prep, plan, V):
        """A BCD fit's state on this executor; ``V`` (internal order) is updated in place."""
        return _BCDSession(self, prep, plan, V)

    #: block fits may hand block_session a Prefault (work arrays touched during set-up)
    prefaults = True

    def block_session(
        self,
        prep,
        layout,
        V,
        precond="amg-additive",
        extrapolate=True,
        cache=None,
        prefault=None,
        inner_maxiter=None,
    ):
        """A block-exact BCD fit's state (``npkl_dist.solvers.block``); V updated in place.
        ``cache``: a FitSetup's (operator, preconditioner and work arrays reused);
        ``prefault``: a ``Prefault``'s work arrays, where the cache holds none;
        ``inner_maxiter``: the PCG steps of every outer iteration, if fixed (None: any)."""
        threads = self.n_threads if V.shape[0] >= FIT_PARALLEL_MIN_N else 1
        return BlockSession(
            prep,
            layout,
            V,
            threads,
            precond=precond,
            extrapolate=extrapolate,
            cache=cache,
            prefault=prefault,
            inner_maxiter=inner_maxiter,
        )

    def kkt(self, prep, V) -> float:
        """Scaled KKT residual of V (internal order), see ``npkl_dist.solvers._kkt``."""
        previous = numba.get_num_threads()
        numba.set_num_threads(self.n_threads if V.shape[0] > 64 * CHUNK else 1)
        try:
            return kkt_residual(prep, V)
        finally:
            numba.set_num_threads(previous)


def _write_blocks(store, ckpt_id, X, row_block):
    for start in range(0, X.shape[0], row_block):
        store.write_V_block(ckpt_id, start, X[start : start + row_block])


class _BCDSession:
    def __init__(self, ex, prep, plan, V):
        self.ex, self.prep, self.plan, self.V = ex, prep, plan, V

    def sweep(self, colour_order):
        return self.ex.sweep(self.prep, self.plan, self.V, colour_order)

    def objective(self) -> float:
        return self.ex.objective(self.prep, self.V)

    def kkt(self) -> float:
        return self.ex.kkt(self.prep, self.V)

    def checkpoint_array(self):
        return self.V

    def gather(self) -> np.ndarray:
        return self.V

    def assign(self, V):
        """Replace V (internal order) in place: a joint move."""
        self.V[...] = V

    def write_checkpoint_blocks(self, store, ckpt_id, row_block):
        _write_blocks(store, ckpt_id, self.V, row_block)

    def close(self):
        pass


def _pair_total(pair_values, owner_rows, n) -> float:
    """Sum of per-pair terms grouped by the row chunk of each pair's owner row (its first
    index, in internal order): the order a row-partitioned executor reproduces."""
    per_row = np.bincount(owner_rows, weights=pair_values, minlength=n)
    return ordered_total(chunked_sums(per_row))
