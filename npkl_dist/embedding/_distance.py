"""The distance-preserving saddle point shared by colored MVU (§6.1) and MVE's inner problem
(§6.2): squared distances ``D_pq`` on the neighbour pairs N kept by a square penalty.

    min_K  -tr(A0 K) + C/2 sum_{(p,q) in N} (D_pq - d_pq(K))^2
           s.t. K psd, K 1 = 0, ||K||_F^2 <= B                                         (D)

Partial Lagrangian with free duals alpha (the slacks xi = D - d are equalities; their
minimiser is xi = alpha / C)::

    J(alpha) = -sqrt(B) ||A(alpha)_+||_F + alpha.D - ||alpha||^2 / (2C),
    A(alpha) = A0 + sum_pq alpha_pq T_pq,      grad J = D - d(K(alpha)) - alpha / C.

J is maximised by L-BFGS-B (free bounds), as SimpleNPKL's square loss (§4.4). From any
kernel K the duals ``alpha_K = C (D - d(K))`` are optimal when K is (the KKT conditions give
``A(alpha_K)_+ = gamma K``, gamma the capacity's multiplier), so ``J(alpha_K)`` certifies a
kernel. Where the capacity is slack at the optimum (gamma = 0: B above the tr(K^2) the
data ask for), ``A(alpha*)`` is negative semidefinite, J has a kink at its maximiser and the
kernel step returns 0 there; the kernel is then refined on (D) itself without the capacity
(:func:`refine`; O(n^3) per step, the small-graph path) and certified by ``J(alpha_K)``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy import optimize

from .._errors import ValidationError
from ..linalg._lbfgsb import minimize_box
from ._saddle import (
    check_square_symmetric,
    kernel_step,
    pair_distances,
    pair_laplacian,
)

#: L-BFGS-B memory of the dual maximiser (as SimpleNPKL's).
_LBFGS_MEMORY = 20

#: L-BFGS iterations of the slack-capacity refinement, at most.
_REFINE_MAX_ITER = 5_000

#: Every this many dual iterations, test whether the capacity is slack (as SimpleNPKL's).
_SLACK_CHECK = 10


class DistanceProblem:
    """Problem (D) on dense A0 (n, n) with A0 1 = 0, pairs (p, q) and targets D (m,)."""

    def __init__(self, A0, p, q, D, C, B):
        self.A0 = A0
        self.p, self.q, self.D = p, q, D
        self.C, self.B, self.sqB = C, B, np.sqrt(B)
        self.n = A0.shape[0]

    def A(self, alpha):
        return self.A0 + pair_laplacian(self.n, self.p, self.q, alpha)

    def primal(self, K) -> float:
        r = self.D - pair_distances(K, self.p, self.q)
        return -float(np.sum(self.A0 * K)) + 0.5 * self.C * float(r @ r)

    def step(self, alpha):
        """(K, J, grad J) at alpha: one kernel step."""
        K, _, norm = kernel_step(self.A(alpha), self.B)
        d = pair_distances(K, self.p, self.q)
        J = -self.sqB * norm + float(alpha @ self.D) - float(alpha @ alpha) / (2.0 * self.C)
        return K, J, self.D - d - alpha / self.C

    def dual_of(self, K):
        """The duals a kernel implies, alpha_K = C (D - d(K)), and J there."""
        a = self.C * (self.D - pair_distances(K, self.p, self.q))
        return a, self.step(a)[1]

    def capacity_slope(self, K) -> float:
        """d/ds P(s K) at s = 1: < 0 where the capacity binds."""
        d = pair_distances(K, self.p, self.q)
        return -float(np.sum(self.A0 * K)) - self.C * float((self.D - d) @ d)


def solve_distance_problem(prob: DistanceProblem, alpha0, max_iter: int, tol: float):
    """Maximise J from alpha0; refine where the capacity is slack or the gap stays open.

    Returns dict(K, alpha, objective, dual, iterations, slack, dual_trace).
    """
    best = {"J": -np.inf}
    trace = []
    last = {}

    def fun(a):
        K, J, g = prob.step(a)
        last.update(a=a.copy(), K=K, J=J)
        if J > best["J"]:
            best.update(J=J, a=a.copy(), K=K)
        return -J, -g

    def callback(a):
        trace.append(best["J"])
        P = prob.primal(best["K"])
        if P - best["J"] <= tol * (abs(P) + 1.0):
            raise StopIteration
        if (
            len(trace) > _SLACK_CHECK
            and len(trace) % _SLACK_CHECK == 0
            and trace[-1] - trace[-1 - _SLACK_CHECK] <= 1e-6 * (abs(P) + 1.0)
            and prob.capacity_slope(best["K"]) >= 0.0
        ):
            # J stalls while shrinking K would lower P: the kink of a slack capacity
            raise StopIteration

    m = prob.p.size
    free = np.full(m, np.inf)
    iterations = minimize_box(
        fun,
        np.asarray(alpha0, dtype=np.float64),
        -free,
        free,
        callback=callback,
        maxiter=max_iter,
        maxfun=2 * max_iter + 10,
        maxcor=_LBFGS_MEMORY,
    )
    K, alpha, J = best["K"], best["a"], best["J"]
    P = prob.primal(K)
    a_K, J_K = prob.dual_of(K)
    if J_K > J:
        alpha, J = a_K, J_K
    slack = False
    if P - J > tol * (abs(P) + 1.0):
        # the gap is open: try the interior optimum; where it lies outside the ball the
        # capacity binds and the dual's kernel stands
        K_r, inside = refine(prob, K, tol)
        P_r = prob.primal(K_r)
        if inside and P_r < P:
            K, P, slack = K_r, P_r, True
            a_K, J_K = prob.dual_of(K)
            if J_K > J:
                alpha, J = a_K, J_K
    return {
        "K": K,
        "alpha": alpha,
        "objective": P,
        "dual": J,
        "iterations": int(iterations),
        "slack": bool(slack),
        "dual_trace": trace,
    }


def refine(prob: DistanceProblem, K0, tol: float):
    """Minimise (D) without the (slack) capacity from K0: K = Q U U' Q' with Q an orthonormal
    basis of the centred subspace and U square (Burer-Monteiro at full rank: no rank
    restriction, so every local minimum of this convex problem's lift is global), by
    L-BFGS; the gradient is ``2 Q' grad P(K) Q U`` with ``grad P(K) = -A(alpha_K)``.
    Returns (K, whether ||K||_F^2 <= B): inside the ball, K is the optimum of (D) (to the
    certificate J(alpha_K) the caller checks); outside, the capacity binds.

    FISTA on K itself (projected gradient) was the first version: on the karate club with
    C = 100 it needed 10^4 steps (11 s) for a 3e-6 relative gap; this takes 0.1-0.3 s.
    """
    n = prob.n
    Q = np.linalg.qr(np.eye(n)[:, : n - 1] - 1.0 / n, mode="reduced")[0]  # span = 1-perp
    w, E = np.linalg.eigh(Q.T @ K0 @ Q)
    U0 = E * np.sqrt(np.maximum(w, 0.0))
    scale = abs(prob.primal(K0)) + 1.0

    def fun(u):
        U = u.reshape(n - 1, n - 1)
        QU = Q @ U
        K = QU @ QU.T
        a = prob.C * (prob.D - pair_distances(K, prob.p, prob.q))
        grad = -2.0 * (Q.T @ (prob.A(a) @ QU))
        return prob.primal(K) / scale, grad.ravel() / scale

    out = optimize.minimize(
        fun,
        U0.ravel(),
        jac=True,
        method="L-BFGS-B",
        options={
            "maxiter": _REFINE_MAX_ITER,
            "maxfun": 2 * _REFINE_MAX_ITER,
            "ftol": 0.0,
            "gtol": tol * 1e-3,
            "maxcor": _LBFGS_MEMORY,
        },
    )
    QU = Q @ out.x.reshape(n - 1, n - 1)
    K = QU @ QU.T
    return K, float(np.sum(K * K)) <= prob.B


# ------------------------------------------------------------------------- shared inputs


def check_distances(distances):
    """The pairs N (i < j) and targets D of a symmetric sparse matrix of squared distances.

    Returns (n, p, q, D) with p < q, pairs in row-major order.
    """
    S = check_square_symmetric("distances", distances, "squared distances")
    if S.data.size and S.data.min() < 0:
        raise ValidationError(
            f"distances: holds a negative squared distance ({S.data.min():g}); pass squared "
            f"distances >= 0 on the neighbour pairs"
        )
    U = sp.triu(S, k=1, format="coo")
    if U.nnz == 0:
        raise ValidationError(
            "distances: stores no pair; pass the squared distances of the neighbour pairs, "
            "e.g. edge_distances(X, graph)"
        )
    order = np.lexsort((U.col, U.row))
    return (
        S.shape[0],
        U.row[order].astype(np.int64),
        U.col[order].astype(np.int64),
        U.data[order].astype(np.float64),
    )


def edge_distances(X, W) -> sp.csr_matrix:
    """Squared Euclidean distances ``||x_i - x_j||^2`` of the rows of X on W's edges.

    Parameters
    ----------
    X : array-like, shape (n, n_features)
    W : sparse matrix or array-like, shape (n, n)
        Symmetric neighbour graph (e.g. ``knn_graph(X, k).S``); only its pattern is read.

    Returns
    -------
    scipy.sparse.csr_matrix, shape (n, n)
        W's pattern with the squared distances (explicit zeros for coincident points): the
        ``distances`` argument of :func:`embed_cmvu` and :func:`embed_mve`.
    """
    X = np.asarray(X, dtype=np.float64)
    S = check_square_symmetric("W", W, "neighbour weights")
    if X.ndim != 2 or X.shape[0] != S.shape[0]:
        raise ValidationError(
            f"X: expected shape ({S.shape[0]}, n_features) to match W, got {X.shape}"
        )
    if not np.all(np.isfinite(X)):
        raise ValidationError("X: holds NaN or inf; pass finite features")
    rows = np.repeat(np.arange(S.shape[0]), np.diff(S.indptr))
    d = np.einsum("kf,kf->k", X[rows] - X[S.indices], X[rows] - X[S.indices])
    return sp.csr_matrix((d, S.indices.copy(), S.indptr.copy()), shape=S.shape)
