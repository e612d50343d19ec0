"""Structure preserving embedding (Shaw & Jebara 2009) by SimpleNPKL (simplenpkl-jmlr2011 §6.3).

With connectivity W (symmetric, >= 0, zero diagonal), neighbour sets N_i = {j : W_ij > 0}
and one shared slack xi::

    min_{K, xi}  -tr(W K) + C xi
    s.t.  d_ij(K) >= d_ik(K) - xi   for all i, k in N_i, j not in N_i, j != i     (triplets)
          xi >= 0,  K psd,  K 1 = 0,  ||K||_F^2 <= B                                 (S)

(every non-neighbour of i at least as far from i as its farthest neighbour, up to xi).
Duals alpha_ijk >= 0 for the triplets and mu >= 0 for xi >= 0; stationarity in xi gives
``sum alpha + mu = C``, so the dual set is the capped simplex {alpha >= 0, sum alpha <= C}::

    J(alpha) = min_K tr((-W + sum alpha_ijk (T_ik - T_ij)) K)
             = -sqrt(B) ||A(alpha)_+||_F,   A(alpha) = H W H - sum alpha_ijk (T_ik - T_ij),
    grad_ijk J = tr((T_ik - T_ij) K(alpha)) = d_ik(K) - d_ij(K).

W's centring H W H is what the constraint K 1 = 0 (Shaw & Jebara's tr(K 11') = 0) makes of
W; the paper's §6.3 drops it, and without it the optimum puts every point at one spot far from
the origin (K = c 11': tr(K W) = c sum W, every distance 0). The objective is positively
homogeneous in (K, xi), so where the optimum is negative the capacity binds and K* is unique
(K*(B) = sqrt(B) K*(1)). J is maximised by Alg. 1's projected gradient ascent with Nesterov's
momentum, function-value restarts and a backtracked step (the projection is onto the capped
simplex, not a box, so L-BFGS-B does not apply).
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from .._errors import ConvergenceWarning, ValidationError, fix
from ..linalg._blas import _OneBlasThread
from ._saddle import (
    EmbeddingResult,
    ascend_capped_simplex,
    centre,
    check_count,
    check_positive,
    check_square_symmetric,
    check_tol,
    coordinates,
    kernel_step,
    pair_laplacian,
)

#: The exact path keeps every triplet: at most this many (issue 77's item 2 samples them).
MAX_TRIPLETS = 2_000_000


def spe_triplets(W) -> np.ndarray:
    """All SPE triplets (i, j, k) of W's pattern: k in N_i, j not in N_i, j != i.

    Returns
    -------
    ndarray, shape (m, 3), int64
        Rows (i, j, k), i ascending, then j, then k.
    """
    S = check_square_symmetric("W", W, "connectivity weights")
    return _triplets(S)


def _triplets(S) -> np.ndarray:
    n = S.shape[0]
    counts = np.diff(S.indptr)
    total = int(np.sum(counts * (n - 1 - counts)))
    if total > MAX_TRIPLETS:
        raise ValidationError(
            f"W: the exact SPE has {total} triplets on these {n} nodes (more than "
            f"MAX_TRIPLETS = {MAX_TRIPLETS}); this is the small-graph path, embed a smaller "
            f"graph or subgraph"
        )
    rows = []
    for i in range(n):  # set-up of the small-graph path: one vectorised block per node
        nb = S.indices[S.indptr[i] : S.indptr[i + 1]]
        far = np.ones(n, dtype=bool)
        far[nb] = False
        far[i] = False
        js = np.flatnonzero(far)
        if nb.size == 0 or js.size == 0:
            continue
        jj, kk = np.meshgrid(js, nb, indexing="ij")
        rows.append(np.column_stack([np.full(jj.size, i), jj.ravel(), kk.ravel()]))
    if not rows:
        return np.zeros((0, 3), dtype=np.int64)
    return np.concatenate(rows).astype(np.int64)


class _SPEDual:
    def __init__(self, S, triplets, C, B):
        n = S.shape[0]
        self.n, self.C, self.B, self.sqB = n, C, B, np.sqrt(B)
        self.A0 = centre(S.toarray())
        self.W = S
        self.ti, self.tj, self.tk = triplets.T
        self.p = np.concatenate([self.ti, self.ti])
        self.q = np.concatenate([self.tk, self.tj])

    def A(self, alpha):
        return self.A0 + pair_laplacian(self.n, self.p, self.q, np.concatenate([-alpha, alpha]))

    def violations(self, K):
        """d_ik - d_ij per triplet."""
        dg = np.diag(K)
        Dm = dg[:, None] + dg[None, :] - 2.0 * K
        return Dm[self.ti, self.tk] - Dm[self.ti, self.tj]

    def step(self, alpha):
        K, _, norm = kernel_step(self.A(alpha), self.B)
        return K, -self.sqB * norm, self.violations(K)

    def primal(self, K, v=None) -> float:
        v = self.violations(K) if v is None else v
        xi = max(float(v.max()), 0.0) if v.size else 0.0
        return -float(np.sum(self.A0 * K)) + self.C * xi


def _maximise(dual: _SPEDual, max_iter: int, tol: float):
    """The ascent of J over the capped simplex from alpha = 0 (``ascend_capped_simplex``)."""
    return ascend_capped_simplex(
        dual.step, dual.primal, np.zeros(dual.ti.size), dual.C, max_iter, tol
    )


def embed_spe(
    W,
    *,
    dim: int = 2,
    C: float = 1.0,
    B: float | None = None,
    max_iter: int = 2000,
    tol: float = 1e-8,
) -> EmbeddingResult:
    """Structure preserving embedding of a graph (simplenpkl-jmlr2011 §6.3), exact.

    Parameters
    ----------
    W : sparse matrix or array-like, shape (n, n)
        Symmetric connectivity, entries >= 0, zero diagonal, n >= 3; its pattern gives the
        neighbour sets N_i, its values the weights of tr(K W).
    dim : int
        Columns of the returned coordinates, 1 <= dim <= n - 1.
    C : float
        Weight of the shared slack xi (the paper's experiments: 1).
    B : float, optional
        Capacity ``tr(K^2) <= B``; default n (the paper's B = m N with m = 1). K scales as
        sqrt(B) (the problem is homogeneous), so B sets the embedding's scale only.
    max_iter : int
        Dual iterations, at most.
    tol : float
        Stop once the relative duality gap is <= tol; ``converged`` when <= sqrt(tol).

    Returns
    -------
    EmbeddingResult
        ``alpha`` has one entry per row of :func:`spe_triplets` (W).

    Raises ``ValidationError`` on a bad argument (W not symmetric, negative, non-finite, with
    self-loops, or with more than ``MAX_TRIPLETS`` triplets); warns ``ConvergenceWarning``
    when the relative duality gap is above sqrt(tol) at the end.
    """
    t0 = time.perf_counter()
    S = check_square_symmetric("W", W, "connectivity weights")
    if S.data.size and S.data.min() < 0:
        raise ValidationError(
            f"W: holds a negative weight ({S.data.min():g}); SPE's connectivity is >= 0 "
            f"(0/1 for an unweighted graph)"
        )
    if S.nnz == 0:
        raise ValidationError("W: has no edge; pass the graph's adjacency matrix")
    n = S.shape[0]
    dim = check_count("dim", dim, 1, n - 1, "the embedding has at most n - 1 dimensions")
    C = check_positive("C", C, "the paper uses C = 1")
    B = float(n) if B is None else check_positive("B", B, f"the paper uses B = m n, e.g. {n}")
    max_iter = check_count("max_iter", max_iter, 1)
    tol = check_tol(tol)
    dual = _SPEDual(S, _triplets(S), C, B)
    with _OneBlasThread():  # n x n blocks: BLAS threads only contend (as SimpleNPKL's)
        (J, alpha, K, _), P, its, trace = _maximise(dual, max_iter, tol)
    K = centre(K)
    emb, w = coordinates(K, dim)
    scale = abs(P) + 1.0
    res = EmbeddingResult(
        embedding=emb,
        kernel=K,
        eigenvalues=w,
        objective=P,
        dual_objective=J,
        alpha=alpha,
        iterations=its,
        converged=bool(P - J <= np.sqrt(tol) * scale),
        capacity_slack=bool(P >= 0.0),
        method="spe",
        B=B,
        C=C,
        dual_trace=trace,
        fit_seconds=time.perf_counter() - t0,
    )
    if not res.converged:
        warnings.warn(
            f"spe: relative duality gap {(P - J) / scale:.3g} > sqrt(tol)={np.sqrt(tol):.3g} "
            f"after {its} iteration(s); raise {fix('max_iter')}",
            ConvergenceWarning,
            stacklevel=2,
        )
    return res
