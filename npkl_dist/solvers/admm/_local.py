"""KL-ADMM's in-process execution: its half-steps, objective and compiled iteration loop on
numba threads, added to BCD's (:class:`~npkl_dist.solvers.bcd._local.LocalBCD`)."""

from __future__ import annotations

import numba
import numpy as np

from ...linalg._reductions import chunked_sums, ordered_total, row_norms2
from ...linalg._rowops import CHUNK
from ..bcd._local import FIT_PARALLEL_MIN_N, LocalBCD, _pair_total, _write_blocks
from ._kernels import (
    admm_diag_terms,
    admm_half_step,
    admm_pair_terms,
    admm_parts,
    admm_row_norms,
    admm_row_norms_serial,
    admm_rows,
    admm_run,
    admm_run_serial,
    admm_smooth_terms,
)

#: ``admm_run`` runs on the executor's threads from this many rows, below it serially. On the
#: small paper sets two threads lose with another process on one core (a preempted thread
#: holds up every barrier, twice an iteration): docs/decisions/small-fit-times.md.
ADMM_PARALLEL_MIN_N = FIT_PARALLEL_MIN_N


class LocalADMM(LocalBCD):
    """:class:`~npkl_dist.solvers.bcd._local.LocalBCD` with KL-ADMM's primitives."""

    def admm_half_step(self, prep, X, Lam, lam_sign, rho, gamma, diagonal, out):
        """One KL-ADMM half-step: every row of ``out`` from the other factor ``X`` and ``Lam``.

        Rows are independent, so the result does not depend on the thread count.
        """
        n = X.shape[0]
        args = (
            prep.indptr,
            prep.indices,
            prep.data,
            prep.diag,
            prep.cptr,
            prep.cidx,
            prep.csgn,
            bool(diagonal),
            X,
            Lam,
            float(lam_sign),
            float(rho),
            float(gamma),
            prep.pmax,
        )
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
        """KL-ADMM objective of V (internal order), see ``npkl_dist.solvers.admm._fit``."""
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

    def admm_session(self, prep, V, U, Lam):
        """A KL-ADMM fit's state (V, U, Lam in internal order, updated in place)."""
        return _ADMMSession(self, prep, V, U, Lam)


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
        args = (
            prep.indptr,
            prep.indices,
            prep.data,
            prep.diag,
            prep.cptr,
            prep.cidx,
            prep.csgn,
            bool(diagonal),
            prep.pmax,
            prep.pi,
            prep.pj,
            prep.pt,
            self.V,
            self.U,
            self.Lam,
            self._V_new,
            self._U_new,
            float(rho),
            float(rho_min),
            float(gamma),
            float(tol),
            bool(adaptive),
            int(n_iter),
            trace,
            self._parts(n, bool(diagonal)),
        )
        if anderson is None:
            z1, z2 = np.empty(0), np.empty((0, 0))
            args += (
                False,
                z1,
                z1,
                z1,
                z2,
                z2,
                z2,
                np.empty(0, np.int64),
                np.empty(0, np.int64),
                z1,
                z1,
                np.empty((0, 0), self.V.dtype),
                1,
                z2,
                z1,
                z1,
            )
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
                self._parts_cache = admm_parts(
                    self.prep.indptr, self.prep.cptr, diagonal, self.V.shape[1], 8 * threads
                )
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
