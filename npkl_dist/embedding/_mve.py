"""Minimum volume embedding (Shaw & Jebara 2007) by SimpleNPKL (simplenpkl-jmlr2011 §6.2).

Outer iteration t: with v_1, ..., v_n the eigenvectors of K^t (descending eigenvalues) and
``K0 = sum_{i<=d} v_i v_i' - sum_{i>d} v_i v_i' = 2 P_d P_d' - I``, solve problem (D) of
:mod:`._distance` with A0 = H K0 H (for centred K, tr(K K0) = tr(K H K0 H))::

    K^{t+1} = argmin_K  -tr(K K0) + C/2 sum_{(p,q) in N} (D_pq - d_pq(K))^2
              s.t. K psd, K 1 = 0, ||K||_F^2 <= B

i.e. A(alpha) = H K0 H + sum alpha_pq T_pq, grad J = D - d(K) - alpha / C, the paper's
modification with MVU's constraints softened as in §6.1 (the paper's (32) keeps MVU's hard
equalities, but the A and grad J it gives are those of the soft form). The first inner problem
uses K0 = I unless ``K_init`` is given: it is (soft) MVU, max tr K. By Ky Fan's inequality the
MVE objective ``F(K) = sum_{i<=d} lambda_i - sum_{i>d} lambda_i - C/2 ||D - d(K)||^2`` never
decreases from one outer iteration to the next (each K^t is feasible for the next inner
problem, where it scores F(K^t)).
"""

from __future__ import annotations

import time

import numpy as np

from .._errors import ValidationError
from ..linalg._blas import _OneBlasThread
from ._cmvu import finish
from ._distance import DistanceProblem, check_distances, pair_distances, solve_distance_problem
from ._saddle import (
    centre,
    check_count,
    check_positive,
    check_tol,
)


def mve_target(K: np.ndarray, dim: int) -> np.ndarray:
    """H K0 H with K0 = 2 P_d P_d' - I from K's top-d eigenvectors."""
    w, Q = np.linalg.eigh(centre(K))
    P = Q[:, ::-1][:, :dim]
    return centre(2.0 * (P @ P.T) - np.eye(K.shape[0]))


def mve_objective(K, dim, p, q, D, C) -> float:
    """F(K) = sum_{i<=d} lambda_i(K) - sum_{i>d} lambda_i(K) - C/2 ||D - d(K)||^2."""
    w = np.linalg.eigvalsh(0.5 * (K + K.T))[::-1]
    r = D - pair_distances(K, p, q)
    return float(w[:dim].sum() - w[dim:].sum()) - 0.5 * C * float(r @ r)


def embed_mve(
    distances,
    *,
    dim: int = 2,
    C: float = 1.0,
    B: float | None = None,
    K_init=None,
    max_outer: int = 50,
    outer_tol: float = 1e-6,
    max_iter: int = 500,
    tol: float = 1e-10,
):
    """Minimum volume embedding (simplenpkl-jmlr2011 §6.2), each step exact.

    Parameters
    ----------
    distances : sparse matrix, shape (n, n)
        Symmetric; its stored off-diagonal entries are the neighbour pairs and their squared
        distances (:func:`edge_distances`).
    dim : int
        Target dimension d (the K0 of every outer step keeps d eigenvectors), 1 <= d <= n - 1.
    C, B : float
        Slack weight (the paper: 1) and capacity ``tr(K^2) <= B`` (default n).
    K_init : array-like, shape (n, n), optional
        Kernel whose eigenvectors give the first K0 (e.g. the centred Gram matrix of the
        features); default: the first step is MVU (K0 = I).
    max_outer : int
        Outer iterations (inner problems), at most.
    outer_tol : float
        Stop once ``||K^{t+1} - K^t||_F <= outer_tol ||K^{t+1}||_F``.
    max_iter, tol
        Each inner problem's dual iterations and relative-gap tolerance.

    Returns
    -------
    EmbeddingResult
        ``objective``, ``dual_objective`` and ``alpha`` of the last inner problem,
        ``iterations`` summed, ``outer_trace`` the MVE objective after each outer step;
        ``converged`` if every inner gap is within sqrt(tol) and the outer loop met outer_tol.

    Raises ``ValidationError`` on a bad argument; warns ``ConvergenceWarning`` when the last
    inner problem's gap is above sqrt(tol).
    """
    t0 = time.perf_counter()
    n, p, q, D = check_distances(distances)
    dim = check_count("dim", dim, 1, n - 1, "the embedding has at most n - 1 dimensions")
    C = check_positive("C", C, "the paper uses C = 1")
    B = float(n) if B is None else check_positive("B", B, f"the paper uses B = m n, e.g. {n}")
    max_outer = check_count("max_outer", max_outer, 1)
    if isinstance(outer_tol, bool) or not isinstance(outer_tol, (int, float)) or outer_tol < 0:
        raise ValidationError(
            f"outer_tol: expected a number >= 0, got {outer_tol!r}; pass e.g. outer_tol=1e-6"
        )
    max_iter = check_count("max_iter", max_iter, 1)
    tol = check_tol(tol)
    if K_init is None:
        A0 = centre(np.eye(n))
    else:
        K_init = np.asarray(K_init, dtype=np.float64)
        if K_init.shape != (n, n):
            raise ValidationError(
                f"K_init: expected shape ({n}, {n}) to match distances, got {K_init.shape}"
            )
        if not np.all(np.isfinite(K_init)) or np.abs(K_init - K_init.T).max() > 1e-9 * max(
            np.abs(K_init).max(), 1.0
        ):
            raise ValidationError(
                "K_init: not a finite symmetric matrix; pass e.g. the centred Gram matrix "
                "X @ X.T of the features, or None to start from MVU"
            )
        A0 = mve_target(K_init, dim)
    alpha = np.zeros(p.size)
    outer_trace, iterations, inner_ok, K_prev = [], 0, True, None
    outer_ok = False
    for _ in range(max_outer):
        prob = DistanceProblem(A0, p, q, D, C, B)
        with _OneBlasThread():  # n x n blocks: BLAS threads only contend
            out = solve_distance_problem(prob, alpha, max_iter, tol)
        K, alpha = out["K"], out["alpha"]
        iterations += out["iterations"]
        inner_ok &= out["objective"] - out["dual"] <= np.sqrt(tol) * (abs(out["objective"]) + 1)
        outer_trace.append(mve_objective(K, dim, p, q, D, C))
        if K_prev is not None and np.linalg.norm(K - K_prev) <= outer_tol * np.linalg.norm(K):
            outer_ok = True
            break
        K_prev = K
        A0 = mve_target(K, dim)
    out["iterations"] = iterations
    return finish("mve", out, prob, dim, tol, t0, outer_trace, inner_ok and outer_ok)
