"""In-process executor: numba kernels on one machine, threads across the units of a step."""

from __future__ import annotations

from contextlib import contextmanager

import numba
import numpy as np

from .._errors import ValidationError, fmt_value
from .._kernels import (
    CHUNK,
    SUM_BLOCK,
    admm_diag_terms,
    admm_half_step,
    admm_parts,
    admm_pair_terms,
    admm_row_norms,
    admm_row_norms_serial,
    admm_rows,
    admm_run,
    admm_run_serial,
    admm_smooth_terms,
    block_sums,
    pair_terms,
    row_sq,
    row_sq_dist,
    smooth_terms,
    sweep_units,
    sweep_units_serial,
)

__all__ = ["InProcessExecutor", "chunked_sums", "SUM_BLOCK"]


def chunked_sums(values) -> list:
    """Per-chunk sums of a per-row array (chunks of SUM_BLOCK rows, in order; plain sums,
    ``_kernels.block_sums``, the arithmetic of the compiled ``admm_run`` too)."""
    return block_sums(np.ascontiguousarray(values, dtype=np.float64)).tolist()


def row_norms2(A, B=None) -> np.ndarray:
    """||a_i - b_i||^2 (or ||a_i||^2) per row in float64, summed left to right."""
    out = np.empty(A.shape[0])
    if B is None:
        row_sq(A, out)
    else:
        row_sq_dist(A, B, out)
    return out


def ordered_total(partials) -> float:
    total = 0.0
    for x in partials:
        total += x
    return total


class InProcessExecutor:
    """Runs sweeps of a :class:`~npkl_dist._plan.SweepPlan` with numba threads.

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
            isinstance(n_threads, bool) or not isinstance(n_threads, (int, np.integer))
            or not 1 <= n_threads <= numba.config.NUMBA_NUM_THREADS
        ):
            raise ValidationError(
                f"n_threads: expected an integer in [1, {numba.config.NUMBA_NUM_THREADS}], got "
                f"{fmt_value(n_threads)}"
            )
        self.n_threads = int(n_threads or numba.config.NUMBA_NUM_THREADS)

    def sweep(self, prep, plan, V, colour_order):
        """One Gauss-Seidel sweep in the given colour order, in place.

        Each colour step runs the colour's units (see :class:`~npkl_dist._plan.SweepPlan`)
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
                kernel = (sweep_units if self.n_threads > 1 and ptr.shape[0] > 2
                          and rows.shape[0] > 2 * CHUNK else sweep_units_serial)
                kernel(rows, ptr, 0, prep.indptr, prep.indices, prep.data, prep.diag,
                       prep.cptr, prep.cidx, prep.csgn, V, prep.loss_code, prep.gamma,
                       prep.bound, prep.pmax, delta2, norm2)
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

    def admm_half_step(self, prep, X, Lam, lam_sign, rho, gamma, diagonal, out):
        """One KL-ADMM half-step: every row of ``out`` from the other factor ``X`` and ``Lam``.

        Rows are independent, so the result does not depend on the thread count.
        """
        n = X.shape[0]
        args = (prep.indptr, prep.indices, prep.data, prep.diag, prep.cptr, prep.cidx,
                prep.csgn, bool(diagonal), X, Lam, float(lam_sign), float(rho), float(gamma),
                prep.pmax)
        no_sm = np.empty(0)
        nrm = np.empty(n)
        if self.n_threads == 1 or n <= 2 * CHUNK:
            admm_row_norms_serial(X, nrm)
            admm_rows(0, n, *args, out, no_sm, nrm)
            return
        previous = numba.get_num_threads()
        numba.set_num_threads(self.n_threads)
        try:
            admm_row_norms(X, nrm)
            admm_half_step(*args, out, no_sm, nrm)
        finally:
            numba.set_num_threads(previous)

    def admm_objective(self, prep, V, gamma, diagonal) -> float:
        """KL-ADMM objective of V (internal order), see ``npkl_dist._admm``."""
        n = V.shape[0]
        pairs = np.empty(prep.pi.shape[0])
        diag_terms = np.empty(n)
        previous = numba.get_num_threads()
        numba.set_num_threads(self.n_threads if n > 64 * CHUNK else 1)
        try:
            admm_pair_terms(prep.pi, prep.pj, prep.pt, V, pairs)
            admm_diag_terms(V, diag_terms)
        finally:
            numba.set_num_threads(previous)
        total = self.smooth(prep, V, admm_smooth_terms) + gamma * _pair_total(pairs, prep.pi, n)
        if diagonal:
            total += 0.5 * gamma * ordered_total(chunked_sums(diag_terms))
        return total

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

    def block_session(self, prep, layout, V, precond="amg-additive", extrapolate=True,
                      cache=None, prefault=None, inner_maxiter=None):
        """A block-exact BCD fit's state (``npkl_dist._blocksolve``); V updated in place.
        ``cache``: a FitSetup's (operator, preconditioner and work arrays reused);
        ``prefault``: a ``Prefault``'s work arrays, where the cache holds none;
        ``inner_maxiter``: the PCG steps of every outer iteration, if fixed (None: any)."""
        from .._blocksolve import BlockSession

        threads = self.n_threads if V.shape[0] >= FIT_PARALLEL_MIN_N else 1
        return BlockSession(prep, layout, V, threads, precond=precond,
                            extrapolate=extrapolate, cache=cache, prefault=prefault,
                            inner_maxiter=inner_maxiter)

    def kkt(self, prep, V) -> float:
        """Scaled KKT residual of V (internal order), see ``npkl_dist._kkt``."""
        from .._kkt import kkt_residual

        previous = numba.get_num_threads()
        numba.set_num_threads(self.n_threads if V.shape[0] > 64 * CHUNK else 1)
        try:
            return kkt_residual(prep, V)
        finally:
            numba.set_num_threads(previous)

    def admm_session(self, prep, V, U, Lam):
        """A KL-ADMM fit's state (V, U, Lam in internal order, updated in place)."""
        return _ADMMSession(self, prep, V, U, Lam)


def _write_blocks(store, ckpt_id, X, row_block):
    for start in range(0, X.shape[0], row_block):
        store.write_V_block(ckpt_id, start, X[start:start + row_block])


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


#: ``admm_run`` runs on the executor's threads from this many rows, below it serially. On the
#: small paper sets (47-270 rows) two threads were 1.1-1.5x faster on an idle 2-core machine,
#: but 2-4.5x slower with another process on one core (a preempted thread holds up every
#: barrier, twice an iteration): bench/RESULTS.md, 2026-11-29.
ADMM_PARALLEL_MIN_N = 2 * CHUNK + 1

#: A BCD fit of fewer rows runs on one thread (``InProcessExecutor.fit_threads``; the same
#: values: every sum is blocked as on one thread). On the paper sets (47-569 rows) two threads
#: gained nothing on an idle 2-core machine, and with its other core busy a 60-point hinge fit
#: took 1.5-2.2 s on two against 0.46 s on one: each of its ~20 parallel calls an iteration
#: waits for a preempted thread (bench/RESULTS.md, "Small fits on a busy machine").
FIT_PARALLEL_MIN_N = ADMM_PARALLEL_MIN_N


class _ADMMSession:
    def __init__(self, ex, prep, V, U, Lam):
        self.ex, self.prep = ex, prep
        self.V, self.U, self.Lam = V, U, Lam
        self._V_new = np.empty_like(V)
        self._U_new = np.empty_like(U)
        self._parts_key = self._parts_cache = None

    def iterate(self, rho, gamma, diagonal):
        """One ADMM iteration in place. Returns ||V-U||^2 and ||V(k+1)-V(k)||^2."""
        ex, prep = self.ex, self.prep
        ex.admm_half_step(prep, self.U, self.Lam, -1.0, rho, gamma, diagonal, self._V_new)
        ex.admm_half_step(prep, self._V_new, self.Lam, +1.0, rho, gamma, diagonal, self._U_new)
        diff = self._V_new.astype(np.float64) - self._U_new
        self.Lam += (rho * diff).astype(self.Lam.dtype)
        primal2 = ordered_total(chunked_sums(row_norms2(self._V_new, self._U_new)))
        step2 = ordered_total(chunked_sums(row_norms2(self._V_new, self.V)))
        self.V, self._V_new = self._V_new, self.V
        self.U, self._U_new = self._U_new, self.U
        return primal2, step2

    def run(self, n_iter, rho, rho_min, gamma, diagonal, tol, adaptive, anderson=None):
        """Up to ``n_iter`` iterations in one compiled call (``_kernels.admm_run``): the same
        iterates as ``iterate`` in a loop, with the stopping test and eq. (15) inside.

        ``anderson``: an ``_anderson.Anderson`` memory, applied after every iteration.

        Returns (trace (done, 5): primal, step, objective, rho used, ||V||; next rho;
        converged)."""
        ex, prep = self.ex, self.prep
        n = self.V.shape[0]
        trace = np.empty((int(n_iter), 5))
        args = (prep.indptr, prep.indices, prep.data, prep.diag, prep.cptr, prep.cidx,
                prep.csgn, bool(diagonal), prep.pmax, prep.pi, prep.pj, prep.pt, self.V,
                self.U, self.Lam, self._V_new, self._U_new, float(rho), float(rho_min),
                float(gamma), float(tol), bool(adaptive), int(n_iter), trace,
                self._parts(n, bool(diagonal)))
        if anderson is None:
            z1, z2 = np.empty(0), np.empty((0, 0))
            args += (False, z1, z1, z1, z2, z2, z2, np.empty(0, np.int64),
                     np.empty(0, np.int64), z1, z1, np.empty((0, 0), self.V.dtype), 1, z2, z1,
                     z1)
        else:
            args += (True, *anderson.kernel_args())
        if self._threads(n) == 1:
            done, rho, converged = admm_run_serial(*args)
        else:
            previous = numba.get_num_threads()
            numba.set_num_threads(ex.n_threads)
            try:
                done, rho, converged = admm_run(*args)
            finally:
                numba.set_num_threads(previous)
        return trace[:done], float(rho), bool(converged)

    def _threads(self, n):
        """Threads of ``admm_run`` for n rows: the executor's from ADMM_PARALLEL_MIN_N rows."""
        return 1 if self.ex.n_threads == 1 or n < ADMM_PARALLEL_MIN_N else self.ex.n_threads

    def _parts(self, n, diagonal):
        """``admm_run``'s work items, computed once per fit: one run of all rows on one
        thread, else 8 runs of about equal cost per thread (``admm_parts``)."""
        threads = self._threads(n)
        key = (threads, diagonal)
        if self._parts_key != key:
            if threads == 1:
                self._parts_cache = np.array([0, n], np.int64)
            else:
                self._parts_cache = admm_parts(self.prep.indptr, self.prep.cptr, diagonal,
                                               self.V.shape[1], 8 * threads)
            self._parts_key = key
        return self._parts_cache

    def norm2(self) -> float:
        return ordered_total(chunked_sums(row_norms2(self.V)))

    def objective(self, gamma, diagonal) -> float:
        return self.ex.admm_objective(self.prep, self.V, gamma, diagonal)

    def gather(self):
        return self.V, self.U, self.Lam

    def write_checkpoint_blocks(self, store, ckpt_id, row_block):
        _write_blocks(store, ckpt_id, np.hstack([self.V, self.U, self.Lam]), row_block)

    def close(self):
        pass


def _pair_total(pair_values, owner_rows, n) -> float:
    """Sum of per-pair terms grouped by the row chunk of each pair's owner row (its first
    index, in internal order): the order a row-partitioned executor reproduces."""
    per_row = np.bincount(owner_rows, weights=pair_values, minlength=n)
    return ordered_total(chunked_sums(per_row))
