"""The rank of a learned factor, a start that never caps it, and the certificate that tells a
rank-deficient stationary point from the optimum.

Why this matters. Every update the BCD solvers make keeps each row of V (n x r) inside the
span of the start's columns: an unconstrained row is a combination of other rows, a
constrained row solves a system built from other rows, the block method's CG and plane
searches combine rows. So the column space of V can shrink but never grow, and a start of
numerical rank k < r confines the whole fit to rank k. A start prolongated from a coarse level
with a handful of aggregates has rank at most that handful; on an expander-like graph (a
planted partition) the block solver's coarsest level has one row, and the fit ended at rank 1,
far above the optimum, with a tiny KKT residual (docs/decisions/rank-deficient-starts.md).

Three tools:

* :func:`numerical_rank` -- the number of singular values of V above ``RANK_RTOL`` times the
  largest, from the r x r Gram matrix (its eigenvalues are the squared singular values; the
  threshold RANK_RTOL**2 = 1e-10 is far above the Gram's rounding, eps * ||V||^2).
* :func:`complete_rank` -- a start of rank k < r gets seeded Gaussian rows in the r - k
  column directions it lacks, orthogonal (in R^r) to the ones it has, each direction with the
  mean energy of the start's own directions. It leaves V's kernel K = V V' as it was and adds
  a full-rank perturbation W W' of comparable size; a start of full rank is returned as is.
* :func:`descent_certificate` -- the convex problem over K = V V' (K PSD) is optimal at K iff
  S = grad_K f(K) = L + gamma * sum_p l'(t_p K_p) t_p (e_i e_j' + e_j e_i') / 2 is PSD and
  S V = 0. A stationary V of the factored problem has S V = 0 but not necessarily S >= 0. If
  V has a column direction q with V q = 0 (rank deficient) and u' S u < 0 for some u, then
  V + e u q' has kernel K + e^2 u u' and objective f(K) + e^2 u' S u + O(e^4): a descent
  direction that no row update can take. The smallest eigenvalue of S outside V's span
  (where any such u lies: S V = 0), estimated by Lanczos (ARPACK, smallest algebraic, with
  V's span shifted out of the way), gives such a u; any Ritz vector with a negative Rayleigh
  quotient is a proof, so an unconverged estimate can miss a trap but never invents one.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh

__all__ = [
    "numerical_rank",
    "complete_rank",
    "descent_certificate",
    "RANK_RTOL",
    "CERTIFICATE_TOL",
]

#: Singular values below this times the largest count as zero (numerical rank).
RANK_RTOL = 1e-5

#: A Rayleigh quotient u'Su below minus this (S as above; L's spectrum lies in [delta, 2 +
#: delta]) proves the rank-deficient V is not optimal.
CERTIFICATE_TOL = 1e-3

#: Added to S's spectrum for Lanczos: ARPACK's tolerance is relative to the Ritz value, and
#: the question (is the smallest curvature below -CERTIFICATE_TOL?) is absolute. Unshifted,
#: a smallest eigenvalue of 1e-4 asked for residuals of 1e-8 (docs/decisions/certificate.md).
SHIFT = 1.0


def _gram(V: np.ndarray) -> np.ndarray:
    V = np.asarray(V)
    G = V.T @ V if V.dtype == np.float64 else (V.T @ V).astype(np.float64)
    return (G + G.T) / 2.0


def _gram_split(V, rtol: float = RANK_RTOL):
    """(w, W, kept): the eigenpairs of V's Gram matrix (ascending) and which of them hold
    a direction of V (w above rtol^2 times the largest; none if V = 0)."""
    w, W = np.linalg.eigh(_gram(V))
    top = float(w[-1]) if w.size else 0.0
    kept = w > (rtol**2) * top if top > 0 else np.zeros(w.size, bool)
    return w, W, kept


def singular_values(V) -> np.ndarray:
    """The singular values of V (n x r), descending, from its Gram matrix."""
    w = np.linalg.eigvalsh(_gram(V))[::-1]
    return np.sqrt(np.maximum(w, 0.0))


def numerical_rank(V, rtol: float = RANK_RTOL) -> int:
    """Number of singular values of V above ``rtol`` times the largest (0 for V = 0)."""
    s = singular_values(V)
    if s.size == 0 or s[0] == 0.0:
        return 0
    return int(np.count_nonzero(s > rtol * s[0]))


def complete_rank(V: np.ndarray, seed, rtol: float = RANK_RTOL) -> tuple[np.ndarray, int]:
    """(V', k): V with the column directions it lacks filled by seeded Gaussian rows, and the
    number k of directions added (0: V had full rank and is returned unchanged).

    With G = V'V = Q diag(w) Q', the directions Q_0 with w below rtol^2 max(w) are empty;
    V' = V + sigma Z Q_0', Z (n x k) standard normal from ``seed``, sigma^2 = the mean of the
    nonempty w over n (each added direction carries the mean energy of the others; the random
    start's, 1/r per entry, if V = 0). V' keeps V's rows' components along Q's other columns
    exactly, so K' = V V' + sigma^2 Z Z'."""
    V = np.asarray(V)
    n, r = V.shape
    w, Q, kept = _gram_split(V, rtol)
    empty = ~kept
    k = int(np.count_nonzero(empty))
    if k == 0:
        return V, 0
    full = w[~empty]
    sigma = np.sqrt(float(np.mean(full)) / n) if full.size else 1.0 / np.sqrt(r)
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((n, k))
    out = np.array(V, dtype=np.float64, copy=True)
    out += (sigma * Z) @ Q[:, empty].T
    return out.astype(V.dtype, copy=False), k


def gradient_matrix(problem, V) -> sp.csr_matrix:
    """S = grad_K f at K = V V' (original order), sparse: L plus gamma l'(z_p) t_p / 2 at
    (i, j) and (j, i) of every pair p, z_p = t_p v_i'v_j. The hinge takes l' = -1 where
    z < 1 and 0 elsewhere (a subgradient); the linear loss -1 everywhere (its ball
    constraints are not part of S)."""
    c = problem.constraints
    V = np.asarray(V, dtype=np.float64)
    z = c.t * np.einsum("kr,kr->k", V[c.i], V[c.j])
    if problem.loss == "square":
        d = -2.0 * (1.0 - z)
    elif problem.loss == "squared_hinge":
        d = -2.0 * np.maximum(1.0 - z, 0.0)
    elif problem.loss == "hinge":
        d = -(z < 1.0).astype(np.float64)
    else:
        d = -np.ones_like(z)
    w = problem.gamma * d * c.t / 2.0
    n = problem.n_points
    P = sp.coo_matrix(
        (np.concatenate([w, w]), (np.concatenate([c.i, c.j]), np.concatenate([c.j, c.i]))),
        shape=(n, n),
    )
    return (problem.L.astype(np.float64) + P).tocsr()


def _significant_span(V, rtol: float = RANK_RTOL) -> np.ndarray:
    """An orthonormal basis (n x k) of V's column space, k = :func:`numerical_rank`: the left
    singular vectors of the singular values above ``rtol`` times the largest."""
    V = np.asarray(V, dtype=np.float64)
    w, W, keep = _gram_split(V, rtol)
    if not keep.any():
        return np.zeros((V.shape[0], 0))
    Q = (V @ W[:, keep]) / np.sqrt(w[keep])
    Q, _ = np.linalg.qr(Q)  # re-orthonormalise (the Gram route loses half the digits)
    return Q


def descent_certificate(problem, V, *, maxiter: int = 300, seed: int = 0):
    """(lam, u): the smallest Rayleigh quotient u'Su (u of unit norm, orthogonal to V's
    significant columns) that Lanczos found for S = :func:`gradient_matrix`, and u. lam < 0
    with V rank deficient proves V is not optimal (module docstring). ``maxiter``: Lanczos
    restarts' cap; an unconverged estimate is still an upper bound on the smallest
    eigenvalue on that complement.

    Lanczos runs on A = S + c Q Q' + SHIFT I (Q: an orthonormal basis of V's significant
    column space, c > ||S|| by Gershgorin), which is S + SHIFT I on the complement of V's span
    and pushes that span above S's spectrum; SHIFT makes ARPACK's relative tolerance
    (``CERTIFICATE_TOL / 100``) an absolute one. At a stationary V, S V = 0: without the
    shift V's k columns are k eigenvectors of eigenvalue 0 among L's clustered small
    eigenvalues, which Lanczos must resolve to the tolerance (thousands of products on a 10^5-point kNN graph, and no answer
    within the cap); a descent direction is orthogonal to them anyway (eigenvectors of a
    symmetric S for distinct eigenvalues), so nothing is lost (docs/decisions/certificate.md).
    """

    S = gradient_matrix(problem, V)
    n = S.shape[0]
    if n <= 200:
        w, U = np.linalg.eigh(S.toarray())
        return float(w[0]), U[:, 0]
    Q = _significant_span(V)
    c = 2.0 * float(abs(S).sum(axis=1).max()) + 1.0  # above every eigenvalue of S

    def matvec(x):
        x = np.asarray(x).reshape(-1)
        return S @ x + c * (Q @ (Q.T @ x)) + SHIFT * x

    A = LinearOperator(S.shape, matvec=matvec, dtype=np.float64)
    v0 = np.random.default_rng(seed).standard_normal(n)
    v0 -= Q @ (Q.T @ v0)
    try:
        w, U = eigsh(A, k=1, which="SA", tol=CERTIFICATE_TOL / 100.0, maxiter=maxiter, v0=v0)
    except ArpackNoConvergence as err:
        if err.eigenvalues.size == 0:
            return float("nan"), None
        w, U = err.eigenvalues, err.eigenvectors
    u = U[:, 0] / np.linalg.norm(U[:, 0])
    return float(u @ (S @ u)), u
