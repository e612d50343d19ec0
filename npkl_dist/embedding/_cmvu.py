"""Colored maximum variance unfolding (Song et al. 2008) by SimpleNPKL (simplenpkl-jmlr2011 §6.1).

With squared distances D_pq on the neighbour pairs N and a label kernel Y::

    min_K  -tr(H K H Y) + C/2 sum_{(p,q) in N} (D_pq - d_pq(K))^2
           s.t. K psd, K 1 = 0, ||K||_F^2 <= B

(the paper writes the slack as an equality tr(K T_pq) = D_pq - xi_pq with cost C/2 xi^2).
For centred K, tr(HKHY) = tr(K HYH): problem (D) of :mod:`._distance` with A0 = HYH, so
A(alpha) = HYH + sum alpha_pq T_pq and grad J = D - d(K) - alpha / C, the paper's (31). The
duals are free (equality constraints). HYH 1 = 0 and T_pq 1 = 0 make the kernel step's K
centred by itself; the constraint K 1 = 0 only states it (and removes the 11' direction that
neither the objective nor the distances see).
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from .._errors import ConvergenceWarning, ValidationError, fix, fmt_value
from ..linalg._blas import _OneBlasThread
from ._distance import DistanceProblem, check_distances, solve_distance_problem
from ._saddle import (
    EmbeddingResult,
    centre,
    check_count,
    check_positive,
    check_tol,
    coordinates,
)


def label_kernel(labels, n: int) -> np.ndarray:
    """Y from labels: classes (1-D) give Y_ij = [y_i == y_j]; a 2-D (n, c) array of real
    labels gives Y = y y' (c = 1: the paper's Y = yy')."""
    y = np.asarray(labels)
    if y.ndim not in (1, 2) or y.shape[0] != n:
        raise ValidationError(
            f"labels: expected shape ({n},) (classes) or ({n}, c) (real labels), got {y.shape}"
        )
    if y.ndim == 1:
        if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
            raise ValidationError("labels: holds NaN or inf; pass one class per point")
        classes, codes = np.unique(y, return_inverse=True)
        if classes.size < 2:
            raise ValidationError(
                f"labels: every point has the label {fmt_value(classes[0])}; colored MVU needs "
                f"at least two classes (else HYH = 0 and the embedding is 0)"
            )
        return (codes[:, None] == codes[None, :]).astype(np.float64)
    try:
        y = y.astype(np.float64)
    except (TypeError, ValueError):
        raise ValidationError(
            f"labels: a 2-D label array must be numeric, got dtype {y.dtype}"
        ) from None
    if not np.all(np.isfinite(y)):
        raise ValidationError("labels: holds NaN or inf; pass finite real labels")
    return y @ y.T


def embed_cmvu(
    distances,
    labels,
    *,
    dim: int = 2,
    C: float = 1.0,
    B: float | None = None,
    max_iter: int = 500,
    tol: float = 1e-10,
) -> EmbeddingResult:
    """Colored MVU (simplenpkl-jmlr2011 §6.1), exact, by the saddle-point iteration.

    Parameters
    ----------
    distances : sparse matrix, shape (n, n)
        Symmetric; its stored off-diagonal entries are the neighbour pairs N and their squared
        distances D_pq >= 0 (:func:`edge_distances` builds it from features and a graph).
    labels : array-like, shape (n,) or (n, c)
        Classes (Y_ij = [y_i == y_j]) or real labels (Y = y y').
    dim : int
        Columns of the returned coordinates, 1 <= dim <= n - 1.
    C : float
        Weight of the squared slack of the distance constraints (the paper: 1).
    B : float, optional
        Capacity ``tr(K^2) <= B``; default n (the paper's B = m N, m = 1).
    max_iter : int
        L-BFGS-B iterations on the dual, at most.
    tol : float
        Stop once the relative duality gap is <= tol; ``converged`` when <= sqrt(tol).

    Returns
    -------
    EmbeddingResult
        ``alpha`` has one entry per pair (row-major order of the upper triangle).

    Raises ``ValidationError`` on a bad argument; warns ``ConvergenceWarning`` when the
    relative duality gap is above sqrt(tol) at the end.
    """
    t0 = time.perf_counter()
    n, p, q, D = check_distances(distances)
    Y = label_kernel(labels, n)
    dim = check_count("dim", dim, 1, n - 1, "the embedding has at most n - 1 dimensions")
    C = check_positive("C", C, "the paper uses C = 1")
    B = float(n) if B is None else check_positive("B", B, f"the paper uses B = m n, e.g. {n}")
    max_iter = check_count("max_iter", max_iter, 1)
    tol = check_tol(tol)
    prob = DistanceProblem(centre(Y), p, q, D, C, B)
    with _OneBlasThread():  # n x n blocks: BLAS threads only contend (as SimpleNPKL's)
        out = solve_distance_problem(prob, np.zeros(p.size), max_iter, tol)
    return finish("cmvu", out, prob, dim, tol, t0)


def finish(method, out, prob, dim, tol, t0, outer_trace=(), extra_converged=True):
    """EmbeddingResult of a solved distance problem; the ConvergenceWarning if the gap is
    open."""
    K = out["K"]
    emb, w = coordinates(K, dim)
    P, J = out["objective"], out["dual"]
    scale = abs(P) + 1.0
    res = EmbeddingResult(
        embedding=emb,
        kernel=K,
        eigenvalues=w,
        objective=P,
        dual_objective=J,
        alpha=out["alpha"],
        iterations=out["iterations"],
        converged=bool(P - J <= np.sqrt(tol) * scale) and extra_converged,
        capacity_slack=out["slack"],
        method=method,
        B=prob.B,
        C=prob.C,
        dual_trace=out["dual_trace"],
        outer_trace=list(outer_trace),
        fit_seconds=time.perf_counter() - t0,
    )
    if P - J > np.sqrt(tol) * scale:
        hint = (
            f"the capacity tr(K^2) <= B is slack at the solution (tr(K^2) = "
            f"{float(np.sum(K * K)):.4g} < B = {prob.B:g}), where the dual has a kink; lower "
            f"{fix('B')} to about tr(K^2), where the solution is the same and the dual smooth"
            if out["slack"]
            else f"raise {fix('max_iter')}"
        )
        warnings.warn(
            f"{method}: relative duality gap {(P - J) / scale:.3g} > sqrt(tol)="
            f"{np.sqrt(tol):.3g}; {hint}",
            ConvergenceWarning,
            stacklevel=3,
        )
    return res
