"""SimpleNPKL's eigensolvers and operators: the top eigenpairs of A (sparse Lanczos, dense
LAPACK or the compiled tridiagonal path), and the sparse, symmetric and dense forms of A."""

from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

try:  # scipy's compiled CSR product, the kernel behind ``csr @ vector``
    from scipy.sparse._sparsetools import csr_matvec as _csr_matvec
except ImportError:  # pragma: no cover - private module moved: plain ``A @ x``
    _csr_matvec = None
from ..._errors import NpklError
from ...linalg._csr import (
    add_pair_terms,
    add_pairs_in_place,
    csr_negated_dense,
)
from ...linalg._lanczos import (
    SymUpper,
    add_pair_slots,
    lanczos_top_eigs,
    sym_upper_pattern,
)
from ...linalg._tridiag import tridiagonal_top_eigs
from ...problem._problem import NPKLProblem

_log = logging.getLogger(__name__)

#: ARPACK relative accuracy of the Ritz values.
_EIG_TOL = 1e-10

#: Eigensolver of :func:`fit_simplenpkl` when ``eigensolver=None`` ('fast' or 'arpack').
EIGENSOLVER = "fast"
_EIGENSOLVERS = ("fast", "arpack")

#: Fast path: one BLAS thread when n x (2 rank + 1) (ARPACK's basis when this was measured;
#: ``_eigsh`` now keeps 1.5 rank + 1 vectors) has at most this many entries
#: (docs/decisions/simplenpkl-fast-paths.md).
_ONE_THREAD_MAX_BASIS = 500_000

#: Fast path's sparse solves: Lanczos with partial reorthogonalisation first (True), or
#: ARPACK alone (False: the fast path before 2026-11-25, and the benches' baseline).
_SPARSE_LANCZOS = True


class _SparseA:
    """A(w) = sum_p w_p t_p E_p - L as a CSR matrix of fixed pattern, updated in place."""

    def __init__(self, problem: NPKLProblem):
        n = problem.n_points
        c = problem.constraints
        L = sp.csr_matrix(problem.L, dtype=np.float64, copy=True)
        L.eliminate_zeros()
        one = np.ones(c.m)
        pattern = sp.coo_matrix(
            (np.r_[one, one], (np.r_[c.i, c.j], np.r_[c.j, c.i])), shape=(n, n)
        ).tocsr()
        base = (abs(L) + pattern).tocsr()  # union pattern, no cancellation
        base.sum_duplicates()
        base.sort_indices()
        rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(base.indptr))
        keys = rows * n + base.indices.astype(np.int64)
        self.pos_ij = np.searchsorted(keys, c.i * n + c.j)
        self.pos_ji = np.searchsorted(keys, c.j * n + c.i)
        L.sum_duplicates()
        L.sort_indices()
        L_rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(L.indptr))
        pos_L = np.searchsorted(keys, L_rows * n + L.indices.astype(np.int64))
        self.neg_L = np.zeros(base.nnz)
        np.add.at(self.neg_L, pos_L, -L.data)
        self.t = c.t.astype(np.float64)
        self.A = sp.csr_matrix((self.neg_L.copy(), base.indices, base.indptr), shape=(n, n))

    def set(self, w: np.ndarray) -> sp.csr_matrix:
        d = self.neg_L.copy()
        half = 0.5 * w * self.t
        d[self.pos_ij] += half
        d[self.pos_ji] += half
        self.A.data = d
        return self.A


class _SymA:
    """A(w) in the upper form the fast path's Lanczos reads (:class:`SymUpper`): array for
    array what Lanczos made of ``_SparseA(problem).set(w)`` before (its strict upper
    triangle and diagonal: one addition of w_p t_p / 2 to -L_ij per pair), with the union
    pattern built by one compiled merge instead of scipy's sparse sums and sorts, and no
    conversion at every solve (docs/decisions/simplenpkl-fast-paths.md)."""

    def __init__(self, problem: NPKLProblem):
        c = problem.constraints
        L = problem.L
        if not (
            isinstance(L, sp.csr_matrix) and L.has_canonical_format and L.dtype == np.float64
        ):  # as build() leaves it
            L = sp.csr_matrix(L, dtype=np.float64, copy=True)
            L.sum_duplicates()
            L.sort_indices()
        if not np.all(L.data):  # explicit zeros: out of the pattern, as in _SparseA
            L = L.copy()
            L.eliminate_zeros()
        self.uptr, self.uidx, self.base, self.diag, self.pos = sym_upper_pattern(
            L.indptr,
            L.indices,
            L.data,
            np.asarray(c.i, dtype=np.int64),
            np.asarray(c.j, dtype=np.int64),
        )  # pairs have i < j (Constraints)
        self.t = c.t.astype(np.float64)
        self.shape = L.shape

    def set(self, w: np.ndarray) -> SymUpper:
        out = np.empty_like(self.base)
        add_pair_slots(self.base, self.pos, np.asarray(w, dtype=np.float64), self.t, out)
        return SymUpper(self.uptr, self.uidx, out, self.diag)


class _DenseA:
    """A(w) = sum_p w_p t_p E_p - L as a fresh dense array per call (the fast path's dense
    solves overwrite it). Entry for entry the values of ``_SparseA(problem).set(w).toarray()``:
    the same one addition of w_p t_p / 2 to -L_ij (pairs are distinct with i < j), without the
    sparse pattern's set-up and the conversion at every step.

    ``single``: the first ``set`` adds the pair terms to -L in place and hands that array out
    (one n x n array written and read instead of two: the linear loss solves once); a later
    call assembles -L again."""

    def __init__(self, problem: NPKLProblem, single: bool = False):
        n = problem.n_points
        c = problem.constraints
        self.L, self.single = problem.L, single
        self.neg_L = self._negated_L(n)
        self.i, self.j = c.i, c.j
        self.t = c.t.astype(np.float64, copy=False)

    def _negated_L(self, n):
        # (-L).toarray(), not -(L.toarray()): the entries outside L's pattern must be +0.0 as
        # in the sparse A (LAPACK's Householder steps read the sign of zero; with -0.0 the
        # eigenvectors differ in the last bits)
        L = self.L
        if isinstance(L, sp.csr_matrix) and L.has_canonical_format:  # as build() leaves it
            out = np.zeros((n, n))
            csr_negated_dense(L.indptr, L.indices, L.data.astype(np.float64, copy=False), out)
            return out
        return (-sp.csr_matrix(L, dtype=np.float64)).toarray()

    def set(self, w: np.ndarray) -> np.ndarray:
        w = np.asarray(w, dtype=np.float64)
        if self.single:
            M = self.neg_L if self.neg_L is not None else self._negated_L(self.L.shape[0])
            self.neg_L = None  # handed out: a later call assembles -L again
            add_pairs_in_place(M, self.i, self.j, w, self.t)
            return M
        M = np.empty_like(self.neg_L)
        add_pair_terms(self.neg_L, self.i, self.j, w, self.t, M)
        return M


def _use_dense(n: int, k: int) -> bool:
    """Dense eigh only where ARPACK cannot work well and n x n is O(n x rank) memory."""
    return n <= 2 * k + 1


#: Fast path: dense solves up to this many points (ARPACK's per-call set-up dominates
#: there); the crossover against Lanczos: docs/decisions/simplenpkl-fast-paths.md.
_FAST_DENSE_MAX_N = 160


def _fast_dense(n: int, fast: bool) -> bool:
    """The fast path's dense regime: A assembled dense (``_DenseA``), ``_dense_top_eigs``."""
    return fast and n <= _FAST_DENSE_MAX_N


def _dense_solve(n: int, k: int, fast: bool) -> bool:
    return _use_dense(n, k) or _fast_dense(n, fast)


def _top_eigs(A, k: int, v0, fast: bool = False, overwrite: bool = False):
    """Top-k eigenpairs of symmetric A, descending. Returns (sigma (k,), P (n, k)).

    ``fast``: up to ``_FAST_DENSE_MAX_N`` points the dense ``_dense_top_eigs``, above
    that :func:`_eigsh`'s fast path (Lanczos, ARPACK where it cannot certify).
    ``overwrite``: a dense A may be overwritten.
    """
    n = A.shape[0]
    if _fast_dense(n, fast):
        if isinstance(A, np.ndarray):
            return _dense_top_eigs(A, k, overwrite=overwrite)
        return _dense_top_eigs(A.toarray(), k, overwrite=True)
    if _use_dense(n, k):
        w, P = np.linalg.eigh(A.toarray())
        return w[::-1][:k].copy(), P[:, ::-1][:, :k].copy()
    return _eigsh(A, k, v0, fast)


def _descending(w, P):
    """(w, P) with w in descending order and P's columns in step, P C-contiguous: its
    rows are what the objective and the pair values read (P[:, order] alone is
    F-contiguous and slower to read; docs/decisions/simplenpkl-fast-paths.md)."""
    order = np.argsort(w)[::-1]
    if P.flags.c_contiguous and np.array_equal(order, np.arange(w.size)):
        return w, P  # Lanczos's output: already in order
    return w[order], np.ascontiguousarray(P[:, order])


#: Below this many points ``_dense_top_eigs`` keeps ``numpy.linalg.eigh``, the faster there
#: (docs/decisions/simplenpkl-fast-paths.md).
_TRIDIAG_MIN_N = 24


def _dense_top_eigs(M, k: int, overwrite: bool = False):
    """Top-k eigenpairs of the symmetric dense M, descending: ``dsyevr``'s algorithm for
    eigenpairs n - k + 1 ... n only, with its bisection compiled and run for the k
    eigenvalues side by side (:func:`npkl_dist.linalg._tridiag.tridiagonal_top_eigs`). numpy's
    ``eigh`` (all n pairs) is the reference (timings: docs/decisions/simplenpkl-fast-paths.md).
    Below ``_TRIDIAG_MIN_N`` points, where numpy's ``eigh`` is the faster, for k = n, and if the
    route fails (inverse iteration not converged, a non-finite matrix), that.
    ``overwrite``: M may be overwritten (the route then reduces it in place)."""
    n = M.shape[0]
    if n >= _TRIDIAG_MIN_N and k < n:
        diag = np.diag(M).copy() if overwrite else None
        w, Z, failure = tridiagonal_top_eigs(M, k, overwrite=overwrite)
        if failure is None:
            return w[::-1].copy(), np.ascontiguousarray(Z[:, ::-1])
        if overwrite:  # the route may have reduced M's upper triangle in place: M (symmetric)
            # from its strict lower triangle and diagonal, which it keeps and which eigh
            # reads (UPLO='L') as before
            M = np.tril(M, -1)
            M += M.T
            M[np.diag_indices(n)] = diag
    # numpy's eigh: below _TRIDIAG_MIN_N points, for k = n, or after the route failed. The
    # input is checked, not eigh's output: for a NaN entry eigh may return finite
    # eigenvalues (a 30 x 30 identity with one NaN pair does)
    if not np.all(np.isfinite(M)):
        failure = "the matrix holds NaN or inf entries"
    else:
        w, P = np.linalg.eigh(M)
        failure = None if np.all(np.isfinite(w)) else "numpy's eigh: non-finite eigenvalues"
    if failure is not None:
        raise NpklError(
            f"simplenpkl: the dense eigensolver failed on the {n} x {n} matrix A ({failure}); "
            f"check the Laplacian and constraints for NaN or inf"
        )
    return w[::-1][:k].copy(), P[:, ::-1][:, :k].copy()


class _CSROperator(spla.LinearOperator):
    """y = A x straight through scipy's compiled CSR kernel (the one ``A @ x`` ends in).

    ARPACK asks for one product per Lanczos step; ``A @ x`` reaches ``csr_matvec`` through
    Python dispatch that costs a third of the product on the adult data
    (docs/decisions/simplenpkl-fast-paths.md). The products are bitwise those of ``A @ x``.
    """

    def __init__(self, A):
        super().__init__(np.float64, A.shape)
        self._A = A

    def _matvec(self, x):
        A = self._A
        x = np.ascontiguousarray(x, dtype=np.float64).reshape(-1)
        y = np.zeros(A.shape[0])
        _csr_matvec(A.shape[0], A.shape[1], A.indptr, A.indices, A.data, x, y)
        return y

    def _matmat(self, X):
        return self._A @ X


def _lanczos_ncv(n: int, k: int) -> int:
    """ARPACK's basis for k eigenpairs of an n x n matrix: 1.5k + 1 vectors (scipy's default:
    2k + 1): more restarts, but each step orthogonalises against a quarter fewer vectors
    (docs/decisions/simplenpkl-fast-paths.md)."""
    return min(n, max((3 * k) // 2 + 1, 20))


def _eigsh(A, k, v0, fast):
    """Top-k eigenpairs of the sparse A: eigsh(which='LA') as the reference calls it.
    ``fast``: Lanczos with partial reorthogonalisation (:func:`lanczos_top_eigs`, same
    tolerance), and where it cannot certify its result, eigsh through :class:`_CSROperator`.
    Returns (w, P) descending with P C-contiguous (:func:`_descending`; Lanczos's pairs come
    out so, and skipping the check saves its numpy calls)."""
    n = A.shape[0]
    if fast and _SPARSE_LANCZOS:
        w, P, stats, failure = lanczos_top_eigs(A, k, v0, _EIG_TOL)
        if failure is None:
            return w, P  # descending, C-contiguous (lanczos_top_eigs)
        _log.debug(
            "simplenpkl: Lanczos (k=%d, n=%d) fell back to ARPACK: %s %s", k, n, failure, stats
        )
    if isinstance(A, SymUpper):
        A = A.tocsr()
    op = _CSROperator(A) if fast and _csr_matvec is not None else A
    # both paths use the same basis, so that the fast path's products stay bitwise those of
    # the reference's
    ncv = _lanczos_ncv(n, k)
    try:
        return _descending(*spla.eigsh(op, k=k, which="LA", v0=v0, tol=_EIG_TOL, ncv=ncv))
    except spla.ArpackNoConvergence:
        try:
            return _descending(
                *spla.eigsh(
                    op,
                    k=k,
                    which="LA",
                    v0=v0,
                    tol=_EIG_TOL,
                    ncv=min(n, max(4 * k + 1, 40)),
                    maxiter=100 * n,
                )
            )
        except spla.ArpackNoConvergence as exc:
            raise NpklError(
                f"simplenpkl: the Lanczos eigensolver (eigsh, k={k}) did not converge on the "
                f"{n} x {n} matrix A; lower rank or check the Laplacian"
            ) from exc


def _top_eigs_positive(A, k: int, v0, k_try: int, overwrite: bool = False):
    """Top-k eigenpairs of A as far as they are positive: what the kernel step and J use.

    Computes the top ``k_try`` < k eigenpairs (fast eigsh). If the smallest of them is
    <= 0, every positive eigenvalue is among them (they are the largest), and the missing
    ``k - k_try`` pairs would enter the kernel step with weight 0: they are returned as zero
    columns of P with eigenvalue ``sigma[k_try - 1]`` (an upper bound of theirs).
    Otherwise (more positive eigenvalues than guessed) the full top-k solve is returned.

    Returns (sigma (k,), P (n, k), complete) with ``complete`` False when padded.
    """
    n = A.shape[0]
    if 1 <= k_try < k and not _dense_solve(n, k, True):
        w, P = _eigsh(A, k_try, v0, True)
        if w[-1] <= 0.0:
            sigma = np.concatenate([w, np.full(k - k_try, w[-1])])
            return sigma, np.hstack([P, np.zeros((n, k - k_try))]), False
    sigma, P = _top_eigs(A, k, v0, fast=True, overwrite=overwrite)
    return sigma, P, True
